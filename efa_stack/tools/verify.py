"""Verify a deployed cluster against its plan: ``efa-stack verify --spec FILE``.

The check the SkyPilot EFA guide does by eye with
``kubectl get nodes -o custom-columns=NAME:.metadata.name,TYPE:.metadata.labels.node\\.kubernetes\\.io/instance-type,GPU:.status.allocatable.nvidia\\.com/gpu,EFA:.status.allocatable.vpc\\.amazonaws\\.com/efa``,
done against the plan: every node group should have ``desired_size`` Ready nodes of its instance
type, each with ``gpus_per_node`` allocatable ``nvidia.com/gpu``, ``efa_devices_per_node``
allocatable ``vpc.amazonaws.com/efa`` and ``neuron_devices_per_node`` ``aws.amazon.com/neuron``.
Nodes are found by the ``efa-stack.io/node-group`` label the node groups put on them.

:func:`wait_for_nodes` polls until that holds or a timeout passes (clock and sleep are injected,
so tests never sleep). With ``--run-nccl`` the NCCL-tests MPIJob of an EFA node group
(``nccl-tests-<node group>``, created suspended) is started by setting
``spec.runPolicy.suspend: false``, followed until its ``Succeeded``/``Failed`` condition, and the
launcher pod's log goes to ``efa-stack nccl-report``.

The Kubernetes API objects are passed in (``CoreV1Api``, ``CustomObjectsApi``): this module never
loads a kubeconfig; the CLI does.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from efa_stack import contract
from efa_stack.names import nccl_job_name
from efa_stack.planning.nccl import NCCL_JOB_NAMESPACE
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.planning.plan import LABEL_NODE_GROUP, ClusterPlan

Status = contract.CheckStatus

INSTANCE_TYPE_LABEL = contract.INSTANCE_TYPE_LABEL
GPU_RESOURCE = contract.GPU_RESOURCE
EFA_RESOURCE = contract.EFA_RESOURCE
NEURON_RESOURCE = contract.NEURON_RESOURCE

MPIJOB_GROUP = contract.MPIJOB_GROUP
MPIJOB_VERSION = contract.MPIJOB_VERSION
MPIJOB_PLURAL = contract.MPIJOB_PLURAL
JOB_NAME_LABEL = contract.JOB_NAME_LABEL
JOB_ROLE_LABEL = contract.JOB_ROLE_LABEL
DEFAULT_NAMESPACE = NCCL_JOB_NAMESPACE

EFA_FIX = (
    "check the EFA device plugin DaemonSet runs on the node "
    "(kubectl -n kube-system get ds {ds}; kubectl describe node {node}) "
    "and that the node group's launch template declares the EFA interfaces (InterfaceType efa/efa-only "
    "on each EFA card; efa-only needs VPC CNI >= 1.18.5)"
)
GPU_FIX = (
    "check the NVIDIA device plugin DaemonSet runs on the node and tolerates its taints "
    "(kubectl -n kube-system get ds; kubectl describe node {node}); fewer GPUs than the instance has "
    "can mean a failed GPU (look for Xid errors)"
)
NEURON_FIX = (
    "check the Neuron device plugin DaemonSet runs on the node (kubectl -n kube-system get ds; "
    "kubectl describe node {node})"
)




class VerifyError(Exception):
    """The cluster cannot be asked (API unreachable, unauthorized, bad input). Exit code 2."""

    exit_code = 2

    def __init__(self, message: str, fix: str = ""):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def render(self) -> str:
        return self.message + (f"\nFix: {self.fix}" if self.fix else "")


# --------------------------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------------------------


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
    status: Status
    problems: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class GroupCheck:
    """One node group: enough matching nodes?"""

    name: str
    instance_type: str
    expected_nodes: int
    found: int
    matching: int
    status: Status
    message: str
    fix: str = ""


@dataclass(frozen=True)
class VerifyResult:
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


def _quantity(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value))
    except ValueError:
        from kubernetes.utils import parse_quantity

        return int(parse_quantity(str(value)))


def _ready(node: Any) -> bool:
    for c in (node.status.conditions or []) if node.status else []:
        if c.type == "Ready":
            return c.status == "True"
    return False


def check_node(node: Any, group: NodeGroupPlan) -> NodeCheck:
    """Compare one ``V1Node`` with ``group``'s plan."""
    name = node.metadata.name
    labels = node.metadata.labels or {}
    alloc = (node.status.allocatable if node.status else None) or {}
    itype = labels.get(INSTANCE_TYPE_LABEL)
    gpus, efa, neuron = (_quantity(alloc.get(r)) for r in (GPU_RESOURCE, EFA_RESOURCE, NEURON_RESOURCE))
    want_gpus, want_efa, want_neuron = group.gpus_per_node, group.efa_devices_per_node, group.neuron_devices_per_node
    problems: list[str] = []
    fixes: list[str] = []
    status: Status = "pass"

    def fail(problem: str, fix: str) -> None:
        nonlocal status
        status = "fail"
        problems.append(problem)
        if fix and fix not in fixes:
            fixes.append(fix)

    if not _ready(node):
        fail("node is not Ready", f"kubectl describe node {name} (kubelet, CNI and node conditions)")
    if itype != group.instance_type:
        fail(
            f"instance type is {itype or 'unknown'}, node group {group.name} uses {group.instance_type}",
            f"the node carries the label {LABEL_NODE_GROUP}={group.name} but is not one of its instances; "
            "check the labels of the node group it belongs to",
        )
    for have, want, resource, fix in (
        (gpus, want_gpus, GPU_RESOURCE, GPU_FIX),
        (efa, want_efa, EFA_RESOURCE, EFA_FIX),
        (neuron, want_neuron, NEURON_RESOURCE, NEURON_FIX),
    ):
        if want <= 0:
            continue
        if have is None:
            fail(f"no {resource} in allocatable (expected {want})", fix.format(node=name, ds=contract.EFA_DEVICE_PLUGIN_NAME))
        elif have < want:
            fail(f"{have} {resource} allocatable, expected {want}", fix.format(node=name, ds=contract.EFA_DEVICE_PLUGIN_NAME))
        elif have > want and status == "pass":
            status = "warn"
            problems.append(f"{have} {resource} allocatable, more than the {want} the plan expects")
    return NodeCheck(
        name=name, node_group=group.name, instance_type=itype, ready=_ready(node),
        gpus=gpus, efa=efa, neuron=neuron,
        expected_instance_type=group.instance_type, expected_gpus=want_gpus, expected_efa=want_efa,
        expected_neuron=want_neuron, status=status, problems=tuple(problems), fixes=tuple(fixes),
    )


def _expectation(g: NodeGroupPlan) -> str:
    parts = [g.instance_type]
    if g.gpus_per_node:
        parts.append(f"{g.gpus_per_node} GPU")
    if g.neuron_devices_per_node:
        parts.append(f"{g.neuron_devices_per_node} Neuron")
    if g.efa_devices_per_node:
        parts.append(f"{g.efa_devices_per_node} EFA")
    return ", ".join(parts)


def check_nodes(plan: ClusterPlan, nodes: list[Any], *, cluster_hint: str | None = None) -> VerifyResult:
    """Every node group of ``plan`` against the ``V1Node`` objects found (pure; no API calls)."""
    groups = {g.name: g for g in plan.all_node_groups}
    node_checks: list[NodeCheck] = []
    unexpected: list[str] = []
    by_group: dict[str, list[NodeCheck]] = {name: [] for name in groups}
    for node in sorted(nodes, key=lambda n: n.metadata.name):
        gname = (node.metadata.labels or {}).get(LABEL_NODE_GROUP)
        if gname not in groups:
            unexpected.append(f"{node.metadata.name} ({LABEL_NODE_GROUP}={gname})")
            continue
        nc = check_node(node, groups[gname])
        node_checks.append(nc)
        by_group[gname].append(nc)

    cluster = cluster_hint or plan.name
    group_checks: list[GroupCheck] = []
    for name, g in groups.items():
        found = by_group[name]
        good = [n for n in found if n.status != "fail"]
        want = g.desired_size
        expect = _expectation(g)
        if len(good) >= want:
            status: Status = "warn" if any(n.status == "warn" for n in good) else "pass"
            msg = f"{len(good)}/{want} nodes ready ({expect} each)"
            fix = ""
            if len(found) > g.max_size:
                status, msg = "warn", msg + f"; {len(found)} nodes exceed maxSize {g.max_size}"
        elif len(found) < want:
            status = "fail"
            msg = f"found {len(found)} of {want} nodes ({len(good)} ready with {expect})"
            fix = (
                "nodes may still be joining: wait longer (--timeout); otherwise look at the node group's health "
                f"(EKS console, or aws eks list-nodegroups --cluster-name {cluster} and describe-nodegroup: "
                "InsufficientInstanceCapacity, vCPU quota - run efa-stack preflight)"
            )
            node_fixes = [f for n in found for f in n.fixes]
            if node_fixes:
                fix += "; " + "; ".join(dict.fromkeys(node_fixes))
        else:
            status = "fail"
            bad = [n.name for n in found if n.status == "fail"]
            msg = f"only {len(good)} of {want} nodes match ({expect}); not matching: {', '.join(bad)}"
            fix = "; ".join(dict.fromkeys(f for n in found for f in n.fixes))
        group_checks.append(GroupCheck(
            name=name, instance_type=g.instance_type, expected_nodes=want, found=len(found),
            matching=len(good), status=status, message=msg, fix=fix,
        ))
    return VerifyResult(nodes=tuple(node_checks), groups=tuple(group_checks), unexpected=tuple(unexpected))


def _api_error(exc: Exception, what: str) -> VerifyError:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or exc.__class__.__name__
    if status in (401, 403):
        return VerifyError(
            f"the Kubernetes API refused to {what} ({status} {reason})",
            "use a kubeconfig/context with access to the cluster (aws eks update-kubeconfig --name CLUSTER "
            "--region REGION) and an EKS access entry for your IAM principal",
        )
    if status is None:
        return VerifyError(
            f"cannot reach the Kubernetes API to {what} ({reason}: {exc})",
            "check the kubeconfig context (--context) and network access to the cluster endpoint",
        )
    return VerifyError(f"the Kubernetes API failed to {what} ({status} {reason})")


def list_nodes(core: Any) -> list[Any]:
    """Nodes that carry the efa-stack node-group label."""
    try:
        return list(core.list_node(label_selector=LABEL_NODE_GROUP).items or [])
    except Exception as exc:  # ApiException, urllib3 errors
        raise _api_error(exc, "list nodes") from exc


def wait_for_nodes(
    plan: ClusterPlan,
    core: Any,
    *,
    timeout: float,
    interval: float,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    on_poll: Callable[[VerifyResult], None] | None = None,
) -> VerifyResult:
    """Poll the nodes until every node group matches the plan or ``timeout`` seconds pass."""
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    deadline = clock() + max(0.0, timeout)
    while True:
        result = check_nodes(plan, list_nodes(core))
        if on_poll is not None:
            on_poll(result)
        remaining = deadline - clock()
        if result.ok or remaining <= 0:
            return result
        sleep(min(interval, remaining))


# --------------------------------------------------------------------------------------------
# The NCCL-tests MPIJob
# --------------------------------------------------------------------------------------------


@dataclass
class JobOutcome:
    name: str
    namespace: str
    state: Literal["Succeeded", "Failed", "Timeout", "NotFound"]
    message: str
    started_by_us: bool = False
    log: str | None = field(default=None, repr=False)


def job_state(obj: dict[str, Any]) -> tuple[Literal["Succeeded", "Failed"] | None, str]:
    """``("Succeeded"|"Failed", reason: message)`` from an MPIJob's status conditions, or ``(None, "")``."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Succeeded", "Failed") and str(c.get("status")) == "True":
            text = ": ".join(x for x in (c.get("reason"), c.get("message")) if x)
            return c["type"], text
    return None, ""


def _get_job(custom: Any, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        return custom.get_namespaced_custom_object(MPIJOB_GROUP, MPIJOB_VERSION, namespace, MPIJOB_PLURAL, name)
    except Exception as exc:
        if getattr(exc, "status", None) == 404:
            return None
        raise _api_error(exc, f"read MPIJob {namespace}/{name}") from exc


def start_job(custom: Any, name: str, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Un-suspend the MPIJob (a JSON merge patch of ``spec.runPolicy.suspend``)."""
    try:
        custom.patch_namespaced_custom_object(
            MPIJOB_GROUP, MPIJOB_VERSION, namespace, MPIJOB_PLURAL, name,
            {"spec": {"runPolicy": {"suspend": False}}},
            _content_type="application/merge-patch+json",
        )
    except Exception as exc:
        raise _api_error(exc, f"start MPIJob {namespace}/{name}") from exc


def wait_for_job(
    custom: Any,
    name: str,
    namespace: str = DEFAULT_NAMESPACE,
    *,
    timeout: float,
    interval: float,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    on_poll: Callable[[dict[str, Any]], None] | None = None,
) -> JobOutcome:
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    deadline = clock() + max(0.0, timeout)
    while True:
        obj = _get_job(custom, name, namespace)
        if obj is None:
            return JobOutcome(name, namespace, "NotFound", f"MPIJob {namespace}/{name} disappeared")
        if on_poll is not None:
            on_poll(obj)
        state, text = job_state(obj)
        if state is not None:
            return JobOutcome(name, namespace, state, text)
        remaining = deadline - clock()
        if remaining <= 0:
            return JobOutcome(name, namespace, "Timeout", f"MPIJob {namespace}/{name} did not finish within {timeout:g} s")
        sleep(min(interval, remaining))


def launcher_log(core: Any, job: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The log of the job's launcher pod (the newest one, if the launcher was restarted)."""
    selector = f"{JOB_NAME_LABEL}={job},{JOB_ROLE_LABEL}=launcher"
    try:
        pods = list(core.list_namespaced_pod(namespace, label_selector=selector).items or [])
    except Exception as exc:
        raise _api_error(exc, f"list the launcher pod of {namespace}/{job}") from exc
    if not pods:
        raise VerifyError(
            f"no launcher pod found for MPIJob {namespace}/{job} (selector {selector})",
            f"kubectl -n {namespace} get pods -l {JOB_NAME_LABEL}={job}",
        )

    def created(p: Any) -> Any:
        ts = p.metadata.creation_timestamp
        return (ts is not None, ts.timestamp() if ts is not None else 0.0)

    pod = max(pods, key=created)
    try:
        return core.read_namespaced_pod_log(pod.metadata.name, namespace)
    except Exception as exc:
        raise _api_error(exc, f"read the log of pod {namespace}/{pod.metadata.name}") from exc


EFA_GUARD_CONTAINER = contract.EFA_GUARD_CONTAINER
EFA_GUARD_FAIL_PREFIX = contract.EFA_GUARD_FAIL_PREFIX


def guard_failures(core: Any, job: str, namespace: str = DEFAULT_NAMESPACE) -> list[str]:
    """The lines the ``efa-guard`` init container of the job's workers failed with, one per stopped worker.

    The guard (k8s/scripts/efa_guard.sh) writes its one line to the termination message file; with
    ``terminationMessagePolicy: FallbackToLogsOnError`` the kubelet uses the log's tail when the file is
    empty, so the message is read first and the container's log only when the message lacks the line.
    Best effort: an API error here returns what was found, the job's own outcome is reported anyway.
    """
    selector = f"{JOB_NAME_LABEL}={job},{JOB_ROLE_LABEL}=worker"
    try:
        pods = list(core.list_namespaced_pod(namespace, label_selector=selector).items or [])
    except Exception:  # noqa: BLE001 - ApiException, urllib3 errors: nothing to add to the job's outcome
        return []
    lines: list[str] = []
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        for st in (pod.status.init_container_statuses or []) if pod.status else []:
            if st.name != EFA_GUARD_CONTAINER:
                continue
            states = [x for x in (st.state, st.last_state) if x is not None and x.terminated is not None]
            done = next((x.terminated for x in states if x.terminated.exit_code), None)
            if done is None:
                continue
            text = done.message or ""
            if EFA_GUARD_FAIL_PREFIX not in text:
                try:
                    text = core.read_namespaced_pod_log(pod.metadata.name, namespace, container=EFA_GUARD_CONTAINER)
                except Exception:  # noqa: BLE001 - the log may be gone; the fallback line still names the pod
                    text = ""
            found = [ln.strip() for ln in (text or "").splitlines() if ln.strip().startswith(EFA_GUARD_FAIL_PREFIX)]
            lines.append(found[-1] if found else (
                f"{EFA_GUARD_FAIL_PREFIX} pod={namespace}/{pod.metadata.name}: the {EFA_GUARD_CONTAINER} init container "
                f"exited {done.exit_code} ({done.reason or 'no reason'}) without its line. Fix: kubectl -n {namespace} "
                f"logs {pod.metadata.name} -c {EFA_GUARD_CONTAINER}"
            ))
    return lines


def pick_node_group(plan: ClusterPlan, name: str | None) -> NodeGroupPlan:
    """The node group whose NCCL test to run: ``name``, or the one the k8s charts made the job for
    (``plan.nccl_job``: ``ncclTest.nodeGroup``, else the first EFA NVIDIA group).

    Only a group with a rendered MPIJob can be run; any other name is refused with the groups that have one.
    """
    with_job = [job.node_group for job in plan.nccl_jobs]
    if name is not None:
        if name in with_job:
            return plan.node_group(name)
        known = any(g.name == name for g in plan.all_node_groups)
        raise VerifyError(
            f"node group {name!r} " + ("has no NCCL-tests MPIJob" if known else "is not in the spec"),
            f"use --node-group {' or '.join(with_job)} (the node groups with an NCCL-tests MPIJob), "
            "or set ncclTest.nodeGroup in the spec and deploy again"
            if with_job else
            "the spec makes no NCCL-tests MPIJob; drop --run-nccl, or add an NVIDIA GPU node group",
        )
    if not with_job:
        raise VerifyError(
            "the spec makes no NCCL-tests MPIJob (it needs an NVIDIA GPU node group with desiredCapacity >= 1, "
            "with EFA unless ncclTest.fabric says otherwise; nccl-tests are CUDA programs)",
            "drop --run-nccl, or add such a node group",
        )
    return plan.node_group(with_job[0])


def _judged_instance_type(plan: ClusterPlan, group: NodeGroupPlan) -> str | None:
    """Judge the run against the EFA line rate only when the job runs over EFA (not the tcp baseline)."""
    job = next((j for j in plan.nccl_jobs if j.node_group == group.name), None)
    if job is not None and job.worker.fabric != "efa":
        return None
    return group.instance_type


def run_nccl_job(
    core: Any,
    custom: Any,
    group: NodeGroupPlan,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    timeout: float,
    interval: float,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    on_poll: Callable[[dict[str, Any]], None] | None = None,
) -> JobOutcome:
    """Start (if suspended) and follow ``nccl-tests-<group>``; the outcome carries the launcher log."""
    name = nccl_job_name(group.name)
    obj = _get_job(custom, name, namespace)
    if obj is None:
        return JobOutcome(
            name, namespace, "NotFound",
            f"MPIJob {namespace}/{name} not found; deploy the cluster's Kubernetes objects first "
            "(cdk deploy, or sh dist/<cluster>/apply.sh)",
        )
    started = False
    state, _ = job_state(obj)
    if state is None and ((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend", False):
        start_job(custom, name, namespace)
        started = True
    outcome = wait_for_job(
        custom, name, namespace, timeout=timeout, interval=interval, clock=clock, sleep=sleep, on_poll=on_poll
    )
    outcome.started_by_us = started
    if state is not None:
        outcome.message += (
            " (it had finished before this run; a finished MPIJob does not run again: delete it and "
            "kubectl apply -f dist/<cluster>/after-crds/, or redeploy, to run a fresh test)"
        )
    if outcome.state in ("Succeeded", "Failed"):
        try:
            outcome.log = launcher_log(core, name, namespace)
        except VerifyError as exc:
            if outcome.state == "Succeeded":
                raise
            outcome.message += f" (launcher log unavailable: {exc.message})"
    return outcome


def hand_to_report(
    log: str,
    group: NodeGroupPlan,
    *,
    instance_type: str | None = None,
    json_out: bool,
    threshold: float | None = None,
    plot: Path | None = None,
) -> tuple[int, Any]:
    """Run ``efa-stack nccl-report`` on the launcher log; returns (exit code, JSON doc or None)."""
    try:
        from efa_stack.tools import nccl_report  # lazy: keeps verify usable while the report is missing or broken
    except ImportError as exc:
        raise VerifyError(f"nccl-report is not available ({exc})", "reinstall efa-stack (pip install -e .)") from exc

    thr = threshold if threshold is not None else getattr(nccl_report, "DEFAULT_THRESHOLD", contract.NCCL_PASS_THRESHOLD)
    with tempfile.TemporaryDirectory(prefix="efa-stack-nccl-") as tmp:
        path = Path(tmp) / f"{nccl_job_name(group.name)}-launcher.log"
        path.write_text(log)
        args = ([path], instance_type, group.desired_size, json_out, plot, thr)
        if not json_out:
            return nccl_report.report_command(*args), None
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = nccl_report.report_command(*args)
    text = buf.getvalue()
    try:
        return code, json.loads(text)
    except ValueError:
        return code, {"raw": text}


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def render_nodes(result: VerifyResult, console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    style = {"pass": "green", "warn": "yellow", "fail": "bold red"}

    def cell(have: int | None, want: int) -> str:
        text = "-" if have is None else str(have)
        return text if want == 0 else f"{text}/{want}"

    nodes = Table(title="nodes", expand=False)
    for col in ("status", "node", "node group", "instance type", "GPU", "EFA", "Neuron", "problem"):
        nodes.add_column(col, no_wrap=col not in ("problem",))
    for n in result.nodes:
        nodes.add_row(
            f"[{style[n.status]}]{n.status.upper()}[/]", escape(n.name), escape(n.node_group),
            escape(n.instance_type or "?"), cell(n.gpus, n.expected_gpus), cell(n.efa, n.expected_efa),
            cell(n.neuron, n.expected_neuron), escape("; ".join(n.problems)),
        )
    if result.nodes:
        console.print(nodes)
    groups = Table(title="node groups", expand=False)
    for col in ("status", "node group", "nodes", "finding", "fix"):
        groups.add_column(col, no_wrap=col in ("status", "node group", "nodes"))
    for g in result.groups:
        groups.add_row(
            f"[{style[g.status]}]{g.status.upper()}[/]", escape(g.name), f"{g.matching}/{g.expected_nodes}",
            escape(g.message), escape(g.fix),
        )
    console.print(groups)
    for u in result.unexpected:
        console.print(f"[yellow]note[/]: node {escape(u)} is not in the spec")


def report_verify_error(exc: VerifyError, plan: ClusterPlan, *, json_out: bool, echo: Callable[[str], None],
                        console: Any) -> int:
    """A VerifyError as the ``--json`` error document or one console line; returns its exit code."""
    from rich.markup import escape

    if json_out:
        echo(json.dumps({"cluster": plan.name, "ok": False, "error": exc.message, "fix": exc.fix}, indent=2))
    else:
        console.print(f"[bold red]error[/]: {escape(exc.render())}")
    return exc.exit_code


def run_acceptance(plan: ClusterPlan, core: Any, custom: Any, **kwargs: Any) -> int:
    """``verify --acceptance``: see :func:`efa_stack.acceptance.run.acceptance_command`."""
    from efa_stack.acceptance.run import acceptance_command

    return acceptance_command(plan, core, custom, **kwargs)


def run_verify(
    plan: ClusterPlan,
    core: Any,
    custom: Any | None = None,
    *,
    console: Any,
    json_out: bool = False,
    timeout: float = 600.0,
    interval: float = 15.0,
    run_nccl: bool = False,
    node_group: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    job_timeout: float = 1800.0,
    threshold: float | None = None,
    plot: Path | None = None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    echo: Callable[[str], None] = print,
    err_console: Any | None = None,
) -> int:
    """The whole ``verify`` command; returns the exit code (0 ok, 1 mismatch or failed job, 2 errors)."""
    from rich.markup import escape

    try:
        group = pick_node_group(plan, node_group) if run_nccl else None
        if json_out:
            result = wait_for_nodes(plan, core, timeout=timeout, interval=interval, clock=clock, sleep=sleep)
        else:
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
                        description=", ".join(f"{g.name} {min(g.matching, g.expected_nodes)}/{g.expected_nodes}" for g in r.groups),
                    )

                result = wait_for_nodes(
                    plan, core, timeout=timeout, interval=interval, clock=clock, sleep=sleep, on_poll=on_poll
                )
            render_nodes(result, console)

        doc: dict[str, Any] = {"cluster": plan.name, **result.to_json()}
        if not result.ok:
            if not json_out:
                console.print(
                    f"[bold red]FAIL[/]: {result.matching_nodes}/{result.expected_nodes} nodes match the spec"
                    + (" within the timeout" if timeout > 0 else "")
                    + (" - the NCCL test was not started" if run_nccl else "")
                )
            else:
                doc["nccl"] = None
                echo(json.dumps(doc, indent=2))
            return 1
        if not json_out:
            console.print(f"[green]OK[/]: {result.matching_nodes}/{result.expected_nodes} nodes match the spec")
        if not run_nccl:
            if json_out:
                echo(json.dumps(doc, indent=2))
            return 0

        assert group is not None and custom is not None
        name = nccl_job_name(group.name)
        if not json_out:
            console.print(f"running MPIJob {escape(namespace)}/{escape(name)} ({group.desired_size} x {group.instance_type})")
        outcome = run_nccl_job(
            core, custom, group, namespace=namespace, timeout=job_timeout, interval=interval, clock=clock, sleep=sleep
        )
        nccl: dict[str, Any] = {
            "job": name, "namespace": namespace, "state": outcome.state, "message": outcome.message,
            "started": outcome.started_by_us,
        }
        doc["nccl"] = nccl
        if outcome.state != "Succeeded":
            fix = {
                "Failed": f"kubectl -n {namespace} describe mpijob {name}; kubectl -n {namespace} logs "
                          f"-l {JOB_NAME_LABEL}={name},{JOB_ROLE_LABEL}=launcher",
                "Timeout": f"kubectl -n {namespace} get mpijob {name} -o yaml (pending workers? not enough "
                           "GPUs/EFA devices free?); raise --job-timeout",
                "NotFound": "deploy the cluster's Kubernetes objects, then run verify --run-nccl again",
            }[outcome.state]
            nccl["fix"] = fix
            tail = "\n".join((outcome.log or "").splitlines()[-20:])
            guard = guard_failures(core, name, namespace) if outcome.state in ("Failed", "Timeout") else []
            nccl["guard"] = guard
            if json_out:
                nccl["log_tail"] = tail
                echo(json.dumps(doc, indent=2))
            else:
                console.print(f"[bold red]FAIL[/]: MPIJob {escape(name)} {outcome.state.lower()}: {escape(outcome.message)}")
                if guard:
                    console.print(f"the EFA guard stopped {len(guard)} worker(s) before NCCL could fall back to TCP:")
                    for line in guard:
                        console.print(line, markup=False, highlight=False, soft_wrap=True)
                if tail:
                    console.print("last lines of the launcher log:", markup=False)
                    console.print(tail, markup=False, highlight=False)
                console.print(f"Fix: {escape(fix)}")
            return 1
        if not json_out:
            console.print(f"[green]MPIJob {escape(name)} succeeded[/]: {escape(outcome.message)}")
        code, report = hand_to_report(
            outcome.log or "", group, instance_type=_judged_instance_type(plan, group),
            json_out=json_out, threshold=threshold, plot=plot,
        )
        nccl["report_exit_code"] = code
        if json_out:
            nccl["report"] = report
            echo(json.dumps(doc, indent=2))
        return code
    except VerifyError as exc:
        return report_verify_error(exc, plan, json_out=json_out, echo=echo, console=err_console or console)
