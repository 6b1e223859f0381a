"""Fake nodes made from a :class:`~efa_stack.planning.plan.ClusterPlan`, one per member of every node group.

Each Node carries what an EKS node of its group would: the group's labels and taints, the labels EKS puts on nodes
(instance type, region, zone, capacity type, node group, and ``topology.k8s.aws/network-node-layer-1..N`` for the
instance types EC2 reports a network topology for), the NVLink domain GPU feature discovery labels on UltraServer
nodes (``nvidia.com/gpu.clique``, :func:`efa_stack.rehearsal.compute_domains.gfd_labels`), and an allocatable
computed from the plan's own rules: GPUs, EFA devices and Neuron devices per node (as their device plugins advertise
them; none on a ``devices: dra`` node, whose devices the DRA drivers publish in ResourceSlices:
efa_stack/rehearsal/resource_slices.py), the hugepages the group reserves at boot, CPU less nodeadm's kubeReserved,
memory less kubeReserved, evictionHard and those hugepages (the kubelet subtracts pre-allocated hugepages from
allocatable memory), and the kubelet's maxPods from the address plan. No figure is typed here; what a scheduler,
Kueue or a DaemonSet controller decides about a node, they decide from these objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from efa_stack import contract
from efa_stack.planning.nccl import allocatable_memory_mib, max_pods_bound
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.planning.plan import ClusterPlan
from efa_stack.planning.scheduling import HOSTNAME_LABEL, layer_label, network_layers
from efa_stack.planning.tuning import allocatable_cpu_milli
from efa_stack.rehearsal.compute_domains import gfd_labels
from efa_stack.rehearsal.kwok import NODE_ANNOTATION, NODE_ANNOTATION_VALUE

# Well-known labels the kubelet sets (kubernetes.io/docs/reference/labels-annotations-taints).
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
OS_LABEL = "kubernetes.io/os"
ARCH_LABEL = "kubernetes.io/arch"
# Labels EKS puts on the nodes of a managed node group (EKS User Guide, "Managed node group capacity types":
# eks.amazonaws.com/capacityType ON_DEMAND, SPOT or CAPACITY_BLOCK; eks.amazonaws.com/nodegroup the node group's name).
EKS_CAPACITY_TYPE_LABEL = "eks.amazonaws.com/capacityType"
EKS_NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"

Size = Literal["desired", "max"]


@dataclass(frozen=True)
class NodeOptions:
    """How the plan's groups become nodes.

    size: every group at its ``desiredCapacity`` or at its ``maxSize``.
    nodes_per_domain: nodes under one network node of the lowest layer (``network-node-layer-3`` on p5); None: every
      node of a group under one. The layers above are shared by all nodes of a group in a zone.
    cordoned: node names made unschedulable (``kubectl cordon``).
    quarantined: node name -> reason, quarantined as ``efa-stack verify --acceptance --quarantine`` does it: cordoned
      and tainted ``efa-stack.io/quarantine=<reason>:NoSchedule`` (efa_stack/acceptance/run.py ``quarantine``).
    """

    size: Size = "desired"
    nodes_per_domain: int | None = None
    cordoned: tuple[str, ...] = ()
    quarantined: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.nodes_per_domain is not None and self.nodes_per_domain < 1:
            raise ValueError(f"nodes_per_domain must be at least 1, not {self.nodes_per_domain}")


def quarantine_patch(node: Mapping[str, Any], reason: str) -> dict[str, Any]:
    """The patch ``efa-stack verify --acceptance --quarantine`` sends for ``node``: cordoned and tainted
    ``efa-stack.io/quarantine=<reason>:NoSchedule``, its own taints kept (efa_stack/acceptance/run.py
    ``Runner.quarantine``: ``Node.spec.taints`` has no patch merge key, so the list is sent whole)."""
    kept = [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] != contract.QUARANTINE_TAINT_KEY]
    taint = {"key": contract.QUARANTINE_TAINT_KEY, "value": reason, "effect": "NoSchedule"}
    return {"spec": {"unschedulable": True, "taints": [*kept, taint]}}


def node_name(group: NodeGroupPlan, index: int) -> str:
    """``<node group>-<index>``: a DNS-1123 name (node group names are) that says where the node comes from."""
    return f"{group.name.lower()}-{index}"


def group_size(group: NodeGroupPlan, size: Size) -> int:
    return group.desired_size if size == "desired" else group.max_size


def max_pods(plan: ClusterPlan, group: NodeGroupPlan) -> int:
    """The kubelet's maxPods of ``group``'s nodes: the address plan's figure, else nodeadm's bound for the type."""
    if plan.addresses is not None:
        for g in plan.addresses.groups:
            if g.name == group.name and g.per_node is not None:
                return g.per_node.max_pods
    return max_pods_bound(group.instance)


def allocatable(plan: ClusterPlan, group: NodeGroupPlan) -> dict[str, str]:
    """What one node of ``group`` gives pods, as Node ``status.allocatable`` quantities."""
    pods = max_pods(plan, group)
    memory = allocatable_memory_mib(group.instance, pods) - group.hugepages_2mi_mib
    out = {
        "cpu": f"{allocatable_cpu_milli(group.instance.vcpus)}m",
        "memory": f"{memory}Mi",
        "pods": str(pods),
        "ephemeral-storage": f"{group.volume_size_gib}Gi",
        contract.HUGEPAGES_2MI_RESOURCE: f"{group.hugepages_2mi_mib}Mi",
    }
    if group.devices == contract.DEVICES_DRA:
        return out  # no device plugin runs there (k8s/scheduling.py NOT_ON_DRA_NODES): the DRA drivers publish them
    for resource, count in ((contract.GPU_RESOURCE, group.gpus_per_node),
                            (contract.EFA_RESOURCE, group.efa_devices_per_node),
                            (contract.NEURON_RESOURCE, group.neuron_devices_per_node)):
        if count:
            out[resource] = str(count)
    return out


def capacity(plan: ClusterPlan, group: NodeGroupPlan) -> dict[str, str]:
    """The node's ``status.capacity``: :func:`allocatable` with the whole machine's CPUs and memory."""
    return {**allocatable(plan, group), "cpu": str(group.instance.vcpus), "memory": f"{group.instance.memory_mib}Mi"}


def capacity_type(group: NodeGroupPlan) -> str:
    """The ``eks.amazonaws.com/capacityType`` of ``group``'s nodes."""
    if group.spot:
        return "SPOT"
    return "CAPACITY_BLOCK" if group.capacity == contract.CAPACITY_BLOCK else "ON_DEMAND"


def topology_labels(group: NodeGroupPlan, zone: str, index: int, nodes_per_domain: int | None) -> dict[str, str]:
    """``topology.k8s.aws/network-node-layer-1..N`` of node ``index`` of ``group`` in ``zone`` (none for an instance
    type without EC2 instance topology). The values name a network node, as EKS's ``nn-...`` do."""
    layers = network_layers(group.instance_type)
    out: dict[str, str] = {}
    for layer in range(1, layers + 1):
        domain = index // nodes_per_domain if layer == layers and nodes_per_domain else 0
        value = f"nn-{zone}-{group.name.lower()}-{layer}-{domain}"
        assert len(value) <= 63, f"label value {value} is longer than 63 characters"
        out[layer_label(layer)] = value
    return out


def group_nodes(plan: ClusterPlan, group: NodeGroupPlan, options: NodeOptions,
                indexes: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """The Node objects of ``group`` (zones taken in turn, as a node group spreads over its subnets): its members at
    the size ``options`` asks for, or those of ``indexes`` (more nodes of the group than the plan has, for a scenario
    that needs a spare one)."""
    parts = group.parts
    nodes = []
    for index in indexes if indexes is not None else range(group_size(group, options.size)):
        name = node_name(group, index)
        zone = group.availability_zones[index % len(group.availability_zones)]
        part = parts[index % len(parts)]
        labels = {
            HOSTNAME_LABEL: name,
            OS_LABEL: "linux",
            ARCH_LABEL: "arm64" if group.instance.arm64 else "amd64",
            contract.INSTANCE_TYPE_LABEL: group.instance_type,
            REGION_LABEL: plan.region,
            ZONE_LABEL: zone,
            EKS_CAPACITY_TYPE_LABEL: capacity_type(group),
            EKS_NODEGROUP_LABEL: part.name,
            **topology_labels(group, zone, index, options.nodes_per_domain),
            **gfd_labels(plan.name, group, index),
            **group.labels,
        }
        taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in group.taints]
        spec: dict[str, Any] = {"taints": taints} if taints else {}
        if name in options.quarantined:
            taints.append({"key": contract.QUARANTINE_TAINT_KEY, "value": options.quarantined[name],
                           "effect": "NoSchedule"})
            spec["taints"] = taints
        if name in options.cordoned or name in options.quarantined:
            spec["unschedulable"] = True
        nodes.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {NODE_ANNOTATION: NODE_ANNOTATION_VALUE}},
            "spec": spec,
            "status": {"allocatable": allocatable(plan, group), "capacity": capacity(plan, group),
                       "nodeInfo": {"kubeletVersion": f"v{plan.kubernetes_version}", "architecture": labels[ARCH_LABEL],
                                    "operatingSystem": "linux"}},
        })
    return nodes


def plan_nodes(plan: ClusterPlan, options: NodeOptions | None = None) -> list[dict[str, Any]]:
    """A Node object for every member of every managed node group of ``plan``, the system group first.

    Karpenter pools are not here: their nodes are launched by Karpenter for pending pods, which a rehearsal with
    Karpenter core's kwok provider would do."""
    options = options or NodeOptions()
    known = {node_name(g, i) for g in plan.all_node_groups for i in range(group_size(g, options.size))}
    unknown = sorted((set(options.cordoned) | set(options.quarantined)) - known)
    if unknown:
        raise ValueError(f"no node named {', '.join(unknown)} (the nodes: {', '.join(sorted(known))})")
    return [n for g in plan.all_node_groups for n in group_nodes(plan, g, options)]
