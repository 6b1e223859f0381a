"""``efa-stack rehearse``: the spec rolled out on a local control plane with the real scheduler and controllers
(:mod:`efa_stack.rehearsal`), each of its jobs started by its own start command; compute the report, then print it.

Per job: whether Kueue admitted it (with Kueue's reasons when not), its nodes and their lowest network-layer
domains, whether every pod ran, and the seconds from the start command to admission and to Running. A job that
lands is then finished (its pods exit 0) so that the next one finds the nodes free, as jobs run one after another on a
cluster; one that does not land is deleted. Exit 0 when every job lands, 1 when one does not (or the rollout
fails), 2 for bad input or a machine that cannot run the rehearsal. docs/rehearse.md says what it proves.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from efa_stack import contract
from efa_stack.errors import EXIT_CHECK_FAILED, EXIT_OK, UserError
from efa_stack.planning.plan import ClusterPlan
from efa_stack.rehearsal.jobs import JobOutcome, jobs_of
from efa_stack.rehearsal.nodes import NodeOptions, Size

JOB_TIMEOUT = 180.0
"""Seconds a job may take from its start command until every pod runs (a Karpenter pool launches nodes first)."""
SETTLE = 15.0
"""Seconds a job may wait with a reason from Kueue or the scheduler before it counts as not landing: Kueue reports a
job that does not fit at once, and a reason right after the rollout can be a cache still filling."""


@dataclass(frozen=True)
class RehearseOptions:
    """What the user chose: the nodes (:class:`~efa_stack.rehearsal.nodes.NodeOptions`), the waits, where the state
    goes (None: a temporary folder, removed at the end)."""

    size: Size = "desired"
    nodes_per_domain: int | None = None
    cordoned: tuple[str, ...] = ()
    job_timeout: float = JOB_TIMEOUT
    settle: float = SETTLE
    state: Path | None = None

    def node_options(self) -> NodeOptions:
        return NodeOptions(size=self.size, nodes_per_domain=self.nodes_per_domain, cordoned=self.cordoned)

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "nodes_per_domain": self.nodes_per_domain, "cordoned": list(self.cordoned)}


@dataclass(frozen=True)
class RehearseReport:
    """The rehearsal of one spec: the jobs' outcomes, or the rollout step that failed."""

    cluster: str
    spec: str
    options: RehearseOptions
    nodes: int = 0
    jobs: tuple[JobOutcome, ...] = ()
    rollout_error: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    state: str | None = None

    @property
    def ok(self) -> bool:
        """The rollout went through and every job landed and then completed."""
        return not self.rollout_error and all(j.ok for j in self.jobs)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_CHECK_FAILED

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster, "spec": self.spec, "ok": self.ok, "options": self.options.to_json(),
            "nodes": self.nodes, "rollout_error": self.rollout_error or None,
            "jobs": [j.to_json() for j in self.jobs],
            "timings": {k: round(v, 1) for k, v in self.timings.items()}, "state": self.state,
        }


def check_options(plan: ClusterPlan, options: RehearseOptions) -> None:
    """UserError (exit 2) for options the plan cannot take: a node it does not have, a bad count."""
    from efa_stack.rehearsal.nodes import plan_nodes

    try:
        plan_nodes(plan, options.node_options())
    except ValueError as exc:
        raise UserError(str(exc), "name a node as <node group>-<index>, the index counting from 0 up to the "
                        "group's size (--size)") from None


def run_rehearse(plan: ClusterPlan, spec: Path, options: RehearseOptions,
                 progress: Callable[[str], None]) -> RehearseReport:
    """Rehearse ``plan`` (module docstring); UserError when this machine cannot run the rehearsal."""
    from efa_stack.rehearsal.binaries import BuildError
    from efa_stack.rehearsal.processes import ProcessError
    from efa_stack.rehearsal.rollout import RolloutError

    check_options(plan, options)
    state = options.state or Path(tempfile.mkdtemp(prefix="efa-stack-rehearse-"))
    base = RehearseReport(plan.name, str(spec), options, state=str(state) if options.state else None)
    try:
        return _rehearse(plan, state, base, progress)
    except RolloutError as exc:
        return RehearseReport(base.cluster, base.spec, options, rollout_error=str(exc), state=base.state)
    except BuildError as exc:
        raise UserError(str(exc), "install Go 1.25 or later, or let tools/build.sh download it (it needs the Go "
                        "module proxy), then run again") from None
    except (ProcessError, TimeoutError) as exc:
        where = f"the logs under {state}" if options.state else "the logs (keep them with --state DIR)"
        raise UserError(f"the rehearsal's control plane could not run: {exc}", f"read {where}; another "
                        "rehearsal on this machine holds a port or folder some controllers fix: wait for it") from None
    finally:
        if options.state is None:
            shutil.rmtree(state, ignore_errors=True)


def _rehearse(plan: ClusterPlan, state: Path, base: RehearseReport,
              progress: Callable[[str], None]) -> RehearseReport:
    from efa_stack.rehearsal.rehearsal import rehearse

    outcomes: list[JobOutcome] = []
    options = base.options
    with rehearse(plan, state, nodes=options.node_options(), progress=progress) as r:
        follower = r.jobs
        for job in jobs_of(r.objects):
            name = f"{job['kind']} {job['metadata']['name']}"
            progress(f"starting {name}: {job['metadata']['annotations'][contract.ANNOTATION_START]}")
            outcome = follower.land(job, timeout=options.job_timeout, settle=options.settle)
            if outcome.running:
                started = time.monotonic()
                outcome = follower.finish(outcome, job, options.job_timeout)
                progress(f"{name} ran and {'completed' if outcome.completed else 'did not complete'} "
                         f"({time.monotonic() - started:.0f}s)")
            else:
                progress(f"{name} did not land: {outcome.reason}")
                follower.remove(job, options.job_timeout)
            outcomes.append(outcome)
        return RehearseReport(base.cluster, base.spec, options, nodes=len(r.nodes), jobs=tuple(outcomes),
                              timings=dict(r.timings), state=base.state)
