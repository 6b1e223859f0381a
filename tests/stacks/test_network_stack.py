"""Network stack: private subnets, NAT egress, endpoints and the EFA security group."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match


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


def test_highly_available_nat_gateways():
    from tests.support import BASE, synth_text

    s = synth_text(BASE + "vpc:\n  nat: {gateway: HighlyAvailable}\n")
    s.assertions("network").resource_count_is("AWS::EC2::NatGateway", 2)


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


def network_spec(prefix: int, zones: int, max_size: int = 3, layout: str = "current") -> str:
    azs = ", ".join(US_EAST_1[:zones])
    return (
        "apiVersion: eksctl.io/v1alpha5\nkind: ClusterConfig\n"
        "metadata: {name: t, region: us-east-1, version: \"1.34\"}\n"
        f"availabilityZones: [{azs}]\n"
        f"vpc: {{cidr: 10.0.0.0/{prefix}}}\n"
        "managedNodeGroups:\n"
        f"  - {{name: gpu, instanceType: p5.48xlarge, minSize: 1, maxSize: {max_size}, "
        f"availabilityZones: [us-east-1a], efaEnabled: true, interfaceLayout: {layout}}}\n"
    )


def test_every_prefix_and_zone_count_synthesizes_or_is_a_spec_error():
    """GIVEN vpc.cidr /16../28 and 2..6 zones WHEN planned and the VPC built THEN either works, never a traceback."""
    from aws_cdk import App, Stack

    from aws_constructs.network import EfaVpc, EfaVpcProps
    from efa_stack.planning.limits import subnet_plan
    from efa_stack.planning.plan import build_plan
    from efa_stack.spec.errors import SpecError
    from efa_stack.spec.loader import parse_spec

    app = App(builtin_cloud_formation_validation=False)
    built = 0
    for prefix in range(16, 29):
        for zones in range(2, 7):
            try:
                plan = build_plan(parse_spec(network_spec(prefix, zones), source="t.yaml"), source="t.yaml")
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


def test_small_vpc_gets_smaller_subnets_not_a_traceback():
    from efa_stack.planning.limits import subnet_plan

    plan = subnet_plan("10.0.0.0/18", 2)
    assert plan is not None and plan.private_mask == 20 and plan.public_mask == 24


def test_fails_private_subnet_too_small_for_the_nodes_interfaces():
    """GIVEN a /20 VPC over 6 zones (/23 private subnets) WHEN 40 p5 nodes with the legacy layout (32
    `efa` interfaces, each with an address) land in one zone THEN vpc.cidr is reported with the count."""
    from efa_stack.planning.plan import build_plan
    from efa_stack.spec.errors import SpecError
    from efa_stack.spec.loader import parse_spec

    with pytest.raises(SpecError) as info:
        build_plan(parse_spec(network_spec(20, 6, max_size=40, layout="legacy"), source="t.yaml"), source="t.yaml")
    (problem,) = [p for p in info.value.problems if p.field == "vpc.cidr"]
    assert "us-east-1a" in problem.message and "maxSize" in problem.message


@pytest.mark.parametrize(("zones", "nat", "endpoints"), [(2, "Single", True), (3, "HighlyAvailable", False)])
def test_network_resource_count_matches_the_template(zones, nat, endpoints):
    """planning.limits counts the network's resources in the cluster stack before CloudFormation does."""
    from efa_stack.planning.limits import network_resource_count
    from tests.support import BASE, synth_text

    azs = ["us-west-2a", "us-west-2b", "us-west-2c"][:zones]
    text = BASE.replace("availabilityZones: [us-west-2a, us-west-2b]", f"availabilityZones: [{', '.join(azs)}]")
    text += f"vpc: {{nat: {{gateway: {nat}}}, interfaceEndpoints: {str(endpoints).lower()}}}\n"
    s = synth_text(text)
    assert len(s.plan.availability_zones) == zones
    count = len(s.template("network")["Resources"])
    assert count == network_resource_count(zones, s.plan.nat_gateways, endpoints, existing_vpc=False)
