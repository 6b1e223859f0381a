"""What a job carries to be queued through Kueue (:class:`QueueBinding`), apart from the Kueue plan that makes it
(:meth:`efa_stack.planning.scheduling.KueuePlan.binding`), so that the job plans can hold it as a field."""

from __future__ import annotations

from dataclasses import dataclass

from efa_stack import contract


@dataclass(frozen=True)
class QueueBinding:
    """What a job of one node group carries to be queued: the queue label on the job, and on its workers'
    pod template the topology annotation (none for ``topology: none`` or a group without topology labels)."""

    queue_name: str
    worker_annotations: tuple[tuple[str, str], ...] = ()

    @property
    def job_labels(self) -> dict[str, str]:
        return {contract.KUEUE_QUEUE_LABEL: self.queue_name}

    def job_metadata(self, suspended: bool) -> tuple[dict[str, str], dict[str, str]]:
        """(labels, annotations) of a job of this binding. A job created suspended gets no queue label but the
        queue in an annotation: Kueue unsuspends a labelled job as soon as its Workload is admitted and
        suspends it again if a user resumes it before (kubernetes-sigs/kueue@v0.19.2 pkg/controller/
        jobframework/reconciler.go), so a labelled job would start at deploy; a suspended job may be given
        the label later (pkg/controller/jobframework/validation.go ``validateUpdateForQueueName``), which is
        what starting it does. Without the label Kueue leaves the job alone (``manageJobsWithoutQueueName``
        is false in efa-stack's configuration, k8s/kueue.py)."""
        if suspended:
            return {}, {contract.ANNOTATION_QUEUE: self.queue_name}
        return self.job_labels, {}

    def start_command(self, kind: str, name: str, namespace: str) -> str:
        """Start a suspended job of ``kind`` (mpijob, trainjob, pytorchjob) by putting it in the queue."""
        return f"kubectl label {kind} {name} -n {namespace} {contract.KUEUE_QUEUE_LABEL}={self.queue_name}"

    @property
    def pod_annotations(self) -> dict[str, str]:
        return dict(self.worker_annotations)

    def grouped_pod_annotations(self, group: str) -> dict[str, str]:
        """``pod_annotations`` of one of two PodSets Kueue places as one PodSet group ``group``: the same
        topology annotation on both, and ``kueue.x-k8s.io/podset-group-name``. Without a topology annotation there
        is no group: Kueue refuses a group name without ``podset-required-topology`` or ``-preferred-topology``
        (kubernetes-sigs/kueue@v0.19.2 pkg/controller/jobframework/tas_validation.go ``ValidateTASPodSetRequest``,
        "may not be set when neither ... is specified") and ignores it in the Workload (pkg/controller/
        jobframework/tas.go ``Build`` sets ``PodSetGroupName`` only with one of them)."""
        out = self.pod_annotations
        if out:
            out[contract.KUEUE_PODSET_GROUP] = group
        return out
