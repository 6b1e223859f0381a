"""The deploy review's findings, one group of tests per finding (each written to fail before its fix).

Upstream facts are cited beside the code they test and in docs/design/training.md,
docs/design/addons.md and docs/design/kubernetes-side.md.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from efa_stack import contract
from efa_stack.planning import addons, image_compat
from efa_stack.spec.errors import SpecError
from k8s.dist import APPLY_SCRIPT, dist_dir, write_dist
from tests.specs import cluster_spec, plan_of, problems_of
from tests.support import built_text
from tests.test_k8s_training import job_spec, pod_templates, training_objects, validate

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "images" / "efa-pytorch" / "Dockerfile"
ACCEPTANCE_SCRIPT = ROOT / "k8s" / "scripts" / "acceptance_check.sh"


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


# --- 1. the node monitoring agent's DCGM server tolerates the GPU/Neuron taints ---------------------------


TRN_GROUP = """  - name: trn
    instanceType: trn2.48xlarge
    minSize: 1
    availabilityZones: [us-west-2a]
    efaEnabled: true
"""


def _monitoring_config(plan: Any) -> dict[str, Any]:
    agent = plan.addon(addons.NODE_MONITORING_AGENT)
    assert agent is not None and agent.configuration_values is not None
    config: dict[str, Any] = json.loads(agent.configuration_values)
    return config


def test_dcgm_server_tolerates_exactly_the_taints_of_the_gpu_node_groups():
    # GIVEN a GPU node group and a Neuron node group (each tainted by the plan) WHEN planned
    plan = plan_of(cluster_spec() + TRN_GROUP)
    config = _monitoring_config(plan)
    # THEN the DCGM server DaemonSet tolerates exactly the GPU groups' taints (key and effect), nothing broader:
    # on a Neuron node it would have no NVIDIA GPU to run on
    expected = sorted(
        {(t.key, t.effect) for g in plan.node_groups if g.role == "gpu" for t in g.taints}
    )
    assert contract.GPU_TAINT_KEY in {k for k, _ in expected}
    assert contract.NEURON_TAINT_KEY not in {k for k, _ in expected}
    got = config["dcgmAgent"]["tolerations"]
    assert sorted((t["key"], t["effect"]) for t in got) == expected
    assert all(t["operator"] == "Exists" for t in got)
    # AND the configuration fits the add-on's own configuration schema
    schema = addons.configuration_schema(addons.NODE_MONITORING_AGENT)
    assert schema is not None
    jsonschema.Draft7Validator(schema).validate(config)


def test_dcgm_tolerations_are_kept_beside_the_users_configuration():
    # GIVEN the user's own configuration of the agent WHEN planned
    entry = ("addons:\n  - name: eks-node-monitoring-agent\n"
             "    configurationValues: '{\"nodeAgent\": {\"priorityClassName\": \"high\"},"
             " \"dcgmAgent\": {\"tolerations\": [{\"key\": \"team\", \"operator\": \"Exists\"}]}}'\n")
    config = _monitoring_config(plan_of(cluster_spec() + entry))
    # THEN the user's settings stay and the GPU taint is tolerated too
    assert config["nodeAgent"] == {"priorityClassName": "high"}
    keys = [t["key"] for t in config["dcgmAgent"]["tolerations"]]
    assert keys[0] == "team" and contract.GPU_TAINT_KEY in keys
    jsonschema.Draft7Validator(addons.configuration_schema(addons.NODE_MONITORING_AGENT)).validate(config)


# --- 2. the training image has an unversioned libcudart.so and its build check loads the plugin -----------


def _runs(text: str) -> list[str]:
    """The RUN instructions of a Dockerfile, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    return [line for line in joined.splitlines() if line.startswith("RUN ")]


def test_image_links_the_unversioned_cuda_runtime_before_it_drops_root():
    text = DOCKERFILE.read_text()
    runs = _runs(text)
    (link,) = [r for r in runs if "libcudart.so" in r and "ln -s" in r]
    # the link points at the versioned runtime of the image's CUDA major, found in the image
    assert 'libcudart.so.${CUDA_VERSION%%.*}' in link
    assert re.search(r"ln -s\S* \"\$\{?cudart\}?\" \S*/libcudart\.so\b", link), link
    assert text.index(link.split()[1]) < text.index("USER 1001")


def test_build_check_dlopens_the_cuda_runtime_and_the_plugin_and_finds_every_dependency():
    runs = _runs(DOCKERFILE.read_text())
    (check,) = [r for r in runs if "fi_info --version" in r]
    # dlopen by the names aws-ofi-nccl and libfabric use (a missing libcudart.so fails the build) ...
    assert "CDLL('libcudart.so')" in check or 'CDLL("libcudart.so")' in check
    assert "libnccl-net.so" in check and "CDLL" in check
    # ... and ldd of the plugin reports no dependency "not found"
    assert re.search(r"ldd [^|]*libnccl-net\.so[^|]*\|[^&]*grep[^&]*not found", check), check


# --- 3. a PyTorchJob fails when a replica (its EFA guard included) fails -------------------------------------


def test_pytorchjob_replicas_never_restart_and_a_failure_fails_the_job():
    b = built_text(job_spec(kind="pytorchjob"))
    pj = b.find("PyTorchJob", "ddp")
    # kubeflow/trainer@v1.9.4 pkg/controller.v1/pytorch/pytorchjob_controller.go UpdateJobStatus: a failed
    # replica with restartPolicy Never sets JobFailed; OnFailure restarts it (the guard forever)
    assert {r["restartPolicy"] for r in pj["spec"]["pytorchReplicaSpecs"].values()} == {"Never"}
    assert pj["spec"]["runPolicy"]["backoffLimit"] == 0
    validate(pj)


# --- 8. a failed rank fails the TrainJob (no Job-level retries of one rank) ----------------------------------


def test_training_runtime_job_has_backoff_limit_zero():
    b = built_text(job_spec())
    runtime = next(o for o in training_objects(b) if o["kind"] == "ClusterTrainingRuntime")
    (node_job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert node_job["template"]["spec"]["backoffLimit"] == 0
    assert pod_templates(runtime)[0]["spec"]["restartPolicy"] == "Never"
    validate(runtime)  # the Trainer v2.3.0 ClusterTrainingRuntime CRD takes JobSpec.backoffLimit


# --- 6. the guard's fi_info probe keeps CUDA out and has room --------------------------------------------------


@pytest.mark.parametrize("kind", ["trainjob", "pytorchjob"])
def test_guard_probe_disables_cuda_hmem_and_has_memory_for_libfabric(kind):
    b = built_text(job_spec(kind=kind))
    source = next(o for o in training_objects(b) if o["kind"] in ("ClusterTrainingRuntime", "PyTorchJob"))
    (guard,) = pod_templates(source)[0]["spec"]["initContainers"]
    # libfabric@v2.4.0 src/hmem.c ofi_hmem_init: FI_HMEM lists the interfaces to initialise (system always)
    assert _env(guard)["FI_HMEM"] == "system"
    assert guard["resources"]["limits"]["memory"] == "256Mi"
    # the worker itself keeps CUDA HMEM (GPUDirect RDMA)
    assert "FI_HMEM" not in _env(pod_templates(source)[0]["spec"]["containers"][0])


# --- 9. acceptance's fi_pingpong crosses the EFA device, not shared memory ---------------------------------------


def _fake_bin(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_pingpong_runs_over_the_efa_device_with_shm_transfer_off(tmp_path):
    # GIVEN fakes of every tool the node mode runs, fi_pingpong recording its environment
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "pingpong.log"
    for tool in ("nvidia-smi", "fi_info", "all_reduce_perf", "sleep"):  # sleep: the server's start-up wait
        _fake_bin(bin_dir, tool, "exit 0\n")
    _fake_bin(bin_dir, "fi_pingpong", f'echo "$* shm=${{FI_EFA_ENABLE_SHM_TRANSFER:-unset}}" >> {log}\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(["bash", str(ACCEPTANCE_SCRIPT), "node", "8", "32", str(tmp_path / "none")],
                   env=env, check=True, capture_output=True, timeout=60)
    # THEN server and client both ran the efa provider with the EFA provider's shm transfer off
    lines = sorted(log.read_text().splitlines())
    assert len(lines) == 2
    assert all("-p efa" in ln and ln.endswith("shm=0") for ln in lines), lines


# --- 4 and 10. apply.sh: runtimes before TrainJobs; CRD waits for "True" with a deadline --------------------------


def _apply_lines(b: Any, tmp_path: Path) -> list[str]:
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts)
    return (out / APPLY_SCRIPT).read_text().splitlines()


def test_apply_script_applies_the_runtimes_before_the_trainjobs(tmp_path):
    lines = _apply_lines(built_text(job_spec()), tmp_path)
    runtimes = next(i for i, ln in enumerate(lines) if ln.startswith("kubectl apply") and "training-runtimes" in ln)
    jobs = next(i for i, ln in enumerate(lines) if "training-jobs" in ln and not ln.startswith("#"))
    assert runtimes < jobs
    # the TrainJobs go in their own invocation, retried while the Trainer webhook does not see the runtime yet
    assert lines[jobs].split()[0] == "apply_until_admitted"


def test_apply_script_never_uses_kubectl_wait_for_crds(tmp_path):
    lines = _apply_lines(built_text(job_spec(kind="pytorchjob")), tmp_path)
    assert not [ln for ln in lines if ln.startswith("kubectl wait")]
    assert any(ln.startswith("wait_established ") for ln in lines)


def _script_function(lines: list[str], name: str) -> str:
    start = lines.index(f"{name}() {{")
    end = lines.index("}", start)
    return "\n".join(lines[start:end + 1])


@pytest.mark.parametrize(
    ("statuses", "ok"),
    [(["", "False", "True"], True), (["", "", "False", "False", "False", "False"], False)],
)
def test_wait_established_waits_for_true_and_gives_up_at_its_deadline(tmp_path, statuses, ok):
    # GIVEN apply.sh's wait function and a kubectl that reports the CRD's Established status in turn
    lines = _apply_lines(built_text(job_spec(kind="pytorchjob")), tmp_path / "dist")
    function = _script_function(lines, "wait_established")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "calls"
    state.write_text("")
    script = "\n".join([
        'n=$(wc -l < "$STATE"); echo x >> "$STATE"',
        "case $n in " + " ".join(f"{i}) s='{s}' ;;" for i, s in enumerate(statuses)) + f" *) s='{statuses[-1]}' ;; esac",
        '[ -z "$s" ] && { echo "Error from server (NotFound)" >&2; exit 1; }',
        'printf %s "$s"',
    ])
    _fake_bin(bin_dir, "kubectl", script + "\n")
    _fake_bin(bin_dir, "sleep", "exit 0\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STATE": str(state),
           "EFA_STACK_CRD_WAIT_TRIES": "5"}
    run = subprocess.run(["sh", "-c", f"set -eu\n{function}\nwait_established pytorchjobs.kubeflow.org\necho done"],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    if ok:
        assert run.returncode == 0 and run.stdout.strip() == "done", run.stderr
        assert len(state.read_text().split()) == 3
    else:
        assert run.returncode != 0 and "done" not in run.stdout
        assert "pytorchjobs.kubeflow.org" in run.stderr and "Established" in run.stderr


def _jsonpath_filter(conditions: list[dict[str, str]], path: str) -> str:
    """client-go jsonpath of ``.status.conditions[?(@.K=="V")].F`` (the only form the stack uses)."""
    m = re.fullmatch(r'\.status\.conditions\[\?\(@\.(\w+)=="([^"]+)"\)\]\.(\w+)', path)
    assert m, path
    key, value, field = m.groups()
    return " ".join(c[field] for c in conditions if c.get(key) == value)


def test_stack_crd_wait_yields_nothing_until_established_is_true():
    from stacks.cluster_stack import CRD_ESTABLISHED_JSONPATH

    installing = [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                  {"type": "Established", "status": "False", "reason": "Installing"}]
    established = [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                   {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}]
    # the kubectl handler returns as soon as the JSONPath yields anything (aws-cdk-lib 2.275 kubectl-handler/get)
    assert _jsonpath_filter([], CRD_ESTABLISHED_JSONPATH) == ""
    assert _jsonpath_filter(installing, CRD_ESTABLISHED_JSONPATH) == ""
    assert _jsonpath_filter(established, CRD_ESTABLISHED_JSONPATH) == "True"


# --- 5. removing the last job keeps the CRDs (and every job of that kind) --------------------------------------


TWO_JOBS = job_spec(body="""  - name: tj
    nodeGroup: gpu
    image: nvcr.io/nvidia/pytorch:25.01-py3
    kind: trainjob
    command: [torchrun, /workspace/train.py]
  - name: pj
    nodeGroup: gpu
    image: nvcr.io/nvidia/pytorch:25.01-py3
    kind: pytorchjob
    command: [torchrun, /workspace/train.py]
""")


@pytest.fixture(scope="module")
def training_synth():
    from tests.conftest import synth_text

    return synth_text(TWO_JOBS)


def test_every_stack_crd_wait_uses_the_true_only_jsonpath(training_synth):
    from stacks.cluster_stack import CRD_ESTABLISHED_JSONPATH

    waits = training_synth.resources("cluster", "Custom::AWSCDK-EKS-KubernetesObjectValue").values()
    crd_waits = [w["Properties"] for w in waits if w["Properties"]["ObjectType"] == "customresourcedefinition"]
    assert {w["ObjectName"] for w in crd_waits} >= {"pytorchjobs.kubeflow.org", "trainjobs.trainer.kubeflow.org"}
    assert {w["JsonPath"] for w in crd_waits} == {CRD_ESTABLISHED_JSONPATH}


def test_training_crds_and_the_trainer_release_outlive_their_last_job(training_synth):
    # GIVEN a cluster with a TrainJob and a PyTorchJob WHEN synthesized
    resources = training_synth.template("cluster")["Resources"]
    manifests = {k: r for k, r in resources.items() if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"}

    def text(r: dict[str, Any]) -> str:
        m = r["Properties"]["Manifest"]
        return m if isinstance(m, str) else json.dumps(m)

    # THEN the PyTorchJob CRD's manifest is retained when a later spec drops it (CloudFormation does not
    # delete it, so `kubectl delete` never runs), and re-adding it applies over the kept CRD
    (crd,) = [r for r in manifests.values() if '"name":"pytorchjobs.kubeflow.org"' in text(r)
              and '"kind":"CustomResourceDefinition"' in text(r)]
    assert crd["DeletionPolicy"] == "Retain" and crd["UpdateReplacePolicy"] == "Retain"
    assert crd["Properties"].get("Overwrite") is True
    # AND the Trainer release (its CRDs are chart templates, which `helm uninstall` deletes) is retained
    (helm,) = [r for r in resources.values() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"]
    assert helm["DeletionPolicy"] == "Retain" and helm["UpdateReplacePolicy"] == "Retain"
    # AND every other manifest keeps the default (deleted with its chart)
    others = [r for r in manifests.values() if r is not crd]
    assert others and all(r.get("DeletionPolicy", "Delete") == "Delete" for r in others)


# --- 7. the example's image cannot silently be a known-bad build -----------------------------------------------


DLC = "public.ecr.aws/deep-learning-containers/pytorch"


@pytest.mark.parametrize("ref", [f"{DLC}:2.11.0-cu130-amzn2023", f"{DLC}:2.11-cu130-amzn2023",
                                 f"{DLC}:2.11.0-cu130-amzn2023-20260501"])
def test_compat_data_flags_tags_that_resolve_to_a_known_bad_build(ref):
    (p,) = image_compat.image_problems("trainingJobs[0].image", ref)
    assert p.field == "trainingJobs[0].image" and p.value == ref
    assert "aws-ofi-nccl-1.18-broadcast-hang" in p.message and "@sha256:" in p.fix


@pytest.mark.parametrize("ref", [f"{DLC}:2.11.0-cu130-amzn2023@sha256:{'a' * 64}", "nvcr.io/nvidia/pytorch:25.01-py3",
                                 f"{DLC}:2.11.0-cu130-amzn2023-20260915"])
def test_compat_data_passes_pinned_builds_and_images_it_does_not_know(ref):
    assert image_compat.image_problems("trainingJobs[0].image", ref) == []


def test_example_spec_pins_its_training_image_or_says_so_above_it():
    # GIVEN the shipped example: no digest of a tested build can be verified offline, so the example may name
    # the moving tag only under a notice that says to pin it (and how) right above the image line
    text = (ROOT / "clusters" / "training-p5.yaml").read_text()
    spec = yaml.safe_load(text)
    lines = text.splitlines()
    for i, job in enumerate(spec["trainingJobs"]):
        problems = image_compat.image_problems(f"trainingJobs[{i}].image", job["image"])
        if not problems:
            continue
        at = next(n for n, ln in enumerate(lines) if ln.strip() == f"image: {job['image']}")
        notice = "\n".join(ln for ln in lines[max(0, at - 16):at] if ln.strip().startswith("# !!!"))
        assert "PIN THIS IMAGE" in notice and "@sha256:" in notice and "YYYYMMDD" in notice, notice


# --- 11. user-given resource names follow Kubernetes' extended resource rules --------------------------------------


@pytest.mark.parametrize("name", ["rdma/hca", "rdma/rdma_shared_device_a", "nvidia.com/mlnxnics",
                                  f"{'a' * 63}.example.com/{'b' * 63}"])
def test_valid_extended_resource_names_are_accepted(name):
    plan_of(job_spec(fabric="infiniband", extra=f"    rdmaResource: {name}\n"))


@pytest.mark.parametrize(("name", "why"), [
    ("hca", "prefix"),
    ("kubernetes.io/hca", "kubernetes.io"),
    ("rdma.kubernetes.io/hca", "kubernetes.io"),
    ("mykubernetes.io/hca", "kubernetes.io"),
    (f"{'a' * 60}.{'b' * 60}.{'c' * 60}.{'d' * 62}/hca", "244"),
    ("requests.rdma/hca", "requests."),
    ("rdma..x/hca", "DNS-1123 subdomain"),
    ("rdma/-hca", "name part"),
    (f"rdma/{'b' * 64}", "63"),
    ("Rdma/hca", "DNS-1123 subdomain"),
    ("a/b/c", "one '/'"),
])
def test_fails_resource_names_kubernetes_rejects(name, why):
    problems = problems_of(job_spec(fabric="infiniband", extra=f"    rdmaResource: {name}\n"))
    (p,) = [p for p in problems if p.field.endswith("rdmaResource")]
    assert p.field == "trainingJobs[0].rdmaResource" and p.value == name
    assert why in p.message and p.fix, p
    assert "rdma/hca" in p.fix


def test_resource_name_problem_comes_from_the_spec_loader():
    with pytest.raises(SpecError):
        plan_of(job_spec(fabric="infiniband", extra="    rdmaResource: kubernetes.io/x\n"))


@pytest.mark.parametrize("spec", ["trainjob", "pytorchjob"])
def test_apply_script_is_shellcheck_clean(tmp_path, spec):
    import shutil
    import sys

    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    lines = _apply_lines(built_text(job_spec(kind=spec)), tmp_path)
    run = subprocess.run([shellcheck, "--shell=sh", "-"], input="\n".join(lines) + "\n", capture_output=True,
                         text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_stack_passes_the_dcgm_tolerations_to_the_addon(training_synth):
    addons_cfn = training_synth.resources("cluster", "AWS::EKS::Addon").values()
    (agent,) = [a["Properties"] for a in addons_cfn if a["Properties"]["AddonName"] == addons.NODE_MONITORING_AGENT]
    config = json.loads(agent["ConfigurationValues"])
    assert config == {"dcgmAgent": {"tolerations": [
        {"effect": "NoSchedule", "key": contract.GPU_TAINT_KEY, "operator": "Exists"},
    ]}}
