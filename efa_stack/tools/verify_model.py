"""The results ``efa-stack verify`` computes, as frozen dataclasses with their ``--json`` documents.

:mod:`efa_stack.tools.verify` computes them; :mod:`efa_stack.tools.render` prints them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from efa_stack import contract
from efa_stack.cluster import JobOutcome
from efa_stack.nccl_report import Report
from efa_stack.nccl_report.render import report_document


@dataclass(frozen=True)
class NodeCheck:
    """One node against what its node group's plan says it should have."""

    name: str
    node_group: str
    instance_type: str | None
    ready: bool
    gpus: int | None
    efa: int | None
    neuron: int | None
    expected_instance_type: str
    expected_gpus: int
    expected_efa: int
    expected_neuron: int
    status: contract.CheckStatus
    problems: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()
    devices: contract.DeviceMechanism = contract.DEVICES_PLUGIN
    """How the node's devices were counted: allocatable (``plugin``) or its ResourceSlices (``dra``)."""


@dataclass(frozen=True)
class GroupCheck:
    """One node group: enough matching nodes?"""

    name: str
    instance_type: str
    expected_nodes: int
    found: int
    matching: int
    status: contract.CheckStatus
    message: str
    fix: str = ""


@dataclass(frozen=True)
class VerifyResult:
    """The nodes stage: every node and every node group against the plan."""

    nodes: tuple[NodeCheck, ...]
    groups: tuple[GroupCheck, ...]
    unexpected: tuple[str, ...] = ()
    """Nodes labelled with a node group the spec does not have."""

    @property
    def ok(self) -> bool:
        return all(g.status != "fail" for g in self.groups)

    @property
    def expected_nodes(self) -> int:
        return sum(g.expected_nodes for g in self.groups)

    @property
    def matching_nodes(self) -> int:
        return sum(min(g.matching, g.expected_nodes) for g in self.groups)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "expected_nodes": self.expected_nodes,
            "matching_nodes": self.matching_nodes,
            "groups": [asdict(g) for g in self.groups],
            "nodes": [asdict(n) for n in self.nodes],
            "unexpected_nodes": list(self.unexpected),
        }


@dataclass(frozen=True)
class NcclCheck:
    """``--run-nccl``: how the MPIJob ended, the EFA guard's lines, and nccl-report's report of its log."""

    group: str
    outcome: JobOutcome
    guard: tuple[str, ...] = ()
    report: Report | None = None
    """nccl-report's report of the launcher log (only when the job succeeded)."""

    @property
    def job(self) -> str:
        return self.outcome.name

    @property
    def namespace(self) -> str:
        return self.outcome.namespace

    @property
    def exit_code(self) -> int:
        """1 when the job did not succeed, else nccl-report's exit code (0 pass, 1 below the mark, 2 bad log)."""
        if self.outcome.state != "Succeeded" or self.report is None:
            return 1
        return self.report.exit_code

    @property
    def status(self) -> contract.CheckStatus:
        return "pass" if self.exit_code == 0 else "fail"

    @property
    def fix(self) -> str:
        ns, name = self.namespace, self.job
        return {
            "Succeeded": "",
            "Failed": f"kubectl -n {ns} describe mpijob {name}; kubectl -n {ns} logs "
                      f"-l {contract.JOB_NAME_LABEL}={name},{contract.JOB_ROLE_LABEL}=launcher",
            "Timeout": f"kubectl -n {ns} get mpijob {name} -o yaml (pending workers? not enough "
                       "GPUs/EFA devices free?); raise --job-timeout",
            "NotFound": "deploy the cluster's Kubernetes objects, then run verify --run-nccl again",
        }[self.outcome.state]

    @property
    def log_tail(self) -> str:
        return "\n".join((self.outcome.log or "").splitlines()[-20:])

    def to_json(self) -> dict[str, Any]:
        o = self.outcome
        doc: dict[str, Any] = {"job": o.name, "namespace": o.namespace, "state": o.state, "message": o.message,
                               "started": o.started_by_us}
        if o.state != "Succeeded":
            return {**doc, "fix": self.fix, "guard": list(self.guard), "log_tail": self.log_tail}
        return {**doc, "report_exit_code": self.exit_code,
                "report": report_document(self.report) if self.report is not None else None}


@dataclass(frozen=True)
class VerifyReport:
    """What ``verify`` found: the nodes and, with ``--run-nccl`` on matching nodes, the NCCL test."""

    cluster: str
    nodes: VerifyResult
    nccl: NcclCheck | None = None
    run_nccl: bool = False
    timeout: float = 0.0

    @property
    def exit_code(self) -> int:
        """0 ok; 1 a node mismatch, a failed job or an NCCL result below the mark; 2 a log nccl-report cannot read."""
        if not self.nodes.ok:
            return 1
        return self.nccl.exit_code if self.nccl is not None else 0

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"cluster": self.cluster, **self.nodes.to_json()}
        if not self.nodes.ok:
            doc["nccl"] = None
        elif self.nccl is not None:
            doc["nccl"] = self.nccl.to_json()
        return doc
