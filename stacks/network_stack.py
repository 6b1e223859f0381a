"""The cluster's network: VPC (or an existing one) and the EFA security group, in the cluster stack.

It lives in the cluster's own stack, not a stack of its own: CloudFormation starts a stack only once the stacks
it imports from are complete, so a network stack would hold the EKS cluster back until its NAT gateways, routes
and endpoints exist, which only the nodes need. In one stack the cluster waits for its subnets and groups alone
(docs/design/deploy-model.md)."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from aws_constructs.network import EfaSecurityGroup, EfaVpc, EfaVpcProps, ExistingVpc, ExistingVpcProps
from efa_stack.planning.limits import subnet_plan
from efa_stack.planning.plan import ClusterPlan


class ClusterNetwork(Construct):
    """The plan's VPC (new, with subnets sized for every address, or the spec's existing one) and EFA security group.

    A new VPC is :class:`aws_constructs.network.EfaVpc` with the plan's subnet masks, NAT gateways, interface
    endpoints and, with ``vpc.podCIDR``, the pod subnets of VPC CNI custom networking; an existing VPC (eksctl
    ``vpc.id``/``vpc.subnets``) is :class:`aws_constructs.network.ExistingVpc` and nothing is created but the group.
    """

    def __init__(self, scope: Construct, id: str, *, plan: ClusterPlan) -> None:
        super().__init__(scope, id)
        self.plan = plan
        self.network: EfaVpc | ExistingVpc
        if plan.existing_vpc is not None:  # eksctl vpc.id/vpc.subnets: use them, create no VPC
            self.network = ExistingVpc(self, "Network", ExistingVpcProps(
                vpc_id=plan.existing_vpc.id, private_subnets=plan.existing_vpc.private_subnets,
                public_subnets=plan.existing_vpc.public_subnets,
            ))
            self.efa = EfaSecurityGroup(self, "Efa", vpc=self.network.vpc)
            return
        # the plan's subnets: sized for the nodes' and pods' addresses (efa_stack.planning.addressing)
        subnets = plan.addresses.subnets if plan.addresses is not None \
            else subnet_plan(plan.vpc_cidr, len(plan.availability_zones))
        pods = plan.addresses.pods if plan.addresses is not None else None  # vpc.podCIDR: custom networking
        if subnets is None:  # build_plan reports this as a problem of vpc.cidr first
            raise ValueError(f"VPC {plan.vpc_cidr} cannot hold subnets in {len(plan.availability_zones)} zones")
        self.network = EfaVpc(self, "Network", EfaVpcProps(
            cidr=plan.vpc_cidr,
            availability_zones=plan.availability_zones,
            nat_gateways=plan.nat_gateways,
            interface_endpoints=plan.interface_endpoints,
            private_subnet_mask=subnets.private_mask,
            public_subnet_mask=subnets.public_mask,
            pod_cidr=pods.cidr if pods is not None else None,
            pod_subnets=pods.subnets if pods is not None else {},
        ))
        self.efa = EfaSecurityGroup(self, "Efa", vpc=self.network.vpc)

    @property
    def vpc(self) -> ec2.IVpc:
        """The cluster's VPC, new or existing."""
        return self.network.vpc

    @property
    def efa_security_group(self) -> ec2.ISecurityGroup:
        """The group every EFA interface is in: all traffic to and from itself."""
        return self.efa.security_group

    def private_subnet(self, availability_zone: str) -> ec2.ISubnet:
        """The private subnet in ``availability_zone`` (an EFA node group's, the file system's)."""
        return self.network.private_subnet(availability_zone)

    @property
    def pod_subnets(self) -> dict[str, ec2.ISubnet]:
        """Zone -> pod subnet of VPC CNI custom networking (empty without ``vpc.podCIDR``)."""
        return dict(self.network.pod_subnets) if isinstance(self.network, EfaVpc) else {}

    @property
    def private_subnets(self) -> list[ec2.ISubnet]:
        """Every private subnet (the cluster's control-plane interfaces go there)."""
        return list(self.network.private_subnets) if isinstance(self.network, ExistingVpc) \
            else list(self.network.vpc.private_subnets)

    def subnet(self, subnet_id: str) -> ec2.ISubnet:
        """An existing private subnet by id (eksctl ``managedNodeGroups[].subnets``)."""
        if not isinstance(self.network, ExistingVpc):
            raise TypeError("node group subnets by id need an existing VPC")
        return self.network.subnet(subnet_id)
