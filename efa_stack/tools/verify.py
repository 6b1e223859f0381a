"""``efa-stack verify``: a deployed cluster against its plan; compute each stage's result, then print it.

* nodes (always): every node group has ``desired_size`` Ready nodes of its instance type with the plan's
  allocatable GPUs, EFA devices and Neuron devices (:func:`efa_stack.tools.verify.check_nodes`, polled
  by :func:`efa_stack.tools.verify.wait_for_nodes`);
* ``--run-nccl``: the node group's NCCL-tests MPIJob is started, followed, and its launcher log judged by
  nccl-report's functions (:class:`efa_stack.tools.verify_model.NcclCheck`);
* ``--acceptance``: per-node acceptance (:func:`efa_stack.acceptance.run.run_acceptance`).

Cluster access is :mod:`efa_stack.cluster`'s; printing is :mod:`efa_stack.tools.render`'s. The check's
background (what it replaces, the EFA guard) is in docs/design/commands.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from efa_stack import contract
from efa_stack.acceptance import run as acceptance_run
from efa_stack.acceptance.model import DEFAULT_DCGM_LEVEL
from efa_stack.cluster import (
    Clock,
    JobOutcome,
    Sleep,
    get_job,
    guard_failures,
    is_suspended,
    job_state,
    launcher_log,
    list_nodes,
    list_resource_slices,
    poll,
    queue_of,
    start_job,
    wait_for_job,
)
from efa_stack.console import print_error
from efa_stack.errors import UserError
from efa_stack.names import DNS1123_LABEL, nccl_job_name
from efa_stack.nccl_report import report_from_text
from efa_stack.planning.dra import DRIVERS, PLUGIN_RESOURCES, DeviceKind
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.planning.plan import ClusterPlan
from efa_stack.tools import render
from efa_stack.tools.verify_model import GroupCheck, NcclCheck, NodeCheck, VerifyReport, VerifyResult

__all__ = [
    "VerifyOptions",
    "check_node",
    "check_nodes",
    "pick_node_group",
    "run_acceptance",
    "run_nccl_check",
    "run_nccl_job",
    "run_verify",
    "slice_devices",
    "wait_for_nodes",
]

KINDS: tuple[DeviceKind, ...] = ("gpu", "efa", "neuron")
EFA_PCI_DEVICE = "Elastic Fabric Adapter (EFA)"
"""The ``dra.net/pciDevice`` of an EFA (aws/eks-charts@5239609 stable/aws-dranet templates/deviceclass.yaml)."""

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
_SLICES = "kubectl get resourceslices --field-selector spec.nodeName={node},spec.driver="
DRA_FIXES: dict[DeviceKind, str] = {
    "gpu": f"check the NVIDIA DRA driver's kubelet plugin runs on the node and publishes its GPUs "
           f"({_SLICES}{contract.GPU_DRA_DRIVER}); fewer GPUs than the instance has can mean a failed GPU (look for "
           "Xid errors)",
    "efa": f"check the aws-dranet DaemonSet runs on the node (kubectl -n {contract.KUBE_SYSTEM} get ds "
           f"{contract.AWS_DRANET_RELEASE}) and publishes its EFA devices ({_SLICES}{contract.EFA_DRA_DRIVER}), and that "
           "the node group's launch template declares the EFA interfaces",
    "neuron": f"check the Neuron DRA driver runs on the node and publishes its devices ({_SLICES}"
              f"{contract.NEURON_DRA_DRIVER})",
}
"""What to look at when a ``devices: dra`` node publishes fewer devices than its instance type has."""
PLUGIN_ON_DRA_FIX = (
    "a device plugin serves {resource} on node {node} while the DRA driver publishes the same devices: each can hand "
    "a device out again. efa-stack's device plugin DaemonSets require " + contract.LABEL_DEVICES + " NotIn [dra]; find "
    "the other installation (kubectl get ds -A) and remove it, or give the node group devices: plugin"
)
DRA_ON_PLUGIN_FIX = (
    "the DRA driver {driver} publishes devices of node {node}, whose node group uses the device plugins: each can hand "
    "a device out again. efa-stack runs its DRA drivers only on nodes labelled " + contract.LABEL_DEVICES + "=dra; "
    "find the other installation (kubectl get ds -A) and remove it, or give the node group devices: dra"
)


# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyOptions:
    """Everything ``efa-stack verify`` was asked, as the CLI parsed it."""

    timeout: float = 600.0
    """Seconds to wait for the nodes (with ``acceptance``: for the whole run); 0 checks once."""
    interval: float = 15.0
    run_nccl: bool = False
    acceptance: bool = False
    node_group: str | None = None
    namespace: str = contract.NCCL_JOB_NAMESPACE
    job_timeout: float = 1800.0
    threshold: float | None = None
    """nccl-report's pass mark (fraction of the line rate); None: the report's own."""
    plot: Path | None = None
    dcgm_level: int = DEFAULT_DCGM_LEVEL
    no_efa: bool = False
    quarantine: bool = False
    json_out: bool = False
    clock: Clock | None = None
    sleep: Sleep | None = None

    @property
    def pass_threshold(self) -> float:
        return self.threshold if self.threshold is not None else contract.NCCL_PASS_THRESHOLD

    def check(self, plan: ClusterPlan) -> None:
        """Refuse bad input before the cluster is asked (the CLI calls this before loading the kubeconfig)."""
        if self.quarantine and not self.acceptance:
            raise UserError("--quarantine only acts on the verdicts of --acceptance",
                            "add --acceptance (efa-stack verify --spec FILE --acceptance --quarantine)")
        if self.acceptance:
            acceptance_run.select_group(plan, self.node_group, no_efa=self.no_efa, dcgm_level=self.dcgm_level)
        if self.run_nccl or self.acceptance:
            why = DNS1123_LABEL.violation(self.namespace)
            if why is not None:
                raise UserError(f"--namespace {self.namespace!r} is not a namespace: {why}",
                                f"pass the namespace of the NCCL-tests MPIJob (default {contract.NCCL_JOB_NAMESPACE})")
        if self.run_nccl and not self.acceptance:
            pick_node_group(plan, self.node_group)


# --------------------------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------------------------


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


def _attribute(device: Mapping[str, Any], driver: str, name: str) -> Any:
    """The value of attribute ``name`` of a ResourceSlice ``device`` (qualified by the driver's domain or not)."""
    attrs = device.get("attributes") or {}
    value = attrs.get(f"{driver}/{name}", attrs.get(name)) or {}
    return next(iter(value.values()), None) if isinstance(value, dict) else None


def _kind_of(driver: str, device: Mapping[str, Any]) -> DeviceKind | None:
    """The device kind a published device counts as, by its driver and the attributes its DeviceClass selects on
    (k8s/dra.py ``device_classes``: an EFA is a ``dra.net`` device whose ``pciDevice`` is the EFA, a GPU a
    ``gpu.nvidia.com`` device of ``type`` gpu); dranet's other network devices and MIG devices count as none."""
    if driver == contract.EFA_DRA_DRIVER:
        return "efa" if _attribute(device, driver, "pciDevice") == EFA_PCI_DEVICE else None
    if driver == contract.GPU_DRA_DRIVER:
        return "gpu" if _attribute(device, driver, "type") == "gpu" else None
    return "neuron" if driver == contract.NEURON_DRA_DRIVER else None


def slice_devices(slices: Iterable[Mapping[str, Any]], node: str) -> dict[DeviceKind, int]:
    """The devices of each kind the DRA drivers publish for ``node`` (ResourceSlices with ``spec.nodeName``), from the
    newest generation of each pool only (a pool being republished has slices of two generations for a while)."""
    mine = [s["spec"] for s in slices if (s.get("spec") or {}).get("nodeName") == node]
    newest: dict[tuple[str, str], int] = {}
    for spec in mine:
        key = (spec["driver"], spec["pool"]["name"])
        newest[key] = max(newest.get(key, 0), int(spec["pool"].get("generation", 0)))
    counts: dict[DeviceKind, int] = {"gpu": 0, "efa": 0, "neuron": 0}
    for spec in mine:
        if int(spec["pool"].get("generation", 0)) != newest[(spec["driver"], spec["pool"]["name"])]:
            continue
        for device in spec.get("devices") or []:
            kind = _kind_of(spec["driver"], device)
            if kind is not None:
                counts[kind] += 1
    return counts


def check_node(node: Any, group: NodeGroupPlan, slices: Iterable[Mapping[str, Any]] = ()) -> NodeCheck:
    """Compare one ``V1Node`` with ``group``'s plan: on a device plugin group its allocatable devices, on a
    ``devices: dra`` group the devices its ResourceSlices publish (``slices``: the cluster's) and no device plugin
    resource allocatable; either way no device served by both mechanisms."""
    name = node.metadata.name
    labels = node.metadata.labels or {}
    alloc = (node.status.allocatable if node.status else None) or {}
    itype = labels.get(contract.INSTANCE_TYPE_LABEL)
    allocatable = {k: _quantity(alloc.get(PLUGIN_RESOURCES[k])) for k in PLUGIN_RESOURCES}
    published = slice_devices(slices, name)
    dra = group.devices == contract.DEVICES_DRA
    gpus, efa, neuron = (published[k] if dra else allocatable[k] for k in KINDS)
    want_gpus, want_efa, want_neuron = group.gpus_per_node, group.efa_devices_per_node, group.neuron_devices_per_node
    problems: list[str] = []
    fixes: list[str] = []
    status: contract.CheckStatus = "pass"

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
            f"the node carries the label {contract.LABEL_NODE_GROUP}={group.name} but is not one of its instances; "
            "check the labels of the node group it belongs to",
        )
    kinds: tuple[tuple[DeviceKind, int], ...] = (("gpu", want_gpus), ("efa", want_efa), ("neuron", want_neuron))
    for kind, want in kinds:
        if dra and allocatable[kind]:
            fail(f"{allocatable[kind]} {PLUGIN_RESOURCES[kind]} allocatable on a DRA node",
                 PLUGIN_ON_DRA_FIX.format(resource=PLUGIN_RESOURCES[kind], node=name))
        elif not dra and want > 0 and published[kind]:
            fail(f"the DRA driver {DRIVERS[kind]} publishes {published[kind]} devices of a device plugin node",
                 DRA_ON_PLUGIN_FIX.format(driver=DRIVERS[kind], node=name))
    for have, want, resource, fix in (
        (gpus, want_gpus, "GPUs in ResourceSlices" if dra else contract.GPU_RESOURCE, DRA_FIXES["gpu"] if dra else GPU_FIX),
        (efa, want_efa, "EFA devices in ResourceSlices" if dra else contract.EFA_RESOURCE,
         DRA_FIXES["efa"] if dra else EFA_FIX),
        (neuron, want_neuron, "Neuron devices in ResourceSlices" if dra else contract.NEURON_RESOURCE,
         DRA_FIXES["neuron"] if dra else NEURON_FIX),
    ):
        if want <= 0:
            continue
        if dra and not have:
            fail(f"no {resource} (expected {want})", fix.format(node=name))
            continue
        counted = resource if dra else f"{resource} allocatable"
        if have is None:
            fail(f"no {resource} in allocatable (expected {want})", fix.format(node=name, ds=contract.EFA_DEVICE_PLUGIN_NAME))
        elif have < want:
            fail(f"{have} {counted}, expected {want}", fix.format(node=name, ds=contract.EFA_DEVICE_PLUGIN_NAME))
        elif have > want and status == "pass":
            status = "warn"
            problems.append(f"{have} {counted}, more than the {want} the plan expects")
    return NodeCheck(
        name=name, node_group=group.name, instance_type=itype, ready=_ready(node),
        gpus=gpus, efa=efa, neuron=neuron,
        expected_instance_type=group.instance_type, expected_gpus=want_gpus, expected_efa=want_efa,
        expected_neuron=want_neuron, status=status, problems=tuple(problems), fixes=tuple(fixes), devices=group.devices,
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


def check_nodes(
    plan: ClusterPlan, nodes: list[Any], *, cluster_hint: str | None = None,
    slices: Sequence[Mapping[str, Any]] | None = None,
) -> VerifyResult:
    """Every node group of ``plan`` against the ``V1Node`` objects found and the cluster's ResourceSlices (pure; no
    API calls)."""
    groups = {g.name: g for g in plan.all_node_groups}
    node_checks: list[NodeCheck] = []
    unexpected: list[str] = []
    by_group: dict[str, list[NodeCheck]] = {name: [] for name in groups}
    for node in sorted(nodes, key=lambda n: n.metadata.name):
        gname = (node.metadata.labels or {}).get(contract.LABEL_NODE_GROUP)
        if gname not in groups:
            unexpected.append(f"{node.metadata.name} ({contract.LABEL_NODE_GROUP}={gname})")
            continue
        nc = check_node(node, groups[gname], slices or ())
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
            status: contract.CheckStatus = "warn" if any(n.status == "warn" for n in good) else "pass"
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


def wait_for_nodes(
    plan: ClusterPlan,
    core: Any,
    *,
    timeout: float,
    interval: float,
    clock: Clock | None = None,
    sleep: Sleep | None = None,
    on_poll: Callable[[VerifyResult], None] | None = None,
    custom: Any | None = None,
) -> VerifyResult:
    """Poll the nodes until every node group matches the plan or ``timeout`` seconds pass; with ``custom`` (the
    CustomObjectsApi) the ResourceSlices too."""

    def probe() -> VerifyResult:
        slices = list_resource_slices(custom) if custom is not None else []
        result = check_nodes(plan, list_nodes(core), slices=slices)
        if on_poll is not None:
            on_poll(result)
        return result

    result, _ = poll(probe, lambda r: r.ok, timeout=timeout, interval=interval, clock=clock, sleep=sleep)
    return result


# --------------------------------------------------------------------------------------------
# The NCCL-tests MPIJob
# --------------------------------------------------------------------------------------------


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
        raise UserError(
            f"node group {name!r} " + ("has no NCCL-tests MPIJob" if known else "is not in the spec"),
            f"use --node-group {' or '.join(with_job)} (the node groups with an NCCL-tests MPIJob), "
            "or set ncclTest.nodeGroup in the spec and deploy again"
            if with_job else
            "the spec makes no NCCL-tests MPIJob; drop --run-nccl, or add an NVIDIA GPU node group",
        )
    if not with_job:
        raise UserError(
            "the spec makes no NCCL-tests MPIJob (it needs an NVIDIA GPU node group with desiredCapacity >= 1, "
            "with EFA unless ncclTest.fabric says otherwise; nccl-tests are CUDA programs)",
            "drop --run-nccl, or add such a node group",
        )
    return plan.node_group(with_job[0])


def run_nccl_job(core: Any, custom: Any, group: NodeGroupPlan, options: VerifyOptions) -> JobOutcome:
    """Start (if suspended) and follow ``nccl-tests-<group>`` in ``options.namespace`` for at most
    ``options.job_timeout`` seconds; the outcome carries the launcher log."""
    name, namespace = nccl_job_name(group.name), options.namespace
    obj = get_job(custom, name, namespace)
    if obj is None:
        return JobOutcome(
            name, namespace, "NotFound",
            f"MPIJob {namespace}/{name} not found; deploy the cluster's Kubernetes objects first "
            "(cdk deploy, or sh dist/<cluster>/apply.sh)",
        )
    state, _ = job_state(obj)
    started = state is None and is_suspended(obj)
    if started:
        start_job(custom, name, namespace, queue=queue_of(obj))
    outcome = wait_for_job(custom, name, namespace, timeout=options.job_timeout, interval=options.interval,
                           clock=options.clock, sleep=options.sleep)
    message = outcome.message
    if state is not None:
        message += (
            " (it had finished before this run; a finished MPIJob does not run again: delete it and "
            "kubectl apply -f dist/<cluster>/after-crds/, or redeploy, to run a fresh test)"
        )
    log = None
    if outcome.state in ("Succeeded", "Failed"):
        try:
            log = launcher_log(core, name, namespace)
        except UserError as exc:
            if outcome.state == "Succeeded":
                raise
            message += f" (launcher log unavailable: {exc.message})"
    return replace(outcome, started_by_us=started, message=message, log=log)


def _judged_instance_type(plan: ClusterPlan, group: NodeGroupPlan) -> str | None:
    """Judge the run against the EFA line rate only when the job runs over EFA (not the tcp baseline) with whole-node
    workers: a sub-node worker (``ncclTest.gpusPerWorker``) drives a few of the node's EFA devices, so the node's line
    rate says nothing about it (its transport is still judged)."""
    job = next((j for j in plan.nccl_jobs if j.node_group == group.name), None)
    if job is not None and (job.worker.fabric != "efa" or job.worker.gpus < group.gpus_per_node):
        return None
    return group.instance_type


def run_nccl_check(plan: ClusterPlan, core: Any, custom: Any, group: NodeGroupPlan, options: VerifyOptions) -> NcclCheck:
    """Run the node group's NCCL test and judge its launcher log: parse, judge, model (no output)."""
    outcome = run_nccl_job(core, custom, group, options)
    if outcome.state != "Succeeded":
        guard = guard_failures(core, outcome.name, outcome.namespace) if outcome.state in ("Failed", "Timeout") else []
        return NcclCheck(group.name, outcome, tuple(guard))
    report = report_from_text(
        outcome.log or "", f"{outcome.name}-launcher.log", instance_type=_judged_instance_type(plan, group),
        nodes=group.desired_size, threshold=options.pass_threshold, plot=options.plot,
    )
    return NcclCheck(group.name, outcome, report=report)


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def run_acceptance(
    plan: ClusterPlan, core: Any, custom: Any, options: VerifyOptions, *, console: Any,
    echo: Callable[[str], None] = print, err_console: Any | None = None,
) -> int:
    """``verify --acceptance``: 0 every node passed, 1 a node is slow, failed or ambiguous, 2 bad input or no API access."""

    def progress(text: str) -> None:
        if not options.json_out:
            render.progress_line(text, console)

    try:
        report = acceptance_run.run_acceptance(plan, core, custom, acceptance_run.AcceptanceOptions(
            node_group=options.node_group, dcgm_level=options.dcgm_level, no_efa=options.no_efa,
            quarantine=options.quarantine, namespace=options.namespace, timeout=options.timeout,
            interval=options.interval, threshold=options.pass_threshold, clock=options.clock, sleep=options.sleep,
            progress=progress,
        ))
    except UserError as exc:
        return print_error(exc, json_out=options.json_out, console=err_console or console, echo=echo,
                           context={"cluster": plan.name})
    if options.json_out:
        echo(json.dumps(report.to_json(), indent=2))
    else:
        render.render_acceptance(report, console)
    return 0 if report.ok else 1


def run_verify(
    plan: ClusterPlan,
    core: Any,
    custom: Any | None,
    options: VerifyOptions,
    *,
    console: Any,
    echo: Callable[[str], None] = print,
    err_console: Any | None = None,
) -> int:
    """The whole ``verify`` command; returns the exit code (0 ok, 1 mismatch or failed job, 2 errors)."""
    try:
        options.check(plan)
        if options.acceptance:
            return run_acceptance(plan, core, custom, options, console=console, echo=echo, err_console=err_console)
        group = pick_node_group(plan, options.node_group) if options.run_nccl else None
        if options.json_out:
            nodes = wait_for_nodes(plan, core, timeout=options.timeout, interval=options.interval,
                                   clock=options.clock, sleep=options.sleep, custom=custom)
        else:
            with render.node_progress(plan, console) as on_poll:
                nodes = wait_for_nodes(plan, core, timeout=options.timeout, interval=options.interval,
                                       clock=options.clock, sleep=options.sleep, on_poll=on_poll, custom=custom)
        result = VerifyReport(plan.name, nodes, run_nccl=options.run_nccl, timeout=options.timeout)
        if not options.json_out:
            render.render_verify_nodes(result, console)
        if group is None or not nodes.ok:
            if options.json_out:
                echo(json.dumps(result.to_json(), indent=2))
            return result.exit_code
        if custom is None:
            raise UserError("--run-nccl needs the Kubernetes CustomObjectsApi (MPIJobs)",
                            "run efa-stack verify from the command line, which loads both APIs from the kubeconfig")
        if not options.json_out:
            render.render_nccl_start(nccl_job_name(group.name), options.namespace, group, console)
        result = replace(result, nccl=run_nccl_check(plan, core, custom, group, options))
        if options.json_out:
            echo(json.dumps(result.to_json(), indent=2))
        else:
            render.render_nccl(result.nccl, console, err_console or console)
        return result.exit_code
    except UserError as exc:
        return print_error(exc, json_out=options.json_out, console=err_console or console, echo=echo,
                           context={"cluster": plan.name})
