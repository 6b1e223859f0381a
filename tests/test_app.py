"""The CDK entry point: `cdk synth` runs `python app.py` with context and an output directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT


def run_app(tmp_path, context: dict) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["CDK_OUTDIR"] = str(tmp_path / "out")
    env["CDK_CONTEXT_JSON"] = json.dumps(context)
    return subprocess.run(
        [sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_bad_spec_exits_with_message_and_no_template(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: eksctl.io/v1alpha5\nkind: ClusterConfig\nmetadata: {name: x, region: us-west-2}\n"
        "managedNodeGroups:\n  - {name: g, instanceType: p5.48xlarg, efaEnabled: true, availabilityZones: [us-west-2a]}\n"
    )
    proc = run_app(tmp_path, {"spec": str(bad)})
    assert proc.returncode == 1
    assert "managedNodeGroups[0].instanceType: unknown instance type (got 'p5.48xlarg')" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "out").glob("*.template.json"))


def test_app_synthesizes_spec_from_context_and_prints_summary(tmp_path, monkeypatch, capsys):
    """In process (one synth): the summary, the templates, dist/, and the charts built once for both."""
    import cdk8s
    from aws_cdk import App

    import app as entry
    import k8s.charts

    # GIVEN a counter around the chart builder, and around the cluster stack's use of charts
    calls: list[cdk8s.App] = []
    applied: list[list] = []
    real_build, real_apply = k8s.charts.build_charts, entry.build

    def counting_build(plan, scope):
        calls.append(scope)
        return real_build(plan, scope)

    def recording_apply(app, plan, **kw):
        applied.append(list(kw["charts"]))
        return real_apply(app, plan, **kw)

    monkeypatch.setattr(entry, "build_charts", counting_build)
    monkeypatch.setattr(k8s.charts, "build_charts", counting_build)
    monkeypatch.setattr(entry, "build", recording_apply)
    # WHEN the entry point synthesizes the eksctl spec
    ctx = {"spec": "clusters/eksctl-efa-cluster.yaml", "dist": str(tmp_path / "dist")}
    monkeypatch.chdir(ROOT)
    entry.main(App(outdir=str(tmp_path / "out"), context=ctx))
    stderr = capsys.readouterr().err
    # THEN the charts were built once, and the cluster stack got those very objects
    assert len(calls) == 1
    (charts,) = applied
    assert [c.node.id for c in charts] == [c.node.id for c in calls[0].node.children]
    names = sorted(p.name for p in (tmp_path / "out").glob("*.template.json"))
    assert names == ["my-efa-cluster-cluster.template.json", "my-efa-cluster-network.template.json"]
    assert "my-efa-ng: p5.48xlarge in us-west-2a, 1/2/3 nodes" in stderr
    assert "8 GPU + 32 EFA per node" in stderr
    assert "1 ENA + 32 efa-only on 32 cards" in stderr
    dist = sorted(p.name for p in (tmp_path / "dist" / "my-efa-cluster").rglob("*.yaml"))
    assert dist == [
        "10-efa-device-plugin.yaml", "11-nvidia-device-plugin.yaml", "20-mpi-operator-crd.yaml",
        "30-mpi-operator.yaml", "40-nccl-tests.yaml",
    ]
    assert f"manifests: {tmp_path / 'dist' / 'my-efa-cluster'}/ (5 files" in stderr
