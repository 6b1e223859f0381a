"""Show results: rich tables that never cut a number, the ``--json`` document, and the busbw plot.

A table is laid out for the width it gets: it starts with every column and, while the table is wider
than the console, leaves out the least important ones (per-iteration statistics and timestamps, then
times, then algbw, then the in-place busbw), saying which in its caption. Correctness (``#wrong``) and
the out-of-place busbw are never left out, and no cell is ever elided: a cell too wide for the leanest
layout wraps instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from efa_stack.console import STATUS_STYLE
from efa_stack.errors import UserError
from efa_stack.nccl_report.model import (
    Comparison,
    HostsReport,
    NcclRun,
    Report,
    ReportError,
    Result,
    RunReport,
    Verdict,
)
from efa_stack.nccl_report.units import human_size

__all__ = [
    "error_report",
    "human_size",
    "plot_busbw",
    "print_report",
    "render_comparison",
    "render_run",
    "report_dict",
]


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def _fmt_check(res: Result | None) -> Text:
    if res is None:
        return Text("-")
    if res.wrong is not None:
        s = str(res.wrong)
    elif res.error is not None:
        s = f"{res.error:.0e}"
    else:
        s = "N/A"
    return Text(s, style=STATUS_STYLE["fail"] if res.failed else "")


@dataclass(frozen=True)
class _Plan:
    """Which optional columns a layout shows."""

    extras: bool  # per-iteration statistics, timestamps
    time: bool
    algbw: bool
    in_place_busbw: bool
    dropped: str  # caption text for what is left out


_PLANS = (
    _Plan(True, True, True, True, ""),
    _Plan(False, True, True, True, "per-iteration and timestamp columns"),
    _Plan(False, False, True, True, "time, per-iteration and timestamp columns"),
    _Plan(False, False, False, True, "time, algbw, per-iteration and timestamp columns"),
    _Plan(False, False, False, False, "time, algbw, in-place busbw, per-iteration and timestamp columns"),
)


def _number_column(table: Table, header: str) -> None:
    table.add_column(header, justify="right", overflow="fold")


def _run_table(run: NcclRun, plan: _Plan) -> Table:
    rows = run.rows
    types = {(r.type, r.redop) for r in rows}
    show_type = len(types) > 1
    show_cycle = run.cycles > 1
    has_ip = any(r.in_place for r in rows)
    has_iter = plan.extras and any(r.out_of_place.per_iteration for r in rows)
    has_ts = plan.extras and any(r.timestamp for r in rows)
    check = run.check_column or "#wrong"
    caption = (
        f"left out to fit the width: {plan.dropped} (widen the terminal, or --json has every value)"
        if plan.dropped
        else None
    )
    table = Table(
        title=f"{run.label}: time in us, bandwidth in GB/s",
        title_justify="left",
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
    )
    _number_column(table, "size")
    if show_cycle:
        _number_column(table, "cycle")
    if show_type:
        table.add_column("type", overflow="fold")
    groups = [("oop", False)] + ([("ip", True)] if has_ip else [])
    for tag, in_place in groups:
        if plan.time:
            _number_column(table, f"{tag}\ntime")
        if plan.algbw:
            _number_column(table, f"{tag}\nalgbw")
        if plan.in_place_busbw or not in_place:
            _number_column(table, f"{tag}\nbusbw")
        _number_column(table, f"{tag}\n{check}")
        if has_iter:
            for name in ("i_min", "i_max", "i_p99", "i_cv%"):
                _number_column(table, f"{tag}\n{name}")
    if has_ts:
        table.add_column("timestamp", overflow="fold")
    for r in rows:
        cells: list[RenderableType] = [human_size(r.size)]
        if show_cycle:
            cells.append(str(r.cycle))
        if show_type:
            cells.append(f"{r.type or '-'} {r.redop or ''}".strip())
        for _tag, in_place in groups:
            res = r.in_place if in_place else r.out_of_place
            if plan.time:
                cells.append(_fmt(res.time_us if res else None, "g"))
            if plan.algbw:
                cells.append(_fmt(res.algbw if res else None))
            if plan.in_place_busbw or not in_place:
                cells.append(_fmt(res.busbw if res else None))
            cells.append(_fmt_check(res))
            if has_iter:
                st = res.per_iteration if res else None
                cells += [
                    _fmt(st.min_us if st else None, "g"),
                    _fmt(st.max_us if st else None, "g"),
                    _fmt(st.p99_us if st else None, "g"),
                    _fmt(st.cv_pct if st else None, "g"),
                ]
        if has_ts:
            cells.append(r.timestamp or "-")
        table.add_row(*cells, style=STATUS_STYLE["fail"] if r.failed else None)
    return table


class _FittedTable:
    """The richest layout of ``run``'s table whose natural width fits the console."""

    def __init__(self, run: NcclRun):
        self.run = run

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = None
        for plan in _PLANS:
            table = _run_table(self.run, plan)
            natural = Measurement.get(console, options.update_width(1 << 16), table).maximum
            if natural <= options.max_width:
                break
        if table is not None:  # _PLANS is never empty
            yield table


def _facts(run: NcclRun) -> Table:
    f = run.facts
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("log", run.source + (f" (run {run.index} of {run.runs_in_file})" if run.runs_in_file > 1 else ""))
    shown: list[tuple[str, Any]] = [
        ("format", "nccl-tests -J JSON" if run.format == "json" else None),
        ("collective", f.collective),
        ("ranks", f.nranks),
        ("hosts", ", ".join(f.hostnames) or None),
        ("GPUs", ", ".join(f.gpu_names) or None),
        ("nThread / nGpus", f"{f.nthread} / {f.ngpus}" if f.nthread is not None else None),
        (
            "sizes",
            f"{human_size(f.min_bytes)} - {human_size(f.max_bytes)}"
            if f.min_bytes is not None and f.max_bytes is not None
            else None,
        ),
        ("iters", f.iters),
        ("cycles (-N)", run.cycles if run.cycles > 1 else None),
        ("NCCL", f.nccl_version),
        ("CUDA", f.cuda_version),
        ("aws-ofi-nccl", f.ofi_nccl_version),
        ("nccl-tests", f.nccl_tests_version),
        ("GPU memory", f.memory_usage),
    ]
    for name, value in shown:
        if value is not None:
            grid.add_row(name, str(value))
    evidence = "; ".join(f.transport_evidence)
    transport = f.transport + (f"  ({evidence})" if evidence else "")
    grid.add_row("transport", Text(transport, style=STATUS_STYLE["not EFA"] if f.transport == "socket" else ""))
    types = {(r.type, r.redop) for r in run.rows}
    if len(types) == 1:
        dtype, redop = next(iter(types))
        grid.add_row("type / redop", f"{dtype or '-'} / {redop or '-'}")
    return grid


def render_run(run: NcclRun, verdict: Verdict | None = None) -> RenderableType:
    """A rich renderable: header facts, the table (fitted to the width), the footer and the verdict."""
    footer = Text()
    if run.footer.out_of_bounds is not None:
        footer.append(
            f"Out of bounds values: {run.footer.out_of_bounds} {run.footer.out_of_bounds_status or ''}".rstrip()
        )
        footer.append("    ")
    if run.footer.avg_busbw is not None:
        footer.append(f"Avg bus bandwidth: {run.footer.avg_busbw:g} GB/s (all sizes; not judged)")
    parts: list[RenderableType] = [_facts(run), _FittedTable(run), footer]
    if verdict is not None:
        style = STATUS_STYLE[verdict.status] if verdict.ok else STATUS_STYLE["fail"]
        parts.append(Text(f"verdict: {verdict.summary}", style=style))
        for note in verdict.notes:
            parts.append(Text(f"  note: {note}"))
    return Group(*parts)


def render_comparison(cmp: Comparison) -> Table:
    """The per-size speed-up of a later run over the baseline (the first run); '-' where undefined."""
    t = Table(
        title=f"speed-up of {cmp.other} over the baseline {cmp.baseline} (busbw {cmp.other} / busbw {cmp.baseline})",
        title_justify="left",
    )
    for header in ("size", "baseline\nbusbw", "busbw", "speed-up", "in-place\nspeed-up"):
        _number_column(t, header)
    for r in cmp.rows:
        t.add_row(
            human_size(r.size),
            _fmt(r.busbw_baseline),
            _fmt(r.busbw_other),
            "-" if r.speedup is None else f"{r.speedup:.2f}x",
            "-" if r.speedup_in_place is None else f"{r.speedup_in_place:.2f}x",
        )
    return t


def render_hosts(hosts: HostsReport) -> RenderableType:
    """The per-host findings: slow hosts and suspect links with their evidence, then hosts on sockets."""
    a = hosts.analysis
    style = STATUS_STYLE.get(a.status, "")
    lines: list[Text] = [Text.assemble(("hosts: ", "bold"), (f"{a.status}: ", style), a.reason)]
    for s in a.slow_hosts:
        lines.append(Text(f"  slow host {s.host}: " + "; ".join(s.slow_runs)))
    for lk in a.suspect_links:
        lines.append(Text(f"  suspect link {lk.hosts[0]} <-> {lk.hosts[1]}: {lk.slow_run}; passing: "
                          + "; ".join(lk.passing_runs)))
    for u in a.unexplained:
        lines.append(Text(f"  not explained: {u}"))
    if a.status == "ambiguous":
        lines.extend(Text(f"  run {r.describe()}") for r in a.runs)
    for sh in hosts.socket_hosts:
        lines.append(Text.assemble(("  sockets, not EFA: ", STATUS_STYLE["not EFA"]), f"{sh.host} in {sh.run} ({sh.evidence})"))
    return Group(*lines)


def error_report(exc: UserError) -> Report:
    """The ``--json`` document of a failed command: no runs, the error (its file, line and layout when known)."""
    detail = {k: v for k, v in exc.details.items() if k in ReportError.model_fields}
    detail.setdefault("message", exc.message)
    detail.setdefault("summary", exc.message)
    return Report(exit_code=exc.exit_code, error=ReportError.model_validate(detail))


def print_report(report: Report, console: Console, *, json_out: bool = False) -> None:
    """The report: its ``--json`` document, or every run's table and verdict, the comparisons and the hosts."""
    if json_out:
        console.file.write(report.model_dump_json(indent=2) + "\n")
        console.file.flush()
        return
    for rr in report.runs:
        console.print(render_run(rr.run, rr.verdict))
        console.print()
    for c in report.comparisons:
        console.print(render_comparison(c))
        console.print()
    if report.hosts is not None:
        console.print(render_hosts(report.hosts))
        console.print()
    if report.plot is not None:
        console.print(f"plot written to {report.plot}", markup=False)


def report_document(report: Report) -> dict[str, Any]:
    """The ``--json`` document as a dict (NaN/inf become null)."""
    return json.loads(report.model_dump_json())


def report_dict(
    runs: Sequence[NcclRun],
    verdicts: Sequence[Verdict] | None = None,
    comparisons: Sequence[Comparison] = (),
    *,
    exit_code: int = 0,
    plot: str | None = None,
    hosts: HostsReport | None = None,
) -> dict[str, Any]:
    """The ``--json`` document: every run with its verdict, the comparisons and the per-host findings."""
    rr = tuple(RunReport(run=r, verdict=verdicts[i] if verdicts is not None else None) for i, r in enumerate(runs))
    return report_document(
        Report(runs=rr, comparisons=tuple(comparisons), hosts=hosts, plot=plot, exit_code=exit_code)
    )


# --------------------------------------------------------------------------------------------------
# Plot


def plot_busbw(
    runs: Iterable[NcclRun],
    path: str | Path,
    *,
    line_rate_gbytes: float | None = None,
    threshold: float | None = None,
    title: str | None = None,
) -> Path:
    """Write a PNG of out-of-place busbw against message size (log2 x axis), one line per run.

    The per-node line rate, when given, is drawn as a dashed horizontal line, and the pass mark
    (``threshold x line rate``) as a dotted one. 0-byte rows cannot sit on a log axis and are left out;
    with ``-N`` cycles the best busbw per size is drawn.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg: no display needed
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    out = Path(path)
    fig = Figure(figsize=(9, 5.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    plotted = 0
    for run in runs:
        best: dict[int, float] = {}
        for r in run.rows:
            if r.size > 0:
                best[r.size] = max(best.get(r.size, 0.0), r.out_of_place.busbw)
        pts = sorted(best.items())
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=run.label)
        plotted += 1
    if line_rate_gbytes is not None and line_rate_gbytes > 0:
        ax.axhline(line_rate_gbytes, linestyle="--", color="black", linewidth=1,
                   label=f"EFA line rate {line_rate_gbytes:g} GB/s")
        if threshold is not None:
            ax.axhline(line_rate_gbytes * threshold, linestyle=":", color="grey", linewidth=1,
                       label=f"pass mark {threshold:.0%} of line rate")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: human_size(int(x)) if x >= 1 else ""))
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw, out-of-place (GB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title or "nccl-tests bus bandwidth")
    ax.grid(True, which="major", alpha=0.3)
    if plotted or line_rate_gbytes:
        ax.legend(loc="upper left", fontsize="small")
    for label in ax.get_xticklabels():
        label.set_rotation(45)
        label.set_horizontalalignment("right")
    fig.tight_layout()
    fig.savefig(out, format="png")
    return out
