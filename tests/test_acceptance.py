"""verify --acceptance: per-node checks, pairwise NCCL, verdicts and quarantine, against recorded responses.

Fake CoreV1Api/CustomObjectsApi objects (every call checked against the real client method's signature)
replay the node list of tests/fixtures/acceptance/nodes_p5x4.json, pod phases, the check pods' logs and
the pair MPIJobs' launcher logs (see tests/fixtures/acceptance/SOURCES.md); nothing touches a network.
"""

from __future__ import annotations

import inspect
import io
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from rich.console import Console

from efa_stack import contract
from efa_stack.acceptance import checks, judge
from efa_stack.acceptance.model import Evidence, PairResult
from efa_stack.acceptance.run import AcceptanceOptions, run_acceptance
from efa_stack.errors import UserError
from efa_stack.planning.plan import plan_from_file
from efa_stack.spec.models import KUBERNETES_VERSIONS
from efa_stack.tools import verify
from k8s import acceptance as manifests
from tests.fixtures.acceptance.make_fixtures import NODE_LOGS, made_log

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).resolve().parent / "fixtures" / "acceptance"
PLAN = plan_from_file(ROOT / "clusters" / "default.yaml")
NODES = [f"ip-10-0-96-{i}.us-west-2.compute.internal" for i in (11, 12, 13, 14)]
GOOD_PAIR = (Path(__file__).resolve().parent / "fixtures" / "nccl" / "p5.48xlarge-2node-efa-mpijob-table.log").read_text()


def _text(name: str) -> str:
    """A fixture of tests/fixtures/acceptance/, or the check pod's log ``make_fixtures.NODE_LOGS`` names."""
    return made_log(name) if name in NODE_LOGS else (FIX / name).read_text()


def _bind(method: Any, *args: Any, **kwargs: Any) -> None:
    inspect.signature(method).bind(None, *args, **kwargs)


class FakeCore:
    def __init__(self, logs: dict[str, str], nodes: str = "nodes_p5x4.json", phase: str = "Succeeded"):
        self.node_list = client.ApiClient().deserialize(_text(nodes), "V1NodeList", "application/json")
        self.logs = {manifests.pod_name(n): log for n, log in logs.items()}
        self.phase = phase
        self.pair_logs: dict[str, str] = {}
        self.created: list[dict[str, Any]] = []
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.deleted: list[str] = []

    def list_node(self, *a: Any, **k: Any) -> Any:
        _bind(client.CoreV1Api.list_node, *a, **k)
        return self.node_list

    def create_namespaced_pod(self, *a: Any, **k: Any) -> Any:
        _bind(client.CoreV1Api.create_namespaced_pod, *a, **k)
        self.created.append(a[1])

    def delete_namespaced_pod(self, *a: Any, **k: Any) -> Any:
        _bind(client.CoreV1Api.delete_namespaced_pod, *a, **k)
        self.deleted.append(a[0])

    def read_namespaced_pod(self, *a: Any, **k: Any) -> Any:
        _bind(client.CoreV1Api.read_namespaced_pod, *a, **k)
        return client.V1Pod(status=client.V1PodStatus(phase=self.phase))

    def read_namespaced_pod_log(self, *a: Any, **k: Any) -> str:
        _bind(client.CoreV1Api.read_namespaced_pod_log, *a, **k)
        name = a[0]
        return self.pair_logs.get(name.removesuffix("-launcher-abcde"), self.logs.get(name, ""))

    def list_namespaced_pod(self, *a: Any, **k: Any) -> Any:
        _bind(client.CoreV1Api.list_namespaced_pod, *a, **k)
        job = k["label_selector"].split(",")[0].split("=")[1]
        return client.V1PodList(items=[client.V1Pod(metadata=client.V1ObjectMeta(name=f"{job}-launcher-abcde"))])

    def read_node(self, *a: Any, **k: Any) -> Any:
        _bind(client.CoreV1Api.read_node, *a, **k)
        return next(n for n in self.node_list.items if n.metadata.name == a[0])

    def patch_node(self, *a: Any, **k: Any) -> Any:
        _bind(client.CoreV1Api.patch_node, *a, **k)
        self.patches.append((a[0], a[1]))


class FakeCustom:
    """MPIJobs: created, immediately Succeeded; the launcher log is slow when a slow node is among the workers."""

    def __init__(self, core: FakeCore, slow: set[str]):
        self.core, self.slow = core, slow
        self.created: list[dict[str, Any]] = []

    def create_namespaced_custom_object(self, *a: Any, **k: Any) -> Any:
        _bind(client.CustomObjectsApi.create_namespaced_custom_object, *a, **k)
        body = a[4]
        self.created.append(body)
        worker = body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        pinned = set(worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                     ["nodeSelectorTerms"][0]["matchFields"][0]["values"])
        self.core.pair_logs[body["metadata"]["name"]] = _text("pair_slow.log") if pinned & self.slow else GOOD_PAIR

    def get_namespaced_custom_object(self, *a: Any, **k: Any) -> Any:
        _bind(client.CustomObjectsApi.get_namespaced_custom_object, *a, **k)
        return {"status": {"conditions": [{"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded"}]}}

    def delete_namespaced_custom_object(self, *a: Any, **k: Any) -> Any:
        _bind(client.CustomObjectsApi.delete_namespaced_custom_object, *a, **k)


def _run(logs: dict[str, str], slow: set[str] = frozenset(), **kw: Any) -> tuple[Any, FakeCore, FakeCustom]:  # type: ignore[assignment]
    core = FakeCore(logs)
    custom = FakeCustom(core, set(slow))
    report = run_acceptance(PLAN, core, custom, AcceptanceOptions(node_group="p5", clock=lambda: 0.0,
                                                                  sleep=lambda s: None, **kw))
    return report, core, custom


def _healthy() -> dict[str, str]:
    return {n: _text("node_pass.log") for n in NODES}


def _verdict(report: Any, node: str) -> Any:
    return next(v for v in report.nodes if v.node == node)


# --- the section reader and single checks ----------------------------------------------------------


def test_sections_are_read_back_with_exit_codes_and_skips() -> None:
    s = checks.parse_sections(_text("node_dcgm_failed.log") + "=== efa-stack-check BEGIN x ===\nhalf")
    assert s["dcgm"].rc == 226 and s["gpu-count"].rc == 0
    assert not s["x"].complete
    skipped = checks.parse_sections("=== efa-stack-check BEGIN dcgm ===\nskipped: image has no dcgmi\n"
                                    "=== efa-stack-check END dcgm rc=skipped ===")
    e = checks.judge_dcgm(skipped["dcgm"], 2)
    assert e.status == "skipped" and "image has no dcgmi" in e.measured


def test_fails_dcgm_memory_test_naming_the_gpu_and_warning() -> None:
    s = checks.Section("dcgm", _text("dcgm_diag_r2_memory_fail.json"), 226)
    e = checks.judge_dcgm(s, 2)
    assert e.status == "failed"
    assert "memory (GPU 3: Pending page retirements" in e.measured and "DCGM 4.6.0" in e.measured


def _schema_errors(doc_file: str, schema_file: str) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft4Validator(json.loads(_text(schema_file)))
    return [e.message for e in validator.iter_errors(json.loads(_text(doc_file)))]


@pytest.mark.parametrize(("doc", "schema"), [
    ("dcgm_diag_r2_pass.json", "dcgm_diag_schema-v4.6.0.json"),
    ("dcgm_diag_r2_memory_fail.json", "dcgm_diag_schema-v4.6.0.json"),
    ("dcgm_diag_runtime_error.json", "dcgm_diag_schema-v4.6.0.json"),
    ("dcgm_diag_r1_3x_memory_fail.json", "dcgm_diag_schema-v3.3.9.json"),
])
def test_dcgm_fixtures_match_the_upstream_schema_of_their_version(doc: str, schema: str) -> None:
    assert _schema_errors(doc, schema) == []


def test_fails_schema_check_of_a_3x_document_against_the_4x_schema() -> None:
    assert any("'DCGM Diagnostic' is a required property" in e
               for e in _schema_errors("dcgm_diag_r1_3x_memory_fail.json", "dcgm_diag_schema-v4.6.0.json"))


def test_fails_dcgm_3x_layout_naming_the_gpu_and_the_version() -> None:
    e = checks.judge_dcgm(checks.Section("dcgm", _text("dcgm_diag_r1_3x_memory_fail.json"), 226), 1)
    assert e.status == "failed" and e.measured.startswith("DCGM 3.3.9: 1 test(s) failed: GPU Memory (GPU 5: Pending")


def test_fails_dcgm_runtime_error_with_the_version_and_message() -> None:
    e = checks.judge_dcgm(checks.Section("dcgm", _text("dcgm_diag_runtime_error.json"), 1), 2)
    assert (e.status, e.measured) == ("failed", "DCGM 4.6.0: runtime error") and "could not start" in e.detail


def test_dcgm_container_runs_privileged_from_the_pinned_image_and_hands_its_gpus_on() -> None:
    from k8s.images import DCGM_IMAGE

    _, core, _ = _run(_healthy())
    dcgm = core.created[0]["spec"]["initContainers"][0]
    assert dcgm["image"] == DCGM_IMAGE == "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"
    assert dcgm["securityContext"] == {"privileged": True, "runAsUser": 0}
    # a restartable (sidecar) init container would keep its GPUs from the app container
    assert "restartPolicy" not in dcgm


def test_every_rendered_check_pod_and_pair_job_is_valid_kubernetes() -> None:
    import kubernetes_validate

    from tests.support import crd_schema, schema_validate

    _, core, custom = _run(_healthy(), slow={NODES[1]})
    for pod in core.created:
        kubernetes_validate.validate(pod, KUBERNETES_VERSIONS[0], strict=True)
    for job in custom.created:
        schema_validate(job, crd_schema())
        for role, replica in job["spec"]["mpiReplicaSpecs"].items():
            kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "template": replica["template"],
                                          "metadata": {"name": f"{job['metadata']['name']}-{role.lower()}"}},
                                         KUBERNETES_VERSIONS[0], strict=True)


def test_dcgm_3x_key_without_test_summary_is_read() -> None:
    doc = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "GPU Memory", "results": [{"gpu_id": "0", "status": "Fail"}]}]}]}}
    assert checks.judge_dcgm(checks.Section("dcgm", json.dumps(doc), 0), 1).status == "failed"


def test_fails_missing_efa_device() -> None:
    s = checks.parse_sections(_text("node_missing_efa.log"))
    e = checks.judge_efa_devices(s["efa-devices"], 32)
    assert (e.status, e.measured) == ("failed", "31 EFA RDM domains")


def test_fails_pingpong_that_exits_non_zero() -> None:
    e = checks.judge_pingpong(checks.Section("efa-pingpong", "fi_getinfo(): -61 (No data available)", 1))
    assert e.status == "failed" and "No data available" in e.detail


def test_single_node_nccl_below_the_nvlink_mark_is_slow_and_pcie_gpus_are_not_judged() -> None:
    s = checks.parse_sections(_text("node_slow_nvlink.log"))["nccl-single"]
    e = judge.judge_nccl_single(s, "H100", 8, "n")
    assert e.status == "slow" and e.measured.startswith("290 GB/s") and "0.8 x 460 GB/s, published" in e.expected
    assert judge.judge_nccl_single(s, "A10G", 8, "n").status == "pass"
    assert judge.nvlink_expectation("H200").kind.startswith("derived")  # type: ignore[union-attr]


def test_attribution_names_the_slow_member_of_a_slow_pair() -> None:
    r1 = [PairResult(1, ("a", "b"), "j0", "slow", 200.0, "below"), PairResult(1, ("c", "d"), "j1", "pass", 444.0, "ok")]
    assert judge.good_peer(r1) == "c" and judge.suspects(r1, "e") == ["a", "b", "e"]
    r2 = [PairResult(2, ("c", "a"), "k0", "pass", 440.0, "ok"), PairResult(2, ("c", "b"), "k1", "slow", 190.0, "below"),
          PairResult(2, ("c", "e"), "k2", "pass", 441.0, "ok")]
    out = judge.attribute_pairs(r1, r2, "e")
    assert {n: e.status for n, e in out.items()} == {"a": "pass", "b": "slow", "c": "pass", "d": "pass", "e": "pass"}
    assert "round 1 with a was slow" in out["b"].detail


def test_one_slow_pair_and_no_good_peer_is_ambiguous_and_names_no_node() -> None:
    # GIVEN the only pair is slow, so there is no known-good peer to re-test against
    r1 = [PairResult(1, ("a", "b"), "j0", "slow", 200.0, "below")]
    # WHEN the pairs are attributed THEN neither node is named slow: both are ambiguous, as nccl-report says
    out = judge.attribute_pairs(r1, [], None)
    assert {n: e.status for n, e in out.items()} == {"a": "ambiguous", "b": "ambiguous"}
    assert judge.pair_analysis(r1, []).status == "ambiguous" and "no host named" in out["a"].detail


def test_attribution_and_nccl_report_name_the_same_hosts() -> None:
    from efa_stack.nccl_report.hosts import find_slow_hosts

    r1 = [PairResult(1, ("a", "b"), "j0", "slow", 200.0, "x"), PairResult(1, ("c", "d"), "j1", "slow", 190.0, "x")]
    out = judge.attribute_pairs(r1, [], None)
    assert find_slow_hosts(judge.pair_runs(r1)).slow_hosts == ()
    assert {e.status for e in out.values()} == {"ambiguous"}


def test_a_pair_slow_only_together_is_a_suspect_link_and_both_nodes_pass() -> None:
    r1 = [PairResult(1, ("a", "b"), "j0", "slow", 200.0, "x"), PairResult(1, ("c", "d"), "j1", "pass", 444.0, "ok")]
    r2 = [PairResult(2, ("c", "a"), "k0", "pass", 440.0, "ok"), PairResult(2, ("c", "b"), "k1", "pass", 441.0, "ok")]
    out = judge.attribute_pairs(r1, r2, None)
    assert {e.status for e in out.values()} == {"pass"} and "suspect link a <-> b" in out["a"].detail


def test_ambiguous_nodes_fail_acceptance_but_are_not_quarantined() -> None:
    # GIVEN two nodes whose only pair is slow WHEN acceptance runs with --quarantine
    core = FakeCore({n: _text("node_pass.log") for n in NODES[:2]})
    core.node_list.items = core.node_list.items[:2]
    report = run_acceptance(PLAN, core, FakeCustom(core, {NODES[0]}), AcceptanceOptions(
        node_group="p5", quarantine=True, clock=lambda: 0.0, sleep=lambda s: None))
    # THEN the report is not OK, both are ambiguous, nothing is tainted, and a note says why
    assert not report.ok and [v.status for v in report.nodes] == ["ambiguous", "ambiguous"]
    assert core.patches == [] and any(n.startswith("pair tests (ambiguous)") for n in report.notes)


# --- what the node runs, against the table of EFA software ----------------------------------------------


def test_node_software_is_read_from_its_sections_and_passes_on_p5() -> None:
    sections = checks.parse_sections(_text("node_pass.log"))
    assert checks.node_software(sections) == {
        "nvidiaDriver": "580.159.03", "efaDriver": "3.1.0", "libfabric": "2.4.0amzn5.0"}
    e = checks.judge_software(sections, "p5.48xlarge")
    assert e.status == "pass"
    assert e.measured == "NVIDIA driver 580.159.03, EFA driver 3.1.0, libfabric 2.4.0amzn5.0"


def test_fails_p6e_node_on_an_r595_driver_with_the_rows_fix_and_source() -> None:
    # GIVEN a node whose nvidia-smi reports 595.91.07 WHEN judged as a p6e-gb200 node THEN the R595 row fails it
    sections = checks.parse_sections(_text("node_r595_driver.log"))
    e = checks.judge_software(sections, "p6e-gb200.36xlarge")
    assert e.status == "failed" and "NVIDIA driver 595.91.07" in e.measured
    assert "nvidia-r595-p6e-efa" in e.detail and "NVIDIA/aicr#2383" in e.detail and "R580" in e.detail
    # the row is about P6e: the same driver on p5 passes
    assert checks.judge_software(sections, "p5.48xlarge").status == "pass"


def test_software_is_skipped_when_the_node_log_has_no_versions() -> None:
    sections = {k: v for k, v in checks.parse_sections(_text("node_pass.log")).items()
                if k not in ("nvidia-driver", "efa-driver", "libfabric")}
    e = checks.judge_software(sections, "p5.48xlarge")
    assert e.status == "skipped" and "not read" in e.measured


def test_a_failed_or_garbled_version_section_is_not_read() -> None:
    log = ("=== efa-stack-check BEGIN nvidia-driver ===\nNVIDIA-SMI has failed\n"
           "=== efa-stack-check END nvidia-driver rc=9 ===\n"
           "=== efa-stack-check BEGIN efa-driver ===\ncat: /sys/module/efa/version: No such file or directory\n"
           "=== efa-stack-check END efa-driver rc=1 ===\n"
           "=== efa-stack-check BEGIN libfabric ===\n/opt/amazon/efa/bin/fi_info: 2.4.0amzn3.0\nlibfabric api: 2.4\n"
           "=== efa-stack-check END libfabric rc=0 ===\n")
    assert checks.node_software(checks.parse_sections(log)) == {
        "nvidiaDriver": None, "efaDriver": None, "libfabric": None}


def test_check_script_prints_the_three_version_sections(tmp_path: Path) -> None:
    # GIVEN fakes of the node mode's tools: nvidia-smi answering the driver query, fi_info --version, and a module dir
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {
        "nvidia-smi": 'case "$*" in *driver_version*) printf "580.159.03\\n580.159.03\\n";; esac\n',
        "fi_info": 'case "$*" in --version) printf "fi_info: 2.4.0amzn5.0\\nlibfabric: 2.4.0amzn5.0\\nlibfabric api: 2.4\\n";; esac\n',
        "all_reduce_perf": "exit 0\n", "fi_pingpong": "exit 0\n", "sleep": "exit 0\n", "timeout": "exit 0\n",
    }
    for name, body in fakes.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    module = tmp_path / "efa"
    module.mkdir()
    (module / "version").write_text("3.1.0g\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "EFA_MODULE_DIR": str(module)}
    out = subprocess.run(["bash", str(manifests.CHECK_SCRIPT), "node", "8", "32", str(tmp_path / "none")],
                         env=env, check=True, capture_output=True, text=True, timeout=60).stdout
    # THEN the sections read back into the facts the table's rows are written in
    assert checks.node_software(checks.parse_sections(out)) == {
        "nvidiaDriver": "580.159.03", "efaDriver": "3.1.0", "libfabric": "2.4.0amzn5.0"}


# --- whole runs --------------------------------------------------------------------------------------


def test_healthy_cluster_passes_with_pods_pinned_and_sized_from_the_plan() -> None:
    report, core, custom = _run(_healthy())
    assert report.ok and [v.status for v in report.nodes] == ["pass"] * 4
    pod = core.created[0]
    spec = pod["spec"]
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchFields"] == [{"key": "metadata.name", "operator": "In", "values": [NODES[0]]}]
    res = spec["containers"][0]["resources"]["limits"]
    g = PLAN.node_group("p5")
    assert res[contract.GPU_RESOURCE] == str(g.gpus_per_node) and res[contract.EFA_RESOURCE] == str(g.efa_devices_per_node)
    assert res[contract.HUGEPAGES_2MI_RESOURCE] == f"{g.hugepages_2mi_mib}Mi"
    assert {"key": contract.QUARANTINE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["initContainers"][0]["command"][4:] == ["dcgm", "2", manifests.DCGM_RESULT]
    assert [b["metadata"]["name"] for b in custom.created] == ["accept-p5-r1-0", "accept-p5-r1-1"]
    assert set(core.deleted) == {manifests.pod_name(n) for n in NODES}


def test_one_slow_node_is_named_and_its_partner_cleared() -> None:
    report, _, custom = _run(_healthy(), slow={NODES[1]})
    assert {v.node: v.status for v in report.nodes} == dict.fromkeys(NODES, "pass") | {NODES[1]: "slow"}
    pair_ev = next(e for e in _verdict(report, NODES[1]).evidence if e.check == "nccl-pair")
    assert pair_ev.measured.startswith(f"199.94 GB/s busbw with {NODES[2]}") and "round 2" in pair_ev.detail
    assert [b["metadata"]["name"] for b in custom.created][2:] == ["accept-p5-r2-0", "accept-p5-r2-1"]
    assert not report.ok and report.to_json()["summary"] == {"pass": 3, "slow": 1, "failed": 0, "ambiguous": 0}


def test_fails_node_with_failed_dcgm_and_leaves_it_out_of_pair_tests() -> None:
    logs = _healthy() | {NODES[2]: _text("node_dcgm_failed.log")}
    report, _, custom = _run(logs)
    v = _verdict(report, NODES[2])
    assert v.status == "failed" and v.reason() == "dcgm-failed"
    assert all(NODES[2] not in json.dumps(b["spec"]["mpiReplicaSpecs"]["Worker"]) for b in custom.created)
    assert _verdict(report, NODES[3]).status == "pass"  # the odd node out was tested against a good peer


def test_fails_node_with_a_missing_efa_device() -> None:
    report, _, _ = _run(_healthy() | {NODES[3]: _text("node_missing_efa.log")})
    v = _verdict(report, NODES[3])
    assert v.status == "failed" and v.reason() == "efa-devices-failed"
    assert any(e.line().startswith("efa-devices: failed: measured 31 EFA RDM domains") for e in v.evidence)


def test_fails_node_whose_driver_hits_a_known_bad_row_for_its_instance_type(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_node_software import synthetic_r595_on_p5

    synthetic_r595_on_p5(monkeypatch)  # SYNTHETIC: a copy of the R595 row that names p5.48xlarge
    report, _, _ = _run(_healthy() | {NODES[3]: _text("node_r595_driver.log")})
    v = _verdict(report, NODES[3])
    assert v.status == "failed" and v.reason() == "software-failed"
    (e,) = [e for e in v.evidence if e.check == "software"]
    assert "NVIDIA driver 595.91.07" in e.measured and "synthetic row of tests/test_node_software.py" in e.detail
    assert all(_verdict(report, n).status == "pass" for n in NODES[:3])


def test_quarantine_cordons_and_taints_keeping_the_nodes_own_taints() -> None:
    report, core, _ = _run(_healthy() | {NODES[2]: _text("node_dcgm_failed.log")}, slow=set(), quarantine=True)
    assert core.patches == [(NODES[2], {"spec": {"unschedulable": True, "taints": [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
        {"key": "efa-stack.io/quarantine", "value": "dcgm-failed", "effect": "NoSchedule"},
    ]}})]
    assert report.to_json()["quarantine"][0]["taint"]["value"] == "dcgm-failed"


def test_no_quarantine_without_the_flag() -> None:
    _, core, _ = _run(_healthy() | {NODES[2]: _text("node_dcgm_failed.log")})
    assert core.patches == []


def test_pod_that_never_ran_fails_with_the_timeout_fix() -> None:
    core = FakeCore(_healthy())
    core.phase = "Pending"
    report = run_acceptance(PLAN, core, FakeCustom(core, set()), AcceptanceOptions(
        node_group="p5", timeout=0, clock=lambda: 0.0, sleep=lambda s: None))
    assert all(v.status == "failed" for v in report.nodes)
    assert "raise --timeout" in report.nodes[0].evidence[0].detail


# --- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kw", "message", "fix"), [
    ({"dcgm_level": 5}, "--dcgm-level 5 is out of range", "1 (quick)"),
    ({"node_group": "gpu"}, "node group 'gpu' is not in the spec", "--node-group p5"),
    ({"node_group": "system"}, "has no NVIDIA GPUs", "--node-group"),
])
def test_fails_bad_input_with_field_and_fix(kw: dict[str, Any], message: str, fix: str) -> None:
    core = FakeCore(_healthy())
    with pytest.raises(UserError) as exc:
        run_acceptance(PLAN, core, FakeCustom(core, set()), AcceptanceOptions(**({"node_group": "p5"} | kw)))
    assert message in exc.value.message and fix in exc.value.fix


def test_fails_when_no_nodes_are_found() -> None:
    core = FakeCore(_healthy(), nodes="nodes_p5x4.json")
    core.node_list.items = []
    with pytest.raises(UserError, match="no nodes found for node group 'p5'"):
        run_acceptance(PLAN, core, FakeCustom(core, set()), AcceptanceOptions(node_group="p5"))


def test_command_prints_json_document_and_exit_code() -> None:
    core = FakeCore(_healthy() | {NODES[2]: _text("node_dcgm_failed.log")})
    out: list[str] = []
    options = verify.VerifyOptions(acceptance=True, json_out=True, node_group="p5", clock=lambda: 0.0,
                                   sleep=lambda s: None)
    code = verify.run_acceptance(PLAN, core, FakeCustom(core, set()), options, console=Console(file=io.StringIO()),
                                 echo=out.append)
    doc = json.loads(out[0])
    assert code == 1 and doc["summary"] == {"pass": 3, "slow": 0, "failed": 1, "ambiguous": 0}
    assert doc["nodes"][2]["evidence"][1]["check"] == "dcgm" and doc["nodes"][2]["evidence"][1]["status"] == "failed"
    buf = io.StringIO()
    options = verify.VerifyOptions(acceptance=True, node_group="p5", dcgm_level=0)
    code = verify.run_acceptance(PLAN, core, FakeCustom(core, set()), options, console=Console(file=buf, width=200))
    assert code == 2 and "--dcgm-level 0 is out of range" in buf.getvalue()


def test_evidence_line_names_check_measured_and_expected() -> None:
    assert Evidence("gpu-count", "failed", "7 GPUs", "8 GPUs").line() == "gpu-count: failed: measured 7 GPUs; expected 8 GPUs"


def test_every_nvlink_expectation_says_where_it_comes_from() -> None:
    # GIVEN data/nvlink.json WHEN an entry is read THEN a published figure has its source and corroboration,
    # and a derived one is half the published bidirectional NVLink bandwidth
    for gpu, e in json.loads(judge.NVLINK_FILE.read_text())["gpus"].items():
        assert e["nvlink_source"], gpu
        if e["expected_kind"] == "published":
            assert e["published_source"] and e["published_kind"] and e["corroboration"], gpu
            assert e["expected_busbw_gbytes"] == e["published_busbw_gbytes"], gpu
        else:
            assert e["expected_kind"].startswith("derived") and e["published_busbw_gbytes"] is None, gpu
            assert e["expected_busbw_gbytes"] == e["nvlink_bidirectional_gbytes"] / 2, gpu


def test_quarantine_on_a_topology_queued_group_says_when_kueue_replaces_the_node() -> None:
    from efa_stack.acceptance.run import KUEUE_REPLACEMENT_NOTE

    plan = plan_from_file(ROOT / "clusters" / "tas-p5.yaml")
    assert plan.kueue is not None and plan.kueue.binding("p5").worker_annotations
    core = FakeCore(_healthy() | {NODES[2]: _text("node_dcgm_failed.log")})
    report = run_acceptance(plan, core, FakeCustom(core, set()), AcceptanceOptions(
        node_group="p5", quarantine=True, clock=lambda: 0.0, sleep=lambda s: None))
    assert [n for n, _ in core.patches] == [NODES[2]]
    (note,) = [n for n in report.notes if n.startswith(KUEUE_REPLACEMENT_NOTE)]
    # tas-p5 asks for topology preferred: the note says the replacement may leave the domain, and how to keep it
    assert plan.kueue.mode == "preferred"
    assert "may take a free node of another bottom domain" in note and "topology: required" in note
    # without Kueue, or with nothing quarantined, the note is not given
    assert not any(n.startswith(KUEUE_REPLACEMENT_NOTE) for n in _run(
        _healthy() | {NODES[2]: _text("node_dcgm_failed.log")}, quarantine=True)[0].notes)
    clean = FakeCore(_healthy())
    assert not any(n.startswith(KUEUE_REPLACEMENT_NOTE) for n in run_acceptance(
        plan, clean, FakeCustom(clean, set()), AcceptanceOptions(
            node_group="p5", quarantine=True, clock=lambda: 0.0, sleep=lambda s: None)).notes)


def test_quarantine_with_topology_required_says_the_replacement_stays_in_the_domain() -> None:
    from efa_stack.acceptance.run import KUEUE_REPLACEMENT_NOTE

    text = (ROOT / "clusters" / "tas-p5.yaml").read_text().replace("topology: preferred", "topology: required")
    assert "topology: required" in text
    from efa_stack.planning.plan import plan_from_text

    plan = plan_from_text(text)
    core = FakeCore(_healthy() | {NODES[2]: _text("node_dcgm_failed.log")})
    report = run_acceptance(plan, core, FakeCustom(core, set()), AcceptanceOptions(
        node_group="p5", quarantine=True, clock=lambda: 0.0, sleep=lambda s: None))
    (note,) = [n for n in report.notes if n.startswith(KUEUE_REPLACEMENT_NOTE)]
    assert note.endswith("The replacement node is in the job's own bottom domain (topology: required).")


def test_no_queued_pod_tolerates_the_quarantine_taint() -> None:
    """Kueue's node replacement acts on a taint the workload's pods do not tolerate: neither the workers of the
    queued jobs nor the flavor Kueue admits them to may tolerate efa-stack's quarantine taint (nor all taints)."""
    from tests.support import built

    b = built("tas-p5")
    taint = {"key": contract.QUARANTINE_TAINT_KEY, "value": "dcgm-failed", "effect": "NoSchedule"}

    def tolerates(tolerations: list[dict[str, Any]]) -> bool:
        return any((t.get("key") in (None, "", taint["key"]) and t.get("operator") == "Exists"
                    and t.get("effect") in (None, "", taint["effect"]))
                   or (t.get("key") == taint["key"] and t.get("value") == taint["value"]) for t in tolerations)

    worker = b.mpijob()["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker.get("tolerations") and not tolerates(worker["tolerations"])
    objects = [o for _, o in b.objects()]
    flavors = [o for o in objects if o.get("kind") == "ResourceFlavor"]
    assert flavors and not any(tolerates(f["spec"].get("tolerations", [])) for f in flavors)
    # and the Kueue controller runs with its default feature gates (no --feature-gates turns the replacement off)
    (deployment,) = [o for o in objects if o.get("kind") == "Deployment"
                     and o["metadata"]["name"] == contract.KUEUE_CONTROLLER]
    args = [a for c in deployment["spec"]["template"]["spec"]["containers"] for a in c.get("args", [])]
    assert not [a for a in args if a.startswith("--feature-gates")]
