"""Judge a run: correctness, transport, and large-message busbw against the instance's EFA line rate.

The bandwidth model
===================
nccl-tests reports *bus bandwidth*: algbw scaled by the collective's data movement; for all_reduce
``busbw = algbw * 2(n-1)/n`` (NVIDIA/nccl-tests doc/PERFORMANCE.md), so busbw measures what the hardware
carries whatever the rank count. In a multi-node ring each node sends and receives about ``2(n-1)/n * S``
bytes through its network cards per all_reduce of ``S`` bytes, so ring busbw is bounded by the per-node
network bandwidth: the instance's EFA line rate from the catalog, in GB/s ``efa_line_rate_gbps / 8``
(p5.48xlarge: 3200 Gbit/s -> 400 GB/s).

A run *passes* when its large-message out-of-place busbw (the highest over sizes >= 1 GiB, else at the
largest size) is at least ``threshold x line rate`` (``contract.NCCL_PASS_THRESHOLD`` by default).
``# Avg bus bandwidth`` averages every size, latency-bound ones included: shown, never judged.

Verdicts, first match wins:

* ``single rank``: one rank moves nothing between GPUs, so busbw is 0 by definition; reported, not judged.
* ``not applicable``: one node (no fabric) or an instance type without EFA.
* ``not EFA``: NCCL logged its socket transport (or aws-ofi-nccl a non-EFA provider): whatever the
  bandwidth, the traffic went over kernel TCP. A failed check.
* ``not judged``: no instance type, or the node count is unknown.
* ``pass`` / ``below expectation``.

Wrong values (``#wrong`` > 0, out-of-bounds values, large old-style errors) are data corruption: the
verdict fails whatever its status. On two nodes NCCL may choose tree algorithms whose busbw (computed
with the ring formula) can exceed the line rate; the report says so when the ratio is above 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from efa_stack.nccl_report.hosts import HostRun, find_slow_hosts
from efa_stack.nccl_report.model import (
    DEFAULT_THRESHOLD,
    Comparison,
    Expectation,
    GiB,
    HostsReport,
    NcclRun,
    ReferenceRun,
    Row,
    SizeComparison,
    SocketHost,
    Verdict,
    VerdictStatus,
)
from efa_stack.nccl_report.units import human_size

__all__ = [
    "REFERENCE_RUNS", "compare_runs", "expected_busbw", "host_runs", "hosts_report", "is_single_rank", "judge",
]

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


def _check_threshold(threshold: float) -> None:
    if isinstance(threshold, bool) or not (
        isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold > 0
    ):
        raise ValueError(f"threshold must be a positive number, got {threshold!r}")


def expected_busbw(instance_type: str, nodes: int, threshold: float = DEFAULT_THRESHOLD) -> Expectation:
    """The line-rate expectation for ``nodes`` x ``instance_type``.

    Raises ``spec.catalog.UnknownInstanceType`` (with ``.suggestions``) for names not in the catalog,
    and ValueError for ``nodes < 1`` or a threshold that is not positive.
    """
    from efa_stack.planning.catalog import get  # imported here so that parsing works without the catalog

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


def is_single_rank(run: NcclRun) -> bool:
    """One rank: the header lists one device, or (no header) every busbw is 0 while data moved."""
    if run.facts.nranks is not None:
        return run.facts.nranks == 1
    return all(r.out_of_place.busbw == 0 for r in run.rows) and any(r.out_of_place.algbw > 0 for r in run.rows)


def judge(
    run: NcclRun,
    instance_type: str | None = None,
    nodes: int | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> Verdict:
    """Judge ``run`` (see the module docstring). ``nodes`` defaults to the distinct hostnames in the log.

    Raises ``spec.catalog.UnknownInstanceType`` for an unknown ``instance_type``.
    """
    _check_threshold(threshold)
    notes: list[str] = []
    facts = run.facts
    row = run.large_message_row()
    measured, size = row.out_of_place.busbw, row.size

    if run.has_wrong_values:
        bad = run.failed_rows
        what = []
        if bad:
            first = bad[0]
            total = f", {run.wrong_total} wrong element(s) in all" if run.wrong_total else ""
            what.append(
                f"{len(bad)} row(s) with wrong values, first at {human_size(first.size)} (line {first.line}){total}"
            )
        if run.footer.out_of_bounds:
            what.append(f"footer reports {run.footer.out_of_bounds} out-of-bounds value(s)")
        notes.append(f"data corruption: the correctness check failed: {'; '.join(what)}")
    if facts.transport == "unknown":
        where = "the JSON result has no NCCL log lines" if run.format == "json" else "the log does not show it"
        notes.append(f"network transport unknown: {where} (run with NCCL_DEBUG=INFO to see it)")
    if facts.collective is not None and facts.collective != "all_reduce":
        notes.append(
            f"the line-rate model is derived for all_reduce; {facts.collective} busbw is normalised "
            "the same way by nccl-tests but may approach the line rate differently"
        )
    if run.cycles > 1:
        notes.append(f"the sweep ran {run.cycles} times (-N); the verdict uses the best large-message row")

    used_nodes = nodes if nodes is not None else facts.nodes
    if nodes is not None and facts.nodes is not None and nodes != facts.nodes:
        notes.append(f"judged as {nodes} node(s), but the log's header names {facts.nodes} host(s)")

    def verdict(status: VerdictStatus, reason: str, **kw: Any) -> Verdict:
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

    if instance_type is not None:
        from efa_stack.planning.catalog import get

        get(instance_type)  # reject unknown names whatever the verdict

    if is_single_rank(run):
        return verdict(
            "single rank",
            "one rank: nothing crosses between GPUs or nodes, so busbw is 0 by definition (busbw = algbw x "
            "2(n-1)/n); run with one rank per GPU on two or more nodes to measure the fabric",
        )
    exp = expected_busbw(instance_type, used_nodes, threshold) if instance_type and used_nodes else None
    if exp is not None and not exp.applicable:
        return verdict("not applicable", exp.reason, expectation=exp)
    if used_nodes == 1:
        return verdict("not applicable", "single node: collectives do not cross the network fabric")
    if facts.transport == "socket":
        quoted = "; ".join(facts.transport_evidence)
        return verdict("not EFA", f"NCCL used TCP sockets, not EFA: {quoted}", expectation=exp)
    if instance_type is None:
        return verdict("not judged", "no instance type given, so no line rate to compare with")
    if exp is None:
        return verdict("not judged", "node count unknown (the log names no hosts): pass the node count")

    ratio = measured / exp.line_rate_gbytes
    status: VerdictStatus = "pass" if ratio >= threshold else "below expectation"
    if ratio > 1:
        notes.append(
            f"busbw is {ratio:.2f} x the line rate: on {used_nodes} nodes NCCL may use tree algorithms, "
            "whose busbw (computed with the ring formula) can exceed the network line rate"
        )
    ranks = facts.nranks
    if ranks is not None and used_nodes is not None and exp.gpus_per_node and ranks < used_nodes * exp.gpus_per_node:
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


def _ratio(x: float | None, y: float | None) -> float | None:
    if x is None or y is None or x <= 0 or y <= 0:
        return None
    return x / y


def compare_runs(baseline: NcclRun, other: NcclRun) -> Comparison:
    """Speed-up of ``other`` over ``baseline`` (busbw_other / busbw_baseline) for every size in both runs.

    A size that appears k times in a run (nccl-tests' two 0-byte rows, ``-N`` cycles) is paired by order.
    """
    by_size: dict[int, list[Row]] = {}
    for r in other.rows:
        by_size.setdefault(r.size, []).append(r)
    seen: dict[int, int] = {}
    out: list[SizeComparison] = []
    for rb in baseline.rows:
        k = seen.get(rb.size, 0)
        seen[rb.size] = k + 1
        candidates = by_size.get(rb.size, [])
        if k >= len(candidates):
            continue
        ro = candidates[k]
        ib = rb.in_place.busbw if rb.in_place else None
        io_ = ro.in_place.busbw if ro.in_place else None
        out.append(
            SizeComparison(
                size=rb.size,
                busbw_baseline=rb.out_of_place.busbw,
                busbw_other=ro.out_of_place.busbw,
                speedup=_ratio(ro.out_of_place.busbw, rb.out_of_place.busbw),
                in_place_baseline=ib,
                in_place_other=io_,
                speedup_in_place=_ratio(io_, ib),
            )
        )
    return Comparison(baseline=baseline.label, other=other.label, rows=tuple(out))


# --------------------------------------------------------------------------------------------------
# Hosts


def host_runs(runs: Sequence[NcclRun], verdicts: Sequence[Verdict | None]) -> list[HostRun]:
    """Each run as a :class:`~efa_stack.nccl_report.hosts.HostRun`: its hosts (the per-rank lines) and whether
    it passed; runs that were not judged against a line rate (no instance type, single node) are ``ok=None``."""
    out = []
    for run, v in zip(runs, verdicts, strict=True):
        judged = v is not None and v.status in ("pass", "below expectation", "not EFA")
        out.append(HostRun(
            hosts=run.facts.hostnames, ok=(v.status == "pass") if judged and v is not None else None,
            busbw=v.measured_busbw if v is not None else None, label=run.label,
        ))
    return out


def hosts_report(runs: Sequence[NcclRun], verdicts: Sequence[Verdict | None]) -> HostsReport | None:
    """Slow hosts and links of the set, and hosts on sockets; None when the runs say nothing about hosts
    (no per-rank host lines, or a single run that passes)."""
    analysis = find_slow_hosts(host_runs(runs, verdicts))
    sockets = tuple(
        SocketHost(host=h.host, run=run.label, evidence=h.evidence)
        for run in runs for h in run.facts.host_transports if h.transport == "socket"
    )
    worth = analysis.status in ("named", "ambiguous") or (analysis.status == "all pass" and len(analysis.runs) > 1)
    if not worth and not sockets:
        return None
    return HostsReport(analysis=analysis, socket_hosts=sockets)
