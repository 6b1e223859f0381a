"""The cluster stack's managed node groups: the plan of a group as the props of
:class:`aws_constructs.node_group.ManagedNodeGroup` (:func:`node_group_props`) and the IAM role its nodes get
(:func:`node_role_of`), with the ECR pull through cache they pull job images through (:func:`pull_through_cache`)."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam

from aws_constructs.image_cache import CacheRuleProps, PullThroughCache, PullThroughCacheProps
from aws_constructs.launch_template import LaunchTemplateProps
from aws_constructs.node_group import ManagedNodeGroupProps
from aws_constructs.security import acknowledge, managed_policy
from efa_stack.planning.image_cache import ImageCachePlan
from efa_stack.planning.node_groups import NodeGroupPlan

# What nodes themselves need: join the cluster and pull images. The VPC CNI's permissions go to its
# own service account through EKS Pod Identity, not to the node role; SSM lets operators reach nodes
# without SSH keys or open ports.
NODE_ROLE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonSSMManagedInstanceCore",
)


def node_group_props(
    ng: NodeGroupPlan, cluster_node_config: str | None = None, max_pods: int | None = None,
) -> ManagedNodeGroupProps:
    """The plan of one node group as the props of :class:`aws_constructs.node_group.ManagedNodeGroup`
    (``cluster_node_config``: the cluster's details for nodes of a custom AMI; ``max_pods``: the kubelet maxPods of
    VPC CNI custom networking, :meth:`efa_stack.planning.addressing.AddressPlan.max_pods`)."""
    return ManagedNodeGroupProps(
        launch_template=LaunchTemplateProps(
            instance_type=None if ng.instance_types else ng.instance_type,
            interfaces=ng.interfaces,
            volume_size_gib=ng.volume_size_gib,
            volume_type=ng.volume_type,
            volume_iops=ng.volume_iops,
            volume_throughput=ng.volume_throughput,
            placement_group_name=ng.placement_group_name,
            capacity=ng.capacity,
            reservation_id=ng.reservation_id,
            reservation_resource_group_arn=ng.reservation_resource_group_arn,
            hugepages_2mi_mib=ng.hugepages_2mi_mib,
            lustre_client=ng.lustre_client, lustre_efa=ng.lustre_efa,
            kubelet_config={**ng.kubelet.as_kubelet_config(), **({"maxPods": str(max_pods)} if max_pods else {})},
            instance_name=ng.instance_name,
            key_name=ng.key_name,
            pre_bootstrap_commands=ng.pre_bootstrap_commands,
            node_config=ng.node_config,
            image_id=ng.ami_id,
            cluster_node_config=cluster_node_config if ng.ami_id else None,
            module_options=ng.ultraserver.module_options if ng.ultraserver else (),
            local_storage=ng.ultraserver.local_storage if ng.ultraserver else None,
        ),
        name=ng.name,
        ami_type=ng.ami_type,
        release_version=ng.release_version,
        min_size=ng.min_size,
        desired_size=ng.desired_size,
        max_size=ng.max_size,
        placement_group=ng.placement_group,
        labels=ng.labels,
        taints=ng.taints,
        tags=ng.tags,
        node_repair=ng.node_repair_cfn(),
        max_unavailable=ng.update.max_unavailable,
        max_unavailable_percentage=ng.update.max_unavailable_percentage,
        instance_types=ng.instance_types,
        spot=ng.spot,
    )


def node_role_of(stack: Stack, ng: NodeGroupPlan, shared: iam.IRole, cluster_name: str) -> iam.IRole:
    """The ``shared`` node role, an existing role (eksctl ``iam.instanceRoleARN``), or the node group's own role
    with efa-stack's node policies plus what eksctl's ``iam.withAddonPolicies``/``attachPolicyARNs`` add."""
    if ng.node_role_arn:
        return iam.Role.from_role_arn(stack, f"NodeRole-{ng.name}", ng.node_role_arn, mutable=False)
    if not ng.node_managed_policies and not ng.node_inline_policies and not ng.node_role_name:
        return shared
    from efa_stack.planning.node_extras import ADDON_INLINE_POLICIES, SERVICE_LINKED_ROLES

    role = iam.Role(
        stack, f"NodeRole-{ng.name}", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        description=f"EKS nodes of {cluster_name} node group {ng.name}", role_name=ng.node_role_name,
    )
    for name in (*NODE_ROLE_POLICIES, *ng.node_managed_policies):
        if name.startswith("arn:"):
            role.add_managed_policy(iam.ManagedPolicy.from_managed_policy_arn(role, f"Policy{name}", name))
            finding = f"Policy::{name}"
        else:
            role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(name))
            finding = managed_policy(name)
        acknowledge(
            role, "AwsSolutions-IAM4",
            f"{name}: an EKS node policy or one the spec's iam (eksctl withAddonPolicies/attachPolicyARNs) "
            "puts on this node group's role.", finding,
        )
    for addon in ng.node_inline_policies:
        for i, actions in enumerate(ADDON_INLINE_POLICIES[addon]):
            linked = addon == "fsx" and i == 1
            role.add_to_policy(iam.PolicyStatement(
                actions=list(actions),
                resources=[f"arn:{stack.partition}:{SERVICE_LINKED_ROLES}" if linked else "*"],
            ))
    findings = sorted({
        f for addon in ng.node_inline_policies for i, actions in enumerate(ADDON_INLINE_POLICIES[addon])
        for f in (
            "Resource::" + (f"arn:<AWS::Partition>:{SERVICE_LINKED_ROLES}" if addon == "fsx" and i == 1 else "*"),
            *(f"Action::{a}" for a in actions if a.endswith("*")),
        )
    })
    for finding in findings:
        acknowledge(
            role.node.find_child("DefaultPolicy"), "AwsSolutions-IAM5",
            f"eksctl's iam.withAddonPolicies ({', '.join(ng.node_inline_policies)}) grant these actions as "
            "eksctl does; the spec asks for them by name.", finding,
        )
    return role


def pull_through_cache(stack: Stack, plan: ImageCachePlan | None) -> PullThroughCache | None:
    """The cluster's ECR pull through cache (:mod:`efa_stack.planning.image_cache`), or None without one."""
    if plan is None or not plan.enabled:
        return None
    return PullThroughCache(stack, "ImageCache", PullThroughCacheProps(rules=[
        CacheRuleProps(prefix=r.prefix, upstream_registry=r.registry, upstream_url=r.upstream) for r in plan.rules
    ]))


def pulls_through(role: iam.IRole, cache: PullThroughCache | None) -> None:
    """Give ``role`` (a node role) the cache's first-pull permissions; a role of the user's (``iam.instanceRoleARN``)
    is not changed: it needs them itself (docs/design/scale.md)."""
    if cache is not None and isinstance(role, iam.Role):
        role.add_managed_policy(cache.node_policy)
