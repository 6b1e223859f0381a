"""What the rehearsal of clusters/dra-p5.yaml shows beyond the scenarios every spec goes through (tests/test_rehearsal.py:
the controllers, every job landing and completing, the DaemonSets and the DRA drivers' slices on every node they
serve, too few nodes, a quarantined node, a spec change): the devices the DRA drivers publish on each node
(efa_stack/rehearsal/resource_slices.py) and the claims the real kube-scheduler allocates from them, the real
kube-controller-manager making each pod's claims from its templates.

- a DRA node publishes the catalog's devices, as ``efa-stack verify`` counts them, and advertises no device plugin
  resource;
- each worker of the sub-node NCCL pair gets one GPU and the 4 EFA devices on that GPU's PCIe root, on its own node;
- the whole-node TrainJob waits while another job holds some of a node's devices (no device is given twice), then
  claims every GPU and EFA device of its nodes in two claims.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from efa_stack import contract
from efa_stack.planning.dra import devices_per_node
from efa_stack.rehearsal.nodes import NodeOptions
from efa_stack.rehearsal.rehearsal import Rehearsal, rehearse
from efa_stack.tools.verify import slice_devices
from tests.rehearsal_support import JOB_TIMEOUT, SETTLE, jobs, live_nodes, log, spec_plan

pytestmark = [pytest.mark.rehearsal, pytest.mark.xdist_group("rehearsal")]


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    started = time.monotonic()
    with rehearse(spec_plan("dra-p5"), tmp_path_factory.mktemp("rehearsal-dra-p5"), nodes=NodeOptions()) as r:
        log(f"dra-p5: rolled out in {time.monotonic() - started:.1f}s; "
            + ", ".join(f"{k} {v:.1f}s" for k, v in r.timings.items()))
        r.name = "dra-p5"
        yield r


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


def _job(r: Rehearsal, kind: str) -> dict[str, Any]:
    (job,) = [j for j in jobs(r) if j["kind"] == kind]
    return job


def test_every_dra_node_publishes_the_catalogs_devices_and_no_plugin_resource(rehearsed):
    # GIVEN the p5 group's nodes, made from the plan, and the slices its drivers published where their pods run
    slices = _slices(rehearsed)
    group = rehearsed.plan.node_group("p5")
    nodes = live_nodes(rehearsed, "p5")
    assert len(nodes) == group.desired_size == 2
    for node in nodes:
        # THEN each publishes the catalog's GPUs and EFA devices, counted as efa-stack verify counts them
        assert slice_devices(slices, node["metadata"]["name"]) == {
            "gpu": devices_per_node(group, "gpu"), "efa": devices_per_node(group, "efa"), "neuron": 0}
        # AND advertises no device plugin resource
        allocatable = node["status"]["allocatable"]
        assert not {contract.GPU_RESOURCE, contract.EFA_RESOURCE, contract.NEURON_RESOURCE} & set(allocatable)


def test_the_sub_node_pair_gets_one_gpu_with_its_roots_efa_devices_on_each_node(rehearsed):
    # GIVEN the slices as published: the first GPU and the first EFA devices are on different PCIe roots (first-fit
    # alone would pair them across roots)
    first = {s["spec"]["driver"]: s["spec"]["devices"][0]["attributes"][contract.PCIE_ROOT_ATTRIBUTE]["string"]
             for s in _slices(rehearsed) if s["spec"]["nodeName"] == "p5-0"}
    assert first[contract.GPU_DRA_DRIVER] != first[contract.EFA_DRA_DRIVER], first
    # WHEN the suspended NCCL pair of 1-GPU workers is started by its efa-stack.io/start command
    job = _job(rehearsed, contract.MPIJOB_KIND)
    outcome = rehearsed.jobs.land(job, timeout=JOB_TIMEOUT, settle=JOB_TIMEOUT)
    assert outcome.landed, outcome.reason
    attributes = _device_attributes(rehearsed)
    # THEN each worker's claim was allocated on its node by the scheduler: one GPU and the 4 EFA devices on that GPU's
    # PCIe root
    for worker in rehearsed.jobs.workers(job):
        claims = _claims_of(rehearsed, worker)
        assert set(claims) == {"aligned"}, claims
        results = _results(claims["aligned"])
        by_request: dict[str, int] = {}
        for x in results:
            by_request[x["request"]] = by_request.get(x["request"], 0) + 1
        assert by_request == {"gpu-0": 1, "efa-0": 4}, by_request
        assert {x["pool"] for x in results} == {worker["spec"]["nodeName"]}
        roots = {attributes[(x["driver"], x["pool"], x["device"])][contract.PCIE_ROOT_ATTRIBUTE]["string"]
                 for x in results}
        assert len(roots) == 1, roots
    devices = _allocated_devices(rehearsed)
    assert len(devices) == len(set(devices)) == 10


def test_the_whole_node_trainjob_waits_for_the_held_devices_then_claims_every_device(rehearsed):
    # GIVEN the NCCL pair holding one GPU and 4 EFA devices of each node (the test above)
    mpijob, trainjob = _job(rehearsed, contract.MPIJOB_KIND), _job(rehearsed, contract.TRAINJOB_KIND)
    assert len(rehearsed.jobs.workers(mpijob)) == 2
    # WHEN the whole-node TrainJob is started
    waiting = rehearsed.jobs.land(trainjob, timeout=JOB_TIMEOUT, settle=SETTLE)
    # THEN its pods wait, on no node: no node has 8 GPUs and 32 EFA devices free (no device is given twice)
    assert not waiting.running and waiting.reasons, waiting
    assert not [p for p in rehearsed.jobs.workers(trainjob) if p["spec"].get("nodeName")]
    # AND once the pair is finished they land, one per node, each with all 8 GPUs and all 32 EFA devices in two claims
    rehearsed.jobs.remove(mpijob, JOB_TIMEOUT)
    outcome = rehearsed.jobs.land(trainjob, timeout=JOB_TIMEOUT, settle=JOB_TIMEOUT)
    assert outcome.landed and len(set(outcome.nodes)) == 2, outcome.reason
    for pod in rehearsed.jobs.workers(trainjob):
        claims = _claims_of(rehearsed, pod)
        assert {name: len(_results(c)) for name, c in claims.items()} == {"gpus": 8, "efa": 32}, claims
        assert {x["pool"] for c in claims.values() for x in _results(c)} == {pod["spec"]["nodeName"]}
    devices = _allocated_devices(rehearsed)
    assert len(devices) == len(set(devices)) == 80
