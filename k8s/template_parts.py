"""What the cluster stack applies on the cluster, as the template byte budget counts it
(:func:`efa_stack.planning.template_budget.stack_layout`): each chart's objects as the stack applies them, the waits
and the Helm releases of the rollout."""

from __future__ import annotations

from efa_stack.planning.plan import ClusterPlan
from efa_stack.planning.template_budget import RenderedChart, RenderedKubernetes
from k8s.components import (
    EFA_DEVICE_PLUGIN,
    KARPENTER_CRD,
    KARPENTER_POOLS,
    KUEUE,
    KUEUE_CRD,
    KUEUE_QUEUES,
    KUEUE_WORKLOAD_CRD,
    MPI_OPERATOR,
    MPI_OPERATOR_CRD,
    NCCL_TESTS,
    NEURON_DEVICE_PLUGIN,
    NVIDIA_DEVICE_PLUGIN,
    TRAINING_JOBS,
    TRAINING_OPERATOR,
    TRAINING_OPERATOR_CRD,
    TRAINING_RUNTIMES,
)
from k8s.images import with_images
from k8s.rollout import ApplyChart, InstallRelease, Rollout, WaitAvailable, WaitEstablished, WaitValue

SPEC_FIELDS: dict[str, str] = {
    EFA_DEVICE_PLUGIN: "managedNodeGroups",
    NVIDIA_DEVICE_PLUGIN: "managedNodeGroups",
    NEURON_DEVICE_PLUGIN: "managedNodeGroups",
    MPI_OPERATOR_CRD: "ncclTest",
    MPI_OPERATOR: "ncclTest",
    NCCL_TESTS: "ncclTest",
    TRAINING_OPERATOR_CRD: "trainingJobs",
    TRAINING_OPERATOR: "trainingJobs",
    TRAINING_RUNTIMES: "trainingJobs",
    TRAINING_JOBS: "trainingJobs",
    KUEUE_CRD: "scheduling.kueue",
    KUEUE_WORKLOAD_CRD: "scheduling.kueue",
    KUEUE: "scheduling.kueue",
    KUEUE_QUEUES: "scheduling.kueue",
    KARPENTER_CRD: "karpenterNodePools",
    KARPENTER_POOLS: "karpenterNodePools",
}
"""The spec field that brings each chart (what a refusal names)."""

PLACEHOLDER_ACCOUNT = "000000000000"
"""An account id of the length of every one, for counting a cached image's bytes."""


def rendered(plan: ClusterPlan, rollout: Rollout) -> RenderedKubernetes:
    """The charts, waits and releases of ``rollout`` as the cluster stack applies them (the images of a pull through
    cache rewritten as stacks/kubernetes.py does). A chart may move into a nested stack when its objects outlive it
    and it follows no other step (no edge of the rollout can then come back into the nested stack)."""
    cache = plan.image_cache if plan.image_cache is not None and plan.image_cache.enabled else None
    charts = []
    for step in rollout.of_type(ApplyChart):
        objects = list(rollout.objects[step.chart])
        tokens = 0
        if cache is not None:
            def cached(image: str) -> str:
                nonlocal tokens
                through = cache.cached(image, PLACEHOLDER_ACCOUNT)
                tokens += through != image
                return through

            objects = with_images(objects, cached)
        charts.append(RenderedChart(
            id=step.chart, objects=objects, movable=step.retain and not step.after,
            field=SPEC_FIELDS.get(step.chart, "metadata.name"), edges=len(step.after), tokens=tokens,
        ))
    waits = len(rollout.of_type(WaitEstablished)) + len(rollout.of_type(WaitAvailable)) + len(rollout.of_type(WaitValue))
    releases = [dict(s.release.values) for s in rollout.of_type(InstallRelease) if s.release is not None]
    return RenderedKubernetes(charts=tuple(charts), waits=waits, releases=tuple(releases))
