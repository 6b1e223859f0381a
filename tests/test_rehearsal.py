"""Shipped specs rehearsed on a local control plane (efa_stack/rehearsal/): the real kube-scheduler and
kube-controller-manager, the MPI operator, Kueue and the Kubeflow controllers at their pinned versions, under the RBAC
efa-stack renders, with kwok nodes made from the plan. Each spec's rollout (k8s/rollout.py, the step graph ``cdk deploy``
and ``apply.sh`` translate) is performed in ``apply.sh``'s order, then its jobs are started by their own
``efa-stack.io/start`` command and followed until their pods run.

The binaries are built on first use by tools/build.sh (tens of CPU-minutes once; docs/development.md), so nothing here
is skipped. Every test of one spec shares one rehearsal (a module-scoped fixture per spec).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from efa_stack import contract
from efa_stack.planning.plan import plan_from_file
from efa_stack.planning.scheduling import layer_label, network_layers
from efa_stack.rehearsal.client import poll
from efa_stack.rehearsal.nodes import NodeOptions
from efa_stack.rehearsal.rehearsal import Rehearsal, deployment_available, rehearse
from tests.support import CLUSTERS

pytestmark = [pytest.mark.rehearsal, pytest.mark.xdist_group("rehearsal")]

JOB_TIMEOUT = 180
"""Seconds for a started job's pods to run (on a loaded 2-core machine a few suffice)."""


def _log(message: str) -> None:
    print(f"[rehearsal] {message}", flush=True)


@pytest.fixture(scope="module", params=["default", "tas-p5"])
def rehearsed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    plan = plan_from_file(CLUSTERS / f"{request.param}.yaml")
    started = time.monotonic()
    with rehearse(plan, tmp_path_factory.mktemp(f"rehearsal-{request.param}"), nodes=NodeOptions()) as r:
        _log(f"{request.param}: rolled out in {time.monotonic() - started:.1f}s; "
             + ", ".join(f"{k} {v:.1f}s" for k, v in r.timings.items()))
        slow = [f"{step} {s:.1f}s" for step, s in (r.performed.seconds if r.performed else []) if s >= 1]
        _log(f"{request.param}: steps of a second or more: {', '.join(slow) or 'none'}")
        for chart, refusals in (r.performed.refusals if r.performed else {}).items():
            _log(f"{request.param}: chart {chart} was refused {len(refusals)} times before it was admitted; "
                 f"first: {refusals[0]}")
        yield r
        peak = r.plane.peak_memory_mib()
        _log(f"{request.param}: peak memory {sum(peak.values())} MiB ("
             + ", ".join(f"{k} {v}" for k, v in peak.items()) + ")")


def _running(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    ready = {c["type"]: c["status"] for c in status.get("conditions") or []}.get("Ready")
    return status.get("phase") == "Running" and ready == "True"


def _nodes_of(r: Rehearsal, group_filter: Any) -> set[str]:
    names = {g.name for g in r.plan.all_node_groups if group_filter(g)}
    return {n["metadata"]["name"] for n in r.nodes if n["metadata"]["labels"][contract.LABEL_NODE_GROUP] in names}


SERVED_GROUPS = {
    contract.EFA_DEVICE_PLUGIN_NAME: lambda g: g.efa_enabled,
    contract.NVIDIA_DEVICE_PLUGIN_NAME: lambda g: g.role == "gpu",
    contract.NEURON_DEVICE_PLUGIN_NAME: lambda g: g.role == "neuron",
}
"""DaemonSet -> the node groups whose every node it must run on (the plan's own facts: EFA, GPU, Neuron groups)."""


def test_every_rendered_controller_is_available_and_serves(rehearsed):
    # GIVEN the rolled-out spec WHEN its Deployments' pods run on the system nodes (kwok)
    deployments = [o for o in rehearsed.objects if o["kind"] == "Deployment"]
    assert deployments
    for d in deployments:
        namespace, name = d["metadata"]["namespace"], d["metadata"]["name"]
        # THEN each is available, on a system node, and the controller it stands for runs locally under its account
        poll(f"Deployment {namespace}/{name} available", lambda n=namespace, m=name: True if deployment_available(
            rehearsed.api, n, m) else None, JOB_TIMEOUT)
        selector = ",".join(f"{k}={v}" for k, v in d["spec"]["selector"]["matchLabels"].items())
        pods = rehearsed.pods(namespace, selector)
        assert pods and all(_running(p) for p in pods), [p["status"] for p in pods]
        roles = {rehearsed.node(p["spec"]["nodeName"])["metadata"]["labels"][contract.LABEL_ROLE] for p in pods}
        assert roles == {"system"}, roles
        running = [c for c in rehearsed.controllers.running.values() if c.controller.deployment == name]
        assert running and running[0].process.running(), f"no local controller for {namespace}/{name}"
    rehearsed.plane.check_running()


def test_every_daemonset_runs_on_every_node_it_must_serve(rehearsed):
    # GIVEN the device plugin DaemonSets of the spec and the plan's nodes (GPU nodes tainted nvidia.com/gpu)
    daemonsets = [o for o in rehearsed.objects if o["kind"] == "DaemonSet"]
    assert daemonsets
    for ds in daemonsets:
        name, namespace = ds["metadata"]["name"], ds["metadata"]["namespace"]
        assert name in SERVED_GROUPS, f"DaemonSet {name}: say here which node groups it must serve"
        want = _nodes_of(rehearsed, SERVED_GROUPS[name])
        selector = ",".join(f"{k}={v}" for k, v in ds["spec"]["selector"]["matchLabels"].items())

        def placed(n: str = namespace, s: str = selector, w: set[str] = want) -> set[str] | None:
            pods = [p for p in rehearsed.pods(n, s) if _running(p)]
            got = {p["spec"]["nodeName"] for p in pods}
            return got if got == w and len(pods) == len(w) else None

        # THEN one running pod on each node of the groups it serves, and on no other node
        assert poll(f"DaemonSet {namespace}/{name} on {sorted(want)}", placed, JOB_TIMEOUT) == want


def _mpijob(r: Rehearsal) -> dict[str, Any]:
    (job,) = [o for o in r.objects if o["kind"] == contract.MPIJOB_KIND]
    return job


def _job_pods(r: Rehearsal, job: dict[str, Any], role: str) -> list[dict[str, Any]]:
    selector = f"{contract.JOB_NAME_LABEL}={job['metadata']['name']},{contract.JOB_ROLE_LABEL}={role}"
    return r.pods(job["metadata"]["namespace"], selector)


def _start_and_run(r: Rehearsal, job: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Start ``job`` with its start command; (launcher pod, worker pods) once all of them run."""
    command = r.start(job)
    started = time.monotonic()
    _log(f"started: {command}")
    workers_wanted = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]

    def all_running() -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        launchers = [p for p in _job_pods(r, job, "launcher") if _running(p)]
        workers = [p for p in _job_pods(r, job, "worker") if _running(p)]
        return (launchers[0], workers) if len(launchers) == 1 and len(workers) == workers_wanted else None

    running = poll(f"MPIJob {job['metadata']['name']}: launcher and {workers_wanted} workers running", all_running,
                   JOB_TIMEOUT)
    _log(f"{job['metadata']['name']}: launcher and workers running {time.monotonic() - started:.1f}s after the start")
    return running


@pytest.fixture(scope="module")
def nccl_started(rehearsed) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return _start_and_run(rehearsed, _mpijob(rehearsed))


def test_the_nccl_job_started_as_documented_runs_one_worker_per_node(rehearsed, nccl_started):
    # GIVEN the suspended NCCL-tests MPIJob WHEN it is started by its efa-stack.io/start command
    launcher, workers = nccl_started
    job = _mpijob(rehearsed)
    group = rehearsed.plan.node_group(job["metadata"]["labels"][contract.LABEL_NODE_GROUP])
    # THEN the launcher runs on a system node and every worker on its own node of the job's node group
    assert rehearsed.node(launcher["spec"]["nodeName"])["metadata"]["labels"][contract.LABEL_ROLE] == "system"
    nodes = [w["spec"]["nodeName"] for w in workers]
    assert len(set(nodes)) == len(nodes) == job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert set(nodes) <= _nodes_of(rehearsed, lambda g: g.name == group.name)


def _workload(r: Rehearsal, job: dict[str, Any]) -> dict[str, Any]:
    """The Kueue Workload that owns ``job``'s admission."""
    live = r.api.get(job).body
    owned = [w for w in r.api.list(contract.KUEUE_API_VERSION, "Workload", job["metadata"]["namespace"])
             if any(o.get("uid") == live["metadata"]["uid"] for o in w["metadata"].get("ownerReferences", []))]
    assert len(owned) == 1, [w["metadata"]["name"] for w in owned]
    return owned[0]


def test_the_nccl_job_is_admitted_as_the_plan_means(rehearsed, nccl_started):
    # GIVEN the started NCCL job of a spec, with Kueue topology-aware scheduling or without Kueue
    _, workers = nccl_started
    job = _mpijob(rehearsed)
    live = rehearsed.api.get(job).body
    kueue = rehearsed.plan.kueue
    if kueue is None:
        # THEN without Kueue nothing queues it: it runs resumed, with no queue label
        assert contract.KUEUE_QUEUE_LABEL not in live["metadata"].get("labels", {})
        assert live["spec"]["runPolicy"]["suspend"] is False
        return
    # THEN the real Kueue admitted it (Admitted), the workers with their node group's flavor
    workload = _workload(rehearsed, job)
    conditions = {c["type"]: c["status"] for c in workload["status"]["conditions"]}
    assert conditions.get("Admitted") == "True", workload["status"]
    flavors = {a["name"]: a["flavors"] for a in workload["status"]["admission"]["podSetAssignments"]}
    group = rehearsed.plan.node_group(job["metadata"]["labels"][contract.LABEL_NODE_GROUP])
    flavor = kueue.flavor(group.name)
    assert flavor is not None and set(flavors["worker"].values()) == {flavor.name}, flavors
    # AND every worker is in one domain of the lowest network layer
    bottom = layer_label(network_layers(group.instance_type))
    domains = {rehearsed.node(w["spec"]["nodeName"])["metadata"]["labels"][bottom] for w in workers}
    assert len(domains) == 1, domains
