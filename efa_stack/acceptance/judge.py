"""Judging what needs more than one section: single-node NCCL against NVLink, pairs, and naming slow nodes.

Single node: ``all_reduce_perf -b 8 -e 4G -f 2 -g <GPUs>`` in one process moves data over NVLink only;
its large-message busbw is compared with the GPU's figure in ``data/nvlink.json`` (published where a
measurement is published, derived from the NVLink bandwidth otherwise; the file says which), and a node
below ``pass_fraction`` of it is *slow*. GPUs with no NVLink figure (PCIe parts such as A10G, L4) are
measured and reported, not judged.

Pairs: each 2-node all_reduce is judged by :func:`efa_stack.nccl_report.judge` against the EFA line rate
(the same verdict ``efa-stack nccl-report`` gives). :func:`attribute_pairs` names the slow node from
two rounds (see its docstring); it is this package's own small attribution, kept behind one function.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from efa_stack.acceptance.checks import Section, _not_run, _tail
from efa_stack.acceptance.model import Evidence, NodeStatus, PairResult

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


@cache
def _nvlink_data() -> dict[str, object]:
    data: dict[str, object] = json.loads(NVLINK_FILE.read_text())
    return data


def nvlink_expectation(gpu_name: str | None) -> NvlinkExpectation | None:
    """The single-node all_reduce expectation for ``gpu_name`` (catalog GPU name), or None (not judged)."""
    data = _nvlink_data()
    gpus = data["gpus"]
    assert isinstance(gpus, dict)
    entry = gpus.get(gpu_name or "")
    if entry is None:
        return None
    fraction = data["pass_fraction"]
    assert isinstance(fraction, (int, float))
    return NvlinkExpectation(gpu_name or "", float(entry["expected_busbw_gbytes"]), float(fraction),
                             str(entry["expected_kind"]))


def judge_nccl_single(section: Section | None, gpu_name: str | None, gpus: int, source: str) -> Evidence:
    from efa_stack import nccl_report

    exp = nvlink_expectation(gpu_name)
    want = (
        f">= {exp.pass_mark:g} GB/s busbw ({exp.pass_fraction:g} x {exp.expected_busbw:g} GB/s, {exp.kind}, "
        f"{gpus} x {exp.gpu} NVLink)" if exp else f"no NVLink figure for {gpu_name or 'this GPU'}: reported, not judged"
    )
    early = _not_run("nccl-single", section, want)
    if early is not None:
        return early
    assert section is not None
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
                threshold: float) -> tuple[NodeStatus, float | None, str]:
    """One pair's MPIJob outcome judged with nccl_report: (status, busbw, detail)."""
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


def attribute_pairs(round1: list[PairResult], round2: list[PairResult], leftover: str | None) -> dict[str, Evidence]:
    """The ``nccl-pair`` evidence of every node from both rounds.

    Round 1 pairs the nodes (0,1), (2,3), ...; both nodes of a passing pair pass. Round 2 re-tests each
    member of a slow or failed pair (and an odd node out) against a known-good peer (:func:`good_peer`):
    its own result there is its verdict, so the slow node of a slow pair is named and its partner cleared.
    A suspect with no round-2 result (no pair passed, so there is no good peer) keeps its round-1 status.
    """
    out: dict[str, Evidence] = {}

    def ev(p: PairResult, node: str, detail: str = "") -> Evidence:
        peer = p.nodes[1] if p.nodes[0] == node else p.nodes[0]
        measured = f"{p.busbw:g} GB/s busbw with {peer}" if p.busbw is not None else f"no result with {peer}"
        text = "; ".join(x for x in (f"round {p.round}, MPIJob {p.job}", detail) if x)
        return Evidence("nccl-pair", p.status, measured, p.detail, text)

    for p in round1:
        for n in p.nodes:
            out[n] = ev(p, n)
    retested: dict[str, PairResult] = {}
    for p in round2:
        for n in p.nodes:
            if n in out and out[n].status != "pass" or n == leftover:
                retested[n] = p
    for n, p in retested.items():
        first = next((q for q in round1 if n in q.nodes), None)
        before = f"round 1 with {next(x for x in first.nodes if x != n)} was {first.status}" if first else ""
        out[n] = ev(p, n, before)
    if leftover and leftover not in out:
        out[leftover] = Evidence("nccl-pair", "skipped", "not tested", "a pair test with a known-good peer",
                                 "odd node out and no round-1 pair passed, so there is no known-good peer")
    for n, e in list(out.items()):
        if e.status != "pass" and n not in retested and any(n in p.nodes for p in round1):
            out[n] = Evidence(e.check, e.status, e.measured, e.expected,
                              e.detail + "; no known-good peer to tell which of the pair is slow")
    return out
