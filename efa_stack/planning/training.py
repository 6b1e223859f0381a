"""Training jobs, derived from the plan: which node group, how many nodes, processes, devices and memory.

Each ``trainingJobs[]`` entry becomes a :class:`TrainingJobPlan`, sized by the NCCL-tests workers' rule
(:func:`efa_stack.planning.nccl.worker_sizing`); NVIDIA GPU node groups only. TrainJobs whose
:class:`WorkerPlan` are equal share one runtime, named by :func:`runtime_name`. Design:
docs/design/training.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from efa_stack import contract
from efa_stack.names import DNS1035_LABEL, DNS1123_SUBDOMAIN, NameRule
from efa_stack.planning.nccl import WorkerSizing, worker_sizing
from efa_stack.planning.node_groups import ComputeDomainPlan, NodeGroupPlan
from efa_stack.planning.queue_binding import QueueBinding
from efa_stack.planning.ultraserver import compute_domain_for
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import ClusterSpec, TrainingJobSpec

# --- names the operators derive ----------------------------------------------------------------
# Kubeflow Trainer v2.3.0: the TrainJob becomes a JobSet of the same name whose replicated job is
# "node" (pkg/constants/constants.go Node); JobSet names each Job "<jobset>-<replicated job>-<index>"
# and its pods' hostnames "<job>-<pod index>", the hostnames torch's rendezvous uses
# (pkg/runtime/framework/plugins/torch/torch.go: PET_MASTER_ADDR "<name>-node-0-0.<name>").
TRAINER_NODE_JOB = "node"
# Training Operator v1.9.4 pkg/core/utils.go GenGeneralName: pods and services "<job>-<replica type>-<index>";
# the PyTorchJob webhook requires a DNS-1035 name (pkg/webhooks/pytorch/pytorchjob_webhook.go).
PYTORCH_MASTER = "master"
PYTORCH_WORKER = "worker"
RUNTIME_PREFIX = "efa-stack-"
# Kubeflow Trainer v2.3.0 pkg/constants/constants.go TorchRunReservedEnvNames: the torch plugin sets these.
RESERVED_ENV = frozenset({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"})
SCRIPT_ENV = "EFA_STACK_TRAIN_SCRIPT"
"""The inline ``script`` travels in this variable; the command writes it to a file and runs it under torchrun."""
SHM_VOLUME = "dshm"


def trainjob_hostname(job: str, node_index: int) -> str:
    """The hostname of a TrainJob's node ``node_index`` (``<job>-node-0-<index>``)."""
    return f"{job}-{TRAINER_NODE_JOB}-0-{node_index}"


def pytorchjob_pod_name(job: str, replica: str, index: int) -> str:
    """A PyTorchJob pod and service name (``<job>-master-0``, ``<job>-worker-<index>``)."""
    return f"{job}-{replica}-{index}"


@dataclass(frozen=True)
class VolumePlan:
    """One volume of the workers: a claim (the FSx for Lustre one) or an ``emptyDir``."""

    name: str
    mount_path: str
    claim_name: str | None = None
    empty_dir_mib: int | None = None
    medium: str = ""


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker pod needs on its node: its sizing (the NCCL-tests worker's rule), fabric settings and
    volumes. A TrainJob's ClusterTrainingRuntime carries exactly this; a PyTorchJob's pod template too.
    """

    sizing: WorkerSizing
    rdma_resource: str | None = None
    ib_hca: str | None = None
    ib_gid_index: int | None = None
    socket_ifname: str | None = None
    volumes: tuple[VolumePlan, ...] = ()
    efa_guard: bool = False
    """Run the EFA guard and name the aws-ofi-nccl network in ``NCCL_NET`` (``efaGuard`` with fabric efa)."""
    compute_domain: ComputeDomainPlan | None = None
    """The job's ComputeDomain on an UltraServer node group: the worker claims its IMEX channel (so a TrainJob's
    runtime is the job's own) and stays in one NVLink domain when the job fits one; None elsewhere."""

    @property
    def nproc_per_node(self) -> int:
        """torchrun ``--nproc-per-node``: one process per GPU."""
        return self.sizing.gpus


@dataclass(frozen=True)
class TrainingJobPlan:
    """Everything one training job needs, derived once from the node group plan and the spec."""

    name: str
    namespace: str
    kind: contract.JobKind
    nnodes: int
    worker: WorkerPlan
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    script: str | None
    env: tuple[tuple[str, str], ...]
    suspend: bool
    runtime_name: str
    """The ClusterTrainingRuntime a TrainJob references (shared by TrainJobs with equal WorkerPlans)."""
    queue: QueueBinding | None = None
    """Kueue's binding of the job's node group (:meth:`efa_stack.planning.scheduling.KueuePlan.binding`): the queue
    label on the job, the topology annotation on its workers (a TrainJob's on its runtime); None: not queued."""
    do_not_disrupt: bool = False
    """The workers run on a Karpenter pool, so their pods carry ``karpenter.sh/do-not-disrupt``."""

    @property
    def node_group(self) -> str:
        return self.worker.sizing.node_group

    @property
    def nproc_per_node(self) -> int:
        return self.worker.nproc_per_node


def runtime_name(worker: WorkerPlan, shared_with_others: bool) -> str:
    """``efa-stack-<node group>-<fabric>``, plus a digest of the WorkerPlan when that name would be shared by
    runtimes that differ (other memory, volumes or RDMA settings on the same node group and fabric)."""
    base = f"{RUNTIME_PREFIX}{worker.sizing.node_group.lower()}-{worker.sizing.fabric}"
    if not shared_with_others:
        return base
    return f"{base}-{hashlib.sha256(repr(worker).encode()).hexdigest()[:8]}"


def _name_problems(prefix: str, job: TrainingJobSpec, nnodes: int) -> list[Problem]:
    checks: list[tuple[NameRule, str]] = [(DNS1123_SUBDOMAIN, job.name), (DNS1035_LABEL, job.name)]
    if job.kind == "trainjob":
        last = trainjob_hostname(job.name, max(nnodes, 1) - 1)
        checks.append((DNS1035_LABEL, last))
        room = DNS1035_LABEL.max_len - len(last) + len(job.name)
    else:
        last = pytorchjob_pod_name(job.name, PYTORCH_WORKER, max(nnodes - 1, 1) - 1)
        checks += [(DNS1035_LABEL, pytorchjob_pod_name(job.name, PYTORCH_MASTER, 0)), (DNS1035_LABEL, last)]
        room = DNS1035_LABEL.max_len - len(last) + len(job.name)
    for rule, value in checks:
        why = rule.violation(value)
        if why:
            return [Problem(
                f"{prefix}.name", job.name,
                f"the operator would name a pod {value!r}, which is not {why.removeprefix('a ')}",
                f"shorten the job name to at most {room} characters",
            )]
    return []


def _fabric_problems(prefix: str, job: TrainingJobSpec) -> list[Problem]:
    out: list[Problem] = []
    if job.fabric != "infiniband":
        for alias, value in (("rdmaResource", job.rdma_resource), ("ibHca", job.ib_hca),
                             ("ibGidIndex", job.ib_gid_index), ("socketIfname", job.socket_ifname)):
            if value is not None:
                out.append(Problem(
                    f"{prefix}.{alias}", value, f"an InfiniBand setting, but the job's fabric is {job.fabric}",
                    f"remove {alias}, or set fabric: infiniband",
                ))
    return out


def _volumes(prefix: str, job: TrainingJobSpec, spec: ClusterSpec, problems: list[Problem]) -> tuple[VolumePlan, ...]:
    out: list[VolumePlan] = []
    seen_names: set[str] = set()
    seen_paths: set[str] = set()
    for i, v in enumerate(job.volumes):
        where = f"{prefix}.volumes[{i}]"
        if v.fsx == (v.empty_dir is not None):
            problems.append(Problem(
                where, v.name, "a volume is either the FSx claim (fsx: true) or an emptyDir",
                "set exactly one of fsx: true and emptyDir",
            ))
            continue
        if v.name in seen_names or v.name == SHM_VOLUME:
            problems.append(Problem(
                f"{where}.name", v.name,
                "volume names must be unique and 'dshm' is efa-stack's /dev/shm", "choose another name",
            ))
            continue
        seen_names.add(v.name)
        if v.fsx:
            if spec.storage is None:
                problems.append(Problem(
                    f"{where}.fsx", True, "the spec has no storage section, so there is no FSx claim to mount",
                    "add a storage section (FSx for Lustre) or use an emptyDir",
                ))
                continue
            if job.namespace != contract.FSX_CLAIM_NAMESPACE:
                problems.append(Problem(
                    f"{prefix}.namespace", job.namespace,
                    f"the FSx claim {contract.FSX_CLAIM_NAME} lives in namespace {contract.FSX_CLAIM_NAMESPACE} and a "
                    "pod can only mount claims of its own namespace",
                    f"use namespace: {contract.FSX_CLAIM_NAMESPACE}, or drop the fsx volume",
                ))
                continue
            path = v.mount_path or spec.storage.mount_path
            vol = VolumePlan(name=v.name, mount_path=path, claim_name=contract.FSX_CLAIM_NAME)
        else:
            assert v.empty_dir is not None
            if v.mount_path is None:
                problems.append(Problem(
                    f"{where}.mountPath", None, "an emptyDir needs a mount path", "add mountPath: /scratch (or another)",
                ))
                continue
            vol = VolumePlan(name=v.name, mount_path=v.mount_path, empty_dir_mib=v.empty_dir.size_mib,
                             medium=v.empty_dir.medium)
        if vol.mount_path in seen_paths or vol.mount_path.rstrip("/") == "/dev/shm":
            problems.append(Problem(
                f"{where}.mountPath", vol.mount_path,
                "two volumes at one path (and /dev/shm is efa-stack's memory-backed volume)", "choose another mountPath",
            ))
            continue
        seen_paths.add(vol.mount_path)
        out.append(vol)
    return tuple(out)


def _worker(
    prefix: str, job: TrainingJobSpec, ng: NodeGroupPlan, spec: ClusterSpec, problems: list[Problem], nnodes: int,
) -> WorkerPlan | None:
    before = len(problems)
    if ng.instance.accelerator != "nvidia" or ng.gpus_per_node < 1:
        what = "a Neuron (Trainium/Inferentia)" if ng.role == "neuron" else "a CPU-only"
        problems.append(Problem(
            f"{prefix}.nodeGroup", job.node_group,
            f"training jobs run torchrun with NCCL on NVIDIA GPUs and this is {what} node group ({ng.instance_type})",
            "name a node group with NVIDIA GPUs (efa-stack does not render Neuron training jobs)",
        ))
        return None
    if job.fabric == "efa" and not ng.efa_enabled:
        problems.append(Problem(
            f"{prefix}.fabric", job.fabric, f"node group {ng.name} has efaEnabled: false, so it has no EFA devices",
            f"set efaEnabled: true on node group {ng.name}, or fabric: tcp for a job without EFA",
        ))
    sized = worker_sizing(ng, job.fabric, memory_mib=job.memory_mib, shm_mib=job.shm_mib)
    problems.extend(sized.memory.problems(prefix, ng.instance_type, ng.gpus_per_node))
    volumes = _volumes(prefix, job, spec, problems)
    if len(problems) > before:
        return None
    ib = job.fabric == "infiniband"
    return WorkerPlan(
        sizing=sized,
        rdma_resource=(job.rdma_resource or contract.RDMA_RESOURCE) if ib else None,
        ib_hca=job.ib_hca if ib else None,
        ib_gid_index=job.ib_gid_index if ib else None,
        socket_ifname=job.socket_ifname if ib else None,
        volumes=volumes,
        efa_guard=job.fabric == "efa" and job.efa_guard,
        compute_domain=compute_domain_for(job.name, job.namespace, nnodes, ng),
    )


def training_job_plans(
    spec: ClusterSpec, node_groups: Sequence[NodeGroupPlan], declared: Sequence[str],
) -> tuple[tuple[TrainingJobPlan, ...], list[Problem]]:
    """The plans of ``spec.trainingJobs`` over the planned ``node_groups`` (node groups and Karpenter pools' nodes),
    and every problem with them. ``declared``: every name the spec gives a node group or pool.

    Called once, by :func:`efa_stack.planning.plan.build_plan` (which raises on problems); everyone else reads
    ``ClusterPlan.training_jobs``. A node group that failed to plan has its own problem already.
    """
    problems: list[Problem] = []
    planned = {ng.name: ng for ng in node_groups}
    first_with_name: dict[tuple[str, str], int] = {}
    drafts: list[tuple[TrainingJobSpec, int, WorkerPlan]] = []
    for i, job in enumerate(spec.training_jobs):
        prefix = f"trainingJobs[{i}]"
        key = (job.namespace, job.name)
        if key in first_with_name:
            problems.append(Problem(
                f"{prefix}.name", job.name,
                f"trainingJobs[{first_with_name[key]}] already has this name in namespace {job.namespace}",
                "give every training job of a namespace its own name",
            ))
        first_with_name.setdefault(key, i)
        if (job.command is None) == (job.script is None):
            problems.append(Problem(
                f"{prefix}.command/script", {"command": job.command, "script": "..." if job.script else None},
                "a job runs either a command or an inline script", "set exactly one of command and script",
            ))
        for env_key in job.env:
            if env_key in RESERVED_ENV or env_key == SCRIPT_ENV:
                problems.append(Problem(
                    f"{prefix}.env", env_key, "the training operator (or efa-stack, for the script) sets this variable",
                    "remove it; nnodes and the node group's GPUs set torchrun's numbers",
                ))
        problems.extend(_fabric_problems(prefix, job))
        if job.node_group not in declared:
            problems.append(Problem(
                f"{prefix}.nodeGroup", job.node_group, "no managed node group has this name",
                f"use one of {', '.join(declared)}",
            ))
            continue
        ng = planned.get(job.node_group)
        if ng is None:
            continue
        nnodes = job.nnodes if job.nnodes is not None else ng.desired_size
        if nnodes > ng.max_size:
            problems.append(Problem(
                f"{prefix}.nnodes", nnodes,
                f"node group {ng.name} has at most {ng.max_size} nodes (maxSize) and each worker takes a whole node",
                # nodes beyond desiredCapacity are refused below: the advice names the count that passes both
                f"use nnodes <= {ng.desired_size} (its desiredCapacity), or raise maxSize and desiredCapacity of "
                f"node group {ng.name} to {nnodes}",
            ))
        elif nnodes > ng.desired_size:
            # A managed node group stays at desiredCapacity: efa-stack runs no autoscaler, so the workers
            # beyond it would wait Pending for nodes that never come.
            problems.append(Problem(
                f"{prefix}.nnodes", nnodes,
                f"node group {ng.name} runs {ng.desired_size} node(s) (desiredCapacity) and nothing scales it up, "
                "so the workers beyond them would stay Pending",
                f"raise desiredCapacity of node group {ng.name} to {nnodes}, or use nnodes <= {ng.desired_size}",
            ))
        if nnodes < 1:
            problems.append(Problem(
                f"{prefix}.nnodes", nnodes, f"node group {ng.name} has desiredCapacity 0, so the job would have no node",
                f"raise desiredCapacity of node group {ng.name} to the nodes the job needs (nothing scales a managed "
                "node group up by itself)",
            ))
        problems.extend(_name_problems(prefix, job, nnodes))
        worker = _worker(prefix, job, ng, spec, problems, nnodes)
        if worker is not None:
            drafts.append((job, nnodes, worker))
    if problems:
        return (), problems

    variants: dict[tuple[str, str], set[WorkerPlan]] = {}
    for job, _, worker in drafts:
        if job.kind == "trainjob":
            variants.setdefault((worker.sizing.node_group, worker.sizing.fabric), set()).add(worker)
    plans = []
    for job, nnodes, worker in drafts:
        script_mode = job.script is not None
        plans.append(TrainingJobPlan(
            name=job.name,
            namespace=job.namespace,
            kind=job.kind,
            nnodes=nnodes,
            worker=worker,
            image=job.image,
            command=tuple(job.command) if job.command is not None else (),
            args=tuple(job.args),
            script=job.script if script_mode else None,
            env=tuple(sorted(job.env.items())),
            suspend=job.suspend,
            runtime_name=runtime_name(worker, len(variants.get((worker.sizing.node_group, worker.sizing.fabric), ())) > 1),
        ))
    return tuple(plans), []
