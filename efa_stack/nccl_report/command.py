"""``efa-stack nccl-report``: read, judge, compare, render; the exit code says what happened.

* 0: every run passes, or is not judged (no instance type, single rank, single node).
* 1: a check failed: data corruption (``#wrong`` > 0, out-of-bounds values), a run that did not use EFA,
  or one below the expectation.
* 2: bad input: an unreadable, malformed or truncated log, an unknown instance type, a bad ``nodes`` or
  ``threshold``, or a plot that cannot be written. No traceback.

With ``--json`` the output is always exactly one JSON object (:class:`~efa_stack.nccl_report.model.Report`),
errors included (``error`` is set and ``runs`` is empty), with the same exit codes.
"""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console
from rich.text import Text

from efa_stack.nccl_report.judge import compare_runs, hosts_report, judge
from efa_stack.nccl_report.model import DEFAULT_THRESHOLD, NcclLogError, Report, ReportError, RunReport
from efa_stack.nccl_report.parse import read_runs
from efa_stack.nccl_report.render import plot_busbw, render_comparison, render_hosts, render_run

__all__ = ["report_command"]


def report_command(
    logs: list[Path],
    instance_type: str | None = None,
    nodes: int | None = None,
    json_out: bool = False,
    plot: Path | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    console: Console | None = None,
    err_console: Console | None = None,
) -> int:
    """``efa-stack nccl-report LOG [LOG ...]``; returns the exit code (see the module docstring).

    Every run (a log may hold several, one after the other) is judged. With two or more runs, every
    later run is compared with the first, the baseline: speed-up = later busbw / first busbw, so
    ``nccl-report socket.log efa.log`` reads "EFA is N x faster than sockets".

    When the logs list their ranks' hosts, the set is also read per host (:mod:`.hosts`): slow hosts and
    suspect links (e.g. from pairwise runs), and hosts whose NCCL INFO lines show sockets instead of EFA.
    """
    out = console or Console()
    err = err_console or Console(stderr=True)

    def emit_json(report: Report) -> None:
        out.file.write(report.model_dump_json(indent=2) + "\n")
        out.file.flush()

    def fail(msg: str, exc: NcclLogError | None = None) -> int:
        if json_out:
            detail = exc.to_dict() if exc is not None else {"message": msg, "summary": msg}
            emit_json(Report(exit_code=2, error=ReportError(**detail)))
        else:
            err.print(Text(f"error: {msg}", style="bold red"))
        return 2

    if not logs:
        return fail("no log given")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not (
        math.isfinite(threshold) and threshold > 0
    ):
        return fail(f"--threshold must be a positive number, got {threshold!r}")
    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1):
        return fail(f"--nodes must be a positive integer, got {nodes!r}")

    try:
        runs = [run for p in logs for run in read_runs(p)]
    except NcclLogError as e:
        return fail(str(e), e)

    line_rate: float | None = None
    try:
        from efa_stack.planning.catalog import UnknownInstanceType, get
    except ImportError as e:  # pragma: no cover - the catalog ships with the package
        return fail(f"the instance catalog cannot be loaded: {e}")
    try:
        verdicts = [judge(r, instance_type, nodes, threshold) for r in runs]
        if instance_type is not None:
            rate = get(instance_type).efa_line_rate_gbps / 8.0
            all_single = all((nodes if nodes is not None else r.facts.nodes) == 1 for r in runs)
            line_rate = rate if rate > 0 and not all_single else None
    except UnknownInstanceType as e:
        hint = f" (did you mean: {', '.join(e.suggestions)}?)" if e.suggestions else ""
        return fail(f"unknown instance type {instance_type!r}{hint}")

    comparisons = [compare_runs(runs[0], r) for r in runs[1:]]
    hosts = hosts_report(runs, verdicts)

    if plot is not None:
        try:
            plot_busbw(runs, plot, line_rate_gbytes=line_rate, threshold=threshold)
        except (OSError, ValueError) as e:
            return fail(f"cannot write the plot {str(plot)!r}: {e}")

    code = 0 if all(v.ok for v in verdicts) else 1
    if json_out:
        emit_json(
            Report(
                runs=tuple(RunReport(run=r, verdict=v) for r, v in zip(runs, verdicts)),
                comparisons=tuple(comparisons),
                hosts=hosts,
                plot=str(plot) if plot is not None else None,
                exit_code=code,
            )
        )
        return code

    for run, v in zip(runs, verdicts):
        out.print(render_run(run, v))
        out.print()
    for c in comparisons:
        out.print(render_comparison(c))
        out.print()
    if hosts is not None:
        out.print(render_hosts(hosts))
        out.print()
    if plot is not None:
        out.print(f"plot written to {plot}", markup=False)
    return code
