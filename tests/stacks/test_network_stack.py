"""The cluster's network (stacks/network_stack.py): private subnets, NAT egress, endpoints and the EFA security group,
in the default spec's whole synth and, for other plans, as the network construct alone (tests.support.StackFixture)."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from efa_stack.planning.plan import ClusterPlan
from stacks.network_stack import ClusterNetwork
from tests.builders import BASE, Spec, cluster, node_group
from tests.support import StackFixture

ZONES = ["us-west-2a", "us-west-2b", "us-west-2c"]
NETWORKS = {
    "ha-nat": BASE.with_(vpc={"nat": {"gateway": "HighlyAvailable"}}),
    "2-single-endpoints": BASE.with_(vpc={"nat": {"gateway": "Single"}, "interfaceEndpoints": True}),
    "3-ha-no-endpoints": BASE.replace(zones=tuple(ZONES)).with_(
        vpc={"nat": {"gateway": "HighlyAvailable"}, "interfaceEndpoints": False}),
}


@pytest.fixture(scope="module")
def networks() -> dict[str, tuple[ClusterPlan, dict]]:
    """The network of each plan of :data:`NETWORKS` built alone (its logical ids are pinned: one stack each), with
    its plan and its template."""
    built = {}
    for key, spec in NETWORKS.items():
        f, plan = StackFixture(), spec.plan()
        ClusterNetwork(f.stack, "Network", plan=plan)
        built[key] = (plan, f.template())
    return built


def test_private_and_public_subnets_in_each_zone(default_synth):
    subnets = default_synth.resources("network", "AWS::EC2::Subnet").values()
    private = [s for s in subnets if not s["Properties"].get("MapPublicIpOnLaunch")]
    public = [s for s in subnets if s["Properties"].get("MapPublicIpOnLaunch")]
    assert sorted(s["Properties"]["AvailabilityZone"] for s in private) == ["us-west-2a", "us-west-2b"]
    assert len(public) == 2


def test_private_subnets_are_tagged_for_internal_load_balancers(default_synth):
    t = default_synth.assertions("network")
    t.has_resource_properties(
        "AWS::EC2::Subnet",
        {"MapPublicIpOnLaunch": False, "Tags": Match.array_with([{"Key": "kubernetes.io/role/internal-elb", "Value": "1"}])},
    )


def test_single_nat_gateway_by_default(default_synth):
    default_synth.assertions("network").resource_count_is("AWS::EC2::NatGateway", 1)


def test_highly_available_nat_gateways(networks):
    _, template = networks["ha-nat"]
    assert len([r for r in template["Resources"].values() if r["Type"] == "AWS::EC2::NatGateway"]) == 2


def test_s3_gateway_and_interface_endpoints(default_synth):
    endpoints = default_synth.resources("network", "AWS::EC2::VPCEndpoint").values()
    kinds = sorted(e["Properties"].get("VpcEndpointType", "Gateway") for e in endpoints)
    assert kinds.count("Gateway") == 1
    assert kinds.count("Interface") == 5
    names = json_text(endpoints)
    for service in ("ecr.api", "ecr.dkr", "sts", "ec2", "logs", "s3"):
        assert f".{service}" in names, service


def json_text(obj) -> str:
    import json

    return json.dumps(list(obj))


def test_efa_security_group_allows_all_traffic_to_and_from_itself_only(default_synth):
    groups = default_synth.resources("network", "AWS::EC2::SecurityGroup")
    (efa_id,) = [k for k in groups if "EfaSecurityGroup" in k]
    props = groups[efa_id]["Properties"]
    # allow_all_outbound=False leaves CDK's placeholder rule, which matches no traffic
    assert props["SecurityGroupEgress"] == [
        {"CidrIp": "255.255.255.255", "Description": "Disallow all traffic", "FromPort": 252, "IpProtocol": "icmp", "ToPort": 86}
    ]
    assert "SecurityGroupIngress" not in props
    ingress = default_synth.resources("network", "AWS::EC2::SecurityGroupIngress").values()
    egress = default_synth.resources("network", "AWS::EC2::SecurityGroupEgress").values()
    self_ref = {"Fn::GetAtt": [efa_id, "GroupId"]}
    efa_in = [r["Properties"] for r in ingress if r["Properties"]["GroupId"] == self_ref]
    efa_out = [r["Properties"] for r in egress if r["Properties"]["GroupId"] == self_ref]
    assert efa_in == [{"Description": "EFA traffic from group members", "GroupId": self_ref, "IpProtocol": "-1", "SourceSecurityGroupId": self_ref}]
    assert efa_out == [{"Description": "EFA traffic to group members", "DestinationSecurityGroupId": self_ref, "GroupId": self_ref, "IpProtocol": "-1"}]


def test_no_ingress_from_anywhere(default_synth):
    text = json_text(default_synth.template("network")["Resources"].values())
    assert "0.0.0.0/0\", \"IpProtocol\": \"-1\"" not in text or "SecurityGroupIngress" not in text
    for r in default_synth.resources("network", "AWS::EC2::SecurityGroupIngress").values():
        assert r["Properties"].get("CidrIp") != "0.0.0.0/0"


# --- Subnet sizes follow vpc.cidr and the number of zones ------------------------------------------

US_EAST_1 = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1e", "us-east-1f"]


def network_spec(prefix: int, zones: int) -> Spec:
    return cluster(node_group(zones=(US_EAST_1[0],)), region="us-east-1", zones=tuple(US_EAST_1[:zones])).with_(
        vpc={"cidr": f"10.0.0.0/{prefix}"})


def test_every_prefix_and_zone_count_synthesizes_or_is_a_spec_error():
    """GIVEN vpc.cidr /16../28 and 2..6 zones WHEN planned and the VPC built THEN either works, never a traceback."""
    from aws_cdk import App, Stack

    from aws_constructs.network import EfaVpc, EfaVpcProps
    from efa_stack.planning.limits import subnet_plan
    from efa_stack.spec.errors import SpecError

    app = App(builtin_cloud_formation_validation=False)
    built = 0
    for prefix in range(16, 29):
        for zones in range(2, 7):
            try:
                plan = network_spec(prefix, zones).plan()
            except SpecError as err:
                assert any(p.field == "vpc.cidr" for p in err.problems), err.render()
                continue
            subnets = subnet_plan(plan.vpc_cidr, zones)
            assert subnets is not None
            vpc = EfaVpc(Stack(app, f"N{prefix}x{zones}"), "Network", EfaVpcProps(
                cidr=plan.vpc_cidr, availability_zones=plan.availability_zones, interface_endpoints=False,
                private_subnet_mask=subnets.private_mask, public_subnet_mask=subnets.public_mask,
            ))
            assert len(vpc.vpc.private_subnets) == zones
            built += 1
    assert built >= 15  # /16../18 hold every zone count


def test_default_vpc_keeps_its_subnet_layout(default_synth):
    """The /16 default keeps /19 private and /24 public subnets (a new CIDR would replace every subnet)."""
    blocks = sorted(s["Properties"]["CidrBlock"] for s in default_synth.resources("network", "AWS::EC2::Subnet").values())
    assert blocks == ["10.0.0.0/24", "10.0.1.0/24", "10.0.128.0/19", "10.0.160.0/19"] or all(
        b.endswith(("/19", "/24")) for b in blocks
    )


@pytest.mark.parametrize(("key", "zones", "endpoints"), [("2-single-endpoints", 2, True), ("3-ha-no-endpoints", 3, False)])
def test_network_resource_count_matches_the_template(networks, key, zones, endpoints):
    """planning.limits counts the network's resources in the cluster stack before CloudFormation does."""
    from efa_stack.planning.limits import network_resource_count

    plan, template = networks[key]
    assert len(plan.availability_zones) == zones and plan.interface_endpoints is endpoints
    count = len(template["Resources"])
    assert count == network_resource_count(zones, plan.nat_gateways, endpoints, existing_vpc=False)
