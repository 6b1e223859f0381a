"""An EKS managed node group with an EFA-ready launch template, from its own props.

:class:`ManagedNodeGroupProps` says everything the construct needs, so it composes into any CDK app;
efa-stack's cluster stack maps each :class:`efa_stack.planning.plan.NodeGroupPlan` to props
(``stacks.cluster_stack.node_group_props``).

For an EFA node group this is the whole set the EFA switch implies: a cluster placement group (on-demand
capacity only, unless the plan opts out or names an existing group, which the launch template then uses), a launch template with one interface per EFA device
and the security groups on every interface, and the node group itself in the single private subnet
of its availability zone, tainted for accelerator work and labelled so the device plugins find it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from aws_constructs.launch_template import EfaLaunchTemplate
from aws_constructs.security import acknowledge
from efa_stack import contract, names
from efa_stack.checks.nag_pack import PACK_NAME
from efa_stack.planning.layout import Interface
from efa_stack.planning.node_groups import Taint
from efa_stack.planning.plan import LABEL_NODE_GROUP


@dataclass(frozen=True)
class ManagedNodeGroupProps:
    """Props of :class:`ManagedNodeGroup`; every default is what happens when the prop is left out."""

    instance_type: str
    """EC2 instance type, set in the launch template (e.g. ``p5.48xlarge``)."""
    name: str | None = None
    """Node group name for the ``efa-stack.io/node-group`` tag on instances, volumes and the node group;
    no tag when None."""
    ami_type: str = "AL2023_X86_64_STANDARD"
    """Member name of ``aws_eks_v2.NodegroupAmiType`` (``AL2023_X86_64_NVIDIA`` for GPU nodes)."""
    min_size: int = 1
    desired_size: int = 1
    max_size: int = 1
    interfaces: Sequence[Interface] = ()
    """Network interfaces of the launch template (:func:`efa_stack.planning.layout.interface_layout`); none: the
    instance's default ENA interface and template-level security groups."""
    volume_size_gib: int = 200
    """Root volume (encrypted) size in GiB."""
    volume_type: str = "gp3"
    volume_iops: int | None = None
    """Provisioned IOPS of the root volume (required for io1/io2; gp3 default 3000 when None)."""
    volume_throughput: int | None = None
    """gp3 throughput in MiB/s (125 when None)."""
    placement_group: bool = False
    """Create a new cluster placement group for the nodes."""
    placement_group_name: str | None = None
    """An existing placement group the launch template uses instead (then leave ``placement_group`` False)."""
    capacity: str = contract.ON_DEMAND
    """``on-demand``, ``reservation`` (a targeted capacity reservation) or ``capacity-block``."""
    reservation_id: str | None = None
    """The ``cr-...`` id; required unless ``capacity`` is on-demand."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Kubernetes node labels."""
    taints: Sequence[Taint] = ()
    """Kubernetes node taints (none by default)."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Extra tags on the instances, volumes and node group."""
    hugepages_2mi_mib: int = 0
    """MiB of 2 MiB hugepages each node reserves at boot (user data); 0 reserves none."""
    lustre_client: bool = False
    """Install the Lustre client at boot (for FSx for Lustre volumes)."""
    kubelet_config: Mapping[str, str] = field(default_factory=dict)
    """``KubeletConfiguration`` keys for the nodes' nodeadm ``NodeConfig`` (e.g. ``cpuManagerPolicy: static``);
    empty: the AMI's kubelet defaults. Changing them changes the launch template and replaces the nodes."""
    node_repair: Mapping[str, Any] | None = None
    """CloudFormation ``AWS::EKS::Nodegroup NodeRepairConfig`` (``{"Enabled": True, ...limits}``); None: no
    repair (EKS's default). Repair acts on the conditions of the ``eks-node-monitoring-agent`` add-on."""

    @property
    def efa_enabled(self) -> bool:
        """True when the launch template declares EFA interfaces."""
        return any(i.is_efa for i in self.interfaces)

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
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        props: ManagedNodeGroupProps,
        subnets: Sequence[ec2.ISubnet],
        security_group_ids: Sequence[str],
        node_role: iam.IRole | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.props = plan = props
        tags = {**({LABEL_NODE_GROUP: names.node_group_label_value(plan.name)} if plan.name else {}), **plan.tags}
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
            kubelet_config=plan.kubelet_config,
            tags=tags,
        )
        if plan.efa_enabled and not plan.placement_group and plan.placement_group_name is None \
                and plan.capacity == contract.ON_DEMAND:
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
            nodegroup_name=names.eks_nodegroup_name(plan.name) if plan.name is not None else None,
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
            enable_node_auto_repair=True if plan.node_repair else None,
        )
        if plan.node_repair:
            # aws_eks_v2.Nodegroup has only enableNodeAutoRepair; the limits go in as CloudFormation
            # AWS::EKS::Nodegroup NodeRepairConfig (docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/
            # aws-properties-eks-nodegroup-noderepairconfig.html).
            cfn = self.nodegroup.node.default_child
            assert isinstance(cfn, eks.CfnNodegroup)
            cfn.add_property_override("NodeRepairConfig", dict(plan.node_repair))
