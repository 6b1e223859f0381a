"""The storage part of the cluster stack (stacks/storage_stack.py): the FSx for Lustre file system in the nodes'
network, its security group and S3 link, the CSI driver's add-on and IAM, the PV/PVC the jobs mount, and what waits
for what; ``template("storage")`` is that part's resources (tests/support.py).

The synths: ``clusters/fsx.yaml`` (PERSISTENT_2, S3 linked through a data repository association, dynamic
provisioning on), ``clusters/fsx-efa.yaml`` (EFA-enabled) and tests.builders.PRIVATE (SCRATCH_2, S3 linked through its
import path, static volume only). The spec and plan: tests/planning/test_storage.py; the file system construct:
tests/aws_constructs/test_fsx.py.
"""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match

from aws_constructs.fsx import (
    ASSOCIATION_LOGICAL_ID,
    FILE_SYSTEM_LOGICAL_ID,
    SECURITY_GROUP_DESCRIPTION,
    SECURITY_GROUP_LOGICAL_ID,
)
from stacks.storage_stack import FSX_CSI_CONTROLLER_SA
from tests.support import CLUSTERS, Synthesized, normalise_assets, synth_spec

FIXTURE_SPECS = {"fsx": "fsx.yaml", "fsx_efa": "fsx-efa.yaml"}
"""Module fixtures that are a shipped spec's synth (tests/conftest.py runs them with that spec's tests)."""


def synth_storage(spec: str) -> Synthesized:
    """Synthesize clusters/``spec``; build() adds the storage to the cluster stack for a spec with a storage section."""
    synth = synth_spec(str(CLUSTERS / spec))
    assert synth.stacks.storage is not None, f"{spec} has no storage section"
    return synth


@pytest.fixture(scope="module")
def fsx() -> Synthesized:
    return synth_storage("fsx.yaml")


@pytest.fixture(scope="module")
def fsx_efa() -> Synthesized:
    return synth_storage("fsx-efa.yaml")


@pytest.fixture
def scratch(private_synth) -> Synthesized:
    """tests.builders.PRIVATE's synth: SCRATCH_2 storage linked through its import path."""
    assert private_synth.stacks.storage is not None
    return private_synth


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


def test_storage_is_off_by_default(default_synth):
    assert default_synth.plan.storage is None
    assert not any(name.endswith("-storage") for name in default_synth.templates)


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


def test_storage_stack_snapshot(fsx, snapshot):
    text = normalise_assets(json.dumps(fsx.template("storage"), indent=1, sort_keys=True))
    assert json.loads(text) == snapshot


# --- the EFA-enabled example spec (clusters/fsx-efa.yaml) ------------------------------------------------------


def test_example_spec_synthesizes_an_efa_file_system(fsx_efa):
    """What the EFA-enabled storage part holds beyond clusters/fsx.yaml's (whose storage part is the snapshot); cfn-lint
    of both specs' templates: tests/test_cfn_lint.py."""
    cluster = fsx_efa.template("cluster")
    (fs,) = [r for r in cluster["Resources"].values() if r["Type"] == "AWS::FSx::FileSystem"]
    assert fs["Properties"]["LustreConfiguration"] == {
        "DataCompressionType": "NONE", "DeploymentType": "PERSISTENT_2", "EfaEnabled": True,
        "MetadataConfiguration": {"Mode": "AUTOMATIC"}, "PerUnitStorageThroughput": 1000,
    }
    assert fs["Properties"]["StorageCapacity"] == 4800 and fs["DeletionPolicy"] == "Retain"
    groups = [g["Fn::GetAtt"][0] for g in fs["Properties"]["SecurityGroupIds"]]
    assert groups[0] == SECURITY_GROUP_LOGICAL_ID and groups[1].startswith("NetworkEfaSecurityGroup")


def test_example_spec_runs_the_efa_client_setup_on_the_efa_nodes_only(fsx_efa):
    templates = [r for r in fsx_efa.template("cluster")["Resources"].values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    with_setup = [r for r in templates if "./setup.sh)" in json.dumps(r)]
    assert len(with_setup) == 1 and len(templates) > 1
    (efa_template,) = with_setup
    nics = efa_template["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]
    assert sum(n["InterfaceType"] == "efa-only" for n in nics) == 32
