"""verify: nodes against the plan, waiting without sleeping, and the NCCL-tests MPIJob.

The API responses are JSON files in tests/fixtures/k8s_api/ (see SOURCES.md there), turned into the
kubernetes client's own models (V1NodeList, V1PodList) by ApiClient.deserialize, or models built
here with V1Node/V1ObjectMeta/V1NodeStatus. Fake CoreV1Api/CustomObjectsApi objects check every
call against the real client method's signature; no kubeconfig is loaded, nothing touches a network.
"""

from __future__ import annotations

import copy
import inspect
import io
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from rich.console import Console

from efa_stack import cluster, contract, nccl_report
from efa_stack.contract import EFA_RESOURCE, GPU_RESOURCE, NEURON_RESOURCE
from efa_stack.errors import UserError
from efa_stack.planning.plan import build_plan, plan_from_file
from efa_stack.spec.loader import parse_spec
from efa_stack.tools import verify
from efa_stack.tools.verify_model import GroupCheck, NodeCheck, VerifyResult

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "k8s_api"
PLAN = plan_from_file(ROOT / "clusters" / "default.yaml")
P1 = "ip-10-0-96-11.us-west-2.compute.internal"
P2 = "ip-10-0-97-12.us-west-2.compute.internal"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


def _model(name: str, kind: str) -> Any:
    return client.ApiClient().deserialize(_text(name), kind, "application/json")


def nodes(name: str) -> client.V1NodeList:
    return _model(name, "V1NodeList")


def job(name: str) -> dict[str, Any]:
    return json.loads(_text(name))


def _conforms(method: Any, *args: Any, **kwargs: Any) -> None:
    """Fail the test if the call would not bind to the real kubernetes client method."""
    inspect.signature(method).bind(None, *args, **kwargs)


class FakeCore:
    """CoreV1Api stand-in: each list_node call returns the next node list (the last one repeats)."""

    def __init__(self, node_lists: list[Any] | None = None, *, pods: Any = None, log: str = "", error: Exception | None = None):
        self.node_lists = node_lists or []
        self.pods = pods
        self.log = log
        self.error = error
        self.calls: list[tuple[str, tuple, dict]] = []

    def list_node(self, *args: Any, **kwargs: Any) -> Any:
        _conforms(client.CoreV1Api.list_node, *args, **kwargs)
        self.calls.append(("list_node", args, kwargs))
        if self.error:
            raise self.error
        n = sum(1 for c in self.calls if c[0] == "list_node")
        return self.node_lists[min(n, len(self.node_lists)) - 1]

    def list_namespaced_pod(self, *args: Any, **kwargs: Any) -> Any:
        _conforms(client.CoreV1Api.list_namespaced_pod, *args, **kwargs)
        self.calls.append(("list_namespaced_pod", args, kwargs))
        return self.pods

    def read_namespaced_pod_log(self, *args: Any, **kwargs: Any) -> str:
        _conforms(client.CoreV1Api.read_namespaced_pod_log, *args, **kwargs)
        self.calls.append(("read_namespaced_pod_log", args, kwargs))
        return self.log


class FakeCustom:
    """CustomObjectsApi stand-in: each get returns the next MPIJob state (the last one repeats)."""

    def __init__(self, states: list[dict[str, Any] | Exception], slices: list[dict[str, Any]] | None = None):
        self.states = states
        self.gets = 0
        self.patches: list[tuple[tuple, dict]] = []
        self.slices = slices or []
        """The cluster's ResourceSlices (list_cluster_custom_object of resource.k8s.io/v1 resourceslices)."""

    def list_cluster_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        _conforms(client.CustomObjectsApi.list_cluster_custom_object, *args, **kwargs)
        assert args[:3] == ("resource.k8s.io", "v1", "resourceslices"), args
        return {"items": copy.deepcopy(self.slices)}

    def get_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        _conforms(client.CustomObjectsApi.get_namespaced_custom_object, *args, **kwargs)
        state = self.states[min(self.gets, len(self.states) - 1)]
        self.gets += 1
        if isinstance(state, Exception):
            raise state
        return copy.deepcopy(state)

    def patch_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        _conforms(client.CustomObjectsApi.patch_namespaced_custom_object, *args, **kwargs)
        self.patches.append((args, kwargs))
        return {}


class Clock:
    """Injected clock and sleep: time passes only when verify sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _node(name: str, group: str = "p5", itype: str = "p5.48xlarge", alloc: dict[str, str] | None = None, ready: bool = True) -> client.V1Node:
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels={
            "efa-stack.io/node-group": group, "node.kubernetes.io/instance-type": itype,
        }),
        status=client.V1NodeStatus(
            allocatable={"cpu": "191450m", **({GPU_RESOURCE: "8", EFA_RESOURCE: "32"} if alloc is None else alloc)},
            conditions=[client.V1NodeCondition(type="Ready", status="True" if ready else "False")],
        ),
    )


def _system() -> list[client.V1Node]:
    return [_node(f"sys-{i}", "system", "m7i.xlarge", {}) for i in (1, 2)]


def _group(result: VerifyResult, name: str) -> GroupCheck:
    return next(g for g in result.groups if g.name == name)


def _nodecheck(result: VerifyResult, name: str) -> NodeCheck:
    return next(n for n in result.nodes if n.name == name)


# --- fixtures ------------------------------------------------------------------------------------


def test_fixtures_are_client_models() -> None:
    ready = nodes("nodes_ready.json")
    assert isinstance(ready, client.V1NodeList) and all(isinstance(n, client.V1Node) for n in ready.items)
    assert ready.items[0].status.allocatable[EFA_RESOURCE] == "32"
    pods = _model("launcher_pods.json", "V1PodList")
    assert pods.items[0].metadata.labels[contract.JOB_ROLE_LABEL] == "launcher"


# --- nodes against the plan ----------------------------------------------------------------------


def test_ready_cluster_matches_the_plan() -> None:
    result = verify.check_nodes(PLAN, nodes("nodes_ready.json").items)
    assert result.ok
    assert [(g.name, g.status, g.matching, g.expected_nodes) for g in result.groups] == [("system", "pass", 2, 2), ("p5", "pass", 2, 2)]
    p = _nodecheck(result, P1)
    assert (p.instance_type, p.gpus, p.efa, p.expected_gpus, p.expected_efa) == ("p5.48xlarge", 8, 32, 8, 32)
    assert result.matching_nodes == result.expected_nodes == 4


def test_fails_node_without_efa_devices_with_the_device_plugin_and_launch_template_fix() -> None:
    result = verify.check_nodes(PLAN, nodes("nodes_missing_efa.json").items)
    assert not result.ok
    bad = _nodecheck(result, P2)
    assert bad.status == "fail" and bad.efa is None
    assert bad.problems == ("no vpc.amazonaws.com/efa in allocatable (expected 32)",)
    # the DaemonSet the EFA chart really renders (tests/golden/k8s/*/10-efa-device-plugin.yaml), not a guess
    assert "get ds aws-efa-k8s-device-plugin;" in bad.fixes[0] and "launch template" in bad.fixes[0]
    p5 = _group(result, "p5")
    assert p5.status == "fail" and "only 1 of 2 nodes match" in p5.message and P2 in p5.message
    assert "EFA device plugin" in p5.fix
    assert _group(result, "system").status == "pass"


def test_fails_when_too_few_nodes_joined() -> None:
    result = verify.check_nodes(PLAN, nodes("nodes_too_few.json").items)
    p5 = _group(result, "p5")
    assert p5.status == "fail" and p5.found == 1
    assert "found 1 of 2 nodes" in p5.message
    assert "--timeout" in p5.fix and "describe-nodegroup" in p5.fix


def test_fails_node_with_fewer_efa_devices_than_planned() -> None:
    n = _node("a", alloc={GPU_RESOURCE: "8", EFA_RESOURCE: "16"})
    check = verify.check_node(n, PLAN.node_group("p5"))
    assert check.status == "fail" and check.problems == ("16 vpc.amazonaws.com/efa allocatable, expected 32",)


def test_fails_node_without_gpus_with_the_nvidia_plugin_fix() -> None:
    check = verify.check_node(_node("a", alloc={EFA_RESOURCE: "32"}), PLAN.node_group("p5"))
    assert check.status == "fail" and "no nvidia.com/gpu in allocatable (expected 8)" in check.problems
    assert "NVIDIA device plugin" in check.fixes[0]


def test_fails_node_of_another_instance_type() -> None:
    check = verify.check_node(_node("a", itype="p4d.24xlarge"), PLAN.node_group("p5"))
    assert check.status == "fail" and "instance type is p4d.24xlarge" in check.problems[0]


def test_fails_node_that_is_not_ready() -> None:
    check = verify.check_node(_node("a", ready=False), PLAN.node_group("p5"))
    assert check.status == "fail" and check.problems == ("node is not Ready",)


def test_more_devices_than_planned_is_a_warning() -> None:
    check = verify.check_node(_node("a", alloc={GPU_RESOURCE: "8", EFA_RESOURCE: "33"}), PLAN.node_group("p5"))
    assert check.status == "warn"


def _trn_plan() -> Any:
    return build_plan(parse_spec(
        "apiVersion: eksctl.io/v1alpha5\nkind: ClusterConfig\n"
        "metadata: {name: t, region: us-west-2, version: '1.34'}\n"
        "availabilityZones: [us-west-2b, us-west-2d]\n"
        "managedNodeGroups:\n- {name: trn, instanceType: trn1.32xlarge, minSize: 1, desiredCapacity: 1, maxSize: 1,"
        " availabilityZones: [us-west-2d], efaEnabled: true}\n"
    ))


def test_neuron_group_needs_neuron_and_efa_devices() -> None:
    g = _trn_plan().node_group("trn")
    good = verify.check_node(_node("t", "trn", "trn1.32xlarge", {NEURON_RESOURCE: "16", EFA_RESOURCE: "8"}), g)
    assert good.status == "pass" and (good.neuron, good.efa) == (16, 8)
    bad = verify.check_node(_node("t", "trn", "trn1.32xlarge", {EFA_RESOURCE: "8"}), g)
    assert bad.status == "fail" and "Neuron device plugin" in bad.fixes[0]


def test_nodes_of_groups_not_in_the_spec_are_reported() -> None:
    items = nodes("nodes_ready.json").items + [_node("stray", group="old-group")]
    result = verify.check_nodes(PLAN, items)
    assert result.ok and result.unexpected == ("stray (efa-stack.io/node-group=old-group)",)


def test_nodes_are_listed_by_the_node_group_label() -> None:
    core = FakeCore([nodes("nodes_ready.json")])
    cluster.list_nodes(core)
    assert core.calls[0][2] == {"label_selector": "efa-stack.io/node-group"}


def test_api_refusal_is_a_clear_error() -> None:
    core = FakeCore(error=ApiException(status=403, reason="Forbidden"))
    with pytest.raises(UserError) as err:
        cluster.list_nodes(core)
    assert "refused to list nodes (403 Forbidden)" in err.value.message
    assert "update-kubeconfig" in err.value.fix


# --- waiting -------------------------------------------------------------------------------------


def test_waits_until_nodes_match_without_real_sleep() -> None:
    core = FakeCore([nodes("nodes_joining.json"), nodes("nodes_joining.json"), nodes("nodes_ready.json")])
    clock = Clock()
    seen: list[int] = []
    result = verify.wait_for_nodes(
        PLAN, core, timeout=600, interval=15, clock=clock, sleep=clock.sleep, on_poll=lambda r: seen.append(r.matching_nodes)
    )
    assert result.ok
    assert clock.slept == [15, 15]
    assert seen == [2, 2, 4]


def test_gives_up_when_the_timeout_passes() -> None:
    core = FakeCore([nodes("nodes_too_few.json")])
    clock = Clock()
    result = verify.wait_for_nodes(PLAN, core, timeout=40, interval=15, clock=clock, sleep=clock.sleep)
    assert not result.ok
    assert clock.slept == [15, 15, 10]
    assert len(core.calls) == 4


def test_timeout_zero_checks_once() -> None:
    core = FakeCore([nodes("nodes_too_few.json")])
    clock = Clock()
    verify.wait_for_nodes(PLAN, core, timeout=0, interval=15, clock=clock, sleep=clock.sleep)
    assert clock.slept == [] and len(core.calls) == 1


# --- the NCCL-tests MPIJob -----------------------------------------------------------------------


def _launcher_core(node_list: str = "nodes_ready.json", log: str | None = None) -> FakeCore:
    return FakeCore([nodes(node_list)], pods=_model("launcher_pods.json", "V1PodList"),
                    log=_text("launcher.log") if log is None else log)


def test_starts_the_suspended_job_and_reads_the_launcher_log() -> None:
    core = _launcher_core()
    custom = FakeCustom([job("mpijob_suspended.json"), job("mpijob_running.json"), job("mpijob_succeeded.json")])
    clock = Clock()
    outcome = verify.run_nccl_job(core, custom, PLAN.node_group("p5"), verify.VerifyOptions(job_timeout=600, interval=10, clock=clock, sleep=clock.sleep))
    assert outcome.state == "Succeeded" and outcome.started_by_us
    args, kwargs = custom.patches[0]
    assert args == ("kubeflow.org", "v2beta1", "default", "mpijobs", "nccl-tests-p5", {"spec": {"runPolicy": {"suspend": False}}})
    assert kwargs == {"_content_type": "application/merge-patch+json"}
    assert clock.slept == [10]
    pods_call = next(c for c in core.calls if c[0] == "list_namespaced_pod")
    assert pods_call[2]["label_selector"] == "training.kubeflow.org/job-name=nccl-tests-p5,training.kubeflow.org/job-role=launcher"
    log_call = next(c for c in core.calls if c[0] == "read_namespaced_pod_log")
    assert log_call[1] == ("nccl-tests-p5-launcher-7xk2p", "default")
    assert outcome.log == _text("launcher.log")


def test_a_queued_job_is_started_by_putting_it_in_its_kueue_queue() -> None:
    # the job carries its queue in efa-stack.io/kueue-queue (k8s/nccl_tests.py): starting it adds the queue label,
    # and Kueue un-suspends it once admitted; verify never un-suspends it itself
    suspended = job("mpijob_suspended.json")
    suspended["metadata"].setdefault("annotations", {})["efa-stack.io/kueue-queue"] = "efa-stack-jobs"
    custom = FakeCustom([suspended, job("mpijob_succeeded.json")])
    clock = Clock()
    outcome = verify.run_nccl_job(_launcher_core(), custom, PLAN.node_group("p5"), verify.VerifyOptions(job_timeout=600, interval=10, clock=clock, sleep=clock.sleep))
    assert outcome.state == "Succeeded" and outcome.started_by_us
    (args, kwargs), = custom.patches
    assert args[-1] == {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "efa-stack-jobs"}}}
    assert kwargs == {"_content_type": "application/merge-patch+json"}


def test_failed_job_reports_the_condition() -> None:
    custom = FakeCustom([job("mpijob_suspended.json"), job("mpijob_failed.json")])
    clock = Clock()
    outcome = verify.run_nccl_job(_launcher_core(log="NCCL WARN boom"), custom, PLAN.node_group("p5"),
                                  verify.VerifyOptions(job_timeout=600, interval=10, clock=clock, sleep=clock.sleep))
    assert outcome.state == "Failed"
    assert "MPIJobFailed" in outcome.message and "1 Job(s) failed" in outcome.message
    assert outcome.log == "NCCL WARN boom"


def test_running_job_is_followed_not_patched() -> None:
    custom = FakeCustom([job("mpijob_running.json"), job("mpijob_succeeded.json")])
    clock = Clock()
    outcome = verify.run_nccl_job(_launcher_core(), custom, PLAN.node_group("p5"), verify.VerifyOptions(job_timeout=600, interval=10, clock=clock, sleep=clock.sleep))
    assert outcome.state == "Succeeded" and not outcome.started_by_us and custom.patches == []


def test_a_job_that_already_finished_is_read_not_rerun() -> None:
    custom = FakeCustom([job("mpijob_succeeded.json")])
    outcome = verify.run_nccl_job(_launcher_core(), custom, PLAN.node_group("p5"), verify.VerifyOptions(job_timeout=60, interval=20))
    assert outcome.state == "Succeeded" and custom.patches == []
    assert "had finished before this run" in outcome.message


def test_job_that_never_finishes_times_out() -> None:
    custom = FakeCustom([job("mpijob_suspended.json"), job("mpijob_running.json")])
    clock = Clock()
    outcome = verify.run_nccl_job(_launcher_core(), custom, PLAN.node_group("p5"), verify.VerifyOptions(job_timeout=60, interval=20, clock=clock, sleep=clock.sleep))
    assert outcome.state == "Timeout" and sum(clock.slept) == 60


def test_missing_job_is_reported_as_not_found() -> None:
    custom = FakeCustom([ApiException(status=404, reason="Not Found")])
    outcome = verify.run_nccl_job(_launcher_core(), custom, PLAN.node_group("p5"), verify.VerifyOptions(job_timeout=60, interval=20))
    assert outcome.state == "NotFound" and "dist/<cluster>/apply.sh" in outcome.message


def test_the_charts_target_group_is_tested_by_default_and_unknown_groups_are_refused() -> None:
    assert verify.pick_node_group(PLAN, None).name == "p5"
    with pytest.raises(UserError, match="not in the spec"):
        verify.pick_node_group(PLAN, "nope")


def _two_gpu_groups_plan() -> Any:
    """The default spec plus a second EFA GPU group: the charts render the NCCL job for p5 only."""
    text = (ROOT / "clusters" / "default.yaml").read_text().replace(
        "systemNodeGroup:",
        "  - {name: spare, instanceType: p5.48xlarge, minSize: 1, desiredCapacity: 1, maxSize: 1,\n"
        "     availabilityZones: [us-west-2a], efaEnabled: true}\n\nsystemNodeGroup:",
    )
    return build_plan(parse_spec(text))


def test_fails_run_nccl_on_a_group_without_a_rendered_job() -> None:
    # GIVEN two EFA GPU groups, of which only p5 has an NCCL-tests MPIJob
    plan = _two_gpu_groups_plan()
    assert [j.node_group for j in plan.nccl_jobs] == ["p5"]
    # WHEN verify is asked to run the NCCL test on the other group
    with pytest.raises(UserError) as info:
        verify.pick_node_group(plan, "spare")
    # THEN it refuses, naming the groups that have a job
    assert "'spare' has no NCCL-tests MPIJob" in info.value.message and "--node-group p5" in info.value.fix
    assert verify.pick_node_group(plan, "p5").name == "p5"


def test_fails_run_nccl_on_the_system_group() -> None:
    with pytest.raises(UserError, match="has no NCCL-tests MPIJob"):
        verify.pick_node_group(PLAN, "system")


def test_a_spec_without_an_nccl_job_is_refused() -> None:
    with pytest.raises(UserError, match="makes no NCCL-tests MPIJob"):
        verify.pick_node_group(_trn_plan(), None)


# --- the whole command ---------------------------------------------------------------------------


@pytest.fixture
def fake_report(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A stand-in for nccl-report's parse -> judge -> model step that records what verify hands it."""
    calls: list[dict[str, Any]] = []

    def report_from_text(text, source, *, instance_type=None, nodes=None, threshold=0.7, plot=None):
        calls.append({"log": text, "source": source, "instance_type": instance_type, "nodes": nodes,
                      "plot": plot, "threshold": threshold})
        return nccl_report.Report(exit_code=0)

    monkeypatch.setattr(verify, "report_from_text", report_from_text)
    return calls


EMPTY_REPORT: dict[str, Any] = {"runs": [], "comparisons": [], "hosts": None, "plot": None, "exit_code": 0, "error": None}


def _run(core: FakeCore, custom: FakeCustom | None = None, **kw: Any) -> tuple[int, str, list[str]]:
    buf = io.StringIO()
    echoed: list[str] = []
    clock = Clock()
    code = verify.run_verify(
        PLAN, core, custom, verify.VerifyOptions(clock=clock, sleep=clock.sleep, **kw),
        console=Console(file=buf, width=220, color_system=None), echo=echoed.append,
    )
    return code, buf.getvalue(), echoed


def test_verify_prints_the_node_table_and_passes() -> None:
    code, out, _ = _run(FakeCore([nodes("nodes_ready.json")]), timeout=0)
    assert code == 0
    assert P1 in out and "32/32" in out and "8/8" in out and "OK: 4/4 nodes match" in out


def test_verify_fails_with_the_fix_when_efa_is_missing() -> None:
    code, out, _ = _run(FakeCore([nodes("nodes_missing_efa.json")]), timeout=30, interval=10)
    assert code == 1
    assert "no vpc.amazonaws.com/efa in allocatable" in out and "EFA device plugin" in out
    assert "FAIL: 3/4 nodes match" in out


def test_verify_json_lists_groups_and_nodes() -> None:
    code, _, echoed = _run(FakeCore([nodes("nodes_too_few.json")]), timeout=0, json_out=True)
    doc = json.loads(echoed[0])
    assert code == 1 and doc["ok"] is False and doc["cluster"] == "efa-training"
    p5 = next(g for g in doc["groups"] if g["name"] == "p5")
    assert p5["status"] == "fail" and p5["found"] == 1


def test_verify_does_not_start_nccl_on_a_mismatched_cluster(fake_report: list) -> None:
    custom = FakeCustom([job("mpijob_suspended.json")])
    code, out, _ = _run(FakeCore([nodes("nodes_missing_efa.json")]), custom, timeout=0, run_nccl=True)
    assert code == 1 and custom.patches == [] and custom.gets == 0 and fake_report == []
    assert "NCCL test was not started" in out


def test_verify_hands_the_launcher_log_to_nccl_report(fake_report: list) -> None:
    custom = FakeCustom([job("mpijob_suspended.json"), job("mpijob_succeeded.json")])
    code, out, _ = _run(_launcher_core(), custom, timeout=0, run_nccl=True)
    assert code == 0
    assert fake_report == [{"log": _text("launcher.log"), "source": "nccl-tests-p5-launcher.log",
                            "instance_type": "p5.48xlarge", "nodes": 2, "plot": None, "threshold": 0.7}]
    assert "MPIJob nccl-tests-p5 succeeded" in out


def test_verify_json_embeds_the_nccl_report(fake_report: list) -> None:
    custom = FakeCustom([job("mpijob_succeeded.json")])
    code, _, echoed = _run(_launcher_core(), custom, timeout=0, run_nccl=True, json_out=True, threshold=0.5)
    doc = json.loads(echoed[0])
    assert code == 0 and doc["nccl"]["state"] == "Succeeded" and doc["nccl"]["report"] == EMPTY_REPORT
    assert fake_report[0]["threshold"] == 0.5 and len(echoed) == 1  # one JSON document, the report inside it


def test_verify_exits_1_when_the_job_fails(fake_report: list) -> None:
    custom = FakeCustom([job("mpijob_suspended.json"), job("mpijob_failed.json")])
    core = _launcher_core(log="[1,0]<stderr>: NCCL WARN NET/OFI Unable to find a libfabric provider\nmpirun exited")
    code, out, _ = _run(core, custom, timeout=0, run_nccl=True)
    assert code == 1 and fake_report == []
    assert "MPIJob nccl-tests-p5 failed: MPIJobFailed" in out
    assert "Unable to find a libfabric provider" in out
    assert "kubectl -n default describe mpijob nccl-tests-p5" in out


def test_verify_with_the_real_nccl_report() -> None:
    custom = FakeCustom([job("mpijob_succeeded.json")])
    code, _, echoed = _run(_launcher_core(), custom, timeout=0, run_nccl=True, json_out=True)
    doc = json.loads(echoed[0])
    assert doc["nccl"]["report_exit_code"] == code == 0
    assert isinstance(doc["nccl"]["report"], dict)


def test_verify_api_errors_exit_2() -> None:
    code, out, _ = _run(FakeCore(error=ApiException(status=401, reason="Unauthorized")), timeout=0)
    assert code == 2 and "refused to list nodes" in out


def test_verify_refuses_an_unknown_node_group_for_nccl() -> None:
    code, out, _ = _run(FakeCore([nodes("nodes_ready.json")]), FakeCustom([]), timeout=0, run_nccl=True, node_group="nope")
    assert code == 2 and "node group 'nope' is not in the spec" in out


def test_verify_prints_the_real_nccl_report_in_its_own_console() -> None:
    # the launcher log goes to nccl-report's functions in memory: its tables land in verify's console
    custom = FakeCustom([job("mpijob_succeeded.json")])
    code, out, _ = _run(_launcher_core(), custom, timeout=0, run_nccl=True)
    assert code == 0
    assert "MPIJob nccl-tests-p5 succeeded" in out and "verdict: " in out


def test_verify_reports_an_unreadable_launcher_log_as_nccl_reports_error() -> None:
    custom = FakeCustom([job("mpijob_succeeded.json")])
    code, _, echoed = _run(_launcher_core(log="mpirun: nothing ran\n"), custom, timeout=0, run_nccl=True,
                           json_out=True)
    doc = json.loads(echoed[0])
    assert code == 2 == doc["nccl"]["report_exit_code"] == doc["nccl"]["report"]["exit_code"]
    assert doc["nccl"]["report"]["runs"] == [] and doc["nccl"]["report"]["error"]["message"]
    buf = io.StringIO()
    clock = Clock()
    code = verify.run_verify(PLAN, _launcher_core(log="mpirun: nothing ran\n"), FakeCustom([job("mpijob_succeeded.json")]),
                             verify.VerifyOptions(timeout=0, run_nccl=True, clock=clock, sleep=clock.sleep),
                             console=Console(file=buf, width=220, color_system=None))
    assert code == 2 and "error: " in buf.getvalue()


def test_verify_options_refuse_quarantine_without_acceptance() -> None:
    with pytest.raises(UserError, match="--quarantine only acts on the verdicts of --acceptance"):
        verify.VerifyOptions(quarantine=True).check(PLAN)


def test_verify_json_error_is_one_document_with_the_cluster() -> None:
    code, _, echoed = _run(FakeCore(error=ApiException(status=401, reason="Unauthorized")), timeout=0, json_out=True)
    doc = json.loads(echoed[0])
    assert code == 2 and doc["cluster"] == "efa-training" and doc["ok"] is False
    assert "refused to list nodes" in doc["error"] and "access entry" in doc["fix"]
