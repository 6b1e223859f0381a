"""What stands in for the parts of an UltraServer's ComputeDomains that need the hardware (docs/design/ultraservers.md):
the NVIDIA DRA driver's kubelet plugin, GPU feature discovery's clique label and Node Feature Discovery.

The kubelet plugin (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 ``cmd/compute-domain-kubelet-plugin``) reads the
GPUs through NVML and serves the kubelet's DRA calls; none of that runs here. :func:`serve` stands in for the two
things it does through the API server, as a process of its own under the plugin's ServiceAccount (so the chart's
RBAC for the plugin is what allows it, :class:`efa_stack.rehearsal.nvidia_dra.KubeletPluginStandIn`):

- on every node where a pod of the plugin's DaemonSet runs (the real scheduler places it by the release's values), the
  ResourceSlice it publishes (:func:`node_slice`): driver ``compute-domain.nvidia.com`` (main.go:42), one pool named
  after the node (driver.go ``NewDriver``: ``Pools: {nodeName: ...}``), its devices ``channel-0`` and ``daemon-0`` with
  the attributes ``type`` and ``id`` (nvlib.go ``enumerateComputeDomainChannels``/``enumerateComputeDomainDaemons``,
  deviceinfo.go ``GetDevice``, types.go:26-27; driver.go publishes channel 0 only of the 2048 it enumerates, nvlib.go
  ``getImexChannelCount``), owned by the Node and named as k8s.io/dynamic-resource-allocation's ResourceSlice
  controller names them (resourceslicecontroller.go ``generateName``); a node whose plugin pod is gone loses them;
- the node label ``resource.nvidia.com/computeDomain: <ComputeDomain UID>`` that the plugin sets when it prepares a
  channel claim on its node and removes when it unprepares it (computedomain.go:312-360 ``AddNodeLabel``,
  ``RemoveNodeLabel``; device_state.go:652 ``applyComputeDomainChannelConfig``), which the IMEX daemon DaemonSet the
  controller makes selects (templates/compute-domain-daemon.tmpl.yaml ``nodeSelector``). Here a claim counts as
  prepared while it is allocated on the node and reserved for a pod (kwok has no kubelet to call the plugin).

Not stood in: what a container gets (CDI edits, IMEX channels), the plugin's wait for the IMEX daemons before a channel
is prepared (``AssertComputeDomainReady``), the IMEX daemons themselves and the ComputeDomainCliques they write.

GPU feature discovery (NVIDIA/k8s-device-plugin@v0.19.3 ``internal/lm/imex.go``) labels each UltraServer node with its
NVLink domain, ``nvidia.com/gpu.clique: <cluster UUID>.<clique id>``, from the GPUs' fabric information;
:func:`gfd_labels` gives the rehearsal's nodes that label, one clique per UltraServer of the plan's
``ultraServerType`` size (a made-up UUID per UltraServer, clique id 0). Node Feature Discovery's release
(:func:`nfd_objects`) is stood in for by its Deployments and worker DaemonSet with the names of its chart at v0.18.3
and the release's placement: kwok runs their pods, no NFD process runs (the labels above are what NFD would write).
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from efa_stack import contract
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.rehearsal.client import Api, ApiError

DRIVER = "compute-domain.nvidia.com"
"""The kubelet plugin's driver name (cmd/compute-domain-kubelet-plugin/main.go:42)."""
COMPUTE_DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
"""The node label the plugin sets for the ComputeDomain whose channel it prepared (computedomain.go:41)."""
CHANNEL, DAEMON = "channel", "daemon"
"""The device types (types.go:26-27); a device is named ``<type>-<id>`` (deviceinfo.go ``CanonicalName``)."""
CHANNEL_CONFIG = "ComputeDomainChannelConfig"
"""The kind of the opaque configuration in a channel claim (the controller's workload claim template,
templates/compute-domain-workload-claim-template.tmpl.yaml, api/nvidia.com/resource/v1beta1 ``ComputeDomainChannelConfig``)."""
RESOURCE_API_VERSION = contract.RESOURCE_API_VERSION
SYNC_INTERVAL = 1.0
"""Seconds between two passes of the stand-in."""
CLIQUE_ID = 0


# --- the kubelet plugin --------------------------------------------------------------------------------------------
def devices() -> list[dict[str, Any]]:
    """The devices the plugin publishes on a node: channel 0 and daemon 0, each with ``type`` and ``id``."""
    return [{"name": f"{kind}-0", "attributes": {"type": {"string": kind}, "id": {"int": 0}}} for kind in (CHANNEL, DAEMON)]


def node_slice(node: Mapping[str, Any]) -> dict[str, Any]:
    """The ResourceSlice the plugin publishes for ``node`` (a Node object: its name and UID)."""
    name, uid = node["metadata"]["name"], node["metadata"]["uid"]
    return {
        "apiVersion": RESOURCE_API_VERSION, "kind": "ResourceSlice",
        "metadata": {"generateName": f"0-{DRIVER}-{name}-",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid,
                                          "controller": True}]},
        "spec": {"driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices()},
    }


def prepared_channels(claims: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node -> the ComputeDomain UID of the channel claim prepared there: a claim allocated a ``channel`` device of
    the driver on the node's pool and reserved for a pod, its domain from the claim's opaque channel configuration."""
    out: dict[str, str] = {}
    for claim in claims:
        status = claim.get("status") or {}
        devices_ = (status.get("allocation") or {}).get("devices") or {}
        if not status.get("reservedFor"):
            continue
        domains = [c["opaque"]["parameters"].get("domainID") for c in devices_.get("config") or []
                   if (c.get("opaque") or {}).get("driver") == DRIVER
                   and (c["opaque"].get("parameters") or {}).get("kind") == CHANNEL_CONFIG]
        for result in devices_.get("results") or []:
            if result.get("driver") == DRIVER and str(result.get("device", "")).startswith(f"{CHANNEL}-") and domains:
                out[result["pool"]] = str(domains[0])
    return out


def relabelled(labels: Mapping[str, str], wanted: str | None) -> dict[str, str] | None:
    """A node's labels with its ComputeDomain label following the channel prepared there (``wanted``: that channel's
    ComputeDomain, None without one), or None when they need no change. A node has one channel device, so a label of
    another ComputeDomain is that of a channel unprepared since (``RemoveNodeLabel``), replaced by the new one's
    (``AddNodeLabel``)."""
    if labels.get(COMPUTE_DOMAIN_LABEL) == wanted:
        return None
    out = {k: v for k, v in labels.items() if k != COMPUTE_DOMAIN_LABEL}
    return out if wanted is None else {**out, COMPUTE_DOMAIN_LABEL: wanted}


def sync(api: Api, namespace: str, selector: str) -> None:
    """One pass: the slices of the nodes the plugin's pods run on, and their ComputeDomain labels."""
    pods = api.list("v1", "Pod", namespace, label_selector=selector)
    running = {p["spec"]["nodeName"] for p in pods
               if p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") == "Running"
               and not p["metadata"].get("deletionTimestamp")}
    nodes = {n["metadata"]["name"]: n for n in api.list("v1", "Node")}
    slices = api.list(RESOURCE_API_VERSION, "ResourceSlice", field_selector=f"spec.driver={DRIVER}")
    published = {s["spec"]["nodeName"] for s in slices}
    for name in sorted(running - published):
        if name in nodes:
            _ok(api.create(node_slice(nodes[name])), f"ResourceSlice of {name}")
    for s in slices:
        if s["spec"]["nodeName"] not in running:
            _ok(api.delete({**s, "apiVersion": RESOURCE_API_VERSION, "kind": "ResourceSlice"}), "ResourceSlice")
    wanted = prepared_channels(api.list(RESOURCE_API_VERSION, "ResourceClaim"))
    for name in sorted(running & set(nodes)):
        node = nodes[name]
        labels = relabelled(node["metadata"].get("labels") or {}, wanted.get(name))
        if labels is None:
            continue
        # an update, as the plugin's (its ClusterRole may update nodes, not patch them)
        body = {**node, "apiVersion": "v1", "kind": "Node", "metadata": {**node["metadata"], "labels": labels}}
        got = api.request("PUT", api.path(body), body)
        if got.status != 409:  # changed meanwhile: the next pass sees it again
            _ok(got, f"Node {name}")


def _ok(got: Any, what: str) -> None:
    if not got.ok and got.status not in (404, 409):
        raise ApiError(f"{what}: {got.message()}")


def api_from_kubeconfig(path: Path) -> Api:
    """An :class:`Api` from a kubeconfig the rehearsal wrote (server, CA file, token)."""
    config = yaml.safe_load(path.read_text())
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    return Api(cluster["server"], ssl.create_default_context(cafile=cluster["certificate-authority"]), user["token"])


def serve(argv: Sequence[str] | None = None) -> None:
    """The stand-in's process: :func:`sync` every :data:`SYNC_INTERVAL` seconds under the kubeconfig of
    ``$KUBECONFIG``; ``--ready`` is written after the first pass."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--selector", required=True, help="label selector of the plugin's pods")
    parser.add_argument("--ready", type=Path, required=True)
    args = parser.parse_args(argv)
    api = api_from_kubeconfig(Path(os.environ["KUBECONFIG"]))
    while True:
        try:
            sync(api, args.namespace, args.selector)
            args.ready.touch()
        except (ApiError, OSError) as err:  # the API server restarting, a refusal: said, and tried again
            print(f"sync: {err}", file=sys.stderr, flush=True)
        time.sleep(SYNC_INTERVAL)


# --- GPU feature discovery and Node Feature Discovery ---------------------------------------------------------------
def clique(cluster: str, group: NodeGroupPlan, index: int) -> str | None:
    """The ``nvidia.com/gpu.clique`` of node ``index`` of ``group`` (None for a group of no UltraServer): nodes
    ``0..n-1`` are the first UltraServer's, ``n..2n-1`` the second's, n being the UltraServer type's instances."""
    if group.ultraserver is None:
        return None
    server = index // group.ultraserver.domain_nodes
    domain = uuid.uuid5(uuid.NAMESPACE_URL, f"efa-stack-rehearsal/{cluster}/{group.name}/{server}")
    return f"{domain}.{CLIQUE_ID}"


def gfd_labels(cluster: str, group: NodeGroupPlan, index: int) -> dict[str, str]:
    """The labels GFD gives node ``index`` of ``group`` through NFD that efa-stack reads: its clique."""
    value = clique(cluster, group, index)
    return {contract.GPU_CLIQUE_LABEL: value} if value is not None else {}


NFD_VERSION = "v0.18.3"
NFD_IMAGE = f"registry.k8s.io/nfd/node-feature-discovery:{NFD_VERSION}"
"""The chart's image (deployment/helm/node-feature-discovery/values.yaml ``image.repository``, tag the appVersion)."""


def nfd_objects(namespace: str, values: Mapping[str, Any], release: str = contract.NFD_RELEASE) -> list[dict[str, Any]]:
    """Node Feature Discovery's release stood in for (module docstring): its Namespace, the ServiceAccounts and the
    master and garbage-collector Deployments and the worker DaemonSet of kubernetes-sigs/node-feature-discovery@v0.18.3
    deployment/helm/node-feature-discovery (templates/master.yaml, nfd-gc.yaml, worker.yaml: ``<fullname>-master``,
    ``-gc``, ``-worker``, labelled ``role``, the release being the fullname), placed by the release's values
    (``nodeSelector``, ``affinity``, ``tolerations``; the chart's own defaults for those, a control-plane toleration
    and preference, are left out: the rehearsal's nodes have no control-plane role)."""
    selector = {"app.kubernetes.io/name": release, "app.kubernetes.io/instance": release}
    out: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    accounts = {"master": release, "gc": f"{release}-gc", "worker": f"{release}-worker"}
    for role, account in accounts.items():
        out.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}})
        part = values.get(role) or {}
        labels = {**selector, "role": role}
        spec = {"serviceAccountName": account, "containers": [{"name": role, "image": NFD_IMAGE}],
                **{k: part[k] for k in ("nodeSelector", "affinity", "tolerations") if part.get(k)}}
        template = {"metadata": {"labels": labels}, "spec": spec}
        kind, extra = ("DaemonSet", {}) if role == "worker" else ("Deployment", {"replicas": 1})
        out.append({"apiVersion": "apps/v1", "kind": kind,
                    "metadata": {"name": f"{release}-{role}", "namespace": namespace, "labels": labels},
                    "spec": {**extra, "selector": {"matchLabels": labels}, "template": template}})
    return out


if __name__ == "__main__":
    serve()
