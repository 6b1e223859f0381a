"""Node groups and Karpenter pools planned from one shape: the fields both kinds declare
(:class:`efa_stack.spec.models.NodeGroupBase`) are checked and derived once, by :func:`plan_shape`, and each kind adds
its own around them: :func:`plan_managed_group` (sizes, zones or subnets, capacity, Spot, node repair, eksctl's IAM,
bootstrap and SSH fields) and :func:`plan_pool` (one zone, its reservations, the static replicas, the AMI alias).

Both end in a :class:`efa_stack.planning.node_groups.NodeGroupPlan`, which every job check, Kueue flavor and the
address plan read alike; a pool's is :attr:`efa_stack.planning.karpenter.KarpenterPoolPlan.group`. eksctl keeps
its node kinds' common fields the same way (eksctl-io/eksctl@v0.230.0 pkg/apis/eksctl.io/v1alpha5/types.go
``NodeGroupBase``).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from efa_stack import contract, names
from efa_stack.planning import catalog, dra, ultraserver
from efa_stack.planning.addons import NodeRepairPlan, node_repair_plan
from efa_stack.planning.catalog import InstanceType, UnknownInstanceType
from efa_stack.planning.karpenter import (
    KarpenterPlan,
    KarpenterPoolPlan,
    ami_first_release,
    ami_problems,
    capacity_problems,
    karpenter_supports,
    kubernetes_problems,
    layout_problems,
    placement_group_name,
    volume_problems,
)
from efa_stack.planning.layout import Interface, LayoutError, interface_layout
from efa_stack.planning.limits import validate_volume
from efa_stack.planning.nccl import node_hugepages_mib
from efa_stack.planning.node_extras import (
    CapacityChoice,
    NodeExtras,
    NodeUpdatePlan,
    capacity_of,
    node_extras,
    node_update_of,
)
from efa_stack.planning.node_groups import NodeGroupPlan, Taint, UltraServerNodes
from efa_stack.planning.node_software import ami_driver_problems
from efa_stack.planning.tuning import KubeletTuning, kubelet_tuning
from efa_stack.planning.versions import offered
from efa_stack.planning.versions import today as versions_today
from efa_stack.planning.vpc import ExistingVpc, group_subnets, zone_problems
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import (
    DEFAULT_NODE_COUNT,
    DEFAULT_NODE_TYPE,
    ClusterSpec,
    KarpenterNodePoolSpec,
    ManagedNodeGroupSpec,
    NcclTest,
    NodeGroupBase,
    Placement,
    SystemNodeGroup,
)


@dataclass(frozen=True)
class NodeContext:
    """What planning one node group or pool needs of the rest of the cluster."""

    cluster: str
    """``metadata.name`` (instance Name tags, placement group names)."""
    zones: tuple[str, ...]
    """The cluster's availability zones (:func:`efa_stack.planning.vpc.cluster_zones`)."""
    existing: ExistingVpc | None = None
    nccl: NcclTest = field(default_factory=NcclTest)
    """``ncclTest``: its hugepages size what the EFA GPU nodes reserve (:func:`efa_stack.planning.nccl.node_hugepages_mib`)."""
    lustre: bool = False
    """The spec has FSx for Lustre storage: every node installs the Lustre client."""
    kubernetes_version: str = ""
    today: datetime.date = field(default_factory=versions_today)
    """The day the Kubernetes versions EKS offers are judged on (a pool's version bound names them)."""


NO_EXTRAS = NodeExtras()
"""A pool's eksctl node group extras: none (no own role, name tag, key pair, bootstrap or custom AMI)."""
NO_UPDATE = NodeUpdatePlan()
"""A pool's update settings: EKS's defaults (a pool is no EKS node group; Karpenter replaces its nodes)."""


@dataclass(frozen=True)
class Shape:
    """The shared fields of one node group or pool, planned on its instance type."""

    instance: InstanceType
    role: contract.Role
    interfaces: tuple[Interface, ...]
    placement_group: bool
    """The stack creates a cluster placement group for it."""
    placement_group_name: str | None
    """The existing placement group it names (none is created then)."""
    labels: dict[str, str] = field(hash=False)
    taints: tuple[Taint, ...]
    kubelet: KubeletTuning

    def plan(
        self, spec: NodeGroupBase, ctx: NodeContext, *, spec_path: str, zones: tuple[str, ...],
        sizes: tuple[int, int, int], efa: bool, capacity: contract.CapacityKind, reservation_id: str | None,
        extras: NodeExtras = NO_EXTRAS, node_repair: NodeRepairPlan | None = None,
        node_repair_overrides: tuple[tuple[str, str, int, str], ...] = (), tags: Mapping[str, str] | None = None,
        subnet_ids: tuple[str, ...] = (), instance_types: tuple[str, ...] = (), spot: bool = False,
        update: NodeUpdatePlan = NO_UPDATE, reservation_resource_group_arn: str | None = None,
        release_version: str | None = None, ultraserver_nodes: UltraServerNodes | None = None,
    ) -> NodeGroupPlan:
        """The :class:`NodeGroupPlan` of this shape with what its kind decided (zones, sizes, capacity, ...)."""
        return NodeGroupPlan(
            name=spec.name,
            instance=self.instance,
            role=self.role,
            availability_zones=zones,
            min_size=sizes[0],
            desired_size=sizes[1],
            max_size=sizes[2],
            volume_size_gib=spec.volume_size,
            volume_type=spec.volume_type,
            efa_enabled=efa,
            interface_layout=spec.interface_layout,
            interfaces=self.interfaces,
            placement_group=self.placement_group,
            placement_group_name=self.placement_group_name,
            volume_iops=spec.volume_iops,
            volume_throughput=spec.volume_throughput,
            capacity=capacity,
            reservation_id=reservation_id,
            ami_type=ami_type(self.instance),
            labels=self.labels,
            taints=self.taints,
            tags=dict(tags or {}),
            hugepages_2mi_mib=node_hugepages_mib(self.role, efa, ctx.nccl),
            # Every node group and pool can run pods that mount the claim (the storage plan's tolerations
            # cover all of them), so every one gets the client.
            lustre_client=ctx.lustre,
            node_repair=node_repair,
            kubelet=self.kubelet,
            node_role_arn=extras.node_role_arn,
            node_role_name=extras.node_role_name,
            node_managed_policies=extras.managed_policies,
            node_inline_policies=extras.inline_policies,
            instance_name=extras.instance_name,
            key_name=extras.key_name,
            node_config=extras.node_config,
            pre_bootstrap_commands=extras.pre_bootstrap_commands,
            ami_id=extras.ami_id,
            node_repair_overrides=node_repair_overrides,
            update=update,
            subnet_ids=subnet_ids,
            instance_types=instance_types,
            spot=spot,
            devices=spec.devices,
            spec_path=spec_path,
            reservation_resource_group_arn=reservation_resource_group_arn,
            release_version=release_version,
            ultraserver=ultraserver_nodes,
        )


def ami_type(instance: InstanceType) -> str:
    """The EKS AMI type of nodes of ``instance`` (AL2023, by architecture and accelerator)."""
    arch = "ARM_64" if instance.arm64 else "X86_64"
    if instance.accelerator == "nvidia":
        return f"AL2023_{arch}_NVIDIA"
    if instance.accelerator == "neuron":
        return "AL2023_X86_64_NEURON"
    return f"AL2023_{arch}_STANDARD"


def efa_alternatives(instance: InstanceType, otherwise: str) -> str:
    """The fix for an instance type without EFA: its family's EFA sizes, else the catalog; or ``otherwise``."""
    same_family = [i.name for i in catalog.efa_capable() if i.family == instance.family]
    if same_family:
        return f"use an EFA-capable {instance.family} size ({', '.join(same_family[:6])}) or {otherwise}"
    return f"choose an EFA-capable instance type (see `efa-stack catalog list --efa`) or {otherwise}"


def lookup(
    field_name: str, name: str, problems: list[Problem], accept: Callable[[InstanceType], bool] | None = None,
) -> InstanceType | None:
    """The catalog's instance type ``name``, or None with a problem at ``field_name`` (unknown, or an accelerator
    efa-stack has no device plugin for); an unknown name's fix suggests only types ``accept`` takes."""
    try:
        instance = catalog.get(name)
    except UnknownInstanceType as exc:
        problems.append(ultraserver.unknown_type_problem(field_name, name)
                        or Problem(field_name, name, "unknown instance type", exc.advice(accept)))
        return None
    unsupported = instance.unsupported_accelerator
    if unsupported is not None:
        problems.append(Problem(
            field_name, name,
            f"{name} carries {unsupported} accelerators, which efa-stack does not support (no device plugin)",
            "use an NVIDIA GPU type (e.g. p5.48xlarge, p4d.24xlarge, g6e.48xlarge), an AWS Trainium or "
            "Inferentia type (trn2.48xlarge, inf2.48xlarge), or a CPU type",
        ))
        return None
    return instance


def efa_usable(it: InstanceType) -> bool:
    """An instance type an EFA node group or pool can use: EFA and an accelerator efa-stack supports."""
    return it.efa_supported and it.unsupported_accelerator is None


def _known_with_efa(name: str) -> bool:
    return name in catalog.names() and efa_usable(catalog.get(name))


def sizes_of(
    prefix: str, min_size: int | None, desired: int | None, max_size: int | None, problems: list[Problem],
) -> tuple[int, int, int]:
    """(min, desired, max) with eksctl's defaults, checked min <= desired <= max."""
    # eksctl-io/eksctl@v0.230.0 pkg/apis/eksctl.io/v1alpha5/validation.go (managed node groups): minSize
    # defaults to desiredCapacity, or DefaultNodeCount (2) without either; maxSize to desiredCapacity, else
    # minSize, and at least DefaultMaxSize (1); desiredCapacity to minSize.
    if min_size is None:
        min_size = desired if desired is not None else DEFAULT_NODE_COUNT
    d = min_size if desired is None else desired
    m = max(d, min_size, 1) if max_size is None else max_size
    if not (min_size <= d <= m):
        problems.append(Problem(
            f"{prefix}.minSize/desiredCapacity/maxSize", {"minSize": min_size, "desiredCapacity": d, "maxSize": m},
            "sizes must satisfy minSize <= desiredCapacity <= maxSize",
            "raise maxSize or lower minSize/desiredCapacity so that minSize <= desiredCapacity <= maxSize",
        ))
    return min_size, d, m


def _placement(
    prefix: str, wanted: bool | str | None, placement: Placement | None, efa: bool, cap_type: contract.CapacityKind,
    problems: list[Problem],
) -> tuple[bool, str | None]:
    """(use a placement group, the existing group's name or None) for ``placementGroup`` (``wanted``) and eksctl's
    ``placement`` (node groups only).

    Default: a new cluster placement group for on-demand EFA node groups and pools only. A capacity
    reservation's instances are in a placement group only if the reservation was created in it (EC2
    User Guide, "Capacity Reservations in cluster placement groups", cr-cpg), and a new group on a
    reservation node group finds no capacity (eksctl-io/eksctl#7949; eksctl@99984ad
    pkg/cfn/builder/managed_launch_template.go creates none when a capacity reservation is set).
    """
    named = placement.group_name if placement is not None else None
    if isinstance(wanted, str):
        if named is not None and named != wanted:
            problems.append(Problem(
                f"{prefix}.placement.groupName", named, f"placementGroup already names the group {wanted!r}",
                "keep one of placementGroup: <name> and placement.groupName",
            ))
        named = wanted
    elif named is not None and wanted is not None:
        problems.append(Problem(
            f"{prefix}.placementGroup", wanted, "placement.groupName already names an existing placement group",
            "remove placementGroup (placement.groupName is the group the nodes use)",
        ))
    field_name = f"{prefix}.placementGroup" if isinstance(wanted, str) or placement is None \
        else f"{prefix}.placement.groupName"
    shown = named if named is not None else wanted
    if (named is not None or wanted is True) and cap_type == contract.CAPACITY_BLOCK:
        problems.append(Problem(
            field_name, shown, "Capacity Blocks are already co-located; a placement group conflicts with the block",
            "remove placementGroup (or set it to false)",
        ))
    if (named is not None or wanted is True) and not efa:
        problems.append(Problem(
            field_name, shown, "a cluster placement group is only used by EFA node groups",
            "set efaEnabled: true or remove placementGroup",
        ))
    if wanted is True and cap_type == contract.RESERVATION:
        problems.append(Problem(
            f"{prefix}.placementGroup", True,
            "a capacity reservation's instances are in a placement group only if the reservation was created "
            "in it; a new group would find no reserved capacity",
            "name the group the reservation was created in (placementGroup: <name>) or remove placementGroup",
        ))
    if named is not None:
        return True, named
    if wanted is None:
        return efa and cap_type == contract.ON_DEMAND, None
    return bool(wanted), None


def plan_shape(
    prefix: str, spec: NodeGroupBase, instance: InstanceType | None, problems: list[Problem], *, efa: bool,
    capacity: contract.CapacityKind, refuse_no_efa: Callable[[InstanceType], Problem],
    placement: Placement | None = None, tags: Mapping[str, str] | None = None,
) -> Shape | None:
    """Check and derive the fields every node group and pool declares (``spec``, at ``prefix``) on ``instance``:
    the root volume, the placement group, the EFA interfaces, labels, taints and the kubelet's tuning. None when
    the instance type is unknown or an EFA shape gets no interfaces (the problem says why); problems of the shape
    are added to ``problems`` either way, so that one run reports them all.

    ``refuse_no_efa``: the kind's problem for an EFA shape on a type without EFA (its fix differs per kind);
    ``placement``: eksctl's ``placement`` of a node group; ``tags``: a node group's tags (checked as AWS tags)."""
    problems.extend(validate_volume(prefix, spec.volume_type, spec.volume_size, spec.volume_iops, spec.volume_throughput))
    placed, existing_group = _placement(prefix, spec.placement_group, placement, efa, capacity, problems)
    if spec.ena_on_efa_cards and spec.interface_layout != "current":
        problems.append(Problem(
            f"{prefix}.enaOnEfaCards", True, "extra ENA interfaces are part of the current layout only",
            "set interfaceLayout: current or remove enaOnEfaCards",
        ))
    for key in spec.labels:
        if key.startswith(contract.LABEL_PREFIX):
            problems.append(Problem(
                f"{prefix}.labels", key, f"labels under {contract.LABEL_PREFIX} are set by efa-stack",
                "choose another label key",
            ))
    problems.extend(names.node_group_problems(
        prefix, spec.name, spec.labels, [(t.key, t.value, t.effect) for t in spec.taints], tags or {},
    ))
    interfaces: tuple[Interface, ...] = ()
    if instance is not None and efa:
        if not instance.efa_supported:
            problems.append(refuse_no_efa(instance))
        else:
            try:
                interfaces = interface_layout(instance, spec.interface_layout, ena_on_efa_cards=spec.ena_on_efa_cards)
            except LayoutError as exc:
                problems.append(Problem(f"{prefix}.interfaceLayout", spec.interface_layout, str(exc), "use interfaceLayout: current"))
    if instance is not None and placed and "cluster" not in instance.placement_strategies:
        problems.append(Problem(
            f"{prefix}.placementGroup", True, f"{instance.name} does not support cluster placement groups",
            "set placementGroup: false",
        ))
    if instance is None or (efa and not interfaces):
        return None
    # A shape with problems of its own still plans (build_plan raises before the plan is used), so that the
    # job and storage checks judge it too and every problem is reported at once.
    role: contract.Role = "gpu" if instance.accelerator == "nvidia" else "neuron" if instance.accelerator == "neuron" else "cpu"
    taints = [Taint(t.key, t.value, t.effect) for t in spec.taints]
    auto_key = contract.GPU_TAINT_KEY if role == "gpu" else contract.NEURON_TAINT_KEY if role == "neuron" else None
    if auto_key and not any(t.key == auto_key for t in taints):
        taints.append(Taint(auto_key, "true", "NoSchedule"))
    labels = dict(spec.labels)
    labels.update({
        contract.LABEL_NODE_GROUP: names.node_group_label_value(spec.name),
        contract.LABEL_ROLE: role,
        contract.LABEL_EFA: "true" if efa else "false",
    })
    if instance.accelerator:
        labels[contract.LABEL_ACCELERATOR] = instance.accelerator
    if spec.devices == contract.DEVICES_DRA:
        labels[contract.LABEL_DEVICES] = contract.DEVICES_DRA
    extra = spec.kubelet_extra_config
    tuning, tuning_problems = kubelet_tuning(
        prefix, role in ("gpu", "neuron"),
        extra.model_dump(by_alias=True, exclude_unset=True) if extra is not None else None, instance.vcpus,
    )
    problems.extend(tuning_problems)
    return Shape(
        instance=instance, role=role, interfaces=interfaces, placement_group=bool(placed) and existing_group is None,
        placement_group_name=existing_group, labels=labels, taints=tuple(taints), kubelet=tuning,
    )


# --- managed node groups ------------------------------------------------------------------------------------


def _instance_types(
    prefix: str, ng: ManagedNodeGroupSpec, problems: list[Problem],
) -> tuple[InstanceType | None, tuple[str, ...]]:
    """The node group's instance type (the first of eksctl's ``instanceTypes``) and, for several, all of them."""
    if ng.instance_types is None:
        return lookup(f"{prefix}.instanceType", ng.instance_type or DEFAULT_NODE_TYPE, problems,
                      efa_usable if ng.efa_enabled else None), ()
    if ng.instance_type is not None:
        problems.append(Problem(
            f"{prefix}.instanceTypes", list(ng.instance_types), "instanceType and instanceTypes are both given",
            "keep one of them (eksctl refuses both too)",
        ))
    if ng.efa_enabled:
        problems.append(Problem(
            f"{prefix}.instanceTypes", list(ng.instance_types),
            "an EFA node group has one instance type (its interfaces, placement group and NCCL job follow it)",
            f"use instanceType: {next((t for t in ng.instance_types if _known_with_efa(t)), ng.instance_types[0])}, "
            "and another node group for each further type",
        ))
    found = [lookup(f"{prefix}.instanceTypes[{j}]", t, problems) for j, t in enumerate(ng.instance_types)]
    known = [t for t in found if t is not None]
    kinds = {(t.accelerator, t.arm64) for t in known}
    if len(kinds) > 1:
        problems.append(Problem(
            f"{prefix}.instanceTypes", list(ng.instance_types),
            "the types differ in accelerator or architecture, so one AMI type cannot serve them",
            "list types of one kind (all CPU x86_64, all NVIDIA x86_64, ...) per node group",
        ))
    if len(known) != len(found):
        return None, ()
    return known[0], tuple(ng.instance_types) if len(ng.instance_types) > 1 else ()


def _group_zones(
    prefix: str, ng: ManagedNodeGroupSpec, ctx: NodeContext, problems: list[Problem],
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(zones, subnet ids) of a node group: its ``availabilityZones`` or ``subnets``, checked against the cluster's;
    an EFA node group takes one zone."""
    azs = tuple(ng.availability_zones) if ng.availability_zones else ()
    subnet_ids: tuple[str, ...] = ()
    if ng.subnets is not None:
        subnet_ids, subnet_azs = group_subnets(
            prefix, list(ng.subnets), ng.efa_enabled, ng.availability_zones, ctx.existing, problems,
        )
        azs = azs or subnet_azs
    # eksctl: more than one zone is an error (validation.go); none: the first subnet (pkg/vpc/vpc.go
    # "EFA requires all nodes be in a single subnet, arbitrarily choosing one"), here the cluster's first zone.
    if ng.efa_enabled and len(azs) > 1:
        problems.append(Problem(
            f"{prefix}.availabilityZones", list(azs) if azs else None,
            "an EFA node group must live in exactly one availability zone (one subnet, one placement group)",
            f"list a single zone, e.g. availabilityZones: [{ctx.zones[0] if ctx.zones else 'us-west-2a'}]",
        ))
    problems.extend(zone_problems(f"{prefix}.availabilityZones", azs, ctx.zones, ctx.existing))
    if not azs:
        azs = ctx.zones[:1] if ng.efa_enabled else ctx.zones
    return azs, subnet_ids


def _group_capacity(
    prefix: str, ng: ManagedNodeGroupSpec, problems: list[Problem], *, groups_allowed: bool = False,
) -> CapacityChoice:
    """How a node group's instances are bought (``capacity`` or eksctl's spelling), with Spot checked against it;
    ``groups_allowed``: an UltraServer node group, which may target a resource group of reservations."""
    choice = capacity_of(prefix, ng, problems, groups_allowed=groups_allowed)
    cap_type, reservation_id = choice.kind, choice.reservation_id
    if ng.spot and (ng.efa_enabled or cap_type != contract.ON_DEMAND):
        problems.append(Problem(
            f"{prefix}.spot", True,
            "Spot capacity is for node groups without EFA" if ng.efa_enabled else
            f"Spot capacity does not go with capacity {cap_type}",
            "remove spot (EFA training needs capacity that is not interrupted: on-demand, a reservation or a "
            "Capacity Block)" if ng.efa_enabled else "remove spot or the reservation",
        ))
    eksctl_capacity = ng.capacity_reservation is not None or ng.instance_market_options is not None
    if cap_type in contract.RESERVED_CAPACITY and not reservation_id and not eksctl_capacity:
        problems.append(Problem(
            f"{prefix}.capacity.reservationId", None,
            f"capacity type '{cap_type}' needs the id of the reservation to launch into",
            "add reservationId: cr-... (see `aws ec2 describe-capacity-reservations`)",
        ))
    if cap_type == contract.ON_DEMAND and reservation_id:
        problems.append(Problem(
            f"{prefix}.capacity.reservationId", reservation_id,
            "a reservation id is only used with capacity type 'reservation' or 'capacity-block'",
            "set capacity.type: reservation (or capacity-block), or remove reservationId",
        ))
    return choice


def plan_managed_group(i: int, ng: ManagedNodeGroupSpec, ctx: NodeContext, problems: list[Problem]) -> NodeGroupPlan | None:
    """The plan of ``managedNodeGroups[i]``, or None when its instance type or interfaces cannot be planned; its
    problems go to ``problems``."""
    prefix = f"managedNodeGroups[{i}]"
    instance, instance_types = _instance_types(prefix, ng, problems)
    sizes = sizes_of(prefix, ng.min_size, ng.desired_capacity, ng.max_size, problems)
    if ng.private_networking is False:
        problems.append(Problem(
            f"{prefix}.privateNetworking", False,
            "EFA nodes have several network interfaces and cannot get public IPs" if ng.efa_enabled
            else "efa-stack places nodes only in private subnets",
            "set privateNetworking: true (or remove it); nodes reach the internet through NAT",
        ))
    azs, subnet_ids = _group_zones(prefix, ng, ctx, problems)
    choice = _group_capacity(prefix, ng, problems,
                             groups_allowed=instance is not None and ultraserver.kind_of(instance.name) is not None)
    cap_type = choice.kind
    shape = plan_shape(
        prefix, ng, instance, problems, efa=ng.efa_enabled, capacity=cap_type, placement=ng.placement, tags=ng.tags,
        refuse_no_efa=lambda t: Problem(
            f"{prefix}.instanceType", ng.instance_type, "efaEnabled is true but this instance type does not support EFA",
            efa_alternatives(t, "set efaEnabled: false"),
        ),
    )
    if shape is None:
        node_extras(prefix, ng, ctx.cluster, {}, problems)  # its problems too, in the same run
        node_update_of(prefix, ng, sizes[2], problems)
        return None
    repair, repair_problems = node_repair_plan(prefix, shape.role in ("gpu", "neuron"), ng.node_repair_config)
    problems.extend(repair_problems)
    overrides = tuple(
        (o.node_monitoring_condition, o.node_unhealthy_reason, o.min_repair_wait_time_mins, o.repair_action)
        for o in (ng.node_repair_config.node_repair_config_overrides if ng.node_repair_config else [])
    )
    if overrides and repair is None:
        problems.append(Problem(
            f"{prefix}.nodeRepairConfig.nodeRepairConfigOverrides", f"{len(overrides)} overrides",
            "repair overrides are set but node repair is off", "set nodeRepairConfig.enabled: true, or remove them",
        ))
    extras = node_extras(prefix, ng, ctx.cluster, shape.kubelet.as_kubelet_config(), problems)
    if ng.devices == contract.DEVICES_DRA:
        problems.extend(dra.group_problems(
            prefix, shape.instance, efa=ng.efa_enabled, kubernetes_version=ctx.kubernetes_version))
    group = shape.plan(
        ng, ctx, spec_path=prefix, zones=azs, sizes=sizes, efa=ng.efa_enabled, capacity=cap_type,
        reservation_id=choice.reservation_id, extras=extras, node_repair=repair, node_repair_overrides=overrides,
        tags=ng.tags, subnet_ids=subnet_ids, instance_types=instance_types, spot=ng.spot,
        update=node_update_of(prefix, ng, sizes[2], problems), reservation_resource_group_arn=choice.resource_group_arn,
        release_version=ng.release_version,
        ultraserver_nodes=ultraserver.ultraserver_nodes(prefix, ng, shape.instance, choice, ctx.kubernetes_version,
                                                        problems),
    )
    problems.extend(ultraserver.release_problems(prefix, ng, group, ctx.kubernetes_version))
    return group


def plan_managed_groups(spec: ClusterSpec, ctx: NodeContext, problems: list[Problem]) -> list[NodeGroupPlan]:
    """The plans of ``managedNodeGroups`` that can be planned (each name once, ``system`` reserved)."""
    seen: set[str] = set()
    groups: list[NodeGroupPlan] = []
    for i, ng in enumerate(spec.managed_node_groups):
        if ng.name in seen or ng.name == contract.SYSTEM_NODE_GROUP:
            problems.append(Problem(
                f"managedNodeGroups[{i}].name", ng.name,
                "node group names must be unique and 'system' is reserved for the system node group",
                "choose another name",
            ))
        seen.add(ng.name)
        plan = plan_managed_group(i, ng, ctx, problems)
        if plan is not None:
            groups.append(plan)
    return groups


# --- Karpenter pools ----------------------------------------------------------------------------------------


def plan_pool(i: int, pool: KarpenterNodePoolSpec, ctx: NodeContext, problems: list[Problem]) -> KarpenterPoolPlan | None:
    """The plan of ``karpenterNodePools[i]``: an EFA shape in one zone, min 0, desired the nodes its jobs run on
    (the static replicas, else maxNodes), max maxNodes, without EKS node auto repair (a managed node group
    feature); None when its instance type or interfaces cannot be planned. Its problems go to ``problems``."""
    prefix = f"karpenterNodePools[{i}]"
    ids = list(pool.capacity_reservation_ids)
    refused = ultraserver.pool_problem(prefix, pool.instance_type)
    if refused is not None:
        problems.append(refused)
    problems.extend(capacity_problems(prefix, pool.capacity, ids, pool.replicas, pool.max_nodes))
    instance = lookup(f"{prefix}.instanceType", pool.instance_type, problems, efa_usable)
    zones = (pool.availability_zone,) if pool.availability_zone is not None else ctx.zones[:1]
    if pool.availability_zone is not None:
        problems.extend(zone_problems(f"{prefix}.availabilityZone", zones, ctx.zones, ctx.existing))
    problems.extend(volume_problems(prefix, pool.volume_size))
    shape = plan_shape(
        prefix, pool, instance, problems, efa=True, capacity=pool.capacity,
        refuse_no_efa=lambda t: Problem(
            f"{prefix}.instanceType", pool.instance_type,
            f"a Karpenter pool launches EFA nodes and {t.name} does not support EFA",
            efa_alternatives(t, "run these nodes in a managedNodeGroups entry without efaEnabled"),
        ),
    )
    if shape is None:
        return None
    if pool.devices == contract.DEVICES_DRA:
        problems.extend(dra.group_problems(
            prefix, shape.instance, efa=True, kubernetes_version=ctx.kubernetes_version, pool=True,
            pool_replicas=pool.replicas))
    desired = pool.replicas if pool.replicas is not None else pool.max_nodes
    group = shape.plan(
        pool, ctx, spec_path=prefix, zones=zones, sizes=(0, desired, pool.max_nodes), efa=True,
        capacity=pool.capacity, reservation_id=ids[0] if ids else None,
    )
    problems.extend(layout_problems(prefix, pool.interface_layout, group))
    version = ctx.kubernetes_version
    if karpenter_supports(version):  # else plan_pools' kubernetes_problems says what to change
        problems.extend(ami_problems(prefix, version, group.ami_type, pool.ami_version))
        problems.extend(ami_driver_problems(
            prefix, group, version, pool.ami_version, first_release=ami_first_release(version, group.ami_type)))
    cluster = names.eks_cluster_name(ctx.cluster)
    return KarpenterPoolPlan(
        group=group, reservation_ids=tuple(ids), replicas=pool.replicas, ami_version=pool.ami_version,
        consolidate_after=pool.consolidate_after,
        new_placement_group=placement_group_name(cluster, pool.name) if group.placement_group
        and group.placement_group_name is None else None,
    )


def plan_pools(spec: ClusterSpec, ctx: NodeContext, taken: set[str], problems: list[Problem]) -> KarpenterPlan | None:
    """The plan of ``karpenterNodePools`` (None without pools); ``taken``: the managed node groups' names."""
    if not spec.karpenter_node_pools:
        return None
    taken = {*taken, contract.SYSTEM_NODE_GROUP}
    pools: list[KarpenterPoolPlan] = []
    for i, pool in enumerate(spec.karpenter_node_pools):
        if pool.name in taken:
            problems.append(Problem(
                f"karpenterNodePools[{i}].name", pool.name, "a managed node group or another pool already has this "
                "name (or it is the reserved 'system')", "choose another name",
            ))
        taken.add(pool.name)
        planned = plan_pool(i, pool, ctx, problems)
        if planned is not None:
            pools.append(planned)
    amis = [(p.group.spec_path, p.group.ami_type, p.ami_version) for p in pools]
    problems.extend(kubernetes_problems(ctx.kubernetes_version, amis, offered(ctx.today)))
    return KarpenterPlan(pools=tuple(pools), cluster=names.eks_cluster_name(spec.metadata.name), region=spec.metadata.region)


# --- the system node group ----------------------------------------------------------------------------------


def plan_system_group(sng: SystemNodeGroup, zones: tuple[str, ...], problems: list[Problem]) -> NodeGroupPlan | None:
    """The plan of the system node group (add-ons, MPI launchers), or None when its instance type is unknown."""
    instance = lookup("systemNodeGroup.instanceType", sng.instance_type, problems, lambda it: not it.accelerator)
    if instance is not None and instance.accelerator:
        problems.append(Problem(
            "systemNodeGroup.instanceType", sng.instance_type,
            "the system node group runs add-ons and MPI launchers and should not hold accelerators",
            "use a general-purpose type such as m7i.xlarge",
        ))
    sizes = sizes_of("systemNodeGroup", sng.min_size, sng.desired_capacity, sng.max_size, problems)
    if instance is None:
        return None
    return NodeGroupPlan(
        name=contract.SYSTEM_NODE_GROUP,
        instance=instance,
        role="system",
        availability_zones=zones,
        min_size=sizes[0],
        desired_size=sizes[1],
        max_size=sizes[2],
        volume_size_gib=sng.volume_size,
        volume_type="gp3",
        efa_enabled=False,
        interface_layout="current",
        interfaces=(),
        placement_group=False,
        capacity=contract.ON_DEMAND,
        reservation_id=None,
        ami_type=ami_type(instance),
        labels={contract.LABEL_NODE_GROUP: contract.SYSTEM_NODE_GROUP, contract.LABEL_ROLE: "system", contract.LABEL_EFA: "false"},
        taints=(),
        spec_path="systemNodeGroup",
    )
