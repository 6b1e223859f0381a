"""Kueue gang admission and topology-aware scheduling (TAS), derived from the node groups and the jobs.

:func:`kueue_plan` turns ``scheduling.kueue`` into a :class:`KueuePlan`: one ``Topology`` per depth of EKS's
network topology labels among the node groups (``network-node-layer-1`` .. ``-3``, or ``-4`` on the
four-layer types of ``data/network_topology.json``, then ``kubernetes.io/hostname``), a ``ResourceFlavor`` per
node group (its ``efa-stack.io/node-group`` label, its taints, its topology), one ``ClusterQueue`` whose
quota per flavor is the group's ``maxSize`` times what one node gives a worker, and a ``LocalQueue`` in every
namespace a job of the plan runs in. A PyTorchJob's Master and Worker form one PodSet group
(:data:`PYTORCHJOB_PODSET_GROUP`); ``waitForPodsReady.timeout`` is derived from the jobs' node groups and image
size unless the spec sets it (:func:`wait_timeout`). The design: docs/design/kueue-tas.md.

Why one topology per depth: Kueue's TAS only sees nodes that carry the flavor's node labels and every level
label of its topology (kubernetes-sigs/kueue@v0.19.2 pkg/cache/scheduler/tas_nodes_cache.go ``find`` keeps the
nodes ``utiltas.NodeMatchesFlavor`` accepts), so a three-layer p5 node would be invisible to a topology with a
fourth network level. TAS counts the allocatable capacity of ready nodes only (site/content/en/docs/concepts/
topology_aware_scheduling.md, "Capacity calculation"): nodes an autoscaler has not launched yet are not seen.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from efa_stack import contract
from efa_stack.planning.nccl import WORKER_WAIT_SECONDS, node_allocatable_memory_mib
from efa_stack.planning.node_groups import NodeGroupPlan, Taint
from efa_stack.planning.queue_binding import QueueBinding
from efa_stack.planning.tuning import guaranteed_cpus
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import KueueSpec

TOPOLOGY_FILE = Path(__file__).resolve().parent / "data" / "network_topology.json"

INTEGRATIONS: tuple[str, ...] = (
    "batch/job",
    "kubeflow.org/mpijob",
    "kubeflow.org/pytorchjob",
    "trainer.kubeflow.org/trainjob",
)
"""Kueue Configuration ``integrations.frameworks`` for the jobs efa-stack can render (the framework names of
kubernetes-sigs/kueue@v0.19.2 pkg/controller/jobs/job/job_controller.go, mpijob/mpijob_controller.go,
kubeflow/jobs/pytorchjob/pytorchjob_controller.go and trainjob/trainjob_controller.go ``FrameworkName``); a plan
enables those whose CRDs it installs (:func:`integrations_of`)."""


def integrations_of(*, trainer: bool, pytorch_job_v1: bool) -> tuple[str, ...]:
    """The integrations whose CRDs the plan installs: batch Jobs and MPIJobs always (the MPI operator is always
    installed), PyTorchJobs with Training Operator v1, TrainJobs with Kubeflow Trainer. An integration whose CRD is
    missing when Kueue starts is enabled only once its API appears, polled for (kubernetes-sigs/kueue@v0.19.2
    pkg/controller/jobframework/setup.go ``SetupControllers``, ``waitForAPI``), and meanwhile its webhook refuses
    every object of the kind; the TrainJob integration also needs the JobSet CRD."""
    wanted = {"batch/job", "kubeflow.org/mpijob", *(("kubeflow.org/pytorchjob",) if pytorch_job_v1 else ()),
              *(("trainer.kubeflow.org/trainjob",) if trainer else ())}
    return tuple(i for i in INTEGRATIONS if i in wanted)

HOSTNAME_LABEL = "kubernetes.io/hostname"
"""The lowest level of every Topology: Kueue's Topology CRD allows ``kubernetes.io/hostname`` only there
(kubernetes-sigs/kueue@v0.19.2 apis/kueue/v1beta2/topology_types.go, ``TopologySpec.levels`` validation)."""

TopologyMode = Literal["required", "preferred", "none"]

FLAVOR_LABELS: tuple[str, ...] = (contract.LABEL_NODE_GROUP, contract.LABEL_ROLE)
"""The node labels of each flavor. Kueue gives a PodSet only a flavor whose ``nodeLabels`` do not contradict the
pods' node selector on a key both name, and then adds those labels to the pods: the workers select their node
group by ``efa-stack.io/node-group`` and the launchers the system nodes by ``efa-stack.io/role``, so each flavor
names both, and neither can be given the other's flavor."""


@cache
def _layers_data() -> dict[str, int]:
    data = json.loads(TOPOLOGY_FILE.read_text())
    assert data["labelPrefix"] == contract.NETWORK_LAYER_LABEL_PREFIX, "data/network_topology.json labelPrefix"
    return {str(k): int(v) for k, v in data["layers"].items()}


def network_layers(instance_type: str) -> int:
    """How many ``topology.k8s.aws/network-node-layer-N`` labels EKS puts on a node of ``instance_type``
    (0: none, the type has no EC2 instance topology)."""
    return _layers_data().get(instance_type, 0)


def layer_label(n: int) -> str:
    """``topology.k8s.aws/network-node-layer-<n>``."""
    return f"{contract.NETWORK_LAYER_LABEL_PREFIX}{n}"


def topology_name(layers: int) -> str:
    """The ``Topology`` of instance types with ``layers`` network layers: ``network-3-layers``."""
    return f"network-{layers}-layers"


@dataclass(frozen=True)
class TopologyPlan:
    """A Kueue ``Topology``: its name and node labels, top level first."""

    name: str
    levels: tuple[str, ...]


@dataclass(frozen=True)
class FlavorPlan:
    """A ``ResourceFlavor`` (one per node group) and its quota in the ClusterQueue."""

    name: str
    node_group: str
    node_labels: dict[str, str] = field(hash=False)
    taints: tuple[Taint, ...]
    topology: str | None
    """The flavor's ``topologyName``; None for a group whose nodes carry no network topology labels."""
    quotas: tuple[tuple[str, str], ...]
    """(resource, nominal quota) for every covered resource of the ClusterQueue, in its order."""


@dataclass(frozen=True)
class WaitForPodsReadyPlan:
    """Kueue Configuration ``waitForPodsReady`` (kubernetes-sigs/kueue@v0.19.2 apis/config/v1beta2/
    configuration_types.go ``WaitForPodsReady``, ``RequeuingStrategy``)."""

    timeout_seconds: int
    backoff_limit_count: int | None
    backoff_base_seconds: int
    backoff_max_seconds: int
    derived: bool = True
    """The timeout is :func:`wait_timeout`'s (False: the spec's ``timeoutSeconds``)."""


KUEUE_DEFAULT_TIMEOUT_SECONDS = 30 * 60
"""Kueue's own ``waitForPodsReady.timeout`` (kubernetes-sigs/kueue@v0.19.2 apis/config/v1beta2/defaults.go
``DefaultWaitForPodsReadyTimeout = 30 * time.Minute``); ``recoveryTimeout`` defaults to the timeout there
(``cfg.WaitForPodsReady.RecoveryTimeout = cmp.Or(..., &cfg.WaitForPodsReady.Timeout)``), so a replacement pod
that needs a new node gets as long. The clock starts at the Workload's ``Admitted`` condition
(pkg/controller/core/workload_controller.go ``admittedNotReadyWorkload``). A derived timeout is never shorter."""

KARPENTER_REGISTRATION_SECONDS = 15 * 60
"""How long Karpenter waits for a node it launches to register before it deletes the NodeClaim and tries again:
kubernetes-sigs/karpenter@6e7eab7a0f485d7225eb98995fad9b66c79b322b (the core module of aws/karpenter-provider-aws
v1.14.1, go.mod; the same in core v1.15.0) pkg/controllers/nodeclaim/lifecycle/liveness.go ``registrationTimeout = time.Minute * 15``, counted
from the NodeClaim's ``Registered`` condition, which is initialised with ``Launched`` when the claim is created
(pkg/apis/v1/nodeclaim_status.go ``NewReadyConditions``); the launch itself must succeed within ``LaunchTimeout``
(5 minutes) of that. A node Karpenter still waits for may take this long."""

NODE_START_SECONDS = 2 * 60
"""Estimate, no upstream figure: from registration until a worker fits the node, its NVIDIA and EFA device plugin
pods pull their images (hundreds of MB, seconds at :data:`PULL_SECONDS_PER_GB`), start, and advertise
``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa`` to the kubelet."""

PULL_SECONDS_PER_GB = 24
"""Seconds a node takes per GB of compressed image: AWS puts a standard pull of a 15-20 GB Deep Learning
Container image at 4-6 minutes per instance (AWS Machine Learning Blog, "Reducing container cold start times
using SOCI index on DLAMI and DLC", aws.amazon.com/blogs/machine-learning/reducing-container-cold-start-times-
using-soci-index-on-dlami-and-dlc/); the slowest pairing, 15 GB in 6 minutes, is 24 s per GB."""


def pods_ready_seconds(image_size_gb: int, karpenter_pool: bool) -> int:
    """Seconds from admission until the pods of a job on one node group can be ready: the image pull, and on a
    Karpenter pool (whose nodes are launched after admission) first the node's registration and start."""
    node = KARPENTER_REGISTRATION_SECONDS + NODE_START_SECONDS if karpenter_pool else 0
    return node + image_size_gb * PULL_SECONDS_PER_GB


def worker_wait_seconds(on_pool: bool, queue_timeout_seconds: int | None) -> int:
    """How long the NCCL-tests launcher waits for its workers
    (:attr:`efa_stack.planning.nccl.NcclJobPlan.worker_wait_seconds`): the image-pull allowance :data:`efa_stack.planning.nccl.WORKER_WAIT_SECONDS`, or longer
    where the workers' nodes may not exist yet when the launcher starts. On a Karpenter pool (``on_pool``) a node may
    take Karpenter's registration timeout and the device plugins' start before the image pull begins
    (:func:`pods_ready_seconds`); a queued job's launcher starts with its workers at admission, and Kueue itself
    gives the pods ``waitForPodsReady.timeout`` (``queue_timeout_seconds``; None: not queued) before it evicts the
    job, so the launcher waits as long (a shorter wait would fail a job Kueue still holds)."""
    waits = [WORKER_WAIT_SECONDS]
    if on_pool:
        waits.append(WORKER_WAIT_SECONDS + KARPENTER_REGISTRATION_SECONDS + NODE_START_SECONDS)
    if queue_timeout_seconds is not None:
        waits.append(queue_timeout_seconds)
    return max(waits)


def wait_timeout(image_size_gb: int, pools: Sequence[bool]) -> int:
    """The derived ``waitForPodsReady.timeout``: the longest :func:`pods_ready_seconds` of the queued jobs' node
    groups (``pools``: whether each is a Karpenter pool), never below Kueue's own default."""
    return max(KUEUE_DEFAULT_TIMEOUT_SECONDS, *(pods_ready_seconds(image_size_gb, p) for p in pools))


PYTORCHJOB_PODSET_GROUP = "master-and-workers"
"""The PodSet group of a PyTorchJob's Master and Worker replicas (``kueue.x-k8s.io/podset-group-name``). Kueue's
PyTorchJob integration makes one PodSet per replica type, each with the topology request its pod template's
annotations give, group name included (kubernetes-sigs/kueue@v0.19.2 pkg/controller/jobs/kubeflow/kubeflowjob/
kubeflowjob_controller.go ``PodSets`` -> jobframework ``NewPodSetTopologyRequest``). The scheduler gives the
PodSets of one group one flavor (pkg/scheduler/flavorassigner/flavorassigner.go) and finds one domain for both,
the PodSet of one pod as the leader (pkg/cache/scheduler/tas_flavor_snapshot.go ``FindTopologyAssignmentsForFlavor``,
``findLeaderAndWorkers``): rank 0, which trains, lands beside its workers instead of in a domain of its own. The
rules other integrations' webhooks check (pkg/controller/jobframework/tas_validation.go
``ValidatePodSetGroupingTopology``: exactly two PodSets, one of them a single pod, the same topology annotation on
both) hold here by construction; the value must not be a number (``validatePodSetGroupNameAnnotation``). No feature
gate beyond ``TopologyAwareScheduling`` (beta, on since v0.14, pkg/features/kube_features.go).

The cost: Kueue's ungater ranks a group's larger PodSet from the smaller one's count (pkg/controller/tas/
topology_ungater.go ``rankOffsets``), as for a LeaderWorkerSet whose workers count from 1; PyTorch workers count
``training.kubeflow.org/replica-index`` from 0, so worker 0 gets rank -1 and the ungater falls back to filling the
assigned domains in pod order (``readRanksForLabels`` "is below 0", ``assignGatedPodsToDomainsGreedy``). Every pod
still lands in the group's domain.

Not for the other jobs: an MPIJob's launcher runs on the system flavor and must stay unconstrained, while a group
needs one flavor and a topology annotation on each PodSet; a TrainJob on an efa-stack runtime is one PodSet (the
runtime's single replicated job ``node``)."""


@dataclass(frozen=True)
class KueuePlan:
    cluster_queue: str
    local_queue: str
    namespaces: tuple[str, ...]
    """Namespaces that get a LocalQueue: every namespace a job of the plan runs in."""
    topologies: tuple[TopologyPlan, ...]
    flavors: tuple[FlavorPlan, ...]
    resources: tuple[str, ...]
    """The ClusterQueue's ``coveredResources`` (one resource group)."""
    mode: TopologyMode
    level: str
    """``bottom``, ``layer-N`` or ``hostname`` (``scheduling.kueue.level``)."""
    wait: WaitForPodsReadyPlan
    integrations: tuple[str, ...] = INTEGRATIONS

    @property
    def device_class_mappings(self) -> tuple[str, ...]:
        """The DeviceClasses Kueue's Configuration maps to a quota resource of the same name (those the ClusterQueue
        covers: :data:`DRA_QUOTA_RESOURCES`)."""
        return tuple(r for r in self.resources if r in DRA_QUOTA_RESOURCES.values())

    def flavor(self, node_group: str) -> FlavorPlan | None:
        return next((f for f in self.flavors if f.node_group == node_group), None)

    def level_label(self, node_group: str) -> str | None:
        """The node label of ``level`` for the instance type of ``node_group`` (None: no topology there)."""
        flavor = self.flavor(node_group)
        if flavor is None or flavor.topology is None:
            return None
        topology = next(t for t in self.topologies if t.name == flavor.topology)
        network = topology.levels[:-1]
        if self.level == "hostname":
            return HOSTNAME_LABEL
        if self.level == "bottom":
            return network[-1]
        return layer_label(int(self.level.removeprefix("layer-")))

    def binding(self, node_group: str) -> QueueBinding:
        """The queue label and worker annotation of a job on ``node_group``."""
        label = self.level_label(node_group)
        if self.mode == "none" or label is None:
            return QueueBinding(self.local_queue)
        key = contract.KUEUE_REQUIRED_TOPOLOGY if self.mode == "required" else contract.KUEUE_PREFERRED_TOPOLOGY
        return QueueBinding(self.local_queue, ((key, label),))


def node_figures(group: NodeGroupPlan) -> dict[str, int]:
    """What one node of ``group`` gives workers, per resource (0: none): GPUs, EFA devices and Neuron devices
    of the instance, the hugepages it reserves at boot (MiB), its Guaranteed CPUs (as the NCCL and training
    workers request them) and its allocatable memory less those hugepages (MiB). On a ``devices: dra`` group the
    devices count under their DeviceClass's name (:data:`DRA_QUOTA_RESOURCES`) instead of the device plugins'
    extended resources, which such a node never advertises."""
    dra = group.devices == contract.DEVICES_DRA
    devices = {
        contract.GPU_RESOURCE: group.gpus_per_node,
        contract.EFA_RESOURCE: group.efa_devices_per_node,
        contract.NEURON_RESOURCE: group.neuron_devices_per_node,
    }
    return {
        "cpu": guaranteed_cpus(group.instance),
        "memory": max(node_allocatable_memory_mib(group.instance) - group.hugepages_2mi_mib, 0),
        **{r: 0 if dra else n for r, n in devices.items()},
        **{DRA_QUOTA_RESOURCES[r]: n if dra else 0 for r, n in devices.items()},
        contract.HUGEPAGES_2MI_RESOURCE: group.hugepages_2mi_mib,
    }


DRA_QUOTA_RESOURCES: dict[str, str] = {
    contract.GPU_RESOURCE: contract.GPU_DEVICE_CLASS,
    contract.EFA_RESOURCE: contract.EFA_DEVICE_CLASS,
    contract.NEURON_RESOURCE: contract.NEURON_DEVICE_CLASS,
}
"""The ClusterQueue resource a DRA device counts against, per device plugin resource: its DeviceClass's name, which
Kueue's Configuration maps the class to (``resources.deviceClassMappings``; kubernetes-sigs/kueue@v0.19.2
site/content/en/docs/tasks/manage/setup_dra.md, "Set up the ResourceClaimTemplate path": Kueue charges each request
of a mapped class its ``count``). A mapping's name must be a label key (pkg/config/validation.go
``validateDeviceClassMappings``), which a DeviceClass name is."""


_MIB_RESOURCES = ("memory", contract.HUGEPAGES_2MI_RESOURCE)


def _quantity(resource: str, value: int) -> str:
    return f"{value}Mi" if resource in _MIB_RESOURCES else str(value)


def _covered(groups: Sequence[NodeGroupPlan]) -> tuple[str, ...]:
    """cpu and memory, then each extended resource some group has (Kueue needs every flavor of a resource group
    to list the same resources, so a group without one gets a quota of 0)."""
    figures = [node_figures(g) for g in groups]
    extended = (contract.GPU_RESOURCE, contract.EFA_RESOURCE, contract.NEURON_RESOURCE,
                *DRA_QUOTA_RESOURCES.values(), contract.HUGEPAGES_2MI_RESOURCE)
    return ("cpu", "memory", *(r for r in extended if any(f[r] for f in figures)))


def kueue_plan(
    cfg: KueueSpec, node_groups: Sequence[NodeGroupPlan], system: NodeGroupPlan, namespaces: Sequence[str],
    job_groups: Sequence[str], elastic: Sequence[str] = (), *, job_workers: Sequence[tuple[str, str, int]] = (),
    integrations: Sequence[str] = INTEGRATIONS,
) -> tuple[KueuePlan | None, list[Problem], list[str]]:
    """The Kueue plan of ``scheduling.kueue`` (None when it is off), its problems and its warnings.

    ``namespaces``: where the plan's jobs run; ``job_groups``: the node groups their workers run on;
    ``job_workers``: (the job's field, its node group, its whole-node workers) per queued job; ``integrations``: the
    frameworks to enable (:func:`integrations_of`). The launchers run on the system node group, which gets a flavor
    of its own without a topology. ``elastic``: the Karpenter pools among ``node_groups``; their flavors have no
    topology either, since TAS sees only nodes that exist and a pool launches its nodes after admission
    (docs/design/karpenter.md, "Pools and Kueue"). With ``topology: none`` no flavor has one: Kueue refuses a flavor
    with a ``topologyName`` to a PodSet that asks for no topology unless the ClusterQueue is topology-only
    (kubernetes-sigs/kueue@v0.19.2 pkg/scheduler/flavorassigner/tas_flavorassigner.go
    ``checkPodSetAndFlavorMatchForTAS``: "Flavor ... supports only TopologyAwareScheduling"), and the system flavor
    has none, so no queued job would ever be admitted.
    """
    if not cfg.enabled:
        return None, [], []
    problems: list[Problem] = []
    warnings: list[str] = []
    wait = cfg.wait_for_pods_ready
    queued = dict.fromkeys(job_groups)
    derived = wait_timeout(wait.image_size_gb, [n in elastic for n in queued])
    if wait.timeout_seconds is not None:
        slowest = max(queued, key=lambda n: pods_ready_seconds(wait.image_size_gb, n in elastic), default=None)
        need = pods_ready_seconds(wait.image_size_gb, slowest in elastic) if slowest is not None else 0
        if wait.timeout_seconds < need:
            why = (f"Karpenter pool {slowest} launches its nodes after admission: up to "
                   f"{KARPENTER_REGISTRATION_SECONDS} s to register, {NODE_START_SECONDS} s for the device plugins and "
                   if slowest in elastic else f"a node of node group {slowest} takes ")
            problems.append(Problem(
                "scheduling.kueue.waitForPodsReady.timeoutSeconds", wait.timeout_seconds,
                f"{why}{wait.image_size_gb * PULL_SECONDS_PER_GB} s to pull a {wait.image_size_gb} GB image "
                f"(imageSizeGB): {need} s before a job's pods can be ready, so Kueue would evict and requeue it",
                f"raise timeoutSeconds to {need} or more, or leave it out (derived: {derived} s)",
            ))
    if wait.backoff_base_seconds > wait.backoff_max_seconds:
        problems.append(Problem(
            "scheduling.kueue.waitForPodsReady.backoffBaseSeconds", wait.backoff_base_seconds,
            f"the backoff base is longer than its maximum ({wait.backoff_max_seconds} s)",
            "lower backoffBaseSeconds or raise backoffMaxSeconds",
        ))
    problems.extend(_single_host_problems(cfg, job_workers))
    groups = [*node_groups, system]
    untopological = set(elastic) | ({g.name for g in groups} if cfg.topology == "none" else set())
    depths = sorted({n for g in groups if g.name not in untopological and (n := network_layers(g.instance_type))})
    topologies = tuple(
        TopologyPlan(topology_name(n), (*(layer_label(i) for i in range(1, n + 1)), HOSTNAME_LABEL))
        for n in depths
    )
    resources = _covered(groups)
    flavors: list[FlavorPlan] = []
    # The system flavor first: Kueue tries a resource group's flavors in order and, after a scheduling cycle in which
    # a flavor fit the quota but not the topology, starts the next cycle at the flavor after it (kubernetes-sigs/
    # kueue@v0.19.2 pkg/workload/workload.go ``NextFlavorToTryForPodSetResource``); with the system flavor last, every
    # other cycle of a job that does not fit tries only that flavor, and its Workload's message names it ("Flavor
    # "system" does not support TopologyAwareScheduling") instead of the topology. First, it is tried and passed
    # over in every cycle (pkg/scheduler/flavorassigner/flavorassigner.go ``findFlavorForPodSets``), so the message
    # names the worker group's flavor or topology; a launcher takes it at once.
    for g in [system, *node_groups]:
        layers = 0 if g.name in untopological else network_layers(g.instance_type)
        figures = node_figures(g)
        flavors.append(FlavorPlan(
            name=g.name.lower(),
            node_group=g.name,
            node_labels={k: g.labels[k] for k in FLAVOR_LABELS if k in g.labels},
            taints=g.taints,
            topology=topology_name(layers) if layers else None,
            quotas=tuple((r, _quantity(r, figures[r] * g.max_size)) for r in resources),
        ))
        if not layers and g.role != "system" and cfg.topology != "none" and g.name not in elastic:
            warnings.append(
                f"node group {g.name}: {g.instance_type} nodes carry no {contract.NETWORK_LAYER_LABEL_PREFIX}N "
                "labels, so Kueue's topology-aware scheduling cannot place on them; its jobs are queued for "
                "quota only (ResourceFlavor without topologyName)"
            )
    plan = KueuePlan(
        cluster_queue=contract.KUEUE_QUEUE_NAME,
        local_queue=contract.KUEUE_QUEUE_NAME,
        namespaces=tuple(sorted(set(namespaces))),
        topologies=topologies,
        flavors=tuple(flavors),
        resources=resources,
        mode=cfg.topology,
        level=cfg.level,
        wait=WaitForPodsReadyPlan(
            timeout_seconds=derived if wait.timeout_seconds is None else wait.timeout_seconds,
            backoff_limit_count=wait.backoff_limit_count,
            backoff_base_seconds=wait.backoff_base_seconds, backoff_max_seconds=wait.backoff_max_seconds,
            derived=wait.timeout_seconds is None,
        ),
        integrations=tuple(integrations),
    )
    if cfg.level.startswith("layer-") and cfg.topology != "none":
        wanted = int(cfg.level.removeprefix("layer-"))
        for name in dict.fromkeys(n for n in job_groups if n not in elastic):
            group = next(g for g in node_groups if g.name == name)
            layers = network_layers(group.instance_type)
            if layers and wanted > layers:
                problems.append(Problem(
                    "scheduling.kueue.level", cfg.level,
                    f"{group.instance_type} nodes (node group {name}) have {layers} network layers, so no node has "
                    f"{layer_label(wanted)}",
                    f"use bottom or layer-1 .. layer-{layers}",
                ))
    return plan, problems, warnings


def _single_host_problems(cfg: KueueSpec, job_workers: Sequence[tuple[str, str, int]]) -> list[Problem]:
    """``topology: required`` at ``level: hostname`` for jobs of several whole-node workers: Kueue admits such a job
    only when every worker fits one node (kubernetes-sigs/kueue@v0.19.2 apis/kueue/v1beta2 ``podset-required-
    topology``: all pods of the PodSet in one domain of the level), which a node with one worker's worth of GPUs and
    EFA devices never has, so the job would wait in its queue for ever."""
    if cfg.topology != "required" or cfg.level != "hostname":
        return []
    out = []
    for where, group, workers in job_workers:
        if workers > 1:
            out.append(Problem(
                "scheduling.kueue.level", "hostname",
                f"with topology: required every worker of a job must fit one node, and {where} runs {workers} "
                f"whole-node workers on node group {group}: Kueue would never admit it",
                "use level: bottom (all workers under one network node of the lowest layer) or topology: preferred",
            ))
    return out
