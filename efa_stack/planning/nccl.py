"""The nccl-tests job, derived from the plan: which node group, how many workers, slots and devices.

Every number comes from a :class:`efa_stack.planning.node_groups.NodeGroupPlan` or the spec's ``ncclTest``
section; :func:`worker_sizing` is also the rule training workers are sized by. Only NVIDIA GPU groups get
a job (nccl-tests are CUDA programs). Design: docs/design/kubernetes-side.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from efa_stack import contract
from efa_stack.names import nccl_job_name, nccl_job_problems
from efa_stack.planning.catalog import InstanceType
from efa_stack.planning.dra import WorkerClaims, aligned_problems, worker_claims
from efa_stack.planning.node_groups import ComputeDomainPlan, NodeGroupPlan, Taint
from efa_stack.planning.queue_binding import QueueBinding
from efa_stack.planning.ultraserver import compute_domain_for
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import NcclTest

# GPUs whose instances support GPUDirect RDMA over EFA (RDMA read/write), so libfabric may DMA
# straight into GPU memory (FI_EFA_USE_DEVICE_RDMA=1). Per the EC2 user guide's EFA page
# ("Supported instance types", RDMA columns): p4d/p4de (A100), p5/p5e/p5en (H100/H200),
# p6-b200 (B200), p6-b300 (B300), p6e-gb200 (GB200). Matched against the catalog's GPU name.
GPUDIRECT_RDMA_GPUS = frozenset({"A100", "H100", "H200", "B200", "B300", "GB200", "GB300"})

# --- worker memory: what one nccl-tests worker asks for, sized from the node (see worker_memory) ---
# Working memory per rank (one rank per GPU): the AWS nccl-tests MPIJob gives a p5.48xlarge worker
# (8 GPUs) 32000Mi (aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/
# nccl-tests.yaml, limits.memory), i.e. 4000 MiB per GPU.
MEMORY_PER_GPU_MIB = 4000
# /dev/shm per rank: NVIDIA's NCCL user guide (Troubleshooting, "Runtime and MPI issues", Shared
# memory) has containers raise /dev/shm to 1 GiB (--shm-size=1g); NCCL fails to initialise when it
# cannot extend its /dev/shm segments. efa-stack gives each of the worker's ranks that much. The
# memory-backed emptyDir counts against the container's memory limit (Kubernetes docs, Volumes,
# emptyDir: files written to a tmpfs emptyDir count against the memory limit), so it is added to it.
SHM_PER_GPU_MIB = 1024
# Node allocatable memory on the EKS AL2023 AMIs (awslabs/amazon-eks-ami nodeadm, internal/kubelet/
# config.go): kubeReserved memory = 11 * maxPods + 255 MiB (getMemoryMebibytesToReserve), evictionHard
# memory.available = 100Mi, no systemReserved memory; maxPods = ENIs of the default network card *
# (IPv4 addresses per ENI - 1) + 2 (eni_max_pods.go, calculateStandardMaxPods). The catalog has the
# ENIs of card 0 but not the IPv4 addresses per ENI, so the largest figure in nodeadm's
# instance-info.jsonl (64) bounds it: the reservation is never under-estimated.
KUBE_RESERVED_MIB_PER_POD = 11
KUBE_RESERVED_MIB_BASE = 255
EVICTION_HARD_MEMORY_MIB = 100
MAX_IPV4_PER_ENI = 64
# efa-stack's own margin for the requests of the node's DaemonSets (VPC CNI, kube-proxy, device
# plugins, FSx CSI node, Pod Identity agent), which the scheduler also counts against allocatable.
DAEMONSET_MEMORY_MIB = 1024


def max_pods_bound(instance: InstanceType) -> int:
    """nodeadm's maxPods for ``instance`` with the largest IPv4 figure per ENI (an upper bound, see above)."""
    enis = instance.network_cards[0].max_interfaces if instance.network_cards else instance.max_network_interfaces
    return enis * (MAX_IPV4_PER_ENI - 1) + 2


def allocatable_memory_mib(instance: InstanceType, max_pods: int) -> int:
    """The memory an EKS AL2023 node of ``instance`` whose kubelet has ``max_pods`` gives pods: its memory less
    nodeadm's kubeReserved and the kubelet's evictionHard (before hugepages, which the kubelet also subtracts)."""
    kube_reserved = KUBE_RESERVED_MIB_PER_POD * max_pods + KUBE_RESERVED_MIB_BASE
    return instance.memory_mib - kube_reserved - EVICTION_HARD_MEMORY_MIB


def node_allocatable_memory_mib(instance: InstanceType) -> int:
    """The memory an EKS AL2023 node of ``instance`` can give pods (upper bound on maxPods)."""
    return allocatable_memory_mib(instance, max_pods_bound(instance))


@dataclass(frozen=True)
class WorkerMemory:
    """Memory, ``/dev/shm`` and hugepages of one worker, and what the node has for it."""

    memory_mib: int
    shm_mib: int
    hugepages_mib: int
    available_mib: int
    """Node allocatable memory less :data:`DAEMONSET_MEMORY_MIB`."""
    explicit: frozenset[str]
    """Spec fields the user set (``memoryMiB``, ``shmSizeMiB``, ``hugepagesMiB``); the rest were sized."""

    def problems(self, section: str, instance_type: str, gpus: int) -> list[Problem]:
        """What does not fit, each naming the field under ``section`` (``ncclTest``, ``trainingJobs[0]``)."""
        out: list[Problem] = []
        sized = f"sized for {gpus} GPUs"
        if self.shm_mib >= self.memory_mib:
            field = f"{section}.shmSizeMiB" if "shmSizeMiB" in self.explicit else f"{section}.memoryMiB"
            value = self.shm_mib if "shmSizeMiB" in self.explicit else self.memory_mib
            shm = f"/dev/shm ({self.shm_mib} MiB" + ("" if "shmSizeMiB" in self.explicit else f", {sized}") + ")"
            out.append(Problem(
                field, value,
                f"the memory-backed {shm} counts against the worker's memory limit ({self.memory_mib} MiB)",
                "lower shmSizeMiB or raise memoryMiB",
            ))
        need = self.memory_mib + self.hugepages_mib
        if need > self.available_mib:
            set_fields = sorted(self.explicit & {"memoryMiB", "hugepagesMiB"})
            field = f"{section}." + "/".join(set_fields) if set_fields else section
            out.append(Problem(
                field, {"memoryMiB": self.memory_mib, "hugepagesMiB": self.hugepages_mib},
                f"a worker needs {need} MiB of memory and hugepages but a {instance_type} node has about "
                f"{self.available_mib} MiB for it (allocatable memory less kubelet reservation and DaemonSets)"
                + ("" if set_fields else f"; the defaults are {sized}"),
                f"keep memoryMiB + hugepagesMiB at or below {self.available_mib}"
                + ("" if set_fields else ", or use an instance type with more memory"),
            ))
        return out


def worker_memory(
    instance: InstanceType, hugepages_mib: int, *, memory_mib: int | None = None, shm_mib: int | None = None,
    hugepages_explicit: bool = False, gpus: int | None = None,
) -> WorkerMemory:
    """THE sizing rule of a worker's memory, ``/dev/shm`` and hugepages on ``instance``.

    ``/dev/shm`` = :data:`SHM_PER_GPU_MIB` per GPU unless ``shm_mib`` is given; memory =
    :data:`MEMORY_PER_GPU_MIB` per GPU plus the ``/dev/shm`` unless ``memory_mib`` is given; hugepages =
    ``hugepages_mib``, what the worker's node reserves (:func:`node_hugepages_mib`) when the job runs
    over EFA, 0 otherwise. 8 GPUs: 8192 MiB ``/dev/shm``, 40192 MiB memory. ``gpus``: the worker's GPUs where it
    takes fewer than the node has (a sub-node worker).
    """
    gpus = instance.gpus if gpus is None else gpus
    explicit = frozenset(
        alias for alias, given in (("memoryMiB", memory_mib is not None), ("shmSizeMiB", shm_mib is not None),
                                   ("hugepagesMiB", hugepages_explicit))
        if given
    )
    shm = shm_mib if shm_mib is not None else SHM_PER_GPU_MIB * gpus
    memory = memory_mib if memory_mib is not None else MEMORY_PER_GPU_MIB * gpus + shm
    return WorkerMemory(
        memory_mib=memory,
        shm_mib=shm,
        hugepages_mib=hugepages_mib,
        available_mib=node_allocatable_memory_mib(instance) - DAEMONSET_MEMORY_MIB,
        explicit=explicit,
    )


@dataclass(frozen=True)
class WorkerSizing:
    """One worker pod on a node of its node group, for the NCCL-tests job and the training jobs alike: the whole
    node's GPUs, EFA devices and Guaranteed CPUs, its memory, ``/dev/shm`` and hugepages, and where it runs."""

    node_group: str
    instance_type: str
    fabric: contract.Fabric
    gpus: int
    efa_devices: int
    """``vpc.amazonaws.com/efa``: every EFA device of the node over EFA; 0 over any other fabric."""
    memory: WorkerMemory
    cpus: int
    """Whole CPUs, requests = limits (Guaranteed QoS): :attr:`NodeGroupPlan.guaranteed_cpus`."""
    gpudirect_rdma: bool
    """Over EFA on a GPU of :data:`GPUDIRECT_RDMA_GPUS` (sets ``FI_EFA_USE_DEVICE_RDMA=1``)."""
    arm64: bool
    taints: tuple[Taint, ...]
    """The node group's taints, which the worker pods tolerate."""
    claims: WorkerClaims | None = None
    """The worker's DRA claims on a ``devices: dra`` node group (:func:`efa_stack.planning.dra.worker_claims`), which
    replace the device plugins' ``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa``; None on a device plugin group."""

    @property
    def lib_arch(self) -> str:
        """The multiarch library directory of the image (aws-ofi-nccl installs under it)."""
        return "aarch64-linux-gnu" if self.arm64 else "x86_64-linux-gnu"


def worker_sizing(
    ng: NodeGroupPlan, fabric: contract.Fabric, *, memory_mib: int | None = None, shm_mib: int | None = None,
    hugepages_explicit: bool = False, gpus: int | None = None,
) -> WorkerSizing:
    """THE sizing of a worker pod on a node of ``ng`` for a job over ``fabric``: the node's EFA devices,
    reserved hugepages (:func:`worker_memory`) and GPUDirect RDMA only over EFA; memory and ``/dev/shm`` as
    given, sized per GPU where not. ``gpus`` fewer than the node has (a sub-node worker, ``devices: dra`` only)
    takes that share of the node's CPUs and hugepages and the EFA devices of its GPUs' PCIe roots
    (:func:`efa_stack.planning.dra.worker_claims`)."""
    efa = fabric == "efa"
    gpu = ng.instance.gpu
    whole = gpus is None or gpus >= ng.gpus_per_node
    share = 1.0 if whole or not ng.gpus_per_node else (gpus or 0) / ng.gpus_per_node
    claims = worker_claims(ng, efa=efa, gpus=None if whole else gpus)
    hugepages = ng.hugepages_2mi_mib if efa else 0
    return WorkerSizing(
        node_group=ng.name,
        instance_type=ng.instance_type,
        fabric=fabric,
        gpus=ng.gpus_per_node if whole else (gpus or 0),
        efa_devices=(ng.efa_devices_per_node if whole else claims.count("efa") if claims else 0) if efa else 0,
        memory=worker_memory(ng.instance, int(hugepages * share) // 2 * 2, memory_mib=memory_mib, shm_mib=shm_mib,
                             hugepages_explicit=hugepages_explicit, gpus=None if whole else gpus),
        cpus=ng.guaranteed_cpus if whole else max(1, int(ng.guaranteed_cpus * share)),
        gpudirect_rdma=efa and gpu is not None and gpu.name in GPUDIRECT_RDMA_GPUS,
        arm64=ng.instance.arm64,
        taints=ng.taints,
        claims=claims,
    )


def nccl_worker_sizing(cfg: NcclTest, ng: NodeGroupPlan) -> WorkerSizing:
    """:func:`worker_sizing` with the ``ncclTest`` section's memory settings and ``gpusPerWorker``."""
    return worker_sizing(ng, cfg.fabric, memory_mib=cfg.memory_mib, shm_mib=cfg.shm_mib,
                         hugepages_explicit="hugepages_mib" in cfg.model_fields_set, gpus=cfg.gpus_per_worker)


_SIZE = re.compile(r"^([1-9][0-9]*)([KMG]?)$")
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def size_bytes(text: str) -> int:
    """``"16G"`` -> 17179869184, as nccl-tests reads ``-b``/``-e`` (binary K/M/G suffixes)."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not an nccl-tests size: {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2)]


WORKER_WAIT_SECONDS = 900
"""How long the NCCL-tests launcher waits, at least, for every worker to resolve and accept ssh before mpirun: the
workers pull a multi-GB image on first start (longer where their nodes may not exist yet:
:func:`efa_stack.planning.scheduling.worker_wait_seconds`)."""


@dataclass(frozen=True)
class NcclJobPlan:
    """Everything the nccl-tests MPIJob needs, derived once from the node group plan and the spec."""

    name: str
    namespace: str
    gpu_name: str
    workers: int
    """One worker pod per node: the node group's desired size."""
    worker: WorkerSizing
    """Each worker: one rank per GPU (MPI slots per worker = ``worker.gpus``)."""
    binary: str
    min_bytes: str
    max_bytes: str
    step_factor: int
    iterations: int
    check: int
    image: str
    suspend: bool
    efa_guard: bool = False
    """Render the EFA guard (fail-closed NCCL env and the ``efa-guard`` init container): ``ncclTest.efaGuard``
    when the fabric is efa, False otherwise."""
    queue: QueueBinding | None = None
    """Kueue's binding of the job's node group (:meth:`efa_stack.planning.scheduling.KueuePlan.binding`): the queue
    label and the workers' topology annotation; None: not queued (Kueue off)."""
    do_not_disrupt: bool = False
    """The workers run on a Karpenter pool, so their pods carry ``karpenter.sh/do-not-disrupt``."""
    worker_wait_seconds: int = WORKER_WAIT_SECONDS
    """How long the launcher waits for its workers before mpirun
    (:func:`efa_stack.planning.scheduling.worker_wait_seconds`)."""
    compute_domain: ComputeDomainPlan | None = None
    """The job's ComputeDomain on an UltraServer node group (IMEX channels for multi-node NVLink; the workers claim
    one and stay in one NVLink domain when they fit one); None elsewhere."""

    @property
    def node_group(self) -> str:
        return self.worker.node_group

    @property
    def slots_per_worker(self) -> int:
        """MPI slots per worker = GPUs per node (one rank per GPU)."""
        return self.worker.gpus

    @property
    def np(self) -> int:
        """mpirun ``-np``: total ranks = workers x slots per worker."""
        return self.workers * self.slots_per_worker

    @property
    def benchmark_args(self) -> tuple[str, ...]:
        """The nccl-tests sweep, e.g. ``-b 8 -e 16G -f 2 -g 1 -c 1 -n 100`` (one GPU per rank)."""
        return (
            "-b", self.min_bytes,
            "-e", self.max_bytes,
            "-f", str(self.step_factor),
            "-g", "1",
            "-c", str(self.check),
            "-n", str(self.iterations),
        )


def _is_nccl_candidate(ng: NodeGroupPlan) -> bool:
    return ng.instance.accelerator == "nvidia" and ng.gpus_per_node > 0


def node_hugepages_mib(role: str, efa_enabled: bool, cfg: NcclTest) -> int:
    """The 2 MiB hugepages (MiB) a node of a group reserves at boot: the one rule, read by the launch
    template's user data and by the NCCL-tests workers' ``hugepages-2Mi`` request.

    A node reserves what the pods efa-stack runs on it request: ``ncclTest.hugepagesMiB`` on EFA node
    groups with NVIDIA GPUs (where NCCL runs over aws-ofi-nccl and libfabric), nothing elsewhere.
    Hugepages are an optimisation for libfabric, not a requirement: its EFA provider allocates its
    internal buffer pools from hugepages when it can and falls back to regular pages when it cannot
    (ofiwg/libfabric prov/util/src/util_buf.c ``ofi_bufpool_grow``: "If we can't allocate huge pages,
    fall back to normal allocations"; ``FI_EFA_USE_HUGE_PAGE``, default on, in fi_efa(7)). In
    Kubernetes a container may only use the node's hugepages through a ``hugepages-2Mi`` request
    (kubernetes.io "Manage HugePages"), and reserved pages leave the node's allocatable memory. So a
    Trainium/Inferentia node, whose pods efa-stack does not render (no NCCL job: nccl-tests are
    CUDA), reserves none rather than 5 GiB that no pod could use.
    """
    return cfg.hugepages_mib if efa_enabled and role == "gpu" else 0


def target_node_group(node_groups: Sequence[NodeGroupPlan], cfg: NcclTest) -> NodeGroupPlan | None:
    """The node group the job runs on: ``ncclTest.nodeGroup``, else the first EFA NVIDIA group.

    With ``fabric`` tcp or infiniband and no EFA GPU group, the first NVIDIA group is used.
    """
    if cfg.node_group is not None:
        ng = next((n for n in node_groups if n.name == cfg.node_group), None)
        return ng if ng is not None and _is_nccl_candidate(ng) else None
    gpu_groups = [n for n in node_groups if _is_nccl_candidate(n)]
    efa_groups = [n for n in gpu_groups if n.efa_enabled]
    if efa_groups:
        return efa_groups[0]
    if cfg.fabric != "efa" and gpu_groups:
        return gpu_groups[0]
    return None


def nccl_job_plan(node_groups: Sequence[NodeGroupPlan], cfg: NcclTest) -> NcclJobPlan | None:
    """The nccl-tests job over ``node_groups`` (planned, valid), or None when there is nothing to run it on.

    Called once, by :func:`efa_stack.planning.plan.build_plan`; everyone else reads ``ClusterPlan.nccl_job``.
    None when the cluster has no NVIDIA GPU node group (e.g. Trainium only: nccl-tests are CUDA),
    when the default target has no EFA and the fabric is efa, or when the target's desired size is 0.
    """
    ng = target_node_group(node_groups, cfg)
    if ng is None or ng.desired_size < 1:
        return None
    if cfg.fabric == "efa" and not ng.efa_enabled:
        return None
    assert ng.instance.gpu is not None
    name = nccl_job_name(ng.name)
    return NcclJobPlan(
        name=name,
        namespace=contract.NCCL_JOB_NAMESPACE,
        gpu_name=ng.instance.gpu.name,
        workers=ng.desired_size,
        worker=nccl_worker_sizing(cfg, ng),
        binary=cfg.binary,
        min_bytes=cfg.min_bytes,
        max_bytes=cfg.max_bytes,
        step_factor=cfg.step_factor,
        iterations=cfg.iterations,
        check=cfg.check,
        image=cfg.image,
        suspend=cfg.suspend,
        efa_guard=cfg.fabric == "efa" and cfg.efa_guard,
        compute_domain=compute_domain_for(name, contract.NCCL_JOB_NAMESPACE, ng.desired_size, ng),
    )


def validate_nccl(
    cfg: NcclTest, node_groups: Sequence[NodeGroupPlan], declared: Sequence[str], *, explicit: bool,
) -> list[Problem]:
    """Problems with the spec's ``ncclTest`` section (``cfg``; ``explicit``: the spec has the section), given the
    node groups and Karpenter pools planned so far.

    ``node_groups`` are the planned groups and pools' nodes; ``declared`` every name the spec gives a node group
    or pool, also of those that failed to plan: such a group has its own problem already and is not judged again
    here.
    """
    problems: list[Problem] = []
    names = list(declared)
    planned = {ng.name: ng for ng in node_groups}

    if size_bytes(cfg.min_bytes) > size_bytes(cfg.max_bytes):
        problems.append(Problem(
            "ncclTest.minBytes/maxBytes", {"minBytes": cfg.min_bytes, "maxBytes": cfg.max_bytes},
            "the sweep starts above where it ends", "make minBytes smaller than or equal to maxBytes",
        ))

    target: NodeGroupPlan | None = None
    if cfg.node_group is not None:
        if cfg.node_group not in names:
            problems.append(Problem(
                "ncclTest.nodeGroup", cfg.node_group, "no managed node group has this name",
                f"use one of {', '.join(names)}" if names else "add the node group first",
            ))
        else:
            target = planned.get(cfg.node_group)
            if target is not None and not _is_nccl_candidate(target):
                what = "Neuron (Trainium/Inferentia)" if target.role == "neuron" else "CPU-only"
                problems.append(Problem(
                    "ncclTest.nodeGroup", cfg.node_group,
                    f"nccl-tests are CUDA programs and this is a {what} node group",
                    "name a node group with NVIDIA GPUs, or remove ncclTest (Neuron groups get no NCCL job)",
                ))
                target = None
            elif target is not None and cfg.fabric == "efa" and not target.efa_enabled:
                problems.append(Problem(
                    "ncclTest.nodeGroup", cfg.node_group, "fabric is efa but this node group has efaEnabled: false",
                    "set efaEnabled: true on the node group, or fabric: tcp for a run without EFA",
                ))
                target = None
    else:
        candidates = [ng for ng in node_groups if _is_nccl_candidate(ng)]
        if cfg.fabric == "efa":
            candidates = [ng for ng in candidates if ng.efa_enabled]
        target = candidates[0] if candidates else None
        if target is None and explicit and len(planned) == len(names):
            problems.append(Problem(
                "ncclTest", {"fabric": cfg.fabric},
                "no node group can run nccl-tests" + (" over EFA" if cfg.fabric == "efa" else "")
                + " (they need NVIDIA GPUs" + (" and efaEnabled: true)" if cfg.fabric == "efa" else ")"),
                "remove the ncclTest section, or add an EFA node group with NVIDIA GPUs",
            ))

    if target is not None:
        problems.extend(nccl_job_problems(target.name, target.desired_size))
        if explicit and target.desired_size < 1:
            problems.append(Problem(
                f"ncclTest.nodeGroup ({target.name}).desiredCapacity", target.desired_size,
                "the job needs at least one worker node", "raise desiredCapacity to 1 or more",
            ))
        problems += _sub_node_problems(cfg, target)
        sizing = nccl_worker_sizing(cfg, target)
        problems += sizing.memory.problems("ncclTest", target.instance_type, sizing.gpus)
        problems += _topology_problems(target)
    return problems


def _sub_node_problems(cfg: NcclTest, target: NodeGroupPlan) -> list[Problem]:
    """``ncclTest.gpusPerWorker`` on ``target``: at most the node's GPUs; fewer only over EFA on a ``devices: dra``
    group whose PCIe roots efa-stack knows (:func:`efa_stack.planning.dra.aligned_problems`)."""
    gpus, field = cfg.gpus_per_worker, "ncclTest.gpusPerWorker"
    if gpus is None or gpus == target.gpus_per_node:
        return []
    if gpus > target.gpus_per_node:
        return [Problem(field, gpus, f"a {target.instance_type} node has {target.gpus_per_node} GPUs",
                        f"use gpusPerWorker: {target.gpus_per_node} or less")]
    out: list[Problem] = []
    if target.devices != contract.DEVICES_DRA:
        out.append(Problem(
            field, gpus,
            f"a worker of fewer GPUs than the node has claims each GPU with the EFA devices on its PCIe root, which "
            f"takes the DRA drivers, and node group {target.name} uses the device plugins",
            f"set devices: dra on {target.spec_path}, or leave gpusPerWorker out (every GPU of the node)",
        ))
    if cfg.fabric != "efa":
        out.append(Problem(
            field, gpus, f"sub-node workers pair their GPUs with EFA devices, and the job runs over {cfg.fabric}",
            "set fabric: efa, or leave gpusPerWorker out",
        ))
    if not out:
        out += aligned_problems(field, target, gpus)
    return out


def _topology_problems(target: NodeGroupPlan) -> list[Problem]:
    """The worker is one pod per node that asks for every GPU, every EFA device and every CPU a Guaranteed pod
    can get there. ``single-numa-node`` admits a pod only when one NUMA node holds all of it (Kubernetes docs,
    "Control Topology Management Policies on a node"): on a multi-socket node (p4d, p5: two sockets) the
    worker is refused with a TopologyAffinityError on every node, and on a one-NUMA-node instance the policy
    has nothing to align. Either way it is the wrong setting for the group the job runs on."""
    out: list[Problem] = []
    if target.kubelet.topology_manager_policy == "single-numa-node":
        out.append(Problem(
            f"{target.spec_path}.kubeletExtraConfig.topologyManagerPolicy", "single-numa-node",
            f"the nccl-tests worker asks for all {target.gpus_per_node} GPUs"
            + (f", {target.efa_devices_per_node} EFA devices" if target.efa_enabled else "")
            + f" and {target.guaranteed_cpus} CPUs of a {target.instance_type} node; single-numa-node admits a "
            "pod only when one NUMA node holds all of that, so the kubelet would refuse every worker",
            "use topologyManagerPolicy: restricted (the fewest NUMA nodes that hold the request) or best-effort, "
            "or run the job on another node group (ncclTest.nodeGroup)",
        ))
    if target.guaranteed_cpus < 1:
        out.append(Problem(
            f"ncclTest.nodeGroup ({target.name}).instanceType", target.instance_type,
            "a node of this type has no whole CPU left for a Guaranteed worker after the kubelet's reservation",
            "use an instance type with more vCPUs",
        ))
    return out
