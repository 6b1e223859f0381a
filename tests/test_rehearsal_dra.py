"""clusters/dra-p5.yaml rehearsed: the DRA drivers stood in for by the ResourceSlices they would publish
(efa_stack/rehearsal/resource_slices.py), the real kube-scheduler allocating every claim efa-stack renders, the real
kube-controller-manager making each pod's claims from its templates, the MPI operator, Kubeflow Trainer and JobSet
running the jobs.

The rehearsal's release handler and node maker do not know the DRA drivers yet (they come with ``efa-stack
rehearse``): :func:`dra_drivers_stood_in` wires the stand-ins in for this module, as the rehearsal itself is to do.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from efa_stack import contract
from efa_stack.planning.dra import devices_per_node
from efa_stack.planning.plan import plan_from_file
from efa_stack.rehearsal import rehearsal as rehearsal_module
from efa_stack.rehearsal import resource_slices
from efa_stack.rehearsal.client import ApiError, poll
from efa_stack.rehearsal.nodes import NodeOptions
from efa_stack.rehearsal.rehearsal import Rehearsal, rehearse
from efa_stack.tools.verify import slice_devices
from k8s.rollout import InstallRelease
from tests.support import CLUSTERS

pytestmark = [pytest.mark.rehearsal, pytest.mark.xdist_group("rehearsal")]

JOB_TIMEOUT = 180
"""Seconds for a started job's pods to run, or to go (on a loaded 2-core machine a few suffice)."""


def _log(message: str) -> None:
    print(f"[rehearsal dra] {message}", flush=True)


@contextlib.contextmanager
def dra_drivers_stood_in() -> Iterator[None]:
    """The rehearsal with the DRA drivers stood in for: a ``devices: dra`` node advertises no device plugin resource,
    and installing a driver's release applies its DeviceClass and the ResourceSlices it would publish."""
    make_nodes, install = rehearsal_module.plan_nodes, Rehearsal.install

    def plan_nodes(plan: Any, options: NodeOptions | None = None) -> list[dict[str, Any]]:
        return [resource_slices.without_plugin_resources(n) for n in make_nodes(plan, options)]

    def install_driver(self: Rehearsal, step: InstallRelease) -> None:
        if step.component not in resource_slices.RELEASE_KINDS:
            return install(self, step)
        assert step.release is not None
        kind = resource_slices.release_kind(step.component, step.release)
        assert kind is not None, step.id
        for obj in [*resource_slices.stand_in_objects(kind),
                    *resource_slices.published_slices(self.plan, step.component, step.release, self.nodes)]:
            got = self.api.apply(obj)
            if not got.ok:
                raise ApiError(f"{step.id}: {obj['kind']} {obj['metadata']['name']}: {got.message()}")
        return None

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rehearsal_module, "plan_nodes", plan_nodes)
        patch.setattr(Rehearsal, "install", install_driver)
        yield


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    plan = plan_from_file(CLUSTERS / "dra-p5.yaml")
    started = time.monotonic()
    with dra_drivers_stood_in(), rehearse(plan, tmp_path_factory.mktemp("rehearsal-dra-p5"), nodes=NodeOptions()) as r:
        _log(f"dra-p5: rolled out in {time.monotonic() - started:.1f}s; "
             + ", ".join(f"{k} {v:.1f}s" for k, v in r.timings.items()))
        yield r


def _running(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    ready = {c["type"]: c["status"] for c in status.get("conditions") or []}.get("Ready")
    return status.get("phase") == "Running" and ready == "True"


def _slices(r: Rehearsal) -> list[dict[str, Any]]:
    return r.api.list(contract.RESOURCE_API_VERSION, contract.RESOURCE_SLICE_KIND)


def _device_attributes(r: Rehearsal) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(driver, pool, device) -> the device's attributes, over every published slice."""
    return {(s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): d.get("attributes") or {}
            for s in _slices(r) for d in s["spec"]["devices"]}


def _claims_of(r: Rehearsal, pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod's ResourceClaims (made from its templates by kube-controller-manager), by the pod's claim name."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    namespace = pod["metadata"]["namespace"]
    return {s["name"]: r.api.get({"apiVersion": contract.RESOURCE_API_VERSION, "kind": "ResourceClaim",
                                  "metadata": {"name": s["resourceClaimName"], "namespace": namespace}}).body
            for s in statuses}


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []


def _allocated_devices(r: Rehearsal) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of every allocation of every ResourceClaim of the cluster."""
    return [(x["driver"], x["pool"], x["device"]) for c in r.api.list(contract.RESOURCE_API_VERSION, "ResourceClaim")
            for x in _results(c)]


def _pods(r: Rehearsal, obj: dict[str, Any], selector: str) -> list[dict[str, Any]]:
    return r.pods(obj["metadata"]["namespace"], selector)


def _job(r: Rehearsal, kind: str) -> dict[str, Any]:
    (job,) = [o for o in r.objects if o["kind"] == kind]
    return job


MPI_WORKERS = f"{contract.JOB_ROLE_LABEL}=worker"


def test_every_dra_node_publishes_the_catalogs_devices_and_no_plugin_resource(rehearsed):
    # GIVEN the p5 group's nodes, made from the plan, and the drivers' slices the rollout published
    slices = _slices(rehearsed)
    group = rehearsed.plan.node_group("p5")
    nodes = [n for n in rehearsed.nodes if n["metadata"]["labels"][contract.LABEL_NODE_GROUP] == "p5"]
    assert len(nodes) == group.desired_size == 2
    for node in nodes:
        name = node["metadata"]["name"]
        # THEN each publishes the catalog's GPUs and EFA devices, counted as efa-stack verify counts them
        assert slice_devices(slices, name) == {"gpu": devices_per_node(group, "gpu"),
                                               "efa": devices_per_node(group, "efa"), "neuron": 0}
        # AND advertises no device plugin resource, and no device plugin DaemonSet was rendered
        allocatable = rehearsed.api.get(node).body["status"]["allocatable"]
        assert not {contract.GPU_RESOURCE, contract.EFA_RESOURCE} & set(allocatable), allocatable
    assert not [o for o in rehearsed.objects if o["kind"] == "DaemonSet"]
    # AND the system nodes publish nothing (no driver runs there)
    assert {s["spec"]["nodeName"] for s in slices} == {n["metadata"]["name"] for n in nodes}


def test_the_sub_node_pair_gets_one_gpu_with_its_roots_efa_devices_on_each_node(rehearsed):
    # GIVEN the suspended NCCL pair of 1-GPU workers WHEN it is started by its efa-stack.io/start command
    job = _job(rehearsed, contract.MPIJOB_KIND)
    rehearsed.start(job)
    selector = f"{contract.JOB_NAME_LABEL}={job['metadata']['name']},{MPI_WORKERS}"
    workers = poll("both NCCL workers running", lambda: (w if len(w := [p for p in _pods(rehearsed, job, selector)
                                                                          if _running(p)]) == 2 else None), JOB_TIMEOUT)
    attributes = _device_attributes(rehearsed)
    # (in the published order the first GPU and the first EFA devices are on different roots: first-fit alone would
    # pair them across roots)
    slices = {s["spec"]["driver"]: s["spec"]["devices"] for s in _slices(rehearsed) if s["spec"]["nodeName"] == "p5-0"}
    first = {driver: devices[0]["attributes"][contract.PCIE_ROOT_ATTRIBUTE]["string"] for driver, devices in slices.items()}
    assert first[contract.GPU_DRA_DRIVER] != first[contract.EFA_DRA_DRIVER], first
    # THEN each worker runs on its own node, its claim allocated there by the scheduler: one GPU and the 4 EFA devices
    # on that GPU's PCIe root
    assert len({w["spec"]["nodeName"] for w in workers}) == 2
    for worker in workers:
        claims = _claims_of(rehearsed, worker)
        assert set(claims) == {"aligned"}, claims
        results = _results(claims["aligned"])
        by_request: dict[str, list[dict[str, Any]]] = {}
        for x in results:
            by_request.setdefault(x["request"], []).append(x)
        assert {k: len(v) for k, v in by_request.items()} == {"gpu-0": 1, "efa-0": 4}, by_request
        assert {x["pool"] for x in results} == {worker["spec"]["nodeName"]}
        roots = {attributes[(x["driver"], x["pool"], x["device"])][contract.PCIE_ROOT_ATTRIBUTE]["string"]
                 for x in results}
        assert len(roots) == 1, roots
    devices = _allocated_devices(rehearsed)
    assert len(devices) == len(set(devices)) == 10


def test_the_whole_node_trainjob_waits_for_the_held_gpus_then_claims_every_device(rehearsed):
    # GIVEN the NCCL pair holding one GPU and 4 EFA devices of each node (the test above)
    mpijob = _job(rehearsed, contract.MPIJOB_KIND)
    held = f"{contract.JOB_NAME_LABEL}={mpijob['metadata']['name']},{MPI_WORKERS}"
    assert len([p for p in _pods(rehearsed, mpijob, held) if _running(p)]) == 2
    # WHEN the whole-node TrainJob is started
    trainjob = _job(rehearsed, contract.TRAINJOB_KIND)
    rehearsed.start(trainjob)
    selector = f"jobset.sigs.k8s.io/jobset-name={trainjob['metadata']['name']}"
    pods = poll("the TrainJob's two pods created", lambda: (p if len(p := _pods(rehearsed, trainjob, selector)) == 2
                                                            else None), JOB_TIMEOUT)
    # THEN its pods wait: no node has 8 GPUs and 32 EFA devices free (no device is given twice)
    time.sleep(5)
    pods = _pods(rehearsed, trainjob, selector)
    assert not [p for p in pods if p["spec"].get("nodeName")], [p["spec"].get("nodeName") for p in pods]
    # AND once the pair is gone they land, one per node, each with all 8 GPUs and all 32 EFA devices in two claims
    got = rehearsed.api.delete(rehearsed.api.get(mpijob).body)
    assert got.ok, got.message()
    poll("the NCCL workers gone", lambda: True if not _pods(rehearsed, mpijob, held) else None, JOB_TIMEOUT)
    running = poll("the TrainJob's pods running", lambda: (p if len(p := [x for x in _pods(rehearsed, trainjob, selector)
                                                                         if _running(x)]) == 2 else None), JOB_TIMEOUT)
    assert len({p["spec"]["nodeName"] for p in running}) == 2
    for pod in running:
        claims = _claims_of(rehearsed, pod)
        assert {name: len(_results(c)) for name, c in claims.items()} == {"gpus": 8, "efa": 32}, claims
        assert {x["pool"] for c in claims.values() for x in _results(c)} == {pod["spec"]["nodeName"]}
    devices = _allocated_devices(rehearsed)
    assert len(devices) == len(set(devices)) == 80
