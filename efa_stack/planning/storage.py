"""Extension: shared training storage, an FSx for Lustre file system declared in the spec.

The ``storage`` models (same conventions as :mod:`efa_stack.spec.models`, which imports this module, so
nothing here imports the spec models or the plan at run time), their checks against what FSx for Lustre
accepts, and the storage plan. The FSx facts and their sources: docs/design/storage.md.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from efa_stack import contract
from efa_stack.planning import lustre_efa
from efa_stack.planning.karpenter import KarpenterPlan
from efa_stack.planning.node_groups import NodeGroupPlan, Taint, taints_of
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import ClusterSpec, Storage

LinkKind = Literal["association", "import-path"]

DEPLOYMENT_TYPES: tuple[str, ...] = ("SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2")
THROUGHPUTS: dict[str, tuple[int, ...]] = {
    "PERSISTENT_1": (50, 100, 200),
    "PERSISTENT_2": (125, 250, 500, 1000),
}
"""Allowed ``PerUnitStorageThroughput`` (MB/s/TiB, SSD) per deployment type; scratch types take none."""
CAPACITY_STEP_GIB: dict[str, int] = {"SCRATCH_1": 3600, "SCRATCH_2": 2400, "PERSISTENT_1": 2400, "PERSISTENT_2": 2400}
"""After 1200 and 2400 GiB, capacity grows in these increments."""
ASSOCIATION_TYPES = frozenset({"PERSISTENT_2"})
"""Deployment types efa-stack links to S3 with a data repository association (the rest use ImportPath)."""
LUSTRE_VERSION = "2.15"
EVENTS: tuple[str, ...] = ("NEW", "CHANGED", "DELETED")
# Legacy AutoImportPolicy values and the events each stands for (FSx API Reference, AutoImportPolicy).
LEGACY_AUTO_IMPORT: dict[tuple[str, ...], str] = {
    (): "NONE",
    ("NEW",): "NEW",
    ("NEW", "CHANGED"): "NEW_CHANGED",
    ("NEW", "CHANGED", "DELETED"): "NEW_CHANGED_DELETED",
}


_BUCKET_CHARS = re.compile(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")
_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3")


# --- validation ------------------------------------------------------------------------------


def capacity_allowed(deployment_type: str, gib: int) -> bool:
    step = CAPACITY_STEP_GIB[deployment_type]
    return gib in (1200, 2400) or (gib > 0 and gib % step == 0)


def _capacity_fix(deployment_type: str, gib: int) -> str:
    step = CAPACITY_STEP_GIB[deployment_type]
    valid = sorted({1200, 2400, *(step * k for k in range(1, max(2, gib // step + 2)))})
    lower = max((v for v in valid if v < gib), default=None)
    higher = min((v for v in valid if v > gib), default=1200)
    near = " or ".join(str(v) for v in (lower, higher) if v is not None)
    return f"use 1200, 2400 or a multiple of {step} GiB (nearest: {near})"


def bucket_name_problem(name: str) -> str | None:
    """Why ``name`` is not a general purpose S3 bucket name, or None when it is one."""
    if name.startswith("s3://") or "/" in name:
        return "give the bucket name alone; put the path after it in s3.prefix"
    if not 3 <= len(name) <= 63:
        return "bucket names are 3 to 63 characters long"
    if not _BUCKET_CHARS.match(name):
        return ("bucket names use only lowercase letters, digits, dots and hyphens, and begin and end "
                "with a letter or digit")
    if ".." in name:
        return "bucket names must not contain two adjacent periods"
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        pass
    else:
        return "bucket names must not be formatted as an IP address"
    for p in _BUCKET_PREFIXES:
        if name.startswith(p):
            return f"bucket names must not start with {p!r}"
    for s in _BUCKET_SUFFIXES:
        if name.endswith(s):
            return f"bucket names must not end with {s!r} (reserved for access point aliases)"
    return None


def _default_node_group(groups: Sequence[NodeGroupPlan]) -> NodeGroupPlan | None:
    for wanted in (
        lambda g: g.efa_enabled and g.instance.accelerator == "nvidia",
        lambda g: g.efa_enabled,
        lambda g: True,
    ):
        found = next((g for g in groups if wanted(g)), None)
        if found is not None:
            return found
    return None


def _capacity_problems(st: Storage) -> list[Problem]:
    """The capacity rule of the deployment type, or of an EFA-enabled file system's throughput tier (whose steps are
    multiples of 2400 GiB, so its advice keeps both rules)."""
    dt, gib = st.deployment_type, st.storage_capacity_gib
    tier = st.per_unit_storage_throughput
    if tier is None and dt in THROUGHPUTS:
        tier = THROUGHPUTS[dt][0]
    step = lustre_efa.capacity_step(st, tier)
    if step is not None and tier is not None:
        problem = lustre_efa.capacity_problem(gib, tier, step)
        return [problem] if problem is not None else []
    if not capacity_allowed(dt, gib):
        return [Problem(
            "storage.storageCapacityGiB", gib, f"capacity not allowed for deploymentType {dt}",
            _capacity_fix(dt, gib),
        )]
    return []


def _efa_groups(spec: ClusterSpec, groups: Sequence[NodeGroupPlan], pools: Sequence[NodeGroupPlan]) -> list[tuple[str, NodeGroupPlan]]:
    """(field prefix, plan) of every EFA node group and Karpenter pool."""
    index = {ng.name: f"managedNodeGroups[{i}]" for i, ng in enumerate(spec.managed_node_groups)}
    index.update({p.name: f"karpenterNodePools[{i}]" for i, p in enumerate(spec.karpenter_node_pools)})
    return [(index.get(g.name, g.name), g) for g in (*groups, *pools) if g.efa_enabled]


def validate_storage(
    spec: ClusterSpec, node_groups: Sequence[NodeGroupPlan], pools: Sequence[NodeGroupPlan] = (),
) -> list[Problem]:
    """Every problem with ``spec.storage``, each naming the field, the value and the fix.

    ``node_groups`` are the planned managed node groups (``ClusterPlan.node_groups``, or the ones
    that planned cleanly while :func:`efa_stack.planning.plan.build_plan` collects problems); ``pools`` the planned
    Karpenter pools (for ``storage.efa``, whose clients they can be).
    """
    st = spec.storage
    if st is None or not st.enabled:
        return []
    out: list[Problem] = _capacity_problems(st)
    dt = st.deployment_type
    tp = st.per_unit_storage_throughput
    if tp is not None:
        allowed = THROUGHPUTS.get(dt)
        if allowed is None:
            out.append(Problem(
                "storage.perUnitStorageThroughput", tp,
                f"{dt} file systems have no per-unit throughput setting (it only exists for PERSISTENT_1 and PERSISTENT_2)",
                "remove perUnitStorageThroughput, or use deploymentType PERSISTENT_2 (125, 250, 500 or 1000)",
            ))
        elif tp not in allowed:
            out.append(Problem(
                "storage.perUnitStorageThroughput", tp, f"throughput not allowed for deploymentType {dt}",
                f"use one of {', '.join(map(str, allowed))} (MB/s per TiB)",
            ))
    link = st.s3
    if link is not None:
        why = bucket_name_problem(link.bucket)
        if why:
            out.append(Problem("storage.s3.bucket", link.bucket, "not an S3 bucket name", why))
        for fld, events in (("autoImport", link.auto_import), ("autoExport", link.auto_export)):
            if len(set(events)) != len(events):
                out.append(Problem(f"storage.s3.{fld}", list(events), "events are listed twice", "list each event once"))
        if dt not in ASSOCIATION_TYPES:
            # The older link (ImportPath on the file system) of SCRATCH_1, SCRATCH_2 and PERSISTENT_1.
            if link.auto_export:
                out.append(Problem(
                    "storage.s3.autoExport", list(link.auto_export),
                    f"automatic export needs a data repository association, which {dt} file systems "
                    "linked through ImportPath cannot have",
                    "use deploymentType PERSISTENT_2, or remove autoExport and export with a data repository task",
                ))
            if link.file_system_path != "/":
                out.append(Problem(
                    "storage.s3.fileSystemPath", link.file_system_path,
                    f"{dt} file systems link the bucket at the root of the file system",
                    "remove fileSystemPath, or use deploymentType PERSISTENT_2",
                ))
            if not link.import_on_create:
                out.append(Problem(
                    "storage.s3.importOnCreate", False,
                    f"{dt} file systems always import the bucket's listing when they are created",
                    "remove importOnCreate, or use deploymentType PERSISTENT_2",
                ))
            ordered = tuple(e for e in EVENTS if e in link.auto_import)
            if ordered not in LEGACY_AUTO_IMPORT:
                out.append(Problem(
                    "storage.s3.autoImport", list(link.auto_import),
                    f"{dt} file systems import NEW, NEW+CHANGED or NEW+CHANGED+DELETED events only",
                    "use [], [NEW], [NEW, CHANGED] or [NEW, CHANGED, DELETED], or deploymentType PERSISTENT_2",
                ))
    if st.node_group is not None and not any(g.name == st.node_group for g in node_groups):
        names = [ng.name for ng in spec.managed_node_groups]
        if st.node_group not in names:
            out.append(Problem(
                "storage.nodeGroup", st.node_group, "no managed node group has this name",
                f"use one of {', '.join(names)} (or remove nodeGroup)",
            ))
    out.extend(lustre_efa.metadata_problems(st))
    out.extend(lustre_efa.efa_problems(
        st, _storage_group(st, node_groups, pools), _efa_groups(spec, node_groups, pools),
    ))
    return out


# --- plan ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3LinkPlan:
    bucket: str
    prefix: str
    kind: LinkKind
    """``association`` (a DataRepositoryAssociation) or ``import-path`` (LustreConfiguration.ImportPath)."""
    file_system_path: str
    import_on_create: bool
    auto_import: tuple[str, ...]
    auto_export: tuple[str, ...]

    @property
    def data_repository_path(self) -> str:
        """``s3://bucket/prefix/`` (``s3://bucket/`` without a prefix), the form of the FSx examples."""
        prefix = self.prefix.strip("/")
        return f"s3://{self.bucket}/{prefix}/" if prefix else f"s3://{self.bucket}/"

    @property
    def auto_import_policy(self) -> str:
        """The ``AutoImportPolicy`` of the older ImportPath link."""
        return LEGACY_AUTO_IMPORT[tuple(e for e in EVENTS if e in self.auto_import)]


@dataclass(frozen=True)
class MetadataPlan:
    """A PERSISTENT_2 file system's ``MetadataConfiguration``."""

    mode: str
    """``AUTOMATIC`` or ``USER_PROVISIONED``."""
    iops: int | None = None
    """Metadata IOPS with ``USER_PROVISIONED``."""


@dataclass(frozen=True)
class StoragePlan:
    """Everything the storage part of the stack and the job charts need, derived once from the spec."""

    deployment_type: str
    capacity_gib: int
    per_unit_storage_throughput: int | None
    data_compression: str
    lustre_version: str
    node_group: str
    availability_zone: str
    s3: S3LinkPlan | None
    mount_path: str
    dynamic_provisioning: bool
    tolerations: tuple[Taint, ...]
    """The distinct taints of the managed node groups (``nvidia.com/gpu`` on GPU groups), sorted by
    key and effect: the FSx CSI node DaemonSet tolerates them so that every node can mount."""
    efa: bool = False
    """An EFA-enabled file system (``LustreConfiguration.EfaEnabled``): in the EFA security group, and the EFA node
    groups run AWS's EFA client setup (:attr:`efa_stack.planning.node_groups.NodeGroupPlan.lustre_efa`)."""
    metadata: MetadataPlan | None = None
    """The metadata configuration (``storage.metadataConfiguration``); None: FSx's default."""
    claim_name: str = contract.FSX_CLAIM_NAME
    claim_namespace: str = contract.FSX_CLAIM_NAMESPACE
    volume_name: str = contract.FSX_VOLUME_NAME
    storage_class_name: str = contract.FSX_STORAGE_CLASS_NAME

    @property
    def uses_association(self) -> bool:
        return self.s3 is not None and self.s3.kind == "association"

    @property
    def capacity_quantity(self) -> str:
        """The Kubernetes quantity of the PV and PVC (``1200Gi``)."""
        return f"{self.capacity_gib}Gi"


def _storage_group(
    st: Storage, node_groups: Sequence[NodeGroupPlan], pools: Sequence[NodeGroupPlan] = (),
) -> NodeGroupPlan | None:
    """The node group whose zone and private subnet get the file system (None: the system node group's): the one
    ``storage.nodeGroup`` names, else the default of :func:`_default_node_group`, among the Karpenter pools too for an
    EFA-enabled file system (which must be in its EFA clients' zone)."""
    if st.node_group is not None:
        named = next((g for g in node_groups if g.name == st.node_group), None)
        if named is not None:
            return named
    return _default_node_group([*node_groups, *pools] if st.efa else node_groups)


def with_lustre_efa(
    st: Storage | None, groups: Sequence[NodeGroupPlan], karpenter: KarpenterPlan | None,
) -> tuple[list[NodeGroupPlan], KarpenterPlan | None]:
    """The managed node groups and the Karpenter pools with the EFA client setup each one's nodes run for an
    EFA-enabled file system (:func:`efa_stack.planning.lustre_efa.client_of`); unchanged without ``storage.efa``."""
    if st is None or not st.enabled or not st.efa:
        return list(groups), karpenter
    out = [dataclasses.replace(g, lustre_efa=lustre_efa.client_of(g, st)) for g in groups]
    if karpenter is not None:
        karpenter = dataclasses.replace(karpenter, pools=tuple(
            dataclasses.replace(p, group=dataclasses.replace(p.group, lustre_efa=lustre_efa.client_of(p.group, st)))
            for p in karpenter.pools
        ))
    return out, karpenter


def storage_plan(
    st: Storage | None, node_groups: Sequence[NodeGroupPlan], system: NodeGroupPlan,
    pools: Sequence[NodeGroupPlan] = (),
) -> StoragePlan | None:
    """The storage plan of a validated spec section (None when absent or ``enabled: false``).

    Called once, by :func:`efa_stack.planning.plan.build_plan`, after :func:`validate_storage` found no problem;
    everyone else reads ``ClusterPlan.storage``. ``node_groups`` are the planned managed node groups, ``pools`` the
    Karpenter pools'.
    """

    if st is None or not st.enabled:
        return None
    group = _storage_group(st, node_groups, pools) or system
    tp = st.per_unit_storage_throughput
    if tp is None and st.deployment_type in THROUGHPUTS:
        tp = THROUGHPUTS[st.deployment_type][0]
    link = None
    if st.s3 is not None:
        link = S3LinkPlan(
            bucket=st.s3.bucket,
            prefix=st.s3.prefix,
            kind="association" if st.deployment_type in ASSOCIATION_TYPES else "import-path",
            file_system_path=st.s3.file_system_path,
            import_on_create=st.s3.import_on_create,
            auto_import=tuple(e for e in EVENTS if e in st.s3.auto_import),
            auto_export=tuple(e for e in EVENTS if e in st.s3.auto_export),
        )
    return StoragePlan(
        deployment_type=st.deployment_type,
        capacity_gib=st.storage_capacity_gib,
        per_unit_storage_throughput=tp,
        data_compression=st.data_compression,
        lustre_version=LUSTRE_VERSION,
        node_group=group.name,
        availability_zone=group.availability_zone,
        s3=link,
        mount_path=st.mount_path,
        dynamic_provisioning=st.dynamic_provisioning,
        tolerations=taints_of(node_groups),
        efa=st.efa,
        metadata=MetadataPlan(st.metadata_configuration.mode, st.metadata_configuration.iops)
        if st.metadata_configuration is not None else None,
    )
