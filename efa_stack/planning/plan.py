"""Join a validated spec with the instance catalog into a plan every stack and chart reads.

A number such as "32 EFA devices on p5.48xlarge" is computed here, from the catalog, and nowhere
else: the launch template's interfaces, the node labels, the pods' resource requests and the MPI slot
counts all read it from a :class:`NodeGroupPlan`.

:func:`build_plan` runs the stages of :data:`STAGES` in order over one :class:`PlanContext`, which collects every
stage's problems and results. No stage is skipped because an earlier one found problems, so one run reports every
problem of the spec; a stage whose input could not be planned (the system node group's instance type is unknown,
say) records what it could not check (:attr:`PlanContext.unchecked`), which the error lists after the problems.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from efa_stack import contract, names
from efa_stack.planning import catalog, dra
from efa_stack.planning.addons import (
    CLOUDWATCH_OBSERVABILITY,
    VPC_CNI,
    AddonPlan,
    PodIdentityPlan,
    addon_plans,
    role_problems,
)
from efa_stack.planning.addressing import (
    AddressedGroup,
    AddressPlan,
    address_plan,
    max_pods_override_problems,
    merge_cni_env,
    pod_network_refusals,
)
from efa_stack.planning.image_cache import ImageCachePlan, image_cache_plan, job_images
from efa_stack.planning.image_compat import TrainingImagePlan, training_image_plan
from efa_stack.planning.karpenter import KarpenterPlan, with_max_pods
from efa_stack.planning.limits import network_resource_count, validate_node_group_count, validate_plan_limits
from efa_stack.planning.nccl import NcclJobPlan, nccl_job_plan, validate_nccl
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.planning.node_shapes import NodeContext, plan_managed_groups, plan_pools, plan_system_group
from efa_stack.planning.node_software import ami_driver_warnings
from efa_stack.planning.observability import ObservabilityPlan, observability_plan
from efa_stack.planning.scheduling import KueuePlan, integrations_of, kueue_plan, worker_wait_seconds
from efa_stack.planning.storage import StoragePlan, storage_plan, validate_storage, with_lustre_efa
from efa_stack.planning.training import TrainingJobPlan, training_job_plans
from efa_stack.planning.ultraserver import kueue_problems, ultraserver_warnings
from efa_stack.planning.versions import today as versions_today
from efa_stack.planning.versions import version_problems, version_warnings
from efa_stack.planning.vpc import ExistingVpc, cluster_zones, existing_vpc
from efa_stack.spec.errors import Problem, SpecError
from efa_stack.spec.loader import MOVED, _rename, load_spec, parse_spec
from efa_stack.spec.models import CONTROL_PLANE_LOG_TYPES, LOG_RETENTION_DAYS, ClusterSpec


@dataclass(frozen=True)
class TrainingOperatorsPlan:
    """Which Kubeflow training controllers the cluster stack installs (:mod:`k8s.training_operators`).

    trainer: Kubeflow Trainer v2 (TrainJob) and JobSet, through the upstream Helm chart.
    pytorch_job_v1: Training Operator v1 with only its PyTorchJob controller (cdk8s charts).
    """

    trainer: bool = False
    pytorch_job_v1: bool = False

    @property
    def any(self) -> bool:
        return self.trainer or self.pytorch_job_v1

    @classmethod
    def of(cls, spec: ClusterSpec, jobs: Sequence[TrainingJobPlan]) -> TrainingOperatorsPlan:
        """Those the spec's ``trainingOperators`` names and those its training ``jobs`` need."""
        return cls(
            trainer=spec.training_operators.trainer or any(j.kind == "trainjob" for j in jobs),
            pytorch_job_v1=spec.training_operators.pytorch_job_v1 or any(j.kind == "pytorchjob" for j in jobs),
        )


@dataclass(frozen=True)
class ClusterPlan:
    """Everything derived from one cluster spec, complete and checked (:func:`build_plan`): the stacks, the charts,
    ``dist/`` and the commands read it, and none re-derives from the spec."""

    name: str
    region: str
    kubernetes_version: str
    availability_zones: tuple[str, ...]
    vpc_cidr: str
    nat_gateways: int
    interface_endpoints: bool
    endpoint_public: bool
    endpoint_private: bool
    public_access_cidrs: tuple[str, ...]
    with_oidc: bool
    bootstrap_admin: bool
    access_entries: tuple[tuple[str, tuple[tuple[str, str, tuple[str, ...]], ...]], ...]
    """(principal, ((policy ARN, scope type, namespaces), ...)) per access entry."""
    node_groups: tuple[NodeGroupPlan, ...]
    system: NodeGroupPlan
    tags: dict[str, str] = field(hash=False, default_factory=dict)
    nccl_job: NcclJobPlan | None = None
    """The NCCL-tests MPIJob (:func:`efa_stack.planning.nccl.nccl_job_plan`), or None when no node group can run it."""
    storage: StoragePlan | None = None
    """FSx for Lustre storage (:func:`efa_stack.planning.storage.storage_plan`), or None without a ``storage`` section."""
    addons: tuple[AddonPlan, ...] = ()
    """Every EKS add-on the stacks create: efa-stack's own merged with the spec's ``addons``
    (:func:`efa_stack.planning.addons.addon_plans`)."""
    observability: ObservabilityPlan = field(default_factory=ObservabilityPlan)
    """Container Insights and the dashboard (:func:`efa_stack.planning.observability.observability_plan`)."""
    training_image: TrainingImagePlan | None = None
    """The EFA PyTorch training image ``cdk deploy`` builds (:func:`efa_stack.planning.image_compat.training_image_plan`), or
    None without ``trainingImage.build``. Its URI is the cluster stack's output ``TrainingImageUri``."""
    training_operators: TrainingOperatorsPlan = TrainingOperatorsPlan()
    """The training controllers to install: those the spec's ``trainingOperators`` names and those its
    ``trainingJobs`` need (Trainer v2 for ``kind: trainjob``, Training Operator v1 for ``kind: pytorchjob``)."""
    log_types: tuple[str, ...] = CONTROL_PLANE_LOG_TYPES
    """Control-plane log types sent to CloudWatch Logs (eksctl ``cloudWatch.clusterLogging.enableTypes``)."""
    log_retention_days: int | None = None
    """Retention of the control-plane log group; None: kept forever."""
    pod_identities: tuple[PodIdentityPlan, ...] = ()
    """eksctl ``iam.podIdentityAssociations``, in spec order."""
    authentication_mode: str = "API"
    """EKS authentication mode (eksctl ``accessConfig.authenticationMode``)."""
    control_plane_tier: str | None = None
    """EKS Provisioned Control Plane tier (eksctl ``controlPlaneScalingConfig.tier``); None: EKS's default."""
    access_entry_details: tuple[tuple[str, tuple[str, ...], str | None], ...] = ()
    """(type, Kubernetes groups, Kubernetes user name) of each of ``access_entries``, in the same order."""
    existing_vpc: ExistingVpc | None = None
    """An existing VPC and its subnets (eksctl ``vpc.id``/``vpc.subnets``); None: the stack creates one."""
    warnings: tuple[str, ...] = ()
    """Things that work but that the user should know (a Kubernetes version in extended support)."""
    training_jobs: tuple[TrainingJobPlan, ...] = ()
    """The spec's ``trainingJobs`` (:func:`efa_stack.planning.training.training_job_plans`), in spec order."""
    addresses: AddressPlan | None = None
    """The private subnets and the node and pod addresses each zone takes
    (:func:`efa_stack.planning.addressing.address_plan`); None with an existing VPC."""
    kueue: KueuePlan | None = None
    """Kueue and its queues (:func:`efa_stack.planning.scheduling.kueue_plan`), or None without ``scheduling.kueue.enabled``."""
    karpenter: KarpenterPlan | None = None
    """Karpenter and its EFA pools (``karpenterNodePools``, :mod:`efa_stack.planning.karpenter`), or None without pools."""
    image_cache: ImageCachePlan | None = None
    """The ECR pull through cache for job images at scale (:mod:`efa_stack.planning.image_cache`), or None."""

    def addon(self, name: str) -> AddonPlan | None:
        """The plan of add-on ``name``, or None when no stack creates it."""
        return next((a for a in self.addons if a.name == name), None)

    @property
    def all_node_groups(self) -> tuple[NodeGroupPlan, ...]:
        return (self.system, *self.node_groups)

    @property
    def efa_node_groups(self) -> tuple[NodeGroupPlan, ...]:
        return tuple(n for n in self.node_groups if n.efa_enabled)

    @property
    def nccl_jobs(self) -> tuple[NcclJobPlan, ...]:
        """Every NCCL-tests job the charts render (zero or one today), for consumers that iterate."""
        return (self.nccl_job,) if self.nccl_job is not None else ()

    @property
    def pool_groups(self) -> tuple[NodeGroupPlan, ...]:
        """The plans of the Karpenter pools' nodes (:attr:`efa_stack.planning.karpenter.KarpenterPoolPlan.group`; no
        EKS node group is created for them)."""
        return self.karpenter.groups if self.karpenter is not None else ()

    def node_group(self, name: str) -> NodeGroupPlan:
        """A managed node group, the system node group or a Karpenter pool's nodes, by name."""
        for n in (*self.all_node_groups, *self.pool_groups):
            if n.name == name:
                return n
        raise KeyError(name)

    def summary(self) -> str:
        lines = [
            (
                f"cluster {self.name}: EKS {self.kubernetes_version} in {self.region} "
                f"({', '.join(self.availability_zones)}), "
                + (f"existing VPC {self.existing_vpc.id}" if self.existing_vpc else f"VPC {self.vpc_cidr}")
                + (f", control plane {self.control_plane_tier}" if self.control_plane_tier else "")
            ),
        ]
        for n in self.all_node_groups:
            accel = (
                f"{n.gpus_per_node} GPU" if n.gpus_per_node else
                f"{n.neuron_devices_per_node} Neuron" if n.neuron_devices_per_node else "no accelerator"
            )
            size = f"{n.min_size}/{n.desired_size}/{n.max_size} nodes (min/desired/max)"
            lines.append(
                f"  {n.name}: {n.instance_type} in {', '.join(n.availability_zones)}, {size}, "
                f"{accel} + {n.efa_devices_per_node} EFA per node, "
                f"interfaces {n.layout_summary()}, {n.capacity_summary()}"
                + (", placement group" if n.placement_group else "") + n.parts_summary()
                + (", devices from DRA drivers" if n.devices == contract.DEVICES_DRA else "")
            )
        for p in self.karpenter.pools if self.karpenter is not None else ():
            g = p.group
            lines.append(
                f"  {g.name}: Karpenter pool of {g.instance_type} in {g.availability_zone}, up to {p.max_nodes} nodes"
                + (f" ({p.replicas} static)" if p.replicas is not None else "")
                + f", {g.gpus_per_node} GPU + {g.efa_devices_per_node} EFA per node, interfaces {g.layout_summary()}, "
                + (f"{g.capacity} {', '.join(p.reservation_ids)}" if p.reserved else contract.ON_DEMAND)
                + (f", placement group {p.placement_group_name}" if p.placement_group_name else "")
                + (", devices from DRA drivers" if g.devices == contract.DEVICES_DRA else "")
            )
        if self.addresses is not None:
            lines += self.addresses.summary_lines()
        if self.image_cache is not None:
            lines += self.image_cache.summary_lines()
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def infiniband_warnings(spec: ClusterSpec) -> list[str]:
    """Jobs over InfiniBand: EC2 instances have none, so on this cluster's node groups no device plugin
    advertises an ``rdma/*`` resource and the workers would wait Pending; said at synth, not refused, since
    the rendered manifests (dist/) can serve a cluster whose nodes have InfiniBand HCAs."""
    out = []
    jobs = [(f"trainingJobs[{i}]", j.fabric) for i, j in enumerate(spec.training_jobs)]
    if "nccl_test" in spec.model_fields_set:
        jobs.append(("ncclTest", spec.nccl_test.fabric))
    for where, fabric in jobs:
        if fabric == "infiniband":
            out.append(
                f"{where}.fabric is infiniband, but EC2 instances have no InfiniBand: on this EKS cluster its "
                "workers would stay Pending (no node advertises an rdma/* resource); use fabric: efa on an EFA "
                "node group, or tcp"
            )
    return out


# --- the planner: stages over one context -------------------------------------------------------------------


@dataclass
class PlanContext:
    """The planner's working state: the spec, every problem found so far, what could not be checked, and each
    stage's results, in stage order. A stage reads the results of the stages before it and adds its own; it never
    stops the run."""

    spec: ClusterSpec
    """The validated spec (or, for a file with bad fields, the spec read without them)."""
    subnet_zones: Mapping[str, str] = field(default_factory=dict)
    """The zones of an existing VPC's subnets that ``efa-stack lookup`` recorded (subnet id -> zone)."""
    today: datetime.date = field(default_factory=versions_today)
    """The day the Kubernetes version is judged on (:func:`efa_stack.planning.versions.today`)."""
    problems: list[Problem] = field(default_factory=list)
    """Every problem found so far, in stage order."""
    unchecked: list[str] = field(default_factory=list)
    """What a stage could not check because its input could not be planned: ``<field>: <why>``."""
    region_azs: list[str] = field(default_factory=list)
    """The region's zones (:func:`_cluster_stage`; empty for an unknown region)."""
    existing: ExistingVpc | None = None
    """An existing VPC (:func:`_network_stage`); None: the stack creates one."""
    azs: tuple[str, ...] = ()
    """The cluster's zones (:func:`_network_stage`)."""
    groups: list[NodeGroupPlan] = field(default_factory=list)
    """The managed node groups that planned (:func:`_node_stage`)."""
    karpenter: KarpenterPlan | None = None
    """The Karpenter pools that planned (:func:`_node_stage`); None without pools."""
    system: NodeGroupPlan | None = None
    """The system node group; None when its instance type is unknown."""
    observability: ObservabilityPlan = field(default_factory=ObservabilityPlan)
    """Container Insights and the dashboard (:func:`_addon_stage`)."""
    addons: tuple[AddonPlan, ...] = ()
    """The EKS add-ons (:func:`_addon_stage`; the VPC CNI's settings completed by :func:`_address_stage`)."""
    nccl_job: NcclJobPlan | None = None
    """The NCCL-tests job (:func:`_job_stage`; bound to its queue and pool by :func:`_binding_stage`)."""
    training_jobs: tuple[TrainingJobPlan, ...] = ()
    """The training jobs (:func:`_job_stage`; empty while they have problems; bound by :func:`_binding_stage`)."""
    kueue: KueuePlan | None = None
    """Kueue (:func:`_kueue_stage`); None when it is off or could not be planned."""
    warnings: list[str] = field(default_factory=list)
    """Kueue's warnings (:func:`_kueue_stage`), after the version's and InfiniBand's in the plan."""
    addresses: AddressPlan | None = None
    """The node and pod addresses per zone (:func:`_address_stage`); None with an existing VPC."""
    log_types: tuple[str, ...] = CONTROL_PLANE_LOG_TYPES
    """Control-plane log types (:func:`_settings_stage`)."""
    log_retention_days: int | None = None
    """Their retention (:func:`_settings_stage`); None: kept forever."""
    training_image: TrainingImagePlan | None = None
    """The EFA PyTorch image ``cdk deploy`` builds (:func:`_settings_stage`); None: none."""

    @property
    def pool_groups(self) -> list[NodeGroupPlan]:
        """The nodes of the Karpenter pools that planned."""
        return list(self.karpenter.groups) if self.karpenter is not None else []

    @property
    def job_groups(self) -> list[NodeGroupPlan]:
        """Where jobs run: the managed node groups and the pools' nodes, planned."""
        return [*self.groups, *self.pool_groups]

    @property
    def declared(self) -> list[str]:
        """Every name the spec gives a node group or pool (also of those that did not plan)."""
        spec = self.spec
        return [*(ng.name for ng in spec.managed_node_groups), *(p.name for p in spec.karpenter_node_pools)]

    def node_context(self) -> NodeContext:
        """What planning one node group or pool needs of the cluster: its name, zones, VPC, NCCL and storage."""
        spec = self.spec
        return NodeContext(
            cluster=spec.metadata.name, zones=self.azs, existing=self.existing, nccl=spec.nccl_test,
            lustre=spec.storage is not None, kubernetes_version=spec.metadata.version, today=self.today,
        )


def _cluster_stage(ctx: PlanContext) -> None:
    """The Kubernetes version, the cluster's name and tags, the region."""
    md = ctx.spec.metadata
    ctx.problems.extend(version_problems(md.version, ctx.today))
    ctx.problems.extend(names.cluster_problems(md.name, md.tags))
    region_azs = catalog.regions().get(md.region)
    if region_azs is None:
        ctx.problems.append(Problem(
            "metadata.region", md.region, "unknown AWS region", f"use one of {', '.join(sorted(catalog.regions()))}",
        ))
    ctx.region_azs = list(region_azs or [])


def _network_stage(ctx: PlanContext) -> None:
    """An existing VPC and the cluster's zones (:mod:`efa_stack.planning.vpc`)."""
    ctx.existing = existing_vpc(ctx.spec, ctx.region_azs, ctx.problems, ctx.subnet_zones)
    ctx.azs = cluster_zones(ctx.spec, ctx.region_azs, ctx.existing, ctx.problems)


def _node_stage(ctx: PlanContext) -> None:
    """The managed node groups, the Karpenter pools and the system node group (:mod:`efa_stack.planning.node_shapes`),
    then the API endpoints."""
    spec, nodes = ctx.spec, ctx.node_context()
    ctx.groups = plan_managed_groups(spec, nodes, ctx.problems)
    ctx.karpenter = plan_pools(spec, nodes, {ng.name for ng in spec.managed_node_groups}, ctx.problems)
    endpoints = spec.vpc.cluster_endpoints
    if not endpoints.public_access and not endpoints.private_access:
        ctx.problems.append(Problem(
            "vpc.clusterEndpoints", {"publicAccess": False, "privateAccess": False},
            "the Kubernetes API needs at least one endpoint", "set privateAccess: true (and publicAccess as you need)",
        ))
    if spec.vpc.public_access_cidrs and not endpoints.public_access:
        ctx.problems.append(Problem(
            "vpc.publicAccessCIDRs", list(spec.vpc.public_access_cidrs),
            "CIDRs restrict the public endpoint, which is off", "remove publicAccessCIDRs or set clusterEndpoints.publicAccess: true",
        ))
    ctx.system = plan_system_group(spec.system_node_group, ctx.azs, ctx.problems)
    ctx.problems.extend(dra.mix_problems(ctx.job_groups))


def _addon_stage(ctx: PlanContext) -> None:
    """Container Insights and the EKS add-ons (efa-stack's merged with the spec's)."""
    spec, groups = ctx.spec, ctx.groups
    ctx.observability, found = observability_plan(
        spec.observability, cluster=spec.metadata.name, region=spec.metadata.region,
        accelerated=any(g.role in ("gpu", "neuron") for g in groups),
        addon_listed=any(a.name == CLOUDWATCH_OBSERVABILITY for a in spec.addons),
    )
    ctx.problems.extend(found)
    ctx.addons, found = addon_plans(
        spec.addons, kubernetes_version=spec.metadata.version, repair=any(g.node_repair for g in groups),
        storage=spec.storage is not None, with_oidc=spec.iam.with_oidc,
        observability=ctx.observability.container_insights,
        accelerator_taints=[(t.key, t.effect) for g in groups if g.role == "gpu" for t in g.taints],
    )
    ctx.problems.extend(found)


def _job_stage(ctx: PlanContext) -> None:
    """The NCCL-tests job, the storage checks and the training jobs, over the node groups and pools that planned."""
    spec = ctx.spec
    ctx.problems.extend(validate_nccl(
        spec.nccl_test, ctx.job_groups, ctx.declared, explicit="nccl_test" in spec.model_fields_set,
    ))
    ctx.problems.extend(validate_storage(spec, ctx.groups, ctx.pool_groups))
    ctx.training_jobs, found = training_job_plans(spec, ctx.job_groups, ctx.declared)
    ctx.problems.extend(found)
    ctx.nccl_job = nccl_job_plan(ctx.job_groups, spec.nccl_test) if ctx.system is not None else None


def _kueue_stage(ctx: PlanContext) -> None:
    """Kueue and its queues over the jobs planned so far (:func:`efa_stack.planning.scheduling.kueue_plan`)."""
    cfg = ctx.spec.scheduling.kueue
    if ctx.system is None:
        if cfg.enabled:
            ctx.unchecked.append("scheduling.kueue: its flavors need the system node group's instance type")
        return
    if cfg.enabled and ctx.spec.training_jobs and not ctx.training_jobs:
        ctx.unchecked.append("scheduling.kueue for trainingJobs: the queues need the training jobs planned")
    jobs = [*((ctx.nccl_job,) if ctx.nccl_job else ()), *ctx.training_jobs]
    ctx.problems.extend(kueue_problems(cfg.enabled, [
        *(("ncclTest", j.compute_domain) for j in ((ctx.nccl_job,) if ctx.nccl_job else ())),
        *((f"trainingJobs {j.name}", j.worker.compute_domain) for j in ctx.training_jobs),
    ]))
    operators = TrainingOperatorsPlan.of(ctx.spec, ctx.training_jobs)
    workers = [
        *(("ncclTest", j.node_group, j.workers) for j in ((ctx.nccl_job,) if ctx.nccl_job else ())),
        *((f"trainingJobs[{i}]", j.node_group, j.nnodes) for i, j in enumerate(ctx.training_jobs)),
    ]
    ctx.kueue, found, warnings = kueue_plan(
        cfg, ctx.job_groups, ctx.system, namespaces=[j.namespace for j in jobs], job_groups=[j.node_group for j in jobs],
        elastic=[g.name for g in ctx.pool_groups], job_workers=workers,
        integrations=integrations_of(trainer=operators.trainer, pytorch_job_v1=operators.pytorch_job_v1),
    )
    ctx.problems.extend(found)
    ctx.warnings.extend(warnings)
    if cfg.enabled:
        groups = {g.name: g for g in ctx.job_groups}
        queued = [*(("ncclTest", j.node_group, j.worker.claims) for j in ((ctx.nccl_job,) if ctx.nccl_job else ())),
                  *((f"trainingJobs[{i}]", j.node_group, j.worker.sizing.claims) for i, j in enumerate(ctx.training_jobs))]
        ctx.problems.extend(dra.queue_problems(cfg.topology, [(w, groups[n], c) for w, n, c in queued if n in groups]))


def _binding_stage(ctx: PlanContext) -> None:
    """What each job's charts only read: its queue binding, do-not-disrupt on a Karpenter pool, and the NCCL-tests
    launcher's wait for its workers (:func:`efa_stack.planning.scheduling.worker_wait_seconds`)."""
    kueue, karpenter = ctx.kueue, ctx.karpenter

    def on_pool(group: str) -> bool:
        return karpenter is not None and karpenter.pool(group) is not None

    job = ctx.nccl_job
    if job is not None:
        ctx.nccl_job = dataclasses.replace(
            job, queue=kueue.binding(job.node_group) if kueue else None, do_not_disrupt=on_pool(job.node_group),
            worker_wait_seconds=worker_wait_seconds(on_pool(job.node_group), kueue.wait.timeout_seconds if kueue else None),
        )
    ctx.training_jobs = tuple(
        dataclasses.replace(j, queue=kueue.binding(j.node_group) if kueue else None, do_not_disrupt=on_pool(j.node_group))
        for j in ctx.training_jobs
    )


def _limits_stage(ctx: PlanContext) -> None:
    """EKS's node group quota and CloudFormation's resources per stack (:mod:`efa_stack.planning.limits`)."""
    spec, azs = ctx.spec, ctx.azs
    ctx.problems.extend(validate_node_group_count(ctx.groups, [ng.name for ng in spec.managed_node_groups]))
    if len(set(azs)) >= 2 and ctx.existing is None:  # an existing VPC's subnet sizes are not known here
        ctx.problems.extend(validate_plan_limits(ctx.groups, network=network_resource_count(
            len(set(azs)), 1 if spec.vpc.nat.gateway == "Single" else len(azs), spec.vpc.interface_endpoints,
            existing_vpc=False,
        ), storage=spec.storage is not None, karpenter=bool(spec.karpenter_node_pools),
            pool_placement_groups=sum(1 for g in ctx.pool_groups if g.placement_group),
            kueue=spec.scheduling.kueue.enabled, ultraservers=any(g.ultraserver for g in ctx.groups)))


def _address_stage(ctx: PlanContext) -> None:
    """The node and pod addresses each zone takes (:func:`efa_stack.planning.addressing.address_plan`), custom
    networking's maxPods on the node groups and pools, and the VPC CNI settings it needs."""
    spec = ctx.spec
    refusals = pod_network_refusals(spec.vpc.pod_cidr, existing_vpc=ctx.existing is not None)
    ctx.problems.extend(refusals)
    if ctx.existing is not None:
        return
    if len(set(ctx.azs)) < 2:
        ctx.unchecked.append("vpc.cidr: the addresses of each zone and the stacks' resource counts need two or more zones")
        return
    if ctx.system is None or refusals:
        ctx.unchecked.append("vpc.cidr: the addresses of each zone need the system node group's instance type"
                             if ctx.system is None else "vpc.podCIDR: the pods' addresses need a usable podCIDR")
        return
    cni = next((a for a in ctx.addons if a.name == VPC_CNI), None)
    system = AddressedGroup(contract.SYSTEM_NODE_GROUP, ctx.system.instance, (), ctx.azs, ctx.system.max_size)
    ctx.addresses, found = address_plan(
        spec.vpc.cidr, ctx.azs, [system, *ctx.job_groups], cni.configuration_values if cni else None,
        pod_cidr=spec.vpc.pod_cidr, pools={p.name: f"karpenterNodePools[{i}]" for i, p in enumerate(spec.karpenter_node_pools)},
    )
    ctx.problems.extend(found)
    addresses = ctx.addresses
    if addresses is None:
        return
    if addresses.pods is not None:  # custom networking: a custom AMI's own maxPods must agree
        ctx.problems.extend(max_pods_override_problems(
            [(g.spec_path, g.name, g.node_config) for g in ctx.groups if g.ami_id], addresses))
    if ctx.karpenter is not None:  # custom networking: maxPods on the EC2NodeClasses
        ctx.karpenter = with_max_pods(ctx.karpenter, addresses.max_pods)
    if addresses.generated_env and cni is not None:
        where = next((f"addons[{i}]" for i, a in enumerate(spec.addons) if a.name == VPC_CNI), "addons")
        merged, found = merge_cni_env(cni.configuration_values, addresses.generated_env, where)
        ctx.problems.extend(found)
        ctx.addons = tuple(dataclasses.replace(a, configuration_values=merged) if a is cni else a for a in ctx.addons)


def _settings_stage(ctx: PlanContext) -> None:
    """Control-plane logging, access entries, Pod Identity associations and the training image."""
    ctx.log_types, ctx.log_retention_days = _logging(ctx.spec, ctx.problems)
    ctx.problems.extend(_access_problems(ctx.spec))
    ctx.problems.extend(_pod_identity_problems(ctx.spec))
    ctx.training_image, found = training_image_plan(
        ctx.spec.training_image, [g.ami_type for g in ctx.groups if g.gpus_per_node]
    )
    ctx.problems.extend(found)


STAGES: tuple[Callable[[PlanContext], None], ...] = (
    _cluster_stage, _network_stage, _node_stage, _addon_stage, _job_stage, _kueue_stage, _binding_stage,
    _limits_stage, _address_stage, _settings_stage,
)
"""The planner's stages, in order; each adds its problems and results to the :class:`PlanContext`."""


def build_plan(
    spec: ClusterSpec, *, source: str = "<spec>", subnet_zones: Mapping[str, str] | None = None
) -> ClusterPlan:
    """Validate ``spec`` against the catalog and derive the plan: every stage of :data:`STAGES` runs, then the plan
    is assembled, or :class:`SpecError` lists every problem found (and what could not be checked)."""
    ctx = PlanContext(spec, subnet_zones=subnet_zones or {})
    for stage in STAGES:
        stage(ctx)
    if ctx.problems:
        raise SpecError(source, ctx.problems, unchecked=tuple(ctx.unchecked))
    return _assemble(ctx)


def _assemble(ctx: PlanContext) -> ClusterPlan:
    """The :class:`ClusterPlan` of a context whose stages found no problem."""
    spec, md, system = ctx.spec, ctx.spec.metadata, ctx.system
    assert system is not None
    endpoints = spec.vpc.cluster_endpoints
    # the EFA client setup of an EFA-enabled file system, on the nodes that run it
    groups, karpenter = with_lustre_efa(spec.storage, ctx.groups, ctx.karpenter)
    return ClusterPlan(
        name=md.name,
        region=md.region,
        kubernetes_version=md.version,
        availability_zones=ctx.azs,
        vpc_cidr=spec.vpc.cidr,
        nat_gateways=1 if spec.vpc.nat.gateway == "Single" else len(ctx.azs),
        interface_endpoints=spec.vpc.interface_endpoints,
        endpoint_public=endpoints.public_access,
        endpoint_private=endpoints.private_access,
        public_access_cidrs=tuple(spec.vpc.public_access_cidrs),
        with_oidc=spec.iam.with_oidc,
        bootstrap_admin=spec.access_config.bootstrap_cluster_creator_admin_permissions,
        access_entries=tuple(
            (e.principal_arn,
             tuple((p.policy_arn, p.access_scope.type, tuple(p.access_scope.namespaces)) for p in e.access_policies))
            for e in spec.access_config.access_entries
        ),
        node_groups=tuple(groups),
        system=system,
        tags=dict(md.tags),
        nccl_job=ctx.nccl_job,
        storage=storage_plan(spec.storage, groups, system, ctx.pool_groups),
        addons=ctx.addons,
        addresses=ctx.addresses,
        observability=ctx.observability,
        training_image=ctx.training_image,
        training_operators=TrainingOperatorsPlan.of(spec, ctx.training_jobs),
        training_jobs=ctx.training_jobs,
        kueue=ctx.kueue,
        karpenter=karpenter,
        image_cache=image_cache_plan(
            md.name, md.region, job_images(ctx.nccl_job, ctx.training_jobs),
            interface_endpoints=None if ctx.existing is not None else spec.vpc.interface_endpoints,
        ),
        existing_vpc=ctx.existing,
        warnings=(*version_warnings(md.version, ctx.today), *infiniband_warnings(spec), *ctx.warnings,
                  *ami_driver_warnings(ctx.karpenter, md.version), *ultraserver_warnings(groups, md.version)),
        authentication_mode=spec.access_config.authentication_mode,
        control_plane_tier=spec.control_plane_scaling_config.tier if spec.control_plane_scaling_config else None,
        pod_identities=tuple(
            PodIdentityPlan(
                namespace=p.namespace, service_account=p.service_account_name, role_arn=p.role_arn,
                policy_arns=tuple(p.permission_policy_arns), role_name=p.role_name, target_role_arn=p.target_role_arn,
                disable_session_tags=p.disable_session_tags, tags=tuple(sorted(p.tags.items())),
            )
            for p in spec.iam.pod_identity_associations
        ),
        access_entry_details=tuple(
            (e.type, tuple(e.kubernetes_groups), e.kubernetes_username) for e in spec.access_config.access_entries
        ),
        log_types=ctx.log_types,
        log_retention_days=ctx.log_retention_days,
    )


def _access_problems(spec: ClusterSpec) -> list[Problem]:
    """eksctl ``accessConfig``: EKS's rules for access entries (EKS API Reference, CreateAccessEntry: node types
    take no Kubernetes groups or user name; access policies go to STANDARD entries only)."""
    problems: list[Problem] = []
    access = spec.access_config
    if access.authentication_mode == "CONFIG_MAP":
        problems.append(Problem(
            "accessConfig.authenticationMode", "CONFIG_MAP",
            "access entries (efa-stack's own, for the kubectl handler, and EKS Pod Identity's) need the EKS API",
            "use API_AND_CONFIG_MAP (keeps the aws-auth ConfigMap working) or API",
        ))
    for i, entry in enumerate(access.access_entries):
        if entry.type == "STANDARD":
            continue
        for name, value in (("kubernetesGroups", entry.kubernetes_groups), ("kubernetesUsername", entry.kubernetes_username),
                            ("accessPolicies", entry.access_policies)):
            if value:
                problems.append(Problem(
                    f"accessConfig.accessEntries[{i}].{name}", value if not isinstance(value, list) else
                    [v if isinstance(v, str) else v.policy_arn for v in value],
                    f"an access entry of type {entry.type} takes no {name}",
                    f"remove {name}, or use type: STANDARD",
                ))
    return problems


def _pod_identity_problems(spec: ClusterSpec) -> list[Problem]:
    """eksctl ``iam.podIdentityAssociations``: an existing role or managed policies for a new one, each service
    account once (EKS allows one association per service account)."""
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for i, pia in enumerate(spec.iam.pod_identity_associations):
        where = f"iam.podIdentityAssociations[{i}]"
        problems.extend(role_problems(where, pia.role_arn, pia.permission_policy_arns))
        if pia.role_arn and pia.role_name:
            problems.append(Problem(
                f"{where}.roleName", pia.role_name, "roleARN already names the role (roleName names a new one)",
                "remove roleName or roleARN",
            ))
        key = (pia.namespace, pia.service_account_name)
        if key in seen:
            problems.append(Problem(
                f"{where}.serviceAccountName", pia.service_account_name,
                f"{pia.namespace}/{pia.service_account_name} already has an association",
                "keep one association per service account",
            ))
        seen.add(key)
    return problems


def _logging(spec: ClusterSpec, problems: list[Problem]) -> tuple[tuple[str, ...], int | None]:
    """eksctl ``cloudWatch.clusterLogging`` (validation.go validateCloudWatchLogging, with its wildcard)."""
    logging = spec.cloud_watch.cluster_logging if spec.cloud_watch is not None else None
    if logging is None:
        return CONTROL_PLANE_LOG_TYPES, None
    types: list[str] = []
    for i, kind in enumerate(logging.enable_types):
        if kind in ("*", "all"):
            types = list(CONTROL_PLANE_LOG_TYPES)
        elif kind in CONTROL_PLANE_LOG_TYPES:
            if kind not in types:
                types.append(kind)
        else:
            near = difflib.get_close_matches(kind, CONTROL_PLANE_LOG_TYPES, n=1)
            problems.append(Problem(
                f"cloudWatch.clusterLogging.enableTypes[{i}]", kind, "unknown log type",
                (f"did you mean {near[0]}? " if near else "") + f"use {', '.join(CONTROL_PLANE_LOG_TYPES)} or '*'",
            ))
    days = logging.log_retention_in_days
    if days is not None and days not in LOG_RETENTION_DAYS:
        problems.append(Problem(
            "cloudWatch.clusterLogging.logRetentionInDays", days, "CloudWatch Logs does not offer that retention",
            f"use one of {', '.join(map(str, LOG_RETENTION_DAYS))}",
        ))
    if days is not None and not logging.enable_types:
        problems.append(Problem(
            "cloudWatch.clusterLogging.logRetentionInDays", days, "no log type is enabled to keep",
            "add enableTypes: ['*'] (or the types you want), or remove logRetentionInDays",
        ))
    ordered = tuple(t for t in CONTROL_PLANE_LOG_TYPES if t in types)
    return ordered, days


def plan_from_file(path: str | Path, *, subnet_zones: Mapping[str, str] | None = None) -> ClusterPlan:
    """Load, validate and plan the spec at ``path``; raises :class:`SpecError` with every problem of the file:
    the structural ones and, where the rest of the file can be read, the planning ones (one run, no waves).
    ``subnet_zones``: the zones of an existing VPC's subnets that ``efa-stack lookup`` recorded (subnet id ->
    zone), for subnets the spec gives without ``az``."""
    try:
        spec = load_spec(path)
    except SpecError as exc:
        raise _with_planning_problems(exc) from None
    return build_plan(spec, source=str(path), subnet_zones=subnet_zones)


def plan_from_text(
    text: str, *, source: str = "<spec>", subnet_zones: Mapping[str, str] | None = None
) -> ClusterPlan:
    """:func:`plan_from_file` for a spec given as text."""
    try:
        spec = parse_spec(text, source=source)
    except SpecError as exc:
        raise _with_planning_problems(exc) from None
    return build_plan(spec, source=source, subnet_zones=subnet_zones)


def _under(field_name: str, prefixes: tuple[str, ...]) -> bool:
    """``field_name`` is one of ``prefixes`` or inside one (``[]`` in a prefix stands for any index, ``*`` for any
    key)."""
    for p in prefixes:
        pattern = re.escape(p).replace(re.escape("[]"), r"(\[\d+\])?").replace(re.escape("*"), r"[^.\[]+")
        if re.match(rf"{pattern}($|[.\[/])", field_name):
            return True
    return False


def _with_planning_problems(exc: SpecError) -> SpecError:
    """``exc`` with the planning problems of the spec read without its bad fields (``exc.partial``)."""
    if exc.partial is None:
        return exc
    try:
        build_plan(exc.partial, source=exc.source)
    except (KeyError, ValueError, TypeError, AttributeError, IndexError):
        # the spec read without its bad fields broke a planning step: report what was found so far
        return exc
    except SpecError as more:
        seen = {(p.field, p.message) for p in exc.problems}
        extra: list[Problem] = []
        for p in more.problems:
            if _under(p.field, exc.stripped):
                continue
            renamed = _rename(p.field, list(exc.renames))
            if renamed is not None:  # a self-managed nodeGroups entry, planned as a managed node group
                p = Problem(renamed, p.value, MOVED + p.message, p.fix)
            if (p.field, p.message) not in seen:
                extra.append(p)
        unchecked = tuple(u for u in more.unchecked if not _under(u.split(":", 1)[0], exc.stripped))
        return SpecError(exc.source, [*exc.problems, *extra], unchecked=unchecked)
    return exc
