"""Cluster stack: EKS without Auto Mode, add-ons, node groups and their launch templates."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Match

from efa_stack.planning.addons import addon_data, pinned_version
from efa_stack.spec.models import DEFAULT_KUBERNETES_VERSION, KUBERNETES_VERSIONS
from stacks.cluster_stack import CRD_ESTABLISHED_JSONPATH
from tests.support import BASE, CLUSTERS, one_problem, plan_of, problems_of, synth_spec, synth_text


def gpu_launch_template(s, name="p5"):
    lts = s.resources("cluster", "AWS::EC2::LaunchTemplate")
    (data,) = [v["Properties"]["LaunchTemplateData"] for k, v in lts.items() if k.startswith(f"NodeGroup{name}LaunchTemplate")]
    return data


def gpu_nodegroup(s, name="p5"):
    ngs = s.resources("cluster", "AWS::EKS::Nodegroup")
    (props,) = [v["Properties"] for k, v in ngs.items() if k.startswith(f"NodeGroup{name}NodeGroup")]
    return props


def test_cluster_version_name_and_no_auto_mode(default_synth):
    (cluster,) = default_synth.resources("cluster", "AWS::EKS::Cluster").values()
    props = cluster["Properties"]
    assert props["Version"] == DEFAULT_KUBERNETES_VERSION  # clusters/default.yaml states the default
    assert props["Name"] == "efa-training"
    assert "ComputeConfig" not in props or props["ComputeConfig"].get("Enabled") is not True


def test_cluster_logging_and_secrets_encryption(default_synth):
    t = default_synth.assertions("cluster")
    t.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "Logging": {"ClusterLogging": {"EnabledTypes": Match.array_with([{"Type": "api"}, {"Type": "audit"}])}},
            "EncryptionConfig": [{"Provider": {"KeyArn": Match.any_value()}, "Resources": ["secrets"]}],
        },
    )
    t.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_cluster_in_private_subnets(default_synth):
    (cluster,) = default_synth.resources("cluster", "AWS::EKS::Cluster").values()
    subnets = json.dumps(cluster["Properties"]["ResourcesVpcConfig"]["SubnetIds"])
    assert "PrivateSubnet1" in subnets and "PrivateSubnet2" in subnets and "Public" not in subnets


def version_tuple(v: str) -> tuple[int, int, int]:
    major, minor, patch = (int(x) for x in v.lstrip("v").split("-")[0].split("."))
    return major, minor, patch


def test_vpc_cni_addon_is_pinned_for_the_clusters_version_and_takes_over_aws_node(default_synth):
    default_synth.assertions("cluster").has_resource_properties(
        "AWS::EKS::Addon",
        {"AddonName": "vpc-cni", "AddonVersion": pinned_version("vpc-cni", DEFAULT_KUBERNETES_VERSION), "ResolveConflicts": "OVERWRITE"},
    )


def test_every_pinned_vpc_cni_supports_efa_only_and_every_kubernetes_version_has_one():
    data = addon_data()["vpc-cni"]
    assert set(data["versions"]) == set(KUBERNETES_VERSIONS)
    assert data["source"] and data["minimum_source"] and data["resolve_conflicts_source"]
    for k8s, version in data["versions"].items():
        assert version_tuple(version) >= version_tuple(data["minimum"]) >= (1, 18, 5), k8s
    # CloudFormation AWS::EKS::Addon ResolveConflicts: NONE | OVERWRITE | PRESERVE (PRESERVE: update only).
    assert data["resolve_conflicts"] in ("NONE", "OVERWRITE")


def test_gpu_node_group_waits_for_vpc_cni(default_synth):
    ngs = default_synth.resources("cluster", "AWS::EKS::Nodegroup")
    (ng,) = [v for k, v in ngs.items() if k.startswith("NodeGroupp5")]
    assert any(d.startswith("VpcCni") for d in ng["DependsOn"])


def test_every_node_group_waits_for_the_pod_identity_agent(default_synth):
    """aws-node gets its role through EKS Pod Identity: the agent add-on exists before nodes join."""
    addons = default_synth.resources("cluster", "AWS::EKS::Addon")
    (agent,) = [k for k, v in addons.items() if v["Properties"]["AddonName"] == "eks-pod-identity-agent"]
    for name, ng in default_synth.resources("cluster", "AWS::EKS::Nodegroup").items():
        assert agent in ng["DependsOn"], name


def test_kubectl_layer_matches_cluster_version(default_synth):
    md = json.loads((default_synth.outdir / "efa-training-cluster.assets.json").read_text())
    assert md  # the layer is an asset
    tree = (default_synth.outdir / "tree.json").read_text()
    minor = DEFAULT_KUBERNETES_VERSION.split(".")[1]
    assert f"lambda-layer-kubectl-v{minor}" in tree or f"KubectlV{minor}Layer" in tree


def test_pod_identity_agent_and_oidc(default_synth):
    t = default_synth.assertions("cluster")
    t.has_resource_properties("AWS::EKS::Addon", {"AddonName": "eks-pod-identity-agent"})
    t.resource_count_is("AWS::IAM::OIDCProvider", 1)


def test_gpu_node_group_props(default_synth):
    ng = gpu_nodegroup(default_synth)
    assert ng["AmiType"] == "AL2023_x86_64_NVIDIA"
    assert ng["CapacityType"] == "ON_DEMAND"
    assert ng["ScalingConfig"] == {"DesiredSize": 2, "MaxSize": 2, "MinSize": 2}
    assert ng["Labels"]["efa-stack.io/efa"] == "true"
    assert ng["Labels"]["efa-stack.io/node-group"] == "p5"
    assert ng["Taints"] == [{"Effect": "NO_SCHEDULE", "Key": "nvidia.com/gpu", "Value": "true"}]
    # the instance type sits in the launch template, where the node group's AMI check does not misfire
    assert "InstanceTypes" not in ng
    assert "DiskSize" not in ng


def test_gpu_node_group_in_one_private_subnet(default_synth):
    ng = gpu_nodegroup(default_synth)
    assert len(ng["Subnets"]) == 1
    assert "PrivateSubnet1" in json.dumps(ng["Subnets"])


def test_system_node_group_has_no_taint_and_spans_zones(default_synth):
    ng = gpu_nodegroup(default_synth, "system")
    assert ng["AmiType"] == "AL2023_x86_64_STANDARD"
    assert "Taints" not in ng
    assert len(ng["Subnets"]) == 2
    data = gpu_launch_template(default_synth, "system")
    assert data["InstanceType"] == "m7i.xlarge"
    assert "NetworkInterfaces" not in data and len(data["SecurityGroupIds"]) == 1


def test_launch_template_interfaces_match_the_catalog(default_synth):
    data = gpu_launch_template(default_synth)
    nics = data["NetworkInterfaces"]
    assert data["InstanceType"] == "p5.48xlarge"
    assert len([n for n in nics if n["InterfaceType"] in ("efa", "efa-only")]) == 32
    primary = [n for n in nics if n["NetworkCardIndex"] == 0 and n["DeviceIndex"] == 0]
    assert primary[0]["InterfaceType"] == "interface"


def test_security_groups_on_every_interface_and_nowhere_else(default_synth):
    data = gpu_launch_template(default_synth)
    for nic in data["NetworkInterfaces"]:
        groups = json.dumps(nic["Groups"])
        assert "ClusterSecurityGroupId" in groups and "EfaSecurityGroup" in groups
        assert len(nic["Groups"]) == 2
    assert "SecurityGroupIds" not in data and "SecurityGroups" not in data
    assert "SubnetId" not in json.dumps(data)


def test_launch_template_disk_imds_and_placement(default_synth):
    data = gpu_launch_template(default_synth)
    assert data["BlockDeviceMappings"][0]["Ebs"] == {
        "DeleteOnTermination": True, "Encrypted": True, "VolumeSize": 500, "VolumeType": "gp3"
    }
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    (pg_id,) = default_synth.resources("cluster", "AWS::EC2::PlacementGroup")
    assert default_synth.resources("cluster", "AWS::EC2::PlacementGroup")[pg_id]["Properties"]["Strategy"] == "cluster"
    assert data["Placement"] == {"GroupName": {"Fn::GetAtt": [pg_id, "GroupName"]}}
    assert "InstanceMarketOptions" not in data and "CapacityReservationSpecification" not in data


FIXTURE_SPECS = {"reserved": "capacity-block.yaml"}
"""Module fixtures that are a shipped spec's synth (tests/conftest.py runs them with that spec's tests)."""


@pytest.fixture(scope="module")
def reserved():
    return synth_spec(str(CLUSTERS / "capacity-block.yaml"))


def test_capacity_block_market_options_and_capacity_type(reserved):
    data = gpu_launch_template(reserved, "p5enblock")
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0a1b2c3d4e5f60718"}
    }
    assert "Placement" not in data
    assert gpu_nodegroup(reserved, "p5enblock")["CapacityType"] == "CAPACITY_BLOCK"


def test_capacity_reservation_target_without_placement_group(reserved):
    data = gpu_launch_template(reserved, "p5odcr")
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] == "cr-0f1e2d3c4b5a69788"
    assert "InstanceMarketOptions" not in data and "Placement" not in data
    assert gpu_nodegroup(reserved, "p5odcr")["CapacityType"] == "ON_DEMAND"
    reserved.assertions("cluster").resource_count_is("AWS::EC2::PlacementGroup", 0)


def test_reserved_node_groups_sizes_zones_and_what_waits_for_them(reserved):
    """What the capacity-block spec's whole-stack snapshot held beyond the capacity options above (the
    snapshot is kept for clusters/default.yaml only, tests/test_snapshots.py)."""
    block, odcr, system = (gpu_nodegroup(reserved, n) for n in ("p5enblock", "p5odcr", "system"))
    assert block["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 2, "MaxSize": 2}
    assert odcr["ScalingConfig"] == {"MinSize": 1, "DesiredSize": 1, "MaxSize": 1}
    assert system["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2}  # no systemNodeGroup: defaults
    assert gpu_launch_template(reserved, "p5enblock")["InstanceType"] == "p5en.48xlarge"
    assert gpu_launch_template(reserved, "p5odcr")["InstanceType"] == "p5.48xlarge"
    # each reserved group in the one zone of its reservation: us-east-1a, us-east-1b
    assert len(block["Subnets"]) == 1 and "PrivateSubnet1" in json.dumps(block["Subnets"])
    assert len(odcr["Subnets"]) == 1 and "PrivateSubnet2" in json.dumps(odcr["Subnets"])
    # the observability add-on (and its role) waits for both GPU node groups, whatever waits for one GPU node
    # group waits for both, and no chart waits for any (kubectl apply needs only the API server)
    resources = reserved.template("cluster")["Resources"]
    groups = {k for k in reserved.resources("cluster", "AWS::EKS::Nodegroup") if not k.startswith("NodeGroupsystem")}
    assert len(groups) == 2
    waiting = {k for k, v in resources.items() if groups & set(v.get("DependsOn", []))}
    assert all(groups <= set(resources[k]["DependsOn"]) for k in waiting)
    charts = {k for k, v in resources.items() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"}
    assert len(charts) == 5 and not charts & waiting
    assert any(k.startswith("AddonAmazonCloudwatchObservability") and resources[k]["Type"] == "AWS::EKS::Addon"
               for k in waiting)
    assert any(k.startswith("AddonAmazonCloudwatchObservabilityRole") for k in waiting)
    # the NCCL-tests job runs on the first EFA node group, with its devices
    nccl = next(v for k, v in resources.items() if k.startswith("Clusternccltests"))
    (job,) = [o for o in json.loads(nccl["Properties"]["Manifest"]) if o["kind"] == "MPIJob"]
    pod = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["nodeSelector"]["efa-stack.io/node-group"] == "p5en-block"
    assert pod["containers"][0]["resources"]["limits"]["vpc.amazonaws.com/efa"] == 16
    # the accelerator dashboard has rows for each instance type and its node group
    (dashboard,) = reserved.resources("cluster", "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for row in ("p5en.48xlarge (p5en-block)", "p5.48xlarge (p5-odcr)"):
        assert f"{row}: GPU utilization per GPU (%)" in body and f"{row}: EFA rx per device (bytes/s)" in body


def test_neuron_node_group_uses_neuron_ami_and_taint():
    s = synth_text(BASE.replace("p5.48xlarge", "trn2.48xlarge").replace("name: gpu", "name: trn"))
    ng = gpu_nodegroup(s, "trn")
    assert ng["AmiType"] == "AL2023_x86_64_NEURON"
    assert ng["Taints"] == [{"Effect": "NO_SCHEDULE", "Key": "aws.amazon.com/neuron", "Value": "true"}]
    assert len([n for n in gpu_launch_template(s, "trn")["NetworkInterfaces"] if n["InterfaceType"] == "efa-only"]) == 16


def test_arm_gpu_node_group_uses_arm_nvidia_ami():
    s = synth_text(BASE.replace("p5.48xlarge", "g5g.16xlarge").replace("efaEnabled: true", "efaEnabled: false").replace("name: gpu", "name: arm"))
    assert gpu_nodegroup(s, "arm")["AmiType"] == "AL2023_ARM_64_NVIDIA"


def test_legacy_layout_renders_efa_interfaces():
    s = synth_text(BASE + "    interfaceLayout: legacy\n")
    nics = gpu_launch_template(s, "gpu")["NetworkInterfaces"]
    assert {n["InterfaceType"] for n in nics} == {"efa"}
    assert [n["DeviceIndex"] for n in nics[:2]] == [0, 1]


def test_access_entries_from_spec():
    s = synth_text(BASE + """accessConfig:
  accessEntries:
    - principalARN: arn:aws:iam::111122223333:role/ml-platform
      accessPolicies:
        - policyARN: arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy
          accessScope: {type: cluster}
""")
    entries = [v["Properties"] for v in s.resources("cluster", "AWS::EKS::AccessEntry").values()]
    (mine,) = [e for e in entries if e["PrincipalArn"] == "arn:aws:iam::111122223333:role/ml-platform"]
    (policy,) = mine["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert json.dumps(policy["PolicyArn"]).endswith('cluster-access-policy/AmazonEKSClusterAdminPolicy"]]}')


@pytest.mark.parametrize("spec", ["eksctl-efa-cluster.yaml"])  # with the spec's other tests (tests/conftest.py)
def test_eksctl_guide_file_synthesizes_unchanged(spec):
    s = synth_spec(str(CLUSTERS / spec))
    ng = gpu_nodegroup(s, "myefang")
    assert ng["ScalingConfig"] == {"DesiredSize": 2, "MaxSize": 3, "MinSize": 1}
    data = gpu_launch_template(s, "myefang")
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 300
    assert len(data["NetworkInterfaces"]) == 33


def test_nodegroup_instance_type_check_misfires_for_p5_with_nvidia_ami():
    """Why the instance type lives in the launch template: aws_eks_v2.Nodegroup rejects p5.48xlarge
    with the AL2023 NVIDIA AMI type when the type is given on the node group. When this test starts
    failing, CDK has fixed its check and the workaround can be reconsidered."""
    app = App(builtin_cloud_formation_validation=False)
    stack = Stack(app, "Probe")
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=1)
    from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer

    cluster = eks.Cluster(
        stack, "C", version=eks.KubernetesVersion.V1_34, vpc=vpc,
        default_capacity_type=eks.DefaultCapacityType.NODEGROUP, default_capacity=0,
        kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV34Layer(stack, "L")),
    )
    with pytest.raises(Exception, match="(?i)ami|instance type"):
        eks.Nodegroup(
            stack, "Ng", cluster=cluster, instance_types=[ec2.InstanceType("p5.48xlarge")],
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
        )


def endpoint_config(s):
    (cluster,) = s.resources("cluster", "AWS::EKS::Cluster").values()
    return cluster["Properties"]["ResourcesVpcConfig"]


def test_api_endpoint_public_and_private_by_default(default_synth):
    cfg = endpoint_config(default_synth)
    assert cfg["EndpointPublicAccess"] is True and cfg["EndpointPrivateAccess"] is True


def test_api_endpoint_private_only():
    s = synth_text(BASE + "vpc:\n  clusterEndpoints: {publicAccess: false, privateAccess: true}\n")
    cfg = endpoint_config(s)
    assert cfg["EndpointPublicAccess"] is False and cfg["EndpointPrivateAccess"] is True
    (handler,) = [v for k, v in s.resources("cluster", "AWS::Lambda::Function").items() if "KubectlProviderHandler" in k]
    assert "VpcConfig" in handler["Properties"]


def test_api_endpoint_public_restricted_to_cidrs():
    s = synth_text(BASE + "vpc:\n  publicAccessCIDRs: [203.0.113.0/24]\n")
    assert endpoint_config(s)["PublicAccessCidrs"] == ["203.0.113.0/24"]


def test_fails_no_api_endpoint():
    p = one_problem(BASE + "vpc:\n  clusterEndpoints: {publicAccess: false, privateAccess: false}\n")
    assert p.field == "vpc.clusterEndpoints"


def test_fails_cidrs_without_public_endpoint():
    p = one_problem(BASE + "vpc:\n  clusterEndpoints: {publicAccess: false}\n  publicAccessCIDRs: [203.0.113.0/24]\n")
    assert p.field == "vpc.publicAccessCIDRs"


def test_kubernetes_charts_wait_for_what_they_need_and_not_for_the_node_groups(default_synth):
    resources = default_synth.template("cluster")["Resources"]
    manifests = {k: v for k, v in resources.items() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"}
    order = ["efadeviceplugin", "nvidiadeviceplugin", "mpioperatorcrd", "mpioperator", "nccltests"]
    assert [next(o for o in order if k.startswith(f"Cluster{o}")) for k in manifests] == order
    ids = {o: next(k for k in manifests if k[len("Cluster"):-8] == o) for o in order}  # ids end in an 8-digit hash
    (wait,) = [k for k, v in resources.items() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesObjectValue"]
    assert ids["mpioperatorcrd"] in resources[wait]["DependsOn"]  # the CRD is Established before its kind is used
    waits_for = {o: set(manifests[ids[o]].get("DependsOn", [])) & (set(manifests) | {wait}) for o in order}
    assert waits_for == {  # the operator follows its CRD's manifest; the MPIJob, the CRD Established
        "efadeviceplugin": set(), "nvidiadeviceplugin": set(), "mpioperatorcrd": set(),
        "mpioperator": {ids["mpioperatorcrd"]},
        "nccltests": {wait, ids["mpioperator"], ids["efadeviceplugin"], ids["nvidiadeviceplugin"]},
    }
    for lid, res in manifests.items():  # kubectl apply needs the API server, not a node
        assert not any(d.startswith("NodeGroup") for d in res.get("DependsOn", [])), lid


def test_efa_nodes_reserve_the_hugepages_pods_request(default_synth):
    from aws_constructs.user_data import SYSCTL_FILE
    from tests.support import GOLDEN, golden_check

    data = gpu_launch_template(default_synth)
    user_data = default_synth.stacks.cluster.node_groups["p5"].launch_template.user_data
    assert data["UserData"] == {"Fn::Base64": user_data}  # CloudFormation encodes it
    assert "vm.nr_hugepages=2560" in user_data and SYSCTL_FILE in user_data
    assert default_synth.plan.node_group("p5").hugepages_2mi_mib == 5120 == default_synth.plan.nccl_job.worker.memory.hugepages_mib
    golden_check(GOLDEN / "user_data" / "efa-training-p5.mime", user_data)
    assert "UserData" not in gpu_launch_template(default_synth, "system")
    assert "lustre" not in user_data


@pytest.mark.parametrize("spec", ["fsx.yaml"])  # with the spec's other tests (tests/conftest.py)
def test_storage_clusters_install_the_lustre_client(spec):
    from tests.support import GOLDEN, golden_check

    s = synth_spec(str(CLUSTERS / spec))
    (name,) = [n for n in s.stacks.cluster.node_groups if s.plan.node_group(n).role == "gpu"]
    user_data = s.stacks.cluster.node_groups[name].launch_template.user_data
    assert "dnf install -y lustre-client" in user_data and "vm.nr_hugepages=2560" in user_data
    golden_check(GOLDEN / "user_data" / f"{s.plan.name}-{name}.mime", user_data)


# --- Root volume IOPS and throughput (eksctl volumeIOPS / volumeThroughput) -------------------------


def node_group_spec(extra: str, capacity: str = "") -> str:
    return BASE.rstrip("\n") + "\n" + "".join(f"    {line}\n" for line in extra.splitlines()) + capacity


def test_fails_io1_without_iops():
    """EC2 requires Iops for io1/io2 (CloudFormation AWS::EC2::LaunchTemplate Ebs, Iops)."""
    (p,) = problems_of(node_group_spec("volumeType: io1"))
    assert p.field == "managedNodeGroups[0].volumeIOPS" and "volumeIOPS" in p.fix


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ("volumeType: io2\nvolumeIOPS: 50", "volumeIOPS", "between 100 and 256000"),
        ("volumeType: io1\nvolumeSize: 100\nvolumeIOPS: 6000", "volumeIOPS", "50 IOPS per GiB"),
        ("volumeType: gp3\nvolumeIOPS: 20000", "volumeIOPS", "between 3000 and 16000"),
        ("volumeType: gp2\nvolumeIOPS: 3000", "volumeIOPS", "take no provisioned IOPS"),
        ("volumeType: io2\nvolumeIOPS: 3000\nvolumeThroughput: 500", "volumeThroughput", "no provisioned throughput"),
        ("volumeThroughput: 1200", "volumeThroughput", "125-1000"),
        ("volumeThroughput: 1000", "volumeThroughput", "0.25 MiB/s per provisioned IOPS"),
    ],
)
def test_fails_volume_settings_ebs_does_not_take(extra, field, words):
    problems = problems_of(node_group_spec(extra))
    assert [p.field for p in problems] == [f"managedNodeGroups[0].{field}"], [p.render() for p in problems]
    assert words in problems[0].message


def test_io2_and_gp3_settings_reach_the_launch_template():
    plan = plan_of(node_group_spec("volumeType: io2\nvolumeIOPS: 16000"))
    assert (plan.node_groups[0].volume_iops, plan.node_groups[0].volume_throughput) == (16000, None)
    gp3 = plan_of(node_group_spec("volumeIOPS: 6000\nvolumeThroughput: 500")).node_groups[0]
    assert (gp3.volume_type, gp3.volume_iops, gp3.volume_throughput) == ("gp3", 6000, 500)


def test_launch_template_sets_iops_and_throughput():
    from aws_cdk import App, Stack

    from aws_constructs.launch_template import EfaLaunchTemplate, LaunchTemplateProps

    stack = Stack(App(builtin_cloud_formation_validation=False), "Lt")
    lt = EfaLaunchTemplate(
        stack, "Lt", LaunchTemplateProps(instance_type="m7i.xlarge", volume_size_gib=100, volume_type="io2", volume_iops=5000),
        security_group_ids=["sg-1"],
    )
    ebs = stack.resolve(lt.launch_template.launch_template_data)["blockDeviceMappings"][0]["ebs"]
    assert (ebs["volumeType"], ebs["iops"]) == ("io2", 5000)
    with pytest.raises(ValueError, match="needs volume_iops"):
        EfaLaunchTemplate(
            stack, "Bad", LaunchTemplateProps(instance_type="m7i.xlarge", volume_size_gib=100, volume_type="io1"),
            security_group_ids=["sg-1"],
        )


# --- Placement groups and capacity reservations ----------------------------------------------------

RESERVATION = "    capacity: {type: reservation, reservationId: cr-0123456789abcdef0}\n"


def test_reservation_node_group_gets_no_new_placement_group():
    """A reservation's capacity is in a placement group only if it was created there (eksctl #7949)."""
    ng = plan_of(node_group_spec("", RESERVATION)).node_groups[0]
    assert (ng.placement_group, ng.placement_group_name) == (False, None)


def test_fails_new_placement_group_on_a_reservation():
    (p,) = problems_of(node_group_spec("placementGroup: true", RESERVATION))
    assert p.field == "managedNodeGroups[0].placementGroup" and "placementGroup: <name>" in p.fix


@pytest.mark.parametrize("spelling", ["placementGroup: pg-reserved", "placement: {groupName: pg-reserved}"])
def test_reservation_uses_the_named_existing_placement_group(spelling):
    ng = plan_of(node_group_spec(spelling, RESERVATION)).node_groups[0]
    assert (ng.placement_group, ng.placement_group_name) == (False, "pg-reserved")


def test_fails_two_different_placement_group_names():
    problems = problems_of(node_group_spec("placementGroup: pg-a\nplacement: {groupName: pg-b}"))
    assert [p.field for p in problems] == ["managedNodeGroups[0].placement.groupName"]


@pytest.fixture(scope="module")
def named_group():
    return synth_text(node_group_spec("placementGroup: pg-reserved\nvolumeType: io2\nvolumeIOPS: 4000", RESERVATION))


def test_named_placement_group_is_referenced_not_created(named_group):
    assert not named_group.resources("cluster", "AWS::EC2::PlacementGroup")
    data = gpu_launch_template(named_group, "gpu")
    assert data["Placement"] == {"GroupName": "pg-reserved"}
    assert data["BlockDeviceMappings"][0]["Ebs"]["Iops"] == 4000


# --- AWS limits known before CloudFormation --------------------------------------------------------


def many_groups(n: int) -> str:
    groups = "".join(
        f"  - {{name: g{i}, instanceType: p5.48xlarge, availabilityZones: [us-west-2a], efaEnabled: true}}\n"
        for i in range(n)
    )
    return BASE.split("managedNodeGroups:")[0] + "managedNodeGroups:\n" + groups


def test_fails_too_many_resources_for_one_stack_with_the_count_and_the_limit():
    """180 EFA node groups (a quota raised far above EKS's default): 3 resources each; CloudFormation
    allows 500 per stack (AWS CloudFormation User Guide, "Understand CloudFormation quotas")."""
    from efa_stack.planning.limits import CFN_MAX_RESOURCES, count_cluster_resources, validate_quotas

    count = count_cluster_resources([False] + [True] * 180)
    (cfn,) = validate_quotas([f"g{i}" for i in range(181)], count, [2])
    assert cfn.field == "managedNodeGroups" and str(count) in cfn.message and str(CFN_MAX_RESOURCES) in cfn.message


def test_every_accepted_spec_fits_one_cluster_stack():
    """Class check: the most node groups a spec may hold, each with a new placement group, stay under
    CloudFormation's 500 resources per stack, so the limit cannot be reached through the spec."""
    from efa_stack.planning.limits import CFN_MAX_RESOURCES, count_cluster_resources
    from efa_stack.spec.models import MAX_USER_NODE_GROUPS

    assert count_cluster_resources([False] + [True] * MAX_USER_NODE_GROUPS) <= CFN_MAX_RESOURCES


def test_fails_more_node_groups_than_the_eks_default_quota():
    (p,) = problems_of(many_groups(30))  # 30 + the system group
    assert p.field == "managedNodeGroups" and p.value == "30 node groups"
    assert "L-6D54EA21" in p.message and "30 managed node groups" in p.message


def test_fails_180_node_groups_before_any_cloudformation():
    (p,) = problems_of(many_groups(180))
    assert p.field == "managedNodeGroups" and p.value == "180 node groups"


def test_resources_per_node_group_match_the_synthesized_node_group(default_synth):
    """The counts the limit check uses are what the constructs synthesize, per node group."""
    from efa_stack.planning.limits import RESOURCES_PER_NEW_PLACEMENT_GROUP, RESOURCES_PER_NODE_GROUP

    resources = default_synth.template("cluster")["Resources"]
    for ng in default_synth.plan.all_node_groups:
        prefix = "NodeGroup" + ng.name.replace("-", "")
        own = [k for k in resources if k.startswith(prefix)]
        expected = RESOURCES_PER_NODE_GROUP + (RESOURCES_PER_NEW_PLACEMENT_GROUP if ng.placement_group else 0)
        assert len(own) == expected, (ng.name, own)


def test_the_mpijob_waits_until_its_crd_is_established(default_synth):
    """GIVEN the charts applied by the cluster stack, THEN the CRD chart is followed by a wait for the
    CRD's Established condition, and the charts after it (operator, then the MPIJob) come after the wait:
    a kind is served only once its CRD is Established (kubernetes.io, "Extend the Kubernetes API with
    CustomResourceDefinitions")."""
    resources = default_synth.template("cluster")["Resources"]
    (wait_id, wait), = default_synth.resources("cluster", "Custom::AWSCDK-EKS-KubernetesObjectValue").items()
    props = wait["Properties"]
    assert props["ObjectType"] == "customresourcedefinition" and props["ObjectName"] == "mpijobs.kubeflow.org"
    # the reason only an Established=True condition has: the wait returns nothing while the CRD is not served
    assert props["JsonPath"] == CRD_ESTABLISHED_JSONPATH == '.status.conditions[?(@.reason=="InitialNamesAccepted")].status'
    manifests = default_synth.resources("cluster", "Custom::AWSCDK-EKS-KubernetesResource")

    def chart_of(lid: str) -> str:
        manifest = manifests[lid]["Properties"]["Manifest"]
        return manifest if isinstance(manifest, str) else json.dumps(manifest)

    (crd_id,) = [k for k in manifests if '"kind":"CustomResourceDefinition"' in chart_of(k)]
    (job_id,) = [k for k in manifests if '"apiVersion":"kubeflow.org/v2beta1","kind":"MPIJob"' in chart_of(k)]
    assert crd_id in wait.get("DependsOn", [])

    def depends_on(lid: str, target: str, seen: frozenset = frozenset()) -> bool:
        deps = resources[lid].get("DependsOn", [])
        return target in deps or any(depends_on(d, target, seen | {lid}) for d in deps if d not in seen)

    assert depends_on(job_id, wait_id)


def test_control_plane_scaling_tier_reaches_the_cluster():
    # eksctl controlPlaneScalingConfig.tier -> AWS::EKS::Cluster ControlPlaneScalingConfig.Tier
    s = synth_text(BASE + "controlPlaneScalingConfig: {tier: tier-2xl}\n")
    (cluster,) = s.resources("cluster", "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["ControlPlaneScalingConfig"] == {"Tier": "tier-2xl"}
    assert "control plane tier-2xl" in s.plan.summary()


def test_no_control_plane_tier_leaves_eks_default(default_synth):
    (cluster,) = default_synth.resources("cluster", "AWS::EKS::Cluster").values()
    assert "ControlPlaneScalingConfig" not in cluster["Properties"]


def test_fails_unknown_control_plane_tier():
    p = one_problem(BASE + "controlPlaneScalingConfig: {tier: tier-16xl}\n")
    assert p.field == "controlPlaneScalingConfig.tier" and "tier-xl" in p.fix
