"""FSx for Lustre over EFA (``storage.efa``): what an EFA-enabled file system accepts, which nodes run AWS's EFA
client setup, and what ``efa-stack verify --acceptance`` expects of LNet on them.

The figures (capacity steps, LNet EFA interfaces per instance type, the GDS allowlist) are data with their sources
in ``data/fsx_lustre_efa.json``; the rules below cite the pages they come from. The whole story, with the upstream
quotes and where AWS's pages disagree: docs/design/fsx-efa.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from efa_stack.planning.node_groups import LustreEfaClient, NodeGroupPlan
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import Storage

DATA_FILE = Path(__file__).parent / "data" / "fsx_lustre_efa.json"

EFA_DEPLOYMENT_TYPE = "PERSISTENT_2"
"""FSx for Lustre User Guide, "Working with EFA-enabled file systems", Considerations: "EFA is supported on
Persistent 2 file systems with a metadata configuration specified"."""
METADATA_MODES = ("AUTOMATIC", "USER_PROVISIONED")
"""``MetadataConfiguration.Mode`` (FSx API Reference, CreateFileSystemLustreMetadataConfiguration)."""
METADATA_IOPS_SMALL = (1500, 3000, 6000)
METADATA_IOPS_STEP = 12000
METADATA_IOPS_MAX = 192000
"""USER_PROVISIONED metadata IOPS of an SSD file system: "1500, 3000, 6000, 12000, and multiples of 12000 up to a
maximum of 192000" (FSx API Reference, CreateFileSystemLustreMetadataConfiguration ``Iops``; the getting-started
page says the same)."""

CLIENT_PACKAGE_URL = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/samples/configure-efa-fsx-lustre-client.zip"
"""AWS's EFA client setup (FSx for Lustre User Guide, "Configuring EFA clients", Quick setup): unversioned, so it
cannot be pinned; verify checks what it did on every node."""
CLIENT_DIRECTORY = "configure-efa-fsx-lustre-client"
CLIENT_UNIT = "configure-efa-fsx-lustre-client.service"
"""The systemd unit ``setup.sh`` creates, which configures LNet again on every boot ("Managing the systemd service
manually": /etc/systemd/system/configure-efa-fsx-lustre-client.service)."""
GDS_FLAG = "--optimized-for-gds"
CLIENT_EXCLUDED_FAMILIES = ("trn2",)
""""EFA is supported on Nitro v4 (or higher) EC2 instances that support EFA, excluding the trn2 instance family"
("Configuring EFA clients"): these nodes get no EFA client setup (their Lustre traffic uses TCP)."""
NODEADM_GATE = "FSxLustreEFAClient"
"""The nodeadm feature gate of awslabs/amazon-eks-ami#2696 (closed, not merged): absent from the newest AMI release
read, v20260724 (``nodeadm/internal/api/types.go`` lists ``InstanceIdNodeName`` and ``FastImagePull`` only). Once an
AMI release ships it, the user data should set the gate instead of running the package itself."""

PROBE_WRITE_MIB = 1024
"""The bounded direct-I/O write of the LNet check: 1024 writes of 1 MiB (``dd oflag=direct``)."""
RPC_MIB = 1
"""One bulk write RPC per 1 MiB direct write: the Lustre client's default RPC size is 1 MiB (``max_pages_per_rpc``
256 pages of 4 KiB). Measured: a 1000 MiB ``dd oflag=direct`` to an EFA-enabled file system raised the efa net's
``send_count`` by 1000 and the tcp net's by 10 (liadhweka/wsi-cloud runs/2026-08-20-lustre-efa-walk-transcript.md,
g6e.24xlarge, AL2023, lustre-client 2.15.6)."""
PROBE_TIMEOUT_SECONDS = 600


@cache
def _data() -> dict[str, Any]:
    return dict(json.loads(DATA_FILE.read_text()))


def _figures(section: str) -> dict[str, Any]:
    return {k: v for k, v in _data()[section].items() if not k.startswith("_")}


def capacity_steps() -> dict[int, int]:
    """Throughput tier (MB/s/TiB) -> the GiB an EFA-enabled SSD file system's capacity is a multiple of."""
    return {int(k): int(v) for k, v in _figures("capacityStepGiB").items()}


def lnet_interfaces(instance_type: str) -> int | None:
    """@efa LNet interfaces AWS's setup binds on ``instance_type``, or None where the sources give no figure."""
    value = _figures("lnetEfaInterfaces").get(instance_type)
    return int(value) if value is not None else None


def gds_instance_types() -> tuple[str, ...]:
    return tuple(_data()["gdsInstanceTypes"]["types"])


def metadata_iops_allowed(iops: int) -> bool:
    return iops in METADATA_IOPS_SMALL or (iops % METADATA_IOPS_STEP == 0 and 0 < iops <= METADATA_IOPS_MAX)


def expected_bulk_rpcs() -> int:
    return PROBE_WRITE_MIB // RPC_MIB


def capacity_step(st: Storage, throughput: int | None) -> int | None:
    """The step that governs ``st``'s capacity when it is an EFA-enabled PERSISTENT_2 file system at a valid tier
    (``throughput``: the tier, the spec's or the default); None when the rule without EFA applies."""
    if not st.efa or st.deployment_type != EFA_DEPLOYMENT_TYPE or throughput is None:
        return None
    return capacity_steps().get(throughput)


def capacity_problem(gib: int, tier: int, step: int) -> Problem | None:
    """Why ``gib`` is not an EFA-enabled file system's capacity at ``tier`` MB/s/TiB, with a fix that keeps every rule."""
    if gib % step == 0:
        return None
    lower = (gib // step) * step
    near = " or ".join(str(v) for v in (lower, lower + step) if v > 0)
    others = ", ".join(f"{s} at {t}" for t, s in sorted(capacity_steps().items()) if t != tier)
    return Problem(
        "storage.storageCapacityGiB", gib,
        f"an EFA-enabled file system at {tier} MB/s/TiB takes multiples of {step} GiB "
        f"({step // 1200} times the 1200 GiB smallest file system without EFA)",
        f"use storageCapacityGiB: {near}; other tiers take multiples of {others} "
        "(perUnitStorageThroughput); or set efa: false",
    )


def metadata_problems(st: Storage) -> list[Problem]:
    """The metadata configuration: PERSISTENT_2 only, IOPS with USER_PROVISIONED only, and from FSx's values."""
    md = st.metadata_configuration
    if md is None:
        return []
    out: list[Problem] = []
    if st.deployment_type != EFA_DEPLOYMENT_TYPE:
        out.append(Problem(
            "storage.metadataConfiguration", md.model_dump(by_alias=True),
            f"a metadata configuration is for PERSISTENT_2 file systems only, not {st.deployment_type}",
            "remove metadataConfiguration, or use deploymentType: PERSISTENT_2",
        ))
    if md.mode == "AUTOMATIC" and md.iops is not None:
        out.append(Problem(
            "storage.metadataConfiguration.iops", md.iops, "AUTOMATIC mode provisions the metadata IOPS itself",
            "remove iops, or set mode: USER_PROVISIONED",
        ))
    elif md.mode == "USER_PROVISIONED" and md.iops is None:
        out.append(Problem(
            "storage.metadataConfiguration.iops", None, "USER_PROVISIONED mode needs the metadata IOPS",
            "set iops: 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000, or use mode: AUTOMATIC",
        ))
    elif md.iops is not None and not metadata_iops_allowed(md.iops):
        out.append(Problem(
            "storage.metadataConfiguration.iops", md.iops, "not a metadata IOPS value of an SSD file system",
            "use 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000",
        ))
    return out


def efa_problems(
    st: Storage, storage_group: NodeGroupPlan | None, efa_groups: Sequence[tuple[str, NodeGroupPlan]],
) -> list[Problem]:
    """Every problem of ``storage.efa`` / ``storage.gpuDirectStorage`` but the capacity (:func:`capacity_problem`).

    ``storage_group``: the group whose zone gets the file system; ``efa_groups``: (field prefix, plan) of every EFA
    node group and Karpenter pool.
    """
    if not st.efa:
        if st.gpu_direct_storage:
            return [Problem(
                "storage.gpuDirectStorage", True, "GPUDirect Storage reaches FSx over EFA: it needs storage.efa",
                "remove gpuDirectStorage, or set efa: true as well (docs/spec.md lists what an EFA-enabled file "
                "system needs)",
            )]
        return []
    out: list[Problem] = []
    if st.deployment_type != EFA_DEPLOYMENT_TYPE:
        out.append(Problem(
            "storage.deploymentType", st.deployment_type,
            "an EFA-enabled file system is PERSISTENT_2 (FSx for Lustre User Guide, EFA-enabled file systems)",
            "use deploymentType: PERSISTENT_2, or set efa: false",
        ))
    if st.metadata_configuration is None:
        out.append(Problem(
            "storage.metadataConfiguration", None,
            "an EFA-enabled file system needs a metadata configuration (FSx: \"Persistent 2 file systems with a "
            "metadata configuration specified\")",
            "add metadataConfiguration: {mode: AUTOMATIC}, or mode USER_PROVISIONED with iops",
        ))
    out.extend(_client_problems(st, storage_group, efa_groups))
    return out


def _client_problems(
    st: Storage, storage_group: NodeGroupPlan | None, efa_groups: Sequence[tuple[str, NodeGroupPlan]],
) -> list[Problem]:
    clients = [(p, g) for p, g in efa_groups if g.instance.family not in CLIENT_EXCLUDED_FAMILIES]
    if not clients:
        return [Problem(
            "storage.efa", True, "no EFA node group or pool would reach the file system over EFA"
            + (" (trn2 instances cannot: FSx for Lustre User Guide, Configuring EFA clients)" if efa_groups else ""),
            "set efaEnabled: true on a GPU node group, or set efa: false",
        )]
    out: list[Problem] = []
    zone = storage_group.availability_zone if storage_group is not None else clients[0][1].availability_zone
    away = [(p, g) for p, g in clients if g.availability_zone != zone]
    if away:
        names = ", ".join(f"{g.name} ({g.availability_zone})" for _, g in away)
        out.append(Problem(
            "storage.efa", True,
            f"the file system is in {zone} but EFA node groups {names} are not: clients reach an EFA-enabled file "
            "system over EFA only from its Availability Zone (FSx for Lustre User Guide, EFA-enabled file systems, "
            "prerequisites); their Lustre traffic would use TCP",
            f"put those node groups in {zone} (availabilityZones: [{zone}]), or set efa: false",
        ))
    if st.gpu_direct_storage:
        allowed = gds_instance_types()
        for prefix, g in clients:
            if g.instance_type not in allowed:
                out.append(Problem(
                    f"{prefix}.instanceType", g.instance_type,
                    f"storage.gpuDirectStorage runs AWS's setup.sh {GDS_FLAG}, which fails on {g.instance_type} "
                    "(its GDS allowlist)",
                    f"use one of {', '.join(allowed)} for node group {g.name}, or remove storage.gpuDirectStorage",
                ))
    return out


def client_of(group: NodeGroupPlan, st: Storage | None) -> LustreEfaClient | None:
    """The EFA client setup ``group``'s nodes run, or None (no EFA-enabled file system, no EFA, or trn2)."""
    if st is None or not st.enabled or not st.efa or not group.efa_enabled:
        return None
    if group.instance.family in CLIENT_EXCLUDED_FAMILIES:
        return None
    figure = lnet_interfaces(group.instance_type)
    return LustreEfaClient(
        gds=st.gpu_direct_storage,
        lnet_interfaces=min(figure, group.efa_devices_per_node) if figure is not None else None,
    )
