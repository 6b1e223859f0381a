"""A node group as planned: its instance type, interfaces, sizes, capacity, labels and taints.

:func:`efa_stack.planning.plan.build_plan` makes one :class:`NodeGroupPlan` per node group; every other
planning module, construct and chart reads it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from efa_stack import contract
from efa_stack.planning.addons import NodeRepairPlan
from efa_stack.planning.catalog import InstanceType
from efa_stack.planning.layout import Interface, describe, efa_devices
from efa_stack.planning.tuning import KubeletTuning, guaranteed_cpus


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeGroupPlan:
    """Everything derived for one managed node group."""

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
    """The EC2 key pair on the nodes (eksctl ``ssh.publicKeyName`` with ``allow: true``)."""
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
        return f"{self.capacity} {self.reservation_id}"



def taints_of(groups: Iterable[NodeGroupPlan]) -> tuple[Taint, ...]:
    """The distinct taints of ``groups``, sorted by (key, effect) so output is stable."""
    seen: dict[tuple[str, str], Taint] = {}
    for g in groups:
        for t in g.taints:
            seen.setdefault((t.key, t.effect), t)
    return tuple(seen[k] for k in sorted(seen))
