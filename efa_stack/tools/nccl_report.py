"""Read nccl-tests output and judge it: ``efa-stack nccl-report``.

This module does five things:

* It parses one ``*_perf`` run from nccl-tests. The input can be the plain output, or the log of an
  MPI launcher where every line carries a ``[1,0]<stdout>:`` tag. The parser skips NCCL INFO lines
  that appear in the middle of the table.
* It compares the large-message bus bandwidth with what the instance type's EFA line rate allows.
* It compares two runs size by size, for example EFA on against EFA off.
* It renders the results as rich tables or as a JSON-able dict.
* It plots busbw against message size.

Parsing
=======
The columns come from the table header line
(``#  size  count  type  redop  root  time  algbw  busbw  #wrong  time ...``). The header is never
hard-coded, so the following layouts are all read correctly:

* old layouts without ``redop`` or ``root``;
* collectives that print ``none``/``-`` in those columns;
* the old ``error`` float columns used before nccl-tests 2.13.

A data row must have exactly as many fields as the header. Numeric fields must be numbers;
``N/A`` is accepted only in the ``#wrong``/``error`` columns, where nccl-tests prints it when
``-c 0`` turns validation off.

Only the stream that printed the table header can supply data rows (the same ``[job,rank]<stream>``
tag). Lines from other ranks and NCCL log lines are skipped. Anything that is not a valid log raises
:class:`NcclLogError`, which names the file, the line number and the offending text. That includes:

* no table;
* a header with no data rows;
* a row cut short or with a non-numeric field;
* a table with no ``# Out of bounds values`` / ``# Avg bus bandwidth`` footer, i.e. truncated;
* a second table in the same log (one run per log).

Correctness
===========
For ``#wrong`` columns (nccl-tests >= 2.13), any count > 0 is a failure.

The old float ``error`` columns hold the largest deviation from the expected result. Float
reductions round, so small values such as ``5e-07`` are normal. A row therefore counts as wrong only
when its error is not finite or is larger than :data:`OLD_ERROR_TOLERANCE` (``1e-3``), far above
rounding noise and far below the O(1) errors of corrupted data.

A footer ``# Out of bounds values : N`` with N > 0 is also a failure. That count is nccl-tests' own
type-aware judgement.

``N/A`` means nothing was checked. If nothing was checked anywhere, correctness is "unchecked".

Transport
=========
Evidence is looked for in every line, whatever its stream:

* ``"socket"`` if NCCL reports ``Using network Socket`` or ``via NET/Socket``. It is also
  ``"socket"`` if aws-ofi-nccl selects a libfabric provider other than ``efa`` (tcp/sockets), since
  that traffic also goes over kernel TCP.
* otherwise ``"efa"`` if the log shows ``Selected Provider is efa``, ``via NET/AWS Libfabric``,
  ``Using network AWS Libfabric`` or any ``NET/OFI`` line;
* otherwise ``"unknown"``, for example when the header was cut or NCCL_DEBUG was not INFO.

The bandwidth model
===================
nccl-tests reports *bus bandwidth*, which is algbw scaled by the collective's data movement. For
all_reduce that is ``busbw = algbw * 2(n-1)/n``, so busbw measures what the hardware carries and
does not depend on the rank count.

In a multi-node ring every node sends, and receives, about ``2(n-1)/n * S`` bytes through its
network cards for each all_reduce of ``S`` bytes. The ring's busbw is therefore bounded by the
per-node network bandwidth. Here that is the instance's EFA line rate, converted to GB/s as
``spec.catalog.get(t).efa_line_rate_gbps / 8`` (for example p5.48xlarge: 3200 Gbit/s -> 400 GB/s).

The expected busbw is ``line rate x efficiency``. The efficiency a run must reach is ``threshold``
(0.7 by default, configurable): a run *passes* when its large-message out-of-place busbw is at least
``threshold x line rate``. Otherwise it is "below expectation".

The large-message busbw is the highest out-of-place busbw over the sizes >= 1 GiB. If no size
reaches 1 GiB, it is the highest busbw at the largest size.

``# Avg bus bandwidth`` averages over every size, tiny latency-bound ones included. It is shown but
never judged.

Caveats:

* On two nodes NCCL may choose tree algorithms (or NVLS/CollNet variants). The busbw formula
  assumes a ring, so those can *exceed* the line rate; the p5.48xlarge reference run reaches
  444 GB/s against 400 GB/s. The report says so when the ratio is above 1.
* A single node has no fabric, so the verdict is "not applicable". The same holds for an
  instance type without EFA.
* If the instance type is not given, no verdict is made against the line rate ("not judged"), but
  ``#wrong`` is still checked.
* The node count defaults to the number of distinct hostnames in the ``#  Rank`` lines. If the log
  has no such lines and no count is given, the verdict is "not judged".

:data:`REFERENCE_RUNS` keeps the published runs the tests also use as fixtures. Reports quote them
for context; they do not change the verdict.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from efa_stack import contract

__all__ = [
    "DEFAULT_THRESHOLD",
    "OLD_ERROR_TOLERANCE",
    "REFERENCE_RUNS",
    "Comparison",
    "Device",
    "Expectation",
    "NcclLogError",
    "NcclRun",
    "ReferenceRun",
    "Result",
    "Row",
    "SizeComparison",
    "Verdict",
    "compare_runs",
    "expected_busbw",
    "human_size",
    "judge",
    "parse_log",
    "parse_text",
    "plot_busbw",
    "render_comparison",
    "render_run",
    "report_command",
    "report_dict",
]

GiB = 1 << 30
DEFAULT_THRESHOLD = contract.NCCL_PASS_THRESHOLD
#: An old-style float ``error`` above this marks the row wrong (see the module docstring).
OLD_ERROR_TOLERANCE = 1e-3
#: Sizes from here up count as "large messages" for the verdict.
LARGE_MESSAGE_BYTES = GiB

Transport = Literal["efa", "socket", "unknown"]
Status = Literal["pass", "below expectation", "not applicable", "not judged"]
Correctness = Literal["ok", "wrong values", "unchecked"]


# --------------------------------------------------------------------------------------------------
# Errors


class NcclLogError(ValueError):
    """A log that is not a complete nccl-tests run. Names the file, the line and the text."""

    def __init__(self, source: str, line: int | None, message: str, text: str | None = None):
        self.source = source
        self.line = line
        self.message = message
        self.text = text
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        tail = f": {self.text!r}" if self.text is not None else ""
        return f"{where}: {self.message}{tail}"


# --------------------------------------------------------------------------------------------------
# Parsed records


@dataclass(frozen=True)
class Device:
    """One ``#  Rank  N Group G Pid P on HOST device D [BUSID] NAME`` header line."""

    rank: int
    host: str
    pid: int
    device: int
    bus_id: str
    name: str
    group: int | None = None


@dataclass(frozen=True)
class Result:
    """One out-of-place or in-place measurement of a row."""

    time_us: float
    algbw: float  # GB/s
    busbw: float  # GB/s
    wrong: int | None = None  # ``#wrong`` count (nccl-tests >= 2.13); None when N/A or absent
    error: float | None = None  # old float ``error`` column; None when N/A or absent

    @property
    def failed(self) -> bool:
        if self.wrong is not None and self.wrong > 0:
            return True
        if self.error is not None:
            return not math.isfinite(self.error) or abs(self.error) > OLD_ERROR_TOLERANCE
        return False

    @property
    def checked(self) -> bool:
        return self.wrong is not None or self.error is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "time_us": _json_float(self.time_us),
            "algbw": _json_float(self.algbw),
            "busbw": _json_float(self.busbw),
            "wrong": self.wrong,
            "error": _json_float(self.error),
            "failed": self.failed,
        }


@dataclass(frozen=True)
class Row:
    """One data row of the table (``line`` is its 1-based line number in the log)."""

    line: int
    size: int  # bytes
    count: int  # elements
    type: str | None
    redop: str | None  # None for '-'/'none' or when the layout has no redop column
    root: int | None  # None for '-' or when the layout has no root column
    out_of_place: Result
    in_place: Result | None

    @property
    def failed(self) -> bool:
        return self.out_of_place.failed or (self.in_place is not None and self.in_place.failed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "size": self.size,
            "count": self.count,
            "type": self.type,
            "redop": self.redop,
            "root": self.root,
            "out_of_place": self.out_of_place.to_dict(),
            "in_place": self.in_place.to_dict() if self.in_place else None,
        }


@dataclass(frozen=True)
class NcclRun:
    """One parsed nccl-tests run: the table rows, the header facts and the footer."""

    source: str
    rows: tuple[Row, ...]
    header_line: int
    check_column: Literal["#wrong", "error"] | None = None
    nthread: int | None = None
    ngpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    iters: int | None = None
    warmup_iters: int | None = None
    devices: tuple[Device, ...] = ()
    nccl_version: str | None = None
    cuda_version: str | None = None
    ofi_nccl_version: str | None = None
    nccl_tests_version: str | None = None
    collective: str | None = None
    transport: Transport = "unknown"
    transport_evidence: str | None = None  # "line N: text" of the line that decided it
    out_of_bounds: int | None = None
    out_of_bounds_status: str | None = None
    avg_busbw: float | None = None
    problems: tuple[str, ...] = ()  # NCCL WARN / test failure lines seen anywhere, "line N: text"

    @property
    def label(self) -> str:
        return Path(self.source).name

    @property
    def nranks(self) -> int | None:
        """The number of ``#  Rank`` device lines, or None if the header was not in the log."""
        return len(self.devices) or None

    @property
    def hostnames(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.host for d in self.devices))

    @property
    def nodes(self) -> int | None:
        """The number of distinct hosts in the header, or None if unknown."""
        return len(self.hostnames) or None

    @property
    def gpu_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.name for d in self.devices))

    @property
    def failed_rows(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.failed)

    @property
    def wrong_total(self) -> int | None:
        counts = [
            res.wrong
            for r in self.rows
            for res in (r.out_of_place, r.in_place)
            if res is not None and res.wrong is not None
        ]
        return sum(counts) if counts else None

    @property
    def has_wrong_values(self) -> bool:
        return bool(self.failed_rows) or bool(self.out_of_bounds)

    @property
    def correctness(self) -> Correctness:
        if self.has_wrong_values:
            return "wrong values"
        checked = any(
            res is not None and res.checked for r in self.rows for res in (r.out_of_place, r.in_place)
        )
        return "ok" if checked or self.out_of_bounds is not None else "unchecked"

    def large_message_row(self) -> Row:
        """The row the verdict uses: max out-of-place busbw over sizes >= 1 GiB, else at the largest size."""
        large = [r for r in self.rows if r.size >= LARGE_MESSAGE_BYTES]
        if not large:
            biggest = max(r.size for r in self.rows)
            large = [r for r in self.rows if r.size == biggest]
        return max(large, key=lambda r: r.out_of_place.busbw)

    def peak_row(self) -> Row:
        """The row with the highest out-of-place busbw over all sizes."""
        return max(self.rows, key=lambda r: r.out_of_place.busbw)

    def facts(self) -> dict[str, Any]:
        return {
            "collective": self.collective,
            "nthread": self.nthread,
            "ngpus": self.ngpus,
            "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes,
            "iters": self.iters,
            "warmup_iters": self.warmup_iters,
            "nranks": self.nranks,
            "nodes": self.nodes,
            "hostnames": list(self.hostnames),
            "gpus": list(self.gpu_names),
            "nccl_version": self.nccl_version,
            "cuda_version": self.cuda_version,
            "aws_ofi_nccl_version": self.ofi_nccl_version,
            "nccl_tests_version": self.nccl_tests_version,
            "transport": self.transport,
            "transport_evidence": self.transport_evidence,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "label": self.label,
            "header_line": self.header_line,
            "check_column": self.check_column,
            "facts": self.facts(),
            "rows": [r.to_dict() for r in self.rows],
            "footer": {
                "out_of_bounds": self.out_of_bounds,
                "out_of_bounds_status": self.out_of_bounds_status,
                "avg_busbw": _json_float(self.avg_busbw),
            },
            "correctness": self.correctness,
            "wrong_total": self.wrong_total,
            "problems": list(self.problems),
        }


# --------------------------------------------------------------------------------------------------
# Parsing

# `kubectl logs --timestamps` prefix, then the Open MPI `--tag-output` prefix `[job,rank]<stream>:`.
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)\s")
_MPI_TAG = re.compile(r"^\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>:")
_NCCL_LOG_LINE = re.compile(r"\bNCCL (?:INFO|WARN|TRACE|ABORT)\b")
_DEVICE = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*?)\s*$"
)
_PARAMS_LINE = re.compile(r"^#\s*nThread\s+\d+")
_PARAM = {
    "nthread": re.compile(r"\bnThread\s+(\d+)"),
    "ngpus": re.compile(r"\bnGpus\s+(\d+)"),
    "min_bytes": re.compile(r"\bminBytes\s+(\d+)"),
    "max_bytes": re.compile(r"\bmaxBytes\s+(\d+)"),
    "warmup_iters": re.compile(r"\bwarmup iters:\s*(\d+)"),
    "iters": re.compile(r"(?<!warmup )(?<!agg )\biters:\s*(\d+)"),
}
_NCCL_VERSION = re.compile(r"\bNCCL version (\d+(?:\.\d+)+)(?:\+cuda(\d+(?:\.\d+)*))?")
_OFI_VERSION = re.compile(r"\baws-ofi-nccl\s+v?(\d\S*)")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_COLLECTIVE = re.compile(
    r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv|gather|scatter"
    r"|hypercube)_perf\b"
)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w+)?")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_PROBLEM = re.compile(r"\bNCCL WARN\b|\bTest (?:NCCL |CUDA |MPI )?failure\b", re.IGNORECASE)
_SOCKET = re.compile(r"\bUsing network Socket\b|\bvia NET/Socket\b")
_PROVIDER = re.compile(r"\bSelected provider is ([A-Za-z0-9_-]+)", re.IGNORECASE)
# EFA evidence, strongest first: the line quoted as evidence is the strongest one found.
_EFA = (
    re.compile(r"\bSelected provider is efa\b", re.IGNORECASE),
    re.compile(r"\bUsing network (?:AWS )?Libfabric\b"),
    re.compile(r"\bvia NET/(?:AWS )?Libfabric\b"),
    re.compile(r"\bNET/OFI\b"),
)
_INT = re.compile(r"^[+-]?\d+$")


def _strip_prefix(raw: str) -> tuple[tuple[str, str, str] | None, str]:
    text = raw.rstrip("\r\n")
    m = _TIMESTAMP.match(text)
    if m:
        text = text[m.end() :]
    m = _MPI_TAG.match(text)
    if m:
        return (m.group(1), m.group(2), m.group(3)), text[m.end() :]
    return None, text


@dataclass
class _Layout:
    """Where each field sits in a data row, read from the table header line."""

    ncols: int
    labels: list[str]
    size: int
    count: int
    type: int | None
    redop: int | None
    root: int | None
    groups: list[dict[str, int]]  # [out-of-place, in-place?]: time/algbw/busbw/wrong|error
    check: Literal["#wrong", "error"] | None


def _is_table_header(body: str) -> bool:
    if not body.startswith("#"):
        return False
    words = {w.lstrip("#").lower() for w in body.split()}
    return {"size", "time", "busbw"} <= words


def _layout(body: str, source: str, lineno: int, raw: str) -> _Layout:
    labels = [w for w in body.lstrip("#").split() if w.strip("#")]  # as printed, e.g. "#wrong"
    names = [w.lstrip("#").lower() for w in labels]
    fixed: dict[str, int] = {}
    groups: list[dict[str, int]] = []
    check: Literal["#wrong", "error"] | None = None
    for i, name in enumerate(names):
        if name == "time":
            groups.append({"time": i})
        elif name in ("algbw", "busbw", "wrong", "error"):
            if not groups or name in groups[-1]:
                raise NcclLogError(source, lineno, f"unexpected column layout ({name!r} out of place)", raw)
            groups[-1][name] = i
            if name == "wrong":
                check = "#wrong"
            elif name == "error":
                check = "error"
        elif not groups and name in ("size", "count", "type", "redop", "root"):
            fixed[name] = i
        # Any other column (a future addition) is kept by position and ignored.
    missing = [n for n in ("size", "count") if n not in fixed]
    if not groups or len(groups) > 2:
        missing.append("time")
    for g in groups:
        missing += [n for n in ("algbw", "busbw") if n not in g]
    if missing:
        raise NcclLogError(
            source, lineno, f"table header without the {', '.join(sorted(set(missing)))} column(s)", raw
        )
    return _Layout(
        ncols=len(names),
        labels=labels,
        size=fixed["size"],
        count=fixed["count"],
        type=fixed.get("type"),
        redop=fixed.get("redop"),
        root=fixed.get("root"),
        groups=groups,
        check=check,
    )


def _looks_like_row(tokens: list[str], layout: _Layout) -> bool:
    return bool(tokens) and (_INT.match(tokens[0]) is not None or len(tokens) == layout.ncols)


def _parse_row(tokens: list[str], layout: _Layout, source: str, lineno: int, raw: str) -> Row:
    if len(tokens) < layout.ncols:
        raise NcclLogError(
            source,
            lineno,
            f"data row cut off: {len(tokens)} of the header's {layout.ncols} columns",
            raw,
        )
    if len(tokens) > layout.ncols:
        raise NcclLogError(
            source, lineno, f"data row has {len(tokens)} columns, the header has {layout.ncols}", raw
        )

    def where(i: int) -> str:
        name = layout.labels[i]
        if len(layout.groups) == 2 and i >= layout.groups[1]["time"]:
            return f"{name!r} (in-place)"
        if i >= layout.groups[0]["time"]:
            return f"{name!r} (out-of-place)"
        return repr(name)

    def integer(i: int) -> int:
        tok = tokens[i]
        if not _INT.match(tok):
            raise NcclLogError(source, lineno, f"non-integer value {tok!r} in column {where(i)}", raw)
        return int(tok)

    def number(i: int) -> float:
        tok = tokens[i]
        try:
            value = float(tok)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise NcclLogError(source, lineno, f"non-numeric value {tok!r} in column {where(i)}", raw)
        return value

    def result(group: dict[str, int]) -> Result:
        wrong = error = None
        if "wrong" in group:
            tok = tokens[group["wrong"]]
            if tok.upper() != "N/A":
                wrong = integer(group["wrong"])
                if wrong < 0:
                    raise NcclLogError(source, lineno, f"negative #wrong count {tok!r}", raw)
        if "error" in group:
            tok = tokens[group["error"]]
            if tok.upper() != "N/A":
                try:
                    error = float(tok)  # nan/inf are kept: they mark the row wrong
                except ValueError:
                    raise NcclLogError(
                        source, lineno, f"non-numeric value {tok!r} in column {where(group['error'])}", raw
                    ) from None
        return Result(
            time_us=number(group["time"]),
            algbw=number(group["algbw"]),
            busbw=number(group["busbw"]),
            wrong=wrong,
            error=error,
        )

    def optional_text(i: int | None) -> str | None:
        if i is None or tokens[i] in ("-", "none"):
            return None
        return tokens[i]

    root: int | None = None
    if layout.root is not None and tokens[layout.root] not in ("-", "none"):
        root = integer(layout.root)
    size = integer(layout.size)
    count = integer(layout.count)
    if size < 0 or count < 0:
        raise NcclLogError(source, lineno, "negative size or count", raw)
    return Row(
        line=lineno,
        size=size,
        count=count,
        type=optional_text(layout.type),
        redop=optional_text(layout.redop),
        root=root,
        out_of_place=result(layout.groups[0]),
        in_place=result(layout.groups[1]) if len(layout.groups) == 2 else None,
    )


def parse_text(text: str, source: str = "<text>") -> NcclRun:
    """Parse one nccl-tests run out of ``text``. ``source`` names it in errors (usually the path)."""
    facts: dict[str, Any] = {}
    devices: dict[int, Device] = {}
    problems: list[str] = []
    socket_at = other_provider_at = None
    efa_at: list[str | None] = [None] * len(_EFA)

    state = "before"  # -> "table" at the header line -> "footer" at the first footer line
    layout: _Layout | None = None
    header_line = 0
    header_raw = ""
    table_stream: tuple[str, str, str] | None = None
    rows: list[Row] = []
    oob: int | None = None
    oob_status: str | None = None
    avg: float | None = None
    last_line, last_raw = 0, ""

    lines = text.splitlines()
    for lineno, raw in enumerate(lines, 1):
        raw = raw.rstrip("\r\n")
        stream, body = _strip_prefix(raw)
        body = body.strip()
        if not body:
            continue
        last_line, last_raw = lineno, raw

        # ---- facts, from any stream and any position
        if body.startswith("#"):
            m = _DEVICE.match(body)
            if m:
                rank = int(m["rank"])
                devices.setdefault(
                    rank,
                    Device(
                        rank=rank,
                        host=m["host"],
                        pid=int(m["pid"]),
                        device=int(m["device"]),
                        bus_id=m["bus"],
                        name=m["name"],
                        group=int(m["group"]) if m["group"] is not None else None,
                    ),
                )
            elif _PARAMS_LINE.match(body) and "nthread" not in facts:
                for key, rx in _PARAM.items():
                    pm = rx.search(body)
                    facts[key] = int(pm.group(1)) if pm else None
            else:
                m = _TESTS_VERSION.match(body)
                if m:
                    facts.setdefault("nccl_tests_version", m.group(1))
        m = _NCCL_VERSION.search(body)
        if m and "nccl_version" not in facts:
            facts["nccl_version"] = m.group(1)
            facts["cuda_version"] = m.group(2)
        m = _OFI_VERSION.search(body)
        if m:
            facts.setdefault("ofi_nccl_version", m.group(1))
        m = _COLLECTIVE.search(body)
        if m:
            facts.setdefault("collective", m.group(1))
        evidence = f"line {lineno}: {body}"
        if socket_at is None and _SOCKET.search(body):
            socket_at = evidence
        m = _PROVIDER.search(body)
        if m and other_provider_at is None and not m.group(1).lower().startswith("efa"):
            other_provider_at = evidence
        for i, rx in enumerate(_EFA):
            if efa_at[i] is None and rx.search(body):
                efa_at[i] = evidence
        if _PROBLEM.search(body) and len(problems) < 20:
            problems.append(evidence)

        # ---- the table
        if state == "before":
            if _is_table_header(body):
                layout = _layout(body, source, lineno, raw)
                state, header_line, header_raw, table_stream = "table", lineno, raw, stream
            continue
        if stream != table_stream:
            continue  # another rank or stderr: never table content
        if body.startswith("#"):
            m = _OOB.match(body)
            if m:
                oob, oob_status, state = int(m.group(1)), m.group(2), "footer"
                continue
            m = _AVG.match(body)
            if m:
                try:
                    avg = float(m.group(1))
                except ValueError:
                    raise NcclLogError(source, lineno, "non-numeric average bus bandwidth", raw) from None
                state = "footer"
                continue
            if _is_table_header(body):
                if state == "table" and not rows:
                    continue  # a repeated header line before any data is harmless
                raise NcclLogError(
                    source,
                    lineno,
                    f"a second nccl-tests table (the first starts at line {header_line}); "
                    "this report reads one run per log",
                    raw,
                )
            continue  # units line, blank '#', "# Errors with asterisks ..." and such
        if state == "footer" or _NCCL_LOG_LINE.search(body):
            continue
        assert layout is not None
        tokens = body.split()
        if _looks_like_row(tokens, layout):
            rows.append(_parse_row(tokens, layout, source, lineno, raw))
        # Anything else in the table's stream (a failure message, a stray print) is noise here;
        # failures among it were collected in `problems` and show up if the table never ends.

    if state == "before":
        raise NcclLogError(
            source,
            len(lines) or None,
            "no nccl-tests result table (no '#  size  count  type ... time  algbw  busbw' header line)",
            last_raw if lines else None,
        )
    if not rows:
        raise NcclLogError(source, header_line, "table header without any data rows", header_raw)
    if state == "table":
        hint = f"; the log reports {problems[-1]}" if problems else ""
        raise NcclLogError(
            source,
            last_line,
            f"truncated: the log ends after {len(rows)} data rows without the table footer "
            f"('# Out of bounds values' / '# Avg bus bandwidth'){hint}; last line read",
            last_raw,
        )

    assert layout is not None
    if socket_at is not None:
        transport: Transport = "socket"
        evidence_line: str | None = socket_at
    elif other_provider_at is not None:
        transport, evidence_line = "socket", other_provider_at
    elif any(efa_at):
        transport, evidence_line = "efa", next(e for e in efa_at if e)
    else:
        transport, evidence_line = "unknown", None

    return NcclRun(
        source=source,
        rows=tuple(rows),
        header_line=header_line,
        check_column=layout.check,
        nthread=facts.get("nthread"),
        ngpus=facts.get("ngpus"),
        min_bytes=facts.get("min_bytes"),
        max_bytes=facts.get("max_bytes"),
        iters=facts.get("iters"),
        warmup_iters=facts.get("warmup_iters"),
        devices=tuple(devices[k] for k in sorted(devices)),
        nccl_version=facts.get("nccl_version"),
        cuda_version=facts.get("cuda_version"),
        ofi_nccl_version=facts.get("ofi_nccl_version"),
        nccl_tests_version=facts.get("nccl_tests_version"),
        collective=facts.get("collective"),
        transport=transport,
        transport_evidence=evidence_line,
        out_of_bounds=oob,
        out_of_bounds_status=oob_status,
        avg_busbw=avg,
        problems=tuple(problems),
    )


def parse_log(path: str | Path) -> NcclRun:
    """Parse the nccl-tests log at ``path``; raises :class:`NcclLogError` for anything unusable."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise NcclLogError(str(p), None, f"cannot read the log: {e.strerror or e}") from None
    return parse_text(text, source=str(p))


# --------------------------------------------------------------------------------------------------
# Expectation and verdict


@dataclass(frozen=True)
class ReferenceRun:
    """A published nccl-tests result, kept for context in reports."""

    instance_type: str
    nodes: int
    ranks: int
    collective: str
    dtype: str
    size: int
    busbw_out_of_place: float
    busbw_in_place: float
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "nodes": self.nodes,
            "ranks": self.ranks,
            "collective": self.collective,
            "dtype": self.dtype,
            "size": self.size,
            "busbw_out_of_place": self.busbw_out_of_place,
            "busbw_in_place": self.busbw_in_place,
            "source": self.source,
        }


#: Only figures with a public source; both logs are also the test fixtures (tests/fixtures/nccl/).
REFERENCE_RUNS: tuple[ReferenceRun, ...] = (
    # aws-samples/aws-do-eks, wd/conf/terraform/eks-gpu-efa/README.md (MIT-0), taken from
    # aws-ia/terraform-aws-eks-blueprints patterns/nvidia-gpu-efa: 2 x p5.48xlarge, 8 GPUs each, EFA,
    # all_reduce_perf float sum; peak busbw at 2 GiB is 444.31 (out-of-place) / 444.41 (in-place).
    ReferenceRun(
        instance_type="p5.48xlarge",
        nodes=2,
        ranks=16,
        collective="all_reduce",
        dtype="float",
        size=2 * GiB,
        busbw_out_of_place=444.31,
        busbw_in_place=444.41,
        source="aws-samples/aws-do-eks wd/conf/terraform/eks-gpu-efa/README.md",
    ),
    # aws-samples/aws-do-eks, wd/conf/terraform/eks-efa/README.md (MIT-0): 2 x g4dn.metal, one T4 per
    # worker (2 ranks), EFA via aws-ofi-nccl 1.5.0aws, NCCL 2.12.7; busbw at 1 GiB is 3.11 / 3.12.
    ReferenceRun(
        instance_type="g4dn.metal",
        nodes=2,
        ranks=2,
        collective="all_reduce",
        dtype="float",
        size=GiB,
        busbw_out_of_place=3.11,
        busbw_in_place=3.12,
        source="aws-samples/aws-do-eks wd/conf/terraform/eks-efa/README.md",
    ),
)


@dataclass(frozen=True)
class Expectation:
    """What the fabric of ``nodes`` x ``instance_type`` allows for large-message busbw."""

    instance_type: str
    nodes: int
    gpus_per_node: int
    efa_interfaces: int
    line_rate_gbps: float  # Gbit/s per node: the EFA cards' peak, from the catalog
    threshold: float  # pass when busbw >= threshold x line rate (the efficiency factor)
    applicable: bool
    reason: str
    references: tuple[ReferenceRun, ...] = ()

    @property
    def line_rate_gbytes(self) -> float:
        """The per-node line rate in GB/s (Gbit/s / 8): the model's ceiling for ring busbw."""
        return self.line_rate_gbps / 8.0

    @property
    def pass_mark_gbytes(self) -> float:
        """Expected busbw = line rate x efficiency: the busbw a run must reach to pass."""
        return self.line_rate_gbytes * self.threshold

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "efa_interfaces": self.efa_interfaces,
            "line_rate_gbps": self.line_rate_gbps,
            "line_rate_gbytes": self.line_rate_gbytes,
            "threshold": self.threshold,
            "pass_mark_gbytes": self.pass_mark_gbytes,
            "applicable": self.applicable,
            "reason": self.reason,
            "references": [r.to_dict() for r in self.references],
        }


def _check_threshold(threshold: float) -> None:
    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be a positive number, got {threshold!r}")


def expected_busbw(instance_type: str, nodes: int, threshold: float = DEFAULT_THRESHOLD) -> Expectation:
    """The line-rate expectation for ``nodes`` x ``instance_type`` (see the module docstring).

    Raises ``spec.catalog.UnknownInstanceType`` (with ``.suggestions``) for names not in the
    catalog, and ValueError for ``nodes < 1`` or a threshold that is not positive.
    """
    from efa_stack.spec.catalog import get  # imported here so that parsing works without the catalog

    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes must be a positive integer, got {nodes!r}")
    _check_threshold(threshold)
    it = get(instance_type)
    refs = tuple(r for r in REFERENCE_RUNS if r.instance_type == it.name and r.nodes == nodes)
    rate = float(it.efa_line_rate_gbps)
    if nodes == 1:
        applicable, reason = False, "single node: collectives do not cross the network fabric"
    elif rate <= 0:
        applicable, reason = False, f"{it.name} has no EFA, so there is no EFA line rate to compare with"
    else:
        applicable = True
        reason = (
            f"ring busbw is bounded by the per-node EFA line rate: {rate:g} Gbit/s = {rate / 8:g} GB/s; "
            f"pass mark {threshold:g} x line rate = {rate / 8 * threshold:g} GB/s"
        )
    return Expectation(
        instance_type=it.name,
        nodes=nodes,
        gpus_per_node=it.gpus,
        efa_interfaces=it.max_efa_interfaces,
        line_rate_gbps=rate,
        threshold=threshold,
        applicable=applicable,
        reason=reason,
        references=refs,
    )


@dataclass(frozen=True)
class Verdict:
    """The judgement of one run: bandwidth against the line rate, plus correctness."""

    status: Status
    correctness: Correctness
    reason: str
    measured_busbw: float | None = None  # the large-message out-of-place busbw
    measured_size: int | None = None
    ratio: float | None = None  # measured / line rate (GB/s)
    nodes: int | None = None
    expectation: Expectation | None = None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """False when the run had wrong values or fell below the expectation."""
        return self.correctness != "wrong values" and self.status != "below expectation"

    def summary(self) -> str:
        if self.status in ("pass", "below expectation") and self.expectation is not None:
            assert self.measured_busbw is not None and self.measured_size is not None
            assert self.ratio is not None
            e = self.expectation
            head = (
                f"{self.status}: {self.measured_busbw:g} GB/s busbw at {human_size(self.measured_size)} = "
                f"{self.ratio:.0%} of the {e.line_rate_gbytes:g} GB/s EFA line rate of "
                f"{e.nodes} x {e.instance_type} (pass mark {e.threshold:.0%})"
            )
        else:
            head = f"{self.status}: {self.reason}"
        return f"{head}; correctness: {self.correctness}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "correctness": self.correctness,
            "ok": self.ok,
            "reason": self.reason,
            "measured_busbw": _json_float(self.measured_busbw),
            "measured_size": self.measured_size,
            "ratio": _json_float(self.ratio),
            "nodes": self.nodes,
            "expectation": self.expectation.to_dict() if self.expectation else None,
            "notes": list(self.notes),
            "summary": self.summary(),
        }


def judge(
    run: NcclRun,
    instance_type: str | None = None,
    nodes: int | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> Verdict:
    """Judge ``run``. ``nodes`` defaults to the distinct hostnames in the log's header.

    Raises ``spec.catalog.UnknownInstanceType`` for an unknown ``instance_type``.
    """
    _check_threshold(threshold)
    notes: list[str] = []
    row = run.large_message_row()
    measured, size = row.out_of_place.busbw, row.size

    if run.has_wrong_values:
        bad = run.failed_rows
        what = []
        if bad:
            first = bad[0]
            what.append(
                f"{len(bad)} row(s) with wrong values, first at {human_size(first.size)} (line {first.line})"
            )
        if run.out_of_bounds:
            what.append(f"footer reports {run.out_of_bounds} out-of-bounds value(s)")
        notes.append(f"correctness check failed: {'; '.join(what)}")
    if run.transport == "socket":
        notes.append(f"NCCL used TCP sockets, not EFA ({run.transport_evidence})")
    elif run.transport == "unknown":
        notes.append("the log does not show the network transport (run with NCCL_DEBUG=INFO to see it)")
    if run.collective is not None and run.collective != "all_reduce":
        notes.append(
            f"the line-rate model is derived for all_reduce; {run.collective} busbw is normalised "
            "the same way by nccl-tests but may approach the line rate differently"
        )

    used_nodes = nodes if nodes is not None else run.nodes
    if nodes is not None and run.nodes is not None and nodes != run.nodes:
        notes.append(f"judged as {nodes} node(s), but the log's header names {run.nodes} host(s)")

    def verdict(status: Status, reason: str, **kw: Any) -> Verdict:
        return Verdict(
            status=status,
            correctness=run.correctness,
            reason=reason,
            measured_busbw=measured,
            measured_size=size,
            nodes=used_nodes,
            notes=tuple(notes),
            **kw,
        )

    if instance_type is None:
        return verdict("not judged", "no instance type given, so no line rate to compare with")
    if used_nodes is None:
        from efa_stack.spec.catalog import get

        get(instance_type)  # still reject unknown names
        return verdict("not judged", "node count unknown (the log names no hosts): pass the node count")
    exp = expected_busbw(instance_type, used_nodes, threshold)
    if not exp.applicable:
        return verdict("not applicable", exp.reason, expectation=exp)

    ratio = measured / exp.line_rate_gbytes
    status: Status = "pass" if ratio >= threshold else "below expectation"
    if ratio > 1:
        notes.append(
            f"busbw is {ratio:.2f} x the line rate: on {used_nodes} nodes NCCL may use tree algorithms, "
            "whose busbw (computed with the ring formula) can exceed the network line rate"
        )
    ranks = run.nranks
    if ranks is not None and exp.gpus_per_node and ranks < used_nodes * exp.gpus_per_node:
        notes.append(
            f"the run used {ranks} rank(s) on {used_nodes} node(s), but each {exp.instance_type} has "
            f"{exp.gpus_per_node} GPUs; fewer GPUs per node can drive less of the line rate"
        )
    for ref in exp.references:
        notes.append(
            f"published reference: {ref.busbw_out_of_place:g} GB/s {ref.collective} busbw at "
            f"{human_size(ref.size)} on {ref.nodes} x {ref.instance_type} ({ref.source})"
        )
    return verdict(status, exp.reason, ratio=ratio, expectation=exp)


# --------------------------------------------------------------------------------------------------
# Comparison


@dataclass(frozen=True)
class SizeComparison:
    size: int
    busbw_a: float
    busbw_b: float
    speedup: float | None  # busbw_a / busbw_b, None when either is 0
    in_place_a: float | None = None
    in_place_b: float | None = None
    speedup_in_place: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "busbw_a": _json_float(self.busbw_a),
            "busbw_b": _json_float(self.busbw_b),
            "speedup": _json_float(self.speedup),
            "in_place_a": _json_float(self.in_place_a),
            "in_place_b": _json_float(self.in_place_b),
            "speedup_in_place": _json_float(self.speedup_in_place),
        }


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    rows: tuple[SizeComparison, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "rows": [r.to_dict() for r in self.rows]}


def _ratio(x: float | None, y: float | None) -> float | None:
    if x is None or y is None or x <= 0 or y <= 0:
        return None
    return x / y


def compare_runs(a: NcclRun, b: NcclRun) -> Comparison:
    """Speed-up of ``a`` over ``b`` (busbw_a / busbw_b) for every size present in both runs.

    A size that appears k times in a run (like nccl-tests' two 0-byte rows) is paired by order.
    """
    by_size: dict[int, list[Row]] = {}
    for r in b.rows:
        by_size.setdefault(r.size, []).append(r)
    seen: dict[int, int] = {}
    out: list[SizeComparison] = []
    for ra in a.rows:
        k = seen.get(ra.size, 0)
        seen[ra.size] = k + 1
        candidates = by_size.get(ra.size, [])
        if k >= len(candidates):
            continue
        rb = candidates[k]
        ia = ra.in_place.busbw if ra.in_place else None
        ib = rb.in_place.busbw if rb.in_place else None
        out.append(
            SizeComparison(
                size=ra.size,
                busbw_a=ra.out_of_place.busbw,
                busbw_b=rb.out_of_place.busbw,
                speedup=_ratio(ra.out_of_place.busbw, rb.out_of_place.busbw),
                in_place_a=ia,
                in_place_b=ib,
                speedup_in_place=_ratio(ia, ib),
            )
        )
    return Comparison(a=a.label, b=b.label, rows=tuple(out))


# --------------------------------------------------------------------------------------------------
# Rendering


def human_size(n: int) -> str:
    """``0 B``, ``512 B``, ``1 KiB``, ``1.5 KiB``, ``2 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if value == int(value) else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


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
    return Text(s, style="bold red" if res.failed else "")


def render_run(run: NcclRun, verdict: Verdict | None = None) -> RenderableType:
    """A rich renderable: header facts, the table, the footer and the verdict."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("log", run.source)
    shown: list[tuple[str, Any]] = [
        ("collective", run.collective),
        ("ranks", run.nranks),
        ("hosts", ", ".join(run.hostnames) or None),
        ("GPUs", ", ".join(run.gpu_names) or None),
        ("nThread / nGpus", f"{run.nthread} / {run.ngpus}" if run.nthread is not None else None),
        (
            "sizes",
            f"{human_size(run.min_bytes)} - {human_size(run.max_bytes)}"
            if run.min_bytes is not None and run.max_bytes is not None
            else None,
        ),
        ("iters", run.iters),
        ("NCCL", run.nccl_version),
        ("CUDA", run.cuda_version),
        ("aws-ofi-nccl", run.ofi_nccl_version),
        ("nccl-tests", run.nccl_tests_version),
    ]
    for name, value in shown:
        if value is not None:
            facts.add_row(name, str(value))
    transport = run.transport + (f"  ({run.transport_evidence})" if run.transport_evidence else "")
    facts.add_row("transport", Text(transport, style="red" if run.transport == "socket" else ""))

    types = {(r.type, r.redop) for r in run.rows}
    show_type = len(types) > 1
    if not show_type:
        dtype, redop = next(iter(types))
        facts.add_row("type / redop", f"{dtype or '-'} / {redop or '-'}")
    has_ip = any(r.in_place for r in run.rows)
    check = run.check_column or "#wrong"
    table = Table(
        title=f"{run.label}: time in us, bandwidth in GB/s",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
    )
    table.add_column("size", justify="right", no_wrap=True)
    if show_type:
        table.add_column("type", no_wrap=True)
    for group in ("out-of-place", "in-place") if has_ip else ("out-of-place",):
        tag = "oop" if group == "out-of-place" else "ip"
        for name in ("time", "algbw", "busbw", check):
            table.add_column(f"{tag}\n{name}", justify="right", no_wrap=True)
    for r in run.rows:
        cells: list[RenderableType] = [human_size(r.size)]
        if show_type:
            cells.append(f"{r.type or '-'} {r.redop or ''}".strip())
        results: list[Result | None] = [r.out_of_place] + ([r.in_place] if has_ip else [])
        for res in results:
            cells += [
                _fmt(res.time_us if res else None, "g"),
                _fmt(res.algbw if res else None),
                _fmt(res.busbw if res else None),
                _fmt_check(res),
            ]
        table.add_row(*cells, style="red" if r.failed else None)

    footer = Text()
    if run.out_of_bounds is not None:
        footer.append(f"Out of bounds values: {run.out_of_bounds} {run.out_of_bounds_status or ''}".rstrip())
        footer.append("    ")
    if run.avg_busbw is not None:
        footer.append(f"Avg bus bandwidth: {run.avg_busbw:g} GB/s (all sizes; not judged)")

    parts: list[RenderableType] = [facts, table, footer]
    if verdict is not None:
        if not verdict.ok:
            style = "bold red"
        elif verdict.status == "pass":
            style = "bold green"
        else:
            style = "bold yellow"
        parts.append(Text(f"verdict: {verdict.summary()}", style=style))
        for note in verdict.notes:
            parts.append(Text(f"  note: {note}"))
    return Group(*parts)


def render_comparison(cmp: Comparison) -> Table:
    """A rich table of the per-size speed-up of run ``a`` over run ``b`` ('-' where undefined)."""
    t = Table(title=f"speed-up {cmp.a} / {cmp.b} (busbw)", title_justify="left")
    t.add_column("size", justify="right")
    t.add_column(f"busbw {cmp.a}", justify="right")
    t.add_column(f"busbw {cmp.b}", justify="right")
    t.add_column("speed-up", justify="right")
    t.add_column("in-place speed-up", justify="right")
    for r in cmp.rows:
        t.add_row(
            human_size(r.size),
            _fmt(r.busbw_a),
            _fmt(r.busbw_b),
            "-" if r.speedup is None else f"{r.speedup:.2f}x",
            "-" if r.speedup_in_place is None else f"{r.speedup_in_place:.2f}x",
        )
    return t


def report_dict(
    runs: Sequence[NcclRun],
    verdicts: Sequence[Verdict] | None = None,
    comparisons: Sequence[Comparison] = (),
) -> dict[str, Any]:
    """The ``--json`` document: every run with its verdict, and the comparisons."""
    out_runs = []
    for i, run in enumerate(runs):
        d = run.to_dict()
        d["verdict"] = verdicts[i].to_dict() if verdicts is not None else None
        out_runs.append(d)
    return {"runs": out_runs, "comparisons": [c.to_dict() for c in comparisons]}


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
    (``threshold x line rate``) as a dotted one. 0-byte rows cannot sit on a log axis and are left out.
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
        pts = sorted((r.size, r.out_of_place.busbw) for r in run.rows if r.size > 0)
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


# --------------------------------------------------------------------------------------------------
# The command


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
    """``efa-stack nccl-report LOG [LOG ...]``: parse, judge, compare, render; returns the exit code.

    * 0: every run passes or is not judged (not applicable / no instance type).
    * 1: a run has wrong values (``#wrong`` > 0, out-of-bounds values, large old-style error) or is
      below the expectation.
    * 2: bad input: an unreadable/malformed/truncated log, an unknown instance type, a bad
      ``nodes``/``threshold``, or a plot that cannot be written. The message goes to stderr and no
      traceback is shown.

    With two or more logs, every later run is compared with the first (speed-up = first / other),
    so pass the EFA run first and the socket run second to read "EFA is N x faster".
    """
    out = console or Console()
    err = err_console or Console(stderr=True)

    def fail(msg: str) -> int:
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
        runs = [parse_log(p) for p in logs]
    except NcclLogError as e:
        return fail(str(e))

    line_rate: float | None = None
    if instance_type is None:
        verdicts = [judge(r, None, nodes, threshold) for r in runs]
    else:
        try:
            from efa_stack.spec.catalog import UnknownInstanceType, get
        except ImportError as e:
            return fail(f"the instance catalog cannot be loaded: {e}")
        try:
            rate = get(instance_type).efa_line_rate_gbps / 8.0
            verdicts = [judge(r, instance_type, nodes, threshold) for r in runs]
        except UnknownInstanceType as e:
            hint = f" (did you mean: {', '.join(e.suggestions)}?)" if e.suggestions else ""
            return fail(f"unknown instance type {instance_type!r}{hint}")
        all_single = all((nodes if nodes is not None else r.nodes) == 1 for r in runs)
        line_rate = rate if rate > 0 and not all_single else None

    comparisons = [compare_runs(runs[0], r) for r in runs[1:]]

    if plot is not None:
        try:
            plot_busbw(runs, plot, line_rate_gbytes=line_rate, threshold=threshold)
        except (OSError, ValueError) as e:
            return fail(f"cannot write the plot {str(plot)!r}: {e}")

    code = 0 if all(v.ok for v in verdicts) else 1
    if json_out:
        doc = report_dict(runs, verdicts, comparisons)
        doc["plot"] = str(plot) if plot is not None else None
        doc["exit_code"] = code
        out.file.write(json.dumps(doc, indent=2) + "\n")
        out.file.flush()
        return code

    for run, v in zip(runs, verdicts):
        out.print(render_run(run, v))
        out.print()
    for c in comparisons:
        out.print(render_comparison(c))
        out.print()
    if plot is not None:
        out.print(f"plot written to {plot}", markup=False)
    return code


def _json_float(x: float | None) -> float | None:
    """JSON has no NaN/inf: such values (only possible in an old-style error column) become None."""
    if x is None or not math.isfinite(x):
        return None
    return x
