"""Training jobs: every number from the plan, both kinds, every fabric, validated against the upstream CRDs
(kubeflow/trainer@v2.3.0 from its Go module, @v1.9.4 in k8s/crds/: tests.support.crd_schemas) and the Kubernetes schema; golden files; bad input."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from efa_stack import contract
from efa_stack.planning.plan import build_plan
from efa_stack.spec.errors import Problem
from efa_stack.spec.loader import parse_spec
from efa_stack.spec.models import DEFAULT_KUBERNETES_VERSION
from k8s.dist import render_chart
from tests.support import Built, built, built_text, crd_validate, golden_check, plan_of, problems_of, spec_text

PYTORCHJOB_CRD = Path(__file__).resolve().parent.parent / "k8s" / "crds" / "kubeflow.org_pytorchjobs.yaml"
GOLDEN = Path(__file__).resolve().parent / "golden" / "training"
IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"
KINDS = ("trainjob", "pytorchjob")
FABRICS = ("efa", "tcp", "infiniband")


def job_spec(*, kind: str = "trainjob", fabric: str = "efa", extra: str = "", name: str = "ddp",
             instance_type: str = "p5.48xlarge", nodes: int = 2, efa: bool = True, body: str | None = None,
             cluster_extra: str = "") -> str:
    entry = body if body is not None else f"""  - name: {name}
    nodeGroup: gpu
    image: {IMAGE}
    kind: {kind}
    fabric: {fabric}
    command: [torchrun, /workspace/train.py]
{extra}"""
    return spec_text(instance_type, nodes, efa=efa, extra=cluster_extra + "trainingJobs:\n" + entry)


def pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "ClusterTrainingRuntime":
        return [j["template"]["spec"]["template"] for j in obj["spec"]["template"]["spec"]["replicatedJobs"]]
    if obj["kind"] == "PyTorchJob":
        return [r["template"] for r in obj["spec"]["pytorchReplicaSpecs"].values()]
    return []


def validate(obj: dict[str, Any], version: str = DEFAULT_KUBERNETES_VERSION) -> None:
    """Against the upstream CRD, and each embedded pod template against the Kubernetes schema."""
    crd_validate(obj)
    for i, template in enumerate(pod_templates(obj)):
        kubernetes_validate.validate({
            "apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": f"{obj['metadata']['name']}-{i}", "namespace": "default"}, "template": template,
        }, version, strict=True)


def training_objects(b: Built) -> list[dict[str, Any]]:
    return [o for c, o in b.objects() if c in ("training-runtimes", "training-jobs")]


def worker_container(b: Built) -> dict[str, Any]:
    """The container that runs on the GPU nodes: the runtime's for a TrainJob, the PyTorchJob's own otherwise."""
    objs = training_objects(b)
    source = next(o for o in objs if o["kind"] in ("ClusterTrainingRuntime", "PyTorchJob"))
    return pod_templates(source)[0]["spec"]["containers"][0]


# --- derived numbers ----------------------------------------------------------------------------------------
def test_p5_trainjob_numbers_come_from_the_node_group():
    # GIVEN 2 x p5.48xlarge (8 H100, 32 EFA devices each) WHEN a TrainJob runs there
    b = built_text(job_spec())
    (job,) = b.plan.training_jobs
    # THEN the plan and the manifests carry the node group's numbers
    assert (job.nnodes, job.nproc_per_node, job.worker.sizing.gpus, job.worker.sizing.efa_devices) == (2, 8, 8, 32)
    trainjob = b.find("TrainJob", "ddp")
    assert trainjob["spec"]["trainer"]["numNodes"] == 2
    assert trainjob["spec"]["trainer"]["numProcPerNode"] == 8
    requests = worker_container(b)["resources"]["requests"]
    assert requests[contract.GPU_RESOURCE] == 8
    assert requests[contract.EFA_RESOURCE] == 32
    assert requests[contract.HUGEPAGES_2MI_RESOURCE] == f"{b.plan.node_group('gpu').hugepages_2mi_mib}Mi" == "5120Mi"


def test_p4d_pytorchjob_numbers_come_from_the_node_group():
    b = built_text(job_spec(kind="pytorchjob", instance_type="p4d.24xlarge"))
    pj = b.find("PyTorchJob", "ddp")
    assert pj["spec"]["nprocPerNode"] == "8"
    replicas = pj["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 1)
    for replica in replicas.values():
        res = replica["template"]["spec"]["containers"][0]["resources"]
        assert res["requests"] == res["limits"]
        assert res["requests"][contract.EFA_RESOURCE] == 4
        assert res["requests"][contract.GPU_RESOURCE] == 8


def test_nnodes_defaults_to_desired_size_and_can_be_lower():
    b = built_text(job_spec(nodes=3, extra="    nnodes: 2\n"))
    assert b.find("TrainJob")["spec"]["trainer"]["numNodes"] == 2
    (job,) = build_plan(parse_spec(job_spec(nodes=3))).training_jobs
    assert job.nnodes == 3


def test_memory_and_shm_follow_the_nccl_sizing_rule():
    b = built_text(job_spec())
    c = worker_container(b)
    nccl = b.plan.nccl_job
    assert nccl is not None
    assert c["resources"]["limits"]["memory"] == f"{nccl.worker.memory.memory_mib}Mi"
    (runtime,) = [o for o in training_objects(b) if o["kind"] == "ClusterTrainingRuntime"]
    volumes = pod_templates(runtime)[0]["spec"]["volumes"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{nccl.worker.memory.shm_mib}Mi"}} in volumes


@pytest.mark.parametrize("fabric", ["efa", "tcp"])
def test_a_training_worker_is_sized_like_an_nccl_tests_worker_on_the_same_node_group(fabric):
    # GIVEN a training job and the NCCL-tests job on the same p5.48xlarge node group, over the same fabric
    text = job_spec(fabric=fabric, cluster_extra=f"ncclTest: {{fabric: {fabric}}}\n")
    # WHEN planned
    plan = plan_of(text)
    (job,) = plan.training_jobs
    nccl = plan.nccl_job
    assert nccl is not None
    w = job.worker.sizing
    # THEN both workers have one sizing: the same devices, CPUs, memory, /dev/shm, hugepages, GPUDirect RDMA and taints
    assert w == nccl.worker
    # and EFA devices, hugepages and GPUDirect RDMA only over EFA (p5.48xlarge: 32 devices, H100)
    assert (w.efa_devices, w.gpudirect_rdma, w.memory.hugepages_mib > 0) == (
        (32, True, True) if fabric == "efa" else (0, False, False)
    )


def test_whole_cpus_are_the_node_groups_guaranteed_cpus():
    # the node group's whole CPUs for a Guaranteed pod (spec/tuning.py: nodeadm's reservation and a DaemonSet core)
    b = built_text(job_spec())
    (job,) = b.plan.training_jobs
    assert b.plan.node_group(job.node_group).guaranteed_cpus == 190
    resources = worker_container(b)["resources"]
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == 190


def test_trainjob_never_sets_resources_per_node_and_every_device_survives():
    # kubeflow/trainer <= v2.2.1 replaced the runtime container's resources with trainer.resourcesPerNode;
    # the TrainJob leaves it unset, so the pods keep every request of the runtime.
    b = built_text(job_spec())
    assert "resourcesPerNode" not in b.find("TrainJob")["spec"]["trainer"]
    requests = worker_container(b)["resources"]["requests"]
    assert {contract.GPU_RESOURCE, contract.EFA_RESOURCE, contract.HUGEPAGES_2MI_RESOURCE, "memory", "cpu"} <= set(requests)


def test_trainjob_references_its_runtime_and_the_runtime_marks_the_trainer_job():
    b = built_text(job_spec())
    ref = b.find("TrainJob")["spec"]["runtimeRef"]
    runtime = b.find("ClusterTrainingRuntime", ref["name"])
    assert ref["kind"] == "ClusterTrainingRuntime" and ref["apiGroup"] == contract.TRAINER_GROUP
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    assert rjob["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
    assert rjob["template"]["spec"]["template"]["spec"]["containers"][0]["name"] == "node"
    assert runtime["spec"]["mlPolicy"] == {"torch": {}}


def test_trainjobs_with_equal_workers_share_a_runtime_and_different_ones_do_not():
    body = (
        f"  - {{name: a, nodeGroup: gpu, image: '{IMAGE}', command: [torchrun, t.py]}}\n"
        f"  - {{name: b, nodeGroup: gpu, image: '{IMAGE}', command: [torchrun, t.py]}}\n"
        f"  - {{name: c, nodeGroup: gpu, image: '{IMAGE}', command: [torchrun, t.py], memoryMiB: 50000}}\n"
    )
    b = built_text(job_spec(body=body))
    refs = {o["metadata"]["name"]: o["spec"]["runtimeRef"]["name"] for o in training_objects(b) if o["kind"] == "TrainJob"}
    assert refs["a"] == refs["b"] != refs["c"]
    runtimes = [o["metadata"]["name"] for o in training_objects(b) if o["kind"] == "ClusterTrainingRuntime"]
    assert sorted(runtimes) == sorted({refs["a"], refs["c"]})


def test_inline_script_travels_in_env_and_runs_under_torchrun():
    script = "import torch\nprint(torch.__version__)\n"
    body = f"  - name: s\n    nodeGroup: gpu\n    image: {IMAGE}\n    args: [--steps, '5']\n    script: |\n" + "".join(
        f"      {line}\n" for line in script.splitlines()
    )
    trainer = built_text(job_spec(body=body)).find("TrainJob")["spec"]["trainer"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["EFA_STACK_TRAIN_SCRIPT"] == script
    assert trainer["command"][:2] == ["/bin/bash", "-c"] and "exec torchrun" in trainer["command"][2]
    assert trainer["args"] == ["--steps", "5"]


def test_pytorchjob_with_one_node_has_only_a_master():
    pj = built_text(job_spec(kind="pytorchjob", nodes=1)).find("PyTorchJob")
    assert set(pj["spec"]["pytorchReplicaSpecs"]) == {"Master"}


def test_fsx_and_empty_dir_volumes_are_mounted():
    storage = "storage:\n  storageCapacityGiB: 1200\n"
    extra = "    volumes:\n      - {name: data, fsx: true}\n      - {name: scratch, mountPath: /scratch, emptyDir: {sizeMiB: 1024}}\n"
    b = built_text(job_spec(kind="pytorchjob", extra=extra, cluster_extra=storage))
    c = worker_container(b)
    assert {"name": "data", "mountPath": "/fsx"} in c["volumeMounts"]
    assert {"name": "scratch", "mountPath": "/scratch"} in c["volumeMounts"]
    volumes = b.find("PyTorchJob")["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": contract.FSX_CLAIM_NAME}} in volumes


# --- fabrics ---------------------------------------------------------------------------------------------------
def _env(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c.get("env", [])}


@pytest.mark.parametrize("kind", KINDS)
def test_efa_fabric(kind):
    c = worker_container(built_text(job_spec(kind=kind)))
    env = _env(c)
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1" and env["NCCL_DEBUG"] == "INFO"


def worker_pod(b: Built) -> dict[str, Any]:
    objs = training_objects(b)
    source = next(o for o in objs if o["kind"] in ("ClusterTrainingRuntime", "PyTorchJob"))
    return pod_templates(source)[0]["spec"]


@pytest.mark.parametrize("kind", KINDS)
def test_efa_workers_run_the_guard_and_fail_closed(kind):
    # GIVEN an EFA training job on 2 x p5.48xlarge WHEN rendered
    b = built_text(job_spec(kind=kind))
    pod = worker_pod(b)
    (guard,) = pod["initContainers"]
    worker = pod["containers"][0]
    # THEN every worker pod first runs the EFA guard in the training image, expecting the node's 32 devices
    assert guard["name"] == contract.EFA_GUARD_CONTAINER
    assert guard["image"] == worker["image"]
    assert guard["resources"]["requests"][contract.EFA_RESOURCE] == 32 == worker["resources"]["requests"][contract.EFA_RESOURCE]
    guard_env = _env(guard)
    assert guard_env["EFA_GUARD_EXPECTED_EFA"] == "32" and guard_env["EFA_GUARD_EXPECTED_GPUS"] == "8"
    # AND NCCL may only use the aws-ofi-nccl network, in the guard and the worker alike
    assert _env(worker)["NCCL_NET"] == guard_env["NCCL_NET"] == "AWS Libfabric"
    # AND the guard keeps the pod Guaranteed (requests = limits)
    assert guard["resources"]["requests"] == guard["resources"]["limits"]


@pytest.mark.parametrize(("fabric", "extra"), [("efa", "    efaGuard: false\n"), ("tcp", "")])
def test_no_guard_when_switched_off_or_not_efa(fabric, extra):
    pod = worker_pod(built_text(job_spec(fabric=fabric, extra=extra)))
    assert "initContainers" not in pod
    assert _env(pod["containers"][0]).get("NCCL_NET") in (None, "Socket")


@pytest.mark.parametrize("kind", KINDS)
def test_tcp_fabric_requests_no_efa(kind):
    c = worker_container(built_text(job_spec(kind=kind, fabric="tcp")))
    assert contract.EFA_RESOURCE not in c["resources"]["requests"]
    assert contract.HUGEPAGES_2MI_RESOURCE not in c["resources"]["requests"]
    assert _env(c)["NCCL_NET"] == "Socket"


@pytest.mark.parametrize("kind", KINDS)
def test_infiniband_fabric(kind):
    extra = "    rdmaResource: rdma/rdma_shared_device_a\n    ibHca: mlx5_0\n    ibGidIndex: 0\n    socketIfname: ib0\n"
    c = worker_container(built_text(job_spec(kind=kind, fabric="infiniband", extra=extra)))
    assert c["resources"]["requests"]["rdma/rdma_shared_device_a"] == 1
    assert contract.EFA_RESOURCE not in c["resources"]["requests"]
    assert c["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    env = _env(c)
    assert (env["NCCL_IB_HCA"], env["NCCL_IB_GID_INDEX"], env["NCCL_SOCKET_IFNAME"]) == ("mlx5_0", "0", "ib0")


def test_infiniband_defaults_to_the_rdma_shared_device_plugin_resource():
    c = worker_container(built_text(job_spec(fabric="infiniband")))
    assert c["resources"]["requests"][contract.RDMA_RESOURCE] == 1


# --- validation against the upstream CRDs and the Kubernetes schema -----------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fabric", FABRICS)
def test_every_training_object_validates(kind, fabric):
    objs = training_objects(built_text(job_spec(kind=kind, fabric=fabric)))
    assert objs
    for obj in objs:
        validate(obj)


def test_example_spec_validates():
    objs = training_objects(built("training-p5"))
    assert {o["kind"] for o in objs} == {"ClusterTrainingRuntime", "TrainJob"}
    for obj in objs:
        validate(obj)


@pytest.mark.parametrize(
    ("kind", "mutate"),
    [
        ("TrainJob", lambda o: o["spec"]["trainer"].__setitem__("numNodes", "two")),
        ("TrainJob", lambda o: o["spec"].pop("runtimeRef")),
        ("ClusterTrainingRuntime", lambda o: o["spec"]["template"]["spec"]["replicatedJobs"][0].pop("name")),
        ("PyTorchJob", lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"].__setitem__("replicas", "1")),
    ],
)
def test_fails_broken_objects_against_the_upstream_crds(kind, mutate):
    b = built_text(job_spec(kind="pytorchjob" if kind == "PyTorchJob" else "trainjob"))
    obj = copy.deepcopy(b.find(kind))
    mutate(obj)
    with pytest.raises(jsonschema.ValidationError):
        validate(obj)


# --- golden files and snapshots ---------------------------------------------------------------------------------
def _chart_text(b: Built, chart_id: str) -> str:
    (chart,) = [c for c in b.charts if c.node.id == chart_id]
    return render_chart(b.plan, chart)


def test_golden_p5_trainjob():
    b = built("training-p5")
    golden_check(GOLDEN / "p5-trainjob" / "45-training-runtimes.yaml", _chart_text(b, "training-runtimes"))
    golden_check(GOLDEN / "p5-trainjob" / "50-training-jobs.yaml", _chart_text(b, "training-jobs"))


def test_golden_p4d_pytorchjob():
    b = built_text(job_spec(kind="pytorchjob", instance_type="p4d.24xlarge"))
    assert "training-runtimes" not in b.chart_ids  # a PyTorchJob carries its own pod template
    golden_check(GOLDEN / "p4d-pytorchjob" / "50-training-jobs.yaml", _chart_text(b, "training-jobs"))


def test_training_charts_come_after_device_plugins_and_depend_on_them():
    b = built_text(job_spec())
    ids = b.chart_ids
    assert ids.index("training-runtimes") < ids.index("training-jobs")
    (jobs,) = [c for c in b.charts if c.node.id == "training-jobs"]
    deps = {d.node.id for d in jobs.node.dependencies}
    assert {"training-runtimes", "nvidia-device-plugin", "efa-device-plugin"} <= deps


def test_no_training_charts_without_training_jobs():
    assert not {"training-runtimes", "training-jobs"} & set(built("default").chart_ids)


# --- bad input ----------------------------------------------------------------------------------------------------
def _one(text: str) -> Problem:
    problems = problems_of(text)
    assert len(problems) == 1, [p.render() for p in problems]
    return problems[0]


def test_fails_node_group_without_gpus():
    p = _one(job_spec(instance_type="c5n.18xlarge"))
    assert p.field == "trainingJobs[0].nodeGroup" and "NVIDIA" in p.message and "CPU-only" in p.message


def test_fails_neuron_node_group():
    p = _one(job_spec(instance_type="trn1.32xlarge"))
    assert p.field == "trainingJobs[0].nodeGroup" and "Neuron" in p.message


def test_fails_nnodes_above_max_size():
    p = _one(job_spec(extra="    nnodes: 3\n"))
    assert (p.field, p.value) == ("trainingJobs[0].nnodes", 3) and "maxSize" in p.fix


def test_fails_invalid_image():
    p = _one(job_spec(body="  - {name: x, nodeGroup: gpu, image: 'PyTorch', command: [torchrun]}\n"))
    assert p.field.endswith("image") and "tag or" in p.fix


def test_fails_efa_on_a_node_group_without_efa():
    p = _one(job_spec(efa=False))
    assert (p.field, p.value) == ("trainingJobs[0].fabric", "efa") and "fabric: tcp" in p.fix


def test_tcp_runs_on_a_node_group_without_efa():
    assert built_text(job_spec(efa=False, fabric="tcp")).find("TrainJob")


@pytest.mark.parametrize("field", ["rdmaResource: rdma/hca", "ibHca: mlx5", "ibGidIndex: 3", "socketIfname: ib0"])
def test_fails_infiniband_fields_without_infiniband(field):
    p = _one(job_spec(extra=f"    {field}\n"))
    assert p.field == f"trainingJobs[0].{field.split(':')[0]}" and "fabric: infiniband" in p.fix


def test_fails_duplicate_job_names():
    body = (
        f"  - {{name: a, nodeGroup: gpu, image: '{IMAGE}', command: [torchrun]}}\n"
        f"  - {{name: a, nodeGroup: gpu, image: '{IMAGE}', command: [torchrun], kind: pytorchjob}}\n"
    )
    p = _one(job_spec(body=body))
    assert (p.field, p.value) == ("trainingJobs[1].name", "a")


@pytest.mark.parametrize("kind", KINDS)
def test_fails_name_too_long_for_pod_names(kind):
    name = "a" * 55  # valid alone; <name>-node-0-1 / <name>-worker-0 exceed 63
    p = _one(job_spec(kind=kind, name=name))
    assert p.field == "trainingJobs[0].name" and "shorten" in p.fix


def test_fails_command_and_script_together_or_neither():
    both = _one(job_spec(extra="    script: print(1)\n"))
    assert both.field == "trainingJobs[0].command/script"
    neither = _one(job_spec(body=f"  - {{name: a, nodeGroup: gpu, image: '{IMAGE}'}}\n"))
    assert neither.field == "trainingJobs[0].command/script"


def test_fails_unknown_node_group():
    p = _one(job_spec(body=f"  - {{name: a, nodeGroup: nope, image: '{IMAGE}', command: [x]}}\n"))
    assert (p.field, p.value) == ("trainingJobs[0].nodeGroup", "nope")


def test_fails_reserved_env():
    p = _one(job_spec(extra="    env: {PET_NNODES: '4'}\n"))
    assert (p.field, p.value) == ("trainingJobs[0].env", "PET_NNODES")


def test_fails_fsx_volume_without_storage():
    p = _one(job_spec(extra="    volumes: [{name: data, fsx: true}]\n"))
    assert p.field == "trainingJobs[0].volumes[0].fsx"


def test_fails_memory_that_does_not_fit_names_the_training_field():
    p = _one(job_spec(extra="    memoryMiB: 4000000\n"))
    assert p.field.startswith("trainingJobs[0].") and "memoryMiB" in p.field


def test_all_problems_at_once():
    problems = problems_of(job_spec(efa=False, extra="    nnodes: 5\n    ibHca: mlx5\n"))
    assert {p.field for p in problems} == {"trainingJobs[0].nnodes", "trainingJobs[0].ibHca", "trainingJobs[0].fabric"}


# --- held-out review: scaling advice, namespaces -------------------------------------------------------------

def test_fails_nnodes_above_desired_capacity_since_nothing_scales_the_node_group():
    # GIVEN a node group of 2 nodes (maxSize 3) WHEN a job asks for 3 THEN the third worker would wait forever
    problems = problems_of(job_spec(nodes=2, extra="    nnodes: 3\n").replace("maxSize: 2", "maxSize: 3"))
    (p,) = [p for p in problems if p.field == "trainingJobs[0].nnodes"]
    assert p.value == 3 and "stay Pending" in p.message and "raise desiredCapacity of node group gpu to 3" in p.fix


def test_fails_zero_nodes_without_advice_that_something_scales_up():
    (p,) = [p for p in problems_of(job_spec(nodes=0).replace("maxSize: 0", "maxSize: 2"))
           if p.field == "trainingJobs[0].nnodes"]
    assert "scales up to it" not in p.fix and "raise desiredCapacity" in p.fix


def test_same_job_name_in_two_namespaces_is_two_jobs():
    two = job_spec() + (
        "  - name: ddp\n    namespace: research\n    nodeGroup: gpu\n    image: example/train:1\n"
        "    command: [python, train.py]\n"
    )
    b = built_text(two)
    assert sorted((j.namespace, j.name) for j in b.plan.training_jobs) == [("default", "ddp"), ("research", "ddp")]
    kinds = [o for _, o in b.objects() if o["kind"] == "TrainJob"]
    assert sorted(o["metadata"]["namespace"] for o in kinds) == ["default", "research"]


def test_fails_same_job_name_twice_in_one_namespace():
    twice = job_spec() + "  - name: ddp\n    nodeGroup: gpu\n    image: example/train:1\n    command: [python, t.py]\n"
    (p,) = [p for p in problems_of(twice) if p.field == "trainingJobs[1].name"]
    assert "namespace default" in p.message


def test_infiniband_job_on_eks_is_said_at_synth():
    # GIVEN a training job over InfiniBand in an EKS cluster WHEN planned THEN the summary warns that EC2 has none
    plan = plan_of(job_spec(fabric="infiniband", efa=False))
    (warning,) = [w for w in plan.warnings if "infiniband" in w]
    assert warning.startswith("trainingJobs[0].fabric") and "stay Pending" in warning and "fabric: efa" in warning
    assert "warning: trainingJobs[0].fabric" in plan.summary()
    assert not [w for w in plan_of(job_spec()).warnings if "infiniband" in w]
