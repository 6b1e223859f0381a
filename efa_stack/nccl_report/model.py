"""The result models every stage shares: parse builds them, judge reads them, render prints them.

They are pydantic models, so the ``--json`` document is their ``model_dump_json`` and nothing is
serialised by hand. JSON has no NaN or infinity; an old-style ``error`` column may hold them, so the
models serialise those as ``null`` (``ser_json_inf_nan``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

from efa_stack.nccl_report.hosts import HostAnalysis

GiB = 1 << 30
#: An old-style float ``error`` above this marks the row wrong (float reductions round: 5e-07 is normal).
OLD_ERROR_TOLERANCE = 1e-3
#: Sizes from here up count as "large messages" for the verdict.
LARGE_MESSAGE_BYTES = GiB

Transport = Literal["efa", "socket", "unknown"]
VerdictStatus = Literal["pass", "below expectation", "not EFA", "single rank", "not applicable", "not judged"]
Correctness = Literal["ok", "wrong values", "unchecked"]
Bound = Literal["ring", "tree", "published run"]
InputFormat = Literal["text", "json"]

_CONFIG = ConfigDict(frozen=True, ser_json_inf_nan="null", extra="forbid")


class NcclLogError(ValueError):
    """Input that is not a complete nccl-tests run: names the file, the layout, the line and the text."""

    def __init__(
        self,
        source: str,
        line: int | None,
        message: str,
        text: str | None = None,
        layout: str | None = None,
        *,
        failure: str | None = None,
    ):
        self.source = source
        self.line = line
        self.message = message
        self.text = text
        self.layout = layout
        self.failure = failure
        """``line N: text`` of the log line that says the run failed (a run that failed, not bad input)."""
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        within = f" (reading {self.layout})" if self.layout else ""
        tail = f": {self.text!r}" if self.text is not None else ""
        return f"{where}: {self.message}{within}{tail}"

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "line": self.line,
            "layout": self.layout,
            "message": self.message,
            "text": self.text,
            "failure": self.failure,
            "summary": str(self),
        }


class Device(BaseModel):
    """One ``#  Rank N Group G Pid P on HOST device D [BUSID] NAME`` line (or JSON ``config.devices`` entry)."""

    model_config = _CONFIG
    rank: int
    host: str
    pid: int
    device: int
    bus_id: str
    name: str
    group: int | None = None


class HostTransport(BaseModel):
    """The network one host's NCCL used, from its own ``NCCL_DEBUG=INFO`` lines (``host:pid:tid [dev] NCCL INFO``)."""

    model_config = _CONFIG
    host: str
    transport: Transport
    evidence: str  # "line N: text"


class IterStats(BaseModel):
    """The ``-I 1`` per-iteration summary of one measurement (text columns ``i_min i_max i_p99 i_cv%``)."""

    model_config = _CONFIG
    min_us: float
    max_us: float
    p99_us: float
    cv_pct: float


class Result(BaseModel):
    """One out-of-place or in-place measurement of a row."""

    model_config = _CONFIG
    time_us: float
    algbw: float  # GB/s
    busbw: float  # GB/s
    wrong: int | None = None  # ``#wrong`` count (nccl-tests >= 2.13); None when N/A or absent
    error: float | None = None  # old float ``error`` column; None when N/A or absent
    per_iteration: IterStats | None = None

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
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


class Row(BaseModel):
    """One data row (``line``: 1-based line in the log, or the index in the JSON ``results`` list)."""

    model_config = _CONFIG
    line: int
    size: int  # bytes
    count: int  # elements
    type: str | None
    redop: str | None  # None for '-'/'none' or when the layout has no redop column
    root: int | None  # None for '-' or when the layout has no root column
    out_of_place: Result
    in_place: Result | None
    cycle: int = 1  # ``-N`` repeats the sweep; the first pass is cycle 1
    timestamp: str | None = None  # ``-S 1``

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def failed(self) -> bool:
        return self.out_of_place.failed or (self.in_place is not None and self.in_place.failed)


class Facts(BaseModel):
    """What the log says about the run besides the table."""

    model_config = _CONFIG
    collective: str | None = None
    algorithm: str | None = None
    """``NCCL_ALGO`` as NCCL logged it (``NCCL_ALGO set by environment to ...``); None: NCCL's own choice."""
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
    transport: Transport = "unknown"
    #: "line N: text" of the lines that decided the transport (socket: every distinct one, up to a few)
    transport_evidence: tuple[str, ...] = ()
    host_transports: tuple[HostTransport, ...] = ()
    """Per host, when NCCL INFO lines name it: sockets win over EFA evidence of the same host."""
    per_iteration_timing: bool = False
    timestamps: bool = False
    memory_usage: str | None = None  # ``-M 1``: "# GPU memory usage : ..."

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def nranks(self) -> int | None:
        """The number of ranks the header lists, or None if the header was not in the log."""
        return len(self.devices) or None

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def hostnames(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.host for d in self.devices))

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def nodes(self) -> int | None:
        """The number of distinct hosts in the header, or None if unknown."""
        return len(self.hostnames) or None

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def gpu_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.name for d in self.devices))


class Footer(BaseModel):
    model_config = _CONFIG
    out_of_bounds: int | None = None
    out_of_bounds_status: str | None = None
    avg_busbw: float | None = None


class NcclRun(BaseModel):
    """One parsed nccl-tests run: the table rows, the header facts and the footer."""

    model_config = _CONFIG
    source: str
    format: InputFormat = "text"
    index: int = 1  # the run's position in its file (several runs can be concatenated in one log)
    runs_in_file: int = 1
    header_line: int
    check_column: Literal["#wrong", "error"] | None = None
    facts: Facts = Facts()
    rows: tuple[Row, ...]
    footer: Footer = Footer()
    problems: tuple[str, ...] = ()  # NCCL WARN / test failure lines, "line N: text"

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def label(self) -> str:
        name = Path(self.source).name
        return f"{name}#{self.index}" if self.runs_in_file > 1 else name

    @property
    def failed_rows(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.failed)

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
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
        return bool(self.failed_rows) or bool(self.footer.out_of_bounds)

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def correctness(self) -> Correctness:
        if self.has_wrong_values:
            return "wrong values"
        # nccl-tests prints the footer's "Out of bounds values : 0 OK" with -c 0 too; only a row whose
        # #wrong (or old error) column holds a number was checked.
        checked = any(res is not None and res.checked for r in self.rows for res in (r.out_of_place, r.in_place))
        return "ok" if checked else "unchecked"

    @property
    def cycles(self) -> int:
        return max(r.cycle for r in self.rows)

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


class ReferenceRun(BaseModel):
    """A published nccl-tests result, kept for context in reports."""

    model_config = _CONFIG
    instance_type: str
    nodes: int
    ranks: int
    collective: str
    dtype: str
    size: int
    busbw_out_of_place: float
    busbw_in_place: float
    source: str


class Expectation(BaseModel):
    """What the fabric of ``nodes`` x ``instance_type`` allows for large-message busbw, and the bound used."""

    model_config = _CONFIG
    instance_type: str
    nodes: int
    gpus_per_node: int
    efa_interfaces: int
    line_rate_gbps: float  # Gbit/s per node: the EFA cards' peak, from the catalog
    threshold: float  # pass when busbw >= threshold x the expected busbw
    applicable: bool
    reason: str
    references: tuple[ReferenceRun, ...] = ()
    bound: Bound = "ring"
    """Which expectation the verdict uses: the ring bound (= the line rate), the tree bound, or a published
    healthy run of the same instance type, node count and collective."""
    expected_gbytes: float = 0.0
    """The expected large-message busbw in GB/s under ``bound``."""
    ranks: int | None = None
    """The ranks the bound was computed for (the log's header, else nodes x GPUs per node)."""

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def line_rate_gbytes(self) -> float:
        """The per-node line rate in GB/s (Gbit/s / 8): the ring bound of busbw."""
        return self.line_rate_gbps / 8.0

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def pass_mark_gbytes(self) -> float:
        """Expected busbw x efficiency: the busbw a run must reach to pass."""
        return self.expected_gbytes * self.threshold

    @property
    def bound_label(self) -> str:
        return {"ring": "ring bound (the EFA line rate)", "tree": "tree bound",
                "published run": "published healthy run"}[self.bound]


class Verdict(BaseModel):
    """The judgement of one run: bandwidth against the line rate, transport, plus correctness."""

    model_config = _CONFIG
    status: VerdictStatus
    correctness: Correctness
    reason: str
    measured_busbw: float | None = None  # the large-message out-of-place busbw
    measured_size: int | None = None
    ratio: float | None = None  # measured / expected busbw (GB/s)
    nodes: int | None = None
    expectation: Expectation | None = None
    notes: tuple[str, ...] = ()

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def ok(self) -> bool:
        """False when the run had wrong values, did not use EFA, or fell below the expectation."""
        return self.correctness != "wrong values" and self.status not in ("below expectation", "not EFA")

    @computed_field  # type: ignore[prop-decorator]  # mypy rejects decorators over @property
    @property
    def summary(self) -> str:
        from efa_stack.nccl_report.units import human_size

        busbw, size, ratio, e = self.measured_busbw, self.measured_size, self.ratio, self.expectation
        if (self.status in ("pass", "below expectation") and e is not None and busbw is not None
                and size is not None and ratio is not None):
            head = (
                f"{self.status}: {busbw:g} GB/s busbw at {human_size(size)} = "
                f"{ratio:.0%} of the {e.expected_gbytes:g} GB/s {e.bound_label} of "
                f"{e.nodes} x {e.instance_type} (pass mark {e.threshold:.0%})"
            )
        else:
            head = f"{self.status}: {self.reason}"
        if self.correctness == "wrong values":
            return f"DATA CORRUPTION (#wrong > 0); {head}"
        return f"{head}; correctness: {self.correctness}"


class SizeComparison(BaseModel):
    """One size in both runs; speed-up = busbw of the later run / busbw of the baseline (the first run)."""

    model_config = _CONFIG
    size: int
    busbw_baseline: float
    busbw_other: float
    speedup: float | None  # None when either busbw is 0
    in_place_baseline: float | None = None
    in_place_other: float | None = None
    speedup_in_place: float | None = None


class Comparison(BaseModel):
    model_config = _CONFIG
    baseline: str
    other: str
    rows: tuple[SizeComparison, ...]


class RunReport(BaseModel):
    model_config = _CONFIG
    run: NcclRun
    verdict: Verdict | None


class ReportError(BaseModel):
    model_config = _CONFIG
    source: str | None = None
    line: int | None = None
    layout: str | None = None
    message: str
    text: str | None = None
    failure: str | None = None
    """The log line that says the run failed, when it did (exit 1: a failed run, not bad input)."""
    summary: str


class SocketHost(BaseModel):
    """A host whose NCCL used sockets (TCP) instead of EFA in one run."""

    model_config = _CONFIG
    host: str
    run: str
    evidence: str


class HostsReport(BaseModel):
    """What the runs say per host: slow hosts or links (:mod:`.hosts`), and hosts that used sockets."""

    model_config = _CONFIG
    analysis: HostAnalysis
    socket_hosts: tuple[SocketHost, ...] = ()


class Report(BaseModel):
    """The ``--json`` document: one object, whatever happened (an error fills ``error``)."""

    model_config = _CONFIG
    runs: tuple[RunReport, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    hosts: HostsReport | None = None
    """Per-host findings, when the runs carry per-rank host lines and say something about hosts."""
    plot: str | None = None
    exit_code: int
    error: ReportError | None = None
