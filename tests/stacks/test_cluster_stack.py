"""The cluster stack (stacks/cluster_stack.py) as a whole template: EKS without Auto Mode, its add-ons, access, endpoint
and logging, what waits for what, and the node groups and launch templates of the shipped specs. The synths are the
shipped specs' and, for options no shipped spec has, tests.builders.OPTIONS and PRIVATE (one synth each per run);
what one construct shows is tested on that construct (tests/stacks/test_node_groups.py, tests/aws_constructs/)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from aws_cdk.assertions import Match

from aws_constructs.dashboard import EFA_WIDGETS, GPU_WIDGETS, NVLINK_NOTE
from efa_stack import contract, names
from efa_stack.planning.addons import CLOUDWATCH_AGENT_SERVICE_ACCOUNT, CLOUDWATCH_OBSERVABILITY, pinned_version
from efa_stack.planning.limits import CFN_MAX_RESOURCES
from efa_stack.spec.models import DEFAULT_KUBERNETES_VERSION
from stacks.cluster_stack import CRD_ESTABLISHED_JSONPATH
from tests.support import CLUSTERS, gpu_launch_template, gpu_nodegroup, synth_spec


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


def test_vpc_cni_addon_is_pinned_for_the_clusters_version_and_takes_over_aws_node(default_synth):
    default_synth.assertions("cluster").has_resource_properties(
        "AWS::EKS::Addon",
        {"AddonName": "vpc-cni", "AddonVersion": pinned_version("vpc-cni", DEFAULT_KUBERNETES_VERSION), "ResolveConflicts": "OVERWRITE"},
    )


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
    minor = DEFAULT_KUBERNETES_VERSION.split(".")[1]
    layers = {type(c).__name__ for c in default_synth.stacks.cluster.node.find_all() if "Layer" in type(c).__name__}
    assert f"KubectlV{minor}Layer" in layers


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


def test_access_entries_and_authentication_mode_from_spec(options_synth):
    entries = [v["Properties"] for v in options_synth.resources("cluster", "AWS::EKS::AccessEntry").values()]
    (mine,) = [e for e in entries if e["PrincipalArn"] == "arn:aws:iam::111122223333:role/ml-platform"]
    (policy,) = mine["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert json.dumps(policy["PolicyArn"]).endswith('cluster-access-policy/AmazonEKSClusterAdminPolicy"]]}')
    options_synth.assertions("cluster").has_resource_properties("AWS::EKS::Cluster", {
        "AccessConfig": Match.object_like({"AuthenticationMode": "API_AND_CONFIG_MAP"}),
    })


def test_control_plane_logging_synthesizes(options_synth):
    template = options_synth.assertions("cluster")
    template.has_resource_properties("AWS::EKS::Cluster", {
        "Logging": {"ClusterLogging": {"EnabledTypes": [{"Type": "api"}, {"Type": "audit"}]}},
    })
    template.has_resource_properties("AWS::Logs::LogGroup", {
        "LogGroupName": "/aws/eks/options/cluster", "RetentionInDays": 30,
    })
    template.has_resource("AWS::EKS::Cluster", {"DependsOn": Match.array_with(["ControlPlaneLogGroup"])})


def test_custom_ami_gets_the_cluster_details_for_nodeadm(options_synth):
    data = gpu_launch_template(options_synth, "gpu")
    assert data["ImageId"] == "ami-0123456789abcdef0"
    joined = data["UserData"]["Fn::Base64"]["Fn::Join"][1]
    assert {"Fn::GetAtt": ["EksCluster", "Endpoint"]} in joined
    assert {"Fn::GetAtt": ["EksCluster", "KubernetesNetworkConfig.ServiceIpv4Cidr"]} in joined
    assert "AmiType" not in gpu_nodegroup(options_synth, "gpu")  # CloudFormation: none with a custom AMI


def test_vpc_cni_keeps_its_pin_and_takes_the_users_configuration(options_synth):
    (props,) = [a["Properties"] for a in options_synth.resources("cluster", "AWS::EKS::Addon").values()
                if a["Properties"]["AddonName"] == "vpc-cni"]
    assert props["AddonVersion"] == pinned_version("vpc-cni", "1.34")
    assert props["ResolveConflicts"] == "OVERWRITE"
    assert json.loads(props["ConfigurationValues"]) == {"env": {"ENABLE_PREFIX_DELEGATION": "true"}}
    assert props["PodIdentityAssociations"][0]["ServiceAccount"] == "aws-node"


@pytest.mark.parametrize("spec", ["eksctl-efa-cluster.yaml"])  # with the spec's other tests (tests/conftest.py)
def test_eksctl_guide_file_synthesizes_unchanged(spec):
    s = synth_spec(str(CLUSTERS / spec))
    ng = gpu_nodegroup(s, "myefang")
    assert ng["ScalingConfig"] == {"DesiredSize": 2, "MaxSize": 3, "MinSize": 1}
    data = gpu_launch_template(s, "myefang")
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 300
    assert len(data["NetworkInterfaces"]) == 33


def endpoint_config(s):
    (cluster,) = s.resources("cluster", "AWS::EKS::Cluster").values()
    return cluster["Properties"]["ResourcesVpcConfig"]


def test_api_endpoint_public_and_private_by_default(default_synth):
    cfg = endpoint_config(default_synth)
    assert cfg["EndpointPublicAccess"] is True and cfg["EndpointPrivateAccess"] is True


def test_api_endpoint_private_only(private_synth):
    cfg = endpoint_config(private_synth)
    assert cfg["EndpointPublicAccess"] is False and cfg["EndpointPrivateAccess"] is True
    (handler,) = [v for k, v in private_synth.resources("cluster", "AWS::Lambda::Function").items()
                  if "KubectlProviderHandler" in k]
    assert "VpcConfig" in handler["Properties"]


def test_api_endpoint_public_restricted_to_cidrs(options_synth):
    assert endpoint_config(options_synth)["PublicAccessCidrs"] == ["203.0.113.0/24"]


def test_a_split_reservation_group_targets_the_reservation_from_every_part(private_synth):
    nodegroups = {v["Properties"]["NodegroupName"] for v in private_synth.resources("cluster", "AWS::EKS::Nodegroup").values()}
    assert {"big-1", "big-2"} <= nodegroups and "big" not in nodegroups
    targets = [gpu_launch_template(private_synth, part).get("CapacityReservationSpecification") for part in ("big1", "big2")]
    assert all(t == targets[0] and "cr-0123456789abcdef0" in str(t) for t in targets)
    assert not [k for k in private_synth.resources("cluster", "AWS::EC2::PlacementGroup") if "big" in k]


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


def test_control_plane_scaling_tier_reaches_the_cluster(options_synth):
    # eksctl controlPlaneScalingConfig.tier -> AWS::EKS::Cluster ControlPlaneScalingConfig.Tier
    (cluster,) = options_synth.resources("cluster", "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["ControlPlaneScalingConfig"] == {"Tier": "tier-2xl"}


def test_no_control_plane_tier_leaves_eks_default(default_synth):
    (cluster,) = default_synth.resources("cluster", "AWS::EKS::Cluster").values()
    assert "ControlPlaneScalingConfig" not in cluster["Properties"]




def test_every_node_group_waits_for_the_cni_and_the_pod_identity_agent(options_synth):
    addons = options_synth.resources("cluster", "AWS::EKS::Addon")
    needed = {k for k, v in addons.items() if v["Properties"]["AddonName"] in ("vpc-cni", "eks-pod-identity-agent")}
    assert len(needed) == 2
    for group in options_synth.resources("cluster", "AWS::EKS::Nodegroup").values():
        assert needed <= set(group["DependsOn"])


# --- observability: Container Insights and the accelerator dashboard (docs/design/addons.md) -----------------------


def dashboard_body(resource: dict) -> dict:
    parts = resource["Properties"]["DashboardBody"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else "us-west-2" for p in parts))


def test_container_insights_is_installed_once_the_node_groups_exist(default_synth):
    (addon,) = [r for r in default_synth.resources("cluster", "AWS::EKS::Addon").values()
                if r["Properties"]["AddonName"] == CLOUDWATCH_OBSERVABILITY]
    [association] = addon["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == CLOUDWATCH_AGENT_SERVICE_ACCOUNT
    groups = set(default_synth.resources("cluster", "AWS::EKS::Nodegroup"))
    assert groups and groups <= set(addon["DependsOn"])


def test_template_dashboard_shows_gpu_and_efa_metrics_per_node(default_synth):
    [dashboard] = default_synth.resources("cluster", "AWS::CloudWatch::Dashboard").values()
    name = dashboard["Properties"]["DashboardName"]
    assert name == "efa-training-us-west-2-accelerators" and names.CLOUDWATCH_DASHBOARD_NAME.ok(name)
    body = dashboard_body(dashboard)
    graphs = {w["properties"]["title"]: w["properties"] for w in body["widgets"] if w["type"] == "metric"}
    for title, stat, metrics in (*GPU_WIDGETS, *EFA_WIDGETS):
        expressions = [m[0]["expression"] for m in graphs[f"{title} per node"]["metrics"]]
        assert len(expressions) == len(metrics)
        for metric, expression in zip(metrics, expressions, strict=True):
            assert expression == (
                "SEARCH('{ContainerInsights,ClusterName,InstanceId,NodeName} "
                f'MetricName="{metric}" ClusterName="efa-training"\', \'{stat}\', 60)'
            )
    for metric in ("node_efa_rdma_read_bytes", "node_efa_rdma_write_bytes", "node_efa_rx_dropped",
                   "node_efa_retrans_pkts", "node_gpu_memory_used"):
        assert metric in json.dumps(body)
    # the per-instance-type rows filter on the dimension set that carries InstanceType
    per_gpu = graphs["p5.48xlarge (p5): GPU utilization per GPU (%)"]["metrics"][0][0]["expression"]
    assert 'InstanceType="p5.48xlarge"' in per_gpu and "GpuDevice" in per_gpu
    # no Neuron widgets on a GPU-only cluster; the NVLink gap is stated
    assert not any("Neuron" in t for t in graphs)
    assert NVLINK_NOTE in json.dumps(body, ensure_ascii=False).replace("\\n", "\n")


def test_template_outputs_the_dashboard_url(default_synth):
    url = default_synth.template("cluster")["Outputs"]["DashboardUrl"]["Value"]
    assert re.fullmatch(
        r"https://us-west-2\.console\.aws\.amazon\.com/cloudwatch/home\?region=us-west-2"
        r"#dashboards/dashboard/efa-training-us-west-2-accelerators", url,
    )


def test_template_without_container_insights_has_neither_addon_nor_dashboard(private_synth):
    # GIVEN a GPU spec with the switch off WHEN synthesized THEN no add-on, dashboard, role or output
    template = private_synth.template("cluster")
    assert not private_synth.resources("cluster", "AWS::CloudWatch::Dashboard")
    assert CLOUDWATCH_OBSERVABILITY not in json.dumps(template)
    assert "CloudWatchAgentServerPolicy" not in json.dumps(template)
    assert "DashboardUrl" not in template.get("Outputs", {})


# --- scale: spec node groups above EKS's per-group node quota, split into parts; stack sizes -----------------------

SCALE = "scale-1000-p5.yaml"


@pytest.mark.parametrize("spec", [SCALE])  # with the spec's other tests (tests/conftest.py)
def test_a_split_group_synthesizes_one_eks_node_group_per_part_with_one_label_and_one_placement_group(spec):
    s = synth_spec(str(CLUSTERS / spec))
    nodegroups = {v["Properties"]["NodegroupName"]: v["Properties"]
                  for v in s.resources("cluster", "AWS::EKS::Nodegroup").values()}
    assert sorted(nodegroups) == ["p5-1", "p5-2", "p5-3", "system"]
    parts = [nodegroups[n] for n in ("p5-1", "p5-2", "p5-3")]
    assert sum(p["ScalingConfig"]["MaxSize"] for p in parts) == 1000
    assert sum(p["ScalingConfig"]["DesiredSize"] for p in parts) == 1000
    assert {p["Labels"][contract.LABEL_NODE_GROUP] for p in parts} == {"p5"}
    assert {p["Tags"][contract.LABEL_NODE_GROUP] for p in parts} == {"p5"}
    (pg_id,) = s.resources("cluster", "AWS::EC2::PlacementGroup")
    templates = s.resources("cluster", "AWS::EC2::LaunchTemplate")
    efa_templates = [t for t in templates.values() if "Placement" in t["Properties"]["LaunchTemplateData"]]
    assert len(efa_templates) == 3
    assert all(t["Properties"]["LaunchTemplateData"]["Placement"]["GroupName"] == {"Fn::GetAtt": [pg_id, "GroupName"]}
               for t in efa_templates)
    # every part launches the same interfaces: the launch template contents differ in nothing
    datas = [{k: v for k, v in t["Properties"]["LaunchTemplateData"].items() if k != "TagSpecifications"}
             for t in efa_templates]
    assert all(d == datas[0] for d in datas)


@pytest.mark.parametrize("spec", [SCALE])
def test_split_parts_are_counted_against_the_stack_size(spec):
    from efa_stack.planning.limits import CLUSTER_STACK_FIXED_RESOURCES, count_cluster_resources, network_resource_count

    s = synth_spec(str(CLUSTERS / spec))
    actual = len(s.template("cluster")["Resources"])
    groups = s.plan.all_node_groups
    network = network_resource_count(2, s.plan.nat_gateways, s.plan.interface_endpoints, existing_vpc=False)
    bound = count_cluster_resources([g.placement_group for g in groups], [len(g.parts) for g in groups], network=network)
    assert actual <= bound < CFN_MAX_RESOURCES
    assert bound - CLUSTER_STACK_FIXED_RESOURCES - network == 2 * (1 + 3) + 1


def test_the_training_image_is_the_plans_recipe_with_its_build_args_and_output(options_synth):
    image = options_synth.plan.training_image
    assert image is not None
    uri = options_synth.template("cluster")["Outputs"]["TrainingImageUri"]["Value"]
    assert "dkr.ecr" in json.dumps(uri)
    assets = json.loads((options_synth.outdir / "options-cluster.assets.json").read_text())
    (asset,) = assets["dockerImages"].values()
    source = asset["source"]
    assert source["dockerBuildArgs"] == image.build_args and source["platform"] == image.platform == "linux/amd64"
    assert Path(source["directory"]) == image.directory
