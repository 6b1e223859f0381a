"""``efa-stack rehearse`` as users run it (the installed command, a subprocess): the report's JSON and the exit codes
(0 every job lands, 1 one does not, 2 bad input) on clusters/tas-p5.yaml and on its ``topology: required`` variant
with one node per layer-3 domain, which Kueue cannot admit (docs/rehearse.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from efa_stack.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USER_ERROR
from tests.support import CLUSTERS

pytestmark = [pytest.mark.rehearsal, pytest.mark.xdist_group("rehearsal")]

TAS_P5 = CLUSTERS / "tas-p5.yaml"
COMMAND = [str(Path(sys.executable).parent / "efa-stack"), "rehearse"]


def _rehearse(spec: Path, *args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([*COMMAND, "--spec", str(spec), "--json", *args], capture_output=True, text=True,
                          timeout=900, check=False)
    return done.returncode, json.loads(done.stdout)


def _required(tmp_path: Path) -> Path:
    text = TAS_P5.read_text()
    assert "topology: preferred" in text
    out = tmp_path / "tas-p5-required.yaml"
    out.write_text(text.replace("topology: preferred", "topology: required"))
    return out


def test_every_job_of_tas_p5_lands_with_its_workers_in_one_layer_3_domain():
    code, report = _rehearse(TAS_P5)
    assert code == EXIT_OK, report
    assert report["ok"] and report["rollout_error"] is None
    kinds = sorted(job["kind"] for job in report["jobs"])
    assert kinds == ["MPIJob", "TrainJob"], kinds
    for job in report["jobs"]:
        assert job["admitted"] and job["running"] and job["completed"], job
        assert job["reason"] in ("", None), job
        assert len(job["nodes"]) == 2 and len(set(job["nodes"])) == 2, job
        assert len(job["domains"]) == 1, job
        assert job["seconds_to_admission"] is not None and job["seconds_to_running"] >= job["seconds_to_admission"]


def test_required_topology_with_one_node_per_domain_is_not_admitted_and_exits_1(tmp_path):
    code, report = _rehearse(_required(tmp_path), "--nodes-per-domain", "1")
    assert code == EXIT_CHECK_FAILED, report
    assert not report["ok"] and report["jobs"]
    for job in report["jobs"]:
        # Kueue keeps each job queued and says the topology cannot hold its two workers; no worker ran
        assert job["queued"] and not job["admitted"] and not job["running"], job
        assert "topology" in job["reason"] and job["nodes"] == [], job


@pytest.mark.parametrize("args", [("--cordon", "p5-9"), ("--size", "largest")])
def test_bad_input_exits_2_before_anything_starts(args):
    code, report = _rehearse(TAS_P5, *args)
    assert code == EXIT_USER_ERROR, report
    assert report["error"], report
