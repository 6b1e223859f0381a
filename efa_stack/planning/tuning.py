"""Kubelet CPU and topology tuning of a node group, and the whole CPUs a Guaranteed pod gets per node.

A node group's ``kubeletExtraConfig`` (default on GPU/Neuron groups: ``static``/``restricted``/``pod``)
goes to nodeadm through :mod:`aws_constructs.user_data`; jobs read
:attr:`efa_stack.planning.node_groups.NodeGroupPlan.guaranteed_cpus` (:func:`guaranteed_cpus`). Why these
defaults, with the sources: docs/design/node-tuning.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import get_args

from efa_stack.planning.catalog import InstanceType
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import CpuManagerPolicy, TopologyManagerPolicy, TopologyManagerScope

CPU_MANAGER_POLICIES: tuple[str, ...] = get_args(CpuManagerPolicy)
TOPOLOGY_MANAGER_POLICIES: tuple[str, ...] = get_args(TopologyManagerPolicy)
TOPOLOGY_MANAGER_SCOPES: tuple[str, ...] = get_args(TopologyManagerScope)

# The kubelet's own defaults (KubeletConfiguration v1beta1: cpuManagerPolicy "none",
# topologyManagerPolicy "none", topologyManagerScope "container").
KUBELET_DEFAULTS: dict[str, str] = {
    "cpuManagerPolicy": "none",
    "topologyManagerPolicy": "none",
    "topologyManagerScope": "container",
}
ACCELERATOR_DEFAULTS: dict[str, str] = {
    "cpuManagerPolicy": "static",
    "topologyManagerPolicy": "restricted",
    "topologyManagerScope": "pod",
}

# nodeadm's kubeReserved CPU on the EKS AL2023 AMIs (awslabs/amazon-eks-ami@v20260724
# nodeadm/internal/kubelet/config.go, getCPUMillicoresToReserve): 6% of the first core, 1% of the second,
# 0.5% of the third and fourth, 0.25% of every further core; nodeadm sets no systemReserved CPU. The static
# CPU manager keeps ceil(kubeReserved + systemReserved) CPUs out of the exclusive pool and refuses to start
# with a zero reservation ("the static policy requires systemreserved.cpu + kubereserved.cpu to be greater
# than zero", kubernetes/kubernetes pkg/kubelet/cm/cpumanager/cpu_manager.go): nodeadm's reservation is never
# zero, so the static policy needs nothing more.
_CPU_RANGES_MILLI = (0, 1000, 2000, 4000)
_CPU_RESERVE_BASIS_POINTS = (600, 100, 50, 25)
# efa-stack's margin for the CPU requests of the node's DaemonSets (VPC CNI 25m, kube-proxy 100m, the device
# plugins, Pod Identity agent, node monitoring agent, FSx CSI node), which the scheduler also counts
# against allocatable CPU; it keeps a whole-node Guaranteed pod schedulable.
DAEMONSET_CPU_MILLI = 1000


def kube_reserved_cpu_milli(vcpus: int) -> int:
    """nodeadm's ``kubeReserved.cpu`` in millicores for a node with ``vcpus`` CPUs (192 vCPUs: 550m)."""
    total = vcpus * 1000
    reserved = 0
    bounds = (*_CPU_RANGES_MILLI, total)
    for i, basis_points in enumerate(_CPU_RESERVE_BASIS_POINTS):
        start, end = bounds[i], bounds[i + 1]
        if total > start:
            reserved += (min(total, end) - start) * basis_points // 10000
    return reserved


def guaranteed_cpus(instance: InstanceType) -> int:
    """Whole CPUs one Guaranteed pod can request on a node of ``instance``: allocatable CPU (vCPUs less
    nodeadm's kubeReserved) less :data:`DAEMONSET_CPU_MILLI`, rounded down; 0 when nothing is left.

    p5.48xlarge (192 vCPUs): 192000m - 550m - 1000m -> 190. Never above the static CPU manager's exclusive
    pool (vCPUs less ceil(kubeReserved)).
    """
    milli = allocatable_cpu_milli(instance.vcpus) - DAEMONSET_CPU_MILLI
    return max(milli // 1000, 0)


def allocatable_cpu_milli(vcpus: int) -> int:
    """The CPU, in millicores, the kubelet of an EKS AL2023 node with ``vcpus`` CPUs gives pods: its CPUs less
    nodeadm's kubeReserved (no systemReserved)."""
    return vcpus * 1000 - kube_reserved_cpu_milli(vcpus)


@dataclass(frozen=True)
class KubeletTuning:
    """The kubelet CPU/topology settings a node group's nodes start with."""

    cpu_manager_policy: str = KUBELET_DEFAULTS["cpuManagerPolicy"]
    topology_manager_policy: str = KUBELET_DEFAULTS["topologyManagerPolicy"]
    topology_manager_scope: str = KUBELET_DEFAULTS["topologyManagerScope"]

    def as_kubelet_config(self) -> dict[str, str]:
        """The ``KubeletConfiguration`` keys that differ from the kubelet's defaults, in a stable order
        (empty when everything is the default: no ``NodeConfig`` part is written then)."""
        values = {
            "cpuManagerPolicy": self.cpu_manager_policy,
            "topologyManagerPolicy": self.topology_manager_policy,
            "topologyManagerScope": self.topology_manager_scope,
        }
        return {k: v for k, v in values.items() if v != KUBELET_DEFAULTS[k]}

    @property
    def exclusive_cpus(self) -> bool:
        """Guaranteed pods with integer CPU requests get exclusive CPUs (the static CPU manager)."""
        return self.cpu_manager_policy == "static"


_CPUSET = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def kubelet_tuning(
    prefix: str, accelerated: bool, extra: dict[str, str | None] | None, vcpus: int | None
) -> tuple[KubeletTuning, list[Problem]]:
    """The tuning of one node group from its ``kubeletExtraConfig`` (``extra``: the keys the user set) and the
    defaults (accelerated groups: :data:`ACCELERATOR_DEFAULTS`; others: the kubelet's), with the problems."""
    problems: list[Problem] = []
    field = f"{prefix}.kubeletExtraConfig"
    given = {k: v for k, v in (extra or {}).items() if v is not None}
    reserved = given.pop("reservedSystemCPUs", None)
    if reserved is not None:
        # nodeadm sets kubeReservedCgroup "/runtime" and systemReservedCgroup "/system" on every node
        # (amazon-eks-ami nodeadm/internal/kubelet/config.go, withDefaultReservedResources) and the kubelet
        # refuses to start with reservedSystemCPUs beside either ("can't use reservedSystemCPUs
        # (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup
        # (--kube-reserved-cgroup)", kubernetes/kubernetes pkg/kubelet/apis/config/validation/validation.go):
        # the node would never register.
        shown = reserved
        where = ""
        if not _CPUSET.match(reserved):
            where = "; it is not a CPU list either (e.g. 0-1)"
        elif vcpus is not None and max(int(n) for n in re.split(r"[-,]", reserved)) >= vcpus:
            where = f"; it also names CPUs outside 0-{vcpus - 1}, the CPUs of this instance type"
        problems.append(Problem(
            f"{field}.reservedSystemCPUs", shown,
            "the EKS AL2023 AMI's nodeadm sets kubeReservedCgroup and systemReservedCgroup, and the kubelet does "
            "not start with reservedSystemCPUs beside them" + where,
            "remove reservedSystemCPUs; nodeadm's kubeReserved CPU already keeps whole CPUs out of the static "
            "CPU manager's exclusive pool",
        ))
    base = ACCELERATOR_DEFAULTS if accelerated else KUBELET_DEFAULTS
    values = {**base, **given}
    tuning = KubeletTuning(
        cpu_manager_policy=values["cpuManagerPolicy"],
        topology_manager_policy=values["topologyManagerPolicy"],
        topology_manager_scope=values["topologyManagerScope"],
    )
    return tuning, problems
