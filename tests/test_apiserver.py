"""The rendered manifests against a real Kubernetes API server: kube-apiserver and etcd on 127.0.0.1.

tools/kube-apiserver/build.sh builds both from the Go modules pinned in tools/kube-apiserver/go.mod
(k8s.io/kubernetes at the newest 1.35 patch; etcd at the version that release requires) into
``.cache/kube-apiserver-<version>/``; the fixture runs it (a no-op once built), so nothing here is ever
skipped. For every shipped spec the test writes ``dist/<cluster>/`` and runs the steps of its
``apply.sh`` against the server: every object is server-side applied for real (``kubectl apply
--server-side`` does the same PATCH), the CRDs of the Kubeflow Trainer release are those of the rehearsal's
stand-in for it (upstream's at the chart's versions, efa_stack/rehearsal/releases.py), those of a release with no
stand-in (the NVIDIA DRA driver's ComputeDomain) come from tests/fixtures/upstream/, the waits poll each CRD until
it is Established. Then the pods the controllers would create from each
pod template (DaemonSet, Deployment, MPIJob launcher and worker, TrainJob on its ClusterTrainingRuntime,
PyTorchJob) are created with ``dryRun=All``: the server validates and admits them in full but stores
nothing (no scheduler or kubelet runs here). Objects the server must refuse show that it checks.

What differs from a cluster: no controllers run, so ``kubectl rollout status`` cannot succeed (skipped,
printed) and no webhook server answers (the webhook admission plugins are off; the configurations are
still applied and validated); the ``default`` ServiceAccount that kube-controller-manager creates in
each namespace is created by the test. How to build and what it costs: docs/development.md.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from efa_stack.rehearsal.client import FIELD_MANAGER, Api
from efa_stack.rehearsal.control_plane import start_api_server
from efa_stack.rehearsal.processes import Processes
from efa_stack.rehearsal.releases import release_objects
from efa_stack.rehearsal.rollout import RolloutError, wait_established
from tests.support import CLUSTERS, LOADER, ROOT

pytestmark = [pytest.mark.xdist_group("apiserver"), pytest.mark.integration]

BUILD_SCRIPT = ROOT / "tools" / "kube-apiserver" / "build.sh"
UPSTREAM = Path(__file__).resolve().parent / "fixtures" / "upstream"

BUILD_TIMEOUT = 3600
"""Seconds for build.sh: the first build compiles kube-apiserver from source (minutes; see docs/development.md)."""
WAIT_TIMEOUT = 60
"""Seconds for a CRD to become Established (apply.sh allows about 120)."""


def _log(message: str) -> None:
    print(f"[apiserver] {message}", flush=True)


# --- the servers ---------------------------------------------------------------------------------------


def _binaries() -> Path:
    """The folder with kube-apiserver and etcd; built by build.sh when missing (never skipped)."""
    _log(f"{BUILD_SCRIPT.relative_to(ROOT)} (builds kube-apiserver and etcd on first use; minutes) ...")
    started = time.monotonic()
    proc = subprocess.run(
        [str(BUILD_SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False
    )
    for line in proc.stderr.splitlines():
        _log(line)
    if proc.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    folder = Path(proc.stdout.strip().splitlines()[-1])
    _log(f"binaries in {folder} ({time.monotonic() - started:.0f}s)")
    for name in ("kube-apiserver", "etcd"):
        assert os.access(folder / name, os.X_OK), f"{BUILD_SCRIPT} did not leave {folder / name}"
    return folder


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """kube-apiserver and etcd on 127.0.0.1 (free ports, data in a temporary folder), stopped at teardown: the
    rehearsal's API server (efa_stack/rehearsal/control_plane.py) with the webhook admission plugins off."""
    folder = _binaries()
    work = tmp_path_factory.mktemp("apiserver")
    with Processes() as processes:
        try:
            client, _ = start_api_server(processes, {"etcd": folder / "etcd", "kube-apiserver": folder / "kube-apiserver"},
                                         work, admission_webhooks=False)
            _log(f"kube-apiserver ready on {client.url}")
            yield client
        finally:
            processes.stop_all()
            shutil.rmtree(work / "etcd", ignore_errors=True)  # its write-ahead log preallocates 64 MB files
            _log("kube-apiserver and etcd stopped")


# --- apply.sh against the server -----------------------------------------------------------------------


def _objects_in(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(file, object) for what ``kubectl apply -f PATH`` reads: the file, or the .yaml/.yml/.json files
    directly in the folder, in name order; files named relative to dist/<cluster>/."""
    files = [path] if path.is_file() else sorted(
        p for p in path.iterdir() if p.is_file() and p.suffix in {".yaml", ".yml", ".json"}
    )
    dist = path.parent if path.is_file() or path.name == "after-crds" else path
    return [(f.relative_to(dist).as_posix(), o) for f in files for o in _documents(f.read_text()) if o]


def _documents(text: str) -> list[Any]:
    """The YAML documents of ``text``, parsed by libyaml where PyYAML has it (the same objects, many times faster
    than PyYAML's own parser on the large CRDs)."""
    return list(yaml.load_all(text, Loader=LOADER))


@functools.cache
def _release_crds_json(release: str, namespace: str) -> str:
    try:
        objects = release_objects(release, namespace)
    except KeyError:  # a release with no stand-in (Karpenter: its CRDs are in dist/, the release skips them)
        return "[]"
    return json.dumps([o for o in objects if o["kind"] == "CustomResourceDefinition"])


def _release_crds(release: str, namespace: str, vendored: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The CRDs Helm release ``release`` installs: those of the rehearsal's stand-in for it
    (efa_stack/rehearsal/releases.py: upstream's at the chart's versions, the Trainer's three and JobSet's), a
    fresh copy per call; a release with no stand-in installs the CRDs of ``vendored`` (its ``HelmRelease.crds``)
    kept in tests/fixtures/upstream/ (``<group>_<plural>.yaml``: the NVIDIA DRA driver's ComputeDomain at the
    pinned chart version; a CRD kept nowhere there is left out)."""
    crds: list[dict[str, Any]] = json.loads(_release_crds_json(release, namespace))
    if crds:
        return crds
    for name in vendored:
        plural, group = name.split(".", 1)
        path = UPSTREAM / f"{group}_{plural}.yaml"
        if path.is_file():
            crds += [o for o in _documents(path.read_text()) if o]
    return crds


def _wait_established(api: Api, name: str) -> str | None:
    """None once CRD ``name`` is Established, else why not (after :data:`WAIT_TIMEOUT`)."""
    try:
        wait_established(api, name, WAIT_TIMEOUT)
    except RolloutError as err:
        return str(err)
    return None


@dataclass
class Run:
    """What running one dist/<cluster>/apply.sh against the server did."""

    api: Api
    applied: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (file, object as sent)
    refused: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def apply(self, source: str, obj: dict[str, Any]) -> None:
        what = f"{source}: {obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
        try:
            got = self.api.apply(obj)
        except KeyError as err:
            self.refused.append(f"{what}: {err}")
            return
        self.warnings += [f"{what}: {w}" for w in got.warnings]
        if got.status not in (200, 201):
            self.refused.append(f"{what}: {got.message()}")
            return
        assert got.body["metadata"]["name"] == obj["metadata"]["name"], what
        self.applied.append((source, obj))


APPLY_FUNCTIONS = {"wait_established": "wait", "apply_until_admitted": "apply"}
"""Shell functions apply.sh defines -> what they do: wait until a CRD is Established; kubectl apply a file
(again while admission refuses it: no webhook runs here, so once)."""


def apply_steps(script: str) -> list[list[str]]:
    """The top-level command lines of ``apply.sh`` as words; comments and function bodies left out."""
    steps = []
    in_function = False
    for line in script.splitlines():
        if in_function:
            in_function = line != "}"
            continue
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0].endswith("()"):
            assert words[1:] == ["{"], f"apply.sh: unexpected function definition: {line}"
            in_function = True
            continue
        steps.append(words)
    return steps


def run_apply_script(api: Api, dist: Path, plan: Any) -> Run:
    """The steps of ``dist/apply.sh`` of ``plan`` against ``api``: kubectl apply (server-side, for real), helm
    (its namespace and CRDs), the waits for Established; ``kubectl rollout status`` needs a controller."""
    from k8s.rollout import releases

    run = Run(api)
    steps = apply_steps((dist / "apply.sh").read_text())
    vendored = {r.name: () if r.skip_crds else r.crds for r in releases(plan).values()}
    for words in steps:
        line = shlex.join(words)
        if words[0] in {"set", "cd", "command"}:
            continue
        action = APPLY_FUNCTIONS.get(words[0])
        if words[0] == "helm":
            assert words[1:3] == ["upgrade", "--install"] and "--create-namespace" in words, line
            namespace = words[words.index("--namespace") + 1]
            run.apply(f"helm {words[3]}", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            for crd in _release_crds(words[3], namespace, vendored.get(words[3], ())):
                run.apply(f"helm {words[3]} (upstream's CRDs)", crd)
        elif words[:2] == ["kubectl", "apply"] or action == "apply":
            target = words[1] if action == "apply" else words[words.index("-f") + 1]
            assert action == "apply" or words[2:] == ["-f", target], line
            for source, obj in _objects_in(dist / target):
                run.apply(source, obj)
        elif action == "wait" or words[:2] == ["kubectl", "wait"]:
            name = words[1] if action == "wait" else next(w for w in words if w.startswith("crd/"))[4:]
            problem = _wait_established(api, name)
            if problem:
                run.refused.append(f"apply.sh: {line}: {problem}")
        elif words[:3] == ["kubectl", "rollout", "status"] or words[0] == "wait_for_value":
            run.notes.append(f"not run (no controllers here): {line}")
        else:
            raise AssertionError(f"a command of apply.sh this test does not know: {line}")
    return run


# --- the pods the controllers would create -------------------------------------------------------------

WORKLOAD_KINDS = {"DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job"}
OPERATOR_POLICY = {"ExitCode": "Never"}
"""Replica restart policies of the Kubeflow operators that are no pod restart policy, and the pod's."""


def _pod(template: dict[str, Any], name: str, namespace: str, restart_policy: str | None = None) -> dict[str, Any]:
    meta = copy.deepcopy(template.get("metadata") or {})
    spec = copy.deepcopy(template["spec"])
    if restart_policy and "restartPolicy" not in spec:
        spec["restartPolicy"] = OPERATOR_POLICY.get(restart_policy, restart_policy)
    meta.update(name=name, namespace=namespace)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _replica_pods(job: dict[str, Any], specs_key: str) -> list[dict[str, Any]]:
    """MPIJob (mpiReplicaSpecs) and PyTorchJob (pytorchReplicaSpecs): replica 0 of every replica type,
    named as the operators name them (the MPI launcher is a batch Job's pod: ``<job>-launcher-<suffix>``)."""
    name, namespace = job["metadata"]["name"], job["metadata"].get("namespace", "default")
    pods = []
    for role, replica in job["spec"][specs_key].items():
        pod_name = f"{name}-launcher-x7k2p" if role == "Launcher" else f"{name}-{role.lower()}-0"
        pods.append(_pod(replica["template"], pod_name, namespace, replica.get("restartPolicy")))
    return pods


def _runtime_pods(runtime: dict[str, Any], job: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Pods of a (Cluster)TrainingRuntime's JobSet template; with a TrainJob, its ``spec.trainer``
    (image, command, args, env, resourcesPerNode) is put on the ``node`` container of the trainer step,
    as Kubeflow Trainer does."""
    owner = job["metadata"]["name"] if job else runtime["metadata"]["name"]
    namespace = (job or {}).get("metadata", {}).get("namespace") or runtime["metadata"].get("namespace") or "default"
    trainer = (job or {}).get("spec", {}).get("trainer") or {}
    pods = []
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = _pod(rjob["template"]["spec"]["template"], f"{owner}-{rjob['name']}-0-0-q5v8d", namespace)
        pod["spec"].setdefault("restartPolicy", "OnFailure")  # a Job's pods must not restart Always
        step = (rjob["template"].get("metadata") or {}).get("labels", {}).get("trainer.kubeflow.org/trainjob-ancestor-step")
        if trainer and step == "trainer":
            for container in pod["spec"]["containers"]:
                if container["name"] != "node":
                    continue
                for key in ("image", "command", "args"):
                    if key in trainer:
                        container[key] = trainer[key]
                if "resourcesPerNode" in trainer:
                    container["resources"] = trainer["resourcesPerNode"]
                env = {e["name"]: e for e in container.get("env", [])}
                env.update({e["name"]: e for e in trainer.get("env", [])})
                container["env"] = list(env.values())
        pods.append(pod)
    return pods


def derived_pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(made from, pod) for every pod template of ``objects``."""
    runtimes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterTrainingRuntime"}
    used: set[str] = set()
    out: list[tuple[str, dict[str, Any]]] = []
    for obj in objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        origin = f"{kind} {name}"
        known = WORKLOAD_KINDS | {"MPIJob", "PyTorchJob", "TrainJob", "ClusterTrainingRuntime"}
        schema = kind == "CustomResourceDefinition"  # its schema names "containers"; it has no pods
        assert kind in known or schema or '"containers"' not in json.dumps(obj.get("spec", {})), (
            f"{origin} has pod templates this test does not turn into pods: add its controller's rule here"
        )
        if kind in WORKLOAD_KINDS:
            template = obj["spec"]["template"]
            restart = "OnFailure" if kind == "Job" else None
            out.append((origin, _pod(template, f"{name}-b9fz4", obj["metadata"].get("namespace", "default"), restart)))
        elif kind == "MPIJob":
            out += [(origin, p) for p in _replica_pods(obj, "mpiReplicaSpecs")]
        elif kind == "PyTorchJob":
            out += [(origin, p) for p in _replica_pods(obj, "pytorchReplicaSpecs")]
        elif kind == "TrainJob":
            ref = obj["spec"]["runtimeRef"]
            assert ref.get("kind") == "ClusterTrainingRuntime", f"{origin}: runtimeRef {ref}"
            assert ref["name"] in runtimes, f"{origin}: its ClusterTrainingRuntime {ref['name']} is not rendered"
            used.add(ref["name"])
            out += [(f"{origin} on {ref['name']}", p) for p in _runtime_pods(runtimes[ref["name"]], obj)]
    for name, runtime in runtimes.items():
        if name not in used:
            out += [(f"ClusterTrainingRuntime {name}", p) for p in _runtime_pods(runtime, None)]
    return out


def _ensure_default_service_account(api: Api, namespace: str) -> None:
    """What kube-controller-manager's serviceaccount controller does in every namespace (none runs here)."""
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}}
    got = api.apply(sa)
    assert got.status in (200, 201), f"ServiceAccount {namespace}/default: {got.message()}"


def check_derived_pods(api: Api, objects: list[dict[str, Any]]) -> tuple[int, list[str], list[str]]:
    """Dry-run create every derived pod; (how many were accepted, why the others were refused, warnings)."""
    refused: list[str] = []
    warnings: list[str] = []
    accepted = 0
    for origin, pod in derived_pods(objects):
        _ensure_default_service_account(api, pod["metadata"]["namespace"])
        got = api.dry_run_create(pod)
        warnings += [f"Pod {pod['metadata']['name']} from {origin}: {w}" for w in got.warnings]
        if got.status == 201:
            accepted += 1
        else:
            refused.append(f"Pod {pod['metadata']['name']} from {origin}: {got.message()}")
    return accepted, refused, warnings


def _clean_up(api: Api, run: Run) -> None:
    """Delete what ``run`` applied, except Namespaces (without kube-controller-manager a deleted namespace
    stays Terminating) and CRDs (each spec applies the same ones), so the next spec starts afresh."""
    for _, obj in reversed(run.applied):
        if obj["kind"] in {"Namespace", "CustomResourceDefinition"}:
            continue
        got = api.delete(obj)
        assert got.status in (200, 202, 404), f"delete {obj['kind']} {obj['metadata']['name']}: {got.message()}"


# --- the tests -----------------------------------------------------------------------------------------

SHIPPED = sorted(p.stem for p in CLUSTERS.glob("*.yaml"))

PYTORCHJOB_VARIANT = "training-p5 as a PyTorchJob (Training Operator v1)"


def _variant_text() -> str:
    """clusters/training-p5.yaml with its job as a PyTorchJob and both Kubeflow operators installed:
    no shipped spec renders the Training Operator v1 objects, its CRD or a PyTorchJob."""
    text = (CLUSTERS / "training-p5.yaml").read_text()
    assert text.count("kind: trainjob") == 1
    return text.replace("kind: trainjob", "kind: pytorchjob") + "\ntrainingOperators:\n  trainer: true\n  pytorchJobV1: true\n"


def _plan(stem: str) -> Any:
    from efa_stack.planning.plan import build_plan, plan_from_file
    from efa_stack.spec.loader import parse_spec

    if stem == PYTORCHJOB_VARIANT:
        return build_plan(parse_spec(_variant_text()))
    return plan_from_file(CLUSTERS / f"{stem}.yaml")


def test_the_server_is_the_default_clusters_kubernetes_version(apiserver):
    from efa_stack.spec.models import DEFAULT_KUBERNETES_VERSION

    got = apiserver.request("GET", "/version")
    assert got.status == 200, got.message()
    assert f"{got.body['major']}.{got.body['minor']}" == DEFAULT_KUBERNETES_VERSION, got.body
    _log(f"server version {got.body['gitVersion']}")


@pytest.mark.parametrize("stem", [*SHIPPED, PYTORCHJOB_VARIANT])
def test_rendered_manifests_are_accepted_by_the_api_server(apiserver, stem, tmp_path):
    # GIVEN dist/<cluster>/ of the spec, as `make synth` writes it
    from k8s.dist import dist_dir, write_dist

    plan = _plan(stem)
    dist = dist_dir(plan, tmp_path)
    write_dist(plan, dist)
    # WHEN apply.sh's steps run against the API server (every object applied for real)
    run = run_apply_script(apiserver, dist, plan)
    try:
        for note in run.notes:
            _log(f"{stem}: {note}")
        assert not run.refused, f"{stem}: the API server refused:\n" + "\n".join(run.refused)
        rendered = [o for _, o in _objects_in(dist)] + (
            [o for _, o in _objects_in(dist / "after-crds")] if (dist / "after-crds").is_dir() else []
        )
        # THEN every rendered object is stored, as rendered
        if stem == PYTORCHJOB_VARIANT:
            assert {"PyTorchJob", "ValidatingWebhookConfiguration"} <= {o["kind"] for o in rendered}
        assert sorted(_key(o) for src, o in run.applied if not src.startswith("helm ")) == sorted(map(_key, rendered))
        for source, obj in run.applied:
            stored = apiserver.get(obj)
            assert stored.status == 200, f"{_key(obj)}: {stored.message()}"
            managers = {m["manager"] for m in stored.body["metadata"].get("managedFields", [])}
            # (helm's bare Namespace has no field to own: no managedFields entry)
            assert FIELD_MANAGER in managers or source.startswith("helm "), f"{_key(obj)}: managers {managers}"
        # AND every pod a controller would create from their templates passes validation and admission
        accepted, refused, warnings = check_derived_pods(apiserver, rendered)
        assert not run.warnings + warnings, f"{stem}: the API server warned:\n" + "\n".join(run.warnings + warnings)
        assert not refused, f"{stem}: the API server refused pods made from rendered templates:\n" + "\n".join(refused)
        assert accepted >= 2, f"{stem}: only {accepted} pods derived (device plugin DaemonSet, operator Deployment)"
        _log(f"{stem}: {len(run.applied)} objects applied, {accepted} derived pods admitted (dry run)")
    finally:
        _clean_up(apiserver, run)


def test_a_queued_pytorchjob_keeps_its_podset_group_through_the_server(apiserver, tmp_path):
    # GIVEN the PyTorchJob variant queued by Kueue (topology on p5): Master and Worker in one PodSet group
    from efa_stack import contract
    from efa_stack.planning.plan import build_plan
    from efa_stack.spec.loader import parse_spec
    from k8s.dist import dist_dir, write_dist

    plan = build_plan(parse_spec(_variant_text() + "scheduling:\n  kueue:\n    enabled: true\n"))
    dist = dist_dir(plan, tmp_path)
    write_dist(plan, dist)
    # WHEN apply.sh's steps run against the API server (no Kueue webhook answers here: the CRD schema alone)
    run = run_apply_script(apiserver, dist, plan)
    try:
        assert not run.refused, "\n".join(run.refused)
        (job,) = [o for _, o in run.applied if o["kind"] == "PyTorchJob"]
        stored = apiserver.get(job)
        assert stored.status == 200, stored.message()
        # THEN the stored job's two pod templates keep the group and the same topology annotation (not pruned)
        replicas = stored.body["spec"]["pytorchReplicaSpecs"]
        assert set(replicas) == {"Master", "Worker"}
        groups = {r["template"]["metadata"]["annotations"].get(contract.KUEUE_PODSET_GROUP) for r in replicas.values()}
        topologies = {r["template"]["metadata"]["annotations"].get(contract.KUEUE_PREFERRED_TOPOLOGY)
                      for r in replicas.values()}
        assert len(groups) == 1 and None not in groups, groups
        assert len(topologies) == 1 and None not in topologies, topologies
        # AND the pods made from them, annotations included, are admitted
        accepted, refused, _ = check_derived_pods(apiserver, [job])
        assert not refused and accepted == 2, refused
    finally:
        _clean_up(apiserver, run)


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def test_a_refused_rendered_object_fails_the_run(apiserver, tmp_path):
    # GIVEN dist/ of the default spec with one fault in the EFA device plugin's DaemonSet's pod template (a
    # DNS policy Kubernetes does not have); then one its pods would have (a fractional EFA device count)
    from k8s.dist import dist_dir, write_dist

    plan = _plan("default")
    dist = dist_dir(plan, tmp_path)
    write_dist(plan, dist)
    (plugin,) = dist.glob("1*-efa-device-plugin.yaml")
    docs = [o for o in yaml.safe_load_all(plugin.read_text()) if o]
    docs[0]["spec"]["template"]["spec"]["dnsPolicy"] = "Sometimes"
    plugin.write_text(yaml.safe_dump_all(docs))
    # WHEN apply.sh's steps run THEN the run names the file, the object and the server's reason
    run = run_apply_script(apiserver, dist, plan)
    try:
        assert len(run.refused) == 1, run.refused
        assert plugin.name in run.refused[0] and "HTTP 422" in run.refused[0] and "dnsPolicy" in run.refused[0]
    finally:
        _clean_up(apiserver, run)
    # AND a pod template whose pods the server refuses is found by the pods derived from it
    docs[0]["spec"]["template"]["spec"].pop("dnsPolicy")
    container = docs[0]["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"vpc.amazonaws.com/efa": "500m"}}
    accepted, refused, _ = check_derived_pods(apiserver, docs)
    assert accepted == 0 and len(refused) == 1 and "must be an integer" in refused[0], refused


# --- the server checks: objects it must refuse ---------------------------------------------------------


def _gpu_pod(name: str, resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": resources}]},
    }


BROKEN_PODS = {
    "resource name a..b/c": {"limits": {"a..b/c": "1"}},
    "resource name part over 63 characters": {"limits": {f"example.com/{'x' * 64}": "1"}},
    "extended resource with the requests. prefix": {"limits": {"requests.nvidia.com/gpu": "1"}},
    "extended resource request differs from its limit": {
        "requests": {"vpc.amazonaws.com/efa": "2"}, "limits": {"vpc.amazonaws.com/efa": "4"},
    },
    "fractional extended resource": {"limits": {"nvidia.com/gpu": "500m"}},
    "hugepages without cpu or memory": {"limits": {"hugepages-2Mi": "1Gi"}},
}


@pytest.mark.parametrize("case", sorted(BROKEN_PODS))
def test_the_server_refuses_invalid_pod_resources(apiserver, case):
    _ensure_default_service_account(apiserver, "default")
    got = apiserver.dry_run_create(_gpu_pod("broken", BROKEN_PODS[case]))
    assert got.status == 422, f"{case}: {got.message()}"
    _log(f"refused as expected ({case}): {got.message()}")


def test_the_server_accepts_the_valid_counterpart(apiserver):
    # the same pod with well-formed resources (what efa-stack renders) is accepted: the refusals above are
    # about the resources, nothing else
    _ensure_default_service_account(apiserver, "default")
    resources = {
        "requests": {"cpu": "190", "memory": "40192Mi", "hugepages-2Mi": "5120Mi",
                     "nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"},
        "limits": {"cpu": "190", "memory": "40192Mi", "hugepages-2Mi": "5120Mi",
                   "nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"},
    }
    got = apiserver.dry_run_create(_gpu_pod("valid", resources))
    assert got.status == 201, got.message()


def _mpijob(name: str) -> dict[str, Any]:
    """A small valid MPIJob (v2beta1, as efa-stack renders them)."""
    def replica() -> dict[str, Any]:
        return {"replicas": 1, "restartPolicy": "Never",
                "template": {"spec": {"containers": [{"name": "mpi", "image": "busybox"}]}}}

    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name, "namespace": "default"},
            "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {"Launcher": replica(), "Worker": replica()}}}


@pytest.fixture(scope="session")
def mpijob_crd(apiserver) -> None:
    """The MPIJob CRD efa-stack renders (k8s/crds/mpijob.yaml), established."""
    crd_file = ROOT / "k8s" / "crds" / "mpijob.yaml"
    (crd,) = [o for o in yaml.safe_load_all(crd_file.read_text()) if o and o.get("kind") == "CustomResourceDefinition"]
    got = apiserver.apply(crd)
    assert got.status in (200, 201), got.message()
    assert _wait_established(apiserver, crd["metadata"]["name"]) is None


BROKEN_MPIJOBS: dict[str, tuple[int, Callable[[dict[str, Any]], Any]]] = {
    "slotsPerWorker is a string": (422, lambda spec: spec.update(slotsPerWorker="many")),
    "Worker replicas is a string": (422, lambda spec: spec["mpiReplicaSpecs"]["Worker"].update(replicas="two")),
    "no Launcher replica": (422, lambda spec: spec["mpiReplicaSpecs"].pop("Launcher")),
    "restartPolicy Always (the operator takes OnFailure or Never)":
        (422, lambda spec: spec["mpiReplicaSpecs"]["Worker"].update(restartPolicy="Always")),
    "cleanPodPolicy outside its enum": (422, lambda spec: spec.update(runPolicy={"cleanPodPolicy": "Sometimes"})),
    # strict field validation refuses an unknown field while decoding: 400, "strict decoding error"
    "a replica type the CRD does not know": (
        400, lambda spec: spec["mpiReplicaSpecs"].update(Boss=copy.deepcopy(spec["mpiReplicaSpecs"]["Worker"]))
    ),
}
"""How to break the valid :func:`_mpijob` against the MPIJob CRD's schema (k8s/crds/mpijob.yaml): the status the server
answers and the change."""


@pytest.mark.parametrize("case", sorted(BROKEN_MPIJOBS))
def test_the_server_refuses_an_mpijob_that_breaks_its_crd_schema(apiserver, mpijob_crd, case):
    status, fault = BROKEN_MPIJOBS[case]
    job = _mpijob("broken")
    fault(job["spec"])
    got = apiserver.dry_run_create(job)
    assert got.status == status, f"{case}: {got.message()}"
    causes = got.body.get("details", {}).get("causes", [])
    assert len(causes) <= 1, f"{case}: refused for more than the one fault: {got.message()}"
    _log(f"refused as expected ({case}): {got.message()}")


def test_the_server_accepts_a_valid_mpijob(apiserver, mpijob_crd):
    got = apiserver.apply(_mpijob("valid"))
    assert got.status in (200, 201), got.message()
    assert apiserver.delete(_mpijob("valid")).status in (200, 202)


@pytest.fixture(scope="session")
def kueue_crds(apiserver) -> None:
    """The Topology and ClusterQueue CRDs efa-stack renders (k8s/crds/kueue/crds.yaml), established."""
    from k8s.kueue import crd_documents

    for crd in crd_documents():
        if crd["spec"]["names"]["kind"] in ("Topology", "ClusterQueue"):
            got = apiserver.apply(crd)
            assert got.status in (200, 201), got.message()
            assert _wait_established(apiserver, crd["metadata"]["name"]) is None


def _rendered(spec: str, kinds: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The objects of ``kinds`` that the charts of clusters/``spec`` render, by kind (the last of each kind)."""
    import cdk8s

    from efa_stack.planning.plan import plan_from_file
    from k8s.charts import build_charts

    plan = plan_from_file(CLUSTERS / spec)
    objects = [o for c in build_charts(plan, cdk8s.App()) for o in c.to_json()]
    return {o["kind"]: json.loads(json.dumps(o)) for o in objects if o["kind"] in kinds}


def _kueue_objects() -> dict[str, dict[str, Any]]:
    """The Topology and ClusterQueue of clusters/tas-p5.yaml, as rendered."""
    return _rendered("tas-p5.yaml", ("Topology", "ClusterQueue"))


BROKEN_KUEUE_OBJECTS: dict[str, tuple[str, Callable[[dict[str, Any]], Any], str]] = {
    "Topology with kubernetes.io/hostname above the lowest level": (
        "Topology", lambda o: o["spec"]["levels"].reverse(), "lowest level of topology"),
    "Topology with a level twice": (
        "Topology", lambda o: o["spec"]["levels"].insert(0, dict(o["spec"]["levels"][0])), "must be unique"),
    "ClusterQueue flavor without a covered resource": (
        "ClusterQueue", lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop(),
        "same number of resources as the coveredResources"),
}
"""Kueue objects that break a CEL rule of the vendored v0.19.2 CRDs: kind, fault, the rule's message."""


@pytest.fixture(scope="session")
def karpenter_crds(apiserver) -> None:
    """The Karpenter v1.15.1 CRDs efa-stack vendors (k8s/crds/karpenter/), established."""
    from k8s.karpenter import crd_documents

    for crd in crd_documents():
        got = apiserver.apply(crd)
        assert got.status in (200, 201), got.message()
        assert _wait_established(apiserver, crd["metadata"]["name"]) is None


def _karpenter_objects() -> dict[str, dict[str, Any]]:
    """The EC2NodeClass and NodePool of clusters/karpenter-capacity-block.yaml (a static pool), as rendered."""
    return _rendered("karpenter-capacity-block.yaml", ("EC2NodeClass", "NodePool"))


BROKEN_KARPENTER_OBJECTS: dict[str, tuple[str, Callable[[dict[str, Any]], Any], str]] = {
    "EC2NodeClass without its primary ENA interface": (
        "EC2NodeClass", lambda o: o["spec"]["networkInterfaces"].pop(0), "must include a primary interface"),
    "EC2NodeClass with two efa-only interfaces on one card": (
        "EC2NodeClass", lambda o: o["spec"]["networkInterfaces"].append(
            {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}),
        "at most one efa device per network card"),
    "static NodePool with a cpu limit": (
        "NodePool", lambda o: o["spec"]["limits"].update(cpu="1000"), "only 'limits.nodes' is supported"),
    "NodePool labelling nodes karpenter.sh/nodepool": (
        "NodePool", lambda o: o["spec"]["template"]["metadata"]["labels"].update({"karpenter.sh/nodepool": "x"}),
        "is restricted"),
}
"""Karpenter objects that break a CEL rule of the vendored v1.15.1 CRDs: kind, fault, the rule's message."""


# CRD-defined kinds whose objects the server checks against the vendored CRDs' CEL rules: the fixture that
# installs the CRDs, the rendered objects, and the broken variants.
VENDORED_KINDS = {
    "kueue": ("kueue_crds", _kueue_objects, BROKEN_KUEUE_OBJECTS),
    "karpenter": ("karpenter_crds", _karpenter_objects, BROKEN_KARPENTER_OBJECTS),
}


@pytest.mark.parametrize(("project", "case"), [(p, c) for p, (_, _, broken) in VENDORED_KINDS.items() for c in sorted(broken)])
def test_the_server_refuses_an_object_that_breaks_its_crd_rules(apiserver, request, project, case):
    fixture, objects, broken = VENDORED_KINDS[project]
    request.getfixturevalue(fixture)
    kind, fault, message = broken[case]
    obj = objects()[kind]
    fault(obj)
    got = apiserver.dry_run_create(obj)
    assert got.status == 422 and message in got.message(), f"{case}: {got.message()}"
    _log(f"refused as expected ({case}): {got.message()}")


@pytest.mark.parametrize("project", sorted(VENDORED_KINDS))
def test_the_server_accepts_the_rendered_objects_of_vendored_crds(apiserver, request, project):
    fixture, objects, _ = VENDORED_KINDS[project]
    request.getfixturevalue(fixture)
    for kind, obj in objects().items():
        got = apiserver.dry_run_create(obj)
        assert got.status == 201, f"{kind}: {got.message()}"


def test_build_sh_is_shellcheck_clean():
    shellcheck = shutil.which("shellcheck") or str(ROOT / ".venv" / "bin" / "shellcheck")
    proc = subprocess.run([shellcheck, str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_build_sh_builds_once(apiserver):
    # the fixture ran build.sh: a second run builds nothing and names the same version-keyed folder
    proc = subprocess.run([str(BUILD_SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT,
                          check=True)
    folder = Path(proc.stdout.strip().splitlines()[-1])
    assert folder.parent == ROOT / ".cache" or "KUBE_APISERVER_CACHE" in os.environ, folder
    assert "already built" in proc.stderr, proc.stderr
    assert shutil.which("kube-apiserver", path=str(folder)) and shutil.which("etcd", path=str(folder))


@pytest.fixture(scope="session")
def eniconfig_crd(apiserver) -> None:
    """The ENIConfig CRD of the pinned VPC CNI build (tests/fixtures/upstream/crd.k8s.amazonaws.com_eniconfigs.yaml),
    established."""
    from efa_stack import contract

    crd_file = ROOT / "tests" / "fixtures" / "upstream" / "crd.k8s.amazonaws.com_eniconfigs.yaml"
    (crd,) = [o for o in yaml.safe_load_all(crd_file.read_text())
              if o and o.get("kind") == "CustomResourceDefinition" and o["metadata"]["name"] == contract.ENICONFIG_CRD_NAME]
    got = apiserver.apply(crd)
    assert got.status in (200, 201), got.message()
    assert _wait_established(apiserver, crd["metadata"]["name"]) is None


def test_the_server_accepts_the_eniconfigs_of_custom_networking(apiserver, eniconfig_crd):
    # GIVEN the ENIConfigs the cluster stack applies (ids as EC2 writes them), THEN the server takes each, and refuses
    # one without the subnet its CRD requires
    import cdk8s

    from k8s.eniconfig import EniConfigChart, EniConfigProps

    chart = EniConfigChart(cdk8s.App(), "EniConfigs", EniConfigProps(
        subnets={"us-west-2a": "subnet-0123456789abcdef0", "us-west-2b": "subnet-0123456789abcdef1"},
        security_groups=["sg-0123456789abcdef0"],
    ))
    objects = json.loads(json.dumps(chart.to_json()))
    assert [o["metadata"]["name"] for o in objects] == ["us-west-2a", "us-west-2b"]
    for obj in objects:
        got = apiserver.apply(obj)
        assert got.status in (200, 201), got.message()
    broken = copy.deepcopy(objects[0])
    broken["metadata"]["name"] = "broken"
    del broken["spec"]["subnet"]
    assert apiserver.dry_run_create(broken).status == 422


def test_the_server_accepts_a_custom_networking_pools_node_class(apiserver, karpenter_crds):
    # GIVEN a p5en pool under VPC CNI custom networking (vpc.podCIDR) WHEN its EC2NodeClass is rendered, THEN it carries
    # the plan's kubelet.maxPods beside the CPU and topology manager settings, and the server takes it against the
    # vendored v1.15.1 CRD, whose kubelet schema is an open object (x-kubernetes-preserve-unknown-fields): the
    # controller, not the server, checks the fields against the kubelet's type (pkg/apis/v1/
    # kubeletconfiguration_validation.go ValidateKubeletConfig), so the server keeps every field as written
    from tests.support import _build, plan_of
    from tests.test_custom_networking import pool_spec

    plan = plan_of(pool_spec("p5en.48xlarge"))
    node_class = json.loads(json.dumps(_build(plan).find("EC2NodeClass", "pool0")))
    assert node_class["spec"]["kubelet"] == {"cpuManagerPolicy": "static", "topologyManagerPolicy": "restricted",
                                             "topologyManagerScope": "pod", "maxPods": plan.addresses.max_pods("pool0")}
    got = apiserver.dry_run_create(node_class)
    assert got.status == 201, got.message()
    assert got.body["spec"]["kubelet"] == node_class["spec"]["kubelet"]


# --- the DRA device layer's resource.k8s.io/v1 objects --------------------------------------------------------------


def test_dra_device_classes_and_the_claim_limit_on_the_server(apiserver):
    # GIVEN the DeviceClasses the pinned DRA charts create, as k8s/dra.py renders them for the rehearsal
    from efa_stack import contract
    from efa_stack.planning.dra import MAX_DEVICES_PER_CLAIM
    from k8s.dra import device_classes

    classes = device_classes(["gpu", "efa", "neuron"])
    try:
        # WHEN they are applied THEN the server stores their selectors as rendered
        for dc in classes:
            got = apiserver.apply(dc)
            assert got.status in (200, 201), got.message()
            assert apiserver.get(dc).body["spec"]["selectors"] == dc["spec"]["selectors"]
        # AND drops the NVIDIA chart's extendedResourceName: the DRAExtendedResource gate is off on 1.35, so the
        # field of the extended-resource bridge is dropped, not refused (why efa-stack builds no bridge:
        # docs/design/dra.md)
        gpu = next(dc for dc in classes if dc["metadata"]["name"] == contract.GPU_DEVICE_CLASS)
        assert gpu["spec"]["extendedResourceName"] == contract.GPU_RESOURCE
        assert "extendedResourceName" not in apiserver.get(gpu).body["spec"]
        # AND a claim's allocation holds at most 32 devices (why efa-stack claims a whole node by device kind)
        _ensure_default_service_account(apiserver, "default")
        claim = {"apiVersion": contract.RESOURCE_API_VERSION, "kind": "ResourceClaim",
                 "metadata": {"name": "forty-devices", "namespace": "default"},
                 "spec": {"devices": {"requests": [{"name": "efa", "exactly": {
                     "deviceClassName": contract.EFA_DEVICE_CLASS, "allocationMode": "ExactCount", "count": 40}}]}}}
        got = apiserver.create(claim)
        assert got.status == 201, got.message()
        results = [{"request": "efa", "driver": contract.EFA_DRA_DRIVER, "pool": "n", "device": f"pci-{i}"}
                   for i in range(MAX_DEVICES_PER_CLAIM + 1)]
        got = apiserver.merge_patch(claim, {"status": {"allocation": {"devices": {"results": results}}}},
                                    subresource="status")
        assert got.status == 422 and "status.allocation.devices.results" in got.message(), got.message()
        got = apiserver.merge_patch(claim, {"status": {"allocation": {"devices": {
            "results": results[:MAX_DEVICES_PER_CLAIM]}}}}, subresource="status")
        assert got.status == 200, got.message()
        apiserver.delete(claim)
    finally:
        for dc in classes:
            apiserver.delete(dc)
