"""UltraServer node groups: NVIDIA Grace Blackwell instances (``p6e-gb200.36xlarge``) whose GPUs share one NVLink
domain per UltraServer, as EKS managed node groups.

What EKS's GB200 page asks of them (awsdocs/amazon-eks-user-guide@00e3293
latest/ug/ml/ml-eks-nvidia-ultraserver.adoc), with the facts in data/ultraservers.json:

* Capacity Blocks only, through a custom launch template (efa-stack's always is); an UltraServer's block holds
  several reservations, so the launch template may target their resource group;
* Kubernetes 1.33 or later; the AL2023 ARM NVIDIA AMI, release v20251103 or later (driver 580 with CDMM, which turns
  MIG off: efa-stack never turns MIG on, its NVIDIA device plugin runs with the default strategy ``none``);
* the instance stores as one RAID0 volume through nodeadm's ``localStorage`` policy;
* GPUs and EFA stay on the device plugins; the NVIDIA DRA driver runs for ComputeDomains only (IMEX channels across
  the nodes of a job), NFD and GFD label the NVLink domain (``nvidia.com/gpu.clique``).

Two facts from NVIDIA/aicr: the driver must stay on the R580 branch (R595 drops ``NVreg_GrdmaPciTopoCheckOverride``
and breaks EFA on P6e, NVIDIA/aicr#2383: the known-bad row of data/efa_software.json), and the module option
``NVreg_GrdmaPciTopoCheckOverride=1`` must be set or NCCL silently falls back to sockets. How to set it on the EKS
AMI is documented nowhere read: efa-stack's user data writes it to /etc/modprobe.d and reloads the module before the
kubelet starts (:func:`efa_stack.planning.user_data.module_option_script`), which is **unproven on hardware**;
``efa-stack verify --acceptance`` reads ``/proc/driver/nvidia/params`` on every node and fails one without it.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from efa_stack import contract, names
from efa_stack.planning.catalog import ULTRASERVER_FILE, InstanceType
from efa_stack.planning.karpenter import ami_first_release
from efa_stack.planning.node_extras import CapacityChoice
from efa_stack.planning.node_groups import ComputeDomainPlan, NodeGroupPlan, UltraServerNodes
from efa_stack.planning.node_software import AMI_DRIVERS_FILE, ami_driver, known_bad_for, load_ami_drivers, release_of
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import ManagedNodeGroupSpec

DATA_FILE = ULTRASERVER_FILE
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class UltraServerKind(_Model):
    """One instance type sold as UltraServers (a row of data/ultraservers.json)."""

    ultra_servers: dict[str, int] = Field(alias="ultraServers", min_length=1)
    """UltraServer type -> its instances (one NVLink domain)."""
    min_kubernetes: str = Field(alias="minKubernetes", pattern=r"^1\.\d+$")
    min_ami_release: str = Field(alias="minAmiRelease", pattern=r"^v\d{8}$")
    driver_branch: str = Field(alias="driverBranch", pattern=r"^\d+$")
    nvreg_options: dict[str, str] = Field(alias="nvregOptions")
    source: str = Field(min_length=10)


class NcclFloors(_Model):
    nvls_busbw_gbps: float = Field(alias="nvlsBusbwGBps", gt=0)
    net_busbw_gbps: float = Field(alias="netBusbwGBps", gt=0)
    source: str = Field(min_length=10)


class UltraServerData(_Model):
    source: str = Field(alias="_source", min_length=10)
    instance_types: dict[str, UltraServerKind] = Field(alias="instanceTypes")
    without_data: dict[str, str] = Field(alias="withoutData")
    """Instance types sold as UltraServers whose catalog data efa-stack does not have, and why."""
    not_efa: dict[str, str] = Field(alias="notEfa")
    """Instance type patterns of UltraServers without EFA, and why."""
    nccl_floors: NcclFloors = Field(alias="ncclFloors")


@cache
def load(path: Path = DATA_FILE) -> UltraServerData:
    return UltraServerData.model_validate(json.loads(path.read_text()))


def kind_of(instance_type: str) -> UltraServerKind | None:
    """The UltraServer row of ``instance_type``, or None for an instance type that is no UltraServer's."""
    return load().instance_types.get(instance_type)


def ultraserver_types() -> tuple[str, ...]:
    return tuple(sorted(load().instance_types))


def unknown_type_problem(field_name: str, name: str) -> Problem | None:
    """The problem for an UltraServer instance type the catalog lacks: which data is missing and how to add it
    (GB300), or that it has no EFA (the RoCE ``p6e-gb300r``); None for any other name."""
    data = load()
    lowered = name.strip().lower()
    for pattern, reason in data.not_efa.items():
        if fnmatch.fnmatchcase(lowered, pattern):
            return Problem(field_name, name, f"{name} is no EFA instance type: {reason}",
                           f"use an EFA UltraServer type ({', '.join(ultraserver_types())}) for EFA node groups")
    why = data.without_data.get(lowered)
    if why is None:
        return None
    return Problem(
        field_name, name, f"the instance catalog has no data for {name}: {why}",
        f"run `efa-stack catalog refresh` with AWS credentials in a region that offers {name} (it records the type's "
        "network cards, EFA devices and GPUs from EC2 DescribeInstanceTypes), then add its UltraServer facts to "
        f"efa_stack/planning/data/{DATA_FILE.name}; UltraServer types with data: {', '.join(ultraserver_types())}",
    )


def pool_problem(prefix: str, instance_type: str) -> Problem | None:
    """An UltraServer type in a Karpenter pool: EKS recommends managed or self-managed node groups for them ("DRA is not
    supported in Karpenter or EKS Auto Mode", the GB200 page), and Karpenter (v1.14.1, and v1.15.1: no resource
    group in its API or code) launches into no resource group of Capacity Blocks."""
    if kind_of(instance_type) is None:
        return None
    return Problem(
        f"{prefix}.instanceType", instance_type,
        f"{instance_type} runs as UltraServers through Capacity Blocks; EKS recommends managed node groups for it "
        "(its ComputeDomains need the NVIDIA DRA driver, which EKS documents with node groups only)",
        "move the pool to a managedNodeGroups entry with capacityReservation (the UltraServer's Capacity Block or its "
        "resource group), instanceMarketOptions: {marketType: capacity-block} and ultraServerType",
    )


def _minor(version: str) -> int:
    m = re.fullmatch(r"1\.(\d+)", version)
    return int(m.group(1)) if m else -1


def release_problems(prefix: str, ng: ManagedNodeGroupSpec, group: NodeGroupPlan, kubernetes_version: str) -> list[Problem]:
    """A managed node group's ``releaseVersion``: not with a custom AMI; of the cluster's Kubernetes version; a release
    that publishes the group's AMI type for it; on an UltraServer type, no older than the release EKS's page asks for;
    and no NVIDIA driver that a known-bad row of the table of EFA software names for the instance type (R595 on P6e)."""
    text = ng.release_version
    release = release_of(text) if text else None
    if text is None or release is None:
        return []
    field_name = f"{prefix}.releaseVersion"
    if ng.ami is not None and ng.ami.startswith("ami-"):
        return [Problem(field_name, text, "ami already names the nodes' AMI",
                        "keep one: releaseVersion (an EKS-optimized AMI release) or ami (a custom AMI)")]
    minor = ".".join(text.split(".")[:2])
    if minor != kubernetes_version:
        return [Problem(field_name, text, f"a release of Kubernetes {minor} for a cluster of Kubernetes {kubernetes_version}",
                        f"write the release version of the cluster's Kubernetes version: {kubernetes_version}.<patch>-"
                        f"{release[1:]} ({_ssm_hint(group, kubernetes_version)})")]
    problems: list[Problem] = []
    first = ami_first_release(kubernetes_version, group.ami_type)
    kind = kind_of(group.instance_type)
    oldest = max(first or "", kind.min_ami_release if kind else "")
    if first is not None and release < first:
        problems.append(Problem(
            field_name, text, f"amazon-eks-ami first publishes {group.ami_type} AMIs for Kubernetes {kubernetes_version} "
            f"in {first}", _use_release(group, kubernetes_version, oldest),
        ))
    if kind is not None and release < kind.min_ami_release:
        problems.append(Problem(
            field_name, text, f"{group.instance_type} needs amazon-eks-ami {kind.min_ami_release} or later (NVIDIA "
            f"driver {kind.driver_branch} with CDMM) [{_page()}]", _use_release(group, kubernetes_version, oldest),
        ))
    problems.extend(_driver_problems(field_name, text, release, group, kubernetes_version, oldest))
    return problems


def _ssm_hint(group: NodeGroupPlan, kubernetes_version: str) -> str:
    arch = "arm64" if group.instance.arm64 else "x86_64"
    variant = group.ami_type.rsplit("_", 1)[-1].lower()
    return (f"`aws ssm get-parameter --name /aws/service/eks/optimized-ami/{kubernetes_version}/amazon-linux-2023/"
            f"{arch}/{variant}/recommended/release_version` prints the current one")


def _use_release(group: NodeGroupPlan, kubernetes_version: str, oldest: str) -> str:
    """The fix that names a release: the newest one in the driver data, from ``oldest`` on, that gives the group's
    instance type a driver of no known-bad row (and of its UltraServer branch)."""
    good = _newest_release(group, kubernetes_version, oldest)
    if good is None:
        return (f"no amazon-eks-ami release in {AMI_DRIVERS_FILE.name} gives {group.instance_type} a driver outside the "
                "known-bad rows: remove releaseVersion and run `efa-stack preflight`, which judges the release EKS "
                "recommends")
    pick = ami_driver(good, kubernetes_version, group.instance_type)
    driver = f", which gives {group.instance_type} the {pick.shown()} driver" if pick else ""
    return (f"set releaseVersion to {kubernetes_version}.<patch>-{good[1:]} (amazon-eks-ami {good}{driver}; "
            f"{_ssm_hint(group, kubernetes_version)})")


def _driver_problems(field_name: str, text: str, release: str, group: NodeGroupPlan, kubernetes_version: str,
                     oldest: str) -> list[Problem]:
    """The release gives the group's instance type an NVIDIA driver a known-bad row names (R595 on P6e, NVIDIA/aicr#2383)."""
    if group.instance.accelerator != "nvidia":
        return []
    pick = ami_driver(release, kubernetes_version, group.instance_type)
    if pick is None:
        return []
    return [Problem(
        field_name, text,
        f"amazon-eks-ami {release} gives {group.instance_type} the NVIDIA driver {pick.shown()} (its {pick.tree} tree; "
        f"{pick.source}), a known-bad combination ({bad.id}): {bad.problem} [{bad.source}]",
        f"{_use_release(group, kubernetes_version, oldest)}; {bad.fix}",
    ) for bad in known_bad_for({"nvidiaDriver": pick.version}, group.instance_type)]


def _page() -> str:
    return "EKS User Guide, 'Use P6e-GB200 UltraServers with Amazon EKS'"


def _newest_release(group: NodeGroupPlan, kubernetes_version: str, oldest: str) -> str | None:
    """The newest release in the NVIDIA driver data, not older than ``oldest``, that gives the group's instance type a
    driver no known-bad row names and, on an UltraServer type, of its branch (so that advice to use it passes every
    check here)."""
    kind = kind_of(group.instance_type)
    data = load_ami_drivers()
    for row in sorted(data.releases, key=lambda r: r.through, reverse=True):
        pick = ami_driver(row.through, kubernetes_version, group.instance_type, data)
        if row.through < oldest or pick is None or known_bad_for({"nvidiaDriver": pick.version}, group.instance_type):
            continue
        if kind is None or pick.branch == kind.driver_branch:
            return row.through
    return None


def ultraserver_nodes(
    prefix: str, ng: ManagedNodeGroupSpec, instance: InstanceType, capacity: CapacityChoice, kubernetes_version: str,
    problems: list[Problem],
) -> UltraServerNodes | None:
    """What an UltraServer node group's nodes need, with the problems of its spec (Capacity Block, Kubernetes version,
    UltraServer type, interface layout); None for other instance types."""
    kind = kind_of(instance.name)
    if kind is None:
        return None
    if capacity.kind != contract.CAPACITY_BLOCK:
        problems.append(Problem(
            f"{prefix}.capacity", capacity.kind,
            f"{instance.name} is sold as UltraServers through EC2 Capacity Blocks for ML only [{_page()}]",
            "launch into the UltraServer's Capacity Block: instanceMarketOptions: {marketType: capacity-block} and "
            "capacityReservation: {capacityReservationTarget: {capacityReservationResourceGroupARN: <its resource "
            "group>}} (or capacityReservationID: cr-... of one of its reservations)",
        ))
    if _minor(kubernetes_version) < _minor(kind.min_kubernetes):
        problems.append(Problem(
            "metadata.version", kubernetes_version,
            f"EKS supports {instance.name} on Kubernetes {kind.min_kubernetes} and later [{_page()}]",
            f"set metadata.version to {kind.min_kubernetes} or later",
        ))
    if ng.interface_layout != "current":
        problems.append(Problem(
            f"{prefix}.interfaceLayout", ng.interface_layout,
            f"{instance.name}'s primary interface must be of type interface and its EFA devices are efa-only ones "
            f"(one per group of network cards) [{_page()}]",
            "set interfaceLayout: current (or remove it)",
        ))
    types = sorted(kind.ultra_servers)
    chosen = ng.ultra_server_type
    if chosen not in kind.ultra_servers:
        problems.append(Problem(
            f"{prefix}.ultraServerType", chosen,
            f"an {instance.name} node group names the UltraServer type of its Capacity Block "
            f"({', '.join(f'{t}: {kind.ultra_servers[t]} instances' for t in types)}), so that jobs stay in one "
            "NVLink domain",
            f"add ultraServerType: {types[-1]} (or {', '.join(types[:-1])}), the type your Capacity Block reserves",
        ))
        return None
    options = tuple(sorted(kind.nvreg_options.items())) if ng.efa_enabled else ()
    return UltraServerNodes(chosen, kind.ultra_servers[chosen], kind.driver_branch, options)


def ultraserver_warnings(groups: Iterable[NodeGroupPlan], kubernetes_version: str) -> list[str]:
    """What the plan cannot judge on UltraServer node groups: the AMI release EKS picks when none is pinned, a pinned
    release the driver data does not know, and the module option efa-stack sets in a way not proven on hardware."""
    out: list[str] = []
    data = load_ami_drivers()
    for g in groups:
        us = g.ultraserver
        if us is None:
            continue
        release = _release_of(g)
        if g.ami_id is not None:
            out.append(f"node group {g.name}: a custom AMI runs {g.instance_type}: it must carry an R{us.driver_branch} "
                       "NVIDIA driver; `efa-stack verify --acceptance` reads the driver and the module options on the "
                       "nodes")
        elif release is None:
            kind = kind_of(g.instance_type)
            good = _newest_release(g, kubernetes_version, kind.min_ami_release if kind else "")
            out.append(
                f"node group {g.name}: EKS picks the AMI release when the group is created, so whether it gives "
                f"{g.instance_type} an R{us.driver_branch} NVIDIA driver is not known now"
                + (f"; pin releaseVersion to a release of amazon-eks-ami {good} (it does)" if good else "")
                + "; `efa-stack preflight` judges the release EKS recommends")
        elif ami_driver(release, kubernetes_version, g.instance_type, data) is None:
            out.append(f"node group {g.name}: amazon-eks-ami {release} is not in {AMI_DRIVERS_FILE.name} (checked "
                       f"through {data.checked_through}): its NVIDIA driver for {g.instance_type} is not known; "
                       "`efa-stack verify --acceptance` reads it on the nodes")
        if us.module_options:
            shown = ", ".join(f"NVreg_{k}={v}" for k, v in us.module_options)
            out.append(f"node group {g.name}: the user data sets {shown} by writing /etc/modprobe.d and reloading the "
                       "NVIDIA module before the kubelet starts, which is not proven on hardware; run `efa-stack verify "
                       "--acceptance`: it fails a node whose /proc/driver/nvidia/params lacks it")
    return out


def _release_of(group: NodeGroupPlan) -> str | None:
    """The amazon-eks-ami release (``v20260714``) a group's ``releaseVersion`` pins, or None."""
    return release_of(group.release_version) if group.release_version else None


def compute_domain_for(job: str, namespace: str, workers: int, group: NodeGroupPlan) -> ComputeDomainPlan | None:
    """The ComputeDomain of a job on an UltraServer node group (one per job, EKS's best practice), kept inside one
    NVLink domain when its workers fit one; None on every other group."""
    us = group.ultraserver
    if us is None:
        return None
    return ComputeDomainPlan(
        name=job, namespace=namespace, channel_claim_template=names.compute_domain_channel_name(job),
        domain_nodes=us.domain_nodes, within_domain=workers <= us.domain_nodes,
    )


def kueue_problems(kueue_enabled: bool, jobs: Iterable[tuple[str, ComputeDomainPlan | None]]) -> list[Problem]:
    """Jobs with a ComputeDomain cannot be queued through Kueue v0.19.2: its DRA integration (``KueueDRAIntegration``,
    beta and on by default, pkg/features/kube_features.go) turns every workload whose pods claim a
    ``ResourceClaimTemplate`` into DRA quota, and marks it inadmissible when the template does not exist yet or its
    DeviceClass is not mapped in Kueue's configuration ("DeviceClass %s is not mapped in DRA configuration",
    kubernetes-sigs/kueue@v0.19.2 pkg/dra/claims.go ``GetResourceRequestsForResourceClaimTemplates``; the workload
    controller, pkg/controller/core/workload_controller.go). The channel template is the DRA driver's, made from the
    ComputeDomain, and efa-stack maps no ComputeDomain DeviceClass: refused until that is built and proven.
    ``jobs``: (what the spec calls the job, its ComputeDomain or None)."""
    named = [name for name, domain in jobs if domain is not None]
    if not kueue_enabled or not named:
        return []
    return [Problem(
        "scheduling.kueue.enabled", True,
        f"Kueue v0.19.2 would never admit {', '.join(named)}: their workers claim a ComputeDomain channel through the "
        "NVIDIA DRA driver's ResourceClaimTemplate, and Kueue's DRA integration (on by default) marks such a workload "
        "inadmissible unless that template exists at admission and its DeviceClass (compute-domain-default-channel."
        "nvidia.com) is mapped in Kueue's configuration, which efa-stack does not do",
        "set scheduling.kueue.enabled: false: the jobs are created suspended and started by the command in their "
        "efa-stack.io/start annotation; or run the queued jobs on a node group that is no UltraServer",
    )]


def nccl_floors() -> NcclFloors:
    return load().nccl_floors


__all__ = [
    "DATA_FILE", "UltraServerData", "UltraServerKind", "compute_domain_for",
    "kind_of", "kueue_problems", "load", "nccl_floors", "pool_problem", "release_problems", "ultraserver_nodes", "ultraserver_types",
    "ultraserver_warnings", "unknown_type_problem",
]
