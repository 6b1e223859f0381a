"""`make bench`: cold synth CPU time of the benchmark specs against an empty app, the test tiers' times, the modelled
deploys and the warm rehearsals.

Target: the cold synth of clusters/default.yaml (`python app.py`, no CDK CLI; a GPU cluster, so with
Container Insights and the accelerator dashboard) costs at most 2.0x the CPU time of an empty CDK app
with an empty cdk8s chart (bench/empty_app.py). clusters/training-p5.yaml (the same nodes plus a
TrainJob, its runtime and the Kubeflow Trainer Helm chart) is measured alongside and its ratio printed
for information: what the training features add. All are measured side by side in one run, as
subprocesses, alternating, ``BENCH_RUNS`` times each (default 5): the CPU time of a run is user + sys
from ``resource.getrusage(RUSAGE_CHILDREN)`` before and after it (the Python process and the jsii
Node.js process it waits for), so other load on the machine does not count. The medians and their
ratios are printed with the target, then the test suite tier by tier (`pytest -n 2 -m TIER`, :data:`TIERS`): the unit
tier's wall and CPU time against their targets (<= 45 s and <= 90 CPU-s on 2 cores), the integration tier's for
information, each with the load average around it (not part of the exit status: other load changes the times; a tier
that fails is).
Then the deploy model (efa_stack/tools/deploy_model.py): every shipped spec under clusters/ is synthesized
into a temporary directory (``python app.py``, as above) and its first ``cdk deploy --all --concurrency
DEPLOY_CONCURRENCY`` is modelled from the templates; the critical path in minutes, its slowest steps, and the
per-type figures used with their sources are printed against DEPLOY_TARGET_MIN (docs/design/deploy-model.md).
Last, the warm rehearsal of every shipped spec (``efa-stack rehearse --spec S --json``, the binaries built first by
tools/build.sh so that no build is timed): its wall time against REHEARSE_TARGET_S on this machine, the ratio to the
target, whether every job landed. Results also go to .bench/results.json. The exit status is non-zero when a synth
ratio or a modelled deploy is over its target, a test tier fails, or a rehearsal does not land every job.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from efa_stack.tools.deploy_model import TARGET_MINUTES

ROOT = Path(__file__).resolve().parent.parent
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
TARGET = 2.0
SPEC = "clusters/default.yaml"
SPECS: dict[str, float | None] = {SPEC: TARGET, "clusters/training-p5.yaml": None}
"""Benchmark specs and their target ratio to the empty app (None: printed for information)."""
SUITE_TARGET_S = 45.0
"""The unit tier's wall time on 2 cores, in seconds."""
SUITE_TARGET_CPU_S = 90.0
"""The unit tier's CPU time (user + sys of pytest and every process it waits for), in seconds."""
TIERS = {
    "unit": "not integration and not rehearsal",
    "integration": "integration",
}
"""Tier -> its pytest marker expression (markers in pyproject.toml). Only the unit tier has targets; the rehearsal tier
is timed spec by spec with ``efa-stack rehearse`` (:func:`rehearsals`); ``make test`` runs every tier in one pytest
run."""
DEPLOY_TARGET_MIN = TARGET_MINUTES
"""The modelled first deploy of every shipped spec, in minutes."""
REHEARSE_TARGET_S = 120.0
"""The warm rehearsal of one shipped spec, wall seconds on 2 cores (docs/rehearse.md)."""
DEPLOY_CONCURRENCY = 1
"""The ``cdk deploy --concurrency`` the model replays: what ``make deploy`` runs (the CLI's default, 1)."""


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


def synth_to(spec: str, outdir: Path, dist: Path) -> None:
    """``python app.py`` for ``spec`` with its cloud assembly in ``outdir``."""
    env = dict(os.environ, CDK_OUTDIR=str(outdir), CDK_DISABLE_CLI_TELEMETRY="true",
               AWS_EC2_METADATA_DISABLED="true", JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION="1",
               CDK_CONTEXT_JSON=json.dumps({"spec": spec, "dist": str(dist)}))
    subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, check=True, capture_output=True)


def deploy_models() -> tuple[dict[str, object], bool]:
    """The modelled deploy of every shipped spec, printed; returns the results and whether all are within target."""
    from efa_stack.tools.deploy_model import model_assembly

    work = Path(tempfile.mkdtemp(prefix="bench-deploy-"))
    results: dict[str, object] = {}
    figures: dict[str, object] = {}
    within = True
    print(f"modelled first deploy (cdk deploy --all --concurrency {DEPLOY_CONCURRENCY}; "
          f"target <= {DEPLOY_TARGET_MIN:.0f} min), efa_stack/tools/deploy_model.py")
    try:
        for spec in sorted(str(p.relative_to(ROOT)) for p in (ROOT / "clusters").glob("*.yaml")):
            out = work / Path(spec).stem
            synth_to(spec, out / "cdk.out", out / "dist")
            model = model_assembly(out / "cdk.out", concurrency=DEPLOY_CONCURRENCY)
            ok = model.minutes <= DEPLOY_TARGET_MIN
            within = within and ok
            top = model.top_chain(3)
            print(f"  {spec:<34} {model.minutes:5.1f} min  {'ok' if ok else 'OVER TARGET'}  "
                  f"({' -> '.join(model.chain)})")
            print("      slowest steps: " + "; ".join(f"{st.logical_id} {st.type} {st.minutes:g}" for _, st in top))
            results[spec] = {
                "minutes": model.minutes, "within_target": ok, "stacks": list(model.chain),
                "chain": [f"{name}/{st.logical_id} ({st.type}, {st.minutes:g} min)"
                          for name in model.chain for st in model.stacks[name].chain],
            }
            for type_, fig in model.figures.items():
                figures[type_] = {"minutes": fig.minutes, "estimate": fig.estimate, "source": fig.source}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("  figures used (minutes; source, or the basis of an estimate): efa_stack/planning/data/create_minutes.json")
    for type_, entry in sorted(figures.items()):
        assert isinstance(entry, dict)
        kind = "estimate" if entry["estimate"] else "source"
        print(f"    {type_:<44} {entry['minutes']:5g}  {kind}: {str(entry['source'])[:110]}")
    return {"target_min": DEPLOY_TARGET_MIN, "concurrency": DEPLOY_CONCURRENCY, "specs": results,
            "figures": figures}, within


def run_tier(expression: str) -> dict[str, Any]:
    """``pytest -n 2 -q -m EXPRESSION``: its wall and CPU time (user + sys of pytest and the processes it waits for),
    the load average before and after, how many tests ran, whether they passed, and the tail of its output."""
    load_before = os.getloadavg()[0]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "-m", expression], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = re.findall(r"(\d+) passed", proc.stdout)
    return {
        "marker_expression": expression,
        "wall_s": round(wall, 1),
        "cpu_s": round((cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime), 1),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "tests": int(summary[-1]) if summary else 0,
        "passed": proc.returncode == 0,
        "output": proc.stdout[-4000:] + proc.stderr[-2000:],
    }


def rehearsals() -> tuple[dict[str, object], bool]:
    """The warm rehearsal of every shipped spec, printed; returns the results and whether every job of every spec
    landed (the wall time is printed against its target, not part of the exit status: other load changes it)."""
    subprocess.run([str(ROOT / "tools" / "build.sh")], cwd=ROOT, check=True, capture_output=True)
    command = str(Path(sys.executable).parent / "efa-stack")
    print(f"warm rehearsal per shipped spec (efa-stack rehearse --spec S --json; target <= {REHEARSE_TARGET_S:.0f} s "
          f"wall on {os.cpu_count()} cores)")
    results: dict[str, object] = {}
    landed = True
    for spec in sorted(str(p.relative_to(ROOT)) for p in (ROOT / "clusters").glob("*.yaml")):
        start = time.perf_counter()
        done = subprocess.run([command, "rehearse", "--spec", spec, "--json"], cwd=ROOT, capture_output=True,
                              text=True, check=False)
        wall = time.perf_counter() - start
        report = json.loads(done.stdout) if done.stdout.startswith("{") else {}
        ok = done.returncode == 0
        landed = landed and ok
        jobs = report.get("jobs", [])
        verdict = "ok" if wall <= REHEARSE_TARGET_S else "OVER TARGET"
        print(f"  {spec:<34} {wall:6.1f} s  {wall / REHEARSE_TARGET_S:4.2f}x of target  {verdict}  "
              f"{len(jobs)} job(s) {'landed' if ok else 'NOT LANDED: ' + (report.get('error') or done.stderr[-300:])}")
        results[spec] = {"wall_s": round(wall, 1), "ratio_to_target": round(wall / REHEARSE_TARGET_S, 2),
                         "exit_code": done.returncode, "jobs": len(jobs), "timings": report.get("timings", {})}
    return {"target_s": REHEARSE_TARGET_S, "specs": results}, landed


def main() -> int:
    dist = Path(tempfile.mkdtemp(prefix="bench-dist-"))
    empty_cmd = [sys.executable, "bench/empty_app.py"]
    app_cmd = [sys.executable, "app.py"]
    empty: list[float] = []
    synths: dict[str, list[float]] = {spec: [] for spec in SPECS}
    for _ in range(RUNS):  # alternate so that drift in the machine's speed hits all alike
        empty.append(cpu_seconds(empty_cmd))
        for spec, runs in synths.items():
            runs.append(cpu_seconds(app_cmd, {"spec": spec, "dist": str(dist)}))
    shutil.rmtree(dist, ignore_errors=True)
    t_empty = statistics.median(empty)
    medians = {spec: statistics.median(runs) for spec, runs in synths.items()}
    ratios = {spec: t / t_empty for spec, t in medians.items()}
    t_synth, ratio = medians[SPEC], ratios[SPEC]
    within = all(target is None or ratios[spec] <= target for spec, target in SPECS.items())

    tiers = {tier: run_tier(expression) for tier, expression in TIERS.items()}
    unit = tiers["unit"]
    passed = all(t["passed"] for t in tiers.values())

    results = {
        "empty_app_cpu_s": round(t_empty, 2),
        "default_synth_cpu_s": round(t_synth, 2),
        "default_vs_empty_ratio": round(ratio, 2),
        "target_ratio": TARGET,
        "runs": RUNS,
        "empty_app_cpu_s_all": [round(x, 2) for x in empty],
        "default_synth_cpu_s_all": [round(x, 2) for x in synths[SPEC]],
        "specs": {
            spec: {
                "synth_cpu_s": round(medians[spec], 2),
                "vs_empty_ratio": round(ratios[spec], 2),
                "target_ratio": target,
                "synth_cpu_s_all": [round(x, 2) for x in synths[spec]],
            }
            for spec, target in SPECS.items()
        },
        "test_tiers": {tier: {k: v for k, v in t.items() if k != "output"} for tier, t in tiers.items()},
        "unit_tier_target_s": SUITE_TARGET_S,
        "unit_tier_target_cpu_s": SUITE_TARGET_CPU_S,
        "unit_tier_within_target": unit["wall_s"] <= SUITE_TARGET_S and unit["cpu_s"] <= SUITE_TARGET_CPU_S,
        "test_suite_passed": passed,
        "cores": os.cpu_count(),
    }
    print(f"cold synth CPU time (user+sys), median of {RUNS} alternating runs each")
    width = max(len(f"python app.py ({spec})") for spec in SPECS)
    print(f"  {'empty CDK app + empty cdk8s chart':<{width}}  {t_empty:6.2f} s")
    for spec, target in SPECS.items():
        verdict = ("(for information)" if target is None
                   else f"(target <= {target:.1f}x)  {'ok' if ratios[spec] <= target else 'OVER TARGET'}")
        print(f"  {f'python app.py ({spec})':<{width}}  {medians[spec]:6.2f} s  {ratios[spec]:5.2f}x  {verdict}")
    print(f"test suite by tier (pytest -n 2 -m TIER) on {os.cpu_count()} cores; the exit status does not depend on the "
          "times, which other load on the machine changes")
    for tier, t in tiers.items():
        if tier == "unit":
            ok = t["wall_s"] <= SUITE_TARGET_S and t["cpu_s"] <= SUITE_TARGET_CPU_S
            verdict = (f"(target <= {SUITE_TARGET_S:.0f} s, <= {SUITE_TARGET_CPU_S:.0f} CPU-s)  "
                       f"{'ok' if ok else 'OVER TARGET'}")
        else:
            verdict = "(for information)"
        print(f"  {tier:<12} {t['tests']:>5} tests  wall {t['wall_s']:6.1f} s  CPU {t['cpu_s']:6.1f} s  {verdict}  "
              f"{'passed' if t['passed'] else 'FAILED'}; load average (1 min) before/after "
              f"{t['load_before']:.2f}/{t['load_after']:.2f}")
        if not t["passed"]:
            print(t["output"])
    deploy, deploy_within = deploy_models()
    results["deploy_model"] = deploy
    rehearsed, landed = rehearsals()
    results["rehearsal"] = rehearsed
    out = ROOT / ".bench"
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0 if within and deploy_within and landed and passed else 1


if __name__ == "__main__":
    sys.exit(main())
