"""``efa-stack verify --run-nccl`` reports the EFA guard's line when a worker's efa-guard init container failed.

Recorded API responses in tests/fixtures/k8s_api/ (see SOURCES.md there); fakes as in test_verify.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from efa_stack import cluster, contract
from tests import test_verify
from tests.test_verify import FakeCore, FakeCustom, _model, _run, job, nodes

fake_report = test_verify.fake_report  # the fixture that keeps nccl-report out of these runs

GUARD_LINE = (
    "efa-stack guard: FAIL node=ip-10-0-1-24.us-west-2.compute.internal pod=default/nccl-tests-p5-worker-1: "
    "expected 32 EFA devices (8 GPUs) but libfabric finds no EFA provider"
)


class PodsBySelector(FakeCore):
    """Launcher and worker pods answered by label selector; container logs by container name."""

    def __init__(self, workers: Any, *, container_log: str = "", log_error: Exception | None = None):
        super().__init__([nodes("nodes_ready.json")], pods=None, log="NCCL WARN boom")
        self.workers = workers
        self.container_log = container_log
        self.log_error = log_error

    def list_namespaced_pod(self, *args: Any, **kwargs: Any) -> Any:
        super().list_namespaced_pod(*args, **kwargs)
        role = kwargs["label_selector"].rsplit("=", 1)[1]
        return self.workers if role == "worker" else _model("launcher_pods.json", "V1PodList")

    def read_namespaced_pod_log(self, *args: Any, **kwargs: Any) -> str:
        launcher_log = super().read_namespaced_pod_log(*args, **kwargs)
        if kwargs.get("container") != contract.EFA_GUARD_CONTAINER:
            return launcher_log
        if self.log_error:
            raise self.log_error
        return self.container_log


def _workers() -> Any:
    return _model("worker_pods_guard_failed.json", "V1PodList")


def test_guard_line_is_read_from_the_failed_workers_termination_message():
    # GIVEN worker-1's efa-guard exited 1 with its line, worker-0's passed
    core = PodsBySelector(_workers())
    # WHEN verify collects the guard's findings THEN exactly the failed worker's line comes back
    lines = cluster.guard_failures(core, "nccl-tests-p5", "default")
    assert len(lines) == 1 and lines[0].startswith(GUARD_LINE)
    selector = next(c[2]["label_selector"] for c in core.calls if c[0] == "list_namespaced_pod")
    assert selector == "training.kubeflow.org/job-name=nccl-tests-p5,training.kubeflow.org/job-role=worker"
    assert not any(c[0] == "read_namespaced_pod_log" for c in core.calls)  # the message sufficed


def test_guard_line_falls_back_to_the_container_log():
    workers = copy.deepcopy(_workers())
    workers.items[1].status.init_container_statuses[0].state.terminated.message = None
    core = PodsBySelector(workers, container_log="starting\n" + GUARD_LINE + "\n")
    assert cluster.guard_failures(core, "nccl-tests-p5", "default") == [GUARD_LINE]
    call = next(c for c in core.calls if c[0] == "read_namespaced_pod_log")
    assert call[1] == ("nccl-tests-p5-worker-1", "default") and call[2] == {"container": contract.EFA_GUARD_CONTAINER}


def test_fails_without_a_line_still_names_the_pod_and_the_command():
    workers = copy.deepcopy(_workers())
    workers.items[1].status.init_container_statuses[0].state.terminated.message = None
    core = PodsBySelector(workers, log_error=ApiException(status=404, reason="Not Found"))
    (line,) = cluster.guard_failures(core, "nccl-tests-p5", "default")
    assert "pod=default/nccl-tests-p5-worker-1" in line and "exited 1 (Error)" in line
    assert "kubectl -n default logs nccl-tests-p5-worker-1 -c efa-guard" in line


def test_no_guard_failure_when_every_guard_passed():
    workers = copy.deepcopy(_workers())
    workers.items = workers.items[:1]
    assert cluster.guard_failures(PodsBySelector(workers), "nccl-tests-p5", "default") == []


@pytest.mark.usefixtures("fake_report")
def test_verify_prints_the_guard_line_when_the_job_fails() -> None:
    # GIVEN the job fails because worker-1 has no EFA WHEN verify --run-nccl follows it
    custom = FakeCustom([job("mpijob_suspended.json"), job("mpijob_failed.json")])
    code, out, _ = _run(PodsBySelector(_workers()), custom, timeout=0, run_nccl=True)
    # THEN the guard's line is in the output, beside the job's failure
    assert code == 1
    assert "FAIL: MPIJob nccl-tests-p5 failed" in out
    assert "the EFA guard stopped 1 worker(s) before NCCL could fall back to TCP:" in out
    assert GUARD_LINE in out.replace("\n", "")


@pytest.mark.usefixtures("fake_report")
def test_verify_json_carries_the_guard_lines() -> None:
    custom = FakeCustom([job("mpijob_failed.json")])
    code, _, echoed = _run(PodsBySelector(_workers()), custom, timeout=0, run_nccl=True, json_out=True)
    doc = json.loads(echoed[0])
    assert code == 1 and doc["nccl"]["state"] == "Failed"
    assert len(doc["nccl"]["guard"]) == 1 and doc["nccl"]["guard"][0].startswith(GUARD_LINE)


@pytest.mark.usefixtures("fake_report")
def test_timed_out_job_reports_the_guard_too() -> None:
    # the launcher waits for workers that never start: the job times out, the guard says why
    custom = FakeCustom([job("mpijob_running.json")])
    code, out, _ = _run(PodsBySelector(_workers()), custom, timeout=0, run_nccl=True, job_timeout=0)
    assert code == 1 and "FAIL: MPIJob nccl-tests-p5 timeout" in out
    assert GUARD_LINE in out.replace("\n", "")
