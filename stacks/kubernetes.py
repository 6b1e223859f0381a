"""``cdk deploy``'s translation of the rollout (:mod:`k8s.rollout`): a construct per step and a CloudFormation
dependency per edge; the order is the rollout's, decided nowhere here.

- :class:`k8s.rollout.ApplyChart`: ``cluster.add_cdk8s_chart`` (a ``Custom::AWSCDK-EKS-KubernetesResource``, applied
  with ``kubectl apply``), or, for a chart whose objects outlive it, a manifest CloudFormation keeps;
- :class:`k8s.rollout.InstallRelease`: ``cluster.add_helm_chart`` (Karpenter's release is made by
  :class:`aws_constructs.karpenter.KarpenterController` with the AWS side it needs, from the same release);
- :class:`k8s.rollout.WaitEstablished`, :class:`k8s.rollout.WaitAvailable`, :class:`k8s.rollout.WaitValue`: a
  ``KubernetesObjectValue`` that polls the object until a JSONPath yields a value;
- :class:`k8s.rollout.Nodes`: the system node group(s), which the controllers' waits follow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from aws_cdk import CfnResource, Duration, RemovalPolicy
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from k8s.images import with_images
from k8s.rollout import (
    NODES,
    ApplyChart,
    InstallRelease,
    Nodes,
    Rollout,
    Step,
    WaitAvailable,
    WaitEstablished,
    WaitValue,
)

if TYPE_CHECKING:
    import cdk8s

CRD_ESTABLISHED_JSONPATH = '.status.conditions[?(@.reason=="InitialNamesAccepted")].status'
"""Yields "True" once the CRD is Established and nothing before. The kubectl handler returns as soon as its
JSONPath yields anything (aws-cdk-lib 2.275 custom-resource-handlers aws-eks-v2/kubectl-handler/get
``wait_for_output``), so ``[?(@.type=="Established")].status`` would return on "False" too, and client-go's
JSONPath filters take one comparison (no ``&&``). The reason ``InitialNamesAccepted`` is set only with
status True: k8s.io/apiextensions-apiserver pkg/controller/establish/establishing_controller.go
(``Established``, ``ConditionTrue``, "InitialNamesAccepted"); the naming controller writes the condition
as False with reason "Installing" or "NotAccepted" before that and keeps it once True."""

ROLLED_OUT_JSONPATH = '.status.conditions[?(@.reason=="NewReplicaSetAvailable")].status'
"""Yields a value once the Deployment's current pod template has rolled out: the deployment controller sets the
Progressing condition's reason to NewReplicaSetAvailable when every replica of the newest ReplicaSet is available and
no old one is left, and to ReplicaSetUpdated (or NewReplicaSetCreated) while a rollout runs (k8s.io/kubernetes
pkg/controller/deployment/util/deployment_util.go ``NewRSAvailableReason``; sync.go ``syncRolloutStatus``). An
available replica alone would also be an old pod's, during the rollout of a changed configuration."""
AVAILABLE_TIMEOUT_MINUTES = 10
"""How long a controller may take to become available: its pods wait for the system nodes it runs on."""
WAIT_TIMEOUT_MINUTES = 5


class RolloutConstructs:
    """The constructs of ``rollout`` on ``cluster``, made by ``make`` (in any order) and linked by ``link``.

    ``charts``: the rollout's charts by id; ``nodes``: the node groups the controllers run on; ``made``: constructs
    made elsewhere for a step (Karpenter's release), by step id; ``chart_scope``: the nested stack a chart's manifest
    goes in (:class:`stacks.nesting.NestedParts`), or None for the cluster's own; ``images``: the image each rendered
    image is pulled as (a pull through cache's, :meth:`efa_stack.planning.image_cache.ImageCachePlan.cached`), or
    None to apply the images as rendered.
    """

    def __init__(self, stack: Construct, cluster: eks.Cluster, rollout: Rollout, charts: Mapping[str, cdk8s.Chart],
                 nodes: Sequence[Construct], made: Mapping[str, Construct] = {},
                 chart_scope: Callable[[str], Construct | None] | None = None,
                 images: Callable[[str], str] | None = None) -> None:
        self.stack = stack
        self.chart_scope = chart_scope or (lambda _chart: None)
        self.images = images
        self.cached: list[Construct] = []
        """The manifests whose images :attr:`images` changed."""
        self.cluster = cluster
        self.rollout = rollout
        self.charts = charts
        self.constructs: dict[str, list[Construct]] = {NODES: list(nodes)}
        self.constructs.update({k: [v] for k, v in made.items()})

    def __getitem__(self, step_id: str) -> Construct:
        (construct,) = self.constructs[step_id]
        return construct

    def make(self, steps: Iterable[Step]) -> None:
        """A construct for each of ``steps`` not made yet."""
        for step in steps:
            if step.id not in self.constructs:
                self.constructs[step.id] = [self._construct(step)]

    def link(self) -> None:
        """A dependency for every edge of the rollout (every step's construct made)."""
        for step in self.rollout.steps:
            if isinstance(step, Nodes):
                continue
            construct = self[step.id]
            for before in step.after:
                construct.node.add_dependency(*self.constructs[before])

    def _construct(self, step: Step) -> Construct:
        if isinstance(step, ApplyChart):
            return self._manifest(step)
        if isinstance(step, InstallRelease):
            return self._release(step)
        if isinstance(step, WaitEstablished):
            return wait_until_established(self.stack, self.cluster, step.construct_id, step.crd)
        if isinstance(step, WaitAvailable):
            wait = self._wait(step.construct_id, "deployment", step.deployment, ROLLED_OUT_JSONPATH,
                              namespace=step.namespace, minutes=AVAILABLE_TIMEOUT_MINUTES)
            if step.revision:
                # A new revision changes the resource, so CloudFormation updates it and the handler waits again (it
                # polls on Update as on Create, and reads only its own properties: aws-cdk-lib 2.275
                # custom-resource-handlers aws-eks-v2/kubectl-handler/get ``get_handler``).
                resource = wait.node.default_child  # a CustomResource, whose own default child is the CfnResource
                assert resource is not None
                cfn = resource.node.default_child
                assert isinstance(cfn, CfnResource)
                cfn.add_property_override("Revision", step.revision)
            return wait
        if isinstance(step, WaitValue):
            return self._wait(step.construct_id, step.object_type, step.name, step.json_path)
        raise TypeError(f"no construct for rollout step {step.id} ({type(step).__name__})")

    def _manifest(self, step: ApplyChart) -> Construct:
        """The chart's manifest: a ``KubernetesManifest`` under the cluster with the chart's id (what
        ``add_cdk8s_chart`` makes, so the same logical id), its images as :attr:`images` says.

        A chart whose objects outlive it is kept by CloudFormation when the chart leaves the template
        (``RemovalPolicy.RETAIN``: no Delete event, so the kubectl handler never runs ``kubectl delete``), and applied
        over the kept objects when the chart comes back (``overwrite``: ``kubectl apply``, not ``kubectl create``,
        on Create; aws-cdk-lib 2.275 aws-eks-v2 KubernetesManifestProps.overwrite). docs/design/training.md. Only such
        a chart moves into a nested stack (:mod:`stacks.nesting`): the cluster stack keeps the old manifest when it
        leaves, and the nested stack's applies over the same objects."""
        objects = self.charts[step.chart].to_json()
        cached = False
        if self.images is not None:
            rewritten = with_images(objects, self.images)
            cached, objects = rewritten != objects, rewritten
        nested = self.chart_scope(step.chart)
        if not step.retain:
            if nested is not None:
                raise ValueError(f"chart {step.chart} is deleted with its manifest and cannot move into a nested stack")
            manifest = eks.KubernetesManifest(self.cluster, step.construct_id, cluster=self.cluster, manifest=objects)
        else:
            manifest = eks.KubernetesManifest(
                nested or self.cluster, step.construct_id, cluster=self.cluster, manifest=objects,
                overwrite=True, removal_policy=RemovalPolicy.RETAIN,
            )
        if cached:
            self.cached.append(manifest)
        return manifest

    def _release(self, step: InstallRelease) -> Construct:
        """The release, installed without ``helm --wait`` (its pods need the system nodes, which are still
        launching: the controller's availability is a wait of its own, after them). A release whose chart holds
        CRDs as templates stays when it leaves the template (``helm uninstall`` would delete the CRDs and every
        object of their kinds: docs/design/training.md, "Keeping the CRDs")."""
        release = step.release
        assert release is not None
        return self.cluster.add_helm_chart(
            step.construct_id, chart=release.chart, repository=release.repository, version=release.version,
            release=release.name, namespace=release.namespace, create_namespace=True, values=dict(release.values),
            wait=False, removal_policy=RemovalPolicy.RETAIN if release.retain else RemovalPolicy.DESTROY,
        )

    def _wait(self, id: str, object_type: str, name: str, json_path: str, *, namespace: str | None = None,
              minutes: int = WAIT_TIMEOUT_MINUTES) -> eks.KubernetesObjectValue:
        return object_value_wait(self.stack, self.cluster, id, object_type, name, json_path, namespace=namespace,
                                 minutes=minutes)


def object_value_wait(scope: Construct, cluster: eks.ICluster, id: str, object_type: str, name: str, json_path: str,
                      *, namespace: str | None = None, minutes: int = WAIT_TIMEOUT_MINUTES) -> eks.KubernetesObjectValue:
    """A resource that completes once ``json_path`` of the object yields a value. The kubectl handler's ``get`` polls
    ``kubectl get`` every 10 s until the JSONPath yields a value, up to the timeout (aws-cdk-lib 2.275
    custom-resource-handlers aws-eks-v2/kubectl-handler/get), and returns the value as the custom resource's data
    (CloudFormation caps a response at 4,096 bytes; a webhook's CA bundle is about 1.6 KB)."""
    return eks.KubernetesObjectValue(
        scope, id, cluster=cluster, object_type=object_type, object_name=name, json_path=json_path,
        timeout=Duration.minutes(minutes), **({"object_namespace": namespace} if namespace else {}),
    )


def wait_until_established(scope: Construct, cluster: eks.ICluster, id: str, crd: str) -> eks.KubernetesObjectValue:
    """A resource that completes once CRD ``crd`` is Established (:data:`CRD_ESTABLISHED_JSONPATH`)."""
    return object_value_wait(scope, cluster, id, "customresourcedefinition", crd, CRD_ESTABLISHED_JSONPATH)


def steps_of(rollout: Rollout, component: str) -> list[Step]:
    """The steps of one component: its chart or release and the waits for its CRDs and its controller."""
    out = []
    for step in rollout.steps:
        creator = step.after[0] if isinstance(step, WaitEstablished) else None
        if getattr(step, "component", None) == component or getattr(step, "chart", None) == component or (
            creator is not None and creator.split("/", 1)[1] == component
        ):
            out.append(step)
    return out
