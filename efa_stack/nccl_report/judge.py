"""Judge a run: correctness, transport, and large-message busbw against what the fabric allows.

The expectation is a bound that depends on the collective, the algorithm and the node count (ring or tree),
or a published healthy run of the same shape; the formulas and their sources are in
docs/design/nccl-bounds.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from efa_stack import contract
from efa_stack.nccl_report.hosts import HostRun, find_slow_hosts
from efa_stack.nccl_report.model import (
    Bound,
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
    "BUS_FACTORS",
    "REFERENCE_RUNS",
    "compare_runs",
    "expected_busbw",
    "host_runs",
    "hosts_report",
    "is_single_rank",
    "judge",
    "tree_factor",
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


#: busbw = algbw x factor(ranks) for each nccl-tests collective (NVIDIA/nccl-tests doc/PERFORMANCE.md;
#: src/*.cu ``*BusBw`` functions): the data each rank moves, normalised so it compares with hardware speed.
BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def tree_factor(nodes: int, ranks: int) -> float:
    """Tree all_reduce busbw over the per-node line rate: ``N(n-1) / ((N-1) n)`` (1.875 for 2 x 8 GPUs).

    A ring all_reduce moves ``2(n-1)/n x S`` bytes through each node's NICs, the same factor nccl-tests
    uses for busbw, so ring busbw is bounded by the line rate. NCCL's tree (a chain inside each node, a
    double binary tree between nodes) moves about ``2(N-1)/N x S`` per node, so algbw may reach
    ``line rate x N / (2(N-1))`` and busbw (still computed with the ring factor) that times ``2(n-1)/n``.
    """
    if nodes < 2 or ranks <= nodes:
        return 1.0
    return nodes * (ranks - 1) / ((nodes - 1) * ranks)


def _algorithm(value: str | None) -> str | None:
    """``ring`` or ``tree`` when NCCL_ALGO names exactly one of them, else None (NCCL chooses)."""
    v = (value or "").strip().lower()
    return v if v in ("ring", "tree") else None


def expected_busbw(
    instance_type: str,
    nodes: int,
    threshold: float = contract.NCCL_PASS_THRESHOLD,
    *,
    collective: str | None = None,
    ranks: int | None = None,
    algorithm: str | None = None,
) -> Expectation:
    """The large-message busbw expectation for ``nodes`` x ``instance_type`` running ``collective``.

    all_reduce (or an unknown collective): with ``algorithm`` ring, the ring bound (the per-node EFA line
    rate); with tree, the tree bound (:func:`tree_factor`); when NCCL chooses (no ``NCCL_ALGO``), a
    published healthy run of the same shape if there is one, else the tree bound, the most NCCL can reach.
    Other collectives: the ring bound. Raises ``UnknownInstanceType`` (with ``.suggestions``) for names not in
    the catalog, and ValueError for ``nodes < 1`` or a threshold that is not positive.
    """
    from efa_stack.planning.catalog import get  # imported here so that parsing works without the catalog

    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes must be a positive integer, got {nodes!r}")
    _check_threshold(threshold)
    it = get(instance_type)
    coll = collective or "all_reduce"
    n = ranks if ranks is not None and ranks > 0 else nodes * max(it.gpus, 1)
    refs = tuple(r for r in REFERENCE_RUNS if r.instance_type == it.name and r.nodes == nodes)
    # a published run is the expectation only for the same shape on whole nodes (one rank per GPU)
    healthy = [r for r in refs if r.collective == coll and r.ranks == n == nodes * it.gpus]
    rate = float(it.efa_line_rate_gbps)
    line = rate / 8
    algo = _algorithm(algorithm)
    bound: Bound = "ring"
    expected = line
    if nodes == 1:
        applicable, reason = False, "single node: collectives do not cross the network fabric"
    elif rate <= 0:
        applicable, reason = False, f"{it.name} has no EFA, so there is no EFA line rate to compare with"
    else:
        applicable = True
        ring = f"ring bound = per-node EFA line rate {rate:g} Gbit/s = {line:g} GB/s"
        if coll != "all_reduce":
            reason = f"{coll} moves (at most) the ring's bytes through each node's NICs: {ring}"
        elif algo == "ring":
            reason = f"NCCL_ALGO=Ring: {ring}"
        else:
            factor = tree_factor(nodes, n)
            tree = (f"tree bound = line rate x N(n-1)/((N-1)n) = {line:g} GB/s x {factor:.4g} "
                    f"= {line * factor:.4g} GB/s for N={nodes} nodes, n={n} ranks")
            if algo == "tree":
                bound, expected, reason = "tree", line * factor, f"NCCL_ALGO=Tree: {tree}"
            elif healthy:
                ref = healthy[0]
                bound, expected = "published run", ref.busbw_out_of_place
                reason = (f"NCCL chooses ring or tree (no NCCL_ALGO in the log); the expectation is a published "
                          f"healthy run of this shape: {ref.busbw_out_of_place:g} GB/s at "
                          f"{human_size(ref.size)} ({ref.source}); {ring}; {tree}")
            else:
                bound, expected = "tree", line * factor
                reason = (f"NCCL chooses ring or tree (no NCCL_ALGO in the log), so the tree's bound is the "
                          f"ceiling: {tree}; {ring} (set NCCL_ALGO=Ring to judge against it)")
        reason += f"; pass mark {threshold:g} x {expected:.4g} = {expected * threshold:.4g} GB/s"
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
        bound=bound,
        expected_gbytes=expected,
        ranks=n,
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
    threshold: float = contract.NCCL_PASS_THRESHOLD,
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
        coll = facts.collective or "all_reduce"
        factor = BUS_FACTORS.get(coll)
        if factor is not None and factor(1) == 0:
            why = f"busbw is 0 by definition ({coll}: busbw = algbw x {'2' if coll == 'all_reduce' else ''}(n-1)/n)"
        else:
            why = f"busbw equals algbw ({coll}: busbw = algbw) and measures the GPU's own copy, not a fabric"
        return verdict(
            "single rank",
            f"one rank: nothing crosses between GPUs or nodes, so {why}; run with one rank per GPU on two or "
            "more nodes to measure the fabric",
        )
    exp = (expected_busbw(instance_type, used_nodes, threshold, collective=facts.collective, ranks=facts.nranks,
                          algorithm=facts.algorithm)
           if instance_type and used_nodes else None)
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

    ratio = measured / exp.expected_gbytes
    status: VerdictStatus = "pass" if ratio >= threshold else "below expectation"
    line_ratio = measured / exp.line_rate_gbytes
    if line_ratio > 1:
        notes.append(
            f"busbw is {line_ratio:.2f} x the line rate: NCCL used a tree algorithm on {used_nodes} nodes, "
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
