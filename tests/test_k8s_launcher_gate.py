"""The launcher of the nccl-tests MPIJob starts mpirun only once every worker is reachable.

The MPI operator's rule for creating the launcher is encoded below from its source, and the rendered
job is checked against it: whenever the rule lets the launcher start before the workers are ready,
the launcher's own command must hold mpirun back. The gate script itself is run under bash with stub
``getent``/``ssh`` commands, so its behaviour (wait, exec, time out with a message) is tested too.
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from k8s.nccl_tests import GATE_NAME, HOSTFILE_ENV, NcclTestsJobProps, wait_for_workers_script
from tests.support import built, launcher_command, mpirun_args


def operator_creates_launcher(*, policy: str, suspended: bool, ready_workers: int, total_workers: int) -> bool:
    """Whether one sync of the MPI operator creates the launcher Job.

    kubeflow/mpi-operator@v0.8.2 (branch release-0.8) pkg/controller/mpi_job_controller.go,
    ``syncHandler``: ``worker`` is filled by ``getOrCreateWorker`` only ``if !isMPIJobSuspended``,
    and the launcher Job is created when ``LauncherCreationPolicy == AtStartup ||
    countReadyWorkerPods(worker) == len(worker)``. A suspended job therefore counts 0 ready of 0.
    """
    workers = 0 if suspended else total_workers
    ready = 0 if suspended else ready_workers
    return policy == "AtStartup" or ready == workers


def operator_resumes_launcher_with_workers(*, suspended_before: bool, launcher_exists: bool) -> bool:
    """On resume the same sync creates the workers and un-suspends an existing launcher Job
    (``if !isMPIJobSuspended(mpiJob) && isJobSuspended(launcher)`` ... ``Suspend = false``)."""
    return suspended_before and launcher_exists


def launcher_may_start_before_workers_ready(job: dict) -> bool:
    spec = job["spec"]
    policy = spec.get("launcherCreationPolicy", "AtStartup")
    suspended = spec.get("runPolicy", {}).get("suspend", False)
    workers = spec["mpiReplicaSpecs"]["Worker"]["replicas"]
    created_early = operator_creates_launcher(
        policy=policy, suspended=suspended, ready_workers=0, total_workers=workers
    )
    return created_early and (not suspended or operator_resumes_launcher_with_workers(
        suspended_before=True, launcher_exists=created_early))


def test_operator_rule_creates_the_launcher_of_a_suspended_job_with_no_worker_ready():
    # the upstream defect the rendered job has to live with (mpi-operator #615)
    assert operator_creates_launcher(policy="WaitForWorkersReady", suspended=True, ready_workers=0, total_workers=2)
    assert not operator_creates_launcher(
        policy="WaitForWorkersReady", suspended=False, ready_workers=1, total_workers=2
    )
    assert operator_creates_launcher(policy="WaitForWorkersReady", suspended=False, ready_workers=2, total_workers=2)


@pytest.mark.parametrize("stem", ["default", "p4d"])
def test_rendered_job_gates_mpirun_whenever_the_operator_may_start_it_early(stem):
    # GIVEN the rendered job (created suspended, WaitForWorkersReady)
    job = built(stem).mpijob()
    assert job["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    # WHEN the operator's rule lets its launcher start before any worker is ready
    assert launcher_may_start_before_workers_ready(job)
    # THEN the launcher's command is the gate, which execs exactly the mpirun command line
    command = launcher_command(job)
    assert command[:2] == ["/bin/bash", "-c"] and command[3] == GATE_NAME
    assert command[4:] == mpirun_args(job)
    assert 'exec "$@"' in command[2] and "ssh" in command[2] and "getent hosts" in command[2]


# --- the gate script itself ---------------------------------------------------------------------------

def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run_gate(tmp_path: Path, hosts: list[str], reachable: set[str], wait_s: int) -> subprocess.CompletedProcess:
    props = replace(NcclTestsJobProps(job=built("default").plan.nccl_job), worker_wait_seconds=wait_s,
                    worker_wait_interval_seconds=1)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{h} slots=8\n" for h in hosts))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ok = " ".join(reachable)
    _stub(bin_dir, "getent", f'for h in {ok}; do [ "$2" = "$h" ] && exit 0; done; exit 2')
    # ssh's last-but-one argument is the host (ssh -n -o ... HOST true)
    _stub(bin_dir, "ssh", f'host="${{@: -2:1}}"; for h in {ok}; do [ "$host" = "$h" ] && exit 0; done; exit 255')
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", HOSTFILE_ENV: str(hostfile)}
    return subprocess.run(
        ["bash", "-c", wait_for_workers_script(props), GATE_NAME, "echo", "mpirun-started"],
        check=False, env=env, capture_output=True, text=True, timeout=30,
    )


def test_gate_execs_mpirun_once_every_worker_resolves_and_accepts_ssh(tmp_path):
    hosts = ["nccl-tests-p5-worker-0.nccl-tests-p5.default.svc", "nccl-tests-p5-worker-1.nccl-tests-p5.default.svc"]
    out = _run_gate(tmp_path, hosts, set(hosts), wait_s=5)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "mpirun-started"
    assert "all 2 workers" in out.stdout


def test_fails_gate_times_out_naming_the_missing_worker(tmp_path):
    hosts = ["w-0.job.default.svc", "w-1.job.default.svc"]
    out = _run_gate(tmp_path, hosts, {"w-0.job.default.svc"}, wait_s=0)
    assert out.returncode == 1
    assert "mpirun-started" not in out.stdout
    assert "worker w-1.job.default.svc did not resolve and accept ssh within 0 s" in out.stderr
    assert "kubectl get pods -n default -l efa-stack.io/nccl-job=nccl-tests-p5" in out.stderr


def test_fails_gate_with_an_empty_hostfile(tmp_path):
    out = _run_gate(tmp_path, [], set(), wait_s=0)
    assert out.returncode == 1 and "no workers" in out.stderr


def test_fails_negative_wait():
    with pytest.raises(ValueError, match="worker_wait_seconds"):
        NcclTestsJobProps(job=built("default").plan.nccl_job, worker_wait_seconds=-1)


# --- how long the plan's launcher waits -------------------------------------------------------------------------


def _gate_limit(stem: str) -> int:
    """The seconds in the rendered launcher's gate of ``clusters/<stem>.yaml``."""
    import re

    command = " ".join(launcher_command(built(stem).mpijob()))
    (limit,) = {int(s) for s in re.findall(r"deadline=\$\(\(SECONDS \+ (\d+)\)\)", command)}
    return limit


def test_a_node_group_job_waits_the_default_pull_allowance():
    assert _gate_limit("default") == NcclTestsJobProps.worker_wait_seconds == 900


def test_a_queued_job_waits_as_long_as_kueue_waits_for_its_pods():
    # tas-p5 sets waitForPodsReady.timeoutSeconds 1200: Kueue evicts only after that, so the gate waits as long
    plan = built("tas-p5").plan
    assert plan.kueue is not None and plan.kueue.wait.timeout_seconds == 1200
    assert _gate_limit("tas-p5") == 1200


def test_a_job_on_a_karpenter_pool_waits_for_the_node_launch_too():
    from efa_stack.planning.scheduling import KARPENTER_REGISTRATION_SECONDS, NODE_START_SECONDS

    plan = built("karpenter-p5").plan
    assert plan.nccl_job is not None and plan.karpenter is not None
    assert plan.karpenter.pool(plan.nccl_job.node_group) is not None
    pool_wait = NcclTestsJobProps.worker_wait_seconds + KARPENTER_REGISTRATION_SECONDS + NODE_START_SECONDS
    assert plan.kueue is not None
    assert _gate_limit("karpenter-p5") == max(pool_wait, plan.kueue.wait.timeout_seconds) > 900
