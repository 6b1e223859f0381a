"""The DRA drivers in the rehearsal: where each runs, and what it would publish on the nodes it runs on, so that the
real kube-scheduler allocates the claims efa-stack renders (docs/design/dra.md).

No driver runs here (no kubelet, no devices). In its place, for every Helm release of a DRA driver the rollout installs
(:meth:`efa_stack.rehearsal.rehearsal.Rehearsal.install`):

- :func:`stand_in_objects`: what the chart creates that the cluster acts on: its DeviceClass (k8s/dra.py
  ``device_classes``, as the chart renders it) and its kubelet plugin's DaemonSet with the chart's placement fields
  rendered from the release's values (:func:`placement`), so that the real DaemonSet controller and scheduler decide
  which nodes run the driver;
- :func:`node_slice`: on every node where that DaemonSet's pod runs, one ResourceSlice per driver with the node's
  devices from the catalog: the node group's EFA devices, GPUs or Neuron devices, and where data/dra_devices.json has
  the instance type's PCIe roots, the ``resource.kubernetes.io/pcieRoot`` of each device, owned by the Node as the
  drivers' slices are (k8s.io/dynamic-resource-allocation@v0.35.4 kubeletplugin/draplugin.go ``PublishResources``:
  the owner is the Node; resourceslice/resourceslicecontroller.go: a controller owner reference), so they go with it.
  Device names and attributes are formed as the drivers form them (kubernetes-sigs/dranet@v1.2.0
  ``pkg/names.NormalizePCIAddress``, ``pkg/apis/attributes.go``; kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1
  ``cmd/gpu-kubelet-plugin/deviceinfo.go`` ``gpu-<minor>``; Neuron's ``neurondevice<i>``, aws-neuron/aws-neuron-sdk
  ``containers/neuron-dra.rst``); the PCI addresses are made up.

A ``devices: dra`` node advertises none of the device plugins' resources (efa_stack/rehearsal/nodes.py
``allocatable``).

Rehearsed: where the drivers run (their DaemonSets placed by the real controllers), the scheduler's allocation of
every claim against these slices (counts, the ``matchAttribute`` pairing of a GPU with its PCIe root's EFA devices,
no device given twice). Not rehearsed: the drivers themselves (discovery, ``NodePrepareResources``, what a container
sees) and the rest of their charts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from efa_stack import contract
from efa_stack.planning import dra
from efa_stack.planning.dra import DeviceKind
from efa_stack.planning.node_groups import NodeGroupPlan, Taint
from efa_stack.planning.plan import ClusterPlan
from efa_stack.rehearsal.client import Api, ApiError, poll
from k8s import dra as k8s_dra
from k8s.components import AWS_DRANET, NEURON_DRA, NVIDIA_DRA_DRIVER
from k8s.rollout import HelmRelease

RELEASE_KINDS: dict[str, DeviceKind] = {AWS_DRANET: "efa", NVIDIA_DRA_DRIVER: "gpu", NEURON_DRA: "neuron"}
"""The rollout's DRA driver releases (component id) and the device kind each publishes."""
EFA_PCI_DEVICE = "Elastic Fabric Adapter (EFA)"
EFA_FIRST_FUNCTION = 0x1B
"""The PCI device number of a root's first EFA in dranet's recorded p4d slices (``0000:10:1b.0``)."""


def release_kind(component: str, release: HelmRelease) -> DeviceKind | None:
    """The device kind the release publishes, or None for a release that is no DRA driver, or (the NVIDIA release with
    ComputeDomains only) publishes no GPUs."""
    kind = RELEASE_KINDS.get(component)
    if kind == "gpu" and not ((release.values.get("resources") or {}).get("gpus") or {}).get("enabled"):
        return None
    return kind


DRIVER_LABEL = "app.kubernetes.io/name"
"""The label of the stand-in DaemonSet's pods: the release's name."""


def driver_daemonset(release: HelmRelease, where: Mapping[str, Any]) -> dict[str, Any]:
    """The release's kubelet plugin DaemonSet, as far as placement goes: its pods carry the chart's ``nodeSelector``,
    required node affinity and tolerations (``where``); named after the release, in its namespace."""
    labels = {DRIVER_LABEL: release.name}
    pod: dict[str, Any] = {"containers": [{"name": "kubelet-plugin", "image": f"{release.chart}:{release.version}"}]}
    pod.update({k: v for k, v in where.items() if v})
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": release.name, "namespace": release.namespace, "labels": labels},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}


def stand_in_objects(component: str, release: HelmRelease) -> list[dict[str, Any]]:
    """What the driver's chart creates that the rehearsal needs: its DeviceClass and its DaemonSet (in the release's
    namespace, which ``helm upgrade --install --create-namespace`` creates)."""
    kind = release_kind(component, release)
    assert kind is not None, release.name
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": release.namespace}}
    return [namespace, *k8s_dra.device_classes([kind]), driver_daemonset(release, placement(component, release))]


def placement(component: str, release: HelmRelease) -> dict[str, Any]:
    """Where the release's DaemonSet runs: its chart's placement fields rendered with the release's values."""
    if component == AWS_DRANET:
        return k8s_dra.dranet_placement(release.values, dra.dranet_instance_types())
    if component == NEURON_DRA:
        return k8s_dra.neuron_dra_placement(release.values)
    return k8s_dra.nvidia_gpu_placement(release.values)


def _roots(group: NodeGroupPlan) -> list[str] | None:
    """The node's PCIe roots as the drivers name them, or None without PCIe-root data for the type."""
    data = dra.pcie_roots(group.instance_type)
    if data is None:
        return None
    count = data.roots(group.gpus_per_node)
    return list(data.names) if data.names else [f"pci0000:{0x10 * (i + 1):02x}" for i in range(count)]


def _efa_device(address: str, root: str | None, numa: int) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        f"{contract.EFA_DRA_DRIVER}/pciAddress": {"string": address},
        f"{contract.EFA_DRA_DRIVER}/pciDevice": {"string": EFA_PCI_DEVICE},
        f"{contract.EFA_DRA_DRIVER}/pciVendor": {"string": "Amazon.com, Inc."},
        f"{contract.EFA_DRA_DRIVER}/rdma": {"bool": True},
        f"{contract.EFA_DRA_DRIVER}/numaNode": {"int": numa},
    }
    if root is not None:
        attributes[contract.PCIE_ROOT_ATTRIBUTE] = {"string": root}
    return {"name": "pci-" + address.replace(":", "-").replace(".", "-"), "attributes": attributes}


def efa_devices(group: NodeGroupPlan) -> list[dict[str, Any]]:
    """The EFA devices dranet publishes on a node of ``group`` (with the chart's filter: EFA devices only), in root
    order ``efaPerRoot`` on each PCIe root where the data has the type's roots, the first half on NUMA node 0."""
    roots, data = _roots(group), dra.pcie_roots(group.instance_type)
    count = group.efa_devices_per_node
    out = []
    for i in range(count):
        root = roots[i // data.efa_per_root] if roots and data and i // data.efa_per_root < len(roots) else None
        if root is not None and data is not None:
            bus, function = root.removeprefix("pci0000:"), EFA_FIRST_FUNCTION + i % data.efa_per_root
        else:
            bus, function = f"{i + 1:02x}", EFA_FIRST_FUNCTION
        out.append(_efa_device(f"0000:{bus}:{function:02x}.0", root, 0 if i < count // 2 else 1))
    return out


def gpu_devices(group: NodeGroupPlan) -> list[dict[str, Any]]:
    """The GPUs the NVIDIA DRA driver publishes on a node of ``group``: ``gpu-<i>`` of ``type`` gpu, the catalog's
    product and memory, each on its PCIe root (``gpusPerRoot`` per root) where the data has them, in the recorded
    order where a source names the roots (p4d.24xlarge: gpu-0 and gpu-1 on the first)."""
    roots, data = _roots(group), dra.pcie_roots(group.instance_type)
    gpu = group.instance.gpu
    assert gpu is not None
    out = []
    for i in range(group.gpus_per_node):
        attributes: dict[str, Any] = {
            "type": {"string": "gpu"},
            "productName": {"string": gpu.name},
            "uuid": {"string": f"GPU-{i:08x}-0000-0000-0000-000000000000"},
        }
        if roots and data:
            # where no source names the roots, the GPUs are numbered from the last root down: the first GPU and the
            # first EFA devices of the slices are then on different roots, so only the claims' constraint pairs them
            root = i // data.gpus_per_root if data.names else len(roots) - 1 - i // data.gpus_per_root
            attributes[contract.PCIE_ROOT_ATTRIBUTE] = {"string": roots[root]}
        out.append({"name": f"gpu-{i}", "attributes": attributes,
                    "capacity": {"memory": {"value": f"{gpu.memory_mib}Mi"}}})
    return out


def neuron_devices(group: NodeGroupPlan) -> list[dict[str, Any]]:
    """The Neuron devices of a node of ``group``: ``neurondevice<i>`` with its ``instanceType``."""
    return [{"name": f"neurondevice{i}", "attributes": {"instanceType": {"string": group.instance_type}}}
            for i in range(group.neuron_devices_per_node)]


DEVICES = {"efa": efa_devices, "gpu": gpu_devices, "neuron": neuron_devices}


def node_slice(node: Mapping[str, Any], kind: DeviceKind, group: NodeGroupPlan) -> dict[str, Any]:
    """The ResourceSlice of driver ``kind`` on ``node`` (a live Node: its name and uid), one pool named after the node,
    one slice, owned by the node, as the drivers' ``resourceslice`` controller publishes a node's devices."""
    driver = dra.DRIVERS[kind]
    name, uid = node["metadata"]["name"], node["metadata"].get("uid")
    meta: dict[str, Any] = {"name": f"{name}-{driver}"}
    if uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid, "controller": True}]
    return {
        "apiVersion": contract.RESOURCE_API_VERSION, "kind": contract.RESOURCE_SLICE_KIND, "metadata": meta,
        "spec": {"driver": driver, "nodeName": name,
                 "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                 "devices": DEVICES[kind](group)},
    }


def published_slices(plan: ClusterPlan, component: str, release: HelmRelease,
                     nodes: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ResourceSlices the release's driver publishes on ``nodes`` (the live nodes its DaemonSet's pods run on)."""
    kind = release_kind(component, release)
    if kind is None:
        return []
    out = []
    for node in nodes:
        group = plan.node_group(node["metadata"]["labels"][contract.LABEL_NODE_GROUP])
        if dra.devices_per_node(group, kind):
            out.append(node_slice(node, kind, group))
    return out


DRIVER_TIMEOUT = 120
"""Seconds for a driver's DaemonSet pod to run on every node it must run on (kwok runs a bound pod at once)."""


NODE_CONDITION_TAINTS = "node.kubernetes.io/"
"""The prefix of the taints Kubernetes itself puts on a node: a DaemonSet's pod tolerates those for memory, disk and PID
pressure and ``unschedulable`` (kubernetes@v1.35.4 pkg/controller/daemon/util/daemonset_util.go
``AddOrUpdateDaemonPodTolerations``), and ``not-ready`` stays on a node that kwok just reported Ready until the node
lifecycle controller takes it off, after which the pod is placed."""


def _taints(node: Mapping[str, Any]) -> list[Taint]:
    """The node's own taints (its group's, a quarantine), without those Kubernetes puts on by node condition."""
    return [Taint(t["key"], t.get("value", ""), t["effect"]) for t in (node.get("spec") or {}).get("taints") or []
            if not t["key"].startswith(NODE_CONDITION_TAINTS)]


def driver_pods(api: Api, release: HelmRelease) -> list[dict[str, Any]]:
    """The pods of the release's stand-in DaemonSet."""
    return api.list("v1", "Pod", release.namespace, label_selector=f"{DRIVER_LABEL}={release.name}")


def _running_on(api: Api, release: HelmRelease) -> set[str]:
    return {p["spec"]["nodeName"] for p in driver_pods(api, release)
            if (p.get("status") or {}).get("phase") == "Running" and p["spec"].get("nodeName")}


def publish(api: Api, plan: ClusterPlan, drivers: Iterable[tuple[str, HelmRelease]],
            timeout: float = DRIVER_TIMEOUT) -> None:
    """What the installed ``drivers`` (component, release) publish once their pods run: wait until the DaemonSet's pod
    runs on every live node its placement admits (:func:`k8s.dra.runs_on`; a node added since, too), then apply the
    ResourceSlices of every node it runs on. ApiError when a pod never runs where it should, or a slice is refused."""
    for component, release in drivers:
        where = placement(component, release)
        nodes = {n["metadata"]["name"]: n for n in api.list("v1", "Node")}
        want = {name for name, n in nodes.items()
                if k8s_dra.runs_on(where, n["metadata"].get("labels") or {}, _taints(n))}

        def everywhere(r: HelmRelease = release, w: set[str] = want) -> set[str] | None:
            got = _running_on(api, r)
            return got if w <= got else None

        try:
            running = poll(f"DaemonSet {release.namespace}/{release.name} running on {sorted(want)}", everywhere, timeout)
        except TimeoutError as err:
            raise ApiError(f"{err} (it runs on {sorted(_running_on(api, release))})") from None
        for obj in published_slices(plan, component, release, [nodes[n] for n in sorted(running) if n in nodes]):
            got = api.apply(obj)
            if not got.ok:
                raise ApiError(f"ResourceSlice {obj['metadata']['name']}: {got.message()}")
