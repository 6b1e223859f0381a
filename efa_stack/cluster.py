"""What ``verify`` and ``verify --acceptance`` ask a running cluster, in one place.

Kubernetes API errors become :class:`efa_stack.errors.UserError` (:func:`efa_stack.cluster.api_error`); nodes are listed by
the node-group label; MPIJobs are read, started (un-suspended) and followed; the launcher's log and the
EFA guard's failure lines are read back. Every wait goes through :func:`efa_stack.cluster.poll` (clock and sleep injected,
bounded by a timeout), so tests never sleep.

The Kubernetes API objects (``CoreV1Api``, ``CustomObjectsApi``) are passed in: this module never loads a
kubeconfig; the command line does (:func:`efa_stack.tools.cli._kube_apis`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from efa_stack import contract
from efa_stack.errors import UserError

T = TypeVar("T")
Clock = Callable[[], float]
Sleep = Callable[[float], None]
JobState = Literal["Succeeded", "Failed", "Timeout", "NotFound"]


# --------------------------------------------------------------------------------------------
# Errors and calls
# --------------------------------------------------------------------------------------------


def api_error(exc: Exception, what: str) -> UserError:
    """A failed Kubernetes API call as a :class:`~efa_stack.errors.UserError` naming ``what`` and the fix."""
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or exc.__class__.__name__
    if status in (401, 403):
        return UserError(
            f"the Kubernetes API refused to {what} ({status} {reason})",
            "use a kubeconfig/context with access to the cluster (aws eks update-kubeconfig --name CLUSTER "
            "--region REGION) and an EKS access entry for your IAM principal",
        )
    if status is None:
        return UserError(
            f"cannot reach the Kubernetes API to {what} ({reason}: {exc})",
            "check the kubeconfig context (--context) and network access to the cluster endpoint",
        )
    return UserError(f"the Kubernetes API failed to {what} ({status} {reason})")


def call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``; an API error becomes :func:`efa_stack.cluster.api_error`'s UserError."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # ApiException, urllib3 errors
        raise api_error(exc, what) from exc


# --------------------------------------------------------------------------------------------
# Waiting
# --------------------------------------------------------------------------------------------


def poll(
    probe: Callable[[], T],
    done: Callable[[T], bool],
    *,
    timeout: float,
    interval: float,
    clock: Clock | None = None,
    sleep: Sleep | None = None,
) -> tuple[T, bool]:
    """Call ``probe`` until ``done`` holds for its result or ``timeout`` seconds pass.

    Probes at least once; sleeps ``interval`` seconds between probes, never past the deadline. Returns the
    last result and whether ``done`` held for it. ``clock``/``sleep`` default to :func:`time.monotonic` and
    :func:`time.sleep`.
    """
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    deadline = clock() + max(0.0, timeout)
    while True:
        result = probe()
        finished = done(result)
        remaining = deadline - clock()
        if finished or remaining <= 0:
            return result, finished
        sleep(min(interval, remaining))


# --------------------------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------------------------


def list_nodes(core: Any, selector: str = contract.LABEL_NODE_GROUP) -> list[Any]:
    """The ``V1Node`` objects matching ``selector`` (default: every node with an efa-stack node-group label)."""
    return list(call("list nodes", core.list_node, label_selector=selector).items or [])


def list_resource_slices(custom: Any) -> list[dict[str, Any]]:
    """Every ``resource.k8s.io/v1`` ResourceSlice of the cluster, as documents (none on a cluster that does not serve
    the API: a 404 is an empty list)."""
    try:
        found = custom.list_cluster_custom_object(contract.RESOURCE_GROUP, "v1", "resourceslices")
    except Exception as exc:  # ApiException, urllib3 errors
        if getattr(exc, "status", None) == 404:
            return []
        raise api_error(exc, "list ResourceSlices") from exc
    return list(found.get("items") or [])


# --------------------------------------------------------------------------------------------
# MPIJobs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobOutcome:
    """How an MPIJob ended, as far as it was followed."""

    name: str
    namespace: str
    state: JobState
    message: str
    started_by_us: bool = False
    log: str | None = field(default=None, repr=False)


def job_state(obj: dict[str, Any]) -> tuple[Literal["Succeeded", "Failed"] | None, str]:
    """``("Succeeded"|"Failed", reason: message)`` from an MPIJob's status conditions, or ``(None, "")``."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        kind = c.get("type")
        if kind in ("Succeeded", "Failed") and str(c.get("status")) == "True":
            text = ": ".join(x for x in (c.get("reason"), c.get("message")) if x)
            return ("Succeeded" if kind == "Succeeded" else "Failed"), text
    return None, ""


def get_job(custom: Any, name: str, namespace: str) -> dict[str, Any] | None:
    """The MPIJob object, or None when it does not exist."""
    try:
        obj = custom.get_namespaced_custom_object(
            contract.MPIJOB_GROUP, contract.MPIJOB_VERSION, namespace, contract.MPIJOB_PLURAL, name
        )
    except Exception as exc:
        if getattr(exc, "status", None) == 404:
            return None
        raise api_error(exc, f"read MPIJob {namespace}/{name}") from exc
    if not isinstance(obj, dict):
        raise UserError(f"the Kubernetes API answered MPIJob {namespace}/{name} with a {type(obj).__name__}, "
                        "not an object", f"kubectl -n {namespace} get mpijob {name} -o yaml")
    return obj


def is_suspended(obj: dict[str, Any]) -> bool:
    """Whether the MPIJob's ``spec.runPolicy.suspend`` is set."""
    return bool(((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend", False))


def queue_of(obj: dict[str, Any]) -> str | None:
    """The Kueue LocalQueue a suspended job joins when started (annotation ``efa-stack.io/kueue-queue``), if any."""
    queue = ((obj.get("metadata") or {}).get("annotations") or {}).get(contract.ANNOTATION_QUEUE)
    return queue if isinstance(queue, str) and queue else None


def start_job(custom: Any, name: str, namespace: str = contract.NCCL_JOB_NAMESPACE, *, queue: str | None = None) -> None:
    """Start the suspended MPIJob (a JSON merge patch): un-suspend it, or with a ``queue`` put it in that Kueue
    LocalQueue (the queue label; Kueue un-suspends it once admitted: efa_stack.planning.scheduling.QueueBinding)."""
    patch = ({"metadata": {"labels": {contract.KUEUE_QUEUE_LABEL: queue}}} if queue
             else {"spec": {"runPolicy": {"suspend": False}}})
    call(
        f"start MPIJob {namespace}/{name}", custom.patch_namespaced_custom_object,
        contract.MPIJOB_GROUP, contract.MPIJOB_VERSION, namespace, contract.MPIJOB_PLURAL, name, patch,
        _content_type="application/merge-patch+json",
    )


def wait_for_job(
    custom: Any,
    name: str,
    namespace: str = contract.NCCL_JOB_NAMESPACE,
    *,
    timeout: float,
    interval: float,
    clock: Clock | None = None,
    sleep: Sleep | None = None,
    on_poll: Callable[[dict[str, Any]], None] | None = None,
) -> JobOutcome:
    """Follow the MPIJob until its ``Succeeded``/``Failed`` condition, its disappearance or ``timeout``."""

    def probe() -> dict[str, Any] | None:
        obj = get_job(custom, name, namespace)
        if obj is not None and on_poll is not None:
            on_poll(obj)
        return obj

    obj, _ = poll(probe, lambda o: o is None or job_state(o)[0] is not None,
                  timeout=timeout, interval=interval, clock=clock, sleep=sleep)
    if obj is None:
        return JobOutcome(name, namespace, "NotFound", f"MPIJob {namespace}/{name} disappeared")
    state, text = job_state(obj)
    if state is not None:
        return JobOutcome(name, namespace, state, text)
    return JobOutcome(name, namespace, "Timeout", f"MPIJob {namespace}/{name} did not finish within {timeout:g} s")


def launcher_log(core: Any, job: str, namespace: str = contract.NCCL_JOB_NAMESPACE) -> str:
    """The log of the job's launcher pod (the newest one, if the launcher was restarted)."""
    selector = f"{contract.JOB_NAME_LABEL}={job},{contract.JOB_ROLE_LABEL}=launcher"
    pods = list(call(f"list the launcher pod of {namespace}/{job}", core.list_namespaced_pod, namespace,
                     label_selector=selector).items or [])
    if not pods:
        raise UserError(
            f"no launcher pod found for MPIJob {namespace}/{job} (selector {selector})",
            f"kubectl -n {namespace} get pods -l {contract.JOB_NAME_LABEL}={job}",
        )

    def created(p: Any) -> Any:
        ts = p.metadata.creation_timestamp
        return (ts is not None, ts.timestamp() if ts is not None else 0.0)

    pod = max(pods, key=created)
    log = call(f"read the log of pod {namespace}/{pod.metadata.name}", core.read_namespaced_pod_log,
               pod.metadata.name, namespace)
    return str(log or "")


def guard_failures(core: Any, job: str, namespace: str = contract.NCCL_JOB_NAMESPACE) -> list[str]:
    """The lines the ``efa-guard`` init container of the job's workers failed with, one per stopped worker.

    The message is read first and the container's log only when the message lacks the line (see
    docs/design/commands.md, "The EFA guard's line"). Best effort: an API error here returns what was
    found, the job's own outcome is reported anyway.
    """
    container, prefix = contract.EFA_GUARD_CONTAINER, contract.EFA_GUARD_FAIL_PREFIX
    selector = f"{contract.JOB_NAME_LABEL}={job},{contract.JOB_ROLE_LABEL}=worker"
    try:
        pods = list(core.list_namespaced_pod(namespace, label_selector=selector).items or [])
    except Exception:  # noqa: BLE001 - ApiException, urllib3 errors: nothing to add to the job's outcome
        return []
    lines: list[str] = []
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        for st in (pod.status.init_container_statuses or []) if pod.status else []:
            if st.name != container:
                continue
            states = [x for x in (st.state, st.last_state) if x is not None and x.terminated is not None]
            done = next((x.terminated for x in states if x.terminated.exit_code), None)
            if done is None:
                continue
            text = done.message or ""
            if prefix not in text:
                try:
                    text = core.read_namespaced_pod_log(pod.metadata.name, namespace, container=container)
                except Exception:  # noqa: BLE001 - the log may be gone; the fallback line still names the pod
                    text = ""
            found = [ln.strip() for ln in (text or "").splitlines() if ln.strip().startswith(prefix)]
            lines.append(found[-1] if found else (
                f"{prefix} pod={namespace}/{pod.metadata.name}: the {container} init container "
                f"exited {done.exit_code} ({done.reason or 'no reason'}) without its line. Fix: kubectl -n {namespace} "
                f"logs {pod.metadata.name} -c {container}"
            ))
    return lines
