"""The replacement check (efa_stack/checks/replacement.py): what deploying one template over another replaces, from
the resource schemas, on hand-written templates and on the cluster stack of tests.builders.BASE before and after
changes. The shipped specs' pinned logical ids and a deterministic synth: tests/shipped/test_reliability.py."""

from __future__ import annotations

import copy
import json

import pytest

from efa_stack.checks.replacement import UnknownResourceType, replaced_resources, replacing_properties
from tests.builders import BASE, node_group

FREQUENT = BASE.with_group(desiredCapacity=3, maxSize=8, instanceType="p4d.24xlarge").add(
    node_group("gpu2", "p5en.48xlarge", desired=2, max_size=3, private=True),
).with_(ncclTest={"binary": "all_gather_perf", "maxBytes": "1G"})
"""What changes often, at once: node counts, an added node group, the instance type, the NCCL sweep."""
REPLACING = BASE.replace(name="t2").with_(
    vpc={"cidr": "10.1.0.0/16"}, accessConfig={"bootstrapClusterCreatorAdminPermissions": False})
"""Changes that replace state, at once: the VPC CIDR, the cluster's name, the creator's admin bootstrap."""


@pytest.fixture(scope="module")
def before() -> dict:
    """The cluster stack's template of tests.builders.BASE (one synth for the module's tests, on one worker)."""
    return BASE.synth().template("cluster")


@pytest.fixture(scope="module")
def replaced(before) -> set[tuple[str, str]]:
    return {(r.logical_id, r.why) for r in replaced_resources(before, REPLACING.synth().template("cluster"))}


def test_frequent_changes_never_replace_the_cluster_or_network(before):
    assert replaced_resources(before, FREQUENT.synth().template("cluster")) == []


def test_a_replacing_change_is_detected(before, replaced):  # before first: its xdist group (tests/conftest.py)
    assert ("Vpc", "CidrBlock changed") in replaced
    subnets = [(lid, why) for lid, why in replaced if "Subnet" in lid]
    assert subnets and all(why == "CidrBlock changed" for _, why in subnets)


def test_a_renamed_cluster_is_detected(before, replaced):
    assert ("EksCluster", "Name changed") in replaced


def test_flipping_the_creator_admin_bootstrap_replaces_the_cluster(before, replaced):
    # CloudFormation AWS::EKS::Cluster AccessConfig.BootstrapClusterCreatorAdminPermissions:
    # "Update requires: Replacement" (a createOnlyProperty of the resource schema)
    assert ("EksCluster", "AccessConfig.BootstrapClusterCreatorAdminPermissions changed") in replaced


def cluster(**props):
    return {"Resources": {"EksCluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Version": "1.34", **props}}}}


def test_replacing_properties_come_from_the_resource_schema():
    always, _ = replacing_properties("AWS::EKS::Cluster")
    assert "/properties/AccessConfig/BootstrapClusterCreatorAdminPermissions" in always
    assert "/properties/Version" not in always  # an upgrade is an in-place update
    # the FSx schema lacks the LustreConfiguration ones the CloudFormation reference documents
    assert "/properties/LustreConfiguration/DeploymentType" in replacing_properties("AWS::FSx::FileSystem")[0]


def test_nested_create_only_properties_are_compared_where_they_are():
    auth = {"AuthenticationMode": "API", "BootstrapClusterCreatorAdminPermissions": True}
    # changing a sibling of the create-only property is an update
    assert replaced_resources(cluster(AccessConfig=auth), cluster(AccessConfig={**auth, "AuthenticationMode": "API_AND_CONFIG_MAP"})) == []
    assert replaced_resources(cluster(Version="1.33"), cluster(Version="1.34")) == []
    # a create-only property that appears is a change too
    found = replaced_resources(cluster(), cluster(KubernetesNetworkConfig={"ServiceIpv4Cidr": "172.20.0.0/16"}))
    assert [r.why for r in found] == ["KubernetesNetworkConfig.ServiceIpv4Cidr changed"]
    lustre = {"Type": "AWS::FSx::FileSystem", "Properties": {"LustreConfiguration": {"DeploymentType": "PERSISTENT_2"}}}
    moved = copy.deepcopy(lustre)
    moved["Properties"]["LustreConfiguration"]["DeploymentType"] = "SCRATCH_2"
    assert [r.why for r in replaced_resources({"Resources": {"Fs": lustre}}, {"Resources": {"Fs": moved}})] == [
        "LustreConfiguration.DeploymentType changed"
    ]


def test_a_conditionally_replacing_property_is_reported_as_such():
    vpc = {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16", "InstanceTenancy": "default"}}
    dedicated = copy.deepcopy(vpc)
    dedicated["Properties"]["InstanceTenancy"] = "dedicated"
    found = replaced_resources({"Resources": {"Vpc": vpc}}, {"Resources": {"Vpc": dedicated}})
    assert [r.why for r in found] == ["InstanceTenancy changed (may replace)"]


def test_a_logical_id_that_disappears_is_a_replacement_and_names_its_successor():
    before = cluster()
    after = {"Resources": {"EksCluster2": before["Resources"]["EksCluster"]}}
    (found,) = replaced_resources(before, after)
    assert found.logical_id == "EksCluster" and "EksCluster2" in found.why
    # a resource that only appears replaces nothing
    assert replaced_resources({"Resources": {}}, before) == []


def test_custom_resources_have_no_schema_and_only_their_removal_counts():
    manifest = {"Type": "Custom::AWSCDK-EKS-KubernetesResource", "Properties": {"Manifest": "[]"}}
    changed = {**manifest, "Properties": {"Manifest": "[{}]"}}
    custom = ["Custom::AWSCDK-EKS-KubernetesResource"]
    assert replaced_resources({"Resources": {"M": manifest}}, {"Resources": {"M": changed}}, types=custom) == []
    assert [r.why for r in replaced_resources({"Resources": {"M": manifest}}, {"Resources": {}}, types=custom)] == [
        "logical id removed or renamed"
    ]


def test_fails_on_a_type_without_a_schema():
    res = {"Type": "AWS::Nope::Thing", "Properties": {"A": 1}}
    with pytest.raises(UnknownResourceType, match="AWS::Nope::Thing"):
        replaced_resources({"Resources": {"X": res}}, {"Resources": {"X": {**res, "Properties": {"A": 2}}}}, types=None)


def test_turning_efa_on_or_off_replaces_the_retained_file_system():
    # GIVEN one file system, its EFA setting the only difference
    lustre = {"Type": "AWS::FSx::FileSystem", "Properties": {
        "FileSystemType": "LUSTRE", "StorageCapacity": 4800,
        "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 1000,
                                "MetadataConfiguration": {"Mode": "AUTOMATIC"}},
    }}
    efa = json.loads(json.dumps(lustre))
    efa["Properties"]["LustreConfiguration"]["EfaEnabled"] = True
    # THEN either way is a replacement (the FSx guide: EFA cannot be enabled or disabled on an existing file system)
    for before, after in ((lustre, efa), (efa, lustre)):
        found = replaced_resources({"Resources": {"Fs": before}}, {"Resources": {"Fs": after}})
        assert [(r.logical_id, r.why) for r in found] == [("Fs", "LustreConfiguration.EfaEnabled changed")]
