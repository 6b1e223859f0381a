"""The VPC an EFA cluster needs and the EFA security group.

Private subnets with NAT in every zone of the spec, public subnets only for NAT and load balancers, S3
gateway and (optional) interface endpoints, and an EFA security group open only to itself
(docs/design/efa-interfaces.md). With a pod range (VPC CNI custom networking, docs/design/scale.md) the VPC also
takes that secondary block and one pod subnet per zone, routed like the private subnets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aws_cdk import Annotations, RemovalPolicy, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from aws_constructs.security import acknowledge

INTERFACE_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "Ec2": ec2.InterfaceVpcEndpointAwsService.EC2,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
}


# CDK's own placeholder for "no egress": an ICMP type/code pair that matches no packet.
DISALLOW_ALL_EGRESS = {
    "CidrIp": "255.255.255.255",
    "Description": "Disallow all traffic",
    "IpProtocol": "icmp",
    "FromPort": 252,
    "ToPort": 86,
}


@dataclass(frozen=True)
class EfaVpcProps:
    """Props of :class:`EfaVpc`; every default is what happens when the prop is left out."""

    cidr: str
    """The VPC's IPv4 CIDR."""
    availability_zones: Sequence[str]
    """Zones with one public and one private subnet each (EKS needs at least two)."""
    nat_gateways: int = 1
    """NAT gateways for the private subnets' egress."""
    interface_endpoints: bool = True
    """Interface endpoints (ECR, STS, EC2, logs, ...) for private nodes; the S3 gateway endpoint is always made."""
    private_subnet_mask: int = 19
    """Prefix length of each private subnet: large, since every ENA or EFA interface of a node takes an address
    and the VPC CNI gives pods addresses too (:func:`efa_stack.planning.limits.subnet_plan` picks masks that fit)."""
    public_subnet_mask: int = 24
    """Prefix length of each public subnet."""
    pod_cidr: str | None = None
    """A secondary IPv4 block for the pods (VPC CNI custom networking); None: no secondary block, no pod subnets."""
    pod_subnets: Mapping[str, str] = field(default_factory=dict)
    """Zone -> CIDR of the pod subnet there, inside ``pod_cidr`` (:func:`efa_stack.planning.addressing.pod_network`);
    each routes to the internet through the NAT gateway its zone's private subnet uses."""


class EfaVpc(Construct):
    """A VPC with private subnets in the given zones, NAT egress and the endpoints private nodes use."""

    def __init__(self, scope: Construct, id: str, props: EfaVpcProps) -> None:
        super().__init__(scope, id)
        self.props = props
        cidr, availability_zones, nat_gateways = props.cidr, list(props.availability_zones), props.nat_gateways
        private_subnet_mask, public_subnet_mask = props.private_subnet_mask, props.public_subnet_mask
        interface_endpoints = props.interface_endpoints
        if len(availability_zones) < 2:
            raise ValueError(
                f"EfaVpc needs at least two availability zones (EKS requirement), got {availability_zones}"
            )
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            availability_zones=availability_zones,
            nat_gateways=nat_gateways,
            restrict_default_security_group=False,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=public_subnet_mask
                ),
                ec2.SubnetConfiguration(
                    name="Private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=private_subnet_mask
                ),
            ],
        )
        # Pinned: the logical id survives refactors of the construct tree (a new id would replace the VPC).
        self.vpc.node.default_child.override_logical_id("Vpc")
        for subnet in self.vpc.public_subnets:
            Tags.of(subnet).add("kubernetes.io/role/elb", "1")
        for subnet in self.vpc.private_subnets:
            Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")
        self.flow_log_group = logs.LogGroup(
            self, "FlowLogs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.RETAIN
        )
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.REJECT,
        )
        s3 = self.vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)
        self.pod_subnets: dict[str, ec2.Subnet] = {}
        """Zone -> pod subnet (with ``pod_cidr``)."""
        if props.pod_cidr is not None:
            self._pod_network(props.pod_cidr, props.pod_subnets, s3)
        if interface_endpoints:
            for name, service in INTERFACE_ENDPOINTS.items():
                endpoint = self.vpc.add_interface_endpoint(
                    name,
                    service=service,
                    subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
                    private_dns_enabled=True,
                )
                if props.pod_cidr is not None:  # CDK opens the endpoint to the primary block only
                    endpoint.connections.allow_from(
                        ec2.Peer.ipv4(props.pod_cidr), ec2.Port.tcp(443), "HTTPS from the pods' range",
                    )
                for sg in endpoint.connections.security_groups:
                    acknowledge(
                        sg, "AwsSolutions-EC23",
                        "The endpoint's group admits HTTPS from the VPC CIDR only; cdk-nag cannot read "
                        "the CIDR because it is a CloudFormation attribute of the VPC.",
                    )

    def _pod_network(self, pod_cidr: str, subnets: Mapping[str, str], s3: ec2.GatewayVpcEndpoint) -> None:
        """The secondary block, a pod subnet per zone after it, each with its zone's NAT route and the S3 endpoint."""
        # AWS::EC2::VPCCidrBlock: a subnet in the block can be created only once the association exists.
        self.pod_cidr_block = ec2.CfnVPCCidrBlock(self, "PodCidr", vpc_id=self.vpc.vpc_id, cidr_block=pod_cidr)
        route_tables = []
        for i, (zone, cidr) in enumerate(subnets.items()):
            subnet = ec2.Subnet(
                self, f"PodSubnet{i + 1}", vpc_id=self.vpc.vpc_id, availability_zone=zone, cidr_block=cidr,
                map_public_ip_on_launch=False,
            )
            subnet.node.add_dependency(self.pod_cidr_block)
            subnet.add_default_nat_route(self._nat_gateway_of(zone))
            Tags.of(subnet).add("Name", f"{self.node.path}/Pods-{zone}")
            self.pod_subnets[zone] = subnet
            route_tables.append(subnet.route_table.route_table_id)
        cfn = s3.node.default_child
        assert isinstance(cfn, ec2.CfnVPCEndpoint)
        cfn.route_table_ids = [*(cfn.route_table_ids or []), *route_tables]

    def _nat_gateway_of(self, availability_zone: str) -> str:
        """The NAT gateway the private subnet of ``availability_zone`` routes through (one per zone, or the one)."""
        private = self.private_subnet(availability_zone)
        route = private.node.try_find_child("DefaultRoute")
        if not isinstance(route, ec2.CfnRoute) or route.nat_gateway_id is None:
            raise ValueError(f"the private subnet of {availability_zone} has no NAT route")
        return route.nat_gateway_id

    def private_subnet(self, availability_zone: str) -> ec2.ISubnet:
        """The private subnet of ``availability_zone`` (where an EFA node group lives)."""
        for subnet in self.vpc.private_subnets:
            if subnet.availability_zone == availability_zone:
                return subnet
        zones = [s.availability_zone for s in self.vpc.private_subnets]
        raise ValueError(f"no private subnet in {availability_zone}; the VPC has private subnets in {zones}")


@dataclass(frozen=True)
class EfaSecurityGroupProps:
    """Props of :class:`EfaSecurityGroup`; every default is what happens when the prop is left out."""

    description: str = "EFA: all traffic between members of this group only"
    """The group's description (changing it replaces the group)."""


class EfaSecurityGroup(Construct):
    """A security group whose members may exchange any traffic with each other, and nothing else.

    EFA's OS-bypass traffic needs all protocols and ports between the nodes, in both directions. The
    group is created with ``allow_all_outbound=False`` because CDK silently drops ``add_egress_rule``
    on a group that allows all outbound traffic; the self-referencing egress rule is then explicit.
    General egress comes from the EKS cluster security group attached to the same interfaces.
    """

    def __init__(
        self, scope: Construct, id: str, props: EfaSecurityGroupProps | None = None, *, vpc: ec2.IVpc,
    ) -> None:
        super().__init__(scope, id)
        self.props = props = props or EfaSecurityGroupProps()
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description=props.description,
        )
        # A group that names itself as peer gets standalone ingress/egress resources (no cycle).
        sg = self.security_group
        sg.add_ingress_rule(sg, ec2.Port.all_traffic(), "EFA traffic from group members")
        sg.add_egress_rule(sg, ec2.Port.all_traffic(), "EFA traffic to group members")
        # EC2 gives a group the default allow-all egress rule unless the group itself lists egress
        # rules. CDK drops its "disallow all" placeholder once the self rule exists, but renders that
        # rule as a separate resource, so keep the placeholder inline: it matches no traffic and
        # removes the default rule, leaving the self-referencing egress as the only real one.
        cfn = sg.node.default_child
        assert isinstance(cfn, ec2.CfnSecurityGroup)
        cfn.add_property_override("SecurityGroupEgress", [DISALLOW_ALL_EGRESS])

    @property
    def security_group_id(self) -> str:
        return self.security_group.security_group_id

    @property
    def rules(self) -> list[ec2.CfnSecurityGroupIngress | ec2.CfnSecurityGroupEgress]:
        """The self-referencing rules, which CDK renders as resources of their own."""
        return [
            c for c in self.security_group.node.children
            if isinstance(c, (ec2.CfnSecurityGroupIngress, ec2.CfnSecurityGroupEgress))
        ]

    def retain(self) -> None:
        """Keep the group and its rules when the stack is deleted or they are replaced: for a retained resource that
        uses the group (an EFA-enabled file system's interfaces), whose group EC2 refuses to delete."""
        cfn = self.security_group.node.default_child
        assert isinstance(cfn, ec2.CfnSecurityGroup)
        for resource in (cfn, *self.rules):
            resource.apply_removal_policy(RemovalPolicy.RETAIN)


@dataclass(frozen=True)
class ExistingVpcProps:
    """Props of :class:`ExistingVpc`: an existing VPC and the subnets to use (nothing is created)."""

    vpc_id: str
    private_subnets: Sequence[tuple[str, str]]
    """(subnet id, availability zone) of each private subnet (with egress through NAT or endpoints)."""
    public_subnets: Sequence[tuple[str, str]] = ()


class ExistingVpc(Construct):
    """An existing VPC and its subnets, as :class:`EfaVpc` offers them (``vpc``, ``private_subnet``)."""

    def __init__(self, scope: Construct, id: str, props: ExistingVpcProps) -> None:
        super().__init__(scope, id)
        self.props = props
        self.private_subnets = [
            ec2.Subnet.from_subnet_attributes(self, f"Private{i}", subnet_id=subnet, availability_zone=zone)
            for i, (subnet, zone) in enumerate(props.private_subnets)
        ]
        self.public_subnets = [
            ec2.Subnet.from_subnet_attributes(self, f"Public{i}", subnet_id=subnet, availability_zone=zone)
            for i, (subnet, zone) in enumerate(props.public_subnets)
        ]
        zones = list(dict.fromkeys(z for _, z in props.private_subnets))
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self, "Vpc", vpc_id=props.vpc_id, availability_zones=zones,
            private_subnet_ids=[s.subnet_id for s in self._one_per_zone(self.private_subnets, zones)],
            public_subnet_ids=[s.subnet_id for s in self._one_per_zone(self.public_subnets, zones)] or None,
        )
        # aws-cdk-lib warns that the imported subnets have no route table id; efa-stack adds no route, gateway
        # endpoint or anything else that needs one to an existing VPC.
        Annotations.of(self).acknowledge_warning(
            "@aws-cdk/aws-ec2:noSubnetRouteTableId", "no route or gateway endpoint is added to an existing VPC",
        )

    @staticmethod
    def _one_per_zone(subnets: Sequence[ec2.ISubnet], zones: Sequence[str]) -> list[ec2.ISubnet]:
        """The first subnet of each zone, in ``zones``' order (``from_vpc_attributes`` takes one per zone), or
        none when a zone has none."""
        chosen = [next((s for s in subnets if s.availability_zone == z), None) for z in zones]
        return [s for s in chosen if s is not None] if all(chosen) else []

    def private_subnet(self, availability_zone: str) -> ec2.ISubnet:
        """The first private subnet of ``availability_zone``."""
        for subnet in self.private_subnets:
            if subnet.availability_zone == availability_zone:
                return subnet
        raise ValueError(f"no private subnet in {availability_zone}")

    def subnet(self, subnet_id: str) -> ec2.ISubnet:
        """The private subnet ``subnet_id``."""
        return next(s for s in self.private_subnets if s.subnet_id == subnet_id)
