"""Which host (or which link) makes a set of nccl-tests runs slow: pure logic, no I/O.

Feed it one :class:`HostRun` per run (the hosts it ran on and whether it reached the pass mark) and
:func:`find_slow_hosts` returns a :class:`HostAnalysis`. Typical input: pairwise runs, each between two
hosts, as an acceptance test produces them; any number of hosts per run works.

The rules (a host or link is named only when the runs leave no other reading):

* a run that is ``ok=None`` (not judged) or has fewer than two hosts says nothing about hosts and is left out;
* a **slow host** is one whose every run is slow while the runs without it pass. With several slow hosts,
  "the runs without it" means the runs without any slow host; a host is named only when it was measured with
  at least one host that passed elsewhere (two hosts only ever measured together cannot be told apart);
* a **suspect link** is a slow two-host run whose two hosts each passed in another run;
* **ambiguous**: every run slow (a cause common to all runs, such as configuration, or every host),
  a single run, or slow runs no host or link explains. Nothing is named then.

Usage (``verify --acceptance`` and ``nccl-report`` both do this)::

    from efa_stack.nccl_report.hosts import HostRun, find_slow_hosts
    analysis = find_slow_hosts([HostRun(hosts=("a", "b"), ok=False, busbw=12.0, label="a-b.log"), ...])
    analysis.status, analysis.slow_hosts, analysis.suspect_links, analysis.reason
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

_CONFIG = ConfigDict(frozen=True, extra="forbid")

AnalysisStatus = Literal["all pass", "named", "ambiguous", "no data"]


class HostRun(BaseModel):
    """One run: the hosts it ran on, and whether it reached the pass mark (None: not judged)."""

    model_config = _CONFIG
    hosts: tuple[str, ...]
    ok: bool | None
    busbw: float | None = None
    """The large-message busbw in GB/s, for the evidence text only."""
    label: str = ""
    """How the run is named in evidence (a file name)."""

    def describe(self) -> str:
        bw = f", {self.busbw:g} GB/s" if self.busbw is not None else ""
        verdict = "pass" if self.ok else "slow"
        name = f"{self.label}: " if self.label else ""
        return f"{name}{' + '.join(self.hosts)} {verdict}{bw}"


class SlowHost(BaseModel):
    model_config = _CONFIG
    host: str
    slow_runs: tuple[str, ...]
    """Every run the host took part in (all slow), described."""


class SuspectLink(BaseModel):
    model_config = _CONFIG
    hosts: tuple[str, str]
    slow_run: str
    passing_runs: tuple[str, ...]
    """Runs in which each of the two hosts passed with another host."""


class HostAnalysis(BaseModel):
    """What a set of runs says about hosts; ``slow_hosts`` and ``suspect_links`` are empty unless certain."""

    model_config = _CONFIG
    status: AnalysisStatus
    reason: str
    slow_hosts: tuple[SlowHost, ...] = ()
    suspect_links: tuple[SuspectLink, ...] = ()
    unexplained: tuple[str, ...] = ()
    """Slow runs that neither a named host nor a suspect link explains."""
    runs: tuple[HostRun, ...] = ()
    """The runs that counted (judged, two hosts or more)."""


def find_slow_hosts(runs: Iterable[HostRun]) -> HostAnalysis:
    """Name the slow hosts and suspect links of ``runs`` (see the module docstring for the rules)."""
    counted = tuple(r for r in runs if r.ok is not None and len(set(r.hosts)) >= 2)
    if not counted:
        return HostAnalysis(
            status="no data", reason="no judged run with two or more hosts: nothing to say about hosts"
        )
    slow = [r for r in counted if not r.ok]
    if not slow:
        return HostAnalysis(status="all pass", reason=f"all {len(counted)} runs pass", runs=counted)
    if len(counted) == 1:
        return HostAnalysis(
            status="ambiguous", runs=counted,
            reason=f"only one run ({counted[0].describe()}): any of its hosts, or what they share, may be the cause; "
            "run host pairs to find out (no host named)",
        )
    if len(slow) == len(counted):
        return HostAnalysis(
            status="ambiguous", runs=counted,
            reason=f"all {len(counted)} runs are slow: the cause is common to them (configuration, image, fabric) "
            "or every host is slow; no host named",
        )

    hosts = sorted({h for r in counted for h in r.hosts})
    with_host = {h: [r for r in counted if h in r.hosts] for h in hosts}
    passed_somewhere = {h for h in hosts if any(r.ok for r in with_host[h])}
    candidates = {h for h in hosts if h not in passed_somewhere}
    # A candidate counts only if measured with a host that passed elsewhere: otherwise it cannot be told
    # apart from its partners.
    named = sorted(
        h for h in candidates
        if any(p in passed_somewhere for r in with_host[h] for p in r.hosts if p != h)
    )
    links: list[SuspectLink] = []
    unexplained: list[str] = []
    for r in slow:
        if any(h in named for h in r.hosts):
            continue
        pair = tuple(sorted(set(r.hosts)))
        if len(pair) == 2 and all(h in passed_somewhere for h in pair):
            a, b = pair
            passing = tuple(x.describe() for x in counted if x.ok and (a in x.hosts or b in x.hosts))
            links.append(SuspectLink(hosts=(a, b), slow_run=r.describe(), passing_runs=passing))
        else:
            unexplained.append(r.describe())
    slow_hosts = tuple(SlowHost(host=h, slow_runs=tuple(r.describe() for r in with_host[h])) for h in named)
    if not slow_hosts and not links:
        return HostAnalysis(
            status="ambiguous", runs=counted, unexplained=tuple(unexplained),
            reason="the slow runs share no host that is slow everywhere, and no single pair explains them: "
            "run more host pairs (no host named)",
        )
    parts = []
    if slow_hosts:
        parts.append(f"slow host{'s' if len(slow_hosts) > 1 else ''} {', '.join(s.host for s in slow_hosts)}: "
                     "every run with it is slow, the runs without it pass")
    if links:
        parts.append("suspect link " + ", ".join(f"{lk.hosts[0]} <-> {lk.hosts[1]}" for lk in links)
                     + ": only that pair is slow, both hosts pass with others")
    if unexplained:
        parts.append(f"{len(unexplained)} slow run(s) not explained")
    return HostAnalysis(
        status="named", reason="; ".join(parts), slow_hosts=slow_hosts, suspect_links=tuple(links),
        unexplained=tuple(unexplained), runs=counted,
    )


def runs_from_pairs(pairs: Sequence[tuple[Sequence[str], bool | None]]) -> list[HostRun]:
    """``[(hosts, ok), ...]`` as :class:`HostRun` objects (for callers that hold plain tuples)."""
    return [HostRun(hosts=tuple(h), ok=ok) for h, ok in pairs]
