"""A node group as planned: its instance type, interfaces, sizes, capacity, labels and taints.

:mod:`efa_stack.planning.node_shapes` makes one :class:`NodeGroupPlan` per node group and per Karpenter pool; every
other planning module, construct and chart reads it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from efa_stack import contract, names
from efa_stack.planning.addons import NodeRepairPlan
from efa_stack.planning.catalog import InstanceType
from efa_stack.planning.layout import Interface, describe, efa_devices
from efa_stack.planning.node_extras import NodeUpdatePlan
from efa_stack.planning.tuning import KubeletTuning, guaranteed_cpus
from efa_stack.spec.models import MAX_NODES_PER_NODE_GROUP


@dataclass(frozen=True)
class NodeGroupPart:
    """One EKS managed node group of a spec node group (:attr:`NodeGroupPlan.parts`).

    EKS caps a managed node group at :data:`efa_stack.spec.models.MAX_NODES_PER_NODE_GROUP` nodes, so a spec
    group with a larger ``maxSize`` becomes several EKS node groups of the same settings. The spec group stays one
    logical group: every part carries its ``efa-stack.io/node-group`` label, so jobs, dashboards and checks that
    select nodes by that label see all of them.
    """

    name: str
    """The EKS node group name (:func:`efa_stack.names.eks_nodegroup_part_name`)."""
    index: int
    """1, 2, ... for a split group; 0 for the only part of a group that is not split."""
    min_size: int
    desired_size: int
    max_size: int


def part_count(max_size: int, per_group: int = MAX_NODES_PER_NODE_GROUP) -> int:
    """How many EKS node groups hold ``max_size`` nodes, at most ``per_group`` each."""
    return max(1, -(-max_size // per_group))


def _even(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` shares that differ by at most one, the larger shares first."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def split_sizes(
    min_size: int, desired_size: int, max_size: int, per_group: int = MAX_NODES_PER_NODE_GROUP,
) -> list[tuple[int, int, int]]:
    """(min, desired, max) of each part when ``max_size`` nodes are split over the fewest groups of at most
    ``per_group``: each of the three sizes is split evenly, the larger shares first, which keeps
    min <= desired <= max in every part (the shares of a smaller total are never larger) and every maxSize >= 1
    (there are no more parts than nodes)."""
    n = part_count(max_size, per_group)
    return list(zip(_even(min_size, n), _even(desired_size, n), _even(max_size, n)))


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class LustreEfaClient:
    """AWS's EFA client setup for FSx for Lustre on a node group's nodes (:func:`efa_stack.planning.lustre_efa.client_of`)."""

    gds: bool = False
    """Run the setup optimized for GPUDirect Storage (``setup.sh --optimized-for-gds``)."""
    lnet_interfaces: int | None = None
    """The @efa LNet interfaces the setup binds on the instance type (data/fsx_lustre_efa.json, at most the node's
    EFA devices); None: no figure, verify expects at least one."""


@dataclass(frozen=True)
class UltraServerNodes:
    """What the nodes of an UltraServer node group (NVIDIA Grace Blackwell, ``p6e-gb200.36xlarge``) need beyond an EFA
    GPU group's (:func:`efa_stack.planning.ultraserver.ultraserver_nodes`, data/ultraservers.json)."""

    ultra_server_type: str
    """The UltraServer type of the group's Capacity Block (``u-p6e-gb200x72``)."""
    domain_nodes: int
    """Instances in one UltraServer, one NVLink domain (``nvidia.com/gpu.clique``): 18 in a ``u-p6e-gb200x72``."""
    driver_branch: str
    """The NVIDIA driver branch the nodes must run (``580``); ``verify --acceptance`` reads it on the nodes."""
    module_options: tuple[tuple[str, str], ...] = ()
    """``NVreg_<name>=<value>`` options of the ``nvidia`` kernel module the user data sets (``GrdmaPciTopoCheckOverride``,
    ``1`` on EFA groups); ``verify --acceptance`` reads them back from ``/proc/driver/nvidia/params``."""
    local_storage: str = "RAID0"
    """nodeadm's instance store policy (``NodeConfig`` ``spec.instance.localStorage.strategy``)."""


@dataclass(frozen=True)
class ComputeDomainPlan:
    """The ComputeDomain of one job on an UltraServer node group (:func:`efa_stack.planning.ultraserver.compute_domain_for`):
    the NVIDIA DRA driver sets up IMEX channels across the job's nodes, and the workers claim one through the
    ``ResourceClaimTemplate`` the driver creates for it."""

    name: str
    namespace: str
    channel_claim_template: str
    """The ``ResourceClaimTemplate`` the driver creates from the ComputeDomain (``spec.channel.resourceClaimTemplate.name``)."""
    domain_nodes: int
    """Instances in one NVLink domain of the group."""
    within_domain: bool
    """The job's workers fit one NVLink domain: they are kept in one ``nvidia.com/gpu.clique``."""


@dataclass(frozen=True)
class NodeGroupPlan:
    """Everything derived for one managed node group, or for the nodes of one Karpenter pool
    (:attr:`efa_stack.planning.karpenter.KarpenterPoolPlan.group`): both are planned from the fields they share by
    :func:`efa_stack.planning.node_shapes.plan_shape`."""

    name: str
    instance: InstanceType
    role: contract.Role
    availability_zones: tuple[str, ...]
    min_size: int
    desired_size: int
    max_size: int
    volume_size_gib: int
    volume_type: str
    efa_enabled: bool
    interface_layout: str
    interfaces: tuple[Interface, ...]
    placement_group: bool
    capacity: contract.CapacityKind
    reservation_id: str | None
    ami_type: str
    labels: dict[str, str] = field(hash=False)
    taints: tuple[Taint, ...]
    tags: dict[str, str] = field(hash=False, default_factory=dict)
    hugepages_2mi_mib: int = 0
    """MiB of 2 MiB hugepages each node reserves at boot (:func:`efa_stack.planning.nccl.node_hugepages_mib`, the one
    rule); the launch template's user data reserves them and the NCCL-tests workers request them."""
    lustre_client: bool = False
    """Install the Lustre client at boot (every managed node group, the ones that mount the FSx claim)."""
    lustre_efa: LustreEfaClient | None = None
    """AWS's EFA client setup at boot, for an EFA-enabled file system (``storage.efa``); None: Lustre over TCP only."""
    volume_iops: int | None = None
    """Provisioned IOPS of the root volume (gp3, io1, io2; required for io1/io2)."""
    volume_throughput: int | None = None
    """Provisioned throughput of a gp3 root volume, MiB/s."""
    placement_group_name: str | None = None
    """An existing placement group the launch template uses (no group is created for it)."""
    node_repair: NodeRepairPlan | None = None
    """EKS node auto repair (:func:`efa_stack.planning.addons.node_repair_plan`: on for GPU/Neuron node groups unless the
    spec's nodeRepairConfig says otherwise), or None when off."""
    kubelet: KubeletTuning = field(default_factory=KubeletTuning)
    """The kubelet's CPU manager and Topology Manager settings (:func:`efa_stack.planning.tuning.kubelet_tuning`: static,
    restricted, pod scope on GPU/Neuron node groups unless ``kubeletExtraConfig`` says otherwise); the launch
    template's user data writes them into the nodeadm ``NodeConfig``."""
    node_role_arn: str | None = None
    """An existing node role (eksctl ``iam.instanceRoleARN``); None: efa-stack's node role."""
    node_role_name: str | None = None
    """The name of the node group's own role (eksctl ``iam.instanceRoleName``); None: CloudFormation names it."""
    node_managed_policies: tuple[str, ...] = ()
    """Managed policies beside efa-stack's node policies (AWS managed names or ARNs; eksctl ``iam``): the node
    group then gets its own node role."""
    node_inline_policies: tuple[str, ...] = ()
    """eksctl ``iam.withAddonPolicies`` names mapped to inline statements
    (:data:`efa_stack.planning.node_extras.ADDON_INLINE_POLICIES`)."""
    instance_name: str | None = None
    """The instances' ``Name`` tag (eksctl ``instancePrefix``/``instanceName``); None: no Name tag."""
    key_name: str | None = None
    """The EC2 key pair on the nodes (eksctl ``ssh.publicKeyName``, whatever ``allow`` says)."""
    node_config: str | None = None
    """The user's nodeadm ``NodeConfig`` (eksctl ``overrideBootstrapCommand``), merged in the user data."""
    pre_bootstrap_commands: tuple[str, ...] = ()
    """Shell commands run at boot before the node joins (eksctl ``preBootstrapCommands``)."""
    ami_id: str | None = None
    """A custom AMI (eksctl ``ami``): the launch template names it, its user data carries the cluster's details
    for nodeadm, and the node group has no AMI type; None: the EKS-optimized AMI of ``ami_type``."""
    instance_types: tuple[str, ...] = ()
    """eksctl ``instanceTypes`` of a node group without EFA (``instance`` is the first); empty: ``instance`` only."""
    spot: bool = False
    """Spot capacity (eksctl ``spot``)."""
    subnet_ids: tuple[str, ...] = ()
    """The existing private subnets the node group names (eksctl ``subnets``); empty: its zones' private subnets."""
    node_repair_overrides: tuple[tuple[str, str, int, str], ...] = ()
    """eksctl ``nodeRepairConfig.nodeRepairConfigOverrides``: (condition, reason, minutes, action) each."""
    update: NodeUpdatePlan = field(default_factory=NodeUpdatePlan)
    """Nodes a version update replaces at once (eksctl ``updateConfig``); unset: EKS's default, one at a time."""
    devices: contract.DeviceMechanism = contract.DEVICES_PLUGIN
    """How pods get the nodes' devices: ``plugin`` (the device plugins) or ``dra`` (the DRA drivers; the nodes carry
    ``efa-stack.io/devices: dra``, :mod:`efa_stack.planning.dra`)."""
    reservation_resource_group_arn: str | None = None
    """A resource group of Capacity Blocks the launch template targets instead of ``reservation_id`` (an UltraServer
    node group's, eksctl ``capacityReservationResourceGroupARN``)."""
    release_version: str | None = None
    """The EKS-optimized AMI release of the nodes (eksctl ``releaseVersion``, ``1.35.6-20260714``): the node group's
    ``ReleaseVersion``; None: the release EKS recommends when the group is created."""
    ultraserver: UltraServerNodes | None = None
    """What an UltraServer node group's nodes need (:class:`UltraServerNodes`); None for every other group."""
    spec_path: str = ""
    """Where the spec declares the group: ``managedNodeGroups[i]``, ``karpenterNodePools[i]`` (a pool's nodes) or
    ``systemNodeGroup``; problems found later (by the job checks, the address plan) name its fields from here."""

    def node_repair_cfn(self) -> dict[str, object] | None:
        """CloudFormation ``NodeRepairConfig`` of the node group (None: repair off)."""
        if self.node_repair is None:
            return None
        overrides = [
            {"NodeMonitoringCondition": c, "NodeUnhealthyReason": r, "MinRepairWaitTimeMins": m, "RepairAction": a}
            for c, r, m, a in self.node_repair_overrides
        ]
        return {**self.node_repair.cfn(), **({"NodeRepairConfigOverrides": overrides} if overrides else {})}

    @property
    def instance_type(self) -> str:
        return self.instance.name

    @property
    def parts(self) -> tuple[NodeGroupPart, ...]:
        """The EKS managed node groups this spec group becomes: one named as the spec group while ``maxSize`` fits
        EKS's per-group quota, else ``<name>-1``, ``<name>-2``, ... with the sizes split evenly
        (:func:`split_sizes`). Every part has this plan's settings: the same launch template contents, labels,
        taints, subnet, capacity reservation (several node groups may target one reservation) and placement group
        (the cluster stack creates one group that all parts launch into)."""
        sizes = split_sizes(self.min_size, self.desired_size, self.max_size)
        if len(sizes) == 1:
            return (NodeGroupPart(names.eks_nodegroup_name(self.name), 0, *sizes[0]),)
        return tuple(
            NodeGroupPart(names.eks_nodegroup_part_name(self.name, i), i, *s) for i, s in enumerate(sizes, start=1)
        )

    @property
    def guaranteed_cpus(self) -> int:
        """Whole CPUs one Guaranteed pod can request per node (:func:`efa_stack.planning.tuning.guaranteed_cpus`); the
        NCCL-tests workers request this many."""
        return guaranteed_cpus(self.instance)

    @property
    def availability_zone(self) -> str:
        """The single AZ of an EFA node group (the first AZ otherwise)."""
        return self.availability_zones[0]

    @property
    def gpus_per_node(self) -> int:
        return self.instance.gpus if self.instance.accelerator == "nvidia" else 0

    @property
    def neuron_devices_per_node(self) -> int:
        return self.instance.neuron_devices

    @property
    def efa_devices_per_node(self) -> int:
        return efa_devices(self.interfaces) if self.efa_enabled else 0

    def layout_summary(self) -> str:
        return describe(self.interfaces) if self.interfaces else "1 ENA (no EFA)"

    def capacity_summary(self) -> str:
        if self.spot:
            return "spot"
        if self.capacity == contract.ON_DEMAND:
            return contract.ON_DEMAND
        return f"{self.capacity} {self.reservation_id or self.reservation_resource_group_arn}"

    def parts_summary(self) -> str:
        """``""``, or ``, as 3 EKS node groups p5-1..p5-3 (334/333/333 max)`` for a split group."""
        parts = self.parts
        if len(parts) == 1:
            return ""
        return (f", as {len(parts)} EKS node groups {parts[0].name}..{parts[-1].name} "
                f"({'/'.join(str(p.max_size) for p in parts)} max)")


def taints_of(groups: Iterable[NodeGroupPlan]) -> tuple[Taint, ...]:
    """The distinct taints of ``groups``, sorted by (key, effect) so output is stable."""
    seen: dict[tuple[str, str], Taint] = {}
    for g in groups:
        for t in g.taints:
            seen.setdefault((t.key, t.effect), t)
    return tuple(seen[k] for k in sorted(seen))
