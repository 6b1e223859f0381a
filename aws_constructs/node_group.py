"""An EKS managed node group with an EFA-ready launch template, from its own props.

:class:`ManagedNodeGroupProps` says everything the construct needs, so it composes into any CDK app;
efa-stack's cluster stack maps each :class:`efa_stack.planning.node_groups.NodeGroupPlan` to props
(:func:`stacks.node_groups.node_group_props`). What an EFA node group gets:
docs/design/efa-interfaces.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from aws_constructs.launch_template import EfaLaunchTemplate, LaunchTemplateProps
from aws_constructs.security import acknowledge
from efa_stack import contract, names
from efa_stack.planning.node_groups import Taint


@dataclass(frozen=True)
class ManagedNodeGroupProps:
    """Props of :class:`ManagedNodeGroup`; every default is what happens when the prop is left out."""

    launch_template: LaunchTemplateProps
    """The nodes' launch template: instance type, interfaces, root volume, capacity, user data (its tags also get
    the node group tag; a new placement group's name replaces ``placement_group_name``)."""
    name: str | None = None
    """Node group name for the ``efa-stack.io/node-group`` tag on instances, volumes and the node group;
    no tag when None."""
    nodegroup_name: str | None = None
    """The EKS node group name; default ``name`` (a part of a spec group split over several EKS node groups carries
    its own name, ``<name>-<n>``, and the group's ``name`` in its tags)."""
    ami_type: str = "AL2023_X86_64_STANDARD"
    """Member name of ``aws_eks_v2.NodegroupAmiType`` (``AL2023_X86_64_NVIDIA`` for GPU nodes)."""
    release_version: str | None = None
    """The EKS-optimized AMI release (``1.35.6-20260714``, CloudFormation ``AWS::EKS::Nodegroup ReleaseVersion``); None:
    the latest release for the cluster's version when the group is created. Not with a custom AMI."""
    min_size: int = 1
    desired_size: int = 1
    max_size: int = 1
    placement_group: bool = False
    """Create a new cluster placement group for the nodes (the launch template then launches into it)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Kubernetes node labels."""
    taints: Sequence[Taint] = ()
    """Kubernetes node taints (none by default)."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Extra tags on the node group (and, through the launch template, on its instances and volumes)."""
    instance_types: Sequence[str] = ()
    """Several instance types on the node group (the launch template then names none); empty: the launch
    template's type."""
    spot: bool = False
    """Spot capacity (``CapacityType: SPOT``)."""
    node_repair: Mapping[str, Any] | None = None
    """CloudFormation ``AWS::EKS::Nodegroup NodeRepairConfig`` (``{"Enabled": True, ...limits}``); None: no
    repair (EKS's default). Repair acts on the conditions of the ``eks-node-monitoring-agent`` add-on."""
    max_unavailable: int | None = None
    """Nodes a version update replaces at once (1 to 100, at most ``max_size``); with ``max_unavailable_percentage``
    None too: EKS's default, one node at a time, new nodes launched before old ones are drained (EKS User Guide,
    managed-node-update-behavior)."""
    max_unavailable_percentage: int | None = None
    """Percentage of the nodes a version update replaces at once (1 to 100); not with ``max_unavailable``."""


_CAPACITY = {
    contract.ON_DEMAND: eks.CapacityType.ON_DEMAND,
    "reservation": eks.CapacityType.ON_DEMAND,  # a targeted On-Demand Capacity Reservation
    contract.CAPACITY_BLOCK: eks.CapacityType.CAPACITY_BLOCK,
}
_EFFECT = {
    "NoSchedule": eks.TaintEffect.NO_SCHEDULE,
    "PreferNoSchedule": eks.TaintEffect.PREFER_NO_SCHEDULE,
    "NoExecute": eks.TaintEffect.NO_EXECUTE,
}


class ManagedNodeGroup(Construct):
    """An EKS managed node group from :class:`ManagedNodeGroupProps`, in ``subnets`` of ``cluster``."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        props: ManagedNodeGroupProps,
        *,
        cluster: eks.ICluster,
        subnets: Sequence[ec2.ISubnet],
        security_group_ids: Sequence[str],
        node_role: iam.IRole | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.props = plan = props
        lt = plan.launch_template
        tags = {**({contract.LABEL_NODE_GROUP: names.node_group_label_value(plan.name)} if plan.name else {}), **plan.tags}
        self.placement_group: ec2.PlacementGroup | None = None
        if plan.placement_group:
            self.placement_group = ec2.PlacementGroup(
                self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER
            )
        self.launch_template = EfaLaunchTemplate(
            self,
            "LaunchTemplate",
            dataclasses.replace(
                lt,
                # a new group's name, or the existing group the props name (then no group is created here)
                placement_group_name=self.placement_group.placement_group_name if self.placement_group
                else lt.placement_group_name,
                tags={**tags, **lt.tags},
            ),
            security_group_ids=security_group_ids,
        )
        if lt.efa_enabled and not plan.placement_group and lt.placement_group_name is None \
                and lt.capacity == contract.ON_DEMAND:
            acknowledge(
                self.launch_template, "EfaStack-EFA3",
                "placementGroup: false in the spec: the node group opts out of its cluster placement group",
                pack=contract.NAG_PACK_NAME,
            )
        if plan.release_version and lt.image_id:
            raise ValueError("release_version picks an EKS-optimized AMI release; a custom AMI (image_id) has none")
        self.nodegroup = eks.Nodegroup(
            self,
            "NodeGroup",
            cluster=cluster,
            # Named as in the spec (as eksctl does), so `aws eks list-nodegroups` shows what the user wrote.
            nodegroup_name=plan.nodegroup_name or (names.eks_nodegroup_name(plan.name) if plan.name is not None else None),
            # a custom AMI in the launch template: no AMI type (CloudFormation AWS::EKS::Nodegroup AmiType)
            ami_type=None if lt.image_id else getattr(eks.NodegroupAmiType, plan.ami_type),
            capacity_type=eks.CapacityType.SPOT if plan.spot else _CAPACITY[lt.capacity],
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
            enable_node_auto_repair=True if plan.node_repair else None,
            max_unavailable=plan.max_unavailable,
            max_unavailable_percentage=plan.max_unavailable_percentage,
            release_version=plan.release_version,
        )
        if plan.instance_types:
            # As CloudFormation AWS::EKS::Nodegroup InstanceTypes: aws_eks_v2.Nodegroup's own instance type check
            # misfires for accelerated types with the AL2023 NVIDIA AMI type (tests/aws_constructs/test_node_group.py).
            ng_cfn = self.nodegroup.node.default_child
            assert isinstance(ng_cfn, eks.CfnNodegroup)
            ng_cfn.add_property_override("InstanceTypes", list(plan.instance_types))
        if plan.node_repair:
            # aws_eks_v2.Nodegroup has only enableNodeAutoRepair; the limits go in as CloudFormation
            # AWS::EKS::Nodegroup NodeRepairConfig (docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/
            # aws-properties-eks-nodegroup-noderepairconfig.html).
            cfn = self.nodegroup.node.default_child
            assert isinstance(cfn, eks.CfnNodegroup)
            cfn.add_property_override("NodeRepairConfig", dict(plan.node_repair))
