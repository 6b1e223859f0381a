"""The DRA device layer (``devices: dra``): the plan's refusals with their fixes, the claims a worker makes, the
drivers' Helm values, the claims in the rendered pods, and the property that no node gets a device plugin and a DRA
driver for one device kind (docs/design/dra.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from efa_stack import contract
from efa_stack.planning import catalog, dra
from efa_stack.spec.errors import SpecError
from k8s import dra as k8s_dra
from k8s.components import AWS_DRANET, NEURON_DRA, NVIDIA_DRA_DRIVER, RESOURCE_CLAIMS, chart_file_name
from k8s.dist import dist_files, helm_command
from k8s.rollout import apply_id, release_id, releases
from tests.support import CLUSTERS, GOLDEN, _build, built, golden_check, plan_of, problems_of

HEADER = """
apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata: {name: t, region: us-west-2, version: "1.35"}
availabilityZones: [us-west-2a, us-west-2b]
"""


def group(instance_type: str = "p5.48xlarge", *, name: str = "gpu", efa: bool = True, devices: str = "dra",
          nodes: int = 2, extra: str = "") -> str:
    """A managedNodeGroups entry of ``nodes`` nodes (``extra``: further fields, each line indented by four)."""
    return (f"  - name: {name}\n    instanceType: {instance_type}\n    minSize: {nodes}\n    desiredCapacity: {nodes}\n"
            f"    maxSize: {nodes}\n    availabilityZones: [us-west-2a]\n    efaEnabled: {str(efa).lower()}\n"
            f"    devices: {devices}\n" + extra)


def spec(*groups: str, tail: str = "", version: str = "1.35") -> str:
    return HEADER.replace('"1.35"', f'"{version}"') + "managedNodeGroups:\n" + "".join(groups) + tail


def problem_at(text: str, field: str) -> Any:
    problems = problems_of(text)
    hits = [p for p in problems if p.field == field]
    assert len(hits) == 1, [p.render() for p in problems]
    return hits[0]


# --- the plan -----------------------------------------------------------------------------------------------------


def test_a_dra_group_labels_its_nodes_and_its_workers_claim_their_devices():
    plan = built("dra-p5").plan
    (p5,) = plan.node_groups
    assert p5.devices == contract.DEVICES_DRA and p5.labels[contract.LABEL_DEVICES] == contract.DEVICES_DRA
    # the sub-node NCCL pair: one GPU with the 4 EFA devices of its PCIe root, one claim, one constraint
    nccl = plan.nccl_job
    assert nccl is not None and nccl.workers == 2 and nccl.slots_per_worker == 1 and nccl.np == 2
    assert nccl.worker.gpus == 1 and nccl.worker.efa_devices == 4
    (aligned,) = nccl.worker.claims.templates
    assert [(r.name, r.kind, r.count) for r in aligned.requests] == [("gpu-0", "gpu", 1), ("efa-0", "efa", 4)]
    assert aligned.aligned == (("gpu-0", "efa-0"),) and nccl.worker.claims.constrained
    # the whole-node TrainJob: every GPU and EFA device, one kind per claim, no constraint
    (train,) = plan.training_jobs
    claims = train.worker.sizing.claims
    assert [(t.claim, t.devices) for t in claims.templates] == [("gpus", 8), ("efa", 32)]
    assert not claims.constrained and train.worker.sizing.efa_devices == 32


def test_a_sub_node_worker_takes_its_share_of_the_node():
    plan = built("dra-p5").plan
    whole, sub = plan.training_jobs[0].worker.sizing, plan.nccl_job.worker
    assert sub.cpus == whole.cpus // 8 and sub.memory.hugepages_mib == whole.memory.hugepages_mib // 8
    assert sub.memory.shm_mib == 1024 and sub.memory.memory_mib == 4000 + 1024


def test_a_device_plugin_group_claims_nothing():
    plan = built("default").plan
    assert plan.nccl_job.worker.claims is None
    assert contract.LABEL_DEVICES not in plan.node_groups[0].labels


def test_a_device_kind_larger_than_a_claim_is_split():
    # resource.k8s.io/v1 AllocationResultsMaxSize: 32 devices per claim
    assert [(t.claim, t.devices) for t in dra.kind_claims("big", "efa", 70)] == [
        ("efa", 32), ("efa-2", 32), ("efa-3", 6)]
    assert [t.name for t in dra.kind_claims("P5", "gpu", 8)] == ["p5-gpus"]


# --- refusals (Part B.1), each with its fix ----------------------------------------------------------------------------


def test_fails_dra_before_kubernetes_1_35():
    p = problem_at(spec(group(), version="1.34"), "managedNodeGroups[0].devices")
    assert "Kubernetes 1.35 or later" in p.message and "1.34" in p.message
    assert 'metadata.version: "1.35"' in p.fix and "devices: plugin" in p.fix
    plan_of(spec(group()))  # 1.35 plans


def test_fails_dra_on_an_instance_type_aws_dranet_does_not_run_on():
    p = problem_at(spec(group("g7.48xlarge")), "managedNodeGroups[0].devices")
    assert "aws-dranet 1.0.0" in p.message and "g7.48xlarge" in p.message
    assert "p5.48xlarge" in p.fix and "devices: plugin" in p.fix


def test_fails_dra_on_a_group_without_devices():
    p = problem_at(spec(group("m7i.2xlarge", efa=False)), "managedNodeGroups[0].devices")
    assert "no device a DRA driver would publish" in p.message and "remove devices: dra" in p.fix


POOL = """karpenterNodePools:
  - name: pool
    instanceType: {itype}
    maxNodes: 2
    availabilityZone: us-west-2a
    devices: dra
"""
STATIC = "    capacity: reservation\n    capacityReservationIds: [cr-0a1b2c3d4e5f60718]\n    replicas: 2\n"


def test_fails_dra_on_a_karpenter_pool_that_launches_for_pods():
    text = spec(group("m7i.2xlarge", name="cpu", efa=False, devices="plugin"), tail=POOL.format(itype="p5.48xlarge"))
    p = problem_at(text, "karpenterNodePools[0].devices")
    assert "Karpenter v1.15" in p.message and "replicas" in p.fix
    plan = plan_of(text + STATIC)  # a static pool's nodes exist whatever the pods claim
    assert plan.pool_groups[0].labels[contract.LABEL_DEVICES] == contract.DEVICES_DRA


def test_fails_neuron_dra_on_a_pool_and_on_inferentia():
    text = spec(group("m7i.2xlarge", name="cpu", efa=False, devices="plugin"),
                tail=POOL.format(itype="trn2.48xlarge") + STATIC)
    p = problem_at(text, "karpenterNodePools[0].devices")
    assert "disagree" in p.message and "managed node group" in p.fix
    p = problem_at(spec(group("inf2.48xlarge", efa=False)), "managedNodeGroups[0].devices")
    assert "Trainium" in p.message and "devices: plugin" in p.fix
    plan_of(spec(group("trn2.48xlarge")))  # Trainium on a managed node group plans


def test_fails_dra_jobs_under_kueue_topology_aware_scheduling():
    kueue = "scheduling:\n  kueue: {enabled: true, topology: preferred}\n"
    p = problem_at(spec(group(), tail=kueue), "scheduling.kueue.topology")
    assert "kueue#10548" in p.message and "ncclTest" in p.message
    assert "topology: none" in p.fix and "devices: plugin" in p.fix


def test_fails_a_queued_sub_node_job():
    text = spec(group(), tail="ncclTest: {gpusPerWorker: 1}\nscheduling:\n  kueue: {enabled: true, topology: none}\n")
    p = problem_at(text, "ncclTest.gpusPerWorker")
    assert "constraints" in p.message and "leave gpusPerWorker out" in p.fix


def test_a_queued_whole_node_dra_job_counts_its_claims_against_the_device_class_quota():
    b = _build(plan_of(spec(group(), tail="scheduling:\n  kueue: {enabled: true, topology: none}\n")))
    kueue = b.plan.kueue
    assert kueue.device_class_mappings == (contract.GPU_DEVICE_CLASS, contract.EFA_DEVICE_CLASS)
    gpu_flavor = dict(kueue.flavor("gpu").quotas)
    assert gpu_flavor[contract.GPU_DEVICE_CLASS] == "16" and gpu_flavor[contract.EFA_DEVICE_CLASS] == "64"
    assert contract.GPU_RESOURCE not in kueue.resources and contract.EFA_RESOURCE not in kueue.resources
    config_map = next(o for _, o in b.objects() if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kueue-manager-config")
    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    assert config["resources"]["deviceClassMappings"] == [
        {"name": c, "deviceClassNames": [c]} for c in (contract.GPU_DEVICE_CLASS, contract.EFA_DEVICE_CLASS)]


@pytest.mark.parametrize(("extra", "words", "fix"), [
    ("", "uses the device plugins", "set devices: dra on managedNodeGroups[0]"),
    ("fabric: tcp, ", "runs over tcp", "set fabric: efa"),
])
def test_fails_a_sub_node_worker_the_node_group_cannot_align(extra, words, fix):
    text = spec(group(devices="plugin" if not extra else "dra"), tail=f"ncclTest: {{{extra}gpusPerWorker: 1}}\n")
    p = problem_at(text, "ncclTest.gpusPerWorker")
    assert words in p.message and fix in p.fix


@pytest.mark.parametrize(("itype", "gpus", "words", "fix"), [
    ("p5en.48xlarge", 1, "no record of how p5en.48xlarge's GPUs and EFA devices share PCIe roots", "p5.48xlarge"),
    ("p5.48xlarge", 7, "one claim holds at most 32 devices", "gpusPerWorker: 6 or less"),
    ("p4d.24xlarge", 5, "has 4 roots", "gpusPerWorker: 4 or less"),
    ("p5.48xlarge", 9, "has 8 GPUs", "gpusPerWorker: 8 or less"),
])
def test_fails_sub_node_workers_that_do_not_fit(itype, gpus, words, fix):
    p = problem_at(spec(group(itype), tail=f"ncclTest: {{gpusPerWorker: {gpus}}}\n"), "ncclTest.gpusPerWorker")
    assert words in p.message and fix in p.fix, p.render()


def test_fails_dra_on_ultraserver_groups_and_beside_them():
    gb200 = (CLUSTERS / "gb200-ultraserver.yaml").read_text()
    anchor = "    ultraServerType: u-p6e-gb200x72\n"
    p = problem_at(gb200.replace(anchor, anchor + "    devices: dra\n"), "managedNodeGroups[0].devices")
    assert "UltraServer" in p.message and p.fix == "remove devices: dra from this node group"
    p5 = ("  - {name: p5, instanceType: p5.48xlarge, minSize: 1, maxSize: 1, availabilityZones: [us-east-1a], "
          "efaEnabled: true, devices: dra}\n")
    p = problem_at(gb200.replace("\nncclTest:", p5 + "\nncclTest:"), "managedNodeGroups[1].devices")
    assert "double allocation" in p.message and "devices: plugin" in p.fix


# --- the cluster side ----------------------------------------------------------------------------------------------


def _worker_pods(b) -> list[dict[str, Any]]:
    """Every worker pod template of the rendered jobs (MPIJob workers, runtime nodes, PyTorchJob replicas)."""
    pods = []
    for _, o in b.objects():
        if o["kind"] == "MPIJob":
            pods.append(o["spec"]["mpiReplicaSpecs"]["Worker"]["template"])
        elif o["kind"] == "ClusterTrainingRuntime":
            pods += [j["template"]["spec"]["template"] for j in o["spec"]["template"]["spec"]["replicatedJobs"]]
        elif o["kind"] == "PyTorchJob":
            pods += [r["template"] for r in o["spec"]["pytorchReplicaSpecs"].values()]
    return pods


def test_dra_workers_claim_their_devices_and_request_none_from_a_device_plugin():
    b = built("dra-p5")
    pods = _worker_pods(b)
    templates = {o["metadata"]["name"]: o for o in b.manifests[RESOURCE_CLAIMS]}
    assert len(pods) == 2
    for pod in pods:
        spec_ = pod["spec"]
        assert spec_["nodeSelector"][contract.LABEL_DEVICES] == contract.DEVICES_DRA
        claims = {c["name"]: c["resourceClaimTemplateName"] for c in spec_["resourceClaims"]}
        (main,) = spec_["containers"]
        assert {c["name"] for c in main["resources"]["claims"]} == set(claims)
        for res in (main["resources"]["limits"], main["resources"]["requests"]):
            assert contract.GPU_RESOURCE not in res and contract.EFA_RESOURCE not in res
        (guard,) = spec_["initContainers"]
        assert contract.EFA_RESOURCE not in guard["resources"]["limits"]
        assert {c["name"] for c in guard["resources"]["claims"]} <= set(claims)
        assert {"name": "EFA_GUARD_DEVICES", "value": "dra"} in guard["env"]
        # the guard expects the EFA devices its claims request (4 for the aligned 1-GPU worker, 32 for a whole node)
        env = {e["name"]: e.get("value") for e in guard["env"]}
        efa = sum(r["exactly"]["count"] for c in guard["resources"]["claims"]
                  for r in templates[claims[c["name"]]]["spec"]["spec"]["devices"]["requests"]
                  if r["exactly"]["deviceClassName"] == contract.EFA_DEVICE_CLASS)
        assert env["EFA_GUARD_EXPECTED_EFA"] == str(efa) and efa in (4, 32), env


def test_an_mpijob_launcher_claims_no_device():
    (job,) = [o for _, o in built("dra-p5").objects() if o["kind"] == "MPIJob"]
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert "resourceClaims" not in launcher and contract.LABEL_DEVICES not in launcher.get("nodeSelector", {})
    assert not [c for c in launcher["containers"] if c["resources"].get("claims")]


def test_pytorchjob_master_and_workers_claim_the_same_templates():
    b = _build(plan_of(spec(group(), tail=(
        "trainingJobs:\n  - {name: pt, nodeGroup: gpu, kind: pytorchjob, image: 'nvcr.io/nvidia/pytorch:25.01-py3', "
        "command: [torchrun, t.py]}\n"))))
    job = b.find("PyTorchJob")
    for replica in ("Master", "Worker"):
        pod = job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
        assert [c["resourceClaimTemplateName"] for c in pod["resourceClaims"]] == ["gpu-gpus", "gpu-efa"]


def test_claim_templates_are_rendered_in_every_namespace_of_their_jobs():
    b = _build(plan_of(spec(group(), tail=(
        "trainingJobs:\n"
        "  - {name: a, nodeGroup: gpu, image: 'nvcr.io/nvidia/pytorch:25.01-py3', command: [torchrun, t.py]}\n"
        "  - {name: b, nodeGroup: gpu, namespace: team-b, image: 'nvcr.io/nvidia/pytorch:25.01-py3', "
        "command: [torchrun, t.py]}\n"))))
    templates = sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in b.manifests[RESOURCE_CLAIMS])
    assert templates == [("default", "gpu-efa"), ("default", "gpu-gpus"), ("team-b", "gpu-efa"), ("team-b", "gpu-gpus")]
    efa = next(o for o in b.manifests[RESOURCE_CLAIMS] if o["metadata"]["name"] == "gpu-efa")
    assert efa["apiVersion"] == contract.RESOURCE_API_VERSION
    assert efa["spec"]["spec"]["devices"]["requests"] == [{"name": "efa", "exactly": {
        "deviceClassName": contract.EFA_DEVICE_CLASS, "allocationMode": "ExactCount", "count": 32}}]


def test_the_drivers_are_releases_before_the_claims_and_the_jobs():
    b = built("dra-p5")
    rollout = b.rollout
    assert release_id(AWS_DRANET) in rollout.ancestors(apply_id(RESOURCE_CLAIMS))
    assert apply_id(RESOURCE_CLAIMS) in rollout.ancestors(apply_id("nccl-tests"))
    assert apply_id(RESOURCE_CLAIMS) in rollout.ancestors(apply_id("training-jobs"))
    rel = releases(b.plan)[AWS_DRANET]
    assert helm_command(rel).startswith(
        "helm upgrade --install aws-dranet aws-dranet --repo https://aws.github.io/eks-charts --version 1.0.0 "
        "--namespace kube-system")
    assert not {"10-efa-device-plugin.yaml", "11-nvidia-device-plugin.yaml"} & set(dist_files(b.plan, b.charts))


def test_the_drivers_values_keep_them_on_the_dra_nodes():
    plan = plan_of(spec(group(), group("trn2.48xlarge", name="trn",
                                       extra="    taints: [{key: team, value: ml, effect: NoExecute}]\n")))
    rels = releases(plan)
    dranet = rels[AWS_DRANET].values
    assert dranet["nodeSelector"] == {contract.LABEL_DEVICES: contract.DEVICES_DRA}
    assert dranet["image"] == {"repository": "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/dranet"}
    assert {t["key"] for t in dranet["tolerations"]} == {"nvidia.com/gpu", "aws.amazon.com/neuron", "team"}
    assert "filter" not in dranet and "deviceClass" not in dranet  # the chart's positive filter and class stay
    neuron = rels[NEURON_DRA].values
    assert neuron["devicePlugin"] == {"enabled": False} and neuron["scheduler"] == {"enabled": False}
    assert neuron["draDriver"]["enabled"] is True
    assert neuron["draDriver"]["nodeSelector"] == {contract.LABEL_DEVICES: contract.DEVICES_DRA}
    assert {t["key"] for t in neuron["draDriver"]["tolerations"]} == {"CriticalAddonsOnly", "aws.amazon.com/neuron", "team"}


def test_dra_release_values_and_device_classes_match_the_golden_files():
    b = built("dra-p5")
    folder = GOLDEN / "dra"
    for rel in releases(b.plan).values():
        if rel.name in (contract.AWS_DRANET_RELEASE, contract.NEURON_DRA_RELEASE, contract.NVIDIA_DRA_RELEASE):
            golden_check(folder / "helm" / f"{rel.name}-values.yaml", yaml.safe_dump(dict(rel.values), sort_keys=False))
    classes = k8s_dra.device_classes(["gpu", "efa", "neuron"])
    golden_check(folder / "device-classes.yaml", yaml.safe_dump_all(classes, sort_keys=False))
    golden_check(folder / chart_file_name(RESOURCE_CLAIMS), yaml.safe_dump_all(b.manifests[RESOURCE_CLAIMS], sort_keys=False))


# --- one mechanism per node: the property ----------------------------------------------------------------------------

TYPES = ("p5.48xlarge", "p4d.24xlarge", "p5en.48xlarge", "g7.48xlarge", "trn2.48xlarge", "inf2.48xlarge",
         "m7i.2xlarge", "g6e.12xlarge")
PLUGIN_KINDS = {contract.EFA_DEVICE_PLUGIN_NAME: "efa", contract.NVIDIA_DEVICE_PLUGIN_NAME: "gpu",
                contract.NEURON_DEVICE_PLUGIN_NAME: "neuron"}

group_spec = st.fixed_dictionaries({
    "itype": st.sampled_from(TYPES), "efa": st.booleans(), "devices": st.sampled_from(["plugin", "dra"]),
    "taint": st.booleans(),
})


def _placements(b) -> list[tuple[str, str, dict[str, Any]]]:
    """(mechanism, device kind, pod placement) of every device agent the plan installs: the device plugin DaemonSets
    as rendered, the DRA drivers as their charts render them with efa-stack's values."""
    out = []
    for _, o in b.objects():
        if o["kind"] == "DaemonSet" and o["metadata"]["name"] in PLUGIN_KINDS:
            out.append(("plugin", PLUGIN_KINDS[o["metadata"]["name"]], o["spec"]["template"]["spec"]))
    rels = releases(b.plan)
    if AWS_DRANET in rels:
        out.append(("dra", "efa", k8s_dra.dranet_placement(rels[AWS_DRANET].values, dra.dranet_instance_types())))
    if NEURON_DRA in rels:
        out.append(("dra", "neuron", k8s_dra.neuron_dra_placement(rels[NEURON_DRA].values)))
    if NVIDIA_DRA_DRIVER in rels:
        out.append(("dra", "gpu", k8s_dra.nvidia_gpu_placement(rels[NVIDIA_DRA_DRIVER].values)))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(group_spec, min_size=1, max_size=3), st.booleans())
def test_no_node_gets_a_device_plugin_and_a_dra_driver_for_one_device_kind(groups, training):
    entries = [group(g["itype"], name=f"g{i}", efa=g["efa"], devices=g["devices"],
                     extra="    taints: [{key: team, value: ml, effect: NoSchedule}]\n" if g["taint"] else "")
               for i, g in enumerate(groups)]
    gpu = next((f"g{i}" for i, g in enumerate(groups) if catalog.get(g["itype"]).accelerator == "nvidia"), None)
    tail = (f"trainingJobs:\n  - {{name: j, nodeGroup: {gpu}, fabric: tcp, image: 'nvcr.io/nvidia/pytorch:25.01-py3', "
            "command: [torchrun, t.py]}\n") if training and gpu else ""
    try:
        plan = plan_of(spec(*entries, tail=tail))
    except SpecError:
        return  # refused with its problems (the tests above)
    b = _build(plan)
    agents = _placements(b)
    for g in plan.node_groups:
        labels = {**g.labels, contract.INSTANCE_TYPE_LABEL: g.instance_type}
        running = [(mech, kind) for mech, kind, placement in agents if k8s_dra.runs_on(placement, labels, g.taints)]
        for kind in dra.device_kinds(g):
            mechanisms = {m for m, k in running if k == kind}
            assert len(mechanisms) <= 1, f"{g.name} ({g.instance_type}): {kind} by {mechanisms}"
            assert mechanisms <= {g.devices}, f"{g.name} uses {g.devices} but {mechanisms} serve its {kind}"
            if g.devices == "dra":
                assert mechanisms == {"dra"}, f"{g.name}: no DRA driver for its {kind}"
    for pod in _worker_pods(b):
        where = [g for g in plan.node_groups if k8s_dra.runs_on(
            pod["spec"], {**g.labels, contract.INSTANCE_TYPE_LABEL: g.instance_type}, g.taints)]
        claims = bool(pod["spec"].get("resourceClaims"))
        assert where and all((g.devices == "dra") == claims for g in where), json.dumps(pod["spec"])[:300]


def test_the_summary_says_which_groups_get_their_devices_from_dra():
    summary = built("dra-p5").plan.summary()
    (line,) = [ln for ln in summary.splitlines() if ln.startswith("  p5: ")]
    assert line.endswith(", devices from DRA drivers")
    assert "DRA" not in built("default").plan.summary()
