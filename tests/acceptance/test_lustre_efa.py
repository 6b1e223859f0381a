"""``verify --acceptance``'s proof that Lustre rides EFA (efa_stack/acceptance/checks.py judge_lustre_efa, the check
script and pod of k8s/acceptance.py): judged from the recorded ``lnetctl net show`` outputs of tests/fixtures/lnet/
(see the README there). The plan of EFA-enabled FSx for Lustre: tests/planning/test_lustre_efa.py."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from efa_stack.acceptance import checks
from efa_stack.acceptance.run import AcceptanceOptions, lustre_probe, run_acceptance
from efa_stack.errors import UserError
from efa_stack.planning import lustre_efa
from efa_stack.planning.plan import plan_from_file
from k8s import acceptance as manifests
from tests.support import CLUSTERS, ROOT
from tests.test_acceptance import NODES, FakeCore, FakeCustom
from tests.test_acceptance import _text as acceptance_text

LNET = ROOT / "tests" / "fixtures" / "lnet"
SPEC = CLUSTERS / "fsx-efa.yaml"
UNIT = lustre_efa.CLIENT_UNIT


def _lnet(name: str) -> str:
    return (LNET / name).read_text()


def _sections(before: str, after: str, *, unit: str = "active", write_rc: int = 0) -> dict[str, checks.Section]:
    return {
        "lnet-before": checks.Section("lnet-before", _lnet(before), 0),
        "lnet-unit": checks.Section("lnet-unit", unit, 0 if unit == "active" else 3),
        "lustre-write": checks.Section("lustre-write", "1024+0 records out" if write_rc == 0 else "dd: Input/output error",
                                       write_rc),
        "lnet-after": checks.Section("lnet-after", _lnet(after), 0),
    }


def _judge(sections: dict[str, checks.Section], expected: int | None = 8, mib: int = 1024) -> Any:
    return checks.judge_lustre_efa(sections, expected, mib, UNIT)


def test_every_lnet_fixture_is_in_the_readme_as_real_derived_or_constructed():
    readme = (LNET / "README.md").read_text()
    for path in LNET.glob("*.yaml"):
        row = next((ln for ln in readme.splitlines() if f"`{path.name}`" in ln), "")
        assert re.search(r"\*\*(real|derived|constructed)\*\*", row), path.name


def test_the_real_recording_reads_as_one_efa_interface_without_statistics():
    interfaces = checks.parse_lnet(_lnet("g6e.24xlarge-net-show.yaml"))
    assert interfaces is not None
    assert [(i.net, i.nid, i.status, i.send_count) for i in interfaces] == [
        ("lo", "0@lo", "up", None), ("tcp", "10.1.1.61@tcp", "up", None), ("efa", "1.61.92.0@efa", "up", None)]


def test_the_real_measurement_passes():
    # a 1000 MiB direct write on a g6e.24xlarge with one @efa interface: efa +1000 sends, tcp +10
    e = _judge(_sections("g6e.24xlarge-1000MiB-before.yaml", "g6e.24xlarge-1000MiB-after.yaml"), None, 1000)
    assert e.status == "pass", e.line()
    assert e.measured == ("1 @efa interfaces up, configure-efa-fsx-lustre-client active, efa send_count +1000, "
                          "tcp +10 after 1000 MiB")


def test_lustre_riding_all_eight_interfaces_passes_while_metadata_rides_tcp():
    e = _judge(_sections("p5.48xlarge-before.yaml", "p5.48xlarge-after-efa.yaml"))
    assert e.status == "pass", e.line()
    assert "efa send_count +1024, tcp +12" in e.measured


def test_fails_a_node_whose_data_rides_tcp():
    e = _judge(_sections("p5.48xlarge-before.yaml", "p5.48xlarge-after-tcp.yaml"))
    assert e.status == "failed"
    assert "efa send_count +0, tcp +2060 for 1024 bulk RPCs: Lustre's data is not riding EFA" in e.detail


def test_fails_efa_growth_below_half_the_bulk_rpcs():
    e = _judge(_sections("p5.48xlarge-before.yaml", "p5.48xlarge-after-mixed.yaml"))
    assert e.status == "failed" and "efa send_count +160, tcp +790" in e.detail


def test_fails_a_node_with_2_of_8_interfaces_even_when_traffic_rides_them():
    e = _judge(_sections("p5.48xlarge-2-of-8.yaml", "p5.48xlarge-2-of-8-after.yaml"))
    assert e.status == "failed"
    assert e.detail == (f"only 2 of the 8 @efa interfaces AWS's setup binds on this instance type: Lustre does not "
                        f"use every EFA device; on the node: journalctl -u {UNIT}")


def test_fails_lnet_without_an_efa_net_and_a_failed_unit():
    e = _judge(_sections("p5.48xlarge-tcp-only.yaml", "p5.48xlarge-tcp-only-after.yaml", unit="failed"))
    assert e.status == "failed"
    assert "no @efa interface is up (nets: lo, tcp)" in e.detail and f"{UNIT} is failed" in e.detail


def test_fails_a_failed_write():
    e = _judge(_sections("p5.48xlarge-before.yaml", "p5.48xlarge-before.yaml", write_rc=1))
    assert e.status == "failed" and e.detail.startswith("the direct write to the file system failed (exit 1)")


def test_fails_output_without_send_counts():
    e = _judge(_sections("g6e.24xlarge-net-show.yaml", "g6e.24xlarge-net-show.yaml"), None)
    assert e.status == "failed" and "printed no send_count" in e.detail


@pytest.mark.parametrize("missing", ["lnet-before", "lnet-after"])
def test_fails_when_the_lnet_check_did_not_run_or_was_skipped(missing):
    sections = _sections("p5.48xlarge-before.yaml", "p5.48xlarge-after-efa.yaml")
    del sections[missing]
    assert _judge(sections).status == "failed"
    sections[missing] = checks.Section(missing, "no LNet result", None, skipped=True)
    assert _judge(sections).status == "failed"


def _fake(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_the_check_script_writes_directly_between_two_readings_of_the_hosts_lnet(tmp_path):
    # GIVEN fakes: nsenter running its command, lnetctl answering before then after, the unit active, dd recording
    bin_dir, mount = tmp_path / "bin", tmp_path / "fsx"
    bin_dir.mkdir()
    mount.mkdir()
    calls = tmp_path / "calls"
    _fake(bin_dir, "nsenter", f'echo "nsenter $*" >> {calls}\nwhile [ "$1" != "--" ]; do shift; done; shift; exec "$@"\n')
    _fake(bin_dir, "lnetctl", f'if [ -e {tmp_path}/read ]; then cat {LNET}/p5.48xlarge-after-efa.yaml; '
                              f'else touch {tmp_path}/read; cat {LNET}/p5.48xlarge-before.yaml; fi\n')
    _fake(bin_dir, "systemctl", 'echo active\n')
    _fake(bin_dir, "dd", f'echo "dd $*" >> {calls}\n')
    out_file = tmp_path / "lustre.txt"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    # WHEN the lustre mode runs as the check pod's init container does
    out = subprocess.run(["bash", str(manifests.CHECK_SCRIPT), "lustre", str(mount), "1024", UNIT, "600", str(out_file)],
                         env=env, check=True, capture_output=True, text=True, timeout=60).stdout
    # THEN lnetctl and systemctl ran in the host's namespaces, the write was direct and bounded, and the sections pass
    lines = calls.read_text().splitlines()
    assert lines[0] == "nsenter -t 1 -m -n -- lnetctl net show -v"
    assert lines[1] == f"nsenter -t 1 -m -n -- systemctl is-active {UNIT}"
    assert re.fullmatch(rf"dd if=/dev/zero of={mount}/\.efa-stack-lnet-probe-\S+ bs=1M count=1024 oflag=direct conv=fsync",
                        lines[2])
    assert lines[3] == "nsenter -t 1 -m -n -- lnetctl net show -v"
    assert out_file.read_text() == out
    assert _judge(checks.parse_sections(out)).status == "pass"


# --- the check pod and the run --------------------------------------------------------------------------------


def _efa_plan():
    return plan_from_file(SPEC)


def test_check_pod_mounts_the_claim_in_a_privileged_lnet_container_in_the_hosts_pid_namespace():
    plan = _efa_plan()
    group = plan.node_group("p5")
    probe = lustre_probe(plan, group, "default", efa=True)
    assert probe == manifests.LustreProbe("fsx-claim", "/fsx")
    job = next(j for j in plan.nccl_jobs if j.node_group == "p5")
    pod = manifests.check_pod(group, NODES[0], namespace="default", image=job.image, job=job, dcgm_level=2, efa=True,
                              dcgm_image="dcgm:x", lustre=probe)
    spec = pod["spec"]
    dcgm, lnet = spec["initContainers"]
    (check,) = spec["containers"]
    assert spec["hostPID"] is True
    assert (dcgm["name"], lnet["name"]) == (manifests.DCGM_CONTAINER, manifests.LUSTRE_CONTAINER)
    assert lnet["securityContext"] == {"privileged": True, "runAsUser": 0} and "resources" not in lnet
    assert lnet["command"][4:] == ["lustre", "/fsx", "1024", UNIT, "600", manifests.LUSTRE_RESULT]
    assert {"name": "fsx", "mountPath": "/fsx"} in lnet["volumeMounts"]
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in spec["volumes"]
    assert check["command"][-1] == manifests.LUSTRE_RESULT


def test_check_pods_without_an_efa_file_system_stay_out_of_the_hosts_namespaces():
    plan = plan_from_file(CLUSTERS / "fsx.yaml")
    assert lustre_probe(plan, plan.node_group("p5"), "default", efa=True) is None
    efa_plan = _efa_plan()
    assert lustre_probe(efa_plan, efa_plan.node_group("p5"), "default", efa=False) is None


def test_fails_acceptance_in_a_namespace_without_the_claim():
    plan = _efa_plan()
    with pytest.raises(UserError) as info:
        lustre_probe(plan, plan.node_group("p5"), "training", efa=True)
    assert info.value.fix.startswith("run acceptance in default (drop --namespace)")


def _lustre_log(before: str, after: str) -> str:
    sections = [("lnet-before", _lnet(before), 0), ("lnet-unit", "active", 0),
                ("lustre-write", "1024+0 records out", 0), ("lnet-after", _lnet(after), 0)]
    return "".join(f"=== efa-stack-check BEGIN {n} ===\n{t.rstrip()}\n=== efa-stack-check END {n} rc={rc} ===\n"
                   for n, t, rc in sections)


def test_acceptance_names_the_node_whose_lustre_rides_tcp():
    # GIVEN four p5 nodes of the EFA-enabled file system's group, one of them moving its data over tcp
    logs = {n: acceptance_text("node_pass.log") + _lustre_log("p5.48xlarge-before.yaml", "p5.48xlarge-after-efa.yaml")
            for n in NODES}
    logs[NODES[2]] = acceptance_text("node_pass.log") + _lustre_log("p5.48xlarge-before.yaml", "p5.48xlarge-after-tcp.yaml")
    core = FakeCore(logs)
    report = run_acceptance(_efa_plan(), core, FakeCustom(core, set()),
                            AcceptanceOptions(node_group="p5", clock=lambda: 0.0, sleep=lambda s: None))
    # THEN the check pods carry the LNet check and only that node fails it
    assert all(pod["spec"]["initContainers"][1]["name"] == "lustre" for pod in core.created)
    verdicts = {v.node: v for v in report.nodes}
    lustre = {n: next(e for e in v.evidence if e.check == "lustre-efa").status for n, v in verdicts.items()}
    assert lustre == {NODES[0]: "pass", NODES[1]: "pass", NODES[2]: "failed", NODES[3]: "pass"}
    assert verdicts[NODES[2]].reason() == "lustre-efa-failed"
