"""Print what a command computed: rich tables and lines for people, one JSON document for ``--json``.

The commands compute typed results (:class:`efa_stack.tools.verify_model.VerifyReport`,
:class:`efa_stack.acceptance.model.AcceptanceReport`, ...); the functions here only print them. Errors
go through :func:`efa_stack.console.print_error` (a :class:`efa_stack.errors.UserError` or a spec's
:class:`efa_stack.spec.errors.SpecError`); every status is printed in its colour from
:data:`efa_stack.console.STATUS_STYLE` (docs/design/commands.md, "Statuses").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.markup import escape

from efa_stack import contract
from efa_stack.acceptance.model import AcceptanceReport
from efa_stack.console import print_error, styled
from efa_stack.errors import UserError
from efa_stack.nccl_report.render import print_report
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.planning.plan import ClusterPlan
from efa_stack.tools.catalog_refresh import RefreshSummary
from efa_stack.tools.rehearse import RehearseReport
from efa_stack.tools.verify_model import NcclCheck, VerifyReport, VerifyResult

# --------------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------------
# catalog refresh
# --------------------------------------------------------------------------------------------


def render_refresh(summary: RefreshSummary, console: Any) -> None:
    console.print(
        f"catalog: {summary.instance_types} instance types ({summary.efa_capable} EFA-capable) "
        f"-> {escape(summary.catalog)}\n"
        f"regions: {summary.regions} -> {escape(summary.regions_file)}"
    )


# --------------------------------------------------------------------------------------------
# verify: nodes
# --------------------------------------------------------------------------------------------


@contextmanager
def node_progress(plan: ClusterPlan, console: Any) -> Iterator[Callable[[VerifyResult], None]]:
    """A transient progress bar of matching nodes; yields the ``on_poll`` callback that updates it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]waiting for nodes[/]"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.description}"), TimeElapsedColumn(),
        console=console, transient=True,
    ) as progress:
        task = progress.add_task("", total=max(1, sum(g.desired_size for g in plan.all_node_groups)))

        def on_poll(r: VerifyResult) -> None:
            progress.update(
                task, completed=r.matching_nodes,
                description=", ".join(f"{g.name} {min(g.matching, g.expected_nodes)}/{g.expected_nodes}"
                                      for g in r.groups),
            )

        yield on_poll


def render_nodes(result: VerifyResult, console: Any) -> None:
    """The nodes table (when any node was found), the node groups table and the nodes not in the spec."""
    from rich.table import Table

    def cell(have: int | None, want: int) -> str:
        text = "-" if have is None else str(have)
        return text if want == 0 else f"{text}/{want}"

    nodes = Table(title="nodes", expand=False)
    for col in ("status", "node", "node group", "instance type", "GPU", "EFA", "Neuron", "problem"):
        nodes.add_column(col, no_wrap=col not in ("problem",))
    for n in result.nodes:
        nodes.add_row(
            styled(n.status), escape(n.name), escape(n.node_group),
            escape(n.instance_type or "?"), cell(n.gpus, n.expected_gpus), cell(n.efa, n.expected_efa),
            cell(n.neuron, n.expected_neuron), escape("; ".join(n.problems)),
        )
    if result.nodes:
        console.print(nodes)
    groups = Table(title="node groups", expand=False)
    for col in ("status", "node group", "nodes", "finding", "fix"):
        groups.add_column(col, no_wrap=col in ("status", "node group", "nodes"))
    for g in result.groups:
        groups.add_row(styled(g.status), escape(g.name), f"{g.matching}/{g.expected_nodes}",
                       escape(g.message), escape(g.fix))
    console.print(groups)
    for u in result.unexpected:
        console.print(f"{styled('note', 'note')}: node {escape(u)} is not in the spec")


def render_verify_nodes(report: VerifyReport, console: Any) -> None:
    """The nodes stage of ``verify``: the tables, then one OK or FAIL line."""
    nodes = report.nodes
    render_nodes(nodes, console)
    if nodes.ok:
        console.print(f"{styled('pass', 'OK')}: {nodes.matching_nodes}/{nodes.expected_nodes} nodes match the spec")
        return
    console.print(
        f"{styled('fail')}: {nodes.matching_nodes}/{nodes.expected_nodes} nodes match the spec"
        + (" within the timeout" if report.timeout > 0 else "")
        + (" - the NCCL test was not started" if report.run_nccl else "")
    )


# --------------------------------------------------------------------------------------------
# verify --run-nccl
# --------------------------------------------------------------------------------------------


def render_nccl_start(job: str, namespace: str, group: NodeGroupPlan, console: Any) -> None:
    console.print(f"running MPIJob {escape(namespace)}/{escape(job)} ({group.desired_size} x {group.instance_type})")


def render_nccl(nccl: NcclCheck | None, console: Any, err_console: Any) -> None:
    """The NCCL test: the job's failure with the guard's lines, the log's tail and the fix; or nccl-report's report."""
    if nccl is None:
        return
    o = nccl.outcome
    if o.state != "Succeeded":
        console.print(f"{styled('fail')}: MPIJob {escape(o.name)} {o.state.lower()}: {escape(o.message)}")
        if nccl.guard:
            console.print(f"the EFA guard stopped {len(nccl.guard)} worker(s) before NCCL could fall back to TCP:")
            for line in nccl.guard:
                console.print(line, markup=False, highlight=False, soft_wrap=True)
        if nccl.log_tail:
            console.print("last lines of the launcher log:", markup=False)
            console.print(nccl.log_tail, markup=False, highlight=False)
        console.print(f"Fix: {escape(nccl.fix)}")
        return
    console.print(f"{styled('pass', f'MPIJob {o.name} succeeded')}: {escape(o.message)}")
    report = nccl.report
    if report is None:
        return
    if report.error is not None:
        print_error(UserError(report.error.summary), json_out=False, console=err_console)
        return
    print_report(report, console)


# --------------------------------------------------------------------------------------------
# verify --acceptance
# --------------------------------------------------------------------------------------------


def progress_line(text: str, console: Any) -> None:
    """One dim progress line of a long run."""
    console.print(f"[dim]{escape(text)}[/]")


def render_acceptance(report: AcceptanceReport, console: Any) -> None:
    """Every node's verdict with its evidence, the quarantine patches, the notes and a summary line."""
    console.print(f"[bold]acceptance[/] of node group {escape(report.node_group)} ({escape(report.instance_type)}), "
                  f"DCGM level {report.dcgm_level}")
    for v in report.nodes:
        console.print(f"{styled(v.status)} {escape(v.node)}")
        for e in v.evidence:
            console.print(f"  {styled(e.status, e.status)} {escape(e.line())}")
    for q in report.quarantine:
        console.print(f"quarantined {escape(q.node)}: kubectl cordon + taint {contract.QUARANTINE_TAINT_KEY}="
                      f"{escape(q.reason)}:NoSchedule (patch {escape(json.dumps(q.patch))})")
    for n in report.notes:
        console.print(f"note: {escape(n)}")
    s = report.to_json()["summary"]
    head = styled("pass", "OK") if report.ok else styled("fail")
    console.print(f"{head}: {s['pass']} pass, {s['slow']} slow, {s['failed']} failed, {s['ambiguous']} ambiguous")


# --------------------------------------------------------------------------------------------
# rehearse
# --------------------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def render_rehearse(report: RehearseReport, console: Any) -> None:
    """Every job: landed or not, admitted (by Kueue, or unqueued), its nodes and domains, the times from its start
    command; the reason of each that did not land; then one OK or FAIL line."""
    from rich.table import Table

    options = report.options
    console.print(f"[bold]rehearsal[/] of {escape(report.cluster)} ({escape(report.spec)}): {report.nodes} nodes at "
                  f"{options.size} size" + (f", {options.nodes_per_domain} per lowest network domain"
                                            if options.nodes_per_domain else "")
                  + (f", cordoned {escape(', '.join(options.cordoned))}" if options.cordoned else ""))
    if report.rollout_error:
        console.print(f"{styled('fail')}: the rollout stopped: {escape(report.rollout_error)}")
        return
    table = Table(title="jobs", expand=False)
    for col in ("status", "job", "admitted", "nodes", "domains", "to admission", "to running"):
        table.add_column(col, no_wrap=col in ("status", "admitted", "to admission", "to running"))
    for j in report.jobs:
        admitted = ("yes" if j.admitted else "no") if j.queued else "not queued"
        table.add_row(styled("pass" if j.ok else "fail"), escape(f"{j.kind} {j.namespace}/{j.name}"), admitted,
                      escape(", ".join(j.nodes) or "-"), escape(", ".join(j.domains) or "-"),
                      _seconds(j.seconds_to_admission), _seconds(j.seconds_to_running))
    if report.jobs:
        console.print(table)
    for j in report.jobs:
        if not j.ok:
            who = "Kueue" if j.queued and not j.admitted else "the cluster"
            console.print(f"{styled('fail', j.name)}: {who} says: {escape(j.reason)}", soft_wrap=True)
    landed = sum(j.ok for j in report.jobs)
    if not report.jobs:
        console.print(f"{styled('pass', 'OK')}: rolled out; the spec renders no job to start")
    elif report.ok:
        console.print(f"{styled('pass', 'OK')}: {landed}/{len(report.jobs)} jobs admitted, running and completed")
    else:
        console.print(f"{styled('fail')}: {landed}/{len(report.jobs)} jobs admitted, running and completed")
