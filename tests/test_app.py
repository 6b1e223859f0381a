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
        [sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
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


def test_app_synthesizes_spec_from_context_and_prints_summary(tmp_path):
    proc = run_app(tmp_path, {"spec": "clusters/eksctl-efa-cluster.yaml", "dist": str(tmp_path / "dist")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = sorted(p.name for p in (tmp_path / "out").glob("*.template.json"))
    assert names == ["my-efa-cluster-cluster.template.json", "my-efa-cluster-network.template.json"]
    assert "my-efa-ng: p5.48xlarge in us-west-2a, 1/2/3 nodes" in proc.stderr
    assert "8 GPU + 32 EFA per node" in proc.stderr
    assert "1 ENA + 32 efa-only on 32 cards" in proc.stderr
    dist = sorted(p.name for p in (tmp_path / "dist" / "my-efa-cluster").rglob("*.yaml"))
    assert dist == [
        "10-efa-device-plugin.yaml", "11-nvidia-device-plugin.yaml", "20-mpi-operator-crd.yaml",
        "30-mpi-operator.yaml", "40-nccl-tests.yaml",
    ]
    assert f"manifests: {tmp_path / 'dist' / 'my-efa-cluster'}/ (5 files" in proc.stderr
