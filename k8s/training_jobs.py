"""Training jobs: Kubeflow Trainer v2 TrainJobs on efa-stack ClusterTrainingRuntimes, and Training Operator v1
PyTorchJobs, every number from :class:`efa_stack.planning.training.TrainingJobPlan`.

Typed dataclasses mirroring the upstream types, validated in the tests against the CRDs in ``k8s/crds/``.
A TrainJob never sets ``trainer.resourcesPerNode`` (it would drop the EFA requests on older Trainers):
docs/design/training.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cdk8s
from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract
from efa_stack.planning.node_groups import Taint
from efa_stack.planning.scheduling import PYTORCHJOB_PODSET_GROUP, QueueBinding
from efa_stack.planning.training import (
    SCRIPT_ENV,
    SHM_VOLUME,
    TRAINER_NODE_JOB,
    TrainingJobPlan,
    VolumePlan,
    WorkerPlan,
)
from k8s.compute_domains import channel_claim, clique_affinity, worker_claims
from k8s.dra import container_claims, pod_claims, pod_node_selector
from k8s.efa_guard import guard_init_container
from k8s.mpijob import pod_template_json
from k8s.nccl_tests import InfinibandSettings, nccl_fabric_env
from k8s.scheduling import count, mebibytes, tolerations

# kubeflow/trainer@v2.3.0 pkg/constants/constants.go: the "node" container and replicated job of the trainer,
# and the label that marks the replicated job the TrainJob's trainer settings apply to.
TRAINER_CONTAINER = TRAINER_NODE_JOB
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
# kubeflow/trainer@v1.9.4 pkg/apis/kubeflow.org/v1/pytorch_types.go
PYTORCH_CONTAINER = "pytorch"
SCRIPT_PATH = "/tmp/efa-stack-train.py"
SCRIPT_RUNNER = f'printf "%s" "${SCRIPT_ENV}" > {SCRIPT_PATH} && exec torchrun {SCRIPT_PATH} "$@"'
"""Writes the inline script to a file and runs it under torchrun (which reads its node counts from PET_*)."""

START_TRAINJOB = "kubectl patch trainjob {name} -n {namespace} --type merge -p '{{\"spec\":{{\"suspend\":false}}}}'"
START_PYTORCHJOB = (
    "kubectl patch pytorchjob {name} -n {namespace} --type merge -p '{{\"spec\":{{\"runPolicy\":{{\"suspend\":false}}}}}}'"
)
LOGS_TRAINJOB = "kubectl logs -n {namespace} -f -l jobset.sigs.k8s.io/jobset-name={name} --max-log-requests 64"
LOGS_PYTORCHJOB = "kubectl logs -n {namespace} -f {name}-master-0"


def start_command(job: TrainingJobPlan, queue: QueueBinding | None = None) -> str:
    """The command that starts the suspended job: resume it, or with Kueue put it in its queue."""
    if queue is not None and job.suspend:
        return queue.start_command(job.kind, job.name, job.namespace)
    fmt = START_TRAINJOB if job.kind == "trainjob" else START_PYTORCHJOB
    return fmt.format(name=job.name, namespace=job.namespace)


def logs_command(job: TrainingJobPlan) -> str:
    fmt = LOGS_TRAINJOB if job.kind == "trainjob" else LOGS_PYTORCHJOB
    return fmt.format(name=job.name, namespace=job.namespace)


def infiniband_settings(worker: WorkerPlan) -> InfinibandSettings:
    """The NCCL-tests job's InfiniBand defaults, overridden by the job's ``ibHca``/``ibGidIndex``/``socketIfname``."""
    d = InfinibandSettings()
    return InfinibandSettings(
        hca=worker.ib_hca or d.hca,
        gid_index=d.gid_index if worker.ib_gid_index is None else worker.ib_gid_index,
        socket_ifname=worker.socket_ifname or d.socket_ifname,
        devices_per_worker=d.devices_per_worker,
    )


def worker_init_and_env(worker: WorkerPlan, image: str) -> tuple[list[k8s_l1.Container], list[tuple[str, str]]]:
    """THE place a worker pod's init containers and fabric environment are assembled (both job kinds).

    Env: ``NCCL_DEBUG=INFO`` (the log shows whether EFA or a socket carried the traffic) and the fabric's
    NCCL/libfabric settings, shared with the NCCL-tests job (:func:`k8s.nccl_tests.nccl_fabric_env`). No
    aws-ofi-nccl tuner path: where it lives depends on the training image. Init containers: the EFA guard
    (:mod:`k8s.efa_guard`) in the training image with that environment, when ``worker.efa_guard``, so a
    worker that would train over sockets fails before torchrun starts.
    """
    env = [("NCCL_DEBUG", "INFO")] + nccl_fabric_env(
        worker.sizing.fabric, gpudirect_rdma=worker.sizing.gpudirect_rdma, tuner_plugin=None, infiniband=infiniband_settings(worker),
        efa_guard=worker.efa_guard,
    )
    if not worker.efa_guard:
        return [], env
    guard = guard_init_container(
        image=image, expected_efa=worker.sizing.efa_devices, expected_gpus=worker.sizing.gpus, fabric=worker.sizing.fabric, env=env,
        claims=container_claims(worker.sizing.claims, "efa"),
    )
    return [guard], env


def worker_resources(worker: WorkerPlan) -> dict[str, k8s_l1.Quantity]:
    """Requests = limits (extended resources must match; with whole CPUs and memory the pod is Guaranteed). On a
    ``devices: dra`` node group the GPUs and EFA devices come in the worker's claims instead (k8s/dra.py)."""
    dra = worker.sizing.claims is not None
    res: dict[str, k8s_l1.Quantity] = {
        **({} if dra else {contract.GPU_RESOURCE: count(worker.sizing.gpus)}),
        "cpu": count(worker.sizing.cpus),
        "memory": mebibytes(worker.sizing.memory.memory_mib),
    }
    if worker.sizing.efa_devices and not dra:
        res[contract.EFA_RESOURCE] = count(worker.sizing.efa_devices)
    if worker.sizing.memory.hugepages_mib:
        res[contract.HUGEPAGES_2MI_RESOURCE] = mebibytes(worker.sizing.memory.hugepages_mib)
    if worker.sizing.fabric == "infiniband":
        assert worker.rdma_resource is not None
        res[worker.rdma_resource] = count(infiniband_settings(worker).devices_per_worker)
    return res


def _volume(v: VolumePlan) -> k8s_l1.Volume:
    if v.claim_name is not None:
        return k8s_l1.Volume(
            name=v.name, persistent_volume_claim=k8s_l1.PersistentVolumeClaimVolumeSource(claim_name=v.claim_name)
        )
    return k8s_l1.Volume(name=v.name, empty_dir=k8s_l1.EmptyDirVolumeSource(
        medium=v.medium or None, size_limit=mebibytes(v.empty_dir_mib) if v.empty_dir_mib else None,
    ))


def job_env(job: TrainingJobPlan) -> list[tuple[str, str]]:
    """The job's own environment: the spec's ``env`` and, for an inline script, the script."""
    env = list(job.env)
    if job.script is not None:
        env.append((SCRIPT_ENV, job.script))
    return env


def job_command(job: TrainingJobPlan) -> tuple[list[str], list[str]]:
    """(command, args) of the training container: the spec's command, or bash writing the script and exec'ing torchrun."""
    if job.script is not None:
        return ["/bin/bash", "-c", SCRIPT_RUNNER, "train"], list(job.args)
    return list(job.command), list(job.args)


def worker_pod_template(
    worker: WorkerPlan,
    *,
    container_name: str,
    image: str,
    taints: tuple[Taint, ...],
    command: list[str] | None = None,
    args: list[str] | None = None,
    extra_env: list[tuple[str, str]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> k8s_l1.PodTemplateSpec:
    """The worker pod: on the node group, tolerating its taints, every device of the node, /dev/shm, volumes; on an
    UltraServer node group also its job's ComputeDomain channel claim, and the job's workers kept in one NVLink domain
    when they fit one (labelled with the job's name for that: k8s/compute_domains.py)."""
    domain = worker.compute_domain
    if domain is not None:
        labels = {**(labels or {}), contract.LABEL_TRAINING_JOB: domain.name}
    together = clique_affinity(domain, {contract.LABEL_TRAINING_JOB: domain.name}) if domain is not None else None
    init, env = worker_init_and_env(worker, image)
    env = env + list(extra_env or [])
    res = worker_resources(worker)
    mounts = [k8s_l1.VolumeMount(name=SHM_VOLUME, mount_path="/dev/shm")]
    mounts += [k8s_l1.VolumeMount(name=v.name, mount_path=v.mount_path) for v in worker.volumes]
    volumes = [k8s_l1.Volume(
        name=SHM_VOLUME, empty_dir=k8s_l1.EmptyDirVolumeSource(medium="Memory", size_limit=mebibytes(worker.sizing.memory.shm_mib)),
    )] + [_volume(v) for v in worker.volumes]
    security = (
        k8s_l1.SecurityContext(capabilities=k8s_l1.Capabilities(add=["IPC_LOCK"]))
        if worker.sizing.fabric == "infiniband" else None
    )
    return k8s_l1.PodTemplateSpec(
        metadata=k8s_l1.ObjectMeta(labels=labels or None, annotations=annotations or None)
        if labels or annotations else None,
        spec=k8s_l1.PodSpec(
            restart_policy="Never",
            node_selector={contract.LABEL_NODE_GROUP: worker.sizing.node_group, **pod_node_selector(worker.sizing.claims)},
            tolerations=tolerations(taints) or None,
            affinity=k8s_l1.Affinity(pod_affinity=together) if together is not None else None,
            resource_claims=[*pod_claims(worker.sizing.claims), *worker_claims(domain)] or None,
            init_containers=init or None,
            containers=[k8s_l1.Container(
                name=container_name,
                image=image,
                image_pull_policy="IfNotPresent",
                command=command or None,
                args=args or None,
                env=[k8s_l1.EnvVar(name=k, value=v) for k, v in env] or None,
                resources=k8s_l1.ResourceRequirements(
                    limits=res, requests=res,
                    claims=[*container_claims(worker.sizing.claims), *channel_claim(domain)] or None,
                ),
                security_context=security,
                volume_mounts=mounts,
            )],
            volumes=volumes,
        ),
    )


# --- typed objects (kubeflow/trainer@v2.3.0 pkg/apis/trainer/v1alpha1) ------------------------------------
JOB_BACKOFF_LIMIT = 0
"""``backoffLimit`` of the runtime's ``node`` Job: a failed rank fails its Job at once, and the JobSet with it
(kubernetes-sigs/jobset: with no ``failurePolicy`` a failed child Job fails the JobSet), instead of the Job
re-creating that one pod up to the batch/v1 default of 6 times while the other ranks wait in a broken
rendezvous. Restarts of a distributed job belong to torchrun (``--max-restarts``), which restarts every rank
together. The field is the JobSet's ``replicatedJobs[].template.spec`` (a batch/v1 JobSpec), which the
Trainer v2.3.0 ClusterTrainingRuntime CRD carries whole (kubeflow/trainer@v2.3.0
charts/kubeflow-trainer/templates/crd/trainer.kubeflow.org_clustertrainingruntimes.yaml, ``backoffLimit``:
"Defaults to 6"); docs/design/training.md."""

@dataclass(frozen=True)
class ClusterTrainingRuntimeSpec:
    """``TrainingRuntimeSpec``: ``mlPolicy.torch`` and a JobSet template with one replicated job ``node``."""

    pod: k8s_l1.PodTemplateSpec

    def to_json(self) -> dict[str, Any]:
        return {
            "mlPolicy": {"torch": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": TRAINER_NODE_JOB,
                "template": {
                    "metadata": {"labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER}},
                    "spec": {"backoffLimit": JOB_BACKOFF_LIMIT, "template": pod_template_json(self.pod)},
                },
            }]}},
        }


@dataclass(frozen=True)
class TrainerSpec:
    """``Trainer`` of a TrainJob. ``resourcesPerNode`` is deliberately absent (see the module docstring)."""

    image: str
    num_nodes: int
    num_proc_per_node: int
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.num_nodes < 1 or self.num_proc_per_node < 1:
            raise ValueError(f"numNodes and numProcPerNode must be >= 1 (got {self.num_nodes}, {self.num_proc_per_node})")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"image": self.image}
        if self.command:
            out["command"] = list(self.command)
        if self.args:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = [{"name": k, "value": v} for k, v in self.env]
        out["numNodes"] = self.num_nodes
        out["numProcPerNode"] = self.num_proc_per_node
        return out


@dataclass(frozen=True)
class TrainJobSpec:
    runtime_name: str
    trainer: TrainerSpec
    suspend: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "runtimeRef": {
                "name": self.runtime_name,
                "apiGroup": contract.TRAINER_GROUP,
                "kind": contract.CLUSTER_TRAINING_RUNTIME_KIND,
            },
            "trainer": self.trainer.to_json(),
            "suspend": self.suspend,
        }


# --- typed objects (kubeflow/trainer@v1.9.4 pkg/apis/kubeflow.org/v1) -------------------------------------
PYTORCHJOB_RESTART_POLICY = "Never"
"""Replica ``restartPolicy``. kubeflow/trainer@v1.9.4 pkg/controller.v1/pytorch/pytorchjob_controller.go
``UpdateJobStatus``: a failed replica marks the job ``Failed`` only when its restart policy is ``Never``; with
the upstream default ``OnFailure`` the pod restarts in place, so a failing EFA guard init container restarts
forever and the job never fails. torchrun restarts the ranks together where that is wanted."""
PYTORCHJOB_BACKOFF_LIMIT = 0
"""``runPolicy.backoffLimit``: no retries of a failed job (with ``Never`` nothing is retried in place either)."""


@dataclass(frozen=True)
class PyTorchReplicaSpec:
    replicas: int
    template: k8s_l1.PodTemplateSpec
    restart_policy: str = PYTORCHJOB_RESTART_POLICY

    def to_json(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "restartPolicy": self.restart_policy,
                "template": pod_template_json(self.template)}


@dataclass(frozen=True)
class PyTorchJobSpec:
    master: PyTorchReplicaSpec
    worker: PyTorchReplicaSpec | None
    nproc_per_node: int
    suspend: bool = False
    backoff_limit: int = PYTORCHJOB_BACKOFF_LIMIT

    def __post_init__(self) -> None:
        if self.master.replicas != 1:
            raise ValueError(f"a PyTorchJob has exactly one Master (got {self.master.replicas})")

    def to_json(self) -> dict[str, Any]:
        replicas = {"Master": self.master.to_json()}
        if self.worker is not None:
            replicas["Worker"] = self.worker.to_json()
        return {
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": self.backoff_limit, "suspend": self.suspend},
            "nprocPerNode": str(self.nproc_per_node),
            "pytorchReplicaSpecs": replicas,
        }


def _api_object(scope: Construct, id: str, *, api_version: str, kind: str, name: str, namespace: str | None,
                 spec: dict[str, Any], labels: dict[str, str], annotations: dict[str, str] | None = None) -> cdk8s.ApiObject:
    obj = cdk8s.ApiObject(scope, id, api_version=api_version, kind=kind, metadata=cdk8s.ApiObjectMetadata(
        name=name, namespace=namespace, labels=labels or None, annotations=annotations or None,
    ))
    obj.add_json_patch(cdk8s.JsonPatch.add("/spec", spec))
    return obj


# --- constructs ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingRuntimeProps:
    """name: the runtime's name; worker: what its pods need; image: the default image (TrainJobs set their own);
    taints: what the pods tolerate (default: their node group's taints, ``worker.sizing.taints``)."""

    name: str
    worker: WorkerPlan
    image: str
    taints: tuple[Taint, ...] | None = None
    queue: QueueBinding | None = None
    """Kueue's binding of the runtime's node group: its topology annotation goes on the ``node`` pod template,
    from which Kueue's TrainJob integration reads the PodSet (None: no annotation)."""
    do_not_disrupt: bool = False
    """The workers run on a Karpenter pool: their pod template carries ``karpenter.sh/do-not-disrupt: "true"``, so
    Karpenter never drains a node under a running worker voluntarily (docs/design/karpenter.md)."""


class EfaTrainingRuntime(Construct):
    """A ClusterTrainingRuntime whose ``node`` pods use every device of their node (see the module docstring)."""

    def __init__(self, scope: Construct, id: str, props: TrainingRuntimeProps) -> None:
        super().__init__(scope, id)
        w = props.worker
        self.spec = ClusterTrainingRuntimeSpec(pod=worker_pod_template(
            w, container_name=TRAINER_CONTAINER, image=props.image,
            taints=w.sizing.taints if props.taints is None else props.taints,
            labels={contract.LABEL_NODE_GROUP: w.sizing.node_group},
            annotations=pod_annotations(props.queue, props.do_not_disrupt),
        ))
        self.api_object = _api_object(
            self, "Resource", api_version=contract.TRAINER_API_VERSION, kind=contract.CLUSTER_TRAINING_RUNTIME_KIND,
            name=props.name, namespace=None, spec=self.spec.to_json(),
            labels={"trainer.kubeflow.org/framework": "torch", contract.LABEL_NODE_GROUP: w.sizing.node_group},
        )


@dataclass(frozen=True)
class TrainingJobProps:
    """job: the derived plan; taints: what the pods tolerate (default: the node group's, ``job.worker.sizing.taints``);
    labels: extra labels on the job and its pods."""

    job: TrainingJobPlan
    taints: tuple[Taint, ...] | None = None
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    queue: QueueBinding | None = None
    """Queue the job through Kueue: the queue label on the job (and, on a PyTorchJob, the topology annotation
    on its pod templates, Master and Worker in one PodSet group; a TrainJob's comes with its runtime); None: not
    queued."""
    do_not_disrupt: bool = False
    """The workers run on a Karpenter pool: their pod template carries ``karpenter.sh/do-not-disrupt: "true"``, so
    Karpenter never drains a node under a running worker voluntarily (docs/design/karpenter.md)."""


class TrainingJob(Construct):
    """A TrainJob (on its ClusterTrainingRuntime, rendered in the ``training-runtimes`` chart) or a PyTorchJob."""

    def __init__(self, scope: Construct, id: str, props: TrainingJobProps) -> None:
        super().__init__(scope, id)
        job = props.job
        queue_labels, queue_annotations = props.queue.job_metadata(job.suspend) if props.queue else ({}, {})
        labels = {contract.LABEL_TRAINING_JOB: job.name, contract.LABEL_NODE_GROUP: job.node_group, **props.labels,
                  **queue_labels}
        annotations = {contract.ANNOTATION_START: start_command(job, props.queue),
                       contract.ANNOTATION_LOGS: logs_command(job), **queue_annotations}
        command, args = job_command(job)
        if job.kind == "trainjob":
            self.spec: TrainJobSpec | PyTorchJobSpec = TrainJobSpec(
                runtime_name=job.runtime_name,
                suspend=job.suspend,
                trainer=TrainerSpec(
                    image=job.image, num_nodes=job.nnodes, num_proc_per_node=job.nproc_per_node,
                    command=tuple(command), args=tuple(args), env=tuple(job_env(job)),
                ),
            )
            api_version, kind = contract.TRAINER_API_VERSION, contract.TRAINJOB_KIND
        else:
            pod = worker_pod_template(
                job.worker, container_name=PYTORCH_CONTAINER, image=job.image,
                taints=job.worker.sizing.taints if props.taints is None else props.taints,
                command=command, args=args, extra_env=job_env(job), labels={contract.LABEL_TRAINING_JOB: job.name},
                annotations=pod_annotations(
                    props.queue, props.do_not_disrupt, group=PYTORCHJOB_PODSET_GROUP if job.nnodes > 1 else None,
                ),
            )
            self.spec = PyTorchJobSpec(
                master=PyTorchReplicaSpec(replicas=1, template=pod),
                worker=PyTorchReplicaSpec(replicas=job.nnodes - 1, template=pod) if job.nnodes > 1 else None,
                nproc_per_node=job.nproc_per_node,
                suspend=job.suspend,
            )
            api_version, kind = contract.PYTORCHJOB_API_VERSION, contract.PYTORCHJOB_KIND
        self.api_object = _api_object(
            self, "Resource", api_version=api_version, kind=kind, name=job.name, namespace=job.namespace,
            spec=self.spec.to_json(), labels=labels, annotations=annotations,
        )


def pod_annotations(
    queue: QueueBinding | None, do_not_disrupt: bool, group: str | None = None,
) -> dict[str, str] | None:
    """Pod template annotations: Kueue's topology annotation (with ``group``, the PodSet group of the Master and
    Worker of a PyTorchJob, :data:`efa_stack.planning.scheduling.PYTORCHJOB_PODSET_GROUP`; none for a PyTorchJob
    of one node, whose Master is its only PodSet) and, on a Karpenter pool, do-not-disrupt (None: none)."""
    if queue is None:
        out: dict[str, str] = {}
    else:
        out = queue.grouped_pod_annotations(group) if group else queue.pod_annotations
    if do_not_disrupt:
        out[contract.KARPENTER_DO_NOT_DISRUPT] = "true"
    return out or None


def runtimes_of(jobs: tuple[TrainingJobPlan, ...]) -> dict[str, tuple[WorkerPlan, str]]:
    """Runtime name -> (worker, default image: the first TrainJob's) for the TrainJobs of ``jobs``, in order."""
    out: dict[str, tuple[WorkerPlan, str]] = {}
    for job in jobs:
        if job.kind == "trainjob":
            out.setdefault(job.runtime_name, (job.worker, job.image))
    return out

