"""Network stack: private subnets, NAT egress, endpoints and the EFA security group."""

from __future__ import annotations

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
    from tests.conftest import synth_text
    from tests.test_spec_validation import BASE

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
    (efa_id,) = [k for k in groups if k.startswith("EfaSecurityGroup")]
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
