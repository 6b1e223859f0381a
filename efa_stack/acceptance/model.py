"""What acceptance finds: one :class:`efa_stack.acceptance.model.Evidence` per check and node, a
:class:`efa_stack.acceptance.model.NodeVerdict` per node, and the report whose
:meth:`efa_stack.acceptance.model.AcceptanceReport.to_json` is ``--json``'s document (its shape:
docs/design/commands.md, "The acceptance --json document").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from efa_stack import contract

EvidenceStatus = Literal["pass", "slow", "failed", "ambiguous", "skipped"]
"""One check's outcome on one node: a node verdict (below), or skipped (counts for nothing)."""
NodeStatus = Literal["pass", "slow", "failed", "ambiguous"]
NODE_STATUSES: tuple[NodeStatus, ...] = ("pass", "slow", "failed", "ambiguous")

CHECK_STATUS: dict[NodeStatus, contract.CheckStatus] = {
    "pass": "pass", "slow": "fail", "failed": "fail", "ambiguous": "fail",
}
"""A node verdict in the vocabulary of preflight's and verify's checks (docs/design/commands.md, "Statuses"):
only a passing node is accepted (exit code 0); an ambiguous node fails acceptance but is never quarantined."""

DCGM_LEVELS = (1, 2, 3, 4)
DEFAULT_DCGM_LEVEL = 2


@dataclass(frozen=True)
class Evidence:
    """One check on one node (or one pair test): measured against expected."""

    check: contract.AcceptanceCheck
    status: EvidenceStatus
    measured: str
    expected: str
    detail: str = ""

    def line(self) -> str:
        text = f"{self.check}: {self.status}: measured {self.measured}; expected {self.expected}"
        return text + (f" ({self.detail})" if self.detail else "")


def node_status(evidence: tuple[Evidence, ...] | list[Evidence]) -> NodeStatus:
    """failed if any check failed, else slow, else ambiguous (a pair test that names no node), else pass.

    Skipped checks count for nothing.
    """
    states = {e.status for e in evidence}
    for worst in ("failed", "slow", "ambiguous"):
        if worst in states:
            return worst
    return "pass"


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    evidence: tuple[Evidence, ...]

    @property
    def status(self) -> NodeStatus:
        return node_status(self.evidence)

    def reason(self) -> str:
        """The taint value: ``<first failing check>-<status>`` (a valid label value), e.g. ``dcgm-failed``."""
        worst = self.status
        bad = next((e for e in self.evidence if e.status == worst), None)
        return f"{bad.check}-{worst}" if bad is not None else "pass"

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "status": self.status, "evidence": [asdict(e) for e in self.evidence]}


@dataclass(frozen=True)
class PairResult:
    round: int
    nodes: tuple[str, str]
    job: str
    status: NodeStatus
    busbw: float | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "nodes": list(self.nodes)}


@dataclass(frozen=True)
class QuarantineAction:
    node: str
    reason: str
    patch: dict[str, Any] = field(hash=False)

    def to_json(self) -> dict[str, Any]:
        taint = next(t for t in self.patch["spec"]["taints"] if t["key"] == contract.QUARANTINE_TAINT_KEY)
        return {"node": self.node, "reason": self.reason, "cordon": True, "taint": taint, "patch": self.patch}


@dataclass(frozen=True)
class AcceptanceReport:
    cluster: str
    node_group: str
    instance_type: str
    dcgm_level: int
    efa: bool
    nodes: tuple[NodeVerdict, ...]
    pairs: tuple[PairResult, ...] = ()
    quarantine: tuple[QuarantineAction, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(CHECK_STATUS[n.status] == "pass" for n in self.nodes)

    def count(self, status: NodeStatus) -> int:
        return sum(1 for n in self.nodes if n.status == status)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "node_group": self.node_group,
            "instance_type": self.instance_type,
            "dcgm_level": self.dcgm_level,
            "efa": self.efa,
            "ok": self.ok,
            "summary": {s: self.count(s) for s in NODE_STATUSES},
            "nodes": [n.to_json() for n in self.nodes],
            "pairs": [p.to_json() for p in self.pairs],
            "quarantine": [q.to_json() for q in self.quarantine],
            "notes": list(self.notes),
        }
