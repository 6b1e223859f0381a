"""`make bench`: cold synth CPU time of clusters/default.yaml against an empty app, and the suite's wall time.

Target: the cold synth of clusters/default.yaml (`python app.py`, no CDK CLI) costs at most 2.0x the
CPU time of an empty CDK app with an empty cdk8s chart (bench/empty_app.py). Both are measured side by
side in one run, as subprocesses, alternating, ``BENCH_RUNS`` times each (default 5): the CPU time of a
run is user + sys from ``resource.getrusage(RUSAGE_CHILDREN)`` before and after it (the Python process
and the jsii Node.js process it waits for), so other load on the machine does not count. The medians
and their ratio are printed with the target, then the test suite's wall time (`pytest -n 2`).
Results also go to .bench/results.json.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
TARGET = 2.0
SPEC = "clusters/default.yaml"


def cpu_seconds(args: list[str], context: dict[str, str] | None = None) -> float:
    """User + sys CPU seconds of one cold run of ``args`` (and the children it waits for)."""
    out = Path(tempfile.mkdtemp(prefix="bench-out-"))
    env = dict(os.environ, CDK_OUTDIR=str(out / "cdk.out"), CDK_DISABLE_CLI_TELEMETRY="true",
               AWS_EC2_METADATA_DISABLED="true", JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION="1")
    env.pop("CDK_CONTEXT_JSON", None)
    if context:
        env["CDK_CONTEXT_JSON"] = json.dumps(context)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, cwd=ROOT, env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(out, ignore_errors=True)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    dist = Path(tempfile.mkdtemp(prefix="bench-dist-"))
    empty_cmd = [sys.executable, "bench/empty_app.py"]
    app_cmd = [sys.executable, "app.py"]
    empty: list[float] = []
    synth: list[float] = []
    for _ in range(RUNS):  # alternate so that drift in the machine's speed hits both alike
        empty.append(cpu_seconds(empty_cmd))
        synth.append(cpu_seconds(app_cmd, {"spec": SPEC, "dist": str(dist)}))
    shutil.rmtree(dist, ignore_errors=True)
    t_empty, t_synth = statistics.median(empty), statistics.median(synth)
    ratio = t_synth / t_empty

    start = time.perf_counter()
    tests = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q"], cwd=ROOT, capture_output=True, text=True,
                           check=False)
    t_suite = time.perf_counter() - start

    results = {
        "empty_app_cpu_s": round(t_empty, 2),
        "default_synth_cpu_s": round(t_synth, 2),
        "default_vs_empty_ratio": round(ratio, 2),
        "target_ratio": TARGET,
        "runs": RUNS,
        "empty_app_cpu_s_all": [round(x, 2) for x in empty],
        "default_synth_cpu_s_all": [round(x, 2) for x in synth],
        "test_suite_wall_s": round(t_suite, 1),
        "test_suite_passed": tests.returncode == 0,
        "cores": os.cpu_count(),
    }
    print(f"cold synth CPU time (user+sys), median of {RUNS} alternating runs each")
    print(f"  empty CDK app + empty cdk8s chart   {t_empty:6.2f} s")
    print(f"  python app.py ({SPEC})  {t_synth:6.2f} s")
    print(f"  ratio                               {ratio:6.2f}x  (target <= {TARGET:.1f}x)"
          f"  {'ok' if ratio <= TARGET else 'OVER TARGET'}")
    print(f"test suite (pytest -n 2) wall time    {t_suite:6.1f} s   {'passed' if tests.returncode == 0 else 'FAILED'}")
    out = ROOT / ".bench"
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0 if ratio <= TARGET and tests.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
