"""The rollout: one typed step graph that puts a plan's Kubernetes side on a cluster.

:func:`plan_rollout` computes it once, from the plan and its charts (:func:`k8s.charts.build_charts`) and the
component table (:mod:`k8s.components`). Each step is one thing to do or wait for; ``after`` names the steps it
follows. Three readers translate it and decide nothing about the order themselves:

- ``cdk deploy`` (stacks/kubernetes.py): a construct per step (a manifest, a Helm release, a
  ``KubernetesObjectValue`` wait) and a CloudFormation dependency per edge;
- ``apply.sh`` (k8s/dist.py): shell commands in an order that realises every edge (:meth:`Rollout.order`);
- ``efa-stack rehearse`` (efa_stack/rehearsal/): the same order against a local control plane.

The rules that make the edges, for every component:

1. Each chart is applied by an :class:`ApplyChart` step, after the charts it declares as needs when it is built
   (cdk8s ``add_dependency`` in k8s/charts.py) and the components its entry names in ``after``.
2. A CRD gets a :class:`WaitEstablished` step (after the step that creates it) when objects of its kind are
   applied by a later step, or a controller or a release needs it served; the step that applies objects of that
   kind follows it (the API server serves a kind only once its CRD is Established).
3. A controller (:class:`k8s.components.ControllerWait`) gets a :class:`WaitAvailable` step, after the step that
   creates its Deployment, the nodes it runs on (:class:`Nodes`) and the CRDs it needs; the charts it serves
   (admits or finalizes) follow that wait, or the wait for its webhook CA (:class:`WaitValue`) where it has one.
4. A Helm release is installed by an :class:`InstallRelease` step, after the CRDs its entry needs Established.

Deletion runs the graph backwards (CloudFormation deletes a resource before those it depends on), so an object
whose finalizers a controller clears is deleted while that controller still runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import cdk8s

from efa_stack import contract
from efa_stack.planning.plan import ClusterPlan
from k8s.components import (
    AWS_DRANET,
    BY_ID,
    COMPONENTS,
    KARPENTER,
    KUBEFLOW_TRAINER,
    NEURON_DRA,
    NODE_FEATURE_DISCOVERY,
    NVIDIA_DRA_DRIVER,
    ControllerWait,
)

NODES = "nodes"
"""The id of the :class:`Nodes` step: the node groups the controllers run on."""

ESTABLISHED_WAIT_IDS: dict[str, str] = {
    contract.MPIJOB_CRD_NAME: "CrdEstablished",
    contract.PYTORCHJOB_CRD_NAME: "PyTorchJobCrdEstablished",
    contract.TRAINJOB_CRD_NAME: "TrainJobCrdEstablished",
}
"""Construct ids of CRD waits that predate the naming rule of :func:`established_wait_id` (kept: a new id would
replace the wait's resource)."""

_CRD_WAIT_PREFIX = {
    contract.KUEUE_GROUP: "Kueue",
    contract.KARPENTER_GROUP: "Karpenter",
    contract.KARPENTER_AWS_GROUP: "Karpenter",
    contract.TRAINER_GROUP: "Trainer",
    contract.COMPUTE_DOMAIN_GROUP: "NvidiaDra",
}


def established_wait_id(crd: str) -> str:
    """The construct id of the wait until ``crd`` is Established: ``KueueCrdEstablishedWorkloads`` (the group's
    short name, then the plural), or a kept id of :data:`ESTABLISHED_WAIT_IDS`."""
    if crd in ESTABLISHED_WAIT_IDS:
        return ESTABLISHED_WAIT_IDS[crd]
    plural, _, group = crd.partition(".")
    return f"{_CRD_WAIT_PREFIX.get(group, '')}CrdEstablished{plural.capitalize()}"


# --- steps ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One step of the rollout. ``id`` is unique in the rollout; ``construct_id`` is the id ``cdk deploy`` gives its
    construct (a contract: a new id replaces the resource); ``after``: the ids of the steps it follows."""

    id: str
    construct_id: str
    after: tuple[str, ...] = ()

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Nodes(Step):
    """The nodes the controllers run on exist (the system node group). Nothing to do for ``apply.sh``, which runs
    against a cluster that has them; ``cdk deploy`` waits for the node groups; the rehearsal creates them."""

    def describe(self) -> str:
        return "the system nodes are up"


@dataclass(frozen=True)
class ApplyChart(Step):
    """Apply the objects of chart ``chart`` (``dist/NN-<chart>.yaml``).

    retain: the objects outlive the chart (``cdk deploy`` keeps them when the chart leaves the template).
    retry_admission: a webhook may refuse the objects for a while after what they need exists (the Trainer's
    TrainJob webhook reads the runtime through its manager's cache): ``apply.sh`` tries again.
    """

    chart: str = ""
    retain: bool = False
    retry_admission: bool = False

    def describe(self) -> str:
        return f"apply chart {self.chart}" + (" (kept when removed)" if self.retain else "")


@dataclass(frozen=True)
class HelmRelease:
    """A Helm release: what ``cdk deploy`` passes to ``add_helm_chart`` and ``apply.sh`` to ``helm upgrade
    --install``. ``repository`` is the chart's OCI reference; ``crds`` the CRDs the release installs itself."""

    name: str
    chart: str
    repository: str
    version: str
    namespace: str
    values: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    skip_crds: bool = False
    crds: tuple[str, ...] = ()
    retain: bool = False
    """The release stays when it leaves the spec (a chart that holds CRDs as templates: ``helm uninstall`` would
    delete them and every object of their kinds)."""
    controller: bool = True
    """The release runs the controller its component's :class:`k8s.components.ControllerWait` waits for (False: its
    values leave that Deployment out, so the rollout has no wait for it)."""


@dataclass(frozen=True)
class InstallRelease(Step):
    """Install Helm release ``release`` (its controller's availability is a :class:`WaitAvailable` of its own)."""

    component: str = ""
    release: HelmRelease | None = None

    def describe(self) -> str:
        assert self.release is not None
        return f"install Helm release {self.release.name} ({self.release.repository} {self.release.version})"


@dataclass(frozen=True)
class WaitEstablished(Step):
    """Wait until CRD ``crd`` is Established: its kind is served from then on."""

    crd: str = ""

    def describe(self) -> str:
        return f"wait until CRD {self.crd} is Established"


@dataclass(frozen=True)
class WaitAvailable(Step):
    """Wait until Deployment ``namespace/deployment`` has an available replica (controller ``component``)."""

    component: str = ""
    deployment: str = ""
    namespace: str = ""
    revision: str = ""
    """A digest of what the controller's pods are made from (the Deployment's pod template, or the release's chart
    version and values): a new one means new pods, which the wait must see rolled out."""

    def describe(self) -> str:
        return f"wait until deployment {self.namespace}/{self.deployment} has rolled out"


@dataclass(frozen=True)
class WaitValue(Step):
    """Wait until ``json_path`` of cluster-scoped object ``object_type/name`` yields a value."""

    component: str = ""
    object_type: str = ""
    name: str = ""
    json_path: str = ""

    def describe(self) -> str:
        return f"wait until {self.object_type}/{self.name} has {self.json_path}"


_S = TypeVar("_S", bound=Step)


# --- the graph --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rollout:
    """The steps, in the order ``cdk deploy`` creates their constructs (a topological order), and the objects of
    each chart as rendered (chart id -> objects, in the chart's order)."""

    steps: tuple[Step, ...]
    objects: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        ids = [s.id for s in self.steps]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate rollout step ids: {sorted(i for i in ids if ids.count(i) > 1)}")
        seen: set[str] = set()
        for s in self.steps:
            missing = [a for a in s.after if a not in seen]
            if missing:
                raise ValueError(f"rollout step {s.id} follows {missing}, which do not come before it")
            seen.add(s.id)

    def __getitem__(self, step_id: str) -> Step:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

    def __contains__(self, step_id: object) -> bool:
        return any(s.id == step_id for s in self.steps)

    def of_type(self, kind: type[_S]) -> list[_S]:
        return [s for s in self.steps if isinstance(s, kind)]

    def apply_step(self, chart_id: str) -> ApplyChart:
        step = self[apply_id(chart_id)]
        assert isinstance(step, ApplyChart)
        return step

    def ancestors(self, step_id: str) -> set[str]:
        """Every step ``step_id`` follows, directly or through others."""
        out: set[str] = set()
        todo = list(self[step_id].after)
        while todo:
            s = todo.pop()
            if s not in out:
                out.add(s)
                todo.extend(self[s].after)
        return out

    def order(self, key: Callable[[Step], Any] | None = None) -> list[Step]:
        """A topological order: of the steps whose predecessors are done, always the one of lowest ``key`` (default
        :func:`default_rank`), then of lowest position in ``steps`` (``apply.sh``, the rehearsal). Any
        topological order realises the graph; the key only decides among steps that could go either way."""
        rank = key or default_rank
        position = {s.id: i for i, s in enumerate(self.steps)}
        done: set[str] = set()
        out: list[Step] = []
        pending = list(self.steps)
        while pending:
            ready = [s for s in pending if all(a in done for a in s.after)]
            best = min(ready, key=lambda s: (rank(s), position[s.id]))
            out.append(best)
            done.add(best.id)
            pending.remove(best)
        return out

    def violations(self, sequence: Iterable[str]) -> list[str]:
        """The edges that ``sequence`` (step ids in the order something performs them) does not realise: a step
        performed before one it follows, or a step missing from the sequence."""
        index: dict[str, int] = {}
        for i, step_id in enumerate(sequence):
            index.setdefault(step_id, i)
        problems = [f"{s.id} is never performed" for s in self.steps if s.id not in index]
        for s in self.steps:
            for a in s.after:
                if s.id in index and a in index and index[a] > index[s.id]:
                    problems.append(f"{s.id} is performed before {a}, which it follows")
        return problems

    def describe(self) -> str:
        """The graph as text, one step a line with what it follows (``efa-stack rollout``, the docs)."""
        lines = []
        for s in self.steps:
            after = f"  (after {', '.join(s.after)})" if s.after else ""
            lines.append(f"{s.id}: {s.describe()}{after}")
        return "\n".join(lines)


def default_rank(step: Step) -> tuple[int, str]:
    """Of the steps ready at once: the nodes, a release that follows nothing, the waits for CRDs (by name), a release
    that follows waits, the waits for controllers, then the applies."""
    if isinstance(step, Nodes):
        return 0, ""
    if isinstance(step, InstallRelease):
        return (1 if not step.after else 3), ""
    if isinstance(step, WaitEstablished):
        return 2, step.crd
    if isinstance(step, (WaitAvailable, WaitValue)):
        return 4, ""
    return 5, ""


def apply_id(chart_id: str) -> str:
    return f"apply/{chart_id}"


def release_id(component: str) -> str:
    return f"helm/{component}"


def established_id(crd: str) -> str:
    return f"established/{crd}"


def available_id(component: str) -> str:
    return f"available/{component}"


def webhook_ca_id(component: str) -> str:
    return f"webhook-ca/{component}"


# --- computing it -------------------------------------------------------------------------------------------------


def releases(plan: ClusterPlan) -> dict[str, HelmRelease]:
    """The Helm releases the plan installs, by component id, each with its values from its one function."""
    out: dict[str, HelmRelease] = {}
    if plan.training_operators.trainer:
        from k8s.training_operators import TRAINER_CHART, TrainerHelmProps

        props = TrainerHelmProps()
        out[KUBEFLOW_TRAINER] = HelmRelease(
            name=contract.TRAINER_RELEASE, chart=TRAINER_CHART, repository=props.repository, version=props.version,
            namespace=contract.TRAINER_NAMESPACE, values=props.values(),
            crds=(contract.TRAINJOB_CRD_NAME, contract.CLUSTER_TRAINING_RUNTIME_CRD_NAME,
                  contract.TRAINING_RUNTIME_CRD_NAME, contract.JOBSET_CRD_NAME),
            retain=True,
        )
    if plan.karpenter is not None:
        from efa_stack.planning.karpenter import controller_replicas
        from k8s.scheduling import system_node_selector

        k = plan.karpenter
        out[KARPENTER] = HelmRelease(
            name=contract.KARPENTER_RELEASE, chart=k.chart.rsplit("/", 1)[-1], repository=k.chart, version=k.version,
            namespace=k.namespace, skip_crds=True,
            values=k.values(replicas=controller_replicas(plan.system.min_size), node_selector=system_node_selector()),
        )
    out.update(_ultraserver_releases(plan))
    out.update(_dra_releases(plan))
    return out


def _dra_releases(plan: ClusterPlan) -> dict[str, HelmRelease]:
    """The DRA drivers of the plan's ``devices: dra`` groups and pools (k8s/dra.py): aws-dranet for EFA, the Neuron
    chart's DRA driver for Neuron devices, the NVIDIA DRA driver for GPUs."""
    from k8s import dra
    from k8s.compute_domains import NVIDIA_DRA_CHART, NVIDIA_DRA_VERSION, ultraserver_groups

    every = (*plan.node_groups, *plan.pool_groups)
    out: dict[str, HelmRelease] = {}
    efa = dra.dra_groups(every, "efa")
    if efa:
        out[AWS_DRANET] = HelmRelease(
            name=contract.AWS_DRANET_RELEASE, chart=dra.AWS_DRANET_CHART, repository=dra.AWS_DRANET_REPOSITORY,
            version=dra.AWS_DRANET_VERSION, namespace=contract.KUBE_SYSTEM, values=dra.aws_dranet_values(efa, plan.region),
        )
    gpu = dra.dra_groups(every, "gpu")
    if gpu and not ultraserver_groups(plan.node_groups):  # (both together are refused: efa_stack/planning/dra.py)
        # the one NVIDIA DRA driver release, for GPUs: no ComputeDomains, so no controller (templates/controller.yaml)
        out[NVIDIA_DRA_DRIVER] = HelmRelease(
            name=contract.NVIDIA_DRA_RELEASE, chart=NVIDIA_DRA_CHART.rsplit("/", 1)[-1], repository=NVIDIA_DRA_CHART,
            version=NVIDIA_DRA_VERSION, namespace=contract.NVIDIA_DRA_NAMESPACE, values=dra.nvidia_gpu_values(gpu),
            crds=(contract.COMPUTE_DOMAIN_CRD_NAME, contract.COMPUTE_DOMAIN_CLIQUE_CRD_NAME), controller=False,
        )
    neuron = dra.dra_groups(every, "neuron")
    if neuron:
        out[NEURON_DRA] = HelmRelease(
            name=contract.NEURON_DRA_RELEASE, chart=dra.NEURON_CHART, repository=dra.NEURON_CHART_REPOSITORY,
            version=dra.NEURON_CHART_VERSION, namespace=contract.KUBE_SYSTEM, values=dra.neuron_dra_values(neuron),
        )
    return out


def _ultraserver_releases(plan: ClusterPlan) -> dict[str, HelmRelease]:
    """Node Feature Discovery and the NVIDIA DRA driver (ComputeDomains only) when the plan has UltraServer node
    groups (k8s/compute_domains.py)."""
    from efa_stack.planning.node_groups import taints_of
    from k8s.compute_domains import (
        NFD_CHART,
        NFD_VERSION,
        NVIDIA_DRA_CHART,
        NVIDIA_DRA_VERSION,
        nfd_values,
        nvidia_dra_values,
        ultraserver_groups,
    )

    groups = ultraserver_groups(plan.node_groups)
    if not groups:
        return {}
    taints = taints_of(groups)
    return {
        NODE_FEATURE_DISCOVERY: HelmRelease(
            name=contract.NFD_RELEASE, chart=NFD_CHART.rsplit("/", 1)[-1], repository=NFD_CHART, version=NFD_VERSION,
            namespace=contract.NFD_NAMESPACE, values=nfd_values(groups, taints),
        ),
        NVIDIA_DRA_DRIVER: HelmRelease(
            name=contract.NVIDIA_DRA_RELEASE, chart=NVIDIA_DRA_CHART.rsplit("/", 1)[-1], repository=NVIDIA_DRA_CHART,
            version=NVIDIA_DRA_VERSION, namespace=contract.NVIDIA_DRA_NAMESPACE, values=nvidia_dra_values(groups, taints),
            crds=(contract.COMPUTE_DOMAIN_CRD_NAME, contract.COMPUTE_DOMAIN_CLIQUE_CRD_NAME),
        ),
    }


def _crd_kinds(objects: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(API group, kind) -> CRD name for every CustomResourceDefinition of ``objects``."""
    return {(o["spec"]["group"], o["spec"]["names"]["kind"]): o["metadata"]["name"]
            for o in objects if o and o.get("kind") == "CustomResourceDefinition"}


def group_kind(obj: Mapping[str, Any]) -> tuple[str, str]:
    api_version = str(obj.get("apiVersion", ""))
    return (api_version.rsplit("/", 1)[0] if "/" in api_version else ""), str(obj.get("kind", ""))


@dataclass
class _Builder:
    """The steps as they are made, and who creates each CRD."""

    steps: list[Step] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    creator: dict[str, str] = field(default_factory=dict)
    """CRD name -> id of the step that creates it."""

    def add(self, step: Step) -> None:
        if step.id not in self.ids:
            self.steps.append(step)
            self.ids.add(step.id)

    def established(self, crd: str) -> str:
        """The id of the wait for ``crd`` (made on first use, after the step that creates the CRD)."""
        self.add(WaitEstablished(established_id(crd), established_wait_id(crd), (self.creator[crd],), crd=crd))
        return established_id(crd)


def plan_rollout(plan: ClusterPlan, charts: Sequence[cdk8s.Chart]) -> Rollout:
    """The rollout of ``plan``'s charts (built by :func:`k8s.charts.build_charts`) and Helm releases."""
    objects = {c.node.id: c.to_json() for c in charts}
    needs = {c.node.id: tuple(d.node.id for d in c.node.dependencies) for c in charts}
    rels = releases(plan)
    present = set(objects) | set(rels)
    kinds: dict[tuple[str, str], str] = {}
    b = _Builder()
    for chart_id, objs in objects.items():
        for crd in _crd_kinds(objs).values():
            b.creator[crd] = apply_id(chart_id)
        kinds.update(_crd_kinds(objs))
    for comp_id, rel in rels.items():
        for crd in rel.crds:
            b.creator[crd] = release_id(comp_id)
    kinds.update(_release_kinds(rels))
    served_by = {served: c for c in present if (w := BY_ID[c].controller) for served in w.serves}
    needed = _needed_crds(c for c in present if c not in rels or rels[c].controller)
    first_use = _first_use(objects, kinds)
    ready: dict[str, tuple[str, ...]] = {}  # controller's component id -> its last wait
    if any(BY_ID[c].controller for c in present):
        b.add(Nodes(NODES, NODES))
    for comp in COMPONENTS:  # in apply order; each step after the waits for the CRDs it creates and its controller
        if comp.id not in present:
            continue
        if comp.helm:
            rel = rels[comp.id]
            after = [b.established(crd) for crd in comp.after_established if crd in b.creator]
            b.add(InstallRelease(release_id(comp.id), _release_construct_id(comp.id), tuple(after), component=comp.id,
                                 release=rel))
            created = rel.crds
            made_by = release_id(comp.id)
            revision = _digest({"version": rel.version, "values": rel.values})
        else:
            objs = objects[comp.id]
            used = sorted({kinds[gk] for o in objs if o and (gk := group_kind(o)) in kinds})
            after = [*(apply_id(n) if n in objects else release_id(n)
                       for n in (*needs[comp.id], *comp.after) if n in present),
                     *(b.established(crd) for crd in comp.after_established if crd in b.creator),
                     *(b.established(crd) for crd in used),
                     *(ready[served_by[comp.id]] if comp.id in served_by else ())]
            b.add(ApplyChart(apply_id(comp.id), comp.id, tuple(dict.fromkeys(after)), chart=comp.id,
                             retain=comp.retain, retry_admission=_holds_trainjobs(objs)))
            created = tuple(_crd_kinds(objs).values())
            made_by = apply_id(comp.id)
            revision = _pod_template_digest(objs, comp.controller.deployment) if comp.controller else ""
        # the waits for the CRDs it creates, in the order later objects first use their kinds
        for crd in sorted((c for c in created if c in first_use or c in needed),
                          key=lambda c: (first_use.get(c, len(first_use)), c)):
            b.established(crd)
        if comp.controller is not None and (not comp.helm or rels[comp.id].controller):
            ready[comp.id] = _controller_steps(b, comp.id, made_by, revision)
    return Rollout(tuple(b.steps), objects)


def _release_construct_id(component: str) -> str:
    return {KUBEFLOW_TRAINER: "KubeflowTrainer", KARPENTER: "Karpenter", NODE_FEATURE_DISCOVERY: "NodeFeatureDiscovery",
            NVIDIA_DRA_DRIVER: "NvidiaDraDriver", AWS_DRANET: "AwsDranet", NEURON_DRA: "NeuronDraDriver"}[component]


def _release_kinds(rels: Mapping[str, HelmRelease]) -> dict[tuple[str, str], str]:
    """(API group, kind) -> CRD name for the kinds whose CRDs a release installs."""
    out: dict[tuple[str, str], str] = {}
    if KUBEFLOW_TRAINER in rels:
        out[(contract.TRAINER_GROUP, contract.TRAINJOB_KIND)] = contract.TRAINJOB_CRD_NAME
        out[(contract.TRAINER_GROUP, contract.CLUSTER_TRAINING_RUNTIME_KIND)] = contract.CLUSTER_TRAINING_RUNTIME_CRD_NAME
        out[(contract.TRAINER_GROUP, contract.TRAINING_RUNTIME_KIND)] = contract.TRAINING_RUNTIME_CRD_NAME
    if NVIDIA_DRA_DRIVER in rels:
        out[(contract.COMPUTE_DOMAIN_GROUP, contract.COMPUTE_DOMAIN_KIND)] = contract.COMPUTE_DOMAIN_CRD_NAME
    return out


def _needed_crds(present: Iterable[str]) -> set[str]:
    """CRDs the present controllers and releases need served, besides the kinds the charts apply (``present``: less
    the releases that leave their controller out)."""
    out: set[str] = set()
    for c in present:
        comp = BY_ID[c]
        out.update(comp.after_established)
        if comp.controller is not None:
            out.update(comp.controller.crds)
    return out


def _first_use(objects: Mapping[str, Sequence[Mapping[str, Any]]], kinds: Mapping[tuple[str, str], str]) -> dict[str, int]:
    """CRD name -> its position in the order the charts' objects first use its kind (CRDs no object uses: absent)."""
    out: dict[str, int] = {}
    for objs in objects.values():
        for o in objs:
            crd = kinds.get(group_kind(o)) if o else None
            if crd is not None and crd not in out:
                out[crd] = len(out)
    return out


def _controller_steps(b: _Builder, comp_id: str, created_by: str, revision: str) -> tuple[str, ...]:
    """The waits for ``comp_id``'s controller (created by step ``created_by``, its pods from ``revision``); returns the
    last one."""
    wait = BY_ID[comp_id].controller
    assert isinstance(wait, ControllerWait)
    crds = [b.established(crd) for crd in wait.crds if crd in b.creator]
    b.add(WaitAvailable(available_id(comp_id), wait.wait_id, (created_by, NODES, *crds), component=comp_id,
                        deployment=wait.deployment, namespace=wait.namespace, revision=revision))
    if wait.webhook_ca is None:
        return (available_id(comp_id),)
    construct_id, name, json_path = wait.webhook_ca
    b.add(WaitValue(webhook_ca_id(comp_id), construct_id, (available_id(comp_id),), component=comp_id,
                    object_type="validatingwebhookconfiguration", name=name, json_path=json_path))
    return (webhook_ca_id(comp_id),)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _pod_template_digest(objects: Sequence[Mapping[str, Any]], deployment: str) -> str:
    """The digest of Deployment ``deployment``'s pod template among ``objects`` ("" without one)."""
    for o in objects:
        if o and o.get("kind") == "Deployment" and o["metadata"]["name"] == deployment:
            return _digest(o["spec"]["template"])
    return ""


def _holds_trainjobs(objects: Iterable[Mapping[str, Any]]) -> bool:
    return any(o and group_kind(o) == (contract.TRAINER_GROUP, contract.TRAINJOB_KIND) for o in objects)
