"""Karpenter and its EFA pools, derived from ``karpenterNodePools``: the elastic twin of an EFA node group.

A pool shares its node fields with a managed node group (:class:`efa_stack.spec.models.NodeGroupBase`), planned by
the same function (:func:`efa_stack.planning.node_shapes.plan_shape`: instance type, per-card interface layout,
labels, taints, hugepages, kubelet tuning, root volume, placement group) into the plan of its nodes,
:attr:`KarpenterPoolPlan.group`, beside what only a pool has (:func:`efa_stack.planning.node_shapes.plan_pool`): one
zone, all its capacity reservations, the static replica count, the AMI alias and the disruption settings. Jobs,
Kueue flavors and the address plan read a pool's nodes as they read a node group. The design and its sources:
docs/design/karpenter.md.

Upstream facts, aws/karpenter-provider-aws tag v1.15.1 (read from the Go module proxy's zip of the tag, go.sum
``h1:6eH///KgWKDwD2R6wHRnKGN8Vu8OHueaXjNdx64TnuY=``; the facts that did not change since v1.14.1, commit
bde00654cd316fddb3dccfba3f5ac07039865429, were read there first) and its documentation (v1.14 at
main@1d927085dd81a9df9301e613f371dac5b4d16bfe, website/content/en/v1.14/; the website is not in the module zip):

kubernetes-sigs/karpenter (core) is cited at the version a fact was read at: v1.14.1, and again at v1.15.0 for
what this module relies on (termination, disruption, repair); the provider's go.mod at v1.15.1 requires core v1.15.1,
whose zip the Go module proxy refuses ("not available"), so core v1.15.1 itself was not read.

- ``EC2NodeClass.spec.networkInterfaces[].interfaceType`` is ``interface`` or ``efa-only`` only
  (pkg/apis/v1/ec2nodeclass.go ``NetworkInterface``, ``+kubebuilder:validation:Enum:={interface,efa-only}``):
  the legacy layout's combined ``efa`` interfaces cannot be declared, so such pools are refused
  (:func:`layout_problems`).
- With ``networkInterfaces`` set, Karpenter counts a node's ``vpc.amazonaws.com/efa`` capacity as its
  ``efa-only`` interfaces (pkg/providers/instancetype/types.go ``efas``) and always launches those interfaces
  (pkg/providers/launchtemplate/launchtemplate.go ``generateNetworkInterfaces``); without it, EFA interfaces are
  added only when the NodeClaim requests ``vpc.amazonaws.com/efa`` (pkg/providers/amifamily/resolver.go
  ``efaCount``).
- Karpenter's instance capacity has no ``hugepages-2Mi`` (types.go ``computeCapacity``): a pod that requests
  hugepages fits no instance type in its simulation unless a ``NodeOverlay`` adds them (concepts/nodeoverlays.md,
  ``capacity: {hugepages-2Mi: ...}``; feature gate ``NodeOverlay``, alpha since v1.7, reference/settings.md).
- Reserved capacity (ODCRs and Capacity Blocks) is the capacity type ``reserved``, selected through
  ``capacityReservationSelectorTerms`` (tasks/odcrs.md; gate ``ReservedCapacity``, beta and on since v1.6);
  ``spec.replicas`` makes a static NodePool (concepts/nodepools.md "spec.replicas"; gate ``StaticCapacity``,
  alpha since v1.8) whose ``limits`` may only hold ``nodes`` (pkg/apis/crds/karpenter.sh_nodepools.yaml CEL
  rule "only 'limits.nodes' is supported on static NodePools").
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from efa_stack import contract, names
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import DEFAULT_POOL_AMI_VERSION, KUBERNETES_VERSIONS

KARPENTER_VERSION = "1.15.1"
"""The pinned release: chart and controller image ``1.15.1`` (hack/release/common.sh at the tag publishes the chart
with the release version; the module's charts/karpenter/Chart.yaml still says the previous release, 1.14.1, which
the release job rewrites)."""
KARPENTER_MODULE_SUM = "h1:6eH///KgWKDwD2R6wHRnKGN8Vu8OHueaXjNdx64TnuY="
"""The go.sum hash of ``github.com/aws/karpenter-provider-aws@v1.15.1``, the Go module proxy's zip of the tag that
the CRDs, chart and controller code were read from (the zip carries no commit id; sum.golang.org vouches for it)."""
KARPENTER_KUBERNETES_VERSIONS = ("1.26", "1.37")
"""The oldest and the newest Kubernetes version the pinned controller supports: aws/karpenter-provider-aws@v1.15.1
pkg/providers/version/version.go ``MinK8sVersion = "1.26"``, ``MaxK8sVersion = "1.37"`` (v1.14.1: ``"1.36"``); outside
them its ``providers.version`` reconciler (pkg/controllers/providers/version/controller.go) fails with "karpenter
is not compatible with kubernetes version" (``validateK8sVersion``). The v1.15 compatibility matrix agrees: its
1.37 column reads "1.15.x" (website/content/en/v1.15/upgrading/compatibility.md at
d77d1a3a5a44d7ce9c041bcc51da1e567de3f2ec). Moving the pin moves this pair with it."""
KARPENTER_CHART = "oci://public.ecr.aws/karpenter/karpenter"
"""The OCI chart (website/content/en/v1.14/getting-started/getting-started-with-karpenter/scripts/
step08-apply-helm-chart.sh: ``helm upgrade --install karpenter oci://public.ecr.aws/karpenter/karpenter``)."""

AMI_ALIAS_FAMILY = "al2023"
"""``amiSelectorTerms[].alias`` is ``family@version`` (pkg/apis/v1/ec2nodeclass.go ``AMISelectorTerm.Alias``); the
al2023 family resolves the standard, nvidia and neuron variants and matches each to its instance types
(pkg/providers/amifamily/al2023.go ``DescribeImageQuery``), as a node group's AMI type does."""

KUBECTL_HANDLER_TIMEOUT_SECONDS = 15 * 60
"""How long the cluster's kubectl handler may run: aws-cdk-lib 2.275 aws-eks-v2 lib/kubectl-provider.js, the
handler function's ``timeout: Duration.minutes(15)`` (also the Lambda maximum). A stack deletion deletes the pools'
manifest there with ``kubectl delete -f`` (custom-resource-handlers aws-eks-v2/kubectl-handler/apply/__init__.py,
``Delete``), which waits until the objects are gone, i.e. until the EC2NodeClasses' finalizers let go; a handler
still waiting at the timeout fails the custom resource and the stack ends DELETE_FAILED with the instances running."""
INSTANCE_TERMINATION_SECONDS = 5 * 60
"""Estimate, no upstream figure: from Karpenter's ``TerminateInstances`` until EC2 reports the instance terminated.
Karpenter waits that long before it lets go of a node (kubernetes-sigs/karpenter v1.14.1 pkg/controllers/node/
termination/controller.go ``awaitInstanceTermination``, requeued every 5 s until the instance is not found;
aws/karpenter-provider-aws@v1.15.1 pkg/providers/instance/instance.go ``Get`` still finds ``shutting-down``
instances), and a default termination first attempts a graceful OS shutdown (EC2 User Guide, "Methods for
terminating an instance")."""
TEARDOWN_SECONDS = 60
"""Estimate, no upstream figure: the rest of a pool's deletion: the handler's login and ``kubectl delete``, the
garbage collector deleting the NodeClaims the deleted NodePool owns (kubernetes-sigs/karpenter v1.14.1
pkg/controllers/provisioning/scheduling/nodeclaimtemplate.go: an owner reference to the NodePool), the NodeClaim
and EC2NodeClass finalizers (the latter deletes the instance profile and launch templates: aws/karpenter-provider-
aws@v1.15.1 pkg/controllers/nodeclass/controller.go ``finalize``, run again on each NodeClaim deletion)."""
TERMINATION_GRACE_PERIOD_SECONDS = KUBECTL_HANDLER_TIMEOUT_SECONDS - INSTANCE_TERMINATION_SECONDS - TEARDOWN_SECONDS
"""How long a pool node may drain before Karpenter deletes its remaining pods (540 s): what the kubectl handler's
timeout leaves once the instance's termination and the teardown are counted, so that a stack deletion finishes.

Without it (NodePool ``template.spec.terminationGracePeriod`` unset; the NodeClaim default is nil,
nodeclaimtemplate.go ``DefaultTerminationGracePeriod``) a deleted node's drain waits for its ``karpenter.sh/do-not-
disrupt`` pods for ever: the termination controller does not evict them (website v1.14 concepts/disruption.md
"Pod-Level Controls"). With it, the clock starts when the NodeClaim is deleted, each remaining pod is deleted at
that time less its own ``terminationGracePeriodSeconds`` so that it is gone by then, and the volume-detachment wait
is cut off there (termination/controller.go ``awaitDrain``, ``awaitVolumeDetachment``; terminator.go). The same
bound applies to every other deletion of a pool node: ``kubectl delete nodeclaim``, an interruption event, a
Capacity Block's end, a static pool's lowered ``replicas``. What it changes in voluntary disruption: drift becomes
possible on a node with ``do-not-disrupt`` pods (disruption/types.go ``EventualDisruptionClass``, "bounded by a
NodePool's TerminationGracePeriod, regardless of ... the do-not-disrupt annotation"), which :data:`BUDGETS` forbids
(drift takes no node while its budget is 0: disruption/drift.go and staticdrift.go ``ComputeCommands``);
consolidation stays graceful and never takes a node with such pods."""
TERMINATION_GRACE_PERIOD = f"{TERMINATION_GRACE_PERIOD_SECONDS // 60}m"
""":data:`TERMINATION_GRACE_PERIOD_SECONDS` as the CRD writes it (pattern ``^([0-9]+(s|m|h))+$``): ``9m``."""
assert TERMINATION_GRACE_PERIOD_SECONDS % 60 == 0
EXPIRE_AFTER = "Never"
"""NodePool ``template.spec.expireAfter``. Expiration is forceful: it drains a node once its lifetime passes,
is not limited by disruption budgets and is not held back by ``karpenter.sh/do-not-disrupt`` beyond
``terminationGracePeriod`` (concepts/disruption.md "Expiration", "NodePool Disruption Budgets": budgets "do not
prevent Karpenter from terminating expired nodes"); the default 720h would stop a training job after 30 days.
``Never`` is allowed by the CRD (pattern ``^(([0-9]+(s|m|h))+|Never)$``)."""
CONSOLIDATION_POLICY = "WhenEmpty"
"""Only nodes with nothing but DaemonSet or disruption-free pods are consolidated (concepts/disruption.md
"Consolidation": ``WhenEmpty`` "the most conservative behavior")."""
REASON_DRIFTED = "Drifted"
REASON_EMPTY = "Empty"
REASON_UNDERUTILIZED = "Underutilized"


@dataclass(frozen=True)
class Budget:
    """A NodePool disruption budget: at most ``nodes`` nodes disrupted at once for ``reasons``."""

    nodes: str
    reasons: tuple[str, ...]

    def manifest(self) -> dict[str, object]:
        return {"nodes": self.nodes, "reasons": list(self.reasons)}


BUDGETS: tuple[Budget, ...] = (
    Budget("0", (REASON_DRIFTED, REASON_UNDERUTILIZED)),
    Budget("100%", (REASON_EMPTY,)),
)
"""Drift (a new AMI alias, a changed EC2NodeClass) and underutilization never replace a node (``nodes: "0"``); an
empty node may always go once ``consolidateAfter`` has passed. Budgets count nodes being deleted and apply per
reason, the most restrictive winning (concepts/disruption.md "NodePool Disruption Budgets"); drifted nodes are
replaced when they are empty and consolidated, so an AMI change reaches the pool between jobs."""


@dataclass(frozen=True)
class KarpenterPoolPlan:
    """One ``karpenterNodePools`` entry: the plan of its nodes and what only a pool has."""

    group: NodeGroupPlan
    """The pool's nodes, planned from the fields it shares with a node group (min 0, desired the static replicas or
    ``maxNodes``, max ``maxNodes``): interfaces, labels, taints, hugepages, kubelet tuning, zone, volume. Jobs, Kueue
    and the address plan read it as a node group."""
    reservation_ids: tuple[str, ...] = ()
    """Every ``capacityReservationIds`` entry (``group.reservation_id`` is the first)."""
    replicas: int | None = None
    """A static NodePool's node count; None: dynamic."""
    ami_version: str = ""
    consolidate_after: str = "30m"
    new_placement_group: str | None = None
    """The name of the cluster placement group the cluster stack creates for the pool
    (:func:`placement_group_name`), or None: the pool names an existing group, or takes none."""
    max_pods: int | None = None
    """The EC2NodeClass's ``kubelet.maxPods`` under VPC CNI custom networking (``vpc.podCIDR``): the address plan's
    figure for the pool's nodes (:meth:`efa_stack.planning.addressing.AddressPlan.max_pods`); None: Karpenter's own.

    Karpenter's own figure would be wrong there. Without ``kubelet.maxPods`` it counts every ENI of the default
    network card but those ``settings.reservedENIs`` reserves (chart default ``"0"``) and the EC2NodeClass's
    card-0 ``efa-only`` interfaces: ENIs x (IPv4 addresses per ENI - 1) + 2 (aws/karpenter-provider-aws@v1.15.1
    pkg/providers/instancetype/types.go ``ENILimitedPods``, used by ``pods`` when ``maxPods`` is nil;
    charts/karpenter/values.yaml ``settings.reservedENIs``), so it would count the primary ENI, which hosts no
    pods under custom networking. With ``kubelet.maxPods`` set, the same number serves both sides: Karpenter's
    scheduling simulation takes it as the instance type's ``pods`` capacity (types.go ``pods``: ``case maxPods !=
    nil``, and ``kubeReservedResources`` from it) and the node's kubelet gets it through the NodeConfig Karpenter
    generates (pkg/providers/amifamily/resolver.go ``resolveLaunchTemplates`` copies ``nodeClass.Spec.Kubelet``;
    bootstrap/nodeadm.go ``generateInlineKubeletConfiguration``). ``reservedENIs: "1"`` would give the same
    figure for these layouts but is one controller-wide setting that repeats the formula instead of the plan's
    number, so efa-stack leaves it at the chart's default."""

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def max_nodes(self) -> int:
        return self.group.max_size

    @property
    def reserved(self) -> bool:
        return self.group.capacity in contract.RESERVED_CAPACITY

    @property
    def capacity_type(self) -> str:
        """The NodePool's ``karpenter.sh/capacity-type`` value: ``reserved`` for ODCRs and Capacity Blocks
        (tasks/odcrs.md), ``on-demand`` otherwise."""
        return "reserved" if self.reserved else contract.ON_DEMAND

    @property
    def ami_alias(self) -> str:
        return f"{AMI_ALIAS_FAMILY}@{self.ami_version}"

    @property
    def placement_group_name(self) -> str | None:
        """The group the EC2NodeClass selects by name: the existing one the spec names, or the stack's new one."""
        return self.group.placement_group_name or self.new_placement_group

    @property
    def limits(self) -> dict[str, str]:
        """NodePool ``limits``: ``nodes`` = maxNodes and, for a dynamic pool, maxNodes times one node's vCPUs,
        memory and accelerators (the catalog's figures; Karpenter compares them with the capacity of the nodes it
        launched, concepts/nodepools.md "spec.limits"). A static pool takes ``nodes`` only (CRD CEL rule)."""
        n = self.max_nodes
        out = {"nodes": str(n)}
        if self.replicas is not None:
            return out
        instance = self.group.instance
        out["cpu"] = str(instance.vcpus * n)
        out["memory"] = f"{instance.memory_mib * n}Mi"
        if self.group.gpus_per_node:
            out[contract.GPU_RESOURCE] = str(self.group.gpus_per_node * n)
        if self.group.neuron_devices_per_node:
            out[contract.NEURON_RESOURCE] = str(self.group.neuron_devices_per_node * n)
        return out

    @property
    def overlay_capacity(self) -> dict[str, str]:
        """Extended resources a ``NodeOverlay`` adds to the pool's instance type in Karpenter's simulation: the
        2 MiB hugepages each node reserves at boot (empty: none)."""
        mib = self.group.hugepages_2mi_mib
        return {contract.HUGEPAGES_2MI_RESOURCE: f"{mib}Mi"} if mib else {}


IAM_ROLE_NAME_MAX = 64
"""IAM API Reference, CreateRole ``RoleName``: 1-64 characters of ``[\\w+=,.@-]``."""
SQS_QUEUE_NAME_MAX = 80
"""SQS API Reference, CreateQueue ``QueueName``: up to 80 alphanumeric characters, hyphens and underscores."""


def _bounded(base: str, most: int) -> str:
    """``base``, or its first characters and a hash of the whole when it is longer than ``most``."""
    if len(base) <= most:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{base[: most - 9]}-{digest}"


PLACEMENT_GROUP_INFIX = "karpenter"


def placement_group_name(cluster: str, pool: str) -> str:
    """The cluster placement group the stack creates for an on-demand pool: ``<cluster>-karpenter-<pool>``.

    Fixed, because the EC2NodeClass in dist/ names it before any stack exists (``placementGroupSelector`` takes a
    ``name`` or an ``id`` ``pg-...``, nothing else: aws/karpenter-provider-aws@v1.15.1 pkg/apis/v1/ec2nodeclass.go
    ``PlacementGroupSelector``; k8s/crds/karpenter/karpenter.k8s.aws_ec2nodeclasses.yaml). Placement group names are
    unique per account and Region (EC2 API Reference, CreatePlacementGroup ``GroupName``), as EKS cluster names are,
    so the cluster's name keeps two clusters' groups apart. At most 255 printable ASCII characters
    (:data:`efa_stack.names.PLACEMENT_GROUP_NAME`); a cluster name (100) and a pool name (63) stay far below."""
    name = _bounded(f"{cluster}-{PLACEMENT_GROUP_INFIX}-{pool}", names.PLACEMENT_GROUP_NAME.max_len)
    assert names.PLACEMENT_GROUP_NAME.ok(name), name
    return name


CONTROLLER_REPLICAS = 2
"""The chart's default ``replicas``, with required anti-affinity per hostname (charts/karpenter/values.yaml)."""


def controller_replicas(system_min_size: int) -> int:
    """Controller replicas: the chart's 2, or fewer when the system node group's minimum has fewer nodes (the
    replicas' required anti-affinity puts one per node)."""
    return min(CONTROLLER_REPLICAS, system_min_size)


AWS_FEATURE_GATES: dict[str, bool] = {"rebootForRepair": False}
"""The chart's ``settings.awsFeatureGates`` (new in v1.15: charts/karpenter/values.yaml at v1.15.1, passed as the
controller's ``AWS_FEATURE_GATES``, templates/deployment.yaml): ``rebootForRepair`` off, the chart's default said
outright, as ``nodeRepair`` is (it has no effect without node repair: :attr:`KarpenterPlan.feature_gates`). The
other AWS gates keep the chart's defaults: ``nodeClassCEL`` false, ``draNVIDIAGPU`` and ``draEFA`` unset (off)."""
ENABLE_DRA = False
"""The chart's ``settings.enableDRA`` (alpha, new in v1.15, default false): true turns on both AWS DRA gates and
makes Karpenter count pods' DRA claims (``ignoreDRARequests`` false; templates/_helpers.tpl ``karpenter.dra``). Pools'
jobs take their EFA devices and GPUs from the device plugins (``vpc.amazonaws.com/efa``, ``nvidia.com/gpu``), and the
EFA device plugin beside the EFA DRA driver oversubscribes devices (docs/design/karpenter.md), so it stays off, said
outright so that a later chart default cannot turn it on."""


def chart_values(
    *, cluster_name: str, interruption_queue_name: str, service_account: str, feature_gates: Mapping[str, bool],
    replicas: int, node_selector: Mapping[str, str],
) -> dict[str, Any]:
    """The Karpenter chart's values, the one document ``cdk deploy``'s Helm release and ``apply.sh``'s ``helm
    upgrade --install`` pass: ``settings.clusterName``, ``settings.interruptionQueue`` (a queue name),
    ``settings.featureGates``, ``settings.awsFeatureGates`` (:data:`AWS_FEATURE_GATES`), ``settings.enableDRA``
    (:data:`ENABLE_DRA`), ``replicas``, ``nodeSelector`` and the service account's name (charts/karpenter/values.yaml
    at the tag; ``step08-apply-helm-chart.sh`` sets the first two)."""
    return {
        "settings": {
            "clusterName": cluster_name,
            "interruptionQueue": interruption_queue_name,
            "featureGates": dict(feature_gates),
            "awsFeatureGates": dict(AWS_FEATURE_GATES),
            "enableDRA": ENABLE_DRA,
        },
        "replicas": replicas,
        "nodeSelector": {"kubernetes.io/os": "linux", **node_selector},
        "serviceAccount": {"create": True, "name": service_account},
    }


@dataclass(frozen=True)
class KarpenterPlan:
    """Karpenter's controller and its pools (``karpenterNodePools``)."""

    pools: tuple[KarpenterPoolPlan, ...]
    cluster: str
    """The EKS cluster name (``settings.clusterName``), also the discovery tag's value."""
    region: str = ""
    version: str = KARPENTER_VERSION
    chart: str = KARPENTER_CHART
    namespace: str = contract.KARPENTER_NAMESPACE
    service_account: str = contract.KARPENTER_SERVICE_ACCOUNT

    @property
    def node_role_name(self) -> str:
        """The nodes' IAM role, named so that the EC2NodeClass (``spec.role``, a role name) in dist/ can hold it:
        ``<cluster>-<region>-karpenter-node`` (one per cluster and region, as IAM names are account-wide)."""
        name = _bounded(f"{self.cluster}-{self.region}-karpenter-node", IAM_ROLE_NAME_MAX)
        assert re.fullmatch(r"[\w+=,.@-]{1,64}", name), name
        return name

    @property
    def interruption_queue_name(self) -> str:
        """The SQS queue of interruption events (``settings.interruptionQueue``, a queue name)."""
        name = _bounded(f"{self.cluster}-karpenter", SQS_QUEUE_NAME_MAX)
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,80}", name), name
        return name

    @property
    def groups(self) -> tuple[NodeGroupPlan, ...]:
        return tuple(p.group for p in self.pools)

    def pool(self, name: str) -> KarpenterPoolPlan | None:
        return next((p for p in self.pools if p.name == name), None)

    @property
    def new_placement_groups(self) -> tuple[str, ...]:
        """The cluster placement groups the cluster stack creates, one per pool that takes a new one."""
        return tuple(p.new_placement_group for p in self.pools if p.new_placement_group)

    def values(self, *, replicas: int, node_selector: Mapping[str, str]) -> dict[str, Any]:
        """:func:`chart_values` for this cluster: ``replicas`` controllers on the nodes ``node_selector`` picks."""
        return chart_values(
            cluster_name=self.cluster, interruption_queue_name=self.interruption_queue_name,
            service_account=self.service_account, feature_gates=self.feature_gates, replicas=replicas,
            node_selector=node_selector,
        )

    @property
    def feature_gates(self) -> dict[str, bool]:
        """The chart's ``settings.featureGates`` (charts/karpenter/values.yaml at the tag): ``reservedCapacity`` for
        ODCRs and Capacity Blocks (beta, on by default: set so that it stays on), ``staticCapacity`` when a pool is
        static, ``nodeOverlay`` when a pool's nodes reserve hugepages, and ``nodeRepair`` off (the chart's default,
        set so that a new pin's default cannot turn it on): repair acts on node conditions, never on the acceptance
        quarantine's taint, and since v1.15 it is a disruption method that, with the pools' grace period, may drain
        a node that runs a job's ``do-not-disrupt`` workers (kubernetes-sigs/karpenter v1.15.0
        pkg/controllers/disruption/repair.go ``ShouldDisrupt``; docs/design/karpenter.md, "Node repair,
        RebootForRepair and quarantine")."""
        return {
            "reservedCapacity": True,
            "staticCapacity": any(p.replicas is not None for p in self.pools),
            "nodeOverlay": any(p.overlay_capacity for p in self.pools),
            "nodeRepair": False,
        }


def with_max_pods(plan: KarpenterPlan, max_pods: Callable[[str], int | None]) -> KarpenterPlan:
    """``plan`` with each pool's :attr:`KarpenterPoolPlan.max_pods` from ``max_pods`` (pool name -> the address
    plan's custom-networking maxPods, or None without ``vpc.podCIDR``)."""
    pools = tuple(dataclasses.replace(p, max_pods=max_pods(p.name)) for p in plan.pools)
    return dataclasses.replace(plan, pools=pools)


def layout_problems(prefix: str, pool_layout: str, group: NodeGroupPlan) -> list[Problem]:
    """Pools whose interfaces Karpenter cannot declare: the legacy layout, or a current layout that falls back to
    a combined ``efa`` interface (a card without ``efa-only``, or a card 0 with room for one interface)."""
    if pool_layout == "legacy":
        return [Problem(
            f"{prefix}.interfaceLayout", "legacy",
            f"Karpenter's EC2NodeClass (v{KARPENTER_VERSION}) declares only 'interface' and 'efa-only' interfaces, so the legacy "
            "layout's combined 'efa' interfaces cannot be expressed",
            "use interfaceLayout: current, or a managedNodeGroups entry for the legacy layout",
        )]
    combined = [i for i in group.interfaces if i.interface_type == contract.EFA_INTERFACE]
    if combined:
        cards = ", ".join(str(i.network_card_index) for i in combined)
        return [Problem(
            f"{prefix}.instanceType", group.instance_type,
            f"{group.instance_type} needs a combined 'efa' interface on network card {cards} (its card data offers "
            "no efa-only interface there), which Karpenter's EC2NodeClass cannot declare",
            f"run {group.instance_type} in a managedNodeGroups entry (its launch template takes 'efa' interfaces), "
            "or choose a type whose cards take efa-only interfaces (p5, p5en, p6)",
        )]
    return []


def capacity_problems(
    prefix: str, capacity: str, reservation_ids: list[str], replicas: int | None, max_nodes: int,
) -> list[Problem]:
    """A pool's reservations and static replica count against its capacity type."""
    problems: list[Problem] = []
    if capacity in contract.RESERVED_CAPACITY and not reservation_ids:
        problems.append(Problem(
            f"{prefix}.capacityReservationIds", [], f"capacity '{capacity}' needs the reservations to launch into",
            "list them: capacityReservationIds: [cr-...] (`aws ec2 describe-capacity-reservations`)",
        ))
    if capacity == contract.ON_DEMAND and reservation_ids:
        problems.append(Problem(
            f"{prefix}.capacityReservationIds", list(reservation_ids),
            "reservations are only used with capacity 'reservation' or 'capacity-block'",
            "set capacity: reservation (or capacity-block), or remove capacityReservationIds",
        ))
    if len(set(reservation_ids)) != len(reservation_ids):
        problems.append(Problem(
            f"{prefix}.capacityReservationIds", list(reservation_ids), "a reservation is listed twice",
            "list each reservation once",
        ))
    if replicas is not None and capacity == contract.ON_DEMAND:
        problems.append(Problem(
            f"{prefix}.replicas", replicas, "a static pool holds reserved capacity (ODCRs or Capacity Blocks)",
            "remove replicas (an on-demand pool follows its pods), or use a managedNodeGroups entry for a fixed "
            "number of on-demand nodes",
        ))
    if replicas is not None and replicas > max_nodes:
        problems.append(Problem(
            f"{prefix}.replicas", replicas, f"more replicas than maxNodes ({max_nodes})",
            f"set replicas to at most {max_nodes}, or raise maxNodes",
        ))
    return problems


KARPENTER_MAX_VOLUME_GIB = 59000
"""The largest root volume an EC2NodeClass takes in GiB: ``blockDeviceMappings[].ebs.volumeSize`` must match
``^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|...)$`` (aws/karpenter-provider-aws@v1.15.1
pkg/apis/v1/ec2nodeclass.go ``BlockDevice.VolumeSize``, ``+kubebuilder:validation:Pattern``; the same at main
1d927085), and efa-stack writes the size in ``Gi``."""


def volume_problems(prefix: str, volume_size_gib: int) -> list[Problem]:
    """A pool's root volume larger than its EC2NodeClass can declare (io2 takes up to 65,536 GiB on a node group)."""
    if volume_size_gib <= KARPENTER_MAX_VOLUME_GIB:
        return []
    return [Problem(
        f"{prefix}.volumeSize", volume_size_gib,
        f"Karpenter's EC2NodeClass takes a root volume of at most {KARPENTER_MAX_VOLUME_GIB} GiB",
        f"set volumeSize to at most {KARPENTER_MAX_VOLUME_GIB}, or run these nodes in a managedNodeGroups entry",
    )]


AMI_RELEASES_FILE = Path(__file__).parent / "data" / "eks_al2023_ami_releases.json"


@cache
def _ami_releases() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(AMI_RELEASES_FILE.read_text())
    return data


def ami_first_release(kubernetes_version: str, ami_type: str) -> str | None:
    """The oldest amazon-eks-ami release with an AL2023 AMI of ``ami_type`` (``AL2023_X86_64_NVIDIA``, ...) for
    ``kubernetes_version`` (data/eks_al2023_ami_releases.json), or None when no release the data covers has one."""
    found: str | None = _ami_releases()["first_release"].get(kubernetes_version, {}).get(ami_type)
    return found


def ami_problems(prefix: str, kubernetes_version: str, ami_type: str, ami_version: str) -> list[Problem]:
    """A pool whose ``al2023@<amiVersion>`` alias resolves to no AMI: the release is older than the first one that
    publishes the pool's AMI type for the cluster's Kubernetes version, or (up to the newest release the data
    covers) no release publishes one at all. Karpenter would find no SSM parameter and launch no node
    (pkg/providers/amifamily/al2023.go ``resolvePath`` at v1.15.1). A release newer than the data covers is not
    judged: the data cannot tell."""
    checked = str(_ami_releases()["checked_through"])
    first = ami_first_release(kubernetes_version, ami_type)
    # Release names are v<YYYYMMDD>: their order is their text's (the spec's pattern ^v[0-9]{8}$).
    if first is None and ami_version <= checked:
        return [Problem(
            f"{prefix}.amiVersion", ami_version,
            f"no amazon-eks-ami release up to {checked} publishes an {ami_type} AMI for Kubernetes "
            f"{kubernetes_version}, so al2023@{ami_version} resolves to no image and Karpenter launches no node",
            f"set metadata.version to one the pools' AMIs exist for ({', '.join(_ami_versions())}), "
            f"or set amiVersion to an amazon-eks-ami release newer than {checked} whose notes list Kubernetes "
            f"{kubernetes_version}, or run these nodes in a managedNodeGroups entry",
        )]
    if first is not None and ami_version < first:
        return [Problem(
            f"{prefix}.amiVersion", ami_version,
            f"amazon-eks-ami first publishes {ami_type} AMIs for Kubernetes {kubernetes_version} in {first}, so "
            f"al2023@{ami_version} resolves to no image and Karpenter launches no node",
            f"set amiVersion: {first} or later (the default is {DEFAULT_POOL_AMI_VERSION})",
        )]
    return []


def _ami_versions() -> list[str]:
    """The Kubernetes versions the AMI data has releases of that the pinned Karpenter supports, oldest first."""
    return [v for v in sorted(_ami_releases()["first_release"], key=_minor) if karpenter_supports(v)]


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def karpenter_supports(kubernetes_version: str) -> bool:
    """Whether the pinned controller supports ``kubernetes_version`` (:data:`KARPENTER_KUBERNETES_VERSIONS`); False
    for text that is no ``1.<minor>`` version (``metadata.version``'s own check names it)."""
    if not re.fullmatch(r"1\.[0-9]+", kubernetes_version):
        return False
    low, high = KARPENTER_KUBERNETES_VERSIONS
    return _minor(low) <= _minor(kubernetes_version) <= _minor(high)


def kubernetes_problems(
    kubernetes_version: str, pool_amis: Sequence[tuple[str, str, str]], offered: Sequence[str],
) -> list[Problem]:
    """Pools on a Kubernetes version the pinned controller does not support (one problem, on ``metadata.version``).

    ``pool_amis``: per pool its field prefix, AMI type and ``amiVersion``; ``offered``: the versions efa-stack would
    take for a new cluster today (:func:`efa_stack.planning.versions.offered`). The fix names only versions that
    every rule accepts: offered, supported by the pinned Karpenter and published by every pool's AMI release
    (:func:`ami_problems`). Versions efa-stack does not build are ``metadata.version``'s own problem, not this one."""
    if kubernetes_version not in KUBERNETES_VERSIONS or karpenter_supports(kubernetes_version):
        return []
    low, high = KARPENTER_KUBERNETES_VERSIONS
    fits = [v for v in offered if karpenter_supports(v)
            and not any(ami_problems(prefix, v, ami_type, ami) for prefix, ami_type, ami in pool_amis)]
    move = "run these nodes in managedNodeGroups entries instead of karpenterNodePools"
    fix = (f'set metadata.version: "{fits[-1]}" (the pools work on {", ".join(fits)}), or {move}' if fits
           else move)
    return [Problem(
        "metadata.version", kubernetes_version,
        f"karpenterNodePools run on the Karpenter efa-stack installs, v{KARPENTER_VERSION}, which supports Kubernetes "
        f"{low} to {high}: on {kubernetes_version} its controller fails with \"karpenter is not compatible with "
        "kubernetes version\"",
        fix,
    )]

