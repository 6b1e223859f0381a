"""What acceptance finds: one :class:`Evidence` per check and node, a :class:`NodeVerdict` per node.

``--json`` prints :meth:`AcceptanceReport.to_json`::

    {"cluster": str, "node_group": str, "instance_type": str, "dcgm_level": int, "efa": bool,
     "ok": bool, "summary": {"pass": int, "slow": int, "failed": int},
     "nodes": [{"node": str, "status": "pass"|"slow"|"failed",
                "evidence": [{"check": str, "status": "pass"|"slow"|"failed"|"skipped",
                              "measured": str, "expected": str, "detail": str}]}],
     "pairs": [{"round": 1|2, "nodes": [str, str], "job": str, "status": "pass"|"slow"|"failed",
                "busbw": float|null, "detail": str}],
     "quarantine": [{"node": str, "reason": str, "cordon": bool, "taint": {...}, "patch": {...}}],
     "notes": [str]}
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from efa_stack import contract

CheckName = contract.AcceptanceCheck
CheckStatus = Literal["pass", "slow", "failed", "skipped"]
NodeStatus = Literal["pass", "slow", "failed"]

DCGM_LEVELS = (1, 2, 3, 4)
DEFAULT_DCGM_LEVEL = 2

# The DCGM container image the dcgm check runs in (the default nccl-tests image has no DCGM: the
# awsome-distributed-training nccl-tests.Dockerfile installs CUDA, GDRCopy, the EFA installer, NCCL
# and nccl-tests, no datacenter-gpu-manager). NVIDIA publishes DCGM as nvcr.io/nvidia/cloud-native/dcgm,
# tagged <DCGM version>-1-<distro> (NVIDIA/dcgm-exporter tests use 4.6.0-1-ubuntu24.04); 4.6.0 is the
# newest NVIDIA/DCGM release tag, whose diag JSON checks.py reads.
DCGM_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"


@dataclass(frozen=True)
class Evidence:
    """One check on one node (or one pair test): measured against expected."""

    check: CheckName
    status: CheckStatus
    measured: str
    expected: str
    detail: str = ""

    def line(self) -> str:
        text = f"{self.check}: {self.status}: measured {self.measured}; expected {self.expected}"
        return text + (f" ({self.detail})" if self.detail else "")


def node_status(evidence: tuple[Evidence, ...] | list[Evidence]) -> NodeStatus:
    """failed if any check failed, else slow if any was slow, else pass (skipped checks count for nothing)."""
    states = {e.status for e in evidence}
    if "failed" in states:
        return "failed"
    if "slow" in states:
        return "slow"
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
        return all(n.status == "pass" for n in self.nodes)

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
            "summary": {s: self.count(s) for s in ("pass", "slow", "failed")},
            "nodes": [n.to_json() for n in self.nodes],
            "pairs": [p.to_json() for p in self.pairs],
            "quarantine": [q.to_json() for q in self.quarantine],
            "notes": list(self.notes),
        }
