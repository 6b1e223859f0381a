"""Karpenter's CRDs and, per EFA pool, an ``EC2NodeClass``, a ``NodePool`` and (for hugepages) a ``NodeOverlay``.

Two constructs, one per chart (k8s/charts.py): :class:`KarpenterCrds` (the five CRDs of ``k8s/crds/karpenter/``,
aws/karpenter-provider-aws tag v1.15.1 pkg/apis/crds/, what the chart's ``crds/`` directory installs; the cluster
stack installs the chart with ``skipCrds`` and applies these instead, so that dist/ holds them too) and
:class:`KarpenterPools` (the objects of :func:`pool_documents`). The controller itself (IAM, interruption queue,
Helm release) is :mod:`aws_constructs.karpenter`. Field names and rules are those of the vendored CRDs; the design
and its evidence: docs/design/karpenter.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from constructs import Construct

from efa_stack import contract
from efa_stack.planning.karpenter import (
    BUDGETS,
    CONSOLIDATION_POLICY,
    EXPIRE_AFTER,
    TERMINATION_GRACE_PERIOD,
    KarpenterPlan,
    KarpenterPoolPlan,
)
from efa_stack.planning.user_data import node_user_data
from k8s.objects import api_object, documents

CRD_DIR = Path(__file__).parent / "crds" / "karpenter"
EC2NODECLASS_CRD = f"ec2nodeclasses.{contract.KARPENTER_AWS_GROUP}"
NODEPOOL_CRD = f"nodepools.{contract.KARPENTER_GROUP}"
NODEOVERLAY_CRD = f"nodeoverlays.{contract.KARPENTER_GROUP}"
POOL_KIND_CRDS = (EC2NODECLASS_CRD, NODEPOOL_CRD, NODEOVERLAY_CRD)
"""The CRDs whose kinds :class:`KarpenterPools` renders: established before the pools are applied."""

ZONE_LABEL = "topology.kubernetes.io/zone"
"""Kubernetes well-known label (kubernetes.io/docs/reference/labels-annotations-taints), a NodePool requirement key
(website/content/en/v1.14/concepts/scheduling.md "Well-Known Labels")."""
CLUSTER_SECURITY_GROUP_TAG = "aws:eks:cluster-name"
"""EKS tags the cluster security group it creates ``aws:eks:cluster-name: <cluster>`` (EKS User Guide, "View Amazon EKS
security group requirements for clusters", default cluster security group tags); the EC2NodeClass selects it by that
tag, beside the EFA security group the stack's network tags with :data:`efa_stack.contract.KARPENTER_DISCOVERY_TAG`."""
ROOT_DEVICE = "/dev/xvda"
"""The root device of the AL2023 AMIs (aws/karpenter-provider-aws@v1.15.1 pkg/providers/amifamily/al2023.go
``EphemeralBlockDevice``), the one a node group's launch template sizes too."""

def crd_documents() -> list[dict[str, Any]]:
    """The vendored Karpenter CRDs (a fresh copy per call)."""
    return [d for path in sorted(CRD_DIR.glob("*.yaml")) for d in documents(path)]


def node_class_spec(pool: KarpenterPoolPlan, plan: KarpenterPlan, node_role: str,
                    subnet_ids: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``EC2NodeClass`` spec of ``pool`` (pkg/apis/v1/ec2nodeclass.go at the tag).

    ``networkInterfaces`` are the twin's interfaces, the same tuple the node group's launch template declares
    (:func:`efa_stack.planning.layout.interface_layout`); ``userData`` the same document as the launch template's
    (:func:`efa_stack.planning.user_data.node_user_data`: hugepages, Lustre client) without the kubelet's NodeConfig,
    whose keys go in the ``kubelet`` block instead; Karpenter keeps the user data as the first parts of a MIME archive
    and follows them with its own NodeConfig, whose values win (pkg/providers/amifamily/bootstrap/nodeadm.go
    ``Script``: ``append(customEntries, <its NodeConfig>)``; concepts/nodeclasses.md "spec.userData", AL2023: "Any
    values configured by the Karpenter generated NodeConfig object will take precedent").
    ``subnet_ids``: an existing VPC's private subnets of the pool's zone; none: the stack's own private subnets
    by their discovery tag (the NodePool's zone requirement picks the pool's).
    """
    g = pool.group
    discovery = {contract.KARPENTER_DISCOVERY_TAG: plan.cluster}
    spec: dict[str, Any] = {
        "amiSelectorTerms": [{"alias": pool.ami_alias}],
        "role": node_role,
        "subnetSelectorTerms": [{"id": s} for s in subnet_ids] or [{"tags": dict(discovery)}],
        "securityGroupSelectorTerms": [
            {"tags": dict(discovery)},
            {"tags": {CLUSTER_SECURITY_GROUP_TAG: plan.cluster}},
        ],
        "networkInterfaces": [
            {"networkCardIndex": i.network_card_index, "deviceIndex": i.device_index, "interfaceType": i.interface_type}
            for i in g.interfaces
        ],
        "metadataOptions": {
            "httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        },
        "blockDeviceMappings": [{
            "deviceName": ROOT_DEVICE,
            "rootVolume": True,
            "ebs": {
                "volumeSize": f"{g.volume_size_gib}Gi", "volumeType": g.volume_type, "encrypted": True,
                "deleteOnTermination": True,
                **({"iops": g.volume_iops} if g.volume_iops is not None else {}),
                **({"throughput": g.volume_throughput} if g.volume_throughput is not None else {}),
            },
        }],
        "tags": {contract.TAG_CLUSTER: plan.cluster, contract.LABEL_NODE_GROUP: g.name},
    }
    # ``placementGroupSelector`` takes ``name`` or ``id`` (pkg/apis/v1/ec2nodeclass.go ``PlacementGroupSelector``;
    # CRD: one of the two, ``name`` minLength 1): the existing group the spec names, or the stack's new one, whose
    # name is fixed for that reason (:func:`efa_stack.planning.karpenter.placement_group_name`).
    if pool.placement_group_name:
        spec["placementGroupSelector"] = {"name": pool.placement_group_name}
    if pool.reservation_ids:
        spec["capacityReservationSelectorTerms"] = [{"id": r} for r in pool.reservation_ids]
    # ``kubelet``: at v1.15.1 any field of the upstream KubeletConfiguration (pkg/apis/v1/ec2nodeclass.go
    # ``KubeletConfiguration``, an open map; the CRD's schema preserves unknown fields). Karpenter checks it against
    # k8s.io/kubelet's type (kubeletconfiguration_validation.go ``ValidateKubeletConfig``: ValidationSucceeded False
    # on a bad field, which blocks launches) and writes it into the node's NodeConfig (bootstrap/nodeadm.go
    # ``generateInlineKubeletConfiguration``), so the CPU and topology manager settings go here rather than in a
    # NodeConfig of the user data. ``maxPods``: VPC CNI custom networking's figure, which Karpenter both simulates and
    # writes (:attr:`efa_stack.planning.karpenter.KarpenterPoolPlan.max_pods`); absent otherwise, Karpenter's own.
    kubelet: dict[str, Any] = dict(g.kubelet.as_kubelet_config())
    if pool.max_pods is not None:
        kubelet["maxPods"] = pool.max_pods
    if kubelet:
        spec["kubelet"] = kubelet
    user_data = node_user_data(g.hugepages_2mi_mib, g.lustre_client, lustre_efa=g.lustre_efa)
    if user_data:
        spec["userData"] = user_data
    return spec


def node_pool_spec(pool: KarpenterPoolPlan) -> dict[str, Any]:
    """The ``NodePool`` spec of ``pool`` (karpenter.sh_nodepools.yaml at the tag): one instance type, one zone, one
    capacity type, the twin's labels and taints, the disruption settings of :mod:`efa_stack.planning.karpenter`."""
    g = pool.group
    requirements = [
        {"key": contract.INSTANCE_TYPE_LABEL, "operator": "In", "values": [g.instance_type]},
        {"key": contract.KARPENTER_CAPACITY_TYPE_LABEL, "operator": "In", "values": [pool.capacity_type]},
        {"key": ZONE_LABEL, "operator": "In", "values": [g.availability_zone]},
    ]
    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": contract.KARPENTER_AWS_GROUP, "kind": "EC2NodeClass", "name": g.name},
        "requirements": requirements,
        "expireAfter": EXPIRE_AFTER,
        # bounds every drain of a pool node, so that a stack deletion finishes within the kubectl handler's
        # timeout (efa_stack.planning.karpenter.TERMINATION_GRACE_PERIOD_SECONDS: why the value, and why busy
        # nodes are still never disrupted)
        "terminationGracePeriod": TERMINATION_GRACE_PERIOD,
    }
    if g.taints:
        template_spec["taints"] = [
            {"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})} for t in g.taints
        ]
    spec: dict[str, Any] = {
        "template": {"metadata": {"labels": dict(sorted(g.labels.items()))}, "spec": template_spec},
        "disruption": {
            "consolidationPolicy": CONSOLIDATION_POLICY,
            "consolidateAfter": pool.consolidate_after,
            "budgets": [b.manifest() for b in BUDGETS],
        },
        "limits": pool.limits,
    }
    if pool.replicas is not None:
        spec["replicas"] = pool.replicas
    return spec


def pool_documents(plan: KarpenterPlan, node_role: str, subnets: dict[str, tuple[str, ...]] | None = None,
                   ) -> list[dict[str, Any]]:
    """Per pool: its EC2NodeClass, its NodePool and, when its nodes reserve hugepages, a NodeOverlay that adds them to
    the pool's nodes in Karpenter's scheduling simulation (requirement ``karpenter.sh/nodepool``: concepts/
    nodeoverlays.md "spec.requirements"). ``subnets``: an existing VPC's private subnet ids by zone."""
    docs: list[dict[str, Any]] = []
    for pool in plan.pools:
        zone_subnets = (subnets or {}).get(pool.group.availability_zone, ())
        docs.append({"apiVersion": contract.KARPENTER_AWS_API_VERSION, "kind": "EC2NodeClass",
                     "metadata": {"name": pool.name}, "spec": node_class_spec(pool, plan, node_role, zone_subnets)})
        docs.append({"apiVersion": contract.KARPENTER_API_VERSION, "kind": "NodePool",
                     "metadata": {"name": pool.name}, "spec": node_pool_spec(pool)})
        if pool.overlay_capacity:
            docs.append({
                "apiVersion": contract.KARPENTER_OVERLAY_API_VERSION, "kind": "NodeOverlay",
                "metadata": {"name": f"{pool.name}-hugepages"},
                "spec": {
                    "requirements": [
                        {"key": contract.KARPENTER_NODEPOOL_LABEL, "operator": "In", "values": [pool.name]},
                    ],
                    "capacity": pool.overlay_capacity,
                },
            })
    return docs


class KarpenterCrds(Construct):
    """The vendored Karpenter CRDs."""

    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        self.crds = [api_object(self, doc["spec"]["names"]["kind"], doc) for doc in crd_documents()]


class KarpenterPools(Construct):
    """The pool objects of :func:`pool_documents`."""

    def __init__(self, scope: Construct, id: str, plan: KarpenterPlan, node_role: str,
                 subnets: dict[str, tuple[str, ...]] | None = None) -> None:
        super().__init__(scope, id)
        self.objects = [
            api_object(self, f"{doc['kind']}-{doc['metadata']['name']}", doc)
            for doc in pool_documents(plan, node_role, subnets)
        ]
