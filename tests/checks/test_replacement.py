"""No accidental replacement of long-lived resources, and deterministic synth."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from efa_stack.checks.replacement import UnknownResourceType, replaced_resources, replacing_properties
from tests.support import (
    BASE,
    CLUSTERS,
    NO_ASSET_STAGING,
    TEMPLATE_VALIDATION,
    normalise_assets,
    scratch_dir,
    synth_spec,
    synth_text,
)

# Logical ids of resources whose replacement destroys state. Changing one is a breaking change:
# see docs/development.md, "Changing a pinned resource".
PINNED = {"Vpc": "AWS::EC2::VPC", "EksCluster": "AWS::EKS::Cluster", "ClusterSecretsKey": "AWS::KMS::Key"}
PINNED_STORAGE = {"LustreFileSystem": "AWS::FSx::FileSystem"}
PINNED_S3_LINK = {"LustreS3Association": "AWS::FSx::DataRepositoryAssociation"}


@pytest.mark.parametrize("spec", sorted(p.name for p in CLUSTERS.glob("*.yaml")))
def test_pinned_logical_ids(spec):
    s = synth_spec(str(CLUSTERS / spec))
    resources = s.template("cluster")["Resources"]
    pinned = dict(PINNED) if s.plan.existing_vpc is None else {k: v for k, v in PINNED.items() if k != "Vpc"}
    if s.plan.storage is not None:
        pinned |= PINNED_STORAGE
        if any(r["Type"] == "AWS::FSx::DataRepositoryAssociation" for r in resources.values()):
            pinned |= PINNED_S3_LINK
    for lid, type_ in pinned.items():
        assert resources.get(lid, {}).get("Type") == type_, f"{spec}: {lid} moved"


def both(before: str, after: str, stack: str) -> list:
    return replaced_resources(synth_text(before).template(stack), synth_text(after).template(stack))


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda t: t.replace("desiredCapacity: 2\n    maxSize: 3", "desiredCapacity: 3\n    maxSize: 8"), id="node-counts"),
        pytest.param(lambda t: t + BASE.split("managedNodeGroups:\n", 1)[1].replace("name: gpu", "name: gpu2").replace("p5.48xlarge", "p5en.48xlarge"), id="add-node-group"),
        pytest.param(lambda t: t.replace("p5.48xlarge", "p4d.24xlarge"), id="instance-type"),
        pytest.param(lambda t: t + "ncclTest: {binary: all_gather_perf, maxBytes: 1G}\n", id="nccl-sweep"),
    ],
)
def test_frequent_changes_never_replace_the_cluster_or_network(change):
    assert both(BASE, change(BASE), "cluster") == []


def test_a_replacing_change_is_detected():
    changed = BASE + "vpc: {cidr: 10.1.0.0/16}\n"
    found = both(BASE, changed, "cluster")
    assert ("Vpc", "CidrBlock changed") in {(r.logical_id, r.why) for r in found}
    subnets = [r for r in found if r.type == "AWS::EC2::Subnet"]
    assert subnets and all(r.why == "CidrBlock changed" for r in subnets)


def test_a_renamed_cluster_is_detected():
    found = both(BASE, BASE.replace("name: t,", "name: t2,"), "cluster")
    assert ("EksCluster", "Name changed") in {(r.logical_id, r.why) for r in found}


def test_flipping_the_creator_admin_bootstrap_replaces_the_cluster():
    # CloudFormation AWS::EKS::Cluster AccessConfig.BootstrapClusterCreatorAdminPermissions:
    # "Update requires: Replacement" (a createOnlyProperty of the resource schema)
    found = both(BASE, BASE + "accessConfig: {bootstrapClusterCreatorAdminPermissions: false}\n", "cluster")
    assert ("EksCluster", "AccessConfig.BootstrapClusterCreatorAdminPermissions changed") in {
        (r.logical_id, r.why) for r in found
    }


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


def synth_files(spec: Path) -> dict[str, str]:
    from aws_cdk import App

    from efa_stack.planning.plan import plan_from_file
    from stacks.compose import build

    out = scratch_dir("efa-stack-det-")
    app = App(outdir=str(out), context=NO_ASSET_STAGING, builtin_cloud_formation_validation=TEMPLATE_VALIDATION)
    build(app, plan_from_file(spec))
    app.synth()
    return {p.name: normalise_assets(p.read_text()) for p in sorted(out.glob("*.template.json"))}


def test_synth_is_deterministic(default_synth):
    """A fresh synth of the default spec writes the same templates as the session's earlier one."""
    spec = CLUSTERS / "default.yaml"
    earlier = default_synth.outdir
    first = {p.name: normalise_assets(p.read_text()) for p in sorted(earlier.glob("*.template.json"))}
    second = synth_files(spec)
    assert first.keys() == second.keys() and len(first) == 1
    for name, text in first.items():
        assert text == second[name], name
    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:", "".join(first.values())), "timestamps in templates"


def test_synth_warnings_are_read_from_the_stacks_metadata_files(tmp_path):
    """aws-cdk-lib 2.275 writes a stack's annotations to its own metadata file (the manifest's
    additionalMetadataFile), where the suite's warnings-are-errors check must find them."""
    from aws_cdk import Annotations, App, Stack

    from tests.support import synth_warnings

    # CDK's built-in template validation is not what is tested (and costs seconds): off, as in the other test synths
    app = App(outdir=str(tmp_path), builtin_cloud_formation_validation=False)
    Annotations.of(Stack(app, "S")).add_warning_v2("efa-stack:test", "a warning the suite must see")
    app.synth()
    assert any("a warning the suite must see" in w for w in synth_warnings(tmp_path))
