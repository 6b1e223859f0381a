"""Read nccl-tests results and judge them against the instance's EFA line rate (``efa-stack nccl-report``).

* :mod:`efa_stack.nccl_report.model`: the pydantic result models every stage shares (and the ``--json`` document);
* :mod:`efa_stack.nccl_report.parse`: text output (plain, MPI/Slurm/kubectl prefixed, several runs per file) and ``-J`` JSON;
* :mod:`efa_stack.nccl_report.judge`: verdicts, the line rate from the catalog, comparisons;
* :mod:`efa_stack.nccl_report.hosts`: which host or link makes a set of runs slow (pure logic, for ``verify --acceptance`` too);
* :mod:`efa_stack.nccl_report.render`: tables fitted to the terminal, the JSON document (errors included), the plot;
* :mod:`efa_stack.nccl_report.command`: the report built from logs (:func:`efa_stack.nccl_report.command.build_report`), the
  command and its exit codes.
"""

from efa_stack.nccl_report.command import build_report, read_logs, report_command, report_from_text
from efa_stack.nccl_report.hosts import HostAnalysis, HostRun, find_slow_hosts
from efa_stack.nccl_report.judge import REFERENCE_RUNS, compare_runs, expected_busbw, is_single_rank, judge
from efa_stack.nccl_report.model import (
    LARGE_MESSAGE_BYTES,
    OLD_ERROR_TOLERANCE,
    Comparison,
    Device,
    Expectation,
    Facts,
    Footer,
    IterStats,
    NcclLogError,
    NcclRun,
    ReferenceRun,
    Report,
    Result,
    Row,
    SizeComparison,
    Verdict,
)
from efa_stack.nccl_report.parse import (
    MAX_INPUT_BYTES,
    MAX_LINE_CHARS,
    MAX_ROWS,
    parse_json,
    parse_log,
    parse_text,
    parse_text_runs,
    read_runs,
)
from efa_stack.nccl_report.render import (
    error_report,
    plot_busbw,
    print_report,
    render_comparison,
    render_run,
    report_dict,
)
from efa_stack.nccl_report.units import human_size

__all__ = [
    "LARGE_MESSAGE_BYTES",
    "MAX_INPUT_BYTES",
    "MAX_LINE_CHARS",
    "MAX_ROWS",
    "OLD_ERROR_TOLERANCE",
    "REFERENCE_RUNS",
    "Comparison",
    "Device",
    "Expectation",
    "Facts",
    "Footer",
    "HostAnalysis",
    "HostRun",
    "IterStats",
    "NcclLogError",
    "NcclRun",
    "ReferenceRun",
    "Report",
    "Result",
    "Row",
    "SizeComparison",
    "Verdict",
    "build_report",
    "compare_runs",
    "error_report",
    "expected_busbw",
    "find_slow_hosts",
    "human_size",
    "is_single_rank",
    "judge",
    "parse_json",
    "parse_log",
    "parse_text",
    "parse_text_runs",
    "plot_busbw",
    "print_report",
    "read_logs",
    "read_runs",
    "render_comparison",
    "render_run",
    "report_command",
    "report_dict",
    "report_from_text",
]
