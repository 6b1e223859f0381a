"""The objects ``verify --acceptance`` creates: the check pod construct and the pair MPIJob, which is the
charts' own NCCL-tests job (k8s/nccl_tests.py) pinned to two nodes.

The chart job without ``pin_nodes`` is covered byte for byte by the golden files
(tests/test_k8s_dist.py); here the pair job is compared with the chart job of the same plan.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache
from typing import Any

import kubernetes_validate
import pytest

from efa_stack import contract
from efa_stack.planning.nccl import NcclJobPlan
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.planning.plan import ClusterPlan
from efa_stack.spec.models import KUBERNETES_VERSIONS
from k8s import acceptance as manifests
from k8s.nccl_tests import NcclTestsJobProps
from tests.support import arg_after, built, crd_schema, mpirun_args, schema_validate, worker, worker_container

NODES = ("ip-10-0-96-11.us-west-2.compute.internal", "ip-10-0-96-12.us-west-2.compute.internal")
NAME = "accept-p5-r1-0"


def _plan() -> ClusterPlan:
    return built("default").plan


def _group() -> NodeGroupPlan:
    return _plan().node_group("p5")


def _job() -> NcclJobPlan:
    return next(j for j in _plan().nccl_jobs if j.node_group == "p5")


@cache
def _pair() -> dict[str, Any]:
    return manifests.pair_job(_job(), _group(), NAME, NODES, "default")


@cache
def _check_pod(efa: bool = True) -> dict[str, Any]:
    return manifests.check_pod(_group(), NODES[0], namespace="default", image=_job().image, job=_job(), dcgm_level=2,
                               efa=efa, dcgm_image="nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04")


def _worker_spec(mpijob: dict[str, Any]) -> dict[str, Any]:
    return worker(mpijob)["template"]["spec"]


def _node_affinity(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


# --- the pair MPIJob -----------------------------------------------------------------------------------


def test_pair_workers_run_the_efa_guard_with_the_plans_efa_count() -> None:
    # GIVEN the p5 group of the default spec (fabric efa, guard on) WHEN a pair job is rendered
    job = _job()
    assert job.worker.fabric == "efa" and job.efa_guard
    inits = _worker_spec(_pair())["initContainers"]
    # THEN every worker first runs the efa-guard, expecting every EFA device of the plan
    assert [c["name"] for c in inits] == [contract.EFA_GUARD_CONTAINER]
    env = {e["name"]: e.get("value") for e in inits[0]["env"]}
    assert env["EFA_GUARD_EXPECTED_EFA"] == str(job.worker.efa_devices) == str(_group().efa_devices_per_node)
    assert inits[0]["resources"]["limits"][contract.EFA_RESOURCE] == job.worker.efa_devices


def test_pair_workers_request_whole_cpus_equal_to_limits_from_the_plan() -> None:
    res = worker_container(_pair())["resources"]
    # THEN requests = limits (Guaranteed QoS) with the plan's whole CPUs and every GPU/EFA device
    assert res["requests"] == res["limits"]
    assert res["limits"]["cpu"] == _job().worker.cpus > 0
    assert res["limits"][contract.GPU_RESOURCE] == _group().gpus_per_node
    assert res["limits"][contract.EFA_RESOURCE] == _group().efa_devices_per_node


def test_pair_workers_are_pinned_to_exactly_the_two_nodes_one_per_node() -> None:
    spec = _worker_spec(_pair())
    assert _node_affinity(spec) == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(NODES)}]}
    ]
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == [{"labelSelector": {"matchLabels": {contract.LABEL_MPI_ROLE: "worker", contract.LABEL_NCCL_JOB: NAME}},
                     "topologyKey": "kubernetes.io/hostname"}]
    assert _pair()["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2


def test_pair_job_is_labelled_started_not_retried_and_sweeps_to_the_pair_size() -> None:
    job = _pair()
    assert job["metadata"]["labels"][contract.LABEL_ACCEPTANCE] == "p5"
    assert job["metadata"]["labels"][contract.LABEL_NODE_GROUP] == "p5"
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": manifests.PAIR_BACKOFF_LIMIT,
                                        "suspend": False}
    args = mpirun_args(job)
    assert arg_after(args, "-np") == str(2 * _job().slots_per_worker)
    assert arg_after(args, "-e") == manifests.PAIR_MAX_BYTES
    assert arg_after(args, "--bind-to") == "none"


def test_pair_workers_tolerate_the_groups_taints_and_the_quarantine_taint() -> None:
    tolerations = _worker_spec(_pair())["tolerations"]
    expected = [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in _group().taints]
    assert _group().taints and tolerations[:-1] == expected
    assert tolerations[-1] == {"key": contract.QUARANTINE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def test_pair_worker_is_the_chart_workers_template_but_for_name_placement_and_tolerations() -> None:
    # GIVEN the chart's MPIJob for the same group WHEN the pair's worker pod spec is compared with it
    chart = _worker_spec(built("default").mpijob())
    pair = _worker_spec(_pair())
    # THEN only what names the job, pins the nodes or tolerates quarantine differs
    same = {"containers", "initContainers", "nodeSelector", "volumes"}
    assert set(chart) == set(pair)
    for key in same:
        assert _renamed(chart[key], chart_name=_job().name) == _renamed(pair[key], chart_name=NAME), key


def _renamed(value: Any, *, chart_name: str) -> Any:
    # the launcher gate's and guard's text mention the job name; the worker spec itself does not
    import json

    return json.loads(json.dumps(value).replace(chart_name, "JOB"))


def test_pair_job_is_valid_against_the_mpijob_crd_and_kubernetes() -> None:
    job = _pair()
    schema_validate(job, crd_schema())
    for role, replica in job["spec"]["mpiReplicaSpecs"].items():
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "template": replica["template"],
                                      "metadata": {"name": f"{NAME}-{role.lower()}"}},
                                     KUBERNETES_VERSIONS[0], strict=True)


# --- the pin_nodes prop ------------------------------------------------------------------------------


def test_chart_job_without_pin_nodes_has_no_node_affinity() -> None:
    spec = _worker_spec(built("default").mpijob())
    assert set(spec["affinity"]) == {"podAntiAffinity"}


@pytest.mark.parametrize(("nodes", "message"), [
    (("a",), "pin_nodes names 1 node(s) for 2 workers"),
    (("a", "a"), "distinct, non-empty node names"),
    (("a", ""), "distinct, non-empty node names"),
])
def test_fails_pin_nodes_that_cannot_hold_every_worker(nodes: tuple[str, ...], message: str) -> None:
    job = dataclasses.replace(_job(), workers=2)
    with pytest.raises(ValueError, match=re.escape(message)):
        NcclTestsJobProps(job=job, pin_nodes=nodes)


# --- the check pod ---------------------------------------------------------------------------------


def test_check_pod_is_valid_kubernetes_and_pinned_to_its_node() -> None:
    pod = _check_pod()
    kubernetes_validate.validate(pod, KUBERNETES_VERSIONS[0], strict=True)
    assert (pod["apiVersion"], pod["kind"], pod["metadata"]["name"]) == ("v1", "Pod", manifests.pod_name(NODES[0]))
    assert _node_affinity(pod["spec"]) == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODES[0]]}]}
    ]
    assert pod["metadata"]["labels"] == {contract.LABEL_ACCEPTANCE: "p5", contract.LABEL_NODE_GROUP: "p5",
                                         **contract.COMMON_LABELS}


def test_check_pod_requests_every_device_of_the_node_and_dcgm_hands_its_gpus_on() -> None:
    g = _group()
    spec = _check_pod()["spec"]
    (dcgm,) = spec["initContainers"]
    (check,) = spec["containers"]
    assert check["name"] == manifests.CHECK_CONTAINER and dcgm["name"] == manifests.DCGM_CONTAINER
    assert check["resources"]["requests"] == check["resources"]["limits"] == {
        contract.GPU_RESOURCE: str(g.gpus_per_node), contract.EFA_RESOURCE: str(g.efa_devices_per_node),
        contract.HUGEPAGES_2MI_RESOURCE: f"{g.hugepages_2mi_mib}Mi", "memory": f"{_job().worker.memory.memory_mib}Mi",
    }
    assert dcgm["resources"]["limits"][contract.GPU_RESOURCE] == str(g.gpus_per_node)
    assert dcgm["securityContext"] == {"privileged": True, "runAsUser": 0} and "restartPolicy" not in dcgm
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{_job().worker.memory.shm_mib}Mi"}} in spec["volumes"]
    assert {"name": "results", "emptyDir": {}} in spec["volumes"]
    assert spec["tolerations"] == manifests.acceptance_tolerations(g)


def test_check_pod_without_efa_requests_no_efa_devices_and_expects_none() -> None:
    (check,) = _check_pod(efa=False)["spec"]["containers"]
    assert contract.EFA_RESOURCE not in check["resources"]["limits"]
    assert contract.HUGEPAGES_2MI_RESOURCE not in check["resources"]["limits"]
    assert check["command"][4:7] == ["node", str(_group().gpus_per_node), "0"]
