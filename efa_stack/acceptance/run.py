"""Run acceptance against a cluster (``efa-stack verify --acceptance``): compute an AcceptanceReport.

1. one check pod per node of the node group (:func:`k8s.acceptance.check_pod`), all at once; each log is read
   back into evidence (:mod:`efa_stack.acceptance.checks`, :func:`efa_stack.acceptance.judge.judge_nccl_single`);
   on a node group that reads an EFA-enabled file system the pod also proves Lustre rides EFA (``lustre-efa``);
2. with EFA, 2-node NCCL all_reduce MPIJobs between the nodes that passed step 1: round 1 pairs (0,1),
   (2,3), ... in parallel; round 2 re-tests each member of a pair that did not pass against a known-good
   peer, one job at a time (:func:`efa_stack.acceptance.judge.attribute_pairs` names the slow node);
3. per node ``pass | slow | failed | ambiguous`` with evidence; ``quarantine`` cordons and taints every slow or
   failed node (``efa-stack.io/quarantine=<reason>:NoSchedule``).

Cluster access goes through :mod:`efa_stack.cluster` (API objects, clock and sleep injected). Pods and MPIJobs
acceptance made are deleted at the end, whatever the outcome. Printing is
:func:`efa_stack.tools.render.render_acceptance`'s.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from efa_stack import contract
from efa_stack.acceptance import checks, judge
from efa_stack.acceptance.model import (
    DCGM_LEVELS,
    DEFAULT_DCGM_LEVEL,
    AcceptanceReport,
    Evidence,
    NodeVerdict,
    PairResult,
    QuarantineAction,
)
from efa_stack.cluster import Clock, Sleep, call, launcher_log, list_nodes, poll, wait_for_job
from efa_stack.errors import UserError
from efa_stack.names import acceptance_pair_job_name
from efa_stack.nccl_report.hosts import HostAnalysis
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.planning.plan import ClusterPlan
from efa_stack.planning.ultraserver import nccl_floors
from k8s import acceptance as manifests
from k8s.images import DCGM_IMAGE

Progress = Callable[[str], None]


def _silent(_: str) -> None:
    """No progress lines (``--json``, tests)."""


@dataclass(frozen=True)
class AcceptanceOptions:
    """What acceptance was asked (``verify --acceptance``'s options), with the clock, the sleep and the progress."""

    node_group: str | None = None
    """The node group to accept; None: the first NVIDIA GPU group with EFA (:func:`select_group`)."""
    dcgm_level: int = DEFAULT_DCGM_LEVEL
    no_efa: bool = False
    """GPU-only checks: no EFA checks, no pair tests."""
    quarantine: bool = False
    """Cordon and taint every slow or failed node."""
    namespace: str = contract.NCCL_JOB_NAMESPACE
    timeout: float = 3600.0
    """Seconds the whole run may take."""
    interval: float = 10.0
    """Seconds between polls."""
    threshold: float = contract.NCCL_PASS_THRESHOLD
    """The pair tests' pass mark (fraction of the line rate)."""
    clock: Clock | None = None
    sleep: Sleep | None = None
    progress: Progress = _silent


def select_group(plan: ClusterPlan, name: str | None, *, no_efa: bool, dcgm_level: int) -> NodeGroupPlan:
    """The node group to accept, or a UserError naming the field, the value and the fix."""
    if dcgm_level not in DCGM_LEVELS:
        raise UserError(f"--dcgm-level {dcgm_level} is out of range",
                        "use 1 (quick), 2 (medium, the default), 3 (long) or 4 (extended): dcgmi diag -r LEVEL")
    every = [g for g in plan.all_node_groups if g.instance.accelerator == "nvidia" and g.gpus_per_node > 0]
    # the check pods request the device plugins' nvidia.com/gpu and vpc.amazonaws.com/efa, which a devices: dra
    # group's nodes never advertise (docs/design/dra.md, "Verify")
    gpu_groups = [g for g in every if g.devices == contract.DEVICES_PLUGIN]
    if name is None:
        efa_groups = [g for g in gpu_groups if g.efa_devices_per_node > 0]
        pick = (efa_groups or (gpu_groups if no_efa else []))[:1]
        if not pick:
            raise UserError(
                "the spec has no NVIDIA GPU node group with EFA on the device plugins to accept"
                + (f" (GPU node groups without EFA: {', '.join(g.name for g in gpu_groups)})" if gpu_groups else "")
                + (f" (on DRA: {', '.join(g.name for g in every if g not in gpu_groups)})" if len(every) > len(gpu_groups)
                   else ""),
                "pass --node-group NAME --no-efa for GPU-only checks, or enable EFA on a GPU node group; acceptance does "
                "not run on devices: dra node groups (efa-stack verify checks their ResourceSlices)",
            )
        return pick[0]
    group = next((g for g in plan.all_node_groups if g.name == name), None)
    if group is None:
        raise UserError(f"node group {name!r} is not in the spec",
                        f"use --node-group {' or '.join(g.name for g in gpu_groups) or '(none: no GPU node group)'}")
    if group in every and group not in gpu_groups:
        raise UserError(f"node group {name!r} uses devices: dra, and acceptance's check pods request the device "
                        "plugins' nvidia.com/gpu and vpc.amazonaws.com/efa, which its nodes never advertise",
                        "run efa-stack verify (it checks the node group's ResourceSlices) and its NCCL test "
                        "(efa-stack verify --run-nccl); pick a device plugin node group for --acceptance")
    if group not in gpu_groups:
        raise UserError(f"node group {name!r} ({group.instance_type}) has no NVIDIA GPUs; acceptance runs "
                        "GPU, DCGM and NCCL checks", "pick a GPU node group with --node-group")
    if group.efa_devices_per_node == 0 and not no_efa:
        raise UserError(
            f"node group {name!r} ({group.instance_type}) has no EFA devices, so the EFA and pair checks cannot run",
            f"set efaEnabled: true on node group {name} (and deploy), or pass --no-efa to run the GPU-only checks "
            "(GPU count, DCGM, single-node NCCL)",
        )
    return group


def lustre_probe(plan: ClusterPlan, group: NodeGroupPlan, namespace: str, *, efa: bool) -> manifests.LustreProbe | None:
    """The LNet check of ``group``'s nodes: with an EFA-enabled file system whose EFA client the group runs (and the EFA
    checks on), None otherwise; a UserError when the check pods could not mount the claim."""
    st = plan.storage
    if not efa or st is None or not st.efa or group.lustre_efa is None:
        return None
    if namespace != st.claim_namespace:
        raise UserError(
            f"--namespace {namespace}: the Lustre-over-EFA check writes to the FSx claim {st.claim_name}, which is in "
            f"namespace {st.claim_namespace}, and a pod mounts only claims of its own namespace",
            f"run acceptance in {st.claim_namespace} (drop --namespace), or pass --no-efa to leave out the EFA checks",
        )
    return manifests.LustreProbe(st.claim_name, st.mount_path)


def _delete_quietly(fn: Callable[..., Any], *args: Any) -> None:
    with contextlib.suppress(Exception):  # cleanup of our own objects: already gone is fine
        fn(*args)


class Runner:
    """One acceptance run of one node group: its check pods, pair jobs and quarantine, against one deadline."""

    def __init__(self, plan: ClusterPlan, core: Any, custom: Any, group: NodeGroupPlan, options: AcceptanceOptions):
        self.plan, self.core, self.custom, self.group = plan, core, custom, group
        self.dcgm_level, self.namespace = options.dcgm_level, options.namespace
        self.efa = group.efa_devices_per_node > 0 and not options.no_efa
        self.interval, self.threshold = options.interval, options.threshold
        self.clock, self.sleep = options.clock or time.monotonic, options.sleep or time.sleep
        self.deadline = self.clock() + options.timeout
        self.timeout = options.timeout
        self.progress = options.progress
        self.job = next((j for j in plan.nccl_jobs if j.node_group == group.name), None)
        self.image = self.job.image if self.job else _default_image()
        self.lustre = lustre_probe(plan, group, self.namespace, efa=self.efa)

    # --- nodes -------------------------------------------------------------------------------------
    def nodes(self) -> list[Any]:
        selector = f"{contract.LABEL_NODE_GROUP}={self.group.name}"
        items = list_nodes(self.core, selector)
        if not items:
            raise UserError(
                f"no nodes found for node group {self.group.name!r} (label selector {selector})",
                "deploy the cluster and wait for the nodes (efa-stack verify --spec FILE), then run acceptance",
            )
        return sorted(items, key=lambda n: n.metadata.name)

    def check_nodes(self, names: list[str]) -> dict[str, NodeVerdict]:
        pods = {}
        for n in names:
            body = manifests.check_pod(self.group, n, namespace=self.namespace, image=self.image, job=self.job,
                                       dcgm_level=self.dcgm_level, efa=self.efa, dcgm_image=DCGM_IMAGE,
                                       lustre=self.lustre)
            name = body["metadata"]["name"]
            _delete_quietly(self.core.delete_namespaced_pod, name, self.namespace)
            call(f"create pod {self.namespace}/{name}", self.core.create_namespaced_pod, self.namespace, body)
            pods[n] = name
            self.progress(f"check pod {name} created on {n}")
        try:
            phases = self._wait_pods(pods)
            out = {}
            for n, pod in pods.items():
                log = ""
                if phases[n] in ("Succeeded", "Failed", "Running"):
                    log = call(f"read the log of pod {self.namespace}/{pod}", self.core.read_namespaced_pod_log,
                               pod, self.namespace, container=manifests.CHECK_CONTAINER)
                out[n] = self._verdict(n, log, phases[n])
                self.progress(f"{n}: {out[n].status}")
            return out
        finally:
            for pod in pods.values():
                _delete_quietly(self.core.delete_namespaced_pod, pod, self.namespace)

    def _wait_pods(self, pods: dict[str, str]) -> dict[str, str]:
        phases: dict[str, str] = {}

        def probe() -> dict[str, str]:
            for n, pod in pods.items():
                if phases.get(n) in ("Succeeded", "Failed"):
                    continue
                obj = call(f"read pod {self.namespace}/{pod}", self.core.read_namespaced_pod, pod, self.namespace)
                phases[n] = (obj.status.phase if obj.status else None) or "Pending"
            self.progress(f"check pods: {self.done_count(phases)}/{len(pods)} finished")
            return phases

        result, _ = poll(probe, lambda p: self.done_count(p) == len(pods), timeout=self.remaining(),
                         interval=self.interval, clock=self.clock, sleep=self.sleep)
        return result

    @staticmethod
    def done_count(phases: dict[str, str]) -> int:
        return sum(p in ("Succeeded", "Failed") for p in phases.values())

    def remaining(self) -> float:
        """Seconds left of the whole run's timeout."""
        return max(0.0, self.deadline - self.clock())

    def _verdict(self, node: str, log: str, phase: str) -> NodeVerdict:
        sections = checks.parse_sections(log)
        g = self.group
        ev = [
            checks.judge_gpu_count(sections.get("gpu-count"), g.gpus_per_node),
            checks.judge_dcgm(sections.get("dcgm"), self.dcgm_level),
            checks.judge_software(sections, g.instance_type),
        ]
        if g.ultraserver is not None:
            ev.append(checks.judge_nvreg(sections.get("nvreg"), g.ultraserver.module_options, g.ultraserver.driver_branch,
                                         checks.node_software(sections)["nvidiaDriver"]))
        if self.efa:
            ev += [checks.judge_efa_devices(sections.get("efa-devices"), g.efa_devices_per_node),
                   checks.judge_pingpong(sections.get("efa-pingpong"))]
        if self.lustre is not None and g.lustre_efa is not None:
            ev.append(checks.judge_lustre_efa(sections, g.lustre_efa.lnet_interfaces, self.lustre.write_mib,
                                              self.lustre.unit))
        ev.append(judge.judge_nccl_single(sections.get("nccl-single"), g.instance.gpu.name if g.instance.gpu else None,
                                          g.gpus_per_node, f"{node}:nccl-single"))
        if phase not in ("Succeeded", "Failed") and not sections:
            ev = [Evidence("gpu-count", "failed", f"check pod {phase} after {self.timeout:g} s",
                           "the check pod to run to completion",
                           "the pod did not start: kubectl describe pod (not enough free GPUs/EFA devices? image pull?)"
                           "; raise --timeout")]
        return NodeVerdict(node, tuple(ev))

    # --- pairs ------------------------------------------------------------------------------------
    def _start_pair(self, name: str, nodes: tuple[str, str]) -> None:
        if self.job is None:  # run_acceptance runs pairs only for a node group with an NCCL-tests job
            raise UserError(f"no pair tests: the spec makes no NCCL-tests job for {self.group.name}",
                            "set ncclTest.nodeGroup in the spec, or pass --no-efa")
        body = manifests.pair_job(self.job, self.group, name, nodes, self.namespace)
        args = (contract.MPIJOB_GROUP, contract.MPIJOB_VERSION, self.namespace, contract.MPIJOB_PLURAL)
        _delete_quietly(self.custom.delete_namespaced_custom_object, *args, name)
        call(f"create MPIJob {self.namespace}/{name}", self.custom.create_namespaced_custom_object, *args, body)
        self.progress(f"pair {nodes[0]} + {nodes[1]}: MPIJob {name} created")

    def _finish_pair(self, rnd: int, name: str, nodes: tuple[str, str]) -> PairResult:
        try:
            outcome = wait_for_job(self.custom, name, self.namespace, timeout=self.remaining(),
                                   interval=self.interval, clock=self.clock, sleep=self.sleep)
            log = None
            if outcome.state in ("Succeeded", "Failed"):
                try:
                    log = launcher_log(self.core, name, self.namespace)
                except UserError as exc:
                    outcome = replace(outcome, message=outcome.message + f" (launcher log unavailable: {exc.message})")
            floor = nccl_floors().net_busbw_gbps if self.group.ultraserver is not None else None
            status, busbw, detail = judge.pair_status(log, outcome.state, outcome.message, self.group.instance_type,
                                                      f"{name}-launcher.log", self.threshold, floor)
        finally:
            _delete_quietly(self.custom.delete_namespaced_custom_object, contract.MPIJOB_GROUP,
                            contract.MPIJOB_VERSION, self.namespace, contract.MPIJOB_PLURAL, name)
        self.progress(f"pair {nodes[0]} + {nodes[1]}: {status}" + (f", {busbw:g} GB/s busbw" if busbw is not None else ""))
        return PairResult(rnd, nodes, name, status, busbw, detail)

    def pairs(self, names: list[str]) -> tuple[list[PairResult], dict[str, Evidence], HostAnalysis]:
        first, leftover = judge.round_one(names)
        jobs = [(acceptance_pair_job_name(self.group.name, 1, i), p) for i, p in enumerate(first)]
        for name, p in jobs:
            self._start_pair(name, p)
        round1 = [self._finish_pair(1, name, p) for name, p in jobs]
        peer = judge.good_peer(round1)
        round2: list[PairResult] = []
        if peer is not None:
            for i, n in enumerate(judge.suspects(round1, leftover)):
                name = acceptance_pair_job_name(self.group.name, 2, i)
                self._start_pair(name, (peer, n))
                round2.append(self._finish_pair(2, name, (peer, n)))
        return round1 + round2, judge.attribute_pairs(round1, round2, leftover), judge.pair_analysis(round1, round2)

    # --- quarantine -------------------------------------------------------------------------------
    def quarantine(self, verdict: NodeVerdict) -> QuarantineAction:
        node = call(f"read node {verdict.node}", self.core.read_node, verdict.node)
        kept = [
            {k: v for k, v in (("key", t.key), ("value", t.value), ("effect", t.effect)) if v is not None}
            for t in ((node.spec.taints if node.spec else None) or []) if t.key != contract.QUARANTINE_TAINT_KEY
        ]
        taint = {"key": contract.QUARANTINE_TAINT_KEY, "value": verdict.reason(), "effect": "NoSchedule"}
        # Node.spec.taints has no patch merge key: a patch replaces the list, so the node's own taints are kept.
        patch = {"spec": {"unschedulable": True, "taints": [*kept, taint]}}
        call(f"cordon and taint node {verdict.node}", self.core.patch_node, verdict.node, patch)
        self.progress(f"quarantined {verdict.node}: cordoned (spec.unschedulable=true) and tainted "
                      f"{taint['key']}={taint['value']}:NoSchedule")
        return QuarantineAction(verdict.node, verdict.reason(), patch)


def _default_image() -> str:
    from efa_stack.spec.models import DEFAULT_NCCL_TESTS_IMAGE

    return DEFAULT_NCCL_TESTS_IMAGE


KUEUE_REPLACEMENT_NOTE = (
    "Kueue replaces each quarantined node in the topology assignment of the workloads it holds once their pods "
    "there have ended (the quarantine taint is one their pods do not tolerate); running pods are not evicted "
    "(NoSchedule). To move a running job now, delete its pods on the node or stop the job."
)
KUEUE_REPLACEMENT_REQUIRED = " The replacement node is in the job's own {level} domain (topology: required)."
KUEUE_REPLACEMENT_PREFERRED = (
    " With topology: preferred Kueue may take a free node of another {level} domain for the replacement, even "
    "while one waits in the job's own; set scheduling.kueue.topology: required to keep replacements in the domain."
)
"""The second sentence of the note, by topology mode: kubernetes-sigs/kueue@v0.19.2 (8eab687) pkg/cache/scheduler/
tas_flavor_snapshot.go ``requiredReplacementDomain`` confines the search for a replacement to the failed node's
domain at the requested level only when the PodSet's topology request is required (``if !isRequired(...) { return
"" }``, an empty domain: anywhere in the flavor)."""
"""Kueue v0.19.2 (kubernetes-sigs/kueue@c3785e5) pkg/controller/tas/node_controller.go: with
``TASReplaceNodeOnNodeTaints`` (beta, on since v0.17) a NoSchedule or NoExecute taint that a workload's pods on the
node do not tolerate makes the node unhealthy for that workload, and with ``TASReplaceNodeOnPodTermination`` (beta,
on since v0.14) only once those pods are no longer running (``checkPodsOnNode``); ``TASFailedNodeReplacement`` (beta,
on since v0.14) then finds a replacement node (pkg/features/kube_features.go), in the same domain only for a required
topology (:data:`KUEUE_REPLACEMENT_PREFERRED`). efa-stack's Kueue
configuration leaves every gate at its default (k8s/kueue.py). The quarantine taint
(:meth:`Runner.quarantine`) has a key no job's pods tolerate: they tolerate their node group's own taints only
(k8s/scheduling.py ``tolerations``), as do the ResourceFlavors' (k8s/kueue.py)."""


def run_acceptance(
    plan: ClusterPlan, core: Any, custom: Any, options: AcceptanceOptions = AcceptanceOptions()
) -> AcceptanceReport:
    """Accept the nodes of one node group (see the module docstring); raises UserError on bad input or no access."""
    group = select_group(plan, options.node_group, no_efa=options.no_efa, dcgm_level=options.dcgm_level)
    r = Runner(plan, core, custom, group, options)
    efa, dcgm_level = r.efa, options.dcgm_level
    names = [n.metadata.name for n in r.nodes()]
    options.progress(f"accepting {len(names)} node(s) of {group.name} ({group.instance_type}), "
                     f"DCGM level {dcgm_level}")
    verdicts = r.check_nodes(names)
    notes: list[str] = []
    pairs: list[PairResult] = []
    healthy = [n for n in names if verdicts[n].status != "failed"]
    if not efa:
        notes.append("no EFA checks and no pair tests (--no-efa)")
    elif r.job is None:
        notes.append(f"no pair tests: the spec makes no NCCL-tests job for {group.name}")
    elif len(healthy) < 2:
        notes.append(f"no pair tests: {len(healthy)} node(s) passed the single-node checks, a pair needs 2")
    else:
        pairs, pair_ev, analysis = r.pairs(healthy)
        if analysis.status not in ("all pass", "no data"):
            notes.append(f"pair tests ({analysis.status}): {analysis.reason}")
        verdicts = {n: NodeVerdict(n, v.evidence + ((pair_ev[n],) if n in pair_ev else ())) for n, v in verdicts.items()}
    ordered = tuple(verdicts[n] for n in names)
    # An ambiguous node is not named (no evidence singles it out), so it is reported, never quarantined.
    actions = tuple(r.quarantine(v) for v in ordered if v.status in ("slow", "failed")) if options.quarantine else ()
    if actions and plan.kueue is not None and plan.kueue.binding(group.name).worker_annotations:
        level = plan.kueue.level
        second = KUEUE_REPLACEMENT_REQUIRED if plan.kueue.mode == "required" else KUEUE_REPLACEMENT_PREFERRED
        notes.append(KUEUE_REPLACEMENT_NOTE + second.format(level=level))
    return AcceptanceReport(plan.name, group.name, group.instance_type, dcgm_level, efa, ordered, tuple(pairs),
                            actions, tuple(notes))

