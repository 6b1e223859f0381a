"""aws_constructs/fsx.py: the FSx for Lustre file system construct from its own props, in one App and one Stack with a
VPC of its own: what FSx accepts, the volume's attributes, what a change replaces, EFA, and cfn-lint of its
template. The storage part of the cluster stack: tests/stacks/test_storage_stack.py."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from aws_constructs.fsx import FILE_SYSTEM_LOGICAL_ID, LustreFileSystem, LustreFileSystemProps
from aws_constructs.network import EfaSecurityGroup
from efa_stack.checks.replacement import replaced_resources
from efa_stack.planning.storage import MetadataPlan, S3LinkPlan
from k8s.storage import StaticVolumeProps, storage_manifests
from tests.builders import PRIVATE
from tests.test_cfn_lint import lint


def _bare_stack() -> tuple[Stack, ec2.Vpc]:
    stack = Stack(App(builtin_cloud_formation_validation=False), "Bare", env=Environment(region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=0)
    return stack, vpc


def _lustre(stack: Stack, vpc: ec2.Vpc, **props) -> LustreFileSystem:
    placement = {
        "vpc": vpc, "subnet": vpc.isolated_subnets[0] if vpc.isolated_subnets else vpc.public_subnets[0],
        "client_security_group_ids": ["sg-0123456789abcdef0"],
    }
    args: dict[str, Any] = {"deployment_type": "PERSISTENT_2", "storage_capacity_gib": 1200, "per_unit_storage_throughput": 125}
    for key in list(props):
        (placement if key in placement else args)[key] = props.pop(key)
    return LustreFileSystem(stack, "Lustre", LustreFileSystemProps(**args), **placement)


def test_pv_attributes_are_the_file_systems_own():
    # GIVEN a file system construct and the static volume built from its attributes
    stack, vpc = _bare_stack()
    fs = _lustre(stack, vpc)
    pv, pvc = storage_manifests(StaticVolumeProps(fs.file_system_id, fs.dns_name, fs.mount_name, "1200Gi"))
    # WHEN the tokens are resolved in the stack
    csi = stack.resolve(pv["spec"]["csi"])
    lid = stack.resolve(fs.file_system.ref)["Ref"]
    # THEN the handle, DNS name and mount name are the same file system resource
    assert lid == FILE_SYSTEM_LOGICAL_ID
    assert csi["volumeHandle"] == {"Ref": lid}
    assert csi["volumeAttributes"] == {
        "dnsname": {"Fn::GetAtt": [lid, "DNSName"]},
        "mountname": {"Fn::GetAtt": [lid, "LustreMountName"]},
    }
    assert csi["driver"] == "fsx.csi.aws.com"
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] == "fsx-pv"


@pytest.mark.parametrize(
    ("props", "match"),
    [
        ({"storage_capacity_gib": 3000}, "storage_capacity_gib 3000 is not allowed for PERSISTENT_2"),
        ({"per_unit_storage_throughput": 200}, "200 is not allowed for PERSISTENT_2; use one of 125"),
        ({"per_unit_storage_throughput": None}, "PERSISTENT_2 needs per_unit_storage_throughput"),
        ({"deployment_type": "SCRATCH_2"}, "given for SCRATCH_2, which has none"),
        ({"deployment_type": "SCRATCH_3"}, "not an FSx for Lustre deployment type"),
        ({"client_security_group_ids": []}, "at least one client security group"),
        (
            {"deployment_type": "SCRATCH_2", "per_unit_storage_throughput": None,
             "s3": S3LinkPlan("b1b", "", "import-path", "/", True, (), ("NEW",))},
            "automatic export needs a data repository association",
        ),
    ],
)
def test_fails_construct_props_outside_what_fsx_accepts(props, match):
    stack, vpc = _bare_stack()
    with pytest.raises(ValueError, match=match):
        _lustre(stack, vpc, **props)


def _bare_template(**props) -> dict:
    stack, vpc = _bare_stack()
    _lustre(stack, vpc, **props)
    return Template.from_stack(stack).to_json()


def test_routine_changes_never_replace_the_file_system():
    # GIVEN a PERSISTENT_2 file system WHEN capacity, throughput and compression change
    link = S3LinkPlan("b1b", "p", "association", "/", True, ("NEW",), ())
    before = _bare_template(s3=link)
    after = _bare_template(
        storage_capacity_gib=2400, per_unit_storage_throughput=250, data_compression="LZ4",
        s3=S3LinkPlan("b1b", "p", "association", "/", True, ("NEW", "CHANGED"), ("NEW",)),
    )
    # THEN CloudFormation updates it in place
    assert replaced_resources(before, after) == []
    # AND a deployment type change is a replacement (the old one is retained, see the README)
    changed = _bare_template(deployment_type="PERSISTENT_1", per_unit_storage_throughput=50)
    assert ("LustreFileSystem", "LustreConfiguration.DeploymentType changed") in {
        (r.logical_id, r.why) for r in replaced_resources(before, changed)
    }


def _efa_stack(**props: Any) -> tuple[Stack, EfaSecurityGroup]:
    stack = Stack(App(builtin_cloud_formation_validation=False), "Bare", env=Environment(region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=0)
    efa = EfaSecurityGroup(stack, "Efa", vpc=vpc)
    args: dict[str, Any] = {"deployment_type": "PERSISTENT_2", "storage_capacity_gib": 4800,
                            "per_unit_storage_throughput": 1000, "metadata": MetadataPlan("AUTOMATIC"),
                            "efa_enabled": True}
    group = props.pop("efa_security_group", efa)
    args.update(props)
    LustreFileSystem(stack, "Lustre", LustreFileSystemProps(**args), vpc=vpc, subnet=vpc.public_subnets[0],
                     client_security_group_ids=["sg-0123456789abcdef0"], efa_security_group=group)
    return stack, efa


def test_efa_file_system_is_efa_enabled_in_the_efa_group_after_its_rules_and_keeps_the_group():
    stack, efa = _efa_stack()
    resources = Template.from_stack(stack).to_json()["Resources"]
    lustre = resources[FILE_SYSTEM_LOGICAL_ID]
    lc = lustre["Properties"]["LustreConfiguration"]
    assert (lc["EfaEnabled"], lc["MetadataConfiguration"], lc["DeploymentType"]) == (True, {"Mode": "AUTOMATIC"}, "PERSISTENT_2")
    efa_id = stack.resolve(efa.security_group_id)
    assert efa_id in lustre["Properties"]["SecurityGroupIds"]
    rules = {stack.resolve(r.logical_id) for r in efa.rules}
    assert len(rules) == 2 and rules <= set(lustre["DependsOn"])
    for lid in (efa_id["Fn::GetAtt"][0], *rules):
        assert (resources[lid]["DeletionPolicy"], resources[lid]["UpdateReplacePolicy"]) == ("Retain", "Retain")


def test_a_file_system_without_efa_leaves_the_efa_group_alone():
    stack, efa = _efa_stack(efa_enabled=False, storage_capacity_gib=2400)
    resources = Template.from_stack(stack).to_json()["Resources"]
    props = resources[FILE_SYSTEM_LOGICAL_ID]["Properties"]
    assert "EfaEnabled" not in props["LustreConfiguration"]
    assert stack.resolve(efa.security_group_id) not in props["SecurityGroupIds"]
    assert "DeletionPolicy" not in resources[stack.resolve(efa.security_group_id)["Fn::GetAtt"][0]]


@pytest.mark.parametrize(("props", "match"), [
    ({"metadata": None}, "PERSISTENT_2 with metadata"),
    ({"efa_security_group": None}, "needs efa_security_group"),
    ({"storage_capacity_gib": 2400}, "not allowed for an EFA-enabled file system at 1000 MB/s/TiB; use a multiple of 4800"),
    ({"metadata": MetadataPlan("USER_PROVISIONED")}, "iops are given with USER_PROVISIONED mode"),
    ({"metadata": MetadataPlan("USER_PROVISIONED", 1000)}, "metadata iops 1000"),
])
def test_fails_construct_props_an_efa_file_system_cannot_have(props, match):
    with pytest.raises(ValueError, match=match):
        _efa_stack(**props)


@pytest.mark.integration
def test_a_scratch_file_system_linked_through_its_import_path_has_no_cfn_lint_errors():
    # GIVEN the SCRATCH_2 storage of tests.builders.PRIVATE as the cluster stack passes it to the construct
    storage = PRIVATE.plan().storage
    assert storage.deployment_type == "SCRATCH_2" and storage.s3.kind == "import-path"
    template = _bare_template(deployment_type=storage.deployment_type, storage_capacity_gib=storage.capacity_gib,
                              per_unit_storage_throughput=storage.per_unit_storage_throughput, s3=storage.s3)
    # THEN cfn-lint finds no error in its template
    errors = [f"{m.rule.id} {m.message}" for m in lint(template, "us-west-2") if m.rule.id.startswith("E")]
    assert not errors, "\n".join(errors)
