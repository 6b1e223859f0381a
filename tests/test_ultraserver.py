"""UltraServer node groups (p6e-gb200.36xlarge): catalog, plan and its refusals, launch template and user data, the
ComputeDomains, NFD/GFD and the NVIDIA DRA driver, and the acceptance check of the NVIDIA module options.

GIVEN clusters/gb200-ultraserver.yaml or a small variant of it, WHEN it is planned, rendered or judged, THEN every
figure comes from the catalog and data/ultraservers.json, and what cannot work is refused with its fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from efa_stack import contract
from efa_stack.acceptance import checks
from efa_stack.planning import catalog, node_software, ultraserver
from efa_stack.planning.layout import interface_layout
from efa_stack.planning.node_software import AmiDriverData
from efa_stack.planning.plan import plan_from_file
from tests.support import CLUSTERS, GOLDEN, built, golden_check, plan_of, problems_of

SPEC = CLUSTERS / "gb200-ultraserver.yaml"
P6E = "p6e-gb200.36xlarge"
PARAMS = Path(__file__).parent / "fixtures" / "nvidia_params"
GROUP_ARN = "arn:aws:resource-groups:us-east-1:123456789012:group/gb200-ultra"


def spec(group: str = "", *, version: str = "1.35", pools: str = "") -> str:
    """A one-group spec of 18 x p6e-gb200.36xlarge in a u-p6e-gb200x72 Capacity Block's resource group; ``group``
    replaces or adds node group lines (keys at four spaces)."""
    lines = {
        "name": "gb200", "instanceType": P6E, "minSize": "0", "desiredCapacity": "18", "maxSize": "18",
        "availabilityZones": "[us-east-1a]", "efaEnabled": "true", "ultraServerType": "u-p6e-gb200x72",
        "instanceMarketOptions": "{marketType: capacity-block}",
        "capacityReservation": f"{{capacityReservationTarget: {{capacityReservationResourceGroupARN: {GROUP_ARN}}}}}",
    }
    for line in filter(None, group.splitlines()):
        key, _, value = line.strip().partition(":")
        if value.strip() == "DROP":
            lines.pop(key, None)
        else:
            lines[key] = value.strip()
    body = "\n".join(f"    {k}: {v}" for k, v in lines.items()).replace("    name:", "  - name:", 1)
    return "\n".join([
        "apiVersion: eksctl.io/v1alpha5", "kind: ClusterConfig",
        f'metadata: {{name: t, region: us-east-1, version: "{version}"}}',
        "availabilityZones: [us-east-1a, us-east-1b]", "managedNodeGroups:", body, pools, "",
    ])


def fields(text: str) -> dict[str, object]:
    return {p.field: p for p in problems_of(text)}


# --- the catalog -----------------------------------------------------------------------------------------------


def test_p6e_gb200_carries_the_documented_figures_and_one_efa_only_interface_per_group_of_cards():
    it = catalog.get(P6E)
    assert (it.gpus, it.vcpus, it.memory_mib, it.arm64, it.max_efa_interfaces) == (4, 144, 960 * 1024, True, 4)
    assert len(it.network_cards) == 17 and it.network_cards[0].interface_types == ("interface",)
    layout = interface_layout(it)
    assert [(i.network_card_index, i.device_index, i.interface_type) for i in layout] == [
        (0, 0, "interface"), (1, 0, "efa-only"), (5, 0, "efa-only"), (9, 0, "efa-only"), (13, 0, "efa-only")]


def test_the_group_rule_changes_no_other_layout():
    from efa_stack.planning.layout import _spread

    thinned = [it.name for it in catalog.efa_capable() for layout in ("current", "legacy")
               if _spread(sorted(it.network_cards, key=lambda c: c.index), it.max_efa_interfaces, layout)
               != sorted(it.network_cards, key=lambda c: c.index)]
    assert thinned == [P6E, P6E]


def test_gb300_and_the_roce_variant_are_refused_with_what_is_missing():
    gb300 = fields(spec("instanceType: p6e-gb300.36xlarge"))["managedNodeGroups[0].instanceType"]
    assert "no data for p6e-gb300.36xlarge" in gb300.message and "network cards, EFA devices and GPUs" in gb300.message
    assert "efa-stack catalog refresh" in gb300.fix and "ultraservers.json" in gb300.fix
    roce = fields(spec("instanceType: p6e-gb300r.36xlarge"))["managedNodeGroups[0].instanceType"]
    assert "no EFA instance type" in roce.message and "RoCE" in roce.message and P6E in roce.fix


# --- the plan ----------------------------------------------------------------------------------------------------


def test_the_example_spec_plans_an_ultraserver_group_with_compute_domains():
    plan = plan_from_file(SPEC)
    g = plan.node_group("gb200")
    assert g.ami_type == "AL2023_ARM_64_NVIDIA" and g.capacity == contract.CAPACITY_BLOCK
    assert g.reservation_id is None and g.reservation_resource_group_arn == GROUP_ARN
    assert g.release_version == "1.35.6-20260714" and not g.placement_group
    us = g.ultraserver
    assert us is not None and (us.ultra_server_type, us.domain_nodes, us.driver_branch) == ("u-p6e-gb200x72", 18, "580")
    assert us.module_options == (("GrdmaPciTopoCheckOverride", "1"),) and us.local_storage == "RAID0"
    nccl = plan.nccl_job
    assert nccl is not None and nccl.slots_per_worker == 4 and nccl.worker.efa_devices == 4
    assert nccl.compute_domain is not None and nccl.compute_domain.within_domain
    assert nccl.compute_domain.channel_claim_template == "nccl-tests-gb200-channel"
    (train,) = plan.training_jobs
    assert train.worker.compute_domain is not None and train.worker.compute_domain.name == "ddp-gb200"
    assert any("not proven on hardware" in w for w in plan.warnings)


def test_a_job_larger_than_one_nvlink_domain_is_not_kept_in_one():
    plan = plan_of(spec("ultraServerType: u-p6e-gb200x36"))
    domain = plan.nccl_job.compute_domain
    assert domain is not None and domain.domain_nodes == 9 and not domain.within_domain


def test_other_groups_get_no_compute_domain():
    plan = plan_from_file(CLUSTERS / "default.yaml")
    assert plan.nccl_job.compute_domain is None and all(g.ultraserver is None for g in plan.node_groups)


@pytest.mark.parametrize(("change", "where", "said", "fix"), [
    ("instanceMarketOptions: DROP\ncapacityReservation: DROP\nplacementGroup: false", "managedNodeGroups[0].capacity",
     "Capacity Blocks for ML only", "marketType: capacity-block"),
    ("ultraServerType: DROP", "managedNodeGroups[0].ultraServerType", "u-p6e-gb200x72: 18 instances",
     "add ultraServerType: u-p6e-gb200x72"),
    ("interfaceLayout: legacy", "managedNodeGroups[0].interfaceLayout", "efa-only", "interfaceLayout: current"),
    ("releaseVersion: 1.35.6-20251016", "managedNodeGroups[0].releaseVersion", "needs amazon-eks-ami v20251103",
     "set releaseVersion to 1.35.<patch>-"),
    ("releaseVersion: 1.34.2-20260714", "managedNodeGroups[0].releaseVersion", "Kubernetes 1.34 for a cluster",
     "1.35.<patch>-20260714"),
    ("releaseVersion: 1.35.6-20260714\nami: ami-0123456789abcdef0\namiFamily: AmazonLinux2023",
     "managedNodeGroups[0].releaseVersion", "ami already names", "keep one"),
])
def test_fails_ultraserver_groups_that_cannot_work(change, where, said, fix):
    p = fields(spec(change))[where]
    assert said in p.message and fix in p.fix


def test_fails_queueing_compute_domain_jobs_through_kueue():
    job = ("  - {name: ddp, nodeGroup: gb200, nnodes: 2, kind: trainjob, command: [torchrun],\n"
           "     image: public.ecr.aws/deep-learning-containers/pytorch:2.11.0-cu130-amzn2023}\n")
    text = spec() + "scheduling: {kueue: {enabled: true}}\ntrainingJobs:\n" + job
    p = fields(text)["scheduling.kueue.enabled"]
    assert "ncclTest, trainingJobs ddp" in p.message and "compute-domain-default-channel.nvidia.com" in p.message
    assert "scheduling.kueue.enabled: false" in p.fix


def test_fails_kubernetes_before_1_33():
    p = fields(spec(version="1.32"))["metadata.version"]
    assert "1.33 and later" in p.message and "1.33" in p.fix


def test_fails_a_resource_group_on_a_group_that_is_no_ultraserver():
    text = spec("instanceType: p5.48xlarge\nultraServerType: DROP")
    p = fields(text)["managedNodeGroups[0].capacityReservation"]
    assert "UltraServer node groups only" in p.message and "capacityReservationID: cr-" in p.fix


def test_fails_a_resource_group_arn_that_is_none():
    p = fields(spec("capacityReservation: {capacityReservationTarget: {capacityReservationResourceGroupARN: gb200}}"))[
        "managedNodeGroups[0].capacityReservation.capacityReservationTarget.capacityReservationResourceGroupARN"]
    assert p.message == "not a resource group ARN" and "arn:aws:resource-groups:" in p.fix


def test_fails_ultraservers_in_a_karpenter_pool():
    pool = "\n".join(["karpenterNodePools:", "  - name: gb", f"    instanceType: {P6E}", "    maxNodes: 2"])
    p = fields(spec(pools=pool))["karpenterNodePools[0].instanceType"]
    assert "managed node groups" in p.message and "managedNodeGroups entry" in p.fix


def _with_r595_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver table plus a release v20261001 whose LTS tree is R595 (none recorded gives P6e R595 yet:
    data/eks_al2023_nvidia_drivers.json's pbInstanceTypes are g7 only)."""
    data = json.loads(node_software.AMI_DRIVERS_FILE.read_text())
    data["releases"].append({"from": "v20261001", "through": "v20261001", "drivers": {"lts": "595.91.07"},
                             "source": "synthetic: a release whose LTS tree would be R595"})
    data["checkedThrough"] = "v20261001"
    table = AmiDriverData.model_validate(data)
    monkeypatch.setattr(node_software, "load_ami_drivers", lambda path=None: table)
    monkeypatch.setattr(ultraserver, "load_ami_drivers", lambda path=None: table)


def test_fails_an_ami_release_that_gives_p6e_r595(monkeypatch):
    _with_r595_release(monkeypatch)
    p = fields(spec("releaseVersion: 1.35.9-20261001"))["managedNodeGroups[0].releaseVersion"]
    assert "R595 (595.91.07)" in p.message and "nvidia-r595-p6e-efa" in p.message
    # the fix names a release that passes this very check, and the known-bad row's own fix
    assert "1.35.<patch>-20260917" in p.fix and "the R580 driver" in p.fix and "R580 driver" in p.fix
    plan_of(spec("releaseVersion: 1.35.2-20260917"))  # that release is accepted


def test_an_unpinned_or_unknown_release_is_a_warning_not_a_refusal(monkeypatch):
    unpinned = plan_of(spec())
    assert any("EKS picks the AMI release" in w and "amazon-eks-ami v20260917" in w for w in unpinned.warnings)
    unknown = plan_of(spec("releaseVersion: 1.35.9-20261224"))
    assert any("v20261224 is not in eks_al2023_nvidia_drivers.json" in w for w in unknown.warnings)


# --- launch template and user data -------------------------------------------------------------------------------


def test_the_launch_template_targets_the_resource_group_and_the_user_data_sets_the_module_option():
    from aws_cdk import App, Stack

    from aws_constructs.launch_template import EfaLaunchTemplate
    from stacks.node_groups import node_group_props

    g = plan_from_file(SPEC).node_group("gb200")
    props = node_group_props(g)
    assert props.release_version == "1.35.6-20260714" and props.ami_type == "AL2023_ARM_64_NVIDIA"
    app = App(builtin_cloud_formation_validation=False)
    stack = Stack(app, "Golden")
    lt = EfaLaunchTemplate(stack, "Gb200", props.launch_template, security_group_ids=["sg-cluster", "sg-efa"])
    (res,) = app.synth().get_stack_by_name("Golden").template["Resources"].values()
    data = res["Properties"]["LaunchTemplateData"]
    assert data["CapacityReservationSpecification"] == {"CapacityReservationTarget": {
        "CapacityReservationResourceGroupArn": GROUP_ARN}}
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"} and "Placement" not in data
    user_data = lt.user_data
    assert "options nvidia NVreg_GrdmaPciTopoCheckOverride=1" in user_data
    assert "localStorage:\n      strategy: RAID0" in user_data
    golden_check(GOLDEN / "user_data" / "gb200-ultra-gb200.mime", user_data)
    data.pop("UserData")
    golden_check(GOLDEN / "launch_templates" / "p6e-gb200.36xlarge-resource-group.json",
                 json.dumps(data, indent=1, sort_keys=True) + "\n")


def test_fails_a_launch_template_with_both_a_reservation_and_a_resource_group():
    from aws_cdk import App, Stack

    from aws_constructs.launch_template import EfaLaunchTemplate, LaunchTemplateProps

    props = LaunchTemplateProps(instance_type=P6E, capacity=contract.CAPACITY_BLOCK, reservation_id="cr-0123456789abcdef0",
                                reservation_resource_group_arn=GROUP_ARN)
    with pytest.raises(ValueError, match="not both"):
        EfaLaunchTemplate(Stack(App(), "S"), "Lt", props, security_group_ids=["sg-cluster"])


# --- the Kubernetes side -----------------------------------------------------------------------------------------


def test_one_compute_domain_per_job_in_the_api_version_the_pinned_driver_serves():
    b = built("gb200-ultraserver")
    domains = [o for o in b.manifests["compute-domains"] if o["kind"] == "ComputeDomain"]
    assert sorted(d["metadata"]["name"] for d in domains) == ["ddp-gb200", "nccl-tests-gb200"]
    crd = yaml.safe_load_all((Path(__file__).parent / "fixtures" / "upstream" /
                              "resource.nvidia.com_computedomains.yaml").read_text())
    served = [v["name"] for d in crd if d for v in d["spec"]["versions"] if v["served"]]
    for d in domains:
        assert d["apiVersion"] == f"{contract.COMPUTE_DOMAIN_GROUP}/{served[0]}" and d["spec"]["numNodes"] == 0
        assert d["spec"]["channel"]["resourceClaimTemplate"]["name"] == f"{d['metadata']['name']}-channel"


def test_workers_claim_their_channel_and_stay_in_one_nvlink_domain():
    b = built("gb200-ultraserver")
    worker = b.mpijob()["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["resourceClaims"] == [{"name": contract.COMPUTE_DOMAIN_CLAIM,
                                         "resourceClaimTemplateName": "nccl-tests-gb200-channel"}]
    container = worker["containers"][0]
    assert container["resources"]["claims"] == [{"name": contract.COMPUTE_DOMAIN_CLAIM}]
    assert container["resources"]["limits"][contract.GPU_RESOURCE] == 4
    assert container["resources"]["limits"][contract.EFA_RESOURCE] == 4  # GPUs and EFA stay on the device plugins
    (term,) = worker["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == contract.GPU_CLIQUE_LABEL
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NCCL_MNNVL_ENABLE"] == "1" and env["NCCL_NVLS_ENABLE"] == "1"
    assert [c["name"] for c in worker["initContainers"]] == [contract.EFA_GUARD_CONTAINER]  # the guard is unchanged
    runtime = b.find("ClusterTrainingRuntime")
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["resourceClaims"][0]["resourceClaimTemplateName"] == "ddp-gb200-channel"
    assert "resourcesPerNode" not in json.dumps(b.find("TrainJob"))  # the claims live in the runtime only


def test_the_dra_driver_serves_compute_domains_only_and_runs_on_the_ultraserver_nodes():
    from k8s.components import NVIDIA_DRA_DRIVER
    from k8s.rollout import releases

    release = releases(built("gb200-ultraserver").plan)[NVIDIA_DRA_DRIVER]
    values = dict(release.values)
    assert values["resources"] == {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}}
    assert values["gpuResourcesEnabledOverride"] is False and values["webhook"] == {"enabled": False}
    (term,) = values["kubeletPlugin"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": contract.LABEL_NODE_GROUP, "operator": "In", "values": ["gb200"]}]
    assert values["kubeletPlugin"]["tolerations"] == [
        {"key": contract.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    assert release.crds == (contract.COMPUTE_DOMAIN_CRD_NAME, contract.COMPUTE_DOMAIN_CLIQUE_CRD_NAME)


def test_the_compute_domains_follow_the_driver_and_the_jobs_follow_them():
    from k8s.rollout import apply_id, available_id, established_id

    rollout = built("gb200-ultraserver").rollout
    cds = rollout[apply_id("compute-domains")]
    assert available_id("nvidia-dra-driver") in cds.after
    assert established_id(contract.COMPUTE_DOMAIN_CRD_NAME) in rollout.ancestors(cds.id)
    for job in ("nccl-tests", "training-jobs"):
        assert cds.id in rollout.ancestors(apply_id(job))


def test_gfd_and_nfd_label_the_nvlink_domain_on_the_ultraserver_nodes_only():
    from k8s.charts import HOST_ACCESS_WORKLOADS
    from k8s.components import NODE_FEATURE_DISCOVERY
    from k8s.rollout import releases

    b = built("gb200-ultraserver")
    gfd = b.find("DaemonSet", contract.GPU_FEATURE_DISCOVERY_NAME)
    pod = gfd["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"] == ["/usr/bin/gpu-feature-discovery"]
    assert {"name": "MIG_STRATEGY", "value": "none"} in pod["containers"][0]["env"]
    assert contract.GPU_FEATURE_DISCOVERY_NAME in HOST_ACCESS_WORKLOADS
    nfd = dict(releases(b.plan)[NODE_FEATURE_DISCOVERY].values)
    assert nfd["worker"]["affinity"] == pod["affinity"]
    assert "gpu-feature-discovery" not in built("default").manifests  # no UltraServer, no GFD
    efa_plugin = b.find("DaemonSet", contract.EFA_DEVICE_PLUGIN_NAME)["spec"]["template"]["spec"]
    assert {"key": contract.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in efa_plugin["tolerations"]


def test_golden_ultraserver_manifests():
    from k8s.dist import dist_files

    b = built("gb200-ultraserver")
    files = dist_files(b.plan, b.charts, b.rollout)
    for rel in ("13-gpu-feature-discovery.yaml", "after-crds/39-compute-domains.yaml",
                "helm/dra-driver-nvidia-gpu-values.yaml", "helm/node-feature-discovery-values.yaml"):
        golden_check(GOLDEN / "ultraserver" / rel, files[rel])


# --- acceptance: the NVIDIA module options and the driver branch -------------------------------------------------


def _nvreg(params: str, rc: int = 0) -> checks.Section:
    log = f"=== efa-stack-check BEGIN nvreg ===\n{params}=== efa-stack-check END nvreg rc={rc} ===\n"
    return checks.parse_sections(log)["nvreg"]


OPTIONS = (("GrdmaPciTopoCheckOverride", "1"),)


def test_nvreg_passes_with_the_option_and_an_r580_driver():
    ev = checks.judge_nvreg(_nvreg((PARAMS / "h100-580.105.08.params").read_text()), OPTIONS, "580", "580.105.08")
    assert ev.status == "pass" and "GrdmaPciTopoCheckOverride: 1" in ev.measured


def test_fails_nvreg_when_the_option_is_not_set_with_the_kernels_error():
    ev = checks.judge_nvreg(_nvreg((PARAMS / "p6e-580-override-0.params").read_text()), OPTIONS, "580", "580.159.03")
    assert ev.status == "failed" and "GrdmaPciTopoCheckOverride: 0" in ev.measured
    assert checks.DMA_BUF_ERROR in ev.detail and "sockets" in ev.detail and "reboot the node" in ev.detail


def test_fails_nvreg_on_an_r595_driver_that_drops_the_option():
    ev = checks.judge_nvreg(_nvreg((PARAMS / "p6e-595-no-override.params").read_text()), OPTIONS, "580", "595.91.07")
    assert ev.status == "failed" and "GrdmaPciTopoCheckOverride: absent" in ev.measured
    assert "not of the R580 branch" in ev.detail and "releaseVersion" in ev.detail


def test_fails_nvreg_when_the_parameters_cannot_be_read():
    assert checks.judge_nvreg(_nvreg("cat: /host-proc-nvidia/params: No such file\n", rc=1), OPTIONS, "580",
                              None).status == "failed"
    assert checks.judge_nvreg(None, OPTIONS, "580", None).status == "failed"


def test_the_check_pod_of_an_ultraserver_node_reads_the_hosts_nvidia_params():
    from k8s.acceptance import NVIDIA_PROC_DIR, check_pod

    plan = plan_from_file(SPEC)
    pod = check_pod(plan.node_group("gb200"), "ip-10-0-0-1.ec2.internal", namespace="default", image="img",
                    job=plan.nccl_job, dcgm_level=1, efa=True, dcgm_image="dcgm")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["proc-nvidia"]["hostPath"] == {"path": NVIDIA_PROC_DIR, "type": "Directory"}
    check = pod["spec"]["containers"][0]
    assert {"name": "NVREG_PARAMS", "value": "/host-proc-nvidia/params"} in check["env"]
    assert any(m["name"] == "proc-nvidia" and m["readOnly"] for m in check["volumeMounts"])
    script = (Path(__file__).parent.parent / "k8s" / "scripts" / "acceptance_check.sh").read_text()
    assert 'section nvreg cat "$NVREG_PARAMS"' in script


def test_pairs_on_an_ultraserver_measure_efa_without_a_compute_domain():
    from k8s.acceptance import pair_job

    plan = plan_from_file(SPEC)
    body = pair_job(plan.nccl_job, plan.node_group("gb200"), "accept-gb200-r1-0", ("a", "b"), "default")
    worker = body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "resourceClaims" not in worker and "podAffinity" not in worker["affinity"]


def test_a_pair_below_the_efa_floor_is_slow():
    from efa_stack.acceptance.judge import pair_status

    log = (Path(__file__).parent / "fixtures" / "acceptance" / "pair_slow.log").read_text()
    _, busbw, _ = pair_status(log, "Succeeded", "", "p5.48xlarge", "pair.log", 0.01)
    assert busbw is not None
    floor = busbw + 1
    slow, _, detail = pair_status(log, "Succeeded", "", "p5.48xlarge", "pair.log", 0.01, floor)
    assert slow == "slow" and f"{floor:g} GB/s EFA floor" in detail
    assert ultraserver.nccl_floors().net_busbw_gbps == 40 and ultraserver.nccl_floors().nvls_busbw_gbps == 500


# --- preflight: the resource group of Capacity Blocks ------------------------------------------------------------


def _preflight_clients():
    import boto3

    from efa_stack.tools import preflight

    session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
    cfg = preflight.client_config(1)
    return session.client("resource-groups", config=cfg), session.client("ec2", config=cfg)


def _block(rid: str, **kw) -> dict:
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 11, 25, tzinfo=UTC)
    item = {"CapacityReservationId": rid, "InstanceType": P6E, "AvailabilityZone": "us-east-1a",
            "TotalInstanceCount": 9, "AvailableInstanceCount": 9, "State": "active", "ReservationType": "capacity-block",
            "StartDate": now - timedelta(days=1), "EndDate": now + timedelta(days=6)}
    return {**item, **kw}


def _group_resources(*ids: str) -> dict:
    arn = "arn:aws:ec2:us-east-1:123456789012:capacity-reservation/"
    return {"Resources": [{"Identifier": {"ResourceArn": arn + i, "ResourceType": "AWS::EC2::CapacityReservation"}}
                          for i in ids]}


def _reservation_group_findings(rg_response=None, rg_error: str | None = None, blocks: list[dict] | None = None):
    from datetime import UTC, datetime

    from botocore.stub import Stubber

    from efa_stack.tools import preflight

    rg, ec2 = _preflight_clients()
    plan = plan_from_file(SPEC)
    wanted = {"Group": GROUP_ARN, "Filters": [{"Name": "resource-type", "Values": ["AWS::EC2::CapacityReservation"]}]}
    with Stubber(rg) as rg_stub, Stubber(ec2) as ec2_stub:
        if rg_error:
            rg_stub.add_client_error("list_group_resources", rg_error, "no such group", expected_params=wanted)
        else:
            rg_stub.add_response("list_group_resources", rg_response, wanted)
        if blocks is not None:
            ec2_stub.add_response("describe_capacity_reservations", {"CapacityReservations": blocks},
                                  {"CapacityReservationIds": sorted(b["CapacityReservationId"] for b in blocks)})
        findings = preflight.check_reservation_groups(rg, ec2, plan, now=datetime(2026, 11, 25, tzinfo=UTC))
        rg_stub.assert_no_pending_responses()
        ec2_stub.assert_no_pending_responses()
    return findings


def test_preflight_passes_a_resource_group_whose_blocks_hold_the_group():
    ids = ("cr-0a1b2c3d4e5f60718", "cr-0f1e2d3c4b5a69788")
    findings = _reservation_group_findings(_group_resources(*ids), blocks=[_block(i) for i in ids])
    assert {f.status for f in findings} == {"pass"}
    summary = next(f.message for f in findings if "2 reservations hold 18 p6e-gb200.36xlarge in us-east-1a" in f.message)
    assert "terminating its instances 60 minutes before the first block ends, 2026-11-30 23:00 UTC" in summary


def test_preflight_fails_a_resource_group_of_too_few_or_foreign_blocks():
    ids = ("cr-0a1b2c3d4e5f60718", "cr-0f1e2d3c4b5a69788")
    findings = _reservation_group_findings(_group_resources(*ids), blocks=[
        _block(ids[0]), _block(ids[1], AvailabilityZone="us-east-1b")])
    fails = [f for f in findings if f.status == "fail"]
    assert any("is in us-east-1b" in f.message for f in fails)
    assert any("hold 9 p6e-gb200.36xlarge" in f.message and "desiredCapacity 18" in f.message for f in fails)


def test_preflight_fails_a_missing_or_empty_resource_group():
    (missing,) = _reservation_group_findings(rg_error="NotFoundException")
    assert missing.status == "fail" and "does not exist" in missing.message and "list-groups" in missing.fix
    (empty,) = _reservation_group_findings({"Resources": []})
    assert empty.status == "fail" and "holds no capacity reservation" in empty.message


def test_preflight_judges_the_pinned_release_not_the_recommended_one():
    from efa_stack.tools import preflight

    # no SSM client: the pinned release is judged from the data alone
    (finding,) = preflight.check_nvidia_drivers(None, plan_from_file(SPEC))
    assert finding.status == "pass" and "releaseVersion 1.35.6-20260714" in finding.message
    assert "R580 (580.159.03)" in finding.message
