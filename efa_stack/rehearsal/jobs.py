"""The jobs of a rehearsal: started by their own ``efa-stack.io/start`` command, followed until they land or until
Kueue (or the scheduler) has said why not, and finished the way their pods would finish.

A job *lands* when every pod it makes runs: the MPI launcher and workers, the PyTorchJob's master and workers, the
pods of the JobSet a TrainJob becomes. A queued job (the Kueue queue label) must first be admitted: its Workload's
``Admitted`` condition is "True" (kubernetes-sigs/kueue@v0.19.2 apis/kueue/v1beta2 ``WorkloadAdmitted``).

What is reported of a job that does not land is what the cluster says: every distinct message Kueue gave its
Workload while it waited, from the ``Pending`` events it records at each failed scheduling cycle
(pkg/scheduler/scheduler.go ``requeueAndUpdate``) and the ``QuotaReserved`` condition, in the order given; else the
scheduler's ``PodScheduled`` message of a pending pod. All of them, because Kueue's last message alone can mislead:
after a cycle in which a PodSet's flavor fit the quota but the job did not fit, the next cycle starts that PodSet at
the flavor after it (pkg/workload/workload.go ``NextFlavorToTryForPodSetResource``) and the requeue is immediate
(pkg/cache/queue/cluster_queue.go, ``PendingFlavors``), so the condition ends on a flavor the PodSet could never use
(an MPI launcher on a worker group's flavor: "Flavor "p5" supports only TopologyAwareScheduling") while the first
cycle's event names the topology that cannot hold the workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from efa_stack import contract
from efa_stack.planning.plan import ClusterPlan
from efa_stack.planning.scheduling import layer_label, network_layers
from efa_stack.rehearsal.client import Api, ApiError, poll
from efa_stack.rehearsal.kwok import COMPLETE_ANNOTATION

POLL_INTERVAL = 0.25
POD_SECONDS = 0.25
"""Seconds added to a job's timeout per pod it makes: the operator creates each, the scheduler binds each and kwok runs
each, one API round trip apiece (a 1,000-worker job gets about four minutes more on a loaded 2-core machine)."""
KARPENTER_REFUSAL = "Failed to schedule pod, "
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""The label JobSet v0.12.0 puts on every pod of a JobSet (api/jobset/v1alpha2 ``JobSetNameKey``); a TrainJob's
JobSet has the TrainJob's name (kubeflow/trainer@v2.3.0 pkg/runtime/framework/plugins/jobset)."""
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
"""The Training Operator v1.9.4's label of a PyTorchJob pod's replica type, lower case (pkg/apis/kubeflow.org/v1
``ReplicaTypeLabel``)."""


@dataclass(frozen=True)
class JobKind:
    """What the rehearsal reads of one kind of job: its pods on the node group (``workers``: selector and count), the
    pod that runs elsewhere (the MPI launcher), the condition that says it finished, and which pods end it."""

    kind: str
    worker_selector: Callable[[dict[str, Any]], str]
    worker_count: Callable[[dict[str, Any]], int]
    done: str
    leader_selector: Callable[[dict[str, Any]], str] | None = None
    leader_ends_it: bool = False
    """The job finishes when its leader exits (mpirun in the launcher); otherwise every pod exits."""


def _name(job: dict[str, Any]) -> str:
    return str(job["metadata"]["name"])


def _mpi_workers(job: dict[str, Any]) -> int:
    return int(job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"])


def _pytorch_pods(job: dict[str, Any]) -> int:
    return sum(int(r.get("replicas", 1)) for r in job["spec"]["pytorchReplicaSpecs"].values())


KINDS: dict[str, JobKind] = {k.kind: k for k in (
    JobKind(contract.MPIJOB_KIND, lambda j: f"{contract.JOB_NAME_LABEL}={_name(j)},{contract.JOB_ROLE_LABEL}=worker",
            _mpi_workers, "Succeeded",
            leader_selector=lambda j: f"{contract.JOB_NAME_LABEL}={_name(j)},{contract.JOB_ROLE_LABEL}=launcher",
            leader_ends_it=True),
    # the master trains too (rank 0) and runs on the node group beside the workers
    JobKind(contract.PYTORCHJOB_KIND, lambda j: f"{contract.JOB_NAME_LABEL}={_name(j)}", _pytorch_pods, "Succeeded"),
    JobKind(contract.TRAINJOB_KIND, lambda j: f"{JOBSET_NAME_LABEL}={_name(j)}",
            lambda j: int(j["spec"]["trainer"]["numNodes"]), "Complete"),
)}
"""The jobs efa-stack renders with a start command (MPI operator v0.8.2 labels ``training.kubeflow.org/job-name`` and
``job-role``; Training Operator v1.9.4 the same job name label; JobSet its own)."""


def jobs_of(objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rendered jobs users start with their ``efa-stack.io/start`` command, in the rollout's order."""
    return [o for o in objects if o["kind"] in KINDS
            and contract.ANNOTATION_START in (o["metadata"].get("annotations") or {})]


def conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def pod_running(pod: dict[str, Any]) -> bool:
    """Running and Ready (kwok's stage for a bound pod)."""
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and conditions(pod).get("Ready", {}).get("status") == "True"


def workload_of(api: Api, job: dict[str, Any]) -> dict[str, Any] | None:
    """The Kueue Workload that owns ``job``'s admission (None before Kueue made it)."""
    live = api.get(job)
    if live.status != 200:
        return None
    uid = live.body["metadata"]["uid"]
    owned = [w for w in api.list(contract.KUEUE_API_VERSION, "Workload", job["metadata"]["namespace"])
             if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences", []))]
    return owned[0] if owned else None


def assigned_flavors(workload: dict[str, Any] | None) -> dict[str, tuple[str, ...]]:
    """PodSet -> the flavors Kueue assigned it (sorted, one per flavor)."""
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    return {a["name"]: tuple(sorted(set((a.get("flavors") or {}).values())))
            for a in admission.get("podSetAssignments") or []}


@dataclass(frozen=True)
class JobOutcome:
    """What became of one started job.

    queued: Kueue admits it (the start command put it in a queue). admitted: Kueue admitted it, or nothing queues it.
    reason: why it did not land ("" when it did); reasons: each distinct message behind it, in the order given;
    workload_message: the message of the Workload's ``QuotaReserved`` condition when last read (what ``kubectl
    describe workload`` shows). nodes: the nodes of its pods on the node group, in pod-name order;
    domains: the distinct lowest-network-layer domains of those nodes (none for types without network labels).
    running: every pod ran. seconds_to_admission, seconds_to_running: from the start command (None when never).
    """

    name: str
    kind: str
    namespace: str
    node_group: str
    start: str
    queued: bool
    admitted: bool
    reason: str
    flavors: dict[str, tuple[str, ...]]
    nodes: tuple[str, ...]
    domains: tuple[str, ...]
    launcher_node: str | None
    running: bool
    seconds_to_admission: float | None
    seconds_to_running: float | None
    reasons: tuple[str, ...] = ()
    workload_message: str = ""
    completed: bool = False

    @property
    def landed(self) -> bool:
        return self.admitted and self.running

    @property
    def ok(self) -> bool:
        """It landed, and finished once its pods exited."""
        return self.landed and self.completed

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "namespace": self.namespace, "node_group": self.node_group,
            "start": self.start, "queued": self.queued, "admitted": self.admitted, "reason": self.reason,
            "flavors": {k: list(v) for k, v in self.flavors.items()}, "nodes": list(self.nodes),
            "domains": list(self.domains), "launcher_node": self.launcher_node, "running": self.running,
            "reasons": list(self.reasons), "workload_message": self.workload_message or None,
            "completed": self.completed, "seconds_to_admission": _round(self.seconds_to_admission),
            "seconds_to_running": _round(self.seconds_to_running),
        }


def allowed(job: dict[str, Any], timeout: float) -> float:
    """``timeout`` for a job of one pod per worker and a leader, plus :data:`POD_SECONDS` for each of its pods."""
    return timeout + POD_SECONDS * (KINDS[job["kind"]].worker_count(job) + 1)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


@dataclass
class _Watch:
    """The state of one followed job between polls."""

    reasons: list[str] = field(default_factory=list)
    workload_message: str = ""
    no_launch: bool = False
    """Karpenter said it launches no node for a pending pod."""
    admitted_at: float | None = None
    running_at: float | None = None
    waiting_since: float | None = None
    workload: dict[str, Any] | None = None
    workers: list[dict[str, Any]] = field(default_factory=list)
    leaders: list[dict[str, Any]] = field(default_factory=list)

    def saw(self, reason: str, now: float) -> None:
        if reason and reason not in self.reasons:
            self.reasons.append(reason)
        if self.waiting_since is None:
            self.waiting_since = now


def _pending_reason(pods: Sequence[dict[str, Any]]) -> str:
    for pod in pods:
        scheduled = conditions(pod).get("PodScheduled") or {}
        if scheduled.get("status") == "False" and scheduled.get("message"):
            return f"pod {pod['metadata']['name']}: {scheduled['message']}"
    return ""


@dataclass
class JobFollower:
    """Starts and follows the jobs of one rehearsal (``api``, the plan it rolled out, ``start``: the function that runs
    a job's start command and returns it)."""

    api: Api
    plan: ClusterPlan
    start_command: Callable[[dict[str, Any]], str]
    clock: Callable[[], float] = time.monotonic
    _node_labels: dict[str, dict[str, str]] = field(default_factory=dict)

    def pods(self, job: dict[str, Any], selector: str) -> list[dict[str, Any]]:
        pods = self.api.list("v1", "Pod", job["metadata"]["namespace"], label_selector=selector)
        return sorted(({"apiVersion": "v1", "kind": "Pod", **p} for p in pods), key=lambda p: p["metadata"]["name"])

    def workers(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        return self.pods(job, KINDS[job["kind"]].worker_selector(job))

    def leaders(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        selector = KINDS[job["kind"]].leader_selector
        return self.pods(job, selector(job)) if selector else []

    def node_labels(self, name: str) -> dict[str, str]:
        if name not in self._node_labels:
            got = self.api.get({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
            if got.status != 200:
                return {}
            self._node_labels[name] = dict(got.body["metadata"].get("labels") or {})
        return self._node_labels[name]

    def domain(self, node: str) -> str | None:
        """The node's lowest network-layer domain (``topology.k8s.aws/network-node-layer-N``), None without one."""
        labels = self.node_labels(node)
        layers = network_layers(labels.get(contract.INSTANCE_TYPE_LABEL, ""))
        return labels.get(layer_label(layers)) if layers else None

    def kueue_events(self, workload: dict[str, Any] | None) -> list[str]:
        """The messages of the ``Pending`` events Kueue recorded for ``workload``, oldest first."""
        if workload is None:
            return []
        meta = workload["metadata"]
        events = self.api.list("v1", "Event", meta["namespace"], field_selector=f"involvedObject.uid={meta['uid']}")
        events.sort(key=lambda e: e.get("eventTime") or e.get("firstTimestamp") or "")
        return [str(e.get("message", "")) for e in events if e.get("reason") == "Pending"]

    def _elastic(self, job: dict[str, Any]) -> bool:
        """Its node group is a Karpenter pool: pending pods may wait for a node being launched."""
        group = job["metadata"]["labels"].get(contract.LABEL_NODE_GROUP, "")
        return self.plan.karpenter is not None and self.plan.karpenter.pool(group) is not None

    def _poll(self, job: dict[str, Any], watch: _Watch, started: float, queued: bool) -> bool:
        """One look at ``job``; True once every pod runs."""
        now = self.clock()
        admitted = not queued
        if queued:
            watch.workload = workload_of(self.api, job)
            seen = conditions(watch.workload)
            admitted = seen.get("Admitted", {}).get("status") == "True"
            reserved = seen.get("QuotaReserved") or {}
            if not admitted and reserved.get("status") == "False":
                for message in self.kueue_events(watch.workload):
                    watch.saw(message, now)
                watch.workload_message = str(reserved.get("message", ""))
                watch.saw(watch.workload_message, now)
        if queued and admitted and watch.admitted_at is None:
            watch.admitted_at, watch.waiting_since = now - started, None
        if not admitted:
            return False
        watch.workers, watch.leaders = self.workers(job), self.leaders(job)
        pods = [*watch.workers, *watch.leaders]
        kind = KINDS[job["kind"]]
        leaders = 1 if kind.leader_selector is not None else 0
        if (len(watch.workers) == kind.worker_count(job) and len(watch.leaders) == leaders
                and all(map(pod_running, pods))):
            watch.running_at = now - started
            return True
        pending = _pending_reason(pods)
        if pending:
            watch.saw(pending, now)
        if self._elastic(job):
            for message in self.karpenter_refusals(pods):
                watch.saw(message, now)
                watch.no_launch = True
        return False

    def karpenter_refusals(self, pods: Sequence[dict[str, Any]]) -> list[str]:
        """Karpenter's events on pending ``pods`` that say it launches no node for them (kubernetes-sigs/
        karpenter@v1.14.1 pkg/controllers/provisioning/scheduling/events.go ``PodFailedToScheduleEvent``)."""
        out = []
        for pod in pods:
            if pod["spec"].get("nodeName"):
                continue
            meta = pod["metadata"]
            events = self.api.list("v1", "Event", meta["namespace"], field_selector=f"involvedObject.uid={meta['uid']}")
            out += [f"pod {meta['name']}: {e['message']}" for e in events
                    if str(e.get("message", "")).startswith(KARPENTER_REFUSAL)]
        return out

    def land(self, job: dict[str, Any], *, timeout: float, settle: float) -> JobOutcome:
        """Start ``job`` and follow it until every pod runs, until it has waited ``settle`` seconds with a reason (a
        queued job Kueue does not admit; pods no node takes, and on a Karpenter pool, which launches nodes for pending
        pods, Karpenter's word that it launches none), or ``timeout``."""
        command = self.start_command(job)
        started = self.clock()
        timeout = allowed(job, timeout)
        queued = contract.KUEUE_QUEUE_LABEL in command
        watch = _Watch()
        patient = self._elastic(job)
        while not self._poll(job, watch, started, queued):
            now = self.clock()
            waited = now - watch.waiting_since if watch.waiting_since is not None else 0.0
            launching = patient and (watch.admitted_at is not None or not queued) and not watch.no_launch
            if now - started > timeout or (waited > settle and not launching):
                break
            time.sleep(POLL_INTERVAL)
        return self.outcome(job, command, watch, queued)

    def outcome(self, job: dict[str, Any], command: str, watch: _Watch, queued: bool) -> JobOutcome:
        nodes = tuple(p["spec"].get("nodeName") or "" for p in watch.workers)
        domains = tuple(dict.fromkeys(d for n in nodes if n and (d := self.domain(n))))
        leader_node = watch.leaders[0]["spec"].get("nodeName") if watch.leaders else None
        running = watch.running_at is not None
        reason = "" if running else ("; ".join(watch.reasons) or "not running within the rehearsal's timeout")
        return JobOutcome(
            name=_name(job), kind=job["kind"], namespace=job["metadata"]["namespace"],
            node_group=job["metadata"]["labels"].get(contract.LABEL_NODE_GROUP, ""), start=command, queued=queued,
            admitted=watch.admitted_at is not None or not queued, reason=reason, flavors=assigned_flavors(watch.workload),
            nodes=nodes if running else tuple(n for n in nodes if n), domains=domains, launcher_node=leader_node,
            running=running, seconds_to_admission=watch.admitted_at, seconds_to_running=watch.running_at,
            reasons=() if running else tuple(watch.reasons), workload_message=watch.workload_message,
        )

    def finish(self, outcome: JobOutcome, job: dict[str, Any], timeout: float) -> JobOutcome:
        """``outcome`` of a job that landed, once :meth:`JobFollower.complete` ended it (with the reason when it did not finish)."""
        if self.complete(job, timeout):
            return replace(outcome, completed=True)
        done = KINDS[job["kind"]].done
        return replace(outcome, reason=f"every pod ran, but the job did not report {done} once they exited")

    def complete(self, job: dict[str, Any], timeout: float) -> bool:
        """End the job as its pods would end (the launcher's mpirun, or every pod's torchrun, exits 0: kwok's stage
        for :data:`~efa_stack.rehearsal.kwok.COMPLETE_ANNOTATION`); True once the job reports it finished."""
        kind = KINDS[job["kind"]]
        pods = self.leaders(job) if kind.leader_ends_it else self.workers(job)
        for pod in pods:
            got = self.api.merge_patch(pod, {"metadata": {"annotations": {COMPLETE_ANNOTATION: "true"}}})
            if not got.ok:
                raise ApiError(f"pod {pod['metadata']['name']}: {got.message()}")

        def finished() -> bool | None:
            live = self.api.get(job)
            return True if conditions(live.body).get(kind.done, {}).get("status") == "True" else None

        try:
            return poll(f"{job['kind']} {_name(job)} {kind.done}", finished, allowed(job, timeout), POLL_INTERVAL)
        except TimeoutError:
            return False

    def remove(self, job: dict[str, Any], timeout: float) -> None:
        """Delete ``job`` and wait until it and its pods are gone (a job that did not land, before the next one)."""
        self.api.delete(job)

        def gone() -> bool | None:
            if self.api.get(job).status != 404:
                return None
            return True if not self.workers(job) and not self.leaders(job) else None

        poll(f"{job['kind']} {_name(job)} deleted", gone, allowed(job, timeout), POLL_INTERVAL)
