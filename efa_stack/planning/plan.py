"""Join a validated spec with the instance catalog into a plan every stack and chart reads.

A number such as "32 EFA devices on p5.48xlarge" is computed here, from the catalog, and nowhere
else: the launch template's interfaces, the node labels, the pods' resource requests and the MPI slot
counts all read it from a :class:`NodeGroupPlan`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from efa_stack import contract, names
from efa_stack.planning import catalog
from efa_stack.planning.addons import (
    CLOUDWATCH_OBSERVABILITY,
    VPC_CNI,
    AddonPlan,
    PodIdentityPlan,
    addon_plans,
    node_repair_plan,
    role_problems,
)
from efa_stack.planning.addressing import (
    AddressedGroup,
    AddressPlan,
    address_plan,
    max_pods_override_problems,
    merge_cni_env,
    pod_network_refusals,
)
from efa_stack.planning.catalog import InstanceType, UnknownInstanceType
from efa_stack.planning.image_cache import ImageCachePlan, image_cache_plan, job_images
from efa_stack.planning.image_compat import TrainingImagePlan, training_image_plan
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
    pool_field,
    with_max_pods,
)
from efa_stack.planning.layout import Interface, LayoutError, interface_layout
from efa_stack.planning.limits import (
    network_resource_count,
    validate_node_group_count,
    validate_plan_limits,
    validate_volume,
)
from efa_stack.planning.nccl import NcclJobPlan, nccl_job_plan, node_hugepages_mib, validate_nccl
from efa_stack.planning.node_extras import capacity_of, node_extras, node_update_of
from efa_stack.planning.node_groups import NodeGroupPlan, Taint
from efa_stack.planning.node_software import ami_driver_problems, ami_driver_warnings
from efa_stack.planning.observability import ObservabilityPlan, observability_plan
from efa_stack.planning.scheduling import KueuePlan, kueue_plan
from efa_stack.planning.storage import StoragePlan, storage_plan, validate_storage
from efa_stack.planning.training import TrainingJobPlan, training_job_plans
from efa_stack.planning.tuning import kubelet_tuning
from efa_stack.planning.versions import offered, version_problems, version_warnings
from efa_stack.planning.versions import today as versions_today
from efa_stack.spec.errors import Problem, SpecError
from efa_stack.spec.loader import MOVED, _rename, load_spec, parse_spec
from efa_stack.spec.models import (
    CONTROL_PLANE_LOG_TYPES,
    DEFAULT_NODE_COUNT,
    DEFAULT_NODE_TYPE,
    LOG_RETENTION_DAYS,
    Capacity,
    ClusterSpec,
    KarpenterNodePoolSpec,
    ManagedNodeGroupSpec,
    NcclTest,
    NodeRepairConfigSpec,
    SystemNodeGroup,
)


@dataclass(frozen=True)
class TrainingOperatorsPlan:
    """Which Kubeflow training controllers the cluster stack installs (:mod:`k8s.training_operators`).

    trainer: Kubeflow Trainer v2 (TrainJob) and JobSet, through the upstream Helm chart.
    pytorch_job_v1: Training Operator v1 with only its PyTorchJob controller (cdk8s charts).
    """

    trainer: bool = False
    pytorch_job_v1: bool = False

    @property
    def any(self) -> bool:
        return self.trainer or self.pytorch_job_v1


@dataclass(frozen=True)
class ExistingVpc:
    """eksctl ``vpc.id`` and ``vpc.subnets``: the VPC and subnets the stacks use instead of creating them."""

    id: str
    private_subnets: tuple[tuple[str, str], ...]
    """(subnet id, availability zone) of each private subnet, in the spec's order."""
    public_subnets: tuple[tuple[str, str], ...] = ()
    private_names: tuple[str, ...] = ()
    """The names (keys in ``vpc.subnets.private``) of ``private_subnets``, in the same order."""

    def private_subnet_ids(self, zone: str) -> tuple[str, ...]:
        return tuple(i for i, z in self.private_subnets if z == zone)


@dataclass(frozen=True)
class ClusterPlan:
    name: str
    region: str
    kubernetes_version: str
    availability_zones: tuple[str, ...]
    vpc_cidr: str
    nat_gateways: int
    interface_endpoints: bool
    endpoint_public: bool
    endpoint_private: bool
    public_access_cidrs: tuple[str, ...]
    with_oidc: bool
    bootstrap_admin: bool
    access_entries: tuple[tuple[str, tuple[tuple[str, str, tuple[str, ...]], ...]], ...]
    """(principal, ((policy ARN, scope type, namespaces), ...)) per access entry."""
    node_groups: tuple[NodeGroupPlan, ...]
    system: NodeGroupPlan
    tags: dict[str, str] = field(hash=False, default_factory=dict)
    nccl_job: NcclJobPlan | None = None
    """The NCCL-tests MPIJob (:func:`efa_stack.planning.nccl.nccl_job_plan`), or None when no node group can run it."""
    storage: StoragePlan | None = None
    """FSx for Lustre storage (:func:`efa_stack.planning.storage.storage_plan`), or None without a ``storage`` section."""
    addons: tuple[AddonPlan, ...] = ()
    """Every EKS add-on the stacks create: efa-stack's own merged with the spec's ``addons``
    (:func:`efa_stack.planning.addons.addon_plans`)."""
    observability: ObservabilityPlan = field(default_factory=ObservabilityPlan)
    """Container Insights and the dashboard (:func:`efa_stack.planning.observability.observability_plan`)."""
    training_image: TrainingImagePlan | None = None
    """The EFA PyTorch training image ``cdk deploy`` builds (:func:`efa_stack.planning.image_compat.training_image_plan`), or
    None without ``trainingImage.build``. Its URI is the cluster stack's output ``TrainingImageUri``."""
    training_operators: TrainingOperatorsPlan = TrainingOperatorsPlan()
    """The training controllers to install: those the spec's ``trainingOperators`` names and those its
    ``trainingJobs`` need (Trainer v2 for ``kind: trainjob``, Training Operator v1 for ``kind: pytorchjob``)."""
    log_types: tuple[str, ...] = CONTROL_PLANE_LOG_TYPES
    """Control-plane log types sent to CloudWatch Logs (eksctl ``cloudWatch.clusterLogging.enableTypes``)."""
    log_retention_days: int | None = None
    """Retention of the control-plane log group; None: kept forever."""
    pod_identities: tuple[PodIdentityPlan, ...] = ()
    """eksctl ``iam.podIdentityAssociations``, in spec order."""
    authentication_mode: str = "API"
    """EKS authentication mode (eksctl ``accessConfig.authenticationMode``)."""
    control_plane_tier: str | None = None
    """EKS Provisioned Control Plane tier (eksctl ``controlPlaneScalingConfig.tier``); None: EKS's default."""
    access_entry_details: tuple[tuple[str, tuple[str, ...], str | None], ...] = ()
    """(type, Kubernetes groups, Kubernetes user name) of each of ``access_entries``, in the same order."""
    existing_vpc: ExistingVpc | None = None
    """An existing VPC and its subnets (eksctl ``vpc.id``/``vpc.subnets``); None: the stack creates one."""
    warnings: tuple[str, ...] = ()
    """Things that work but that the user should know (a Kubernetes version in extended support)."""
    training_jobs: tuple[TrainingJobPlan, ...] = ()
    """The spec's ``trainingJobs`` (:func:`efa_stack.planning.training.training_job_plans`), in spec order."""
    addresses: AddressPlan | None = None
    """The private subnets and the node and pod addresses each zone takes
    (:func:`efa_stack.planning.addressing.address_plan`); None with an existing VPC."""
    kueue: KueuePlan | None = None
    """Kueue and its queues (:func:`efa_stack.planning.scheduling.kueue_plan`), or None without ``scheduling.kueue.enabled``."""
    karpenter: KarpenterPlan | None = None
    """Karpenter and its EFA pools (``karpenterNodePools``, :mod:`efa_stack.planning.karpenter`), or None without pools."""
    image_cache: ImageCachePlan | None = None
    """The ECR pull through cache for job images at scale (:mod:`efa_stack.planning.image_cache`), or None."""

    def addon(self, name: str) -> AddonPlan | None:
        """The plan of add-on ``name``, or None when no stack creates it."""
        return next((a for a in self.addons if a.name == name), None)

    @property
    def all_node_groups(self) -> tuple[NodeGroupPlan, ...]:
        return (self.system, *self.node_groups)

    @property
    def efa_node_groups(self) -> tuple[NodeGroupPlan, ...]:
        return tuple(n for n in self.node_groups if n.efa_enabled)

    @property
    def nccl_jobs(self) -> tuple[NcclJobPlan, ...]:
        """Every NCCL-tests job the charts render (zero or one today), for consumers that iterate."""
        return (self.nccl_job,) if self.nccl_job is not None else ()

    @property
    def pool_groups(self) -> tuple[NodeGroupPlan, ...]:
        """The node-group twins of the Karpenter pools (no EKS node group is created for them)."""
        return self.karpenter.groups if self.karpenter is not None else ()

    def node_group(self, name: str) -> NodeGroupPlan:
        """A managed node group or a Karpenter pool's twin, by name."""
        for n in (*self.all_node_groups, *self.pool_groups):
            if n.name == name:
                return n
        raise KeyError(name)

    def summary(self) -> str:
        lines = [
            (
                f"cluster {self.name}: EKS {self.kubernetes_version} in {self.region} "
                f"({', '.join(self.availability_zones)}), "
                + (f"existing VPC {self.existing_vpc.id}" if self.existing_vpc else f"VPC {self.vpc_cidr}")
                + (f", control plane {self.control_plane_tier}" if self.control_plane_tier else "")
            ),
        ]
        for n in self.all_node_groups:
            accel = (
                f"{n.gpus_per_node} GPU" if n.gpus_per_node else
                f"{n.neuron_devices_per_node} Neuron" if n.neuron_devices_per_node else "no accelerator"
            )
            size = f"{n.min_size}/{n.desired_size}/{n.max_size} nodes (min/desired/max)"
            lines.append(
                f"  {n.name}: {n.instance_type} in {', '.join(n.availability_zones)}, {size}, "
                f"{accel} + {n.efa_devices_per_node} EFA per node, "
                f"interfaces {n.layout_summary()}, {n.capacity_summary()}"
                + (", placement group" if n.placement_group else "") + n.parts_summary()
            )
        for p in self.karpenter.pools if self.karpenter is not None else ():
            g = p.group
            lines.append(
                f"  {g.name}: Karpenter pool of {g.instance_type} in {g.availability_zone}, up to {p.max_nodes} nodes"
                + (f" ({p.replicas} static)" if p.replicas is not None else "")
                + f", {g.gpus_per_node} GPU + {g.efa_devices_per_node} EFA per node, interfaces {g.layout_summary()}, "
                + (f"{g.capacity} {', '.join(p.reservation_ids)}" if p.reserved else contract.ON_DEMAND)
                + (f", placement group {p.placement_group_name}" if p.placement_group_name else "")
            )
        if self.addresses is not None:
            lines += self.addresses.summary_lines()
        if self.image_cache is not None:
            lines += self.image_cache.summary_lines()
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def infiniband_warnings(spec: ClusterSpec) -> list[str]:
    """Jobs over InfiniBand: EC2 instances have none, so on this cluster's node groups no device plugin
    advertises an ``rdma/*`` resource and the workers would wait Pending; said at synth, not refused, since
    the rendered manifests (dist/) can serve a cluster whose nodes have InfiniBand HCAs."""
    out = []
    jobs = [(f"trainingJobs[{i}]", j.fabric) for i, j in enumerate(spec.training_jobs)]
    if "nccl_test" in spec.model_fields_set:
        jobs.append(("ncclTest", spec.nccl_test.fabric))
    for where, fabric in jobs:
        if fabric == "infiniband":
            out.append(
                f"{where}.fabric is infiniband, but EC2 instances have no InfiniBand: on this EKS cluster its "
                "workers would stay Pending (no node advertises an rdma/* resource); use fabric: efa on an EFA "
                "node group, or tcp"
            )
    return out


def _ami_type(instance: InstanceType) -> str:
    arch = "ARM_64" if instance.arm64 else "X86_64"
    if instance.accelerator == "nvidia":
        return f"AL2023_{arch}_NVIDIA"
    if instance.accelerator == "neuron":
        return "AL2023_X86_64_NEURON"
    return f"AL2023_{arch}_STANDARD"


def _efa_alternatives(instance: InstanceType) -> str:
    same_family = [i.name for i in catalog.efa_capable() if i.family == instance.family]
    if same_family:
        return f"use an EFA-capable {instance.family} size ({', '.join(same_family[:6])}) or set efaEnabled: false"
    return "choose an EFA-capable instance type (see `efa-stack catalog list --efa`) or set efaEnabled: false"


def _sizes(
    prefix: str, min_size: int | None, desired: int | None, max_size: int | None, problems: list[Problem],
) -> tuple[int, int, int]:
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


def _lookup(
    field_name: str, name: str, problems: list[Problem], accept: Callable[[InstanceType], bool] | None = None,
) -> InstanceType | None:
    """The catalog's record of ``name``; an unknown name's fix suggests only types ``accept`` takes."""
    try:
        instance = catalog.get(name)
    except UnknownInstanceType as exc:
        problems.append(Problem(field_name, name, "unknown instance type", exc.advice(accept)))
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


def _efa_usable(it: InstanceType) -> bool:
    return it.efa_supported and it.unsupported_accelerator is None


def _known_with_efa(name: str) -> bool:
    return name in catalog.names() and _efa_usable(catalog.get(name))


def _instance_types(
    prefix: str, ng: ManagedNodeGroupSpec, problems: list[Problem],
) -> tuple[InstanceType | None, tuple[str, ...]]:
    """The node group's instance type (the first of eksctl's ``instanceTypes``) and, for several, all of them."""
    if ng.instance_types is None:
        return _lookup(f"{prefix}.instanceType", ng.instance_type or DEFAULT_NODE_TYPE, problems,
                       _efa_usable if ng.efa_enabled else None), ()
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
    found = [_lookup(f"{prefix}.instanceTypes[{j}]", t, problems) for j, t in enumerate(ng.instance_types)]
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


def _placement(
    prefix: str, ng: ManagedNodeGroupSpec, cap_type: contract.CapacityKind, problems: list[Problem],
) -> tuple[bool, str | None]:
    """(use a placement group, the existing group's name or None) for ``placementGroup``/``placement``.

    Default: a new cluster placement group for on-demand EFA node groups only. A capacity
    reservation's instances are in a placement group only if the reservation was created in it (EC2
    User Guide, "Capacity Reservations in cluster placement groups", cr-cpg), and a new group on a
    reservation node group finds no capacity (eksctl-io/eksctl#7949; eksctl@99984ad
    pkg/cfn/builder/managed_launch_template.go creates none when a capacity reservation is set).
    """
    wanted = ng.placement_group
    named = ng.placement.group_name if ng.placement is not None else None
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
    field_name = f"{prefix}.placementGroup" if isinstance(ng.placement_group, str) or ng.placement is None \
        else f"{prefix}.placement.groupName"
    shown = named if named is not None else wanted
    if (named is not None or wanted is True) and cap_type == contract.CAPACITY_BLOCK:
        problems.append(Problem(
            field_name, shown, "Capacity Blocks are already co-located; a placement group conflicts with the block",
            "remove placementGroup (or set it to false)",
        ))
    if (named is not None or wanted is True) and not ng.efa_enabled:
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
        return ng.efa_enabled and cap_type == contract.ON_DEMAND, None
    return bool(wanted), None


def _node_group(
    i: int,
    ng: ManagedNodeGroupSpec,
    cluster_azs: tuple[str, ...],
    problems: list[Problem],
    nccl: NcclTest | None = None,
    lustre: bool = False,
    cluster: str = "",
    existing: ExistingVpc | None = None,
    prefix: str | None = None,
) -> NodeGroupPlan | None:
    prefix = prefix or f"managedNodeGroups[{i}]"
    instance, instance_types = _instance_types(prefix, ng, problems)
    sizes = _sizes(prefix, ng.min_size, ng.desired_capacity, ng.max_size, problems)

    if ng.private_networking is False:
        problems.append(Problem(
            f"{prefix}.privateNetworking", False,
            "EFA nodes have several network interfaces and cannot get public IPs" if ng.efa_enabled
            else "efa-stack places nodes only in private subnets",
            "set privateNetworking: true (or remove it); nodes reach the internet through NAT",
        ))

    azs = tuple(ng.availability_zones) if ng.availability_zones else ()
    subnet_ids: tuple[str, ...] = ()
    if ng.subnets is not None:
        subnet_ids, subnet_azs = _group_subnets(prefix, ng, existing, problems)
        azs = azs or subnet_azs
    # eksctl: more than one zone is an error (validation.go); none: the first subnet (pkg/vpc/vpc.go
    # "EFA requires all nodes be in a single subnet, arbitrarily choosing one"), here the cluster's first zone.
    if ng.efa_enabled and len(azs) > 1:
        problems.append(Problem(
            f"{prefix}.availabilityZones", list(azs) if azs else None,
            "an EFA node group must live in exactly one availability zone (one subnet, one placement group)",
            f"list a single zone, e.g. availabilityZones: [{cluster_azs[0] if cluster_azs else 'us-west-2a'}]",
        ))
    for az in azs:
        if existing is not None and not existing.private_subnet_ids(az):
            problems.append(Problem(
                f"{prefix}.availabilityZones", az, "no private subnet of vpc.subnets is in that zone",
                f"use one of {', '.join(dict.fromkeys(z for _, z in existing.private_subnets))} or add a private "
                f"subnet of {az} to vpc.subnets.private",
            ))
        elif cluster_azs and az not in cluster_azs:
            problems.append(Problem(
                f"{prefix}.availabilityZones", az, "zone is not one of the cluster's availabilityZones",
                f"use one of {', '.join(cluster_azs)} or add {az} to availabilityZones",
            ))
    if not azs:
        azs = cluster_azs[:1] if ng.efa_enabled else cluster_azs

    cap_type, reservation_id = capacity_of(prefix, ng, problems)
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
    problems.extend(validate_volume(prefix, ng.volume_type, ng.volume_size, ng.volume_iops, ng.volume_throughput))
    placement, existing_group = _placement(prefix, ng, cap_type, problems)
    if ng.ena_on_efa_cards and ng.interface_layout != "current":
        problems.append(Problem(
            f"{prefix}.enaOnEfaCards", True, "extra ENA interfaces are part of the current layout only",
            "set interfaceLayout: current or remove enaOnEfaCards",
        ))
    for key in ng.labels:
        if key.startswith(contract.LABEL_PREFIX):
            problems.append(Problem(
                f"{prefix}.labels", key, f"labels under {contract.LABEL_PREFIX} are set by efa-stack",
                "choose another label key",
            ))
    problems.extend(names.node_group_problems(
        prefix, ng.name, ng.labels, [(t.key, t.value, t.effect) for t in ng.taints], ng.tags,
    ))

    interfaces: tuple[Interface, ...] = ()
    if instance is not None and ng.efa_enabled:
        if not instance.efa_supported:
            problems.append(Problem(
                f"{prefix}.instanceType", ng.instance_type,
                "efaEnabled is true but this instance type does not support EFA", _efa_alternatives(instance),
            ))
        else:
            try:
                interfaces = interface_layout(instance, ng.interface_layout, ena_on_efa_cards=ng.ena_on_efa_cards)
            except LayoutError as exc:
                problems.append(Problem(f"{prefix}.interfaceLayout", ng.interface_layout, str(exc), "use interfaceLayout: current"))
    if instance is not None and placement and "cluster" not in instance.placement_strategies:
        problems.append(Problem(
            f"{prefix}.placementGroup", True, f"{instance.name} does not support cluster placement groups",
            "set placementGroup: false",
        ))
    if instance is None or (ng.efa_enabled and not interfaces):
        node_extras(prefix, ng, cluster, {}, problems)  # its problems too, in the same run
        node_update_of(prefix, ng, sizes[2], problems)
        return None
    # A group with problems of its own still plans (build_plan raises before the plan is used), so
    # that the ncclTest and storage checks judge it too and every problem is reported at once.

    role: contract.Role = "gpu" if instance.accelerator == "nvidia" else "neuron" if instance.accelerator == "neuron" else "cpu"
    taints = [Taint(t.key, t.value, t.effect) for t in ng.taints]
    auto_key = contract.GPU_TAINT_KEY if role == "gpu" else contract.NEURON_TAINT_KEY if role == "neuron" else None
    if auto_key and not any(t.key == auto_key for t in taints):
        taints.append(Taint(auto_key, "true", "NoSchedule"))
    labels = dict(ng.labels)
    labels.update({
        contract.LABEL_NODE_GROUP: names.node_group_label_value(ng.name),
        contract.LABEL_ROLE: role,
        contract.LABEL_EFA: "true" if ng.efa_enabled else "false",
    })
    if instance.accelerator:
        labels[contract.LABEL_ACCELERATOR] = instance.accelerator
    repair, repair_problems = node_repair_plan(prefix, role in ("gpu", "neuron"), ng.node_repair_config)
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
    extra = ng.kubelet_extra_config
    tuning, tuning_problems = kubelet_tuning(
        prefix, role in ("gpu", "neuron"),
        extra.model_dump(by_alias=True, exclude_unset=True) if extra is not None else None, instance.vcpus,
    )
    problems.extend(tuning_problems)
    extras = node_extras(prefix, ng, cluster, tuning.as_kubelet_config(), problems)
    return NodeGroupPlan(
        name=ng.name,
        instance=instance,
        role=role,
        availability_zones=azs,
        min_size=sizes[0],
        desired_size=sizes[1],
        max_size=sizes[2],
        volume_size_gib=ng.volume_size,
        volume_type=ng.volume_type,
        efa_enabled=ng.efa_enabled,
        interface_layout=ng.interface_layout,
        interfaces=interfaces,
        placement_group=bool(placement) and existing_group is None,
        placement_group_name=existing_group,
        volume_iops=ng.volume_iops,
        volume_throughput=ng.volume_throughput,
        capacity=cap_type,
        reservation_id=reservation_id,
        ami_type=_ami_type(instance),
        labels=labels,
        taints=tuple(taints),
        tags=dict(ng.tags),
        hugepages_2mi_mib=node_hugepages_mib(role, ng.efa_enabled, nccl or NcclTest()),
        # Every managed node group can run pods that mount the claim (the storage plan's tolerations
        # cover all of them), so every one gets the client.
        lustre_client=lustre,
        node_repair=repair,
        kubelet=tuning,
        node_role_arn=extras.node_role_arn,
        node_role_name=extras.node_role_name,
        node_managed_policies=extras.managed_policies,
        node_inline_policies=extras.inline_policies,
        instance_name=extras.instance_name,
        key_name=extras.key_name,
        node_config=extras.node_config,
        pre_bootstrap_commands=extras.pre_bootstrap_commands,
        ami_id=extras.ami_id,
        node_repair_overrides=overrides,
        update=node_update_of(prefix, ng, sizes[2], problems),
        subnet_ids=subnet_ids,
        instance_types=instance_types,
        spot=ng.spot,
    )


def _group_subnets(
    prefix: str, ng: ManagedNodeGroupSpec, existing: ExistingVpc | None, problems: list[Problem],
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ids and zones of eksctl's ``managedNodeGroups[].subnets`` (names in vpc.subnets.private or ids)."""
    wanted = list(ng.subnets or [])
    if existing is None:
        problems.append(Problem(
            f"{prefix}.subnets", wanted, "subnets name subnets of an existing VPC (vpc.id, vpc.subnets)",
            "use availabilityZones: the node group goes in that zone's private subnet of the VPC efa-stack creates",
        ))
        return (), ()
    ids: list[str] = []
    zones: list[str] = []
    for name in wanted:
        found = next(((i, z) for key, (i, z) in zip(existing.private_names, existing.private_subnets)
                      if name in (key, i)), None)
        if found is None:
            problems.append(Problem(
                f"{prefix}.subnets", name, "not a private subnet of vpc.subnets (by name or id)",
                "name a subnet listed under vpc.subnets.private",
            ))
            continue
        ids.append(found[0])
        if found[1] not in zones:
            zones.append(found[1])
    if ng.efa_enabled and len(ids) > 1:
        problems.append(Problem(
            f"{prefix}.subnets", wanted, "an EFA node group lives in one subnet (one zone, one placement group)",
            "list one subnet",
        ))
    if ng.availability_zones and zones and set(ng.availability_zones) != set(zones):
        problems.append(Problem(
            f"{prefix}.availabilityZones", list(ng.availability_zones), f"the subnets are in {', '.join(zones)}",
            "remove availabilityZones (the subnets say the zones)",
        ))
    return tuple(ids), tuple(zones)


def _existing_vpc(
    spec: ClusterSpec, region_azs: list[str], problems: list[Problem], subnet_zones: Mapping[str, str]
) -> ExistingVpc | None:
    """eksctl's ``vpc.id`` and ``vpc.subnets`` checked: subnets with zones, two or more private zones."""
    vpc = spec.vpc
    if vpc.id is None and vpc.subnets is None:
        return None
    if vpc.id is None or vpc.subnets is None or not vpc.subnets.private:
        problems.append(Problem(
            "vpc.id" if vpc.id is None else "vpc.subnets", vpc.id if vpc.subnets is not None else None,
            "an existing VPC needs its id and its private subnets",
            "give vpc.id: vpc-... and vpc.subnets.private: {<zone>: {id: subnet-...}}, or remove both "
            "(efa-stack then creates the VPC)",
        ))
        return None
    kinds: dict[str, list[tuple[str, str, str]]] = {"private": [], "public": []}
    for kind, entries in (("private", vpc.subnets.private), ("public", vpc.subnets.public)):
        for key, subnet in entries.items():
            zone = subnet.az or (key if key in region_azs else None) or subnet_zones.get(subnet.id)
            if zone is None:
                problems.append(Problem(
                    f"vpc.subnets.{kind}.{key}.az", None,
                    "the subnet's availability zone is not known (synth does not call EC2)",
                    f"add az: <zone> to the subnet (one of {', '.join(region_azs) or 'the region zones'}), name the "
                    f"entry by its zone, or run `efa-stack lookup --spec <file>` once with AWS credentials (it "
                    f"records the subnets' zones in {contract.CDK_CONTEXT_FILE} for cdk synth)",
                ))
                continue
            if region_azs and zone not in region_azs:
                problems.append(Problem(
                    f"vpc.subnets.{kind}.{key}.az", zone, f"zone is not in region {spec.metadata.region}",
                    f"use zones of {spec.metadata.region}: {', '.join(region_azs)}",
                ))
            kinds[kind].append((key, subnet.id, zone))
    private_zones = {z for _, _, z in kinds["private"]}
    if kinds["private"] and len(private_zones) < 2:
        problems.append(Problem(
            "vpc.subnets.private", sorted(private_zones), "EKS needs subnets in at least two availability zones",
            "list private subnets of two or more zones",
        ))
    return ExistingVpc(
        id=vpc.id,
        private_subnets=tuple((i, z) for _, i, z in kinds["private"]),
        public_subnets=tuple((i, z) for _, i, z in kinds["public"]),
        private_names=tuple(k for k, _, _ in kinds["private"]),
    )


def _access_problems(spec: ClusterSpec) -> list[Problem]:
    """eksctl ``accessConfig``: EKS's rules for access entries (EKS API Reference, CreateAccessEntry: node types
    take no Kubernetes groups or user name; access policies go to STANDARD entries only)."""
    problems: list[Problem] = []
    access = spec.access_config
    if access.authentication_mode == "CONFIG_MAP":
        problems.append(Problem(
            "accessConfig.authenticationMode", "CONFIG_MAP",
            "access entries (efa-stack's own, for the kubectl handler, and EKS Pod Identity's) need the EKS API",
            "use API_AND_CONFIG_MAP (keeps the aws-auth ConfigMap working) or API",
        ))
    for i, entry in enumerate(access.access_entries):
        if entry.type == "STANDARD":
            continue
        for name, value in (("kubernetesGroups", entry.kubernetes_groups), ("kubernetesUsername", entry.kubernetes_username),
                            ("accessPolicies", entry.access_policies)):
            if value:
                problems.append(Problem(
                    f"accessConfig.accessEntries[{i}].{name}", value if not isinstance(value, list) else
                    [v if isinstance(v, str) else v.policy_arn for v in value],
                    f"an access entry of type {entry.type} takes no {name}",
                    f"remove {name}, or use type: STANDARD",
                ))
    return problems


def _pod_identity_problems(spec: ClusterSpec) -> list[Problem]:
    """eksctl ``iam.podIdentityAssociations``: an existing role or managed policies for a new one, each service
    account once (EKS allows one association per service account)."""
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for i, pia in enumerate(spec.iam.pod_identity_associations):
        where = f"iam.podIdentityAssociations[{i}]"
        problems.extend(role_problems(where, pia.role_arn, pia.permission_policy_arns))
        if pia.role_arn and pia.role_name:
            problems.append(Problem(
                f"{where}.roleName", pia.role_name, "roleARN already names the role (roleName names a new one)",
                "remove roleName or roleARN",
            ))
        key = (pia.namespace, pia.service_account_name)
        if key in seen:
            problems.append(Problem(
                f"{where}.serviceAccountName", pia.service_account_name,
                f"{pia.namespace}/{pia.service_account_name} already has an association",
                "keep one association per service account",
            ))
        seen.add(key)
    return problems


def _logging(spec: ClusterSpec, problems: list[Problem]) -> tuple[tuple[str, ...], int | None]:
    """eksctl ``cloudWatch.clusterLogging`` (validation.go validateCloudWatchLogging, with its wildcard)."""
    logging = spec.cloud_watch.cluster_logging if spec.cloud_watch is not None else None
    if logging is None:
        return CONTROL_PLANE_LOG_TYPES, None
    types: list[str] = []
    for i, kind in enumerate(logging.enable_types):
        if kind in ("*", "all"):
            types = list(CONTROL_PLANE_LOG_TYPES)
        elif kind in CONTROL_PLANE_LOG_TYPES:
            if kind not in types:
                types.append(kind)
        else:
            near = difflib.get_close_matches(kind, CONTROL_PLANE_LOG_TYPES, n=1)
            problems.append(Problem(
                f"cloudWatch.clusterLogging.enableTypes[{i}]", kind, "unknown log type",
                (f"did you mean {near[0]}? " if near else "") + f"use {', '.join(CONTROL_PLANE_LOG_TYPES)} or '*'",
            ))
    days = logging.log_retention_in_days
    if days is not None and days not in LOG_RETENTION_DAYS:
        problems.append(Problem(
            "cloudWatch.clusterLogging.logRetentionInDays", days, "CloudWatch Logs does not offer that retention",
            f"use one of {', '.join(map(str, LOG_RETENTION_DAYS))}",
        ))
    if days is not None and not logging.enable_types:
        problems.append(Problem(
            "cloudWatch.clusterLogging.logRetentionInDays", days, "no log type is enabled to keep",
            "add enableTypes: ['*'] (or the types you want), or remove logRetentionInDays",
        ))
    ordered = tuple(t for t in CONTROL_PLANE_LOG_TYPES if t in types)
    return ordered, days


def _pool_twin(pool: KarpenterNodePoolSpec) -> ManagedNodeGroupSpec:
    """The EFA node group a pool would be: min 0, desired the nodes its jobs run on (the static replicas, else
    maxNodes), max maxNodes, the pool's ``placementGroup`` decided as a node group's (a new cluster group for
    on-demand pools by default; :func:`_placement`), no EKS node auto repair (a managed node group feature)."""
    ids = pool.capacity_reservation_ids
    fields: dict[str, object] = {
        "name": pool.name, "instance_type": pool.instance_type, "min_size": 0,
        "desired_capacity": pool.replicas if pool.replicas is not None else pool.max_nodes, "max_size": pool.max_nodes,
        "efa_enabled": True, "labels": dict(pool.labels), "taints": list(pool.taints),
        "volume_type": pool.volume_type, "volume_size": pool.volume_size, "interface_layout": pool.interface_layout,
        "ena_on_efa_cards": pool.ena_on_efa_cards,
        "placement_group": pool.placement_group,
        "capacity": Capacity(type=pool.capacity, reservation_id=ids[0] if ids else None),
        "node_repair_config": NodeRepairConfigSpec(enabled=False),
        "kubelet_extra_config": pool.kubelet_extra_config,
    }
    if pool.availability_zone is not None:
        fields["availability_zones"] = [pool.availability_zone]
    return ManagedNodeGroupSpec.model_construct(**fields)  # type: ignore[arg-type]  # fields of a validated pool


def _karpenter(
    spec: ClusterSpec, azs: tuple[str, ...], problems: list[Problem], existing: ExistingVpc | None, taken: set[str],
) -> tuple[KarpenterPlan | None, list[ManagedNodeGroupSpec]]:
    """The plan of ``karpenterNodePools`` (None without pools) and each pool's twin node group spec."""
    if not spec.karpenter_node_pools:
        return None, []
    pools: list[KarpenterPoolPlan] = []
    twins: list[ManagedNodeGroupSpec] = []
    amis: list[tuple[str, str, str]] = []
    cluster = names.eks_cluster_name(spec.metadata.name)
    for i, pool in enumerate(spec.karpenter_node_pools):
        prefix = f"karpenterNodePools[{i}]"
        if pool.name in taken:
            problems.append(Problem(
                f"{prefix}.name", pool.name, "a managed node group or another pool already has this name (or it is "
                "the reserved 'system')", "choose another name",
            ))
        taken.add(pool.name)
        problems.extend(capacity_problems(
            prefix, pool.capacity, list(pool.capacity_reservation_ids), pool.replicas, pool.max_nodes,
        ))
        twin = _pool_twin(pool)
        twins.append(twin)
        found: list[Problem] = []
        group = _node_group(
            i, twin, azs, found, spec.nccl_test, spec.storage is not None, spec.metadata.name, existing, prefix=prefix,
        )
        for p in found:
            renamed = pool_field(p.field, prefix, prefix)
            if renamed == f"{prefix}.capacityReservationIds":
                continue  # capacity_problems says it with the pool's field and fix
            problems.append(Problem(renamed, p.value, p.message, p.fix))
        if group is None:
            continue
        problems.extend(layout_problems(prefix, pool.interface_layout, group))
        amis.append((prefix, group.ami_type, pool.ami_version))
        if karpenter_supports(spec.metadata.version):  # else kubernetes_problems, below, says what to change
            problems.extend(ami_problems(prefix, spec.metadata.version, group.ami_type, pool.ami_version))
            problems.extend(ami_driver_problems(
                prefix, group, spec.metadata.version, pool.ami_version,
                first_release=ami_first_release(spec.metadata.version, group.ami_type)))
        pools.append(KarpenterPoolPlan(
            group=group, reservation_ids=tuple(pool.capacity_reservation_ids), replicas=pool.replicas,
            ami_version=pool.ami_version, consolidate_after=pool.consolidate_after,
            new_placement_group=placement_group_name(cluster, pool.name) if group.placement_group
            and group.placement_group_name is None else None,
        ))
    problems.extend(kubernetes_problems(spec.metadata.version, amis, offered(versions_today())))
    plan = KarpenterPlan(pools=tuple(pools), cluster=cluster, region=spec.metadata.region)
    return plan, twins


def _system_group(
    sng: SystemNodeGroup, instance: InstanceType, sizes: tuple[int, int, int], azs: tuple[str, ...]
) -> NodeGroupPlan:
    """The plan of the system node group (add-ons, MPI launchers)."""
    return NodeGroupPlan(
        name=contract.SYSTEM_NODE_GROUP,
        instance=instance,
        role="system",
        availability_zones=azs,
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
        ami_type=_ami_type(instance),
        labels={contract.LABEL_NODE_GROUP: contract.SYSTEM_NODE_GROUP, contract.LABEL_ROLE: "system", contract.LABEL_EFA: "false"},
        taints=(),
    )


def build_plan(
    spec: ClusterSpec, *, source: str = "<spec>", subnet_zones: Mapping[str, str] | None = None
) -> ClusterPlan:
    """Validate ``spec`` against the catalog and derive the plan; raises :class:`SpecError`."""
    problems: list[Problem] = []
    md = spec.metadata
    today = versions_today()
    problems.extend(version_problems(md.version, today))
    problems.extend(names.cluster_problems(md.name, md.tags))
    region_azs = catalog.regions().get(md.region)
    if region_azs is None:
        problems.append(Problem(
            "metadata.region", md.region, "unknown AWS region",
            f"use one of {', '.join(sorted(catalog.regions()))}",
        ))
        region_azs = []

    existing = _existing_vpc(spec, region_azs, problems, subnet_zones or {})
    azs = tuple(spec.availability_zones or ())
    if existing is not None:
        private_zones = tuple(dict.fromkeys(z for _, z in existing.private_subnets))
        if spec.availability_zones is not None and set(azs) != set(private_zones):
            problems.append(Problem(
                "availabilityZones", list(azs), f"the private subnets of vpc.subnets are in {', '.join(private_zones)}",
                "remove availabilityZones (with an existing VPC the subnets say the zones)",
            ))
        azs = private_zones
    elif spec.availability_zones is not None:
        for az in azs:
            if region_azs and az not in region_azs:
                problems.append(Problem(
                    "availabilityZones", az, f"zone is not in region {md.region}",
                    f"use zones of {md.region}: {', '.join(region_azs)}",
                ))
        if len(set(azs)) != len(azs):
            problems.append(Problem("availabilityZones", list(azs), "zones are listed twice", "list each zone once"))
        if len(set(azs)) < 2:
            problems.append(Problem(
                "availabilityZones", list(azs), "EKS needs subnets in at least two availability zones",
                f"list two or more zones of {md.region}",
            ))
    else:
        wanted: list[str] = []
        for ng in spec.managed_node_groups:
            for az in ng.availability_zones or []:
                if az not in wanted:
                    wanted.append(az)
        for az in region_azs:
            if len(wanted) >= 2:
                break
            if az not in wanted:
                wanted.append(az)
        azs = tuple(wanted)
        for az in azs:
            if region_azs and az not in region_azs:
                problems.append(Problem(
                    "managedNodeGroups[].availabilityZones", az, f"zone is not in region {md.region}",
                    f"use zones of {md.region}: {', '.join(region_azs)}",
                ))


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
        plan = _node_group(i, ng, azs, problems, spec.nccl_test, spec.storage is not None, md.name, existing)
        if plan is not None:
            groups.append(plan)
    karpenter, twins = _karpenter(spec, azs, problems, existing, seen | {contract.SYSTEM_NODE_GROUP})
    pool_groups = list(karpenter.groups) if karpenter is not None else []
    # Jobs run on node groups and pools alike: their checks see the pools as node groups of those names.
    job_spec = spec.model_copy(update={"managed_node_groups": [*spec.managed_node_groups, *twins]}) if twins else spec
    job_groups_planned = [*groups, *pool_groups]

    endpoints = spec.vpc.cluster_endpoints
    if not endpoints.public_access and not endpoints.private_access:
        problems.append(Problem(
            "vpc.clusterEndpoints", {"publicAccess": False, "privateAccess": False},
            "the Kubernetes API needs at least one endpoint", "set privateAccess: true (and publicAccess as you need)",
        ))
    if spec.vpc.public_access_cidrs and not endpoints.public_access:
        problems.append(Problem(
            "vpc.publicAccessCIDRs", list(spec.vpc.public_access_cidrs),
            "CIDRs restrict the public endpoint, which is off", "remove publicAccessCIDRs or set clusterEndpoints.publicAccess: true",
        ))

    sng = spec.system_node_group
    sys_instance = _lookup("systemNodeGroup.instanceType", sng.instance_type, problems, lambda it: not it.accelerator)
    if sys_instance is not None and sys_instance.accelerator:
        problems.append(Problem(
            "systemNodeGroup.instanceType", sng.instance_type,
            "the system node group runs add-ons and MPI launchers and should not hold accelerators",
            "use a general-purpose type such as m7i.xlarge",
        ))
    sys_sizes = _sizes("systemNodeGroup", sng.min_size, sng.desired_capacity, sng.max_size, problems)

    observability, observability_problems = observability_plan(
        spec.observability, cluster=md.name, region=md.region,
        accelerated=any(g.role in ("gpu", "neuron") for g in groups),
        addon_listed=any(a.name == CLOUDWATCH_OBSERVABILITY for a in spec.addons),
    )
    problems.extend(observability_problems)
    addons, addon_problems = addon_plans(
        spec.addons, kubernetes_version=md.version, repair=any(g.node_repair for g in groups),
        storage=spec.storage is not None, with_oidc=spec.iam.with_oidc,
        observability=observability.container_insights,
        accelerator_taints=[(t.key, t.effect) for g in groups if g.role == "gpu" for t in g.taints],
    )
    problems.extend(addon_problems)
    problems.extend(validate_nccl(job_spec, job_groups_planned))
    problems.extend(validate_storage(spec, groups))
    training_jobs, training_problems = training_job_plans(job_spec, job_groups_planned)
    problems.extend(training_problems)
    nccl_job = nccl_job_plan(job_groups_planned, spec.nccl_test) if sys_instance is not None else None
    kueue: KueuePlan | None = None
    kueue_warnings: list[str] = []
    if sys_instance is not None and not problems:
        kueue, kueue_problems, kueue_warnings = kueue_plan(
            spec.scheduling.kueue, job_groups_planned, _system_group(sng, sys_instance, sys_sizes, azs),
            namespaces=[j.namespace for j in ([nccl_job] if nccl_job else [])] + [j.namespace for j in training_jobs],
            job_groups=[j.node_group for j in ([nccl_job] if nccl_job else [])] + [j.node_group for j in training_jobs],
            elastic=[g.name for g in pool_groups],
        )
        problems.extend(kueue_problems)
    problems.extend(validate_node_group_count(groups, [ng.name for ng in spec.managed_node_groups]))
    if len(set(azs)) >= 2 and existing is None:  # an existing VPC's subnet sizes are not known here
        problems.extend(validate_plan_limits(groups, network=network_resource_count(
            len(set(azs)), 1 if spec.vpc.nat.gateway == "Single" else len(azs), spec.vpc.interface_endpoints,
            existing_vpc=False,
        ), storage=spec.storage is not None, karpenter=bool(spec.karpenter_node_pools),
            pool_placement_groups=sum(1 for g in pool_groups if g.placement_group),
            kueue=spec.scheduling.kueue.enabled))
    addresses: AddressPlan | None = None
    pod_refusals = pod_network_refusals(spec.vpc.pod_cidr, existing_vpc=existing is not None)
    problems.extend(pod_refusals)
    if len(set(azs)) >= 2 and existing is None and sys_instance is not None and not pod_refusals:
        cni = next((a for a in addons if a.name == VPC_CNI), None)
        addresses, address_problems = address_plan(
            spec.vpc.cidr, azs,
            [AddressedGroup(contract.SYSTEM_NODE_GROUP, sys_instance, (), azs, sys_sizes[2]), *groups, *pool_groups],
            cni.configuration_values if cni else None, pod_cidr=spec.vpc.pod_cidr,
            pools={p.name: f"karpenterNodePools[{i}]" for i, p in enumerate(spec.karpenter_node_pools)},
        )
        problems.extend(address_problems)
        if addresses is not None and addresses.pods is not None:  # custom networking: a user's maxPods must agree
            index = {ng.name: i for i, ng in enumerate(spec.managed_node_groups)}
            problems.extend(max_pods_override_problems(
                [(f"managedNodeGroups[{index[g.name]}]", g.name, g.node_config) for g in groups
                 if g.ami_id and g.name in index], addresses))
        if karpenter is not None and addresses is not None:  # custom networking: maxPods on the EC2NodeClasses
            karpenter = with_max_pods(karpenter, addresses.max_pods)
        if addresses is not None and addresses.generated_env and cni is not None:
            where = next((f"addons[{i}]" for i, a in enumerate(spec.addons) if a.name == VPC_CNI), "addons")
            merged, merge_problems = merge_cni_env(cni.configuration_values, addresses.generated_env, where)
            problems.extend(merge_problems)
            addons = tuple(dataclasses.replace(a, configuration_values=merged) if a is cni else a for a in addons)
    log_types, log_retention = _logging(spec, problems)
    problems.extend(_access_problems(spec))
    problems.extend(_pod_identity_problems(spec))
    training_image, image_problems = training_image_plan(
        spec.training_image, [g.ami_type for g in groups if g.gpus_per_node]
    )
    problems.extend(image_problems)
    if problems:
        raise SpecError(source, problems)

    assert sys_instance is not None
    system = _system_group(sng, sys_instance, sys_sizes, azs)
    entries = tuple(
        (
            e.principal_arn,
            tuple((p.policy_arn, p.access_scope.type, tuple(p.access_scope.namespaces)) for p in e.access_policies),
        )
        for e in spec.access_config.access_entries
    )
    return ClusterPlan(
        name=md.name,
        region=md.region,
        kubernetes_version=md.version,
        availability_zones=azs,
        vpc_cidr=spec.vpc.cidr,
        nat_gateways=1 if spec.vpc.nat.gateway == "Single" else len(azs),
        interface_endpoints=spec.vpc.interface_endpoints,
        endpoint_public=endpoints.public_access,
        endpoint_private=endpoints.private_access,
        public_access_cidrs=tuple(spec.vpc.public_access_cidrs),
        with_oidc=spec.iam.with_oidc,
        bootstrap_admin=spec.access_config.bootstrap_cluster_creator_admin_permissions,
        access_entries=entries,
        node_groups=tuple(groups),
        system=system,
        tags=dict(md.tags),
        nccl_job=nccl_job,
        storage=storage_plan(spec.storage, groups, system),
        addons=addons,
        addresses=addresses,
        observability=observability,
        training_image=training_image,
        training_operators=TrainingOperatorsPlan(
            trainer=spec.training_operators.trainer or any(j.kind == "trainjob" for j in training_jobs),
            pytorch_job_v1=spec.training_operators.pytorch_job_v1 or any(j.kind == "pytorchjob" for j in training_jobs),
        ),
        training_jobs=training_jobs,
        kueue=kueue,
        karpenter=karpenter,
        image_cache=image_cache_plan(
            md.name, md.region, job_images(nccl_job, training_jobs),
            interface_endpoints=None if existing is not None else spec.vpc.interface_endpoints,
        ),
        existing_vpc=existing,
        warnings=(*version_warnings(md.version, today), *infiniband_warnings(spec), *kueue_warnings,
                  *ami_driver_warnings(karpenter, md.version)),
        authentication_mode=spec.access_config.authentication_mode,
        control_plane_tier=spec.control_plane_scaling_config.tier if spec.control_plane_scaling_config else None,
        pod_identities=tuple(
            PodIdentityPlan(
                namespace=p.namespace, service_account=p.service_account_name, role_arn=p.role_arn,
                policy_arns=tuple(p.permission_policy_arns), role_name=p.role_name, target_role_arn=p.target_role_arn,
                disable_session_tags=p.disable_session_tags, tags=tuple(sorted(p.tags.items())),
            )
            for p in spec.iam.pod_identity_associations
        ),
        access_entry_details=tuple(
            (e.type, tuple(e.kubernetes_groups), e.kubernetes_username) for e in spec.access_config.access_entries
        ),
        log_types=log_types,
        log_retention_days=log_retention,
    )


def plan_from_file(path: str | Path, *, subnet_zones: Mapping[str, str] | None = None) -> ClusterPlan:
    """Load, validate and plan the spec at ``path``; raises :class:`SpecError` with every problem of the file:
    the structural ones and, where the rest of the file can be read, the planning ones (one run, no waves).
    ``subnet_zones``: the zones of an existing VPC's subnets that ``efa-stack lookup`` recorded (subnet id ->
    zone), for subnets the spec gives without ``az``."""
    try:
        spec = load_spec(path)
    except SpecError as exc:
        raise _with_planning_problems(exc) from None
    return build_plan(spec, source=str(path), subnet_zones=subnet_zones)


def plan_from_text(
    text: str, *, source: str = "<spec>", subnet_zones: Mapping[str, str] | None = None
) -> ClusterPlan:
    """:func:`plan_from_file` for a spec given as text."""
    try:
        spec = parse_spec(text, source=source)
    except SpecError as exc:
        raise _with_planning_problems(exc) from None
    return build_plan(spec, source=source, subnet_zones=subnet_zones)


def _under(field_name: str, prefixes: tuple[str, ...]) -> bool:
    """``field_name`` is one of ``prefixes`` or inside one (``[]`` in a prefix stands for any index)."""
    for p in prefixes:
        pattern = re.escape(p).replace(re.escape("[]"), r"(\[\d+\])?")
        if re.match(rf"{pattern}($|[.\[/])", field_name):
            return True
    return False


def _with_planning_problems(exc: SpecError) -> SpecError:
    """``exc`` with the planning problems of the spec read without its bad fields (``exc.partial``)."""
    if exc.partial is None:
        return exc
    try:
        build_plan(exc.partial, source=exc.source)
    except (KeyError, ValueError, TypeError, AttributeError, IndexError):
        # the spec read without its bad fields broke a planning step: report what was found so far
        return exc
    except SpecError as more:
        seen = {(p.field, p.message) for p in exc.problems}
        extra: list[Problem] = []
        for p in more.problems:
            if _under(p.field, exc.stripped):
                continue
            renamed = _rename(p.field, list(exc.renames))
            if renamed is not None:  # a self-managed nodeGroups entry, planned as a managed node group
                p = Problem(renamed, p.value, MOVED + p.message, p.fix)
            if (p.field, p.message) not in seen:
                extra.append(p)
        return SpecError(exc.source, [*exc.problems, *extra])
    return exc
