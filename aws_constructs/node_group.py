"""An EKS managed node group built from a :class:`spec.plan.NodeGroupPlan`.

For an EFA node group this is the whole set the EFA switch implies: a cluster placement group (on-demand
capacity only, unless the plan opts out or names an existing group, which the launch template then uses), a launch template with one interface per EFA device
and the security groups on every interface, and the node group itself in the single private subnet
of its availability zone, tainted for accelerator work and labelled so the device plugins find it.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from aws_constructs.launch_template import EfaLaunchTemplate
from aws_constructs.security import acknowledge
from efa_stack import contract, names
from efa_stack.policies.nag_pack import PACK_NAME
from efa_stack.spec.plan import LABEL_NODE_GROUP, NodeGroupPlan

_CAPACITY = {
    "on-demand": eks.CapacityType.ON_DEMAND,
    "reservation": eks.CapacityType.ON_DEMAND,  # a targeted On-Demand Capacity Reservation
    "capacity-block": eks.CapacityType.CAPACITY_BLOCK,
}
_EFFECT = {
    "NoSchedule": eks.TaintEffect.NO_SCHEDULE,
    "PreferNoSchedule": eks.TaintEffect.PREFER_NO_SCHEDULE,
    "NoExecute": eks.TaintEffect.NO_EXECUTE,
}


class ManagedNodeGroup(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        plan: NodeGroupPlan,
        subnets: Sequence[ec2.ISubnet],
        security_group_ids: Sequence[str],
        node_role: iam.IRole | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.plan = plan
        tags = {LABEL_NODE_GROUP: names.node_group_label_value(plan.name), **plan.tags}
        self.placement_group: ec2.PlacementGroup | None = None
        if plan.placement_group:
            self.placement_group = ec2.PlacementGroup(
                self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER
            )
        self.launch_template = EfaLaunchTemplate(
            self,
            "LaunchTemplate",
            instance_type=plan.instance_type,
            interfaces=plan.interfaces,
            security_group_ids=security_group_ids,
            volume_size_gib=plan.volume_size_gib,
            volume_type=plan.volume_type,
            volume_iops=plan.volume_iops,
            volume_throughput=plan.volume_throughput,
            # a new group's name, or the existing group the plan names (then no group is created here)
            placement_group_name=self.placement_group.placement_group_name if self.placement_group
            else plan.placement_group_name,
            capacity=plan.capacity,
            reservation_id=plan.reservation_id,
            hugepages_2mi_mib=plan.hugepages_2mi_mib,
            lustre_client=plan.lustre_client,
            tags=tags,
        )
        if plan.efa_enabled and not plan.placement_group and plan.capacity == contract.ON_DEMAND:
            acknowledge(
                self.launch_template, "EfaStack-EFA3",
                "placementGroup: false in the spec: the node group opts out of its cluster placement group",
                pack=PACK_NAME,
            )
        self.nodegroup = eks.Nodegroup(
            self,
            "NodeGroup",
            cluster=cluster,
            # Named as in the spec (as eksctl does), so `aws eks list-nodegroups` shows what the user wrote.
            nodegroup_name=names.eks_nodegroup_name(plan.name),
            ami_type=getattr(eks.NodegroupAmiType, plan.ami_type),
            capacity_type=_CAPACITY[plan.capacity],
            min_size=plan.min_size,
            desired_size=plan.desired_size,
            max_size=plan.max_size,
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.launch_template_id, version=self.launch_template.latest_version
            ),
            subnets=ec2.SubnetSelection(subnets=list(subnets)),
            labels=dict(sorted(plan.labels.items())),
            taints=[eks.TaintSpec(key=t.key, value=t.value, effect=_EFFECT[t.effect]) for t in plan.taints]
            or None,
            tags=tags,
            node_role=node_role,
        )
