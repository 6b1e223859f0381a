"""Judging what needs more than one section: single-node NCCL against NVLink, pairs, and naming slow nodes.

A node's single-node all_reduce is compared with its GPU's NVLink figure (``data/nvlink.json``); each pair
is judged by nccl-report's verdict, and :func:`efa_stack.acceptance.judge.attribute_pairs` names the slow
node with :func:`efa_stack.nccl_report.hosts.find_slow_hosts`. The rules: docs/design/commands.md
("Acceptance: single node and pairs").
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from efa_stack.acceptance.checks import Section, _tail, finished
from efa_stack.acceptance.model import Evidence, EvidenceStatus, NodeStatus, PairResult
from efa_stack.nccl_report.hosts import HostAnalysis, HostRun, find_slow_hosts

NVLINK_FILE = Path(__file__).parent / "data" / "nvlink.json"


@dataclass(frozen=True)
class NvlinkExpectation:
    gpu: str
    expected_busbw: float
    pass_fraction: float
    kind: str
    """"published" or "derived: ..." (from data/nvlink.json)."""

    @property
    def pass_mark(self) -> float:
        return self.expected_busbw * self.pass_fraction


class _NvlinkGpu(BaseModel):
    """One GPU of data/nvlink.json (the fields the check reads; the file's sources are kept beside them)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    expected_busbw_gbytes: float = Field(gt=0)
    expected_kind: str


class _NvlinkData(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    pass_fraction: float = Field(gt=0, le=1)
    gpus: dict[str, _NvlinkGpu]


@cache
def _nvlink_data() -> _NvlinkData:
    return _NvlinkData.model_validate_json(NVLINK_FILE.read_text())


def nvlink_expectation(gpu_name: str | None) -> NvlinkExpectation | None:
    """The single-node all_reduce expectation for ``gpu_name`` (catalog GPU name), or None (not judged)."""
    data = _nvlink_data()
    entry = data.gpus.get(gpu_name or "")
    if entry is None:
        return None
    return NvlinkExpectation(gpu_name or "", entry.expected_busbw_gbytes, data.pass_fraction, entry.expected_kind)


def judge_nccl_single(section: Section | None, gpu_name: str | None, gpus: int, source: str) -> Evidence:
    from efa_stack import nccl_report

    exp = nvlink_expectation(gpu_name)
    want = (
        f">= {exp.pass_mark:g} GB/s busbw ({exp.pass_fraction:g} x {exp.expected_busbw:g} GB/s, {exp.kind}, "
        f"{gpus} x {exp.gpu} NVLink)" if exp else f"no NVLink figure for {gpu_name or 'this GPU'}: reported, not judged"
    )
    got = finished("nccl-single", section, want)
    if isinstance(got, Evidence):
        return got
    section = got
    try:
        runs = nccl_report.parse_text_runs(section.text, source)
    except nccl_report.NcclLogError as exc:
        return Evidence("nccl-single", "failed", f"no nccl-tests result (exit {section.rc})", want,
                        f"{exc.message}: {_tail(section.text)}")
    run = runs[-1]
    if run.has_wrong_values:
        return Evidence("nccl-single", "failed", "wrong values (#wrong > 0)", want, "data corruption between GPUs")
    ranks = run.facts.nranks
    if ranks is not None and ranks != gpus:
        return Evidence("nccl-single", "failed", f"{ranks} ranks", want, f"expected {gpus} GPUs in the run")
    row = run.large_message_row()
    busbw = row.out_of_place.busbw
    measured = f"{busbw:g} GB/s busbw at {nccl_report.human_size(row.size)}"
    if section.rc not in (0, None):
        return Evidence("nccl-single", "failed", measured, want, f"all_reduce_perf exit {section.rc}")
    if exp is None:
        return Evidence("nccl-single", "pass", measured, want)
    if busbw < exp.pass_mark:
        return Evidence("nccl-single", "slow", measured, want,
                        "NVLink below expectation: check nvidia-smi nvlink -s and nvidia-smi topo -m for a down link")
    return Evidence("nccl-single", "pass", measured, want)


# --- pairs --------------------------------------------------------------------------------------


def round_one(nodes: list[str]) -> tuple[list[tuple[str, str]], str | None]:
    """Pairs (0,1), (2,3), ... of ``nodes`` and the node left over when their number is odd."""
    pairs = [(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
    return pairs, (nodes[-1] if len(nodes) % 2 else None)


def pair_status(log: str | None, state: str, message: str, instance_type: str, source: str,
                threshold: float, floor_gbps: float | None = None) -> tuple[NodeStatus, float | None, str]:
    """One pair's MPIJob outcome judged with nccl_report: (status, busbw, detail). ``floor_gbps``: a bus bandwidth the
    pair must reach besides nccl-report's mark (an UltraServer's EFA floor, data/ultraservers.json)."""
    from efa_stack import nccl_report

    if state != "Succeeded" or not log:
        return "failed", None, f"MPIJob {state.lower()}: {message}"
    try:
        run = nccl_report.parse_text_runs(log, source)[-1]
    except nccl_report.NcclLogError as exc:
        return "failed", None, f"no nccl-tests result in the launcher log: {exc.message}"
    verdict = nccl_report.judge(run, instance_type, 2, threshold)
    busbw = verdict.measured_busbw
    if run.has_wrong_values or verdict.status == "not EFA":
        return "failed", busbw, verdict.summary
    if verdict.status == "below expectation":
        return "slow", busbw, verdict.summary
    if floor_gbps is not None and (busbw is None or busbw < floor_gbps):
        return "slow", busbw, f"{verdict.summary}; below the {floor_gbps:g} GB/s EFA floor of this UltraServer type"
    return "pass", busbw, verdict.summary


def good_peer(round1: list[PairResult]) -> str | None:
    """A known-good peer: the first node of the fastest passing round-1 pair (None when none passed)."""
    passing = [p for p in round1 if p.status == "pass" and p.busbw is not None]
    if not passing:
        return None
    return max(passing, key=lambda p: p.busbw or 0.0).nodes[0]


def suspects(round1: list[PairResult], leftover: str | None) -> list[str]:
    """Nodes to re-test against the good peer: members of pairs that did not pass, and an unpaired node."""
    out = [n for p in round1 if p.status != "pass" for n in p.nodes]
    return out + ([leftover] if leftover else [])


def pair_runs(pairs: list[PairResult]) -> list[HostRun]:
    """Every pair test as a :class:`efa_stack.nccl_report.hosts.HostRun` for :func:`efa_stack.nccl_report.hosts.find_slow_hosts` (a failed MPIJob did not reach the mark)."""
    return [HostRun(hosts=p.nodes, ok=p.status == "pass", busbw=p.busbw, label=f"round {p.round}, MPIJob {p.job}")
            for p in pairs]


def pair_analysis(round1: list[PairResult], round2: list[PairResult]) -> HostAnalysis:
    """What the pair tests say about hosts, by the rule ``efa-stack nccl-report`` uses (:mod:`efa_stack.nccl_report.hosts`)."""
    return find_slow_hosts(pair_runs(round1 + round2))


def attribute_pairs(round1: list[PairResult], round2: list[PairResult], leftover: str | None) -> dict[str, Evidence]:
    """The ``nccl-pair`` evidence of every node from both rounds.

    Round 1 pairs the nodes (0,1), (2,3), ...; round 2 re-tests each member of a slow or failed pair (and
    an odd node out) against a known-good peer (:func:`efa_stack.acceptance.judge.good_peer`). Which node is slow is decided by
    :func:`efa_stack.nccl_report.hosts.find_slow_hosts` over all pair runs, the rule that names slow hosts
    in ``efa-stack nccl-report`` too: a node is *slow* (or *failed*) only when it is named there. A node
    whose own last pair passed is *pass*. A node in a pair that did not pass, but that the runs do not
    name (a single slow pair and no good peer: either node, or their link, may be the cause) is
    *ambiguous*: not accepted, and not quarantined either, since no node is named.
    """
    analysis = pair_analysis(round1, round2)
    named = {s.host for s in analysis.slow_hosts}
    links = {h: lk for lk in analysis.suspect_links for h in lk.hosts}
    retested: dict[str, PairResult] = {}
    for p in round2:
        for n in p.nodes:
            if n == leftover or any(n in q.nodes and q.status != "pass" for q in round1):
                retested[n] = p
    out: dict[str, Evidence] = {}
    for p in round1 + round2:
        for n in p.nodes:
            if n in out or (n in retested and p.round == 1):
                continue
            own = retested.get(n, p)
            first = next((q for q in round1 if n in q.nodes), None)
            before = (f"round 1 with {_peer(first, n)} was {first.status}"
                      if first is not None and own is not first else "")
            if n in named:
                worst: EvidenceStatus = "failed" if any(n in q.nodes and q.status == "failed" for q in round1 + round2) else "slow"
                out[n] = _pair_evidence(own, n, worst, before, f"named slow: {analysis.reason}")
            elif own.status == "pass":
                link = links.get(n)
                note = (f"suspect link {link.hosts[0]} <-> {link.hosts[1]}: that pair alone is slow"
                        if link is not None else "")
                out[n] = _pair_evidence(own, n, "pass", before, note)
            else:
                out[n] = _pair_evidence(own, n, "ambiguous", before, f"no node named: {analysis.reason}")
    if leftover and leftover not in out:
        out[leftover] = Evidence("nccl-pair", "skipped", "not tested", "a pair test with a known-good peer",
                                 "odd node out and no round-1 pair passed, so there is no known-good peer")
    return out


def _peer(p: PairResult, node: str) -> str:
    return p.nodes[1] if p.nodes[0] == node else p.nodes[0]


def _pair_evidence(p: PairResult, node: str, status: EvidenceStatus, *notes: str) -> Evidence:
    peer = _peer(p, node)
    measured = f"{p.busbw:g} GB/s busbw with {peer}" if p.busbw is not None else f"no result with {peer}"
    detail = "; ".join(x for x in (f"round {p.round}, MPIJob {p.job}", *notes) if x)
    return Evidence("nccl-pair", status, measured, p.detail, detail)
