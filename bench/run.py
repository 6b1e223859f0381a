"""`make bench`: synth speed as ratios measured in one run, and the test suite's wall time.

Targets (from the project's issues):
- cold `cdk synth` of clusters/default.yaml <= 2x the synth of an empty CDK app;
- synth with 16 GPU node groups <= 2x synth with one;
- the whole test suite under a minute on 2 cores.
Each synth runs through the pinned CDK CLI into a fresh output directory (cold), several times; the
median is reported.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = int(os.environ.get("BENCH_RUNS", "3"))


def node_group(i: int) -> str:
    return (
        f"  - name: gpu{i:02d}\n    instanceType: p5.48xlarge\n    minSize: 1\n    desiredCapacity: 1\n"
        f"    maxSize: 1\n    availabilityZones: [us-west-2a]\n    privateNetworking: true\n    efaEnabled: true\n"
    )


def spec_with(n: int) -> str:
    return (
        "apiVersion: eksctl.io/v1alpha5\nkind: ClusterConfig\n"
        "metadata: {name: bench, region: us-west-2, version: \"1.34\"}\n"
        "availabilityZones: [us-west-2a, us-west-2b]\nmanagedNodeGroups:\n"
        + "".join(node_group(i) for i in range(n))
    )


def cdk_synth(args: list[str]) -> float:
    out = Path(tempfile.mkdtemp(prefix="bench-cdk-out-"))
    env = dict(os.environ, CDK_DISABLE_CLI_TELEMETRY="true", AWS_EC2_METADATA_DISABLED="true")
    start = time.perf_counter()
    subprocess.run(
        ["npx", "cdk", "synth", "--quiet", "--no-notices", "-o", str(out), *args],
        cwd=ROOT, env=env, check=True, capture_output=True,
    )
    elapsed = time.perf_counter() - start
    shutil.rmtree(out, ignore_errors=True)
    return elapsed


def median(f, runs: int = RUNS) -> float:
    return statistics.median(f() for _ in range(runs))


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-specs-"))
    one, sixteen = tmp / "one.yaml", tmp / "sixteen.yaml"
    one.write_text(spec_with(1))
    sixteen.write_text(spec_with(16))
    empty_app = f"{sys.executable} bench/empty_app.py"

    t_empty = median(lambda: cdk_synth(["--app", empty_app]))
    t_default = median(lambda: cdk_synth(["-c", "spec=clusters/default.yaml"]))
    t_one = median(lambda: cdk_synth(["-c", f"spec={one}"]))
    t_sixteen = median(lambda: cdk_synth(["-c", f"spec={sixteen}"]))

    start = time.perf_counter()
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-q"], cwd=ROOT, capture_output=True, text=True
    )
    t_suite = time.perf_counter() - start

    results = {
        "empty_app_synth_s": round(t_empty, 2),
        "default_synth_s": round(t_default, 2),
        "default_vs_empty_ratio": round(t_default / t_empty, 2),
        "one_node_group_synth_s": round(t_one, 2),
        "sixteen_node_groups_synth_s": round(t_sixteen, 2),
        "sixteen_vs_one_ratio": round(t_sixteen / t_one, 2),
        "test_suite_wall_s": round(t_suite, 1),
        "test_suite_passed": tests.returncode == 0,
        "cores": os.cpu_count(),
        "runs_per_median": RUNS,
    }
    print(f"cold cdk synth, median of {RUNS} runs each")
    print(f"  empty CDK app            {t_empty:6.2f} s")
    print(f"  clusters/default.yaml    {t_default:6.2f} s   ratio {t_default / t_empty:4.2f}x  (target <= 2x)")
    print(f"  1 GPU node group         {t_one:6.2f} s")
    print(f"  16 GPU node groups       {t_sixteen:6.2f} s   ratio {t_sixteen / t_one:4.2f}x  (target <= 2x)")
    print(f"test suite (pytest -n 2)   {t_suite:6.1f} s   {'passed' if tests.returncode == 0 else 'FAILED'}  (target < 60 s on 2 cores)")
    out = ROOT / ".bench"
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
