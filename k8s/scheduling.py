"""Placement helpers shared by the constructs: node affinity on efa-stack labels, tolerations, sizes.

Pods are placed by the labels every node group carries (``efa-stack.io/node-group``, ``/role``,
``/efa``, ``/accelerator``; set in :mod:`efa_stack.planning.plan`), never by a hand-kept list of instance types,
and tolerate exactly the taints of the node groups they run on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract
from efa_stack.planning.node_groups import Taint

CRITICAL_ADDONS_ONLY = "CriticalAddonsOnly"
"""The taint EKS and most clusters use for add-on-only nodes; node agents tolerate it (as upstream)."""

SYSTEM_NODE_CRITICAL = "system-node-critical"
"""Built-in PriorityClass for per-node agents (Kubernetes: guaranteed scheduling for critical add-ons)."""

HOSTNAME_TOPOLOGY_KEY = "kubernetes.io/hostname"

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]


@dataclass(frozen=True)
class LabelRequirement:
    """One node-affinity requirement on a node label (``key operator values``)."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def to_k8s(self) -> k8s_l1.NodeSelectorRequirement:
        return k8s_l1.NodeSelectorRequirement(
            key=self.key, operator=self.operator, values=list(self.values) if self.values else None
        )


NOT_ON_DRA_NODES = LabelRequirement(contract.LABEL_DEVICES, "NotIn", (contract.DEVICES_DRA,))
"""Every device plugin DaemonSet's requirement: never on a node whose devices the DRA drivers publish (a device plugin
and a DRA driver for one device on one node hand it out twice: aws/karpenter-provider-aws@974b272
website/content/en/preview/tasks/dra.md, "Running DRA drivers alongside device plugins"). A node without the label
matches ``NotIn``."""
ON_DRA_NODES = LabelRequirement(contract.LABEL_DEVICES, "In", (contract.DEVICES_DRA,))
"""Every DRA driver's requirement (k8s/dra.py): only on the nodes of ``devices: dra`` node groups and pools."""


def dra_node_selector() -> dict[str, str]:
    """The ``nodeSelector`` of a pod that claims DRA devices, and of the DRA drivers whose charts take one."""
    return {contract.LABEL_DEVICES: contract.DEVICES_DRA}


def required_node_affinity(*requirements: LabelRequirement) -> k8s_l1.Affinity:
    """An affinity whose single node selector term ANDs ``requirements`` (required at scheduling)."""
    return k8s_l1.Affinity(
        node_affinity=k8s_l1.NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s_l1.NodeSelector(
                node_selector_terms=[k8s_l1.NodeSelectorTerm(match_expressions=[r.to_k8s() for r in requirements])]
            )
        )
    )


def one_pod_per_node(match_labels: Mapping[str, str]) -> k8s_l1.Affinity:
    """Pod anti-affinity: no two pods with ``match_labels`` on the same node (hostname)."""
    return k8s_l1.Affinity(
        pod_anti_affinity=k8s_l1.PodAntiAffinity(
            required_during_scheduling_ignored_during_execution=[
                k8s_l1.PodAffinityTerm(
                    topology_key=HOSTNAME_TOPOLOGY_KEY,
                    label_selector=k8s_l1.LabelSelector(match_labels=dict(match_labels)),
                )
            ]
        )
    )


def tolerations(taints: Sequence[Taint], *, critical_addons: bool = False) -> list[k8s_l1.Toleration]:
    """Tolerate ``taints`` (operator Exists, per key and effect); optionally CriticalAddonsOnly too."""
    out: list[k8s_l1.Toleration] = []
    if critical_addons:
        out.append(k8s_l1.Toleration(key=CRITICAL_ADDONS_ONLY, operator="Exists"))
    out.extend(k8s_l1.Toleration(key=t.key, operator="Exists", effect=t.effect) for t in taints)
    return out


def system_node_selector() -> dict[str, str]:
    """Schedule on the system node group (add-ons and MPI launchers)."""
    return {contract.LABEL_ROLE: contract.SYSTEM_NODE_GROUP}


def mebibytes(n: int) -> k8s_l1.Quantity:
    """A memory quantity of ``n`` MiB (``"5120Mi"``)."""
    return k8s_l1.Quantity.from_string(f"{int(n)}Mi")


def count(n: int) -> k8s_l1.Quantity:
    """A whole-number quantity (device counts such as ``nvidia.com/gpu``)."""
    return k8s_l1.Quantity.from_number(int(n))


def millicores(n: int) -> k8s_l1.Quantity:
    """A CPU quantity of ``n`` millicores (``"10m"``)."""
    return k8s_l1.Quantity.from_string(f"{int(n)}m")


def node_daemon_set(
    scope: Construct,
    id: str,
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    selector: Mapping[str, str],
    host_access_reason: str,
    pod: k8s_l1.PodSpec,
) -> k8s_l1.KubeDaemonSet:
    """A rolling-update DaemonSet of a node agent (device plugins), annotated with why it needs the host."""
    return k8s_l1.KubeDaemonSet(
        scope,
        id,
        metadata=k8s_l1.ObjectMeta(
            name=name,
            namespace=namespace,
            labels=dict(labels),
            annotations={contract.ANNOTATION_HOST_ACCESS_REASON: host_access_reason},
        ),
        spec=k8s_l1.DaemonSetSpec(
            selector=k8s_l1.LabelSelector(match_labels=dict(selector)),
            update_strategy=k8s_l1.DaemonSetUpdateStrategy(type="RollingUpdate"),
            template=k8s_l1.PodTemplateSpec(metadata=k8s_l1.ObjectMeta(labels=dict(selector)), spec=pod),
        ),
    )
