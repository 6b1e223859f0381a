"""``efa-stack lookup``: an existing VPC's subnet zones from EC2 DescribeSubnets, recorded in cdk.context.json and
read back by the plan (efa_stack/tools/lookup.py). EC2 answers come from botocore Stubbers in the shape of the EC2
API (Subnets[].SubnetId, VpcId, AvailabilityZone), validated against botocore's model."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber
from typer.testing import CliRunner

from efa_stack import contract
from efa_stack.errors import UserError
from efa_stack.planning.plan import plan_from_text
from efa_stack.spec.errors import SpecError
from efa_stack.spec.loader import parse_spec
from efa_stack.tools import lookup
from efa_stack.tools.cli import app

VPC = "vpc-0a1b2c3d4e5f60718"
SUBNETS = {"subnet-0a1b2c3d4e5f60011": "us-west-2a", "subnet-0a1b2c3d4e5f60012": "us-west-2b"}
SPEC = f"""
apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata: {{name: lk, region: us-west-2, version: "1.34"}}
vpc:
  id: {VPC}
  subnets:
    private:
      private-one: {{id: subnet-0a1b2c3d4e5f60011}}
      private-two: {{id: subnet-0a1b2c3d4e5f60012}}
      us-west-2c: {{id: subnet-0a1b2c3d4e5f60013}}
managedNodeGroups:
  - name: gpu
    instanceType: p5.48xlarge
    minSize: 1
    availabilityZones: [us-west-2a]
    efaEnabled: true
    privateNetworking: true
"""


def _ec2():
    return boto3.Session(region_name="us-west-2").client("ec2", region_name="us-west-2")


def _answer(rows: dict[str, str], vpc: str = VPC) -> dict:
    return {"Subnets": [{"SubnetId": s, "VpcId": vpc, "AvailabilityZone": z} for s, z in rows.items()]}


def test_only_subnets_without_a_zone_are_looked_up():
    # the entry named after its zone says it; the other two say nothing
    assert lookup.subnets_to_look_up(parse_spec(SPEC)) == sorted(SUBNETS)


def test_the_plan_refuses_unknown_zones_and_names_the_lookup():
    with pytest.raises(SpecError) as info:
        plan_from_text(SPEC)
    az = [p for p in info.value.problems if p.field.endswith(".az")]
    assert [p.field for p in az] == ["vpc.subnets.private.private-one.az", "vpc.subnets.private.private-two.az"]
    assert "efa-stack lookup --spec" in az[0].fix


def test_zones_from_ec2_are_recorded_and_read_back(tmp_path):
    ec2 = _ec2()
    with Stubber(ec2) as stub:
        stub.add_response("describe_subnets", _answer(SUBNETS), {"SubnetIds": sorted(SUBNETS)})
        zones = lookup.look_up_zones(ec2, parse_spec(SPEC))
    assert zones == SUBNETS
    context_file = tmp_path / contract.CDK_CONTEXT_FILE
    context_file.write_text(json.dumps({"availability-zones:account=1:region=us-west-2": ["us-west-2a"]}))
    lookup.record_zones(zones, context_file)
    data = json.loads(context_file.read_text())
    assert data[contract.SUBNET_ZONES_CONTEXT] == SUBNETS
    assert "availability-zones:account=1:region=us-west-2" in data  # the CDK's own lookups are kept
    plan = plan_from_text(SPEC, subnet_zones=lookup.recorded_zones(context_file))
    assert plan.existing_vpc is not None
    assert dict(plan.existing_vpc.private_subnets)["subnet-0a1b2c3d4e5f60011"] == "us-west-2a"


def test_fails_a_subnet_of_another_vpc():
    ec2 = _ec2()
    with Stubber(ec2) as stub, pytest.raises(UserError) as info:
        stub.add_response("describe_subnets", _answer(SUBNETS, vpc="vpc-0ffffffffffffffff"), {"SubnetIds": sorted(SUBNETS)})
        lookup.look_up_zones(ec2, parse_spec(SPEC))
    assert info.value.message.startswith("subnet subnet-0a1b2c3d4e5f60011 is in vpc-0ffffffffffffffff, not in vpc.id")


def test_fails_a_subnet_ec2_does_not_know():
    ec2 = _ec2()
    with Stubber(ec2) as stub, pytest.raises(UserError) as info:
        stub.add_client_error("describe_subnets", "InvalidSubnetID.NotFound", "The subnet ID 'subnet-0a1' does not exist",
                              expected_params={"SubnetIds": sorted(SUBNETS)})
        lookup.look_up_zones(ec2, parse_spec(SPEC))
    assert "does not know subnet(s) of vpc.subnets" in info.value.message and "describe-subnets" in info.value.fix


def test_fails_a_context_file_that_is_not_json(tmp_path):
    bad = tmp_path / contract.CDK_CONTEXT_FILE
    bad.write_text("{not json")
    with pytest.raises(UserError) as info:
        lookup.record_zones(SUBNETS, bad)
    assert "is not JSON" in info.value.message


def test_the_command_says_when_there_is_nothing_to_look_up(tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text(SPEC.replace("private-one", "us-west-2a").replace("private-two", "us-west-2b"))
    result = CliRunner().invoke(app, ["lookup", "--spec", str(spec), "--context-file", str(tmp_path / "ctx.json")])
    assert result.exit_code == 0 and "nothing to look up" in result.output
    assert not (tmp_path / "ctx.json").exists()


def test_the_app_reads_the_recorded_zones_from_the_cdk_context(monkeypatch):
    import app as entry

    monkeypatch.setenv("CDK_CONTEXT_JSON", json.dumps({contract.SUBNET_ZONES_CONTEXT: SUBNETS, "spec": "x.yaml"}))
    assert entry._subnet_zones(entry._cli_context(contract.SUBNET_ZONES_CONTEXT)) == SUBNETS
    assert entry._subnet_zones(["not", "a", "mapping"]) == {}
