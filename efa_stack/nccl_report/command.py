"""``efa-stack nccl-report``: read, judge and compare (:func:`efa_stack.nccl_report.command.build_report`), then print the report.

Exit codes: 0 every run passes or is not judged; 1 a check failed (data corruption, not EFA, below the
expectation); 2 bad input (an unreadable, malformed or truncated log, an unknown instance type, a bad
``nodes`` or ``threshold``, a plot that cannot be written), without a traceback. With ``--json`` the
output is always one :class:`~efa_stack.nccl_report.model.Report`, errors included (``error`` set,
``runs`` empty), with the same exit codes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from efa_stack import contract
from efa_stack.console import print_error
from efa_stack.errors import EXIT_CHECK_FAILED, UserError
from efa_stack.nccl_report.judge import compare_runs, hosts_report, judge
from efa_stack.nccl_report.model import NcclLogError, NcclRun, Report, RunReport
from efa_stack.nccl_report.parse import parse_text_runs, read_runs
from efa_stack.nccl_report.render import error_report, plot_busbw, print_report, report_document

__all__ = ["build_report", "check_options", "read_logs", "report_command", "report_from_text"]


def check_options(threshold: float, nodes: int | None) -> None:
    """Refuse a threshold that is not a positive number and a node count that is not a positive integer."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not (
        math.isfinite(threshold) and threshold > 0
    ):
        raise UserError(f"--threshold must be a positive number, got {threshold!r}")
    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1):
        raise UserError(f"--nodes must be a positive integer, got {nodes!r}")


def log_error(exc: NcclLogError) -> UserError:
    """A log that is not a complete nccl-tests run; the ``--json`` error names the file, line and layout.

    When the log says the run failed (a CUDA or NCCL failure, a timeout, a rank that died), that is a failed
    check (exit 1) quoting the line, not bad input (exit 2)."""
    if exc.failure is not None:
        message = f"{exc.source}: the nccl-tests run failed: {exc.failure}"
        return UserError(
            message,
            "the quoted line says why; fix that (EFA devices and libfabric, GPU memory, the job's time limit) "
            "and run the test again",
            exit_code=EXIT_CHECK_FAILED, details={**exc.to_dict(), "message": message, "summary": message},
        )
    return UserError(str(exc), details=exc.to_dict())


def read_logs(logs: Sequence[Path]) -> list[NcclRun]:
    """Every run of every log (a log may hold several, one after the other)."""
    if not logs:
        raise UserError("no log given")
    try:
        return [run for p in logs for run in read_runs(p)]
    except NcclLogError as exc:
        raise log_error(exc) from exc


def build_report(
    runs: Sequence[NcclRun],
    instance_type: str | None = None,
    nodes: int | None = None,
    threshold: float = contract.NCCL_PASS_THRESHOLD,
    plot: Path | None = None,
) -> Report:
    """Judge every run, compare every later run with the first, read the runs per host; write the plot.

    With two or more runs, speed-up = later busbw / first busbw, so ``nccl-report socket.log efa.log``
    reads "EFA is N x faster than sockets". When the logs list their ranks' hosts, slow hosts, suspect
    links and hosts on sockets are reported (:mod:`efa_stack.nccl_report.hosts`).
    """
    from efa_stack.planning.catalog import UnknownInstanceType, get

    check_options(threshold, nodes)
    line_rate: float | None = None
    try:
        verdicts = [judge(r, instance_type, nodes, threshold) for r in runs]
        if instance_type is not None:
            rate = get(instance_type).efa_line_rate_gbps / 8.0
            all_single = all((nodes if nodes is not None else r.facts.nodes) == 1 for r in runs)
            line_rate = rate if rate > 0 and not all_single else None
    except UnknownInstanceType as e:
        # the catalog's advice, as a spec's problem gives it: a typo's correction, else the family's sizes and the
        # nearest types by family, size and generation (efa_stack.planning.catalog.unknown_type_advice)
        raise UserError(f"unknown instance type {instance_type!r}", e.advice()) from e

    if plot is not None:
        try:
            plot_busbw(runs, plot, line_rate_gbytes=line_rate, threshold=threshold)
        except (OSError, ValueError) as e:
            raise UserError(f"cannot write the plot {str(plot)!r}: {e}") from e

    return Report(
        runs=tuple(RunReport(run=r, verdict=v) for r, v in zip(runs, verdicts, strict=True)),
        comparisons=tuple(compare_runs(runs[0], r) for r in runs[1:]),
        hosts=hosts_report(runs, verdicts),
        plot=str(plot) if plot is not None else None,
        exit_code=0 if all(v.ok for v in verdicts) else 1,
    )


def report_from_text(
    text: str,
    source: str,
    *,
    instance_type: str | None = None,
    nodes: int | None = None,
    threshold: float = contract.NCCL_PASS_THRESHOLD,
    plot: Path | None = None,
) -> Report:
    """parse, judge, model for a log already in memory (``verify --run-nccl``'s launcher log).

    Bad input does not raise: the report carries the error (``error`` set, exit code 2), as ``--json`` does.
    """
    try:
        try:
            runs = parse_text_runs(text, source)
        except NcclLogError as exc:
            raise log_error(exc) from exc
        return build_report(runs, instance_type, nodes, threshold, plot)
    except UserError as exc:
        return error_report(exc)


def report_command(
    logs: list[Path],
    instance_type: str | None = None,
    nodes: int | None = None,
    json_out: bool = False,
    plot: Path | None = None,
    threshold: float = contract.NCCL_PASS_THRESHOLD,
    *,
    console: Console | None = None,
    err_console: Console | None = None,
) -> int:
    """``efa-stack nccl-report LOG [LOG ...]``; returns the exit code (see the module docstring)."""
    out = console or Console()
    try:
        if not logs:
            raise UserError("no log given")
        check_options(threshold, nodes)
        report = build_report(read_logs(logs), instance_type, nodes, threshold, plot)
    except UserError as exc:
        # --json: the report-shaped error document on stdout; else the error line on stderr
        return print_error(exc, json_out=json_out, console=err_console or Console(stderr=True),
                           echo=lambda text: print(text, file=out.file), document=report_document(error_report(exc)))
    print_report(report, out, json_out=json_out)
    return report.exit_code
