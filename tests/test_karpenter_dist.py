"""``apply.sh`` of a spec with Karpenter pools installs Karpenter's controller: the pinned OCI chart with the values
the cluster stack's Helm release passes, after the Karpenter CRDs are Established and before the EC2NodeClasses and
NodePools (docs/design/karpenter.md)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from efa_stack import contract
from efa_stack.planning.karpenter import KARPENTER_CHART, KARPENTER_VERSION
from k8s.components import KARPENTER_CRD, KARPENTER_POOLS, chart_file_name
from k8s.dist import AFTER_CRDS_DIR, APPLY_SCRIPT, dist_dir, write_dist
from k8s.karpenter import POOL_KIND_CRDS
from k8s.rollout import InstallRelease
from tests.support import built, synth_spec

KARPENTER_VALUES = f"helm/{contract.KARPENTER_RELEASE}-values.yaml"


def _written(stem: str, tmp_path: Path) -> tuple[Any, Path]:
    b = built(stem)
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts)
    return b, out


def _commands(script: Path) -> list[list[str]]:
    """The top-level command lines of ``apply.sh`` as words (function bodies and comments left out)."""
    out: list[list[str]] = []
    in_function = False
    for line in script.read_text().splitlines():
        if line.endswith("() {"):
            in_function = True
        if in_function:
            in_function = line != "}"
            continue
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


def _karpenter_helm(commands: list[list[str]]) -> list[list[str]]:
    return [w for w in commands if w[:1] == ["helm"] and w[3:4] == [contract.KARPENTER_RELEASE]]


def test_apply_sh_installs_the_pinned_karpenter_chart(tmp_path):
    # GIVEN karpenter-p5's dist/ WHEN apply.sh is read THEN one helm line installs the pinned OCI chart without CRDs
    _, out = _written("karpenter-p5", tmp_path)
    (words,) = _karpenter_helm(_commands(out / APPLY_SCRIPT))
    assert words[:7] == ["helm", "upgrade", "--install", contract.KARPENTER_RELEASE, KARPENTER_CHART, "--version",
                         KARPENTER_VERSION]
    assert KARPENTER_CHART.startswith("oci://") and KARPENTER_VERSION == "1.15.1"
    assert words[words.index("--namespace") + 1] == contract.KARPENTER_NAMESPACE
    assert {"--skip-crds", "--wait"} <= set(words)
    assert words[words.index("--values") + 1] == KARPENTER_VALUES and (out / KARPENTER_VALUES).is_file()


def test_the_values_are_the_cluster_stacks_release_values(tmp_path):
    # GIVEN the same spec synthesized WHEN the Helm release's values are compared with apply.sh's values file
    b, out = _written("karpenter-p5", tmp_path)
    s = synth_spec("clusters/karpenter-p5.yaml")
    (chart,) = [r["Properties"] for t in s.templates.values() for r in t["Resources"].values()
                if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Release"] == contract.KARPENTER_RELEASE]
    cdk_values = json.loads(chart["Values"]) if isinstance(chart["Values"], str) else chart["Values"]
    dist_values = yaml.safe_load((out / KARPENTER_VALUES).read_text())
    # THEN they are one document, with the plan's names
    assert dist_values == cdk_values
    k = b.plan.karpenter
    assert dist_values["settings"]["clusterName"] == k.cluster == "efa-elastic"
    assert dist_values["settings"]["interruptionQueue"] == k.interruption_queue_name == "efa-elastic-karpenter"
    assert dist_values["serviceAccount"] == {"create": True, "name": contract.KARPENTER_SERVICE_ACCOUNT}
    assert dist_values["settings"]["featureGates"] == k.feature_gates


def test_the_release_comes_after_the_crds_and_before_the_pools(tmp_path):
    # GIVEN karpenter-p5's dist/: the CRDs in the first step, the pools after them
    _, out = _written("karpenter-p5", tmp_path)
    assert (out / chart_file_name(KARPENTER_CRD)).is_file()
    assert (out / AFTER_CRDS_DIR / chart_file_name(KARPENTER_POOLS)).is_file()
    commands = _commands(out / APPLY_SCRIPT)
    # WHEN the order of apply.sh's commands is read
    (helm,) = _karpenter_helm(commands)
    at = commands.index(helm)
    first = commands.index(["kubectl", "apply", "-f", "."])
    waits = {w[1]: i for i, w in enumerate(commands) if w[0] == "wait_established"}
    pools = commands.index(["kubectl", "apply", "-f", f"{AFTER_CRDS_DIR}/{chart_file_name(KARPENTER_POOLS)}"])
    # THEN the CRDs are applied and Established before the controller, and the pools applied after it
    assert first < at < pools
    assert set(POOL_KIND_CRDS) <= set(waits) and all(waits[c] < at for c in POOL_KIND_CRDS)


def test_no_karpenter_release_without_pools(tmp_path):
    b, out = _written("default", tmp_path)
    assert b.rollout.of_type(InstallRelease) == []
    assert contract.KARPENTER_RELEASE not in (out / APPLY_SCRIPT).read_text()
    assert not (out / KARPENTER_VALUES).exists()


def _fake_bin(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_apply_sh_runs_the_release_between_the_crds_and_the_pools(tmp_path):
    # GIVEN fakes of kubectl (every CRD Established) and helm that log their arguments
    _, out = _written("karpenter-p5", tmp_path / "dist")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    _fake_bin(bin_dir, "kubectl", f'echo "kubectl $*" >> {log}\n[ "$1" = get ] && printf True\nexit 0\n')
    _fake_bin(bin_dir, "helm", f'echo "helm $*" >> {log}\nexit 0\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    # WHEN apply.sh runs
    run = subprocess.run(["sh", str(out / APPLY_SCRIPT)], env=env, capture_output=True, text=True, timeout=60,
                         check=False)
    # THEN it succeeded, and helm installed Karpenter after the CRD checks and before the pools
    assert run.returncode == 0, run.stderr
    calls = log.read_text().splitlines()
    helm = [i for i, c in enumerate(calls) if c.startswith(f"helm upgrade --install {contract.KARPENTER_RELEASE} ")]
    assert len(helm) == 1
    checked = [i for i, c in enumerate(calls) if c.startswith("kubectl get crd ") and c.split()[3] in POOL_KIND_CRDS]
    assert len(checked) == len(POOL_KIND_CRDS) and max(checked) < helm[0]
    assert calls.index("kubectl apply -f .") < helm[0] < calls.index(
        f"kubectl apply -f {AFTER_CRDS_DIR}/{chart_file_name(KARPENTER_POOLS)}")


def test_fails_before_applying_anything_without_helm(tmp_path):
    # GIVEN kubectl but no helm on PATH WHEN apply.sh runs THEN it stops first and says why
    _, out = _written("karpenter-p5", tmp_path / "dist")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    _fake_bin(bin_dir, "kubectl", f'echo "kubectl $*" >> {log}\nexit 0\n')
    for tool in ("dirname",):
        found = shutil.which(tool)
        assert found
        (bin_dir / tool).symlink_to(found)
    run = subprocess.run([shutil.which("sh") or "/bin/sh", str(out / APPLY_SCRIPT)], env={"PATH": str(bin_dir)},
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 1 and "helm 3.8 or later" in run.stderr and "Karpenter" in run.stderr
    assert not log.exists()


@pytest.mark.parametrize("stem", ["karpenter-p5", "karpenter-capacity-block"])
def test_apply_sh_is_shellcheck_clean(tmp_path, stem):
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    _, out = _written(stem, tmp_path)
    run = subprocess.run([shellcheck, "--shell=sh", str(out / APPLY_SCRIPT)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
