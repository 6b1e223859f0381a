"""The cdk8s charts for a cluster plan, in apply order.

:func:`build_charts` returns the charts the cluster needs (10 device plugins ... 50 training jobs), each declaring
the earlier charts it needs applied first (cdk8s ``add_dependency``); the ids, the positions and what the rollout
waits for around each chart are the component table's (:mod:`k8s.components`), and :mod:`k8s.rollout` turns both
into the step graph ``cdk deploy``, ``apply.sh`` and the rehearsal follow. docs/design/kubernetes-side.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
from constructs import Construct

from efa_stack import contract
from efa_stack.planning.dra import ClaimTemplatePlan
from efa_stack.planning.node_groups import taints_of
from efa_stack.planning.plan import ClusterPlan
from efa_stack.planning.training import TrainingJobPlan
from k8s.components import (
    CHART_ORDER,
    COMPUTE_DOMAINS,
    EFA_DEVICE_PLUGIN,
    GPU_FEATURE_DISCOVERY,
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
    RESOURCE_CLAIMS,
    TRAINING_JOBS,
    TRAINING_OPERATOR,
    TRAINING_OPERATOR_CRD,
    TRAINING_RUNTIMES,
)
from k8s.compute_domains import ComputeDomain, GpuFeatureDiscovery, GpuFeatureDiscoveryProps, ultraserver_groups
from k8s.dra import ResourceClaimTemplates
from k8s.efa_device_plugin import EfaDevicePlugin, EfaDevicePluginProps
from k8s.karpenter import KarpenterCrds, KarpenterPools
from k8s.kueue import KueueController, KueueCrds, KueueQueues
from k8s.mpi_operator import MpiJobCrd, MpiOperator, MpiOperatorProps
from k8s.nccl_tests import NcclTestsJob, NcclTestsJobProps
from k8s.neuron_device_plugin import NeuronDevicePlugin, NeuronDevicePluginProps
from k8s.nvidia_device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginProps
from k8s.training_jobs import EfaTrainingRuntime, TrainingJob, TrainingJobProps, TrainingRuntimeProps, runtimes_of
from k8s.training_operators import PyTorchJobCrd, TrainingOperator, TrainingOperatorProps

HOST_ACCESS_WORKLOADS: tuple[str, ...] = (
    contract.EFA_DEVICE_PLUGIN_NAME,
    contract.NVIDIA_DEVICE_PLUGIN_NAME,
    contract.NEURON_DEVICE_PLUGIN_NAME,
    contract.GPU_FEATURE_DISCOVERY_NAME,
)
"""The only workloads allowed host access (hostPath, hostNetwork, privileged); each says why in
its ``efa-stack.io/host-access-reason`` annotation (checked by policies.rules K8S2)."""

"""Labels on every top-level object (not on pod templates or selectors)."""


def _chart(app: Construct, chart_id: str) -> cdk8s.Chart:
    return cdk8s.Chart(app, chart_id, labels=dict(contract.COMMON_LABELS), disable_resource_name_hashes=True)


def training_job_id(job: TrainingJobPlan, jobs: Sequence[TrainingJobPlan]) -> str:
    """The construct id of a training job: its name, or ``<namespace>-<name>`` when another namespace has a job
    of the same name (ids of jobs with unique names stay as they were)."""
    shared = sum(1 for j in jobs if j.name == job.name) > 1
    return f"{job.namespace}-{job.name}" if shared else job.name


def build_charts(plan: ClusterPlan, app: Construct) -> list[cdk8s.Chart]:
    """The charts for ``plan`` under ``app``, in apply order (see the module docstring)."""
    charts: dict[str, cdk8s.Chart] = {}
    groups = plan.node_groups
    every = (*groups, *plan.pool_groups)  # device plugins run on the pools' nodes too
    # ...but never on a devices: dra group's nodes, whose devices the DRA drivers publish (k8s/dra.py)
    every = tuple(g for g in every if g.devices == contract.DEVICES_PLUGIN)
    efa_groups = [g for g in every if g.efa_enabled]
    nvidia_groups = [g for g in every if g.instance.accelerator == "nvidia"]
    neuron_groups = [g for g in every if g.instance.accelerator == "neuron"]

    if efa_groups:
        chart = charts[EFA_DEVICE_PLUGIN] = _chart(app, EFA_DEVICE_PLUGIN)
        EfaDevicePlugin(chart, "EfaDevicePlugin", EfaDevicePluginProps(region=plan.region, tolerate=taints_of(efa_groups)))
    if nvidia_groups:
        chart = charts[NVIDIA_DEVICE_PLUGIN] = _chart(app, NVIDIA_DEVICE_PLUGIN)
        NvidiaDevicePlugin(chart, "NvidiaDevicePlugin", NvidiaDevicePluginProps(tolerate=taints_of(nvidia_groups)))
    if neuron_groups:
        chart = charts[NEURON_DEVICE_PLUGIN] = _chart(app, NEURON_DEVICE_PLUGIN)
        NeuronDevicePlugin(chart, "NeuronDevicePlugin", NeuronDevicePluginProps(tolerate=taints_of(neuron_groups)))
    ultra = ultraserver_groups(groups)
    if ultra:
        chart = charts[GPU_FEATURE_DISCOVERY] = _chart(app, GPU_FEATURE_DISCOVERY)
        GpuFeatureDiscovery(chart, "GpuFeatureDiscovery", GpuFeatureDiscoveryProps(
            groups=tuple(ultra), tolerate=taints_of(ultra)))

    crd_chart = charts[MPI_OPERATOR_CRD] = _chart(app, MPI_OPERATOR_CRD)
    MpiJobCrd(crd_chart, "MpiJobCrd")
    operator_chart = charts[MPI_OPERATOR] = _chart(app, MPI_OPERATOR)
    MpiOperator(operator_chart, "MpiOperator", MpiOperatorProps())
    operator_chart.add_dependency(crd_chart)

    if plan.training_operators.pytorch_job_v1:
        v1_crd = charts[TRAINING_OPERATOR_CRD] = _chart(app, TRAINING_OPERATOR_CRD)
        PyTorchJobCrd(v1_crd, "PyTorchJobCrd")
        v1_operator = charts[TRAINING_OPERATOR] = _chart(app, TRAINING_OPERATOR)
        TrainingOperator(v1_operator, "TrainingOperator", TrainingOperatorProps())
        v1_operator.add_dependency(v1_crd)

    _kueue_charts(plan, app, charts)
    _karpenter_charts(plan, app, charts)
    _compute_domain_chart(plan, app, charts)
    templates = claim_templates(plan)
    if templates:
        ResourceClaimTemplates(_chart_of(app, charts, RESOURCE_CLAIMS), "ResourceClaimTemplates", templates)
    job = plan.nccl_job
    if job is not None:
        chart = charts[NCCL_TESTS] = _chart(app, NCCL_TESTS)
        storage = plan.storage
        NcclTestsJob(chart, "NcclTests", NcclTestsJobProps(
            job=job,
            queue=job.queue,
            worker_wait_seconds=job.worker_wait_seconds,
            do_not_disrupt=job.do_not_disrupt,
            storage_claim=storage.claim_name if storage else None,
            storage_mount_path=storage.mount_path if storage else contract.FSX_MOUNT_PATH,
        ))
        for needed in (MPI_OPERATOR, NVIDIA_DEVICE_PLUGIN, EFA_DEVICE_PLUGIN, KUEUE_QUEUES, COMPUTE_DOMAINS,
                       RESOURCE_CLAIMS):
            if needed in charts and not (needed == EFA_DEVICE_PLUGIN and job.worker.fabric != "efa"):
                chart.add_dependency(charts[needed])

    _training_charts(plan, app, charts)
    return [charts[c] for c in sorted(charts, key=CHART_ORDER.__getitem__)]


def _compute_domain_chart(plan: ClusterPlan, app: Construct, charts: dict[str, cdk8s.Chart]) -> None:
    """``compute-domains`` (39): the ComputeDomain of every job on an UltraServer node group, one per job
    (k8s/compute_domains.py). The NVIDIA DRA driver's release brings their CRD, and its controller's availability comes
    before them (k8s/components.py); the job charts follow."""
    domains = [d for d in (*(j.compute_domain for j in plan.nccl_jobs),
                           *(j.worker.compute_domain for j in plan.training_jobs)) if d is not None]
    if not domains:
        return
    chart = charts[COMPUTE_DOMAINS] = _chart(app, COMPUTE_DOMAINS)
    for d in domains:
        ComputeDomain(chart, f"{d.namespace}-{d.name}", d)


def _chart_of(app: Construct, charts: dict[str, cdk8s.Chart], chart_id: str) -> cdk8s.Chart:
    chart = charts[chart_id] = _chart(app, chart_id)
    return chart


def claim_templates(plan: ClusterPlan) -> list[tuple[str, ClaimTemplatePlan]]:
    """(namespace, template) of every ResourceClaimTemplate the plan's workers claim (k8s/dra.py), once each: a
    pod's claim names a template of its own namespace, so a template is rendered in every namespace of its jobs."""
    seen: dict[tuple[str, str], ClaimTemplatePlan] = {}
    workers = [*((j.namespace, j.worker.claims) for j in plan.nccl_jobs),
               *((j.namespace, j.worker.sizing.claims) for j in plan.training_jobs)]
    for namespace, claims in workers:
        for t in claims.templates if claims is not None else ():
            seen.setdefault((namespace, t.name), t)
    return [(ns, t) for (ns, _), t in seen.items()]


def _kueue_charts(plan: ClusterPlan, app: Construct, charts: dict[str, cdk8s.Chart]) -> None:
    """``kueue-crd`` (24), ``kueue-workload-crd`` (25: the Workload CRD alone, about 150 KB), ``kueue`` (34)
    and ``kueue-queues`` (38), when the spec turns Kueue on (k8s/kueue.py)."""
    if plan.kueue is None:
        return
    crds = charts[KUEUE_CRD] = _chart(app, KUEUE_CRD)
    KueueCrds(crds, "KueueCrds", workload=False)
    workload = charts[KUEUE_WORKLOAD_CRD] = _chart(app, KUEUE_WORKLOAD_CRD)
    KueueCrds(workload, "KueueWorkloadCrd", workload=True)
    controller = charts[KUEUE] = _chart(app, KUEUE)
    KueueController(controller, "Kueue", plan.kueue)
    controller.add_dependency(crds, workload)
    queues = charts[KUEUE_QUEUES] = _chart(app, KUEUE_QUEUES)
    KueueQueues(queues, "KueueQueues", plan.kueue)


def _karpenter_charts(plan: ClusterPlan, app: Construct, charts: dict[str, cdk8s.Chart]) -> None:
    """``karpenter-crd`` (26) and ``karpenter-pools`` (36: EC2NodeClass, NodePool, NodeOverlay per pool), when the
    spec lists Karpenter pools (k8s/karpenter.py). The controller is a Helm release at :data:`k8s.components.HELM_ORDER`."""
    karpenter = plan.karpenter
    if karpenter is None:
        return
    crds = charts[KARPENTER_CRD] = _chart(app, KARPENTER_CRD)
    KarpenterCrds(crds, "KarpenterCrds")
    pools = charts[KARPENTER_POOLS] = _chart(app, KARPENTER_POOLS)
    subnets = None
    if plan.existing_vpc is not None:
        zones = {p.group.availability_zone for p in karpenter.pools}
        subnets = {z: plan.existing_vpc.private_subnet_ids(z) for z in zones}
    KarpenterPools(pools, "KarpenterPools", karpenter, karpenter.node_role_name, subnets)


def _training_charts(plan: ClusterPlan, app: Construct, charts: dict[str, cdk8s.Chart]) -> None:
    """``training-runtimes`` (45) and ``training-jobs`` (50), when the spec has training jobs. The training APIs and
    their controllers (Kubeflow Trainer's Helm release, the Training Operator's charts) come before them by the
    rollout's rules (their kinds' CRDs, the controllers that admit them: k8s/rollout.py)."""
    jobs = plan.training_jobs
    if not jobs:
        return
    needed = [c for c in (NVIDIA_DEVICE_PLUGIN, EFA_DEVICE_PLUGIN, KUEUE_QUEUES, COMPUTE_DOMAINS, RESOURCE_CLAIMS)
              if c in charts]
    runtimes = runtimes_of(jobs)
    if runtimes:
        chart = charts[TRAINING_RUNTIMES] = _chart(app, TRAINING_RUNTIMES)
        for name, (worker, image) in runtimes.items():
            first = next(j for j in jobs if j.runtime_name == name)  # the runtime's jobs share its node group
            EfaTrainingRuntime(chart, name, TrainingRuntimeProps(
                name=name, worker=worker, image=image, queue=first.queue, do_not_disrupt=first.do_not_disrupt,
            ))
        # A runtime is not a queued object (Kueue admits the jobs, not their templates): it follows the device
        # plugins, not the queues; nor the ComputeDomains or the claim templates (it only names their claim templates;
        # the jobs follow them).
        for c in needed:
            if c not in (KUEUE_QUEUES, COMPUTE_DOMAINS, RESOURCE_CLAIMS):
                chart.add_dependency(charts[c])
    chart = charts[TRAINING_JOBS] = _chart(app, TRAINING_JOBS)
    for job in jobs:
        TrainingJob(chart, training_job_id(job, plan.training_jobs), TrainingJobProps(
            job=job, queue=job.queue, do_not_disrupt=job.do_not_disrupt,
        ))
    for c in (*needed, TRAINING_RUNTIMES):
        if c in charts:
            chart.add_dependency(charts[c])
