"""ComputeDomains and what runs for them on UltraServer node groups (docs/design/ultraservers.md).

* :class:`ComputeDomain`: one per job (EKS's GB200 page: "It is a best practice to create a ComputeDomain per workload
  job"), in the API version the pinned NVIDIA DRA driver serves (``resource.nvidia.com/v1beta1`` at v0.4.1, with
  ``numNodes: 0``: "deprecated and will be removed in the next API version",
  kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 api/nvidia.com/resource/v1beta1/computedomain.go:62-92). The driver's
  controller creates the channel's ``ResourceClaimTemplate`` from it; the workers claim it
  (:func:`worker_claims`, :func:`channel_claim`).
* :func:`clique_affinity`: a job that fits one NVLink domain keeps its workers in one ``nvidia.com/gpu.clique``.
* :class:`GpuFeatureDiscovery`: NVIDIA's GFD DaemonSet on the UltraServer nodes, which labels the clique.
* :func:`nvidia_dra_values` and :func:`nfd_values`: the Helm values of the NVIDIA DRA driver (ComputeDomains only,
  GPUs stay on the device plugin) and of Node Feature Discovery (which turns GFD's features into node labels).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cdk8s
from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract
from efa_stack.planning.node_groups import ComputeDomainPlan, NodeGroupPlan, Taint
from k8s.images import NVIDIA_DEVICE_PLUGIN_IMAGE
from k8s.scheduling import (
    SYSTEM_NODE_CRITICAL,
    LabelRequirement,
    node_daemon_set,
    required_node_affinity,
    system_node_selector,
    tolerations,
)

# --- the charts the rollout installs (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 docs/install.md;
# kubernetes-sigs/node-feature-discovery@v0.18.3 docs/_config.yml helm_oci_repo, helm_chart_version) --------------
NVIDIA_DRA_CHART = "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"
NVIDIA_DRA_VERSION = "0.4.1"
NFD_CHART = "oci://registry.k8s.io/nfd/charts/node-feature-discovery"
NFD_VERSION = "0.18.3"
FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
"""Where GFD writes its features for NFD's worker (NVIDIA/k8s-device-plugin@v0.19.3
deployments/static/gpu-feature-discovery-daemonset.yaml, the ``output-dir`` hostPath)."""


class ComputeDomain(Construct):
    """A ``ComputeDomain`` (``resource.nvidia.com/v1beta1``) whose channel template the job's workers claim."""

    def __init__(self, scope: Construct, id: str, plan: ComputeDomainPlan, labels: Mapping[str, str] | None = None) -> None:
        super().__init__(scope, id)
        self.api_object = cdk8s.ApiObject(
            self, "Resource", api_version=contract.COMPUTE_DOMAIN_API_VERSION, kind=contract.COMPUTE_DOMAIN_KIND,
            metadata=cdk8s.ApiObjectMetadata(name=plan.name, namespace=plan.namespace, labels=dict(labels or {})),
        )
        # numNodes 0: IMEX daemons start on each node as its pods arrive (the v0.4.1 default, featureGates
        # IMEXDaemonsWithDNSNames=true); allocationMode Single: one channel per pod (the CRD's default, written out).
        self.api_object.add_json_patch(cdk8s.JsonPatch.add("/spec", {
            "numNodes": 0,
            "channel": {"resourceClaimTemplate": {"name": plan.channel_claim_template}, "allocationMode": "Single"},
        }))


def worker_claims(plan: ComputeDomainPlan | None) -> list[k8s_l1.PodResourceClaim]:
    """The worker pod's ``resourceClaims``: its ComputeDomain's channel (none without a ComputeDomain)."""
    if plan is None:
        return []
    return [k8s_l1.PodResourceClaim(name=contract.COMPUTE_DOMAIN_CLAIM,
                                    resource_claim_template_name=plan.channel_claim_template)]


def channel_claim(plan: ComputeDomainPlan | None) -> list[k8s_l1.ResourceClaim]:
    """The worker container's ``resources.claims``: the channel claim (none without a ComputeDomain)."""
    return [k8s_l1.ResourceClaim(name=contract.COMPUTE_DOMAIN_CLAIM)] if plan is not None else []


def clique_affinity(plan: ComputeDomainPlan | None, worker_labels: Mapping[str, str]) -> k8s_l1.PodAffinity | None:
    """Required pod affinity of the workers to each other on ``nvidia.com/gpu.clique`` when the job fits one NVLink
    domain (the EKS GB200 page's nvbandwidth job does the same); None for a job that spans domains (its workers meet
    over EFA) or without a ComputeDomain. The first worker matches its own labels, so it may land in any domain."""
    if plan is None or not plan.within_domain:
        return None
    return k8s_l1.PodAffinity(required_during_scheduling_ignored_during_execution=[
        k8s_l1.PodAffinityTerm(topology_key=contract.GPU_CLIQUE_LABEL,
                               label_selector=k8s_l1.LabelSelector(match_labels=dict(worker_labels))),
    ])


def ultraserver_groups(groups: Sequence[NodeGroupPlan]) -> list[NodeGroupPlan]:
    return [g for g in groups if g.ultraserver is not None]


def _on_groups(groups: Sequence[NodeGroupPlan]) -> LabelRequirement:
    return LabelRequirement(contract.LABEL_NODE_GROUP, "In", tuple(sorted(g.labels[contract.LABEL_NODE_GROUP]
                                                                         for g in groups)))


def _toleration_values(taints: Sequence[Taint]) -> list[dict[str, str]]:
    return [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in taints]


def _node_affinity_values(groups: Sequence[NodeGroupPlan], *extra: LabelRequirement) -> dict[str, Any]:
    terms = [{"key": r.key, "operator": r.operator, "values": list(r.values)} for r in (*extra, _on_groups(groups))]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": terms}]}}}


def nvidia_dra_values(groups: Sequence[NodeGroupPlan], taints: Sequence[Taint]) -> dict[str, Any]:
    """The NVIDIA DRA driver's values (chart ``dra-driver-nvidia-gpu`` 0.4.1, values.yaml): ComputeDomains only,
    ``resources.gpus.enabled: false`` (the chart refuses GPU allocation unless ``gpuResourcesEnabledOverride`` promises
    that no NVIDIA device plugin runs on the node, templates/validation.yaml: efa-stack's does), as on EKS's GB200
    page; the controller on the system nodes; the kubelet plugin on the UltraServer node groups only (the page's
    ``nvidia.com/gpu.present`` affinity is the GPU Operator's label, which GFD v0.19.3 does not set, so efa-stack
    selects by its own node group label), tolerating their taints. ``resourceApiVersion`` stays auto-detected
    (``resource.k8s.io/v1`` on EKS 1.34 and later); the webhook stays off (v1beta1 needs no conversion)."""
    return {
        "resources": {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}},
        "gpuResourcesEnabledOverride": False,
        "controller": {"nodeSelector": system_node_selector(), "tolerations": [], "affinity": {}},
        "kubeletPlugin": {"affinity": _node_affinity_values(groups), "tolerations": _toleration_values(taints)},
        "webhook": {"enabled": False},
    }


def nfd_values(groups: Sequence[NodeGroupPlan], taints: Sequence[Taint]) -> dict[str, Any]:
    """Node Feature Discovery's values (chart 0.18.3, values.yaml): the master and the garbage collector on the system
    nodes, the worker (which reads GFD's features file) on the UltraServer node groups, tolerating their taints."""
    system = system_node_selector()
    return {
        "master": {"nodeSelector": system},
        "gc": {"nodeSelector": system},
        "worker": {"affinity": _node_affinity_values(groups), "tolerations": _toleration_values(taints)},
    }


@dataclass(frozen=True)
class GpuFeatureDiscoveryProps:
    """groups: the UltraServer node groups GFD runs on; tolerate: their taints; image: GFD ships in the NVIDIA device
    plugin image (default :data:`k8s.images.NVIDIA_DEVICE_PLUGIN_IMAGE`, the plugin efa-stack runs)."""

    groups: tuple[NodeGroupPlan, ...]
    tolerate: tuple[Taint, ...] = ()
    image: str = NVIDIA_DEVICE_PLUGIN_IMAGE


class GpuFeatureDiscovery(Construct):
    """NVIDIA's GPU feature discovery as its static manifest deploys it (NVIDIA/k8s-device-plugin@v0.19.3
    deployments/static/gpu-feature-discovery-daemonset.yaml: ``/usr/bin/gpu-feature-discovery``, privileged, ``/sys``
    and the features directory from the host, ``MIG_STRATEGY=none``), in ``kube-system`` on the UltraServer node
    groups. It labels ``nvidia.com/gpu.clique`` from the GPUs' fabric IDs (internal/lm/imex.go)."""

    def __init__(self, scope: Construct, id: str, props: GpuFeatureDiscoveryProps) -> None:
        super().__init__(scope, id)
        selector = {"app.kubernetes.io/name": contract.GPU_FEATURE_DISCOVERY_NAME}
        self.daemon_set = node_daemon_set(
            self, "DaemonSet", name=contract.GPU_FEATURE_DISCOVERY_NAME, namespace=contract.KUBE_SYSTEM,
            labels=selector, selector=selector,
            host_access_reason=("reads the GPUs' fabric IDs through NVML and /sys, and writes the NVLink domain "
                                f"(nvidia.com/gpu.clique) to the host's {FEATURES_DIR} for Node Feature Discovery"),
            pod=k8s_l1.PodSpec(
                priority_class_name=SYSTEM_NODE_CRITICAL,
                automount_service_account_token=False,
                tolerations=tolerations(props.tolerate, critical_addons=True),
                affinity=required_node_affinity(_on_groups(props.groups)),
                containers=[k8s_l1.Container(
                    name=contract.GPU_FEATURE_DISCOVERY_NAME, image=props.image,
                    command=["/usr/bin/gpu-feature-discovery"],
                    env=[k8s_l1.EnvVar(name="MIG_STRATEGY", value="none")],
                    security_context=k8s_l1.SecurityContext(privileged=True),
                    volume_mounts=[k8s_l1.VolumeMount(name="output-dir", mount_path=FEATURES_DIR),
                                   k8s_l1.VolumeMount(name="host-sys", mount_path="/sys")],
                )],
                volumes=[
                    k8s_l1.Volume(name="output-dir", host_path=k8s_l1.HostPathVolumeSource(
                        path=FEATURES_DIR, type="DirectoryOrCreate")),
                    k8s_l1.Volume(name="host-sys", host_path=k8s_l1.HostPathVolumeSource(path="/sys", type="Directory")),
                ],
            ),
        )
