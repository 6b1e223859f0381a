"""AWS limits a cluster spec must fit, checked before any CloudFormation exists.

Each check returns :class:`efa_stack.spec.errors.Problem` objects naming the field, the value and the fix. The
figures come from AWS documentation, cited next to each; the numbers that depend on efa-stack's own
constructs (resources per node group) are checked against a synthesized template by the tests.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from efa_stack import contract, names
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import EBS_MIN_IOPS, MAX_MANAGED_NODE_GROUPS, MAX_NODES_PER_NODE_GROUP

# --- EBS root volumes -------------------------------------------------------------------------------
# CloudFormation "AWS::EC2::LaunchTemplate Ebs" (aws-properties-ec2-launchtemplate-ebs), `Iops`:
# gp3 3,000-16,000, io1 100-64,000, io2 100-256,000; "required for io1 and io2"; `Throughput`: gp3
# only, 125-1,000 MiB/s. The same ranges are eksctl's (v1alpha5/validation.go MinGP3Iops..MaxIO2Iops).
# Ratios and sizes: Amazon EBS User Guide, "General Purpose SSD volumes" (gp3: at most 500 IOPS per
# GiB, at most 0.25 MiB/s per provisioned IOPS) and "Provisioned IOPS SSD volumes" (io1: at most 50
# IOPS per GiB, 4 GiB-16 TiB; io2 Block Express: at most 1,000 IOPS per GiB, 4 GiB-64 TiB).


@dataclass(frozen=True)
class VolumeLimits:
    iops: tuple[int, int] | None
    """Allowed provisioned IOPS, or None: the type takes no ``Iops``."""
    iops_required: bool
    iops_per_gib: int | None
    throughput: tuple[int, int] | None
    """Allowed MiB/s, or None: the type takes no ``Throughput``."""
    min_size_gib: int = 1


VOLUME_LIMITS: dict[str, VolumeLimits] = {
    "gp3": VolumeLimits(iops=(EBS_MIN_IOPS["gp3"], 16000), iops_required=False, iops_per_gib=500, throughput=(125, 1000)),
    "gp2": VolumeLimits(iops=None, iops_required=False, iops_per_gib=None, throughput=None),
    "io1": VolumeLimits(iops=(EBS_MIN_IOPS["io1"], 64000), iops_required=True, iops_per_gib=50, throughput=None,
                        min_size_gib=4),
    "io2": VolumeLimits(iops=(EBS_MIN_IOPS["io2"], 256000), iops_required=True, iops_per_gib=1000, throughput=None,
                        min_size_gib=4),
}
GP3_MIB_PER_IOPS = 0.25
GP3_BASELINE_IOPS = 3000


def validate_volume(
    prefix: str, volume_type: str, size_gib: int, iops: int | None, throughput: int | None
) -> list[Problem]:
    """Problems of a root volume's ``volumeType``/``volumeSize``/``volumeIOPS``/``volumeThroughput``."""
    limits = VOLUME_LIMITS[volume_type]
    problems: list[Problem] = []
    if iops is None and limits.iops_required:
        low = max(limits.iops[0], 1) if limits.iops else 0
        problems.append(Problem(
            f"{prefix}.volumeIOPS", None, f"{volume_type} volumes need provisioned IOPS (EC2 requires Iops for io1/io2)",
            f"add volumeIOPS: {low} or more (at most {limits.iops_per_gib} per GiB of volumeSize)",
        ))
    if iops is not None:
        if limits.iops is None:
            problems.append(Problem(
                f"{prefix}.volumeIOPS", iops, f"{volume_type} volumes take no provisioned IOPS",
                "remove volumeIOPS, or use volumeType gp3, io1 or io2",
            ))
        else:
            low, high = limits.iops
            if not low <= iops <= high:
                # the advice keeps to the per-GiB ratio too (for volumeSize), so that it passes the check below
                most = min(high, limits.iops_per_gib * size_gib) if limits.iops_per_gib else high
                problems.append(Problem(
                    f"{prefix}.volumeIOPS", iops, f"{volume_type} IOPS must be between {low} and {high}",
                    f"set volumeIOPS between {low} and {most}" + (
                        f" (up to {high} with volumeSize {-(-high // limits.iops_per_gib)} or more)"
                        if most < high and limits.iops_per_gib else ""),
                ))
            elif limits.iops_per_gib and iops > limits.iops_per_gib * size_gib:
                problems.append(Problem(
                    f"{prefix}.volumeIOPS", iops,
                    f"{volume_type} allows at most {limits.iops_per_gib} IOPS per GiB "
                    f"({limits.iops_per_gib * size_gib} for volumeSize {size_gib})",
                    f"lower volumeIOPS to {limits.iops_per_gib * size_gib} or less, or raise volumeSize to at least "
                    f"{-(-iops // limits.iops_per_gib)}",
                ))
    if size_gib < limits.min_size_gib:
        problems.append(Problem(
            f"{prefix}.volumeSize", size_gib, f"{volume_type} volumes are at least {limits.min_size_gib} GiB",
            f"set volumeSize to {limits.min_size_gib} or more",
        ))
    if throughput is not None:
        if limits.throughput is None:
            problems.append(Problem(
                f"{prefix}.volumeThroughput", throughput, f"{volume_type} volumes take no provisioned throughput",
                "remove volumeThroughput, or use volumeType gp3",
            ))
        else:
            low, high = limits.throughput
            cap = int((iops or GP3_BASELINE_IOPS) * GP3_MIB_PER_IOPS)
            if not low <= throughput <= high:
                # the advice keeps to the per-IOPS ratio too, so that it passes the check below
                problems.append(Problem(
                    f"{prefix}.volumeThroughput", throughput, f"{volume_type} throughput must be {low}-{high} MiB/s",
                    f"set volumeThroughput between {low} and {min(high, cap)}" + (
                        f" (up to {high} with volumeIOPS {int(high / GP3_MIB_PER_IOPS)} or more)" if cap < high else ""),
                ))
            elif throughput > cap:
                problems.append(Problem(
                    f"{prefix}.volumeThroughput", throughput,
                    f"gp3 allows at most {GP3_MIB_PER_IOPS} MiB/s per provisioned IOPS ({cap} MiB/s at "
                    f"{iops or GP3_BASELINE_IOPS} IOPS)",
                    f"raise volumeIOPS to at least {int(throughput / GP3_MIB_PER_IOPS)} or lower volumeThroughput",
                ))
    return problems


# --- VPC subnets -----------------------------------------------------------------------------------
# Amazon VPC User Guide, "Subnet CIDR blocks": a subnet is /16 to /28, and AWS reserves 5 addresses in
# each (network, router, DNS, future use, broadcast).
SUBNET_MIN_MASK, SUBNET_MAX_MASK = 16, 28
AWS_RESERVED_PER_SUBNET = 5
PRIVATE_MAX_SIZE_MASK = 19
"""Private subnets are at most /19 (8,187 usable addresses; the VPC default /16 keeps its layout)."""
PUBLIC_MAX_SIZE_MASK = 24
"""Public subnets hold only NAT gateways and load balancers: at most /24."""


@dataclass(frozen=True)
class SubnetPlan:
    private_mask: int
    public_mask: int

    @property
    def private_usable(self) -> int:
        return 2 ** (32 - self.private_mask) - AWS_RESERVED_PER_SUBNET


def _fits(prefix: int, zones: int, public_mask: int, private_mask: int) -> bool:
    """Whether CDK's allocation fits: public subnets first, then private, each aligned to its size."""
    offset = 0
    for mask, count in ((public_mask, zones), (private_mask, zones)):
        size = 2 ** (32 - mask)
        offset = -(-offset // size) * size + size * count
    return offset <= 2 ** (32 - prefix)


def subnet_plan(cidr: str, zones: int, private_needed: int = 0) -> SubnetPlan | None:
    """The private subnets (then the largest public ones, up to /24) that ``cidr`` holds.

    One public and one private subnet per zone, allocated as CDK's ``ec2.Vpc`` does (in the order of
    its subnet configuration, each subnet aligned to its own size). Private subnets are the largest up to
    /19 (the layout every VPC had before addresses were counted, kept so that no subnet is replaced) unless
    ``private_needed`` addresses need more: then the largest the range holds. None: the VPC cannot hold them.
    """
    prefix = ipaddress.ip_network(cidr, strict=False).prefixlen
    fitting = [
        SubnetPlan(private_mask=private, public_mask=public)
        for private in range(prefix, SUBNET_MAX_MASK + 1)
        for public in [next((p for p in range(max(private, PUBLIC_MAX_SIZE_MASK), SUBNET_MAX_MASK + 1)
                             if _fits(prefix, zones, p, private)), None)]
        if public is not None
    ]
    if not fitting:
        return None
    usual = next((f for f in fitting if f.private_mask >= PRIVATE_MAX_SIZE_MASK), fitting[-1])
    if usual.private_usable >= private_needed:
        return usual
    return fitting[0]


# --- CloudFormation and EKS quotas -----------------------------------------------------------------
# AWS CloudFormation User Guide, "Understand CloudFormation quotas": 500 resources per stack (hard). The other limit a
# template has, 1,000,000 bytes, is counted by efa_stack/planning/template_budget.py.
CFN_MAX_RESOURCES = 500
# EKS's "Managed node groups per cluster" quota (spec.models.MAX_MANAGED_NODE_GROUPS, cited there) is
# checked twice: where the spec is read (at most that many managedNodeGroups entries with the system group)
# and here, on the EKS node groups a plan makes once large groups are split (validate_node_group_count).
# Amazon EC2 User Guide, "Amazon VPC quotas": security groups per network interface, 5 by default
# (adjustable up to 16).
MAX_SECURITY_GROUPS_PER_ENI = 5


def validate_quotas(
    node_groups: Sequence[str], cluster_stack_resources: int, security_groups_per_interface: Iterable[int]
) -> list[Problem]:
    """Problems with the CloudFormation, EKS and VPC limits a plan would hit at deploy.

    ``node_groups``: the managed node group names (system group included);
    ``cluster_stack_resources``: resources the cluster stack would hold (:func:`count_cluster_resources`).
    """
    problems: list[Problem] = []
    if cluster_stack_resources > CFN_MAX_RESOURCES:
        problems.append(Problem(
            "managedNodeGroups", f"{len(node_groups)} node groups",
            f"the cluster stack would hold {cluster_stack_resources} resources; CloudFormation allows "
            f"{CFN_MAX_RESOURCES} per stack",
            "use fewer node groups (larger maxSize on each) or split the cluster into several specs",
        ))
    worst = max(security_groups_per_interface, default=0)
    if worst > MAX_SECURITY_GROUPS_PER_ENI:
        problems.append(Problem(
            "managedNodeGroups", f"{worst} security groups per interface",
            f"a network interface takes {MAX_SECURITY_GROUPS_PER_ENI} security groups by default",
            "attach fewer security groups or raise the VPC quota 'Security groups per network interface'",
        ))
    return problems


def validate_node_group_count(plan_groups: Sequence, spec_groups: Sequence[str] = ()) -> list[Problem]:
    """The EKS managed node groups of the planned groups (:attr:`~efa_stack.planning.node_groups.NodeGroupPlan.parts`) plus the system group fit
    EKS's "Managed node groups per cluster" quota, and every part's name is a valid EKS node group name that no
    other group uses. ``spec_groups``: every ``managedNodeGroups`` name (also of groups that did not plan)."""
    problems: list[Problem] = []
    taken = {contract.SYSTEM_NODE_GROUP, *spec_groups, *(g.name for g in plan_groups)}
    split = [(g, g.parts) for g in plan_groups if len(g.parts) > 1]
    for g, parts in split:
        for part in parts:
            why = names.EKS_NODEGROUP_NAME.violation(part.name)
            if why or part.name in taken:
                problems.append(Problem(
                    f"managedNodeGroups({g.name}).name", g.name,
                    f"maxSize {g.max_size} splits the group into {len(parts)} EKS node groups of at most "
                    f"{MAX_NODES_PER_NODE_GROUP} nodes, and the part name {part.name!r} "
                    + (f"is not {why.removeprefix('an ')}" if why else "is already a node group's name"),
                    "rename the node group (shorter, and not ending in -<number> like another group)",
                ))
                break
            taken.add(part.name)
    total = 1 + sum(len(g.parts) for g in plan_groups)
    if total > MAX_MANAGED_NODE_GROUPS:
        counts = ", ".join(f"{g.name} {len(g.parts)}" for g in plan_groups)
        problems.append(Problem(
            "managedNodeGroups", f"{total} EKS node groups",
            f"the node groups become {total} EKS managed node groups (system 1, {counts}; a group is split into "
            f"groups of at most {MAX_NODES_PER_NODE_GROUP} nodes), more than EKS's quota of "
            f"{MAX_MANAGED_NODE_GROUPS} managed node groups per cluster (Service Quotas L-6D54EA21)",
            f"lower maxSize or merge node groups so that at most {MAX_MANAGED_NODE_GROUPS} EKS node groups remain "
            "(each holds up to 450 nodes), or spread the nodes over several clusters; the quota is adjustable "
            "(request an increase in Service Quotas), but efa-stack plans for the default",
        ))
    return problems


# Resources each EKS managed node group (each part of a split group) adds to the cluster stack
# (aws_constructs/node_group.py): its launch template and node group; and each spec group its placement
# group when it creates one (all parts share it). Checked against a synthesized template in
# tests/stacks/test_cluster_stack.py.
RESOURCES_PER_NODE_GROUP = 2
RESOURCES_PER_NEW_PLACEMENT_GROUP = 1
CLUSTER_STACK_FIXED_RESOURCES = 40
"""An upper bound of the cluster stack's resources besides the node groups, the network and the storage
(cluster, key, roles, add-ons, kubectl provider, manifests); the tests check it against every shipped spec."""

# The network's resources in the cluster stack (stacks/network_stack.py: aws_constructs.network.EfaVpc, an
# aws-cdk-lib 2.275 ec2.Vpc, and the EFA security group): a fixed part (VPC, internet gateway and its
# attachment, flow log with its group and role, S3 gateway endpoint, EFA group and its rules), per zone a public
# and a private subnet with their route tables, associations and routes, per NAT gateway its address and
# gateway, and the interface endpoints with their security groups. Measured by synthesizing EfaVpc for 2-4 zones,
# one or a NAT gateway per zone, with and without interface endpoints; tests/stacks/test_network_stack.py checks the
# count against the synthesized template. With an existing VPC only the EFA group and its rules are created.
NETWORK_FIXED_RESOURCES = 11
NETWORK_RESOURCES_PER_ZONE = 8
NETWORK_RESOURCES_PER_NAT_GATEWAY = 2
INTERFACE_ENDPOINT_RESOURCES = 10
EXISTING_VPC_NETWORK_RESOURCES = 3
STORAGE_RESOURCES = 18
"""An upper bound of the storage's resources in the cluster stack (stacks/storage_stack.py: file system, its
security group and rules, S3 link, CSI add-on, role, volume manifest); tests/test_cfn_lint.py checks it."""
KUEUE_RESOURCES = 10
"""Kueue's resources in the cluster stack (stacks/cluster_stack.py: its four charts, a wait per CRD the queues and
Workloads use, the wait for the controller's replica)."""
KARPENTER_RESOURCES = 19
"""The Karpenter controller's resources in the cluster stack, whatever the number of pools
(aws_constructs/karpenter.py: role and policy, Pod Identity association, interruption queue with its policy and
five rules, node role with its access entry, Helm release and the wait for its replica, the CRD and pools charts,
a wait per pool kind's CRD); tests/test_cfn_lint.py checks it."""
ULTRASERVER_RESOURCES = 7
"""What UltraServer node groups add to the cluster stack, whatever their number (k8s/components.py): the GPU feature
discovery and ComputeDomains charts, the Node Feature Discovery and NVIDIA DRA driver Helm releases with a wait for
each one's controller, and the wait for the ComputeDomain CRD; tests/test_cfn_lint.py checks it."""
KARPENTER_PLACEMENT_GROUP_RESOURCES = 2
"""Per cluster placement group the stack creates for a pool: the custom resource and its policy
(aws_constructs/karpenter.py ``PoolPlacementGroup``)."""
CUSTOM_RESOURCE_PROVIDER_RESOURCES = 2
"""Once per stack with any such placement group: the function behind aws-cdk-lib's ``AwsCustomResource`` and its
role (aws-cdk-lib 2.275 custom_resources.AwsCustomResource, a singleton function per stack)."""


def network_resource_count(zones: int, nat_gateways: int, interface_endpoints: bool, existing_vpc: bool) -> int:
    """The network's resources in the cluster stack (see :data:`NETWORK_FIXED_RESOURCES`)."""
    if existing_vpc:
        return EXISTING_VPC_NETWORK_RESOURCES
    return (NETWORK_FIXED_RESOURCES + NETWORK_RESOURCES_PER_ZONE * zones + NETWORK_RESOURCES_PER_NAT_GATEWAY * nat_gateways
            + (INTERFACE_ENDPOINT_RESOURCES if interface_endpoints else 0))


def count_cluster_resources(
    new_placement_groups: Iterable[bool], parts: Iterable[int] | None = None, *, network: int = 0,
    storage: bool = False, karpenter: bool = False, pool_placement_groups: int = 0, kueue: bool = False,
    ultraservers: bool = False,
) -> int:
    """Resources of the cluster stack, at most, for node groups that do or do not create a placement group and
    that become ``parts`` EKS node groups each (one each when None), with ``network`` resources of the network
    (:func:`network_resource_count`), the storage's when ``storage``, the Karpenter controller's when
    ``karpenter`` with ``pool_placement_groups`` placement groups created for its pools, Kueue's when ``kueue``, and
    the UltraServer components' when ``ultraservers``."""
    flags = list(new_placement_groups)
    counts = list(parts) if parts is not None else [1] * len(flags)
    pools = (KARPENTER_PLACEMENT_GROUP_RESOURCES * pool_placement_groups
             + (CUSTOM_RESOURCE_PROVIDER_RESOURCES if pool_placement_groups else 0))
    return (CLUSTER_STACK_FIXED_RESOURCES + network + (STORAGE_RESOURCES if storage else 0)
            + (KARPENTER_RESOURCES + pools if karpenter else 0) + (KUEUE_RESOURCES if kueue else 0)
            + (ULTRASERVER_RESOURCES if ultraservers else 0)) + sum(
        RESOURCES_PER_NODE_GROUP * n + (RESOURCES_PER_NEW_PLACEMENT_GROUP if new else 0)
        for new, n in zip(flags, counts, strict=True)
    )


def validate_plan_limits(
    plan_groups: Sequence, *, network: int = 0, storage: bool = False, karpenter: bool = False,
    pool_placement_groups: int = 0, kueue: bool = False, ultraservers: bool = False,
) -> list[Problem]:
    """The CloudFormation and VPC quota checks above for planned node groups
    (:class:`efa_stack.planning.plan.NodeGroupPlan`) plus the system group (addresses:
    :func:`efa_stack.planning.addressing.address_plan`)."""
    group_names = ["system", *(g.name for g in plan_groups)]
    resources = count_cluster_resources(
        [False, *(g.placement_group for g in plan_groups)], [1, *(len(g.parts) for g in plan_groups)],
        network=network, storage=storage, karpenter=karpenter, pool_placement_groups=pool_placement_groups,
        kueue=kueue, ultraservers=ultraservers,
    )
    sgs = [2 if g.efa_enabled else 1 for g in plan_groups]
    return validate_quotas(group_names, resources, sgs)
