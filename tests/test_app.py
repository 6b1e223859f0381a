"""The CDK entry point: `cdk synth` runs `python app.py` with context and an output directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT, synth_spec

CDK_CLI = ROOT / "node_modules" / ".bin" / "cdk"


def cdk_synth(tmp_path, spec: str) -> subprocess.CompletedProcess:
    """The README's command, ``npx cdk synth -c spec=...``: the pinned CDK CLI runs cdk.json's ``python app.py``
    (the venv's python first on PATH, as `make` puts it)."""
    env = dict(os.environ, CDK_DISABLE_CLI_TELEMETRY="true", AWS_EC2_METADATA_DISABLED="true")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [str(CDK_CLI), "synth", "--quiet", "--no-notices", "-o", str(tmp_path / "out"), "-c", f"spec={spec}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )


@pytest.mark.integration
def test_bad_spec_exits_with_message_and_no_template(tmp_path):
    """The one test through the CDK CLI (a full synth is tested in process below, to keep the suite fast)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: eksctl.io/v1alpha5\nkind: ClusterConfig\nmetadata: {name: x, region: us-west-2}\n"
        "managedNodeGroups:\n  - {name: g, instanceType: p5.48xlarg, efaEnabled: true, availabilityZones: [us-west-2a]}\n"
    )
    proc = cdk_synth(tmp_path, str(bad))
    assert proc.returncode == 1
    assert "managedNodeGroups[0].instanceType: unknown instance type (got 'p5.48xlarg')" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "out").glob("*.template.json"))


@pytest.mark.xdist_group("spec-eksctl-efa-cluster.yaml")  # the worker that synthesizes the spec for its other tests
def test_app_synthesizes_spec_from_context_and_prints_summary(tmp_path, monkeypatch, capsys):
    """In process (one synth): the summary, the templates, dist/, and the charts built once for both."""
    import cdk8s
    from aws_cdk import App

    import app as entry
    import k8s.charts
    import stacks.compose

    ctx = {"spec": "clusters/eksctl-efa-cluster.yaml", "dist": str(tmp_path / "dist")}
    expected = synth_spec(str(ROOT / ctx["spec"])).template("cluster")  # the tests' synth, before the patches below
    # GIVEN a counter around the chart builder, and around the cluster stack's use of charts
    calls: list[cdk8s.App] = []
    applied: list[list] = []
    real_build, real_apply = k8s.charts.build_charts, stacks.compose.build

    def counting_build(plan, scope):
        calls.append(scope)
        return real_build(plan, scope)

    def recording_apply(app, plan, **kw):
        applied.append(list(kw["charts"]))
        return real_apply(app, plan, **kw)

    # (the entry point imports both when the spec has planned, so the patched functions are the ones it gets)
    monkeypatch.setattr(k8s.charts, "build_charts", counting_build)
    monkeypatch.setattr(stacks.compose, "build", recording_apply)
    # WHEN the entry point synthesizes the eksctl spec
    monkeypatch.chdir(ROOT)
    # (CDK's built-in template validation is off, as in every test synth: cfn-lint checks each shipped template)
    entry.main(App(outdir=str(tmp_path / "out"), context=ctx, builtin_cloud_formation_validation=False))
    stderr = capsys.readouterr().err
    # THEN the charts were built once, and the cluster stack got those very objects
    assert len(calls) == 1
    (charts,) = applied
    assert [c.node.id for c in charts] == [c.node.id for c in calls[0].node.children]
    names = sorted(p.name for p in (tmp_path / "out").glob("*.template.json"))
    assert names == ["my-efa-cluster-cluster.template.json"]
    # AND the template is the tests' synth of the spec without what the CDK CLI's context adds (tests.support)
    written = json.loads((tmp_path / "out" / names[0]).read_text())
    assert written == expected
    assert "my-efa-ng: p5.48xlarge in us-west-2a, 1/2/3 nodes" in stderr
    assert "8 GPU + 32 EFA per node" in stderr
    assert "1 ENA + 32 efa-only on 32 cards" in stderr
    dist = sorted(p.name for p in (tmp_path / "dist" / "my-efa-cluster").rglob("*.yaml"))
    assert dist == [
        "10-efa-device-plugin.yaml", "11-nvidia-device-plugin.yaml", "20-mpi-operator-crd.yaml",
        "30-mpi-operator.yaml", "40-nccl-tests.yaml",
    ]
    assert f"manifests: {tmp_path / 'dist' / 'my-efa-cluster'}/ (5 files" in stderr


def test_a_bad_spec_is_reported_before_the_cdk_loads(tmp_path):
    # GIVEN a spec with a problem, named the way the CDK CLI passes context WHEN the entry point runs
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: eksctl.io/v1alpha5\nkind: ClusterConfig\nmetadata: {name: x, region: us-west-2}\n"
                   "managedNodeGroups: [{name: g, instanceType: p5.48xlargee}]\n")
    code = (
        "import sys, runpy\n"
        "try:\n    runpy.run_path('app.py', run_name='__main__')\n"
        "except SystemExit as e:\n    print('exit', e.code)\n"
        "print('aws_cdk loaded' if 'aws_cdk' in sys.modules else 'aws_cdk not loaded')\n"
    )
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"spec": str(bad)})}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    # THEN it exits 2 (bad input) naming the problem, and aws-cdk-lib was never imported
    assert "exit 2" in out.stdout and "aws_cdk not loaded" in out.stdout, out.stdout + out.stderr
    assert "managedNodeGroups[0].instanceType" in out.stderr


def test_a_bad_efa_stack_today_is_an_error_not_a_traceback(monkeypatch, capsys):
    import app as entry

    monkeypatch.setenv("EFA_STACK_TODAY", "nonsense")
    monkeypatch.setenv("CDK_CONTEXT_JSON", '{"spec": "clusters/default.yaml"}')
    with pytest.raises(SystemExit) as info:
        entry.main()
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "EFA_STACK_TODAY='nonsense' is not a date" in err and "Fix: set EFA_STACK_TODAY" in err
    assert "Traceback" not in err
