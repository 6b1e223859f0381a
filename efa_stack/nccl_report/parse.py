"""Read nccl-tests output: the text table (plain or as launchers and schedulers log it) or the ``-J`` JSON file.

Both inputs end as the same :class:`~efa_stack.nccl_report.model.NcclRun` models; nothing downstream
knows which one was read.

The text layout follows what nccl-tests prints (NVIDIA/nccl-tests@v2.19.6, src/util.cu):

* ``writeResultHeader``: the column header ``# size count type redop root time algbw busbw #wrong time
  algbw busbw #wrong``; ``-C 1`` prints ``cputime`` for ``time``; ``-I 1`` adds ``i_min i_max i_p99 i_cv%``
  after each ``#wrong``; ``-S 1`` adds a ``timestamp`` column, whose value is ``%Y-%m-%d %H:%M:%S`` (two
  words in a row, one in the header).
* ``writeBenchmarkLinePreamble`` / ``writeBenchmarkLineBody``: ``%12li  %12li  %8s  %6s  %6s`` then, per
  measurement, ``  %7s  %6s  %6s  %6g`` (``    N/A`` with ``-c 0``). ``#wrong`` is a double printed with
  ``%6g``, so a count >= 1,000,000 reads ``2.68435e+08``; time and bandwidths go through ``getFloatStr``,
  which falls back to ``%.1e`` when a number does not fit.
* ``writeResultFooter``: ``# Out of bounds values : N OK|FAILED`` and ``# Avg bus bandwidth : %g``, then
  ``# Collective test concluded: NAME``; ``-M 1`` adds ``# GPU memory usage : ...`` (``writeMemInfo``).
* src/common.cu ``TimeTest``: ``-N k`` prints the whole size sweep k times inside one table.

Older layouts are read from the header too: no ``redop``/``root`` columns, ``none``/``-`` in them, and the
float ``error`` columns printed before nccl-tests 2.13.

Line prefixes removed before reading (outermost first, after any indentation of a pasted log):
``kubectl logs --timestamps`` (RFC 3339 with nanoseconds, then a space), Slurm ``srun -l``/``--label``
(the task number and ``: ``; srun(1): "Prepend task number to lines of stdout/err") and Open MPI
``--tag-output`` (``[job,rank]<stdout>:``). Only the stream that printed a table header supplies its
rows. CRLF endings are read like LF.

One file may hold several runs one after the other; each run ends at its footer. Reading is bounded:
files larger than :data:`MAX_INPUT_BYTES` are refused, lines are read at most :data:`MAX_LINE_CHARS` at
a time (the rest of a longer line is skipped) and a run holds at most :data:`MAX_ROWS` rows.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from efa_stack.nccl_report.model import (
    Device,
    Facts,
    Footer,
    HostTransport,
    IterStats,
    NcclLogError,
    NcclRun,
    Result,
    Row,
    Transport,
)

__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_LINE_CHARS",
    "MAX_ROWS",
    "parse_json",
    "parse_log",
    "parse_text",
    "read_runs",
    "read_text_runs",
]

#: The largest input read (a 64-node launcher log with NCCL_DEBUG=INFO is tens of MiB).
MAX_INPUT_BYTES = 256 << 20
#: The longest line read; an nccl-tests data row is about 200 characters, a -I row about 300.
MAX_LINE_CHARS = 16 << 10
#: The most rows one run may have (-N repeats a ~35-size sweep; this allows hundreds of cycles).
MAX_ROWS = 50_000
#: The JSON format versions read (nccl-tests src/util.cu JSON_FILE_VERSION: 1 in 2.17.3-2.19.1, 2 in
#: 2.19.2, 3 in 2.19.6); the keys read here are in all three.
JSON_VERSIONS = (1, 2, 3)

TEXT_LAYOUT = "nccl-tests text output"
JSON_LAYOUT = "nccl-tests -J JSON result"

# --------------------------------------------------------------------------------------------------
# Line prefixes

_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)\s")
_SLURM_LABEL = re.compile(r"^(\d+): ")
_MPI_TAG = re.compile(r"^\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>:")

Stream = tuple[str, ...]


def _strip_prefix(raw: str) -> tuple[Stream, str]:
    """(the stream the line came from, the line without its prefixes and surrounding blanks)."""
    text = raw.replace("\r", "").strip()
    stream: list[str] = []
    m = _TIMESTAMP.match(text)
    if m:
        text = text[m.end() :].lstrip()
    m = _SLURM_LABEL.match(text)
    if m:
        stream += ["task", m.group(1)]
        text = text[m.end() :].lstrip()
    m = _MPI_TAG.match(text)
    if m:
        stream += ["mpi", m.group(1), m.group(2), m.group(3)]
        # nccl-tests prints a table row in several printf calls and ``mpirun --tag-output`` tags each
        # piece it forwards, so the rank's tag also stands inside the row: drop those too.
        text = text[m.end() :].replace(m.group(0), "")
    return tuple(stream), text.strip()


# --------------------------------------------------------------------------------------------------
# Facts from any line

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
# aws-ofi-nccl@v1.21.1 src/nccl_ofi_net.cpp:188 prints "Initializing " PACKAGE_STRING ("aws-ofi-nccl X.Y.Z").
_OFI_VERSION = re.compile(r"\baws-ofi-nccl\s+v?(\d\S*)")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_COLLECTIVE = re.compile(
    r"\b(all_reduce|all_gather|reduce_scatter|alltoallv?|broadcast|reduce|sendrecv|gather|scatter"
    r"|hypercube)_perf\b"
)
_CONCLUDED = re.compile(r"^#\s*Collective test concluded\b")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w+)?")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_MEMORY = re.compile(r"^#\s*GPU memory usage\s*:\s*(.*?)\s*$")
_PER_ITER = re.compile(r"^#\s*Per-Iteration Report\b")
# Lines that say why a run failed: nccl-tests' own (NVIDIA/nccl-tests@v2.19.6 src/common.h NCCLCHECK/CUDACHECK:
# "Test NCCL failure %s:%d '%s'", "Test CUDA failure ..."; src/common.cu testStreamSynchronize: "%s: Test timeout
# (%ds) %s:%d" past -T), CUDA errors, a collective timeout, and mpirun reporting a rank that died or timed out.
_CAUSE = re.compile(
    r"\bTest (?:NCCL |CUDA |MPI )failure\b|\bTest timeout \(\d+s\)|\bCUDA error\b|\bcollective operation timeout\b"
    r"|\b(?:mpirun|prterun|orterun)\b.*\b(?:timed out|timeout|exited on signal|noticed that process rank)\b",
    re.IGNORECASE,
)
# src/common.h TESTCHECK: " .. %s pid %d: Test failure %s:%d", printed by every caller a failure returns through,
# after the line that says why: the run failed, but a cause line is the one to quote.
_RELAY = re.compile(r"\bTest failure\b", re.IGNORECASE)
_FAILURE = re.compile(_CAUSE.pattern + r"|" + _RELAY.pattern, re.IGNORECASE)
# NCCL's warnings are kept as evidence but say nothing failed on their own: healthy runs print them too (NCCL up to
# v2.10.3 warns "Failed to open libibverbs.so[.1]" on hosts without rdma-core, src/misc/ibvwrap.cc).
_PROBLEM = re.compile(r"\bNCCL WARN\b|" + _FAILURE.pattern, re.IGNORECASE)
MAX_PROBLEMS = 20
"""Warning and failure lines kept per run; lines that say why a run failed get as many again past them."""
# The network NCCL uses (NVIDIA/nccl@v2.30.7-1): src/init.cc:486 INFO "Using network %s"; the built-in
# socket transport is named "Socket" (src/transport/net_socket.cc:804) and logs "NET/Socket : Using ..."
# (net_socket.cc:77); channels log "via NET/%s/%d" (src/transport/net.cc:324,377).
_SOCKET = (
    re.compile(r"\bUsing network Socket\b"),
    re.compile(r"\bNET/Socket : Using\b"),
    re.compile(r"\bvia NET/Socket\b"),
)
# aws-ofi-nccl@v1.21.1 src/nccl_ofi_net.cpp:644: "NET/OFI Selected provider is %s, fabric is %s (found %d
# nics)" (older releases: "Selected Provider is"); a provider other than efa (tcp, sockets) is kernel TCP.
_PROVIDER = re.compile(r"\bSelected provider is ([A-Za-z0-9_;-]+)", re.IGNORECASE)
# EFA evidence, strongest first. The plugin's network name is "Libfabric", or "AWS Libfabric" when
# NCCL_NET asks for it (aws-ofi-nccl@v1.21.1 src/nccl_ofi_interface_nvidia.cpp:662,841-848).
_EFA = (
    re.compile(r"\bSelected provider is efa\b", re.IGNORECASE),
    re.compile(r"\bUsing network (?:AWS )?Libfabric\b"),
    re.compile(r"\bvia NET/(?:AWS )?Libfabric\b"),
    re.compile(r"\bNET/OFI\b"),
)
# NCCL logs the environment it reads at INFO (subsystem ENV): "NCCL_ALGO set by environment to Ring"
# (NVIDIA/nccl src/misc/param.cc, ncclGetEnv / ncclLoadParam, "%s set by environment to %s").
_ALGO = re.compile(r"\bNCCL_ALGO set by environment to (\S+?)\.?$")
_INT = re.compile(r"^[+-]?\d+$")
# Every NCCL debug line starts with "%s:%d:%d " (hostname cut at the first '.', pid, tid), then
# "[%d] NCCL INFO ..." (cudaDev), optionally after a timestamp in brackets (NVIDIA/nccl@0456df2
# src/debug.cc ncclDebugLogV; the hostname from getHostNameForLog(hostname, 1024, '.')).
_NCCL_HOST = re.compile(r"^(?:\[[^\]]*\]\s*)?(?P<host>[^\s:\[]+):\d+:\d+ \[\d+\]")
MAX_HOSTS = 4096


@dataclass
class _Facts:
    """What the lines of one run say besides the table."""

    values: dict[str, Any] = field(default_factory=dict)
    devices: dict[int, Device] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    socket: list[str | None] = field(default_factory=lambda: [None] * len(_SOCKET))
    other_provider: str | None = None
    efa: list[str | None] = field(default_factory=lambda: [None] * len(_EFA))
    hosts: dict[str, tuple[Transport, str]] = field(default_factory=dict)
    started_at: int | None = None  # the line of a "# nThread" parameters line: a run began here

    def feed(self, lineno: int, body: str) -> None:
        if body.startswith("#"):
            m = _DEVICE.match(body)
            if m:
                rank = int(m["rank"])
                self.devices.setdefault(
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
                return
            if _PARAMS_LINE.match(body) and "nthread" not in self.values:
                self.started_at = lineno
                for key, rx in _PARAM.items():
                    pm = rx.search(body)
                    self.values[key] = int(pm.group(1)) if pm else None
                return
            m = _TESTS_VERSION.match(body)
            if m:
                self.values.setdefault("nccl_tests_version", m.group(1))
            if _PER_ITER.match(body):
                self.values["per_iteration_timing"] = True
            if _CONCLUDED.match(body):
                return
        m = _NCCL_VERSION.search(body)
        if m and "nccl_version" not in self.values:
            self.values["nccl_version"] = m.group(1)
            self.values["cuda_version"] = m.group(2)
        m = _OFI_VERSION.search(body)
        if m:
            self.values.setdefault("ofi_nccl_version", m.group(1))
        m = _COLLECTIVE.search(body)
        if m:
            self.values.setdefault("collective", m.group(1))
        m = _ALGO.search(body)
        if m:
            self.values.setdefault("algorithm", m.group(1))
        evidence = f"line {lineno}: {body}"
        line_socket = line_efa = False
        for i, rx in enumerate(_SOCKET):
            if rx.search(body):
                line_socket = True
                if self.socket[i] is None:
                    self.socket[i] = evidence
        m = _PROVIDER.search(body)
        if m and not m.group(1).lower().startswith("efa"):
            line_socket = True
            if self.other_provider is None:
                self.other_provider = evidence
        for i, rx in enumerate(_EFA):
            if rx.search(body):
                line_efa = True
                if self.efa[i] is None:
                    self.efa[i] = evidence
        if line_socket or line_efa:
            hm = _NCCL_HOST.match(body)
            if hm:
                self._host(hm["host"], "socket" if line_socket else "efa", evidence)
        if _PROBLEM.search(body) and (len(self.problems) < MAX_PROBLEMS
                                      or (_CAUSE.search(body) and len(self.problems) < 2 * MAX_PROBLEMS)):
            self.problems.append(evidence)  # past the first MAX_PROBLEMS lines, only the ones that say why

    def _host(self, host: str, transport: Transport, evidence: str) -> None:
        """Record one host's transport: the first socket line wins over any EFA line of that host."""
        known = self.hosts.get(host)
        if known is None:
            if len(self.hosts) < MAX_HOSTS:
                self.hosts[host] = (transport, evidence)
        elif known[0] != "socket" and transport == "socket":
            self.hosts[host] = (transport, evidence)

    def absorb(self, later: _Facts) -> None:
        """Take the transport evidence and problems logged after this run's footer."""
        for host, (transport, evidence) in later.hosts.items():
            self._host(host, transport, evidence)
        self.socket = [a or b for a, b in zip(self.socket, later.socket)]
        self.other_provider = self.other_provider or later.other_provider
        self.efa = [a or b for a, b in zip(self.efa, later.efa)]
        both = self.problems + later.problems
        self.problems = both[:MAX_PROBLEMS] + [p for p in both[MAX_PROBLEMS:] if _CAUSE.search(p)][:MAX_PROBLEMS]

    def failure(self) -> str | None:
        """The line that says why a run failed: the first cause line (a test, CUDA or NCCL failure, a timeout, a rank
        that died), else the first relayed ``Test failure``; None when the log says nothing failed (an NCCL warning
        alone does not: healthy runs print them)."""
        causes = [p for p in self.problems if _CAUSE.search(p)]
        found = causes or [p for p in self.problems if _RELAY.search(p)]
        return found[0] if found else None

    def transport(self) -> tuple[Transport, tuple[str, ...]]:
        socket = tuple(sorted((e for e in self.socket if e), key=lambda e: int(e.split(":", 1)[0][5:])))
        if socket:
            return "socket", socket
        if self.other_provider is not None:
            return "socket", (self.other_provider,)
        efa = [e for e in self.efa if e]
        if efa:
            return "efa", (efa[0],)
        return "unknown", ()

    def model(self, *, timestamps: bool, per_iteration: bool, memory: str | None) -> Facts:
        v = self.values
        transport, evidence = self.transport()
        return Facts(
            collective=v.get("collective"),
            algorithm=v.get("algorithm"),
            nthread=v.get("nthread"),
            ngpus=v.get("ngpus"),
            min_bytes=v.get("min_bytes"),
            max_bytes=v.get("max_bytes"),
            iters=v.get("iters"),
            warmup_iters=v.get("warmup_iters"),
            devices=tuple(self.devices[k] for k in sorted(self.devices)),
            nccl_version=v.get("nccl_version"),
            cuda_version=v.get("cuda_version"),
            ofi_nccl_version=v.get("ofi_nccl_version"),
            nccl_tests_version=v.get("nccl_tests_version"),
            transport=transport,
            transport_evidence=evidence,
            host_transports=tuple(
                HostTransport(host=h, transport=t, evidence=e) for h, (t, e) in sorted(self.hosts.items())
            ),
            per_iteration_timing=per_iteration or bool(v.get("per_iteration_timing")),
            timestamps=timestamps,
            memory_usage=memory,
        )


# --------------------------------------------------------------------------------------------------
# The table


@dataclass
class _Group:
    """The columns of one measurement (out-of-place or in-place)."""

    time: int
    cols: dict[str, int] = field(default_factory=dict)


@dataclass
class _Layout:
    """Where each field sits in a data row, read from the table header line."""

    labels: list[str]  # as printed, e.g. "#wrong"
    ntokens: int  # words in a data row: one per column, two for the timestamp
    fixed: dict[str, int]
    groups: list[_Group]
    check: Literal["#wrong", "error"] | None
    timestamp: int | None  # word index of the timestamp's date

    def describe(self, line: int) -> str:
        extras = []
        if any("i_min" in g.cols for g in self.groups):
            extras.append("-I per-iteration columns")
        if self.timestamp is not None:
            extras.append("-S timestamp")
        extra = f", with {' and '.join(extras)}" if extras else ""
        return f"{TEXT_LAYOUT}, table header at line {line}: {len(self.labels)} columns{extra}"


_ITER_COLUMNS = ("i_min", "i_max", "i_p99", "i_cv%")


def _is_table_header(body: str) -> bool:
    if not body.startswith("#"):
        return False
    words = {w.lstrip("#").lower() for w in body.split()}
    return {"size", "busbw"} <= words and bool(words & {"time", "cputime"})


def _layout(body: str, source: str, lineno: int) -> _Layout:
    labels = [w for w in body.lstrip("#").split() if w.strip("#")]
    fixed: dict[str, int] = {}
    groups: list[_Group] = []
    check: Literal["#wrong", "error"] | None = None
    timestamp: int | None = None
    word = 0  # position in a data row: the timestamp column spans two words
    for label in labels:
        name = label.lstrip("#").lower()
        if name in ("time", "cputime"):
            groups.append(_Group(time=word))
        elif name in ("algbw", "busbw", "wrong", "error", *_ITER_COLUMNS) and groups:
            if name in groups[-1].cols:
                raise NcclLogError(source, lineno, f"unexpected column layout ({label!r} twice)", body, TEXT_LAYOUT)
            groups[-1].cols[name] = word
            if name == "wrong":
                check = "#wrong"
            elif name == "error":
                check = "error"
        elif name == "timestamp":
            timestamp = word
            word += 1
        elif not groups and name in ("size", "count", "type", "redop", "root"):
            fixed[name] = word
        # Any other column (a future addition) is kept by position and ignored.
        word += 1
    missing = [n for n in ("size", "count") if n not in fixed]
    if not groups or len(groups) > 2:
        missing.append("time")
    for g in groups:
        missing += [n for n in ("algbw", "busbw") if n not in g.cols]
    if missing:
        raise NcclLogError(
            source, lineno, f"table header without the {', '.join(sorted(set(missing)))} column(s)", body, TEXT_LAYOUT
        )
    return _Layout(labels=labels, ntokens=word, fixed=fixed, groups=groups, check=check, timestamp=timestamp)


def _looks_like_row(tokens: list[str], layout: _Layout) -> bool:
    return bool(tokens) and (_INT.match(tokens[0]) is not None or len(tokens) == layout.ntokens)


def _count(tok: str) -> int | None:
    """A ``#wrong`` cell: an integer, or ``%g`` of an integral double (``2.68435e+08``); None if neither."""
    if _INT.match(tok):
        return int(tok)
    try:
        value = float(tok)
    except ValueError:
        return None
    if not math.isfinite(value) or value != int(value):
        return None
    return int(value)


class _RowReader:
    def __init__(self, layout: _Layout, source: str, header_line: int):
        self.layout = layout
        self.source = source
        self.where_layout = layout.describe(header_line)

    def error(self, lineno: int, message: str, raw: str | None) -> NcclLogError:
        return NcclLogError(self.source, lineno, message, raw, self.where_layout)

    def column(self, i: int) -> str:
        lay = self.layout
        names = {w: k for k, w in lay.fixed.items()}
        for n, g in enumerate(lay.groups):
            tag = " (in-place)" if n == 1 else " (out-of-place)"
            if i == g.time:
                return f"'time'{tag}"
            for k, w in g.cols.items():
                if w == i:
                    return f"'{'#wrong' if k == 'wrong' else k}'{tag}"
        if lay.timestamp is not None and i in (lay.timestamp, lay.timestamp + 1):
            return "'timestamp'"
        return repr(names.get(i, f"column {i + 1}"))

    def read(self, tokens: list[str], lineno: int, raw: str) -> Row:
        lay = self.layout
        if len(tokens) < lay.ntokens:
            raise self.error(lineno, f"data row cut off: {len(tokens)} of the header's {lay.ntokens} columns", raw)
        if len(tokens) > lay.ntokens:
            raise self.error(lineno, f"data row has {len(tokens)} columns, the header has {lay.ntokens}", raw)

        def integer(i: int) -> int:
            if not _INT.match(tokens[i]):
                raise self.error(lineno, f"non-integer value {tokens[i]!r} in column {self.column(i)}", raw)
            return int(tokens[i])

        def number(i: int) -> float:
            try:
                value = float(tokens[i])
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                raise self.error(lineno, f"non-numeric value {tokens[i]!r} in column {self.column(i)}", raw)
            return value

        def result(g: _Group) -> Result:
            wrong = error = None
            if "wrong" in g.cols:
                tok = tokens[g.cols["wrong"]]
                if tok.upper() != "N/A":
                    wrong = _count(tok)
                    if wrong is None:
                        raise self.error(
                            lineno, f"non-integer value {tok!r} in column {self.column(g.cols['wrong'])}", raw
                        )
                    if wrong < 0:
                        raise self.error(lineno, f"negative #wrong count {tok!r}", raw)
            if "error" in g.cols:
                tok = tokens[g.cols["error"]]
                if tok.upper() != "N/A":
                    try:
                        error = float(tok)  # nan/inf are kept: they mark the row wrong
                    except ValueError:
                        raise self.error(
                            lineno, f"non-numeric value {tok!r} in column {self.column(g.cols['error'])}", raw
                        ) from None
            stats = None
            if all(k in g.cols for k in _ITER_COLUMNS):
                stats = IterStats(
                    min_us=number(g.cols["i_min"]),
                    max_us=number(g.cols["i_max"]),
                    p99_us=number(g.cols["i_p99"]),
                    cv_pct=number(g.cols["i_cv%"]),
                )
            return Result(
                time_us=number(g.time),
                algbw=number(g.cols["algbw"]),
                busbw=number(g.cols["busbw"]),
                wrong=wrong,
                error=error,
                per_iteration=stats,
            )

        def text(name: str) -> str | None:
            i = lay.fixed.get(name)
            if i is None or tokens[i] in ("-", "none"):
                return None
            return tokens[i]

        root = None
        if "root" in lay.fixed and tokens[lay.fixed["root"]] not in ("-", "none"):
            root = integer(lay.fixed["root"])
        size, count = integer(lay.fixed["size"]), integer(lay.fixed["count"])
        if size < 0 or count < 0:
            raise self.error(lineno, "negative size or count", raw)
        ts = lay.timestamp
        return Row(
            line=lineno,
            size=size,
            count=count,
            type=text("type"),
            redop=text("redop"),
            root=root,
            out_of_place=result(lay.groups[0]),
            in_place=result(lay.groups[1]) if len(lay.groups) == 2 else None,
            timestamp=f"{tokens[ts]} {tokens[ts + 1]}" if ts is not None else None,
        )


@dataclass
class _Table:
    layout: _Layout
    reader: _RowReader
    header_line: int
    header_raw: str
    stream: Stream
    rows: list[Row] = field(default_factory=list)
    footer: dict[str, Any] = field(default_factory=dict)
    memory: str | None = None
    cycle: int = 1

    def add(self, row: Row) -> None:
        if len(self.rows) >= MAX_ROWS:
            raise self.reader.error(row.line, f"more than {MAX_ROWS} data rows in one run", None)
        if self.rows:
            prev = self.rows[-1]
            # -N repeats the sweep: the size falls back for the same type and operation.
            if row.size < prev.size and (row.type, row.redop, row.root) == (prev.type, prev.redop, prev.root):
                self.cycle += 1
        self.rows.append(row.model_copy(update={"cycle": self.cycle}))


def _footer_line(table: _Table, body: str, lineno: int, raw: str) -> bool:
    """Record a footer line on ``table``; False when ``body`` is not one."""
    m = _OOB.match(body)
    if m:
        table.footer.update(out_of_bounds=int(m.group(1)), out_of_bounds_status=m.group(2))
        return True
    m = _AVG.match(body)
    if m:
        try:
            table.footer["avg_busbw"] = float(m.group(1))
        except ValueError:
            raise table.reader.error(lineno, "non-numeric average bus bandwidth", raw) from None
        return True
    m = _MEMORY.match(body)
    if m:
        table.memory = m.group(1)
        return True
    return False


def _bounded_lines(stream: io.TextIOBase | io.StringIO) -> Iterator[tuple[int, str]]:
    """Number the lines, reading at most MAX_LINE_CHARS of each (the rest of a longer line is skipped)."""
    lineno = 0
    while True:
        chunk = stream.readline(MAX_LINE_CHARS)
        if not chunk:
            return
        lineno += 1
        if not chunk.endswith(("\n", "\r")):  # cut at MAX_LINE_CHARS (or the last line): skip the rest
            rest = chunk
            while rest and not rest.endswith(("\n", "\r")):
                rest = stream.readline(MAX_LINE_CHARS)
        yield lineno, chunk


class _TextReader:
    """The text reader's state: ``before`` -> ``table`` at a header line -> ``footer`` at the first footer line, and
    ``before`` again at the next header line of the table's stream (the next run)."""

    def __init__(self, source: str):
        self.source = source
        self.runs: list[tuple[_Table, _Facts]] = []
        self.facts = _Facts()  # the facts of the run being read
        self.later = _Facts()  # lines after the current table's footer: the next run's, or trailing ones
        self.table: _Table | None = None
        self.state: Literal["before", "table", "footer"] = "before"
        self.last_line, self.last_raw = 0, ""

    def current(self) -> _Table:
        """The table being read (the states "table" and "footer" always have one, set at its header line)."""
        if self.table is None:
            raise RuntimeError(f"{self.source}: nccl-tests reader reached state {self.state!r} without a table")
        return self.table

    def close(self) -> None:
        self.runs.append((self.current(), self.facts))

    def feed(self, lineno: int, raw: str) -> None:
        """Read one numbered line."""
        raw = raw.rstrip("\r\n")
        stream, body = _strip_prefix(raw)
        if not body:
            return
        self.last_line, self.last_raw = lineno, raw
        header = _is_table_header(body)
        if self.state == "footer" and not self._next_run(stream, body, lineno, raw, header=header):
            return
        self.facts.feed(lineno, body)
        if self.state == "before":
            if header:
                layout = _layout(body, self.source, lineno)
                self.table = _Table(layout, _RowReader(layout, self.source, lineno), lineno, raw, stream)
                self.state = "table"
            return
        self._table_line(stream, body, lineno, raw, header=header)

    def _next_run(self, stream: Stream, body: str, lineno: int, raw: str, *, header: bool) -> bool:
        """A line after the table's footer: True when it is the header of the next run's table (the current run is
        closed and the line is read as the next run's); otherwise it is recorded as a footer line or a later one."""
        table = self.current()
        if header and stream == table.stream:
            self.close()
            self.facts, self.later = self.later, _Facts()
            self.state = "before"
            return True
        if not (stream == table.stream and _footer_line(table, body, lineno, raw)):
            self.later.feed(lineno, body)
        return False

    def _table_line(self, stream: Stream, body: str, lineno: int, raw: str, *, header: bool) -> None:
        """A line while the table is read: a data row, the first footer line, or something to pass over."""
        table = self.current()
        if stream != table.stream:
            return  # another rank or stderr: never table content
        if body.startswith("#"):
            if _footer_line(table, body, lineno, raw):
                self.state = "footer"
            elif header and table.rows:  # a repeated header line before any data is harmless
                raise table.reader.error(
                    lineno,
                    f"the table that starts at line {table.header_line} ends after {len(table.rows)} data rows "
                    "without its footer ('# Out of bounds values' / '# Avg bus bandwidth') and a new table "
                    "starts here: the first run is truncated",
                    raw,
                )
            return  # otherwise: units line, blank '#', "# Errors with asterisks ..." and such
        if _NCCL_LOG_LINE.search(body):
            return
        tokens = body.split()
        if _looks_like_row(tokens, table.layout):
            table.add(table.reader.read(tokens, lineno, raw))
        # Anything else in the table's stream (a failure message, a stray print) is noise here;
        # failures among it were collected as problems and show up if the table never ends.

    def finish(self) -> list[tuple[_Table, _Facts]]:
        """Every run read, each with its facts; a log that ends before a run's table or footer is an error."""
        source, facts, last_line = self.source, self.facts, self.last_line
        if self.state == "before" and self.table is None:
            raise NcclLogError(
                source,
                last_line or None,
                "no nccl-tests result table (no '#  size  count  type ... time  algbw  busbw' header line)",
                self.last_raw if last_line else None,
                TEXT_LAYOUT,
                failure=facts.failure(),
            )
        if self.state == "before":  # a later run printed its preamble but never its table
            raise NcclLogError(
                source,
                facts.started_at or last_line,
                f"run {len(self.runs) + 1} starts here but the log ends at line {last_line} before its result table",
                None,
                TEXT_LAYOUT,
                failure=facts.failure(),
            )
        table = self.current()
        if not table.rows:
            raise NcclLogError(
                source, table.header_line, "table header without any data rows", table.header_raw, TEXT_LAYOUT,
                failure=facts.failure(),
            )
        if self.state == "table":
            error = table.reader.error(
                last_line,
                f"truncated: the log ends after {len(table.rows)} data rows without the table footer "
                "('# Out of bounds values' / '# Avg bus bandwidth'); last line read",
                self.last_raw,
            )
            error.failure = facts.failure()
            raise error
        if self.later.started_at is not None:
            raise NcclLogError(
                source,
                self.later.started_at,
                f"run {len(self.runs) + 2} starts here but the log ends at line {last_line} before its result table",
                None,
                TEXT_LAYOUT,
                failure=self.later.failure(),
            )
        facts.absorb(self.later)
        self.close()
        return self.runs


def read_text_runs(lines: Iterable[tuple[int, str]], source: str) -> list[NcclRun]:
    """Every run in a stream of numbered lines (see the module docstring)."""
    reader = _TextReader(source)
    for lineno, raw in lines:
        reader.feed(lineno, raw)
    runs = reader.finish()
    return [
        NcclRun(
            source=source,
            format="text",
            index=i,
            runs_in_file=len(runs),
            header_line=t.header_line,
            check_column=t.layout.check,
            facts=f.model(
                timestamps=t.layout.timestamp is not None,
                per_iteration=any("i_min" in g.cols for g in t.layout.groups),
                memory=t.memory,
            ),
            rows=tuple(t.rows),
            footer=Footer(**t.footer),
            problems=tuple(f.problems),
        )
        for i, (t, f) in enumerate(runs, 1)
    ]


# --------------------------------------------------------------------------------------------------
# JSON (-J FILE.json), NVIDIA/nccl-tests@v2.19.6 src/util.cu: jsonOutputInit writes version, start_time,
# args, env, nccl_version; writeDeviceReport "config" (with "devices"); writeResultHeader opens
# "results", one object per row from writeBenchmarkLinePreamble/Body/Terminator (size, count, type,
# redop, root as a "%6i" string, out_of_place / in_place {time|cpu_time, alg_bw, bus_bw, nwrong},
# *_per_iter with -I); writeResultFooter "out_of_bounds" {count, okay} and "average_bus_bandwidth"
# {bandwidth, okay}. jsonDouble writes NaN as the string "nan"; jsonBool writes the strings "true" and
# "false". Before 2.17.9 the footer keys were spelled "average_bus_bandwidith" / "bandwidith".


class _Json:
    def __init__(self, source: str):
        self.source = source

    def error(self, path: str, message: str, value: Any = None) -> NcclLogError:
        text = None if value is None else json.dumps(value)[:200]
        return NcclLogError(self.source, None, f"{path}: {message}", text, JSON_LAYOUT)

    def obj(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(path, "expected an object", value)
        return value

    def num(self, value: Any, path: str, *, nan_ok: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise self.error(path, "expected a number", value)
        if isinstance(value, str) and value != "nan":
            raise self.error(path, "expected a number", value)
        x = float(value)
        if not math.isfinite(x) and not nan_ok:
            raise self.error(path, "expected a finite number", value)
        return x

    def int_(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.error(path, "expected a non-negative integer", value)
        return value

    def opt_int(self, d: dict[str, Any], key: str) -> int | None:
        v = d.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def result(self, value: Any, path: str, per_iter: Any) -> Result:
        d = self.obj(value, path)
        time_key = "cpu_time" if "cpu_time" in d else "time"
        for key in (time_key, "alg_bw", "bus_bw"):
            if key not in d:
                raise self.error(f"{path}.{key}", "missing")
        nwrong = d.get("nwrong")
        wrong = None
        if nwrong is not None:
            x = self.num(nwrong, f"{path}.nwrong", nan_ok=True)
            if not math.isfinite(x) or x < 0 or x != int(x):
                raise self.error(f"{path}.nwrong", "expected a count", nwrong)
            wrong = int(x)
        stats = None
        if isinstance(per_iter, dict):
            p = f"{path}_per_iter"
            stats = IterStats(
                min_us=self.num(per_iter.get("min_us"), f"{p}.min_us"),
                max_us=self.num(per_iter.get("max_us"), f"{p}.max_us"),
                p99_us=self.num(per_iter.get("p99_us"), f"{p}.p99_us"),
                cv_pct=self.num(per_iter.get("cv_pct"), f"{p}.cv_pct"),
            )
        return Result(
            time_us=self.num(d[time_key], f"{path}.{time_key}"),
            algbw=self.num(d["alg_bw"], f"{path}.alg_bw"),
            busbw=self.num(d["bus_bw"], f"{path}.bus_bw"),
            wrong=wrong,
            per_iteration=stats,
        )

    def run(self, doc: Any) -> NcclRun:
        doc = self.obj(doc, "the document")
        version = doc.get("version")
        if version not in JSON_VERSIONS:
            raise self.error(
                "version", f"format version {version!r}; this report reads versions {list(JSON_VERSIONS)}", version
            )
        config = self.obj(doc.get("config", {}), "config")
        devices = []
        for i, dev in enumerate(config.get("devices") or []):
            d = self.obj(dev, f"config.devices[{i}]")
            try:
                devices.append(
                    Device(
                        rank=d["rank"], group=d.get("group"), pid=d["pid"], host=d["hostname"],
                        device=d["device"], bus_id=d.get("device_hex", ""), name=d.get("device_info", ""),
                    )
                )
            except (KeyError, ValueError) as e:
                raise self.error(f"config.devices[{i}]", f"not a device record ({e})", d) from None
        results = doc.get("results")
        if not isinstance(results, list):
            raise self.error("results", "missing: the run wrote no result table (truncated or failed?)", results)
        if not results:
            raise self.error("results", "empty: the run wrote no data rows")
        if len(results) > MAX_ROWS:
            raise self.error("results", f"more than {MAX_ROWS} rows")
        rows: list[Row] = []
        cycle = 1
        for i, item in enumerate(results):
            path = f"results[{i}]"
            r = self.obj(item, path)
            if r.get("out_of_place") is None:
                raise self.error(f"{path}.out_of_place", "missing (a trace replay without out-of-place results)")
            root_raw = str(r.get("root", "")).strip()
            row = Row(
                line=i + 1,
                size=self.int_(r.get("size"), f"{path}.size"),
                count=self.int_(r.get("count"), f"{path}.count"),
                type=r.get("type") if isinstance(r.get("type"), str) else None,
                redop=r["redop"] if isinstance(r.get("redop"), str) and r["redop"] not in ("-", "none") else None,
                root=int(root_raw) if _INT.match(root_raw) else None,
                out_of_place=self.result(r["out_of_place"], f"{path}.out_of_place", r.get("out_of_place_per_iter")),
                in_place=self.result(r["in_place"], f"{path}.in_place", r.get("in_place_per_iter"))
                if r.get("in_place") is not None
                else None,
            )
            if rows and row.size < rows[-1].size and (row.type, row.redop) == (rows[-1].type, rows[-1].redop):
                cycle += 1
            rows.append(row.model_copy(update={"cycle": cycle}))
        oob = doc.get("out_of_bounds")
        avg = doc.get("average_bus_bandwidth", doc.get("average_bus_bandwidith"))
        footer = Footer()
        if isinstance(oob, dict):
            count = self.int_(oob.get("count"), "out_of_bounds.count")
            footer = footer.model_copy(update={"out_of_bounds": count, "out_of_bounds_status": "OK" if count == 0 else "FAILED"})
        if isinstance(avg, dict):
            bw = avg.get("bandwidth", avg.get("bandwidith"))
            footer = footer.model_copy(update={"avg_busbw": self.num(bw, "average_bus_bandwidth.bandwidth")})
        if footer.out_of_bounds is None and footer.avg_busbw is None:
            raise self.error("out_of_bounds", "missing: the run ended before its footer (truncated?)")
        args = doc.get("args") if isinstance(doc.get("args"), list) else []
        program = str(args[0]) if args else ""
        m = _COLLECTIVE.search(program)
        env = [e for e in doc.get("env") or [] if isinstance(e, str)]
        # NCCL_NET=Socket makes NCCL use its socket transport whatever plugin is installed.
        socket = tuple(f"env: {e}" for e in env if e.replace(" ", "").lower() == "nccl_net=socket")
        code = doc.get("nccl_version")
        nccl = None
        if isinstance(code, int) and code >= 10000:  # NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9
            nccl = f"{code // 10000}.{code // 100 % 100}.{code % 100}"
        config_int = {k: self.opt_int(config, k) for k in ("nthreads", "ngpus", "minimum_bytes", "maximum_bytes",
                                                           "iterations", "warmup_iters")}
        errors = [f"errors: {e}" for e in doc.get("errors") or [] if isinstance(e, str) and e][:20]
        return NcclRun(
            source=self.source,
            format="json",
            header_line=0,
            check_column="#wrong",
            facts=Facts(
                collective=m.group(1) if m else None,
                nthread=config_int["nthreads"],
                ngpus=config_int["ngpus"],
                min_bytes=config_int["minimum_bytes"],
                max_bytes=config_int["maximum_bytes"],
                iters=config_int["iterations"],
                warmup_iters=config_int["warmup_iters"],
                devices=tuple(sorted(devices, key=lambda d: d.rank)),
                nccl_version=nccl,
                transport="socket" if socket else "unknown",
                transport_evidence=socket,
                per_iteration_timing=config.get("per_iter_timing") == "true",
            ),
            rows=tuple(rows),
            footer=footer,
            problems=tuple(errors),
        )


def parse_json(text: str, source: str = "<json>") -> NcclRun:
    """Read the ``-J`` JSON result of one nccl-tests run."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        excerpt = text[max(0, e.pos - 40) : e.pos + 40]
        raise NcclLogError(
            source, e.lineno, f"not valid JSON at column {e.colno}: {e.msg} (a run that was killed leaves "
            "the file unfinished)", excerpt, JSON_LAYOUT
        ) from None
    return _Json(source).run(doc)


# --------------------------------------------------------------------------------------------------
# Entry points


def _looks_like_json(head: str) -> bool:
    return head.lstrip().startswith("{")


def read_runs(path: str | Path) -> list[NcclRun]:
    """Every run in the file at ``path``: text output (one or several runs) or a ``-J`` JSON result."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise NcclLogError(
                str(p), None, f"the file is {size} bytes; the report reads at most {MAX_INPUT_BYTES} bytes "
                "(cut the log to the run, e.g. with grep or tail)"
            )
        with p.open("r", encoding="utf-8", errors="replace", newline="") as f:
            head = f.read(64)
            f.seek(0)
            if _looks_like_json(head):
                return [parse_json(f.read(MAX_INPUT_BYTES + 1), source=str(p))]
            return read_text_runs(_bounded_lines(f), str(p))
    except OSError as e:
        raise NcclLogError(str(p), None, f"cannot read the log: {e.strerror or e}") from None


def _text_runs(text: str, source: str) -> list[NcclRun]:
    if len(text) > MAX_INPUT_BYTES:
        raise NcclLogError(source, None, f"the input is {len(text)} characters; the report reads at most "
                           f"{MAX_INPUT_BYTES}")
    if _looks_like_json(text[:64]):
        return [parse_json(text, source)]
    return read_text_runs(_bounded_lines(io.StringIO(text, newline="")), source)


def _one(runs: list[NcclRun], source: str) -> NcclRun:
    if len(runs) > 1:
        lines = ", ".join(str(r.header_line) for r in runs)
        raise NcclLogError(
            source, runs[1].header_line,
            f"{len(runs)} runs in one log (tables at lines {lines}); read them with read_runs",
        )
    return runs[0]


def parse_text(text: str, source: str = "<text>") -> NcclRun:
    """Parse the one nccl-tests run in ``text`` (text output or JSON). ``source`` names it in errors."""
    return _one(_text_runs(text, source), source)


def parse_text_runs(text: str, source: str = "<text>") -> list[NcclRun]:
    """Every run in ``text``."""
    return _text_runs(text, source)


def parse_log(path: str | Path) -> NcclRun:
    """Parse the one run in the file at ``path``; raises :class:`NcclLogError` for anything unusable."""
    return _one(read_runs(path), str(path))
