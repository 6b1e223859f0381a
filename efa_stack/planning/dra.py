"""The DRA device layer (``devices: dra``): where it may run, and the claims a worker makes there.

A node group or Karpenter pool with ``devices: dra`` gets its GPUs, Neuron devices and EFA devices from DRA drivers
instead of device plugins (the drivers, their values and the labels that keep each node on one mechanism:
k8s/dra.py). This module holds what the plan decides:

- :func:`group_problems`: the refusals of a group (Kubernetes before 1.35, an instance type aws-dranet 1.0.0 does not
  run on, a dynamic Karpenter pool, UltraServers, Neuron groups where the pinned facts say no), each with its fix;
- :func:`worker_claims`: the ResourceClaimTemplates of one worker. A whole-node worker claims each device kind in
  templates of at most :data:`MAX_DEVICES_PER_CLAIM` devices with no constraint (countable by Kueue); a sub-node
  worker claims each of its GPUs with the EFA devices on the GPU's PCIe root, one claim with a ``matchAttribute``
  constraint per pair (from the PCIe-root data of data/dra_devices.json).

Every fact with its source: docs/design/dra.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from efa_stack import contract
from efa_stack.planning.catalog import InstanceType
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.spec.errors import Problem

DATA_FILE = Path(__file__).parent / "data" / "dra_devices.json"

MIN_KUBERNETES = "1.35"
"""aws/eks-charts@5239609 stable/aws-dranet/README.md, Prerequisites: "Kubernetes 1.35+ (with DRA feature gate
enabled)" (EKS's EFA page says 1.34; the chart's own floor wins). It is also the version of the API server
tests/test_apiserver.py applies efa-stack's ``resource.k8s.io/v1`` objects to."""
MAX_DEVICES_PER_CLAIM = 32
"""k8s.io/api@v0.35.4 resource/v1/types.go ``AllocationResultsMaxSize = 32``: a claim's allocation holds at most 32
devices, so a whole p5.48xlarge (8 GPUs + 32 EFA devices) cannot be one claim."""
MAX_REQUESTS_PER_CLAIM = 32
"""The same file's ``DeviceRequestsMaxSize = AllocationResultsMaxSize``: at most 32 requests per claim."""

DeviceKind = Literal["gpu", "efa", "neuron"]
DEVICE_CLASSES: dict[DeviceKind, str] = {
    "gpu": contract.GPU_DEVICE_CLASS, "efa": contract.EFA_DEVICE_CLASS, "neuron": contract.NEURON_DEVICE_CLASS,
}
DRIVERS: dict[DeviceKind, str] = {
    "gpu": contract.GPU_DRA_DRIVER, "efa": contract.EFA_DRA_DRIVER, "neuron": contract.NEURON_DRA_DRIVER,
}
PLUGIN_RESOURCES: dict[DeviceKind, str] = {
    "gpu": contract.GPU_RESOURCE, "efa": contract.EFA_RESOURCE, "neuron": contract.NEURON_RESOURCE,
}
"""The extended resource the device plugin of each kind advertises (none is allocatable on a DRA node)."""
CLAIM_NAMES: dict[DeviceKind, str] = {"gpu": "gpus", "efa": "efa", "neuron": "neuron"}
ALIGNED_CLAIM = "aligned"


@cache
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA_FILE.read_text())
    return data


def dranet_instance_types() -> frozenset[str]:
    """The instance types the aws-dranet 1.0.0 DaemonSet runs on (values.yaml ``supportedInstanceLabels``)."""
    return frozenset(_data()["awsDranet"]["supportedInstanceTypes"])


@dataclass(frozen=True)
class PcieRoots:
    """How one instance type's GPUs and EFA devices share PCIe roots (data/dra_devices.json ``pcieRoots``)."""

    instance_type: str
    gpus_per_root: int
    efa_per_root: int
    names: tuple[str, ...] | None
    """The roots as the drivers name them (``pci0000:10``), where a source lists them."""
    source: str

    def roots(self, gpus: int) -> int:
        """How many roots hold the node's ``gpus`` GPUs."""
        return gpus // self.gpus_per_root


def pcie_roots(instance_type: str) -> PcieRoots | None:
    """The PCIe-root pairing of ``instance_type``, or None where the data has none."""
    row = _data()["pcieRoots"].get(instance_type)
    if row is None:
        return None
    return PcieRoots(instance_type, row["gpusPerRoot"], row["efaPerRoot"],
                     tuple(row["roots"]) if row["roots"] else None, row["source"])


def device_kinds(group: NodeGroupPlan) -> tuple[DeviceKind, ...]:
    """The device kinds the nodes of ``group`` have: NVIDIA GPUs, Neuron devices, EFA devices (those enabled)."""
    kinds: list[DeviceKind] = []
    if group.gpus_per_node:
        kinds.append("gpu")
    if group.neuron_devices_per_node:
        kinds.append("neuron")
    if group.efa_devices_per_node:
        kinds.append("efa")
    return tuple(kinds)


def devices_per_node(group: NodeGroupPlan, kind: DeviceKind) -> int:
    return {"gpu": group.gpus_per_node, "efa": group.efa_devices_per_node,
            "neuron": group.neuron_devices_per_node}[kind]


def is_ultraserver(instance: InstanceType) -> bool:
    """A P6e UltraServer instance type (``p6e-gb200.36xlarge``, ``p6e-gb300.36xlarge``)."""
    return instance.family.startswith("p6e")


# --- refusals -----------------------------------------------------------------------------------------------------


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def group_problems(
    prefix: str, instance: InstanceType, *, efa: bool, kubernetes_version: str, pool_replicas: int | None = None,
    pool: bool = False,
) -> list[Problem]:
    """The problems of ``devices: dra`` on the group at ``prefix`` (a managed node group, or with ``pool`` a Karpenter
    pool whose ``replicas`` is ``pool_replicas``) of ``instance``, EFA enabled or not, on ``kubernetes_version``."""
    where = f"{prefix}.devices"
    keep = "or keep devices: plugin (the default)"
    out: list[Problem] = []
    if _version(kubernetes_version) < _version(MIN_KUBERNETES):
        out.append(Problem(
            where, contract.DEVICES_DRA,
            f"the DRA device layer needs Kubernetes {MIN_KUBERNETES} or later (the aws-dranet 1.0.0 chart requires "
            f"'Kubernetes 1.35+'), and the cluster is on {kubernetes_version}",
            f'set metadata.version: "{MIN_KUBERNETES}" or later, {keep}',
        ))
    if instance.accelerator is None and not efa:
        out.append(Problem(
            where, contract.DEVICES_DRA,
            f"{instance.name} nodes without EFA have no device a DRA driver would publish (no GPU, Neuron device or "
            "EFA device)", "remove devices: dra from this node group",
        ))
    if is_ultraserver(instance):
        out.append(Problem(
            where, contract.DEVICES_DRA,
            f"{instance.name} UltraServer nodes keep their GPUs and EFA devices on the device plugins (EKS's GB200 "
            "page: the NVIDIA device plugin 'until the NVIDIA DRA driver GPU allocation functionality graduates "
            "from experimental'); their ComputeDomains come from the NVIDIA DRA driver either way",
            "remove devices: dra from this node group",
        ))
    elif efa and instance.name not in dranet_instance_types():
        out.append(Problem(
            where, contract.DEVICES_DRA,
            f"the EFA DRA driver (aws-dranet 1.0.0) runs only on the instance types its chart lists, and "
            f"{instance.name} is not one of them (its DaemonSet would never start on these nodes)",
            f"use an instance type of that list (p4d.24xlarge, p5.48xlarge, p5en.48xlarge, p6-b200.48xlarge, ...), "
            f"{keep}",
        ))
    out += _kind_problems(where, instance, pool=pool, pool_replicas=pool_replicas)
    return out


def _kind_problems(where: str, instance: InstanceType, *, pool: bool, pool_replicas: int | None) -> list[Problem]:
    """The refusals that depend on the group's kind (managed node group or Karpenter pool) and accelerator."""
    out: list[Problem] = []
    if pool and pool_replicas is None:
        out.append(Problem(
            where, contract.DEVICES_DRA,
            "a Karpenter pool that launches nodes for pending pods cannot use DRA: provisioning for ResourceClaims is "
            "alpha in Karpenter v1.15.1 (settings.enableDRA, which efa-stack keeps off); a static pool's nodes exist "
            "whatever the pods claim",
            "make the pool static (replicas, on reserved capacity), use a managed node group, or keep devices: plugin",
        ))
    if instance.accelerator == "neuron":
        if instance.family.startswith("inf"):
            out.append(Problem(
                where, contract.DEVICES_DRA,
                f"the Neuron DRA driver is for Trainium ('implements the kubelet plugin for DRA for AWS Trainium "
                f"instances', Neuron docs; the chart's DaemonSet affinity leaves out inf types), and {instance.name} "
                "is Inferentia", "keep devices: plugin on Inferentia node groups",
            ))
        if pool:
            out.append(Problem(
                where, contract.DEVICES_DRA,
                "AWS's pages disagree on the Neuron DRA driver with Karpenter (one copy of EKS's Neuron page: 'not "
                "supported with Karpenter or EKS Auto Mode'; another: Karpenter static capacity only), so efa-stack "
                "does not combine them", "use a managed node group for Neuron DRA, or keep devices: plugin",
            ))
    return out


# --- claims ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceRequest:
    """One ``exactly`` request of a claim: ``count`` devices of ``device_class`` (allocationMode ExactCount)."""

    name: str
    kind: DeviceKind
    count: int

    @property
    def device_class(self) -> str:
        return DEVICE_CLASSES[self.kind]


@dataclass(frozen=True)
class ClaimTemplatePlan:
    """One ResourceClaimTemplate of a worker: ``claim`` is the pod's claim name (a DNS label), ``name`` the template's
    (rendered in every namespace whose jobs use it); ``aligned``: each pair of requests (a GPU and its EFA devices)
    must share :data:`efa_stack.contract.PCIE_ROOT_ATTRIBUTE`."""

    name: str
    claim: str
    requests: tuple[DeviceRequest, ...]
    aligned: tuple[tuple[str, str], ...] = ()

    @property
    def devices(self) -> int:
        return sum(r.count for r in self.requests)

    def count(self, kind: DeviceKind) -> int:
        return sum(r.count for r in self.requests if r.kind == kind)


@dataclass(frozen=True)
class WorkerClaims:
    """The claims of one worker pod (:func:`worker_claims`)."""

    templates: tuple[ClaimTemplatePlan, ...]

    @property
    def constrained(self) -> bool:
        """Some claim carries a ``matchAttribute`` constraint (Kueue v0.19.2 cannot count it)."""
        return any(t.aligned for t in self.templates)

    def count(self, kind: DeviceKind) -> int:
        return sum(t.count(kind) for t in self.templates)

    def claims_of(self, *kinds: DeviceKind) -> tuple[str, ...]:
        """The pod's claim names holding devices of ``kinds`` (the EFA guard's container takes these)."""
        return tuple(t.claim for t in self.templates if any(t.count(k) for k in kinds))


def template_name(group: str, claim: str) -> str:
    """``<node group>-<claim>``, lowercased: a ResourceClaimTemplate name (DNS subdomain)."""
    return f"{group.lower()}-{claim}"


def kind_claims(group: str, kind: DeviceKind, total: int) -> list[ClaimTemplatePlan]:
    """``total`` devices of ``kind`` in claims of at most :data:`MAX_DEVICES_PER_CLAIM`."""
    out = []
    for i, start in enumerate(range(0, total, MAX_DEVICES_PER_CLAIM)):
        claim = CLAIM_NAMES[kind] + (f"-{i + 1}" if i else "")
        n = min(MAX_DEVICES_PER_CLAIM, total - start)
        out.append(ClaimTemplatePlan(template_name(group, claim), claim, (DeviceRequest(kind, kind, n),)))
    return out


def whole_node_claims(group: NodeGroupPlan, *, efa: bool) -> WorkerClaims:
    """Every device of a node of ``group``, one kind per claim (EFA only when the job runs over EFA), no constraint."""
    kinds = [k for k in device_kinds(group) if k != "efa" or efa]
    return WorkerClaims(tuple(t for k in kinds for t in kind_claims(group.name, k, devices_per_node(group, k))))


def aligned_claims(group: NodeGroupPlan, gpus: int, roots: PcieRoots) -> WorkerClaims:
    """``gpus`` GPUs of a node of ``group``, each with the EFA devices on its PCIe root: requests ``gpu-i`` (1) and
    ``efa-i`` (EFA per root) constrained to one ``resource.kubernetes.io/pcieRoot``, in one claim."""
    requests: list[DeviceRequest] = []
    pairs: list[tuple[str, str]] = []
    for i in range(gpus):
        requests += [DeviceRequest(f"gpu-{i}", "gpu", 1), DeviceRequest(f"efa-{i}", "efa", roots.efa_per_root)]
        pairs.append((f"gpu-{i}", f"efa-{i}"))
    claim = ALIGNED_CLAIM
    return WorkerClaims((ClaimTemplatePlan(
        template_name(group.name, f"{gpus}gpu-{claim}"), claim, tuple(requests), tuple(pairs)),))


def aligned_problems(field: str, group: NodeGroupPlan, gpus: int) -> list[Problem]:
    """What stops ``gpus`` aligned GPUs per worker on ``group`` (``field``: the spec's ``gpusPerWorker``)."""
    roots = pcie_roots(group.instance_type)
    if roots is None:
        known = ", ".join(sorted(_data()["pcieRoots"]))
        return [Problem(
            field, gpus,
            f"efa-stack has no record of how {group.instance_type}'s GPUs and EFA devices share PCIe roots, so it "
            "cannot pair each GPU with its own EFA devices",
            f"leave gpusPerWorker out (whole-node workers), or run the test on a type with that record ({known})",
        )]
    out: list[Problem] = []
    most = roots.roots(group.gpus_per_node)
    per_gpu = 1 + roots.efa_per_root
    fit = min(most, MAX_DEVICES_PER_CLAIM // per_gpu, MAX_REQUESTS_PER_CLAIM // 2)
    if gpus > fit:
        why = (f"each GPU takes the {roots.efa_per_root} EFA devices of its PCIe root and a {group.instance_type} "
               f"node has {most} roots" if gpus > most else
               f"one claim holds at most {MAX_DEVICES_PER_CLAIM} devices (resource.k8s.io/v1 AllocationResultsMaxSize) "
               f"and each GPU comes with {roots.efa_per_root} EFA devices")
        out.append(Problem(field, gpus, f"{gpus} aligned GPUs do not fit one worker's claim: {why}",
                           f"use gpusPerWorker: {fit} or less, or leave it out for whole-node workers"))
    return out


def worker_claims(group: NodeGroupPlan, *, efa: bool, gpus: int | None = None) -> WorkerClaims | None:
    """The claims of one worker on ``group`` (None on a device plugin group): the whole node's devices, or with
    ``gpus`` fewer than the node has, that many GPUs each aligned with its PCIe root's EFA devices."""
    if group.devices != contract.DEVICES_DRA:
        return None
    roots = pcie_roots(group.instance_type)
    if gpus is None or gpus >= group.gpus_per_node or roots is None or not efa:
        # (a sub-node worker without PCIe-root data or EFA is refused by aligned_problems and the NCCL checks)
        return whole_node_claims(group, efa=efa)
    return aligned_claims(group, gpus, roots)


# --- across groups and jobs -------------------------------------------------------------------------------------------


def mix_problems(groups: list[NodeGroupPlan]) -> list[Problem]:
    """An NVIDIA ``devices: dra`` group beside UltraServer groups: the NVIDIA DRA driver is one Helm release, whose one
    kubelet-plugin DaemonSet runs its GPU container wherever it runs its ComputeDomain container
    (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 templates/kubeletplugin.yaml: both containers in one pod spec, one
    ``kubeletPlugin.affinity``), so GPUs would be allocated by DRA on the UltraServer nodes, where the NVIDIA device
    plugin allocates them too."""
    if not any(is_ultraserver(g.instance) for g in groups):
        return []
    return [
        Problem(
            f"{g.spec_path}.devices", contract.DEVICES_DRA,
            "the NVIDIA DRA driver's one kubelet plugin would serve GPUs on this cluster's UltraServer nodes too, where "
            "the NVIDIA device plugin hands them out (double allocation)",
            "keep devices: plugin on this node group, or put it in a cluster without UltraServer node groups",
        )
        for g in groups if g.devices == contract.DEVICES_DRA and g.gpus_per_node and not is_ultraserver(g.instance)
    ]


def queue_problems(
    topology: str, jobs: list[tuple[str, NodeGroupPlan, WorkerClaims | None]],
) -> list[Problem]:
    """Queued jobs on ``devices: dra`` groups under Kueue v0.19.2 (``topology``: ``scheduling.kueue.topology``;
    ``jobs``: (the job's field, its node group, its worker's claims)). kubernetes-sigs/kueue@v0.19.2
    site/content/en/docs/concepts/dynamic_resource_allocation.md, Limitations: "No DRA + Topology Aware Scheduling
    (TAS): DRA resources are not accounted for in TAS capacity calculations" (kubernetes-sigs/kueue#10548), "No device
    constraints or config: Device ``constraints`` (MatchAttribute) ... are not supported", "ExactCount allocation
    mode only" (efa-stack renders ExactCount only)."""
    out: list[Problem] = []
    for where, group, claims in jobs:
        if group.devices != contract.DEVICES_DRA:
            continue
        if topology != "none":
            out.append(Problem(
                "scheduling.kueue.topology", topology,
                f"Kueue v0.19.2 leaves DRA devices out of topology-aware scheduling (kubernetes-sigs/kueue#10548), and "
                f"{where} runs on node group {group.name}, which uses devices: dra",
                f"set scheduling.kueue.topology: none (queued for quota only), or devices: plugin on {group.spec_path}",
            ))
        if claims is not None and claims.constrained:
            out.append(Problem(
                f"{where}.gpusPerWorker", claims.count("gpu"),
                "Kueue v0.19.2 cannot admit a claim with constraints, and each sub-node worker claims its GPUs with "
                "the EFA devices of their PCIe roots (matchAttribute)",
                "leave gpusPerWorker out (whole-node workers, countable by Kueue), or turn scheduling.kueue off",
            ))
    return out
