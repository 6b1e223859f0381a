"""Shared training storage: the spec's ``storage`` section, the FSx for Lustre file system, its
security group and S3 link, the CSI driver's add-on and IAM, and the PV/PVC the jobs mount.

Two specs are synthesized once each per session: ``clusters/fsx.yaml`` (PERSISTENT_2, S3 linked
through a data repository association, dynamic provisioning on) and a SCRATCH_2 variant (S3 linked
through ImportPath, static volume only). The storage is a part of the cluster stack; ``template("storage")``
is that part's resources (tests/support.py).
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Match, Template

from aws_constructs.fsx import (
    ASSOCIATION_LOGICAL_ID,
    FILE_SYSTEM_LOGICAL_ID,
    SECURITY_GROUP_DESCRIPTION,
    SECURITY_GROUP_LOGICAL_ID,
    LustreFileSystem,
    LustreFileSystemProps,
)
from efa_stack.checks.replacement import replaced_resources
from efa_stack.planning.plan import build_plan
from efa_stack.planning.storage import S3LinkPlan, bucket_name_problem, capacity_allowed, validate_storage
from efa_stack.spec.errors import SpecError
from efa_stack.spec.loader import parse_spec
from k8s.storage import StaticVolumeProps, storage_manifests
from stacks.storage_stack import FSX_CSI_CONTROLLER_SA
from tests.support import (
    BASE,
    CLUSTERS,
    Synthesized,
    normalise_assets,
    synth_spec,
    synth_text,
)
from tests.test_cfn_lint import lint

FSX_SPEC = str(CLUSTERS / "fsx.yaml")

SCRATCH = BASE + """storage:
  deploymentType: SCRATCH_2
  storageCapacityGiB: 2400
  s3:
    bucket: training-data.example
    prefix: tfrecords/
    autoImport: [NEW, CHANGED]
"""


# --- helpers ---------------------------------------------------------------------------------


def storage_problems(text: str) -> list:
    """The storage problems of a spec, whether or not build_plan already runs validate_storage."""
    spec = parse_spec(textwrap.dedent(text), source="t.yaml")
    try:
        plan = build_plan(spec, source="t.yaml")
    except SpecError as exc:
        return [p for p in exc.problems if p.field.startswith("storage")]
    return validate_storage(spec, plan.node_groups)


def one_problem(text: str):
    problems = storage_problems(text)
    assert len(problems) == 1, [p.render() for p in problems]
    return problems[0]


def with_storage(section: str) -> str:
    return BASE + "storage:\n" + textwrap.indent(textwrap.dedent(section), "  ")


def synth_storage(path: str) -> Synthesized:
    """Synthesize ``path``; build() adds the storage to the cluster stack for a spec with a storage section."""
    synth = synth_spec(path)
    assert synth.stacks.storage is not None, f"{path} has no storage section"
    return synth


def synth_storage_text(text: str) -> Synthesized:
    synth = synth_text(text)
    assert synth.stacks.storage is not None, "the spec has no storage section"
    return synth


FIXTURE_SPECS = {"fsx": "fsx.yaml"}
"""Module fixtures that are a shipped spec's synth (tests/conftest.py runs them with that spec's tests)."""


@pytest.fixture(scope="module")
def fsx() -> Synthesized:
    return synth_storage(FSX_SPEC)


@pytest.fixture(scope="module")
def scratch() -> Synthesized:
    return synth_storage_text(SCRATCH)


def only(s: Synthesized, type_: str) -> tuple[str, dict]:
    (item,) = s.resources("storage", type_).items()
    return item


def manifest_objects(s: Synthesized) -> list[dict]:
    """The storage manifest with every CloudFormation value replaced by a readable marker."""
    (res,) = s.resources("storage", "Custom::AWSCDK-EKS-KubernetesResource").values()
    parts = res["Properties"]["Manifest"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else marker(p) for p in parts)
    return json.loads(text)


def marker(value: dict) -> str:
    if "Ref" in value:
        return f"<Ref {value['Ref']}>"
    if "Fn::GetAtt" in value:
        return "<GetAtt {}.{}>".format(*value["Fn::GetAtt"])
    if "Fn::ImportValue" in value:
        return f"<Import {value['Fn::ImportValue']}>"
    raise AssertionError(f"unexpected value in the manifest: {value}")


def by_kind(objects: list[dict], kind: str) -> dict:
    (obj,) = [o for o in objects if o["kind"] == kind]
    return obj


# --- spec: off by default, defaults, valid input ------------------------------------------------


def test_storage_is_off_by_default(default_synth):
    assert default_synth.plan.storage is None
    assert not any(name.endswith("-storage") for name in default_synth.templates)


def test_enabled_false_keeps_the_section_but_creates_nothing():
    plan = build_plan(parse_spec(with_storage("enabled: false\nstorageCapacityGiB: 3000\n")))
    assert plan.storage is None


def test_defaults_follow_the_gpu_node_group():
    # GIVEN a spec with a CPU group first and the EFA GPU group second
    text = BASE.replace("managedNodeGroups:\n", "managedNodeGroups:\n  - {name: cpu, instanceType: m7i.xlarge}\n")
    # WHEN storage is turned on with defaults
    plan = build_plan(parse_spec(text + "storage: {}\n"))
    sp = plan.storage
    # THEN the file system sits in the GPU group's zone, as PERSISTENT_2 at the lowest throughput
    assert (sp.node_group, sp.availability_zone) == ("gpu", "us-west-2a")
    assert (sp.deployment_type, sp.capacity_gib, sp.per_unit_storage_throughput) == ("PERSISTENT_2", 1200, 125)
    assert sp.mount_path == "/fsx" and sp.claim_name == "fsx-claim" and sp.capacity_quantity == "1200Gi"
    assert sp.lustre_version == "2.15" and sp.s3 is None and not sp.dynamic_provisioning
    assert [(t.key, t.effect) for t in sp.tolerations] == [("nvidia.com/gpu", "NoSchedule")]


def test_scratch_link_uses_import_path_and_association_only_on_persistent_2():
    sp = build_plan(parse_spec(SCRATCH)).storage
    assert sp.s3.kind == "import-path" and not sp.uses_association
    assert sp.s3.data_repository_path == "s3://training-data.example/tfrecords/"
    assert sp.s3.auto_import_policy == "NEW_CHANGED"
    assert S3LinkPlan("b1b", "", "import-path", "/", True, (), ()).data_repository_path == "s3://b1b/"
    assert sp.per_unit_storage_throughput is None
    p2 = build_plan(parse_spec(SCRATCH.replace("SCRATCH_2", "PERSISTENT_2"))).storage
    assert p2.s3.kind == "association" and p2.uses_association


@pytest.mark.parametrize(
    ("deployment_type", "gib", "ok"),
    [
        ("SCRATCH_2", 1200, True), ("SCRATCH_2", 2400, True), ("SCRATCH_2", 4800, True), ("SCRATCH_2", 3600, False),
        ("PERSISTENT_2", 7200, True), ("PERSISTENT_2", 1000, False), ("PERSISTENT_1", 9600, True),
        ("SCRATCH_1", 3600, True), ("SCRATCH_1", 7200, True), ("SCRATCH_1", 4800, False),
    ],
)
def test_capacity_rules_per_deployment_type(deployment_type, gib, ok):
    assert capacity_allowed(deployment_type, gib) is ok


@pytest.mark.parametrize("name", ["abc", "my-bucket.v2", "training-data.example", "a" * 63, "1bucket"])
def test_bucket_names_that_are_bucket_names(name):
    assert bucket_name_problem(name) is None


# --- spec: bad input, each a clear error before synth ------------------------------------------


def test_fails_capacity_not_allowed_for_the_deployment_type():
    p = one_problem(with_storage("deploymentType: PERSISTENT_2\nstorageCapacityGiB: 3000\n"))
    assert (p.field, p.value) == ("storage.storageCapacityGiB", 3000)
    assert "not allowed for deploymentType PERSISTENT_2" in p.message
    assert "multiple of 2400" in p.fix and "2400 or 4800" in p.fix


def test_fails_capacity_of_scratch_1_in_steps_of_2400():
    p = one_problem(with_storage("deploymentType: SCRATCH_1\nstorageCapacityGiB: 4800\n"))
    assert p.value == 4800 and "multiple of 3600" in p.fix and "3600 or 7200" in p.fix


def test_fails_throughput_not_allowed_for_the_deployment_type():
    p = one_problem(with_storage("deploymentType: PERSISTENT_2\nperUnitStorageThroughput: 200\n"))
    assert (p.field, p.value) == ("storage.perUnitStorageThroughput", 200)
    assert "not allowed for deploymentType PERSISTENT_2" in p.message
    assert p.fix == "use one of 125, 250, 500, 1000 (MB/s per TiB)"


def test_fails_throughput_on_a_scratch_file_system():
    p = one_problem(with_storage("deploymentType: SCRATCH_2\nperUnitStorageThroughput: 125\n"))
    assert p.field == "storage.perUnitStorageThroughput" and "SCRATCH_2" in p.message
    assert "remove perUnitStorageThroughput" in p.fix


def test_fails_s3_export_on_a_deployment_type_that_cannot_have_one():
    # GIVEN a SCRATCH_2 file system, which links S3 through ImportPath (no data repository association)
    text = SCRATCH + "    autoExport: [NEW]\n"
    # WHEN the spec is validated THEN automatic export is refused, naming the type and the way out
    p = one_problem(text)
    assert (p.field, p.value) == ("storage.s3.autoExport", ["NEW"])
    assert "data repository association" in p.message and "SCRATCH_2" in p.message
    assert "PERSISTENT_2" in p.fix


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("fileSystemPath: /datasets", "storage.s3.fileSystemPath"),
        ("importOnCreate: false", "storage.s3.importOnCreate"),
    ],
)
def test_fails_association_only_link_settings_on_scratch(section, field):
    assert one_problem(SCRATCH + f"    {section}\n").field == field


def test_fails_auto_import_events_the_import_path_link_cannot_express():
    p = one_problem(SCRATCH.replace("autoImport: [NEW, CHANGED]", "autoImport: [CHANGED]"))
    assert (p.field, p.value) == ("storage.s3.autoImport", ["CHANGED"])


@pytest.mark.parametrize(
    ("bucket", "why"),
    [
        ("s3://my-bucket", "bucket name alone"),
        ("my-bucket/tfrecords", "bucket name alone"),
        ("ab", "3 to 63"),
        ("b" * 64, "3 to 63"),
        ("My_Bucket", "lowercase"),
        ("-bucket", "begin and end"),
        ("bucket.", "begin and end"),
        ("my..bucket", "two adjacent periods"),
        ("192.168.5.4", "IP address"),
        ("xn--bucket", "'xn--'"),
        ("data-s3alias", "'-s3alias'"),
    ],
)
def test_fails_a_bucket_name_that_is_not_a_bucket_name(bucket, why):
    p = one_problem(with_storage(f"s3: {{bucket: '{bucket}'}}\n"))
    assert (p.field, p.value) == ("storage.s3.bucket", bucket)
    assert p.message == "not an S3 bucket name" and why in p.fix


def test_fails_storage_node_group_that_does_not_exist():
    p = one_problem(with_storage("nodeGroup: gpus\n"))
    assert (p.field, p.value) == ("storage.nodeGroup", "gpus") and "gpu" in p.fix


def test_fails_all_storage_problems_at_once():
    problems = storage_problems(with_storage(
        "deploymentType: SCRATCH_2\nstorageCapacityGiB: 1000\nperUnitStorageThroughput: 50\n"
        "s3: {bucket: Bad_Bucket, autoExport: [NEW]}\n"
    ))
    assert {p.field for p in problems} == {
        "storage.storageCapacityGiB", "storage.perUnitStorageThroughput", "storage.s3.bucket", "storage.s3.autoExport",
    }


@pytest.mark.parametrize(
    ("section", "field", "fix"),
    [
        ("deploymentTyp: SCRATCH_2", "storage.deploymentTyp", "did you mean 'deploymentType'?"),
        ("deploymentType: SCRATCH_3", "storage.deploymentType", "use one of"),
        ("dataCompression: GZIP", "storage.dataCompression", "use one of"),
        ("s3: {bucket: b1b, autoExport: [MOVED]}", "storage.s3.autoExport[0]", "use one of"),
    ],
)
def test_fails_malformed_storage_section_before_planning(section, field, fix):
    with pytest.raises(SpecError) as info:
        parse_spec(with_storage(section + "\n"), source="t.yaml")
    (p,) = info.value.problems
    assert p.field == field and fix in p.fix


def test_fails_bad_storage_before_any_cloudformation():
    """The storage plan exists only inside a plan, and build_plan validates the section first."""
    spec = parse_spec(with_storage("storageCapacityGiB: 3000\n"))
    with pytest.raises(SpecError) as info:
        build_plan(spec)
    assert [p.field for p in info.value.problems] == ["storage.storageCapacityGiB"]


# --- the construct ---------------------------------------------------------------------------


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


# --- the storage part: file system -------------------------------------------------------------


def private_subnet_id(s: Synthesized, az: str) -> str:
    """The logical id of the network's private subnet in ``az``."""
    net = s.template("network")["Resources"]
    (lid,) = [
        k for k, v in net.items()
        if v["Type"] == "AWS::EC2::Subnet" and "Private" in k and v["Properties"]["AvailabilityZone"] == az
    ]
    return lid


def test_file_system_in_the_gpu_groups_private_subnet(fsx):
    _, res = only(fsx, "AWS::FSx::FileSystem")
    (subnet,) = res["Properties"]["SubnetIds"]
    assert subnet == {"Ref": private_subnet_id(fsx, "us-west-2a")}
    assert res["Properties"]["SecurityGroupIds"] == [{"Fn::GetAtt": [SECURITY_GROUP_LOGICAL_ID, "GroupId"]}]


def test_file_system_properties_from_the_spec(fsx):
    fsx.assertions("storage").has_resource_properties(
        "AWS::FSx::FileSystem",
        {
            "FileSystemType": "LUSTRE",
            "FileSystemTypeVersion": "2.15",
            "StorageType": "SSD",
            "StorageCapacity": 4800,
            "LustreConfiguration": {
                "DeploymentType": "PERSISTENT_2",
                "PerUnitStorageThroughput": 250,
                "DataCompressionType": "LZ4",
                "ImportPath": Match.absent(),
                "ExportPath": Match.absent(),
                "AutoImportPolicy": Match.absent(),
            },
            "KmsKeyId": Match.absent(),  # encrypted at rest with the AWS managed aws/fsx key
        },
    )


def test_file_system_and_what_it_needs_are_retained(fsx):
    """The stack can be deleted (or the file system replaced) without deleting the data."""
    res = fsx.template("storage")["Resources"]
    fs = res[FILE_SYSTEM_LOGICAL_ID]
    assert fs["Type"] == "AWS::FSx::FileSystem"
    assert (fs["DeletionPolicy"], fs["UpdateReplacePolicy"]) == ("Retain", "Retain")
    assert res[ASSOCIATION_LOGICAL_ID]["DeletionPolicy"] == "Retain"
    assert res[SECURITY_GROUP_LOGICAL_ID]["DeletionPolicy"] == "Retain"
    self_rules, client_rules = _own_rules(fsx)
    assert len(self_rules) == 4 and all(res[k]["DeletionPolicy"] == "Retain" for k in self_rules)
    # the rules naming the cluster's security group go with the stack: retained, they would keep EKS from
    # deleting that group
    assert len(client_rules) == 4 and all("DeletionPolicy" not in res[k] for k in client_rules)


def _own_rules(s: Synthesized) -> tuple[set[str], set[str]]:
    """The Lustre group's own rules: those among its interfaces, and those with the clients (the nodes)."""
    res = s.template("storage")["Resources"]
    group = {"Fn::GetAtt": [SECURITY_GROUP_LOGICAL_ID, "GroupId"]}
    own = {
        k: v["Properties"] for k, v in res.items()
        if v["Type"] in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
        and v["Properties"]["GroupId"] == group
    }
    among = {k for k, p in own.items() if group in (p.get("SourceSecurityGroupId"), p.get("DestinationSecurityGroupId"))}
    return among, set(own) - among


def test_pinned_logical_ids(fsx):
    res = fsx.template("storage")["Resources"]
    assert res[FILE_SYSTEM_LOGICAL_ID]["Type"] == "AWS::FSx::FileSystem"
    assert res[SECURITY_GROUP_LOGICAL_ID]["Type"] == "AWS::EC2::SecurityGroup"
    assert res[ASSOCIATION_LOGICAL_ID]["Type"] == "AWS::FSx::DataRepositoryAssociation"
    # SecurityGroupIds replaces a file system, and GroupDescription replaces a group: both stay put.
    assert res[SECURITY_GROUP_LOGICAL_ID]["Properties"]["GroupDescription"] == SECURITY_GROUP_DESCRIPTION


# --- security group ---------------------------------------------------------------------------


def lustre_rules(s: Synthesized) -> dict[str, set]:
    """Every rule touching the Lustre group: (direction, peer, from, to)."""
    res = s.template("storage")["Resources"]
    group = {"Fn::GetAtt": [SECURITY_GROUP_LOGICAL_ID, "GroupId"]}
    sg = res[SECURITY_GROUP_LOGICAL_ID]["Properties"]

    def peer(v):
        return "self" if v == group else "cluster" if "ClusterSecurityGroupId" in json.dumps(v) else json.dumps(v)

    out: dict[str, set] = {"in": set(), "out": set(), "cluster-in": set()}
    for r in sg.get("SecurityGroupIngress", []):
        out["in"].add((peer(r.get("SourceSecurityGroupId", r.get("CidrIp"))), r["IpProtocol"], r["FromPort"], r["ToPort"]))
    for r in sg.get("SecurityGroupEgress", []):
        out["out"].add((peer(r.get("DestinationSecurityGroupId", r.get("CidrIp"))), r["IpProtocol"], r["FromPort"], r["ToPort"]))
    for v in res.values():
        p = v["Properties"]
        if v["Type"] == "AWS::EC2::SecurityGroupIngress":
            key = "in" if p["GroupId"] == group else "cluster-in" if peer(p["GroupId"]) == "cluster" else "other"
            out.setdefault(key, set()).add((peer(p["SourceSecurityGroupId"]), p["IpProtocol"], p["FromPort"], p["ToPort"]))
        elif v["Type"] == "AWS::EC2::SecurityGroupEgress":
            out["out"].add((peer(p["DestinationSecurityGroupId"]), p["IpProtocol"], p["FromPort"], p["ToPort"]))
    return out


def test_security_group_allows_lustre_from_the_nodes_and_itself_only(fsx):
    rules = lustre_rules(fsx)
    lustre = {("tcp", 988, 988), ("tcp", 1018, 1023)}
    expected = {(peer, *ports) for peer in ("self", "cluster") for ports in lustre}
    assert rules["in"] == expected
    assert rules["out"] == expected  # no allow-all egress: every egress rule is a Lustre port
    assert rules["cluster-in"] == {("self", *ports) for ports in lustre}  # servers reach the nodes too
    assert "other" not in rules


# --- S3 link ----------------------------------------------------------------------------------


def test_persistent_2_links_s3_through_a_data_repository_association(fsx):
    fsx.assertions("storage").has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {
            "FileSystemId": {"Ref": FILE_SYSTEM_LOGICAL_ID},
            "DataRepositoryPath": "s3://efa-training-datasets/imagenet/tfrecords/",
            "FileSystemPath": "/",
            "BatchImportMetaDataOnCreate": True,
            "S3": {
                "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
                "AutoExportPolicy": {"Events": ["NEW", "CHANGED"]},
            },
        },
    )


def test_scratch_2_links_s3_through_import_path_not_an_association(scratch):
    t = scratch.assertions("storage")
    t.resource_count_is("AWS::FSx::DataRepositoryAssociation", 0)
    t.has_resource_properties(
        "AWS::FSx::FileSystem",
        {
            "StorageCapacity": 2400,
            "LustreConfiguration": {
                "DeploymentType": "SCRATCH_2",
                "ImportPath": "s3://training-data.example/tfrecords/",
                "AutoImportPolicy": "NEW_CHANGED",
                "PerUnitStorageThroughput": Match.absent(),
                "ExportPath": Match.absent(),
            },
        },
    )


# --- CSI driver: add-on, Pod Identity, IAM scope, tolerations --------------------------------


def test_csi_driver_addon_with_pod_identity(fsx):
    role_id, _ = only(fsx, "AWS::IAM::Role")
    fsx.assertions("storage").has_resource_properties(
        "AWS::EKS::Addon",
        {
            "AddonName": "aws-fsx-csi-driver",
            "PodIdentityAssociations": [
                {"RoleArn": {"Fn::GetAtt": [role_id, "Arn"]}, "ServiceAccount": FSX_CSI_CONTROLLER_SA}
            ],
        },
    )
    _, role = only(fsx, "AWS::IAM::Role")
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert {(s["Action"], s["Principal"]["Service"]) for s in trust} == {
        ("sts:AssumeRole", "pods.eks.amazonaws.com"), ("sts:TagSession", "pods.eks.amazonaws.com"),
    }


def test_csi_driver_addon_sends_no_configuration_nobody_checked(fsx):
    """EKS validates configurationValues against the add-on's schema, which is not published: send
    none; the driver chart's node DaemonSet tolerates all taints by default (values.yaml)."""
    _, addon = only(fsx, "AWS::EKS::Addon")
    assert "ConfigurationValues" not in addon["Properties"]


def test_file_system_waits_for_the_rules_that_let_it_reach_itself(fsx):
    """FSx checks its groups at creation (InvalidNetworkSettings on 988): every rule of the file
    system's own group is created first (aws/aws-parallelcluster#6181)."""
    fs_id, fs = only(fsx, "AWS::FSx::FileSystem")
    rules, client_rules = _own_rules(fsx)
    assert len(rules) == 4  # 988 and 1018-1023, in and out, with itself
    assert rules <= set(fs.get("DependsOn", [])), fs_id
    assert not client_rules & set(fs.get("DependsOn", []))


def test_file_system_is_created_alongside_the_cluster(fsx):
    """Nothing the file system needs comes from the EKS cluster: CloudFormation creates both at once (the
    deploy model: efa_stack.tools.deploy_model), and the volume follows both."""
    from efa_stack.tools.deploy_model import dependencies, transitive_dependencies

    graph = dependencies(fsx.template("cluster"))

    def needs(start: str) -> set[str]:
        return transitive_dependencies(graph, start)

    assert "EksCluster" not in needs(FILE_SYSTEM_LOGICAL_ID)
    volume, _ = only(fsx, "Custom::AWSCDK-EKS-KubernetesResource")
    assert {"EksCluster", FILE_SYSTEM_LOGICAL_ID} <= needs(volume)


def statements(s: Synthesized) -> dict[str, dict]:
    _, policy = only(s, "AWS::IAM::Policy")
    return {st["Sid"]: st for st in policy["Properties"]["PolicyDocument"]["Statement"]}


def test_iam_scope_with_dynamic_provisioning(fsx):
    st = statements(fsx)
    assert set(st) == {"DescribeFileSystems", "CreateDriverFileSystems", "ManageDriverFileSystems", "FsxServiceLinkedRole"}
    assert all("*" not in json.dumps(s["Action"]) for s in st.values())  # no fsx:* style actions
    assert st["DescribeFileSystems"]["Action"] == "fsx:DescribeFileSystems"
    assert st["CreateDriverFileSystems"]["Condition"] == {"Null": {"aws:RequestTag/CSIVolumeName": "false"}}
    # delete/resize only what the driver created: never the static, retained file system
    assert sorted(st["ManageDriverFileSystems"]["Action"]) == ["fsx:DeleteFileSystem", "fsx:UpdateFileSystem"]
    assert st["ManageDriverFileSystems"]["Condition"] == {"Null": {"aws:ResourceTag/CSIVolumeName": "false"}}
    assert json.dumps(st["ManageDriverFileSystems"]["Resource"]).endswith(':file-system/*"]]}')
    slr = st["FsxServiceLinkedRole"]
    assert slr["Condition"] == {"StringLike": {"iam:AWSServiceName": "fsx.amazonaws.com"}}
    assert json.dumps(slr["Resource"]).endswith('role/aws-service-role/fsx.amazonaws.com/AWSServiceRoleForAmazonFSx"]]}')


def test_iam_scope_static_only(scratch):
    assert list(statements(scratch)) == ["DescribeFileSystems"]


# --- Kubernetes objects -----------------------------------------------------------------------


def test_static_volume_is_the_file_system(fsx):
    objects = manifest_objects(fsx)
    pv, pvc = by_kind(objects, "PersistentVolume"), by_kind(objects, "PersistentVolumeClaim")
    assert pv["spec"]["csi"] == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": f"<Ref {FILE_SYSTEM_LOGICAL_ID}>",
        "volumeAttributes": {
            "dnsname": f"<GetAtt {FILE_SYSTEM_LOGICAL_ID}.DNSName>",
            "mountname": f"<GetAtt {FILE_SYSTEM_LOGICAL_ID}.LustreMountName>",
        },
    }
    assert pv["spec"]["capacity"] == {"storage": "4800Gi"}
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["storageClassName"] == ""
    assert pvc["metadata"]["name"] == "fsx-claim" and pvc["metadata"]["namespace"] == "default"
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"] and pvc["spec"]["storageClassName"] == ""
    assert pvc["spec"]["resources"]["requests"]["storage"] == "4800Gi"


def test_storage_class_takes_subnet_and_group_from_the_stacks(fsx):
    sc = by_kind(manifest_objects(fsx), "StorageClass")
    _, fs = only(fsx, "AWS::FSx::FileSystem")
    (subnet,) = fs["Properties"]["SubnetIds"]
    assert sc["provisioner"] == "fsx.csi.aws.com"
    assert sc["parameters"] == {
        "subnetId": marker(subnet),
        "securityGroupIds": f"<GetAtt {SECURITY_GROUP_LOGICAL_ID}.GroupId>",
        "deploymentType": "PERSISTENT_2",
        "perUnitStorageThroughput": "250",
        "dataCompressionType": "LZ4",
        "fileSystemTypeVersion": "2.15",
    }


def test_no_storage_class_without_dynamic_provisioning(scratch):
    assert [o["kind"] for o in manifest_objects(scratch)] == ["PersistentVolume", "PersistentVolumeClaim"]


def test_volume_waits_for_the_driver_and_the_s3_link(fsx):
    (res,) = fsx.resources("storage", "Custom::AWSCDK-EKS-KubernetesResource").values()
    addon_id, _ = only(fsx, "AWS::EKS::Addon")
    _, client_rules = _own_rules(fsx)
    (barrier,) = [d for d in res["DependsOn"] if d.startswith("ClusterKubectlReadyBarrier")]  # every manifest's
    assert set(res["DependsOn"]) == {addon_id, ASSOCIATION_LOGICAL_ID, *client_rules, barrier}


def test_stack_exposes_mount_path_and_claim(fsx):
    storage = fsx.stacks.storage
    assert (storage.mount_path, storage.claim_name) == ("/fsx", "fsx-claim")


# --- validation tools and snapshot ------------------------------------------------------------


@pytest.mark.parametrize("which", ["fsx", "scratch"])
def test_storage_template_has_no_cfn_lint_errors(which, request):
    s = request.getfixturevalue(which)
    matches = lint(s.template("cluster"), s.plan.region)
    errors = [f"{m.rule.id} {m.message}" for m in matches if m.rule.id.startswith("E")]
    assert not errors, "\n".join(errors)


def test_storage_stack_snapshot(fsx, snapshot):
    text = normalise_assets(json.dumps(fsx.template("storage"), indent=1, sort_keys=True))
    assert json.loads(text) == snapshot


def test_nccl_job_mounts_the_claim_and_nodes_get_the_lustre_client():
    """The storage section reaches the NCCL job and the GPU nodes' user data, from one spec."""
    import yaml

    from efa_stack.planning.plan import plan_from_file
    from k8s.dist import render_dist
    from tests.support import CLUSTERS

    plan = plan_from_file(CLUSTERS / "fsx.yaml")
    sp = plan.storage
    (job,) = [o for o in yaml.safe_load_all(render_dist(plan)["40-nccl-tests.yaml"]) if o and o["kind"] == "MPIJob"]
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": sp.claim_name}} in worker["volumes"]
    assert {"mountPath": sp.mount_path, "name": "fsx"} in worker["containers"][0]["volumeMounts"]
    gpu = [n for n in plan.node_groups if n.role == "gpu"]
    assert gpu and all(n.lustre_client for n in gpu) and not plan.system.lustre_client


def test_every_node_group_that_can_mount_the_claim_gets_the_lustre_client():
    """The claim is ReadWriteMany and the CSI node plugin runs on every node: CPU node groups mount it
    too, so they install the client as well (not only GPU/Neuron groups)."""
    from tests.support import plan_of

    text = BASE + (
        "  - {name: cpu, instanceType: m7i.xlarge, availabilityZones: [us-west-2a]}\n"
        "storage: {}\n"
    )
    plan = plan_of(text)
    assert {n.name: n.lustre_client for n in plan.node_groups} == {"gpu": True, "cpu": True}


def test_nodes_without_storage_do_not_install_lustre():
    from efa_stack.planning.plan import plan_from_file
    from tests.support import CLUSTERS

    assert not any(n.lustre_client for n in plan_from_file(CLUSTERS / "default.yaml").all_node_groups)
