"""Typed models of the cluster spec.

The spec is an eksctl ``ClusterConfig`` (the fields the AWS EKS EFA guide uses, unchanged) plus
documented extension fields for what eksctl cannot say. Field names follow eksctl's camelCase.
Every model forbids unknown fields; :mod:`spec.loader` turns pydantic's errors into
:class:`spec.errors.Problem` messages that name the field, the value and the fix.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from efa_stack.spec.storage import Storage

KUBERNETES_VERSIONS = ("1.33", "1.34", "1.35")
"""Versions with an EKS release, an ``aws_eks_v2.KubernetesVersion`` and a kubectl layer installed."""
DEFAULT_KUBERNETES_VERSION = "1.34"

NAME_PATTERN = r"^[a-zA-Z][-a-zA-Z0-9]*$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Metadata(_Model):
    name: str = Field(pattern=NAME_PATTERN, max_length=100)
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    version: str = DEFAULT_KUBERNETES_VERSION
    tags: dict[str, str] = Field(default_factory=dict)

    @field_validator("version", mode="before")
    @classmethod
    def _version_as_text(cls, v: object) -> object:
        # An unquoted 1.34 reads as a float; keep its text so the version check can name it.
        return str(v) if isinstance(v, (int, float)) else v


class Iam(_Model):
    with_oidc: bool = Field(False, alias="withOIDC")


class Nat(_Model):
    gateway: Literal["Single", "HighlyAvailable"] = "Single"


class ClusterEndpoints(_Model):
    public_access: bool = Field(True, alias="publicAccess")
    private_access: bool = Field(True, alias="privateAccess")


class Vpc(_Model):
    cidr: str = "10.0.0.0/16"
    nat: Nat = Nat()
    cluster_endpoints: ClusterEndpoints = Field(ClusterEndpoints(), alias="clusterEndpoints")
    public_access_cidrs: list[str] = Field(default_factory=list, alias="publicAccessCIDRs")
    # extension: interface endpoints (ECR, STS, EC2, CloudWatch Logs) for private nodes
    interface_endpoints: bool = Field(True, alias="interfaceEndpoints")

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        net = ipaddress.ip_network(v, strict=True)
        if net.version != 4 or not 16 <= net.prefixlen <= 20:
            raise ValueError("must be an IPv4 network between /16 and /20")
        return v

    @field_validator("public_access_cidrs")
    @classmethod
    def _public_cidrs(cls, v: list[str]) -> list[str]:
        for cidr in v:
            ipaddress.ip_network(cidr, strict=True)
        return v


class Taint(_Model):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Capacity(_Model):
    """Extension: how the node group's instances are bought."""

    type: Literal["on-demand", "reservation", "capacity-block"] = "on-demand"
    reservation_id: str | None = Field(None, alias="reservationId", pattern=r"^cr-[0-9a-f]{8,17}$")


# EC2 CreatePlacementGroup: a group name is up to 255 ASCII characters, unique in the account and region.
PlacementGroupName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$")]


class Placement(_Model):
    """eksctl ``placement`` on a managed node group: the launch template uses this existing group."""

    group_name: PlacementGroupName = Field(alias="groupName")


class AccessScope(_Model):
    type: Literal["cluster", "namespace"] = "cluster"
    namespaces: list[str] = Field(default_factory=list)


class AccessPolicy(_Model):
    policy_arn: str = Field(alias="policyARN", pattern=r"^arn:aws[a-z-]*:eks::aws:cluster-access-policy/")
    access_scope: AccessScope = Field(AccessScope(), alias="accessScope")


class AccessEntry(_Model):
    principal_arn: str = Field(alias="principalARN", pattern=r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:")
    access_policies: list[AccessPolicy] = Field(alias="accessPolicies", min_length=1)


class AccessConfig(_Model):
    bootstrap_cluster_creator_admin_permissions: bool = Field(
        True, alias="bootstrapClusterCreatorAdminPermissions"
    )
    access_entries: list[AccessEntry] = Field(default_factory=list, alias="accessEntries")


class ManagedNodeGroup(_Model):
    # --- eksctl fields -------------------------------------------------------------------------
    name: str = Field(pattern=NAME_PATTERN, max_length=63)
    instance_type: str = Field(alias="instanceType")
    min_size: int = Field(1, alias="minSize", ge=0)
    desired_capacity: int | None = Field(None, alias="desiredCapacity", ge=0)
    max_size: int | None = Field(None, alias="maxSize", ge=1)
    availability_zones: list[str] | None = Field(None, alias="availabilityZones")
    volume_size: int = Field(200, alias="volumeSize", ge=20, le=16384)
    volume_type: Literal["gp3", "gp2", "io1", "io2"] = Field("gp3", alias="volumeType")
    # eksctl@99984ad pkg/apis/eksctl.io/v1alpha5/types.go NodeGroupBase: `volumeIOPS`, `volumeThroughput`
    # (MiB/s); ranges per volume type are checked in spec.plan (EBS limits, with sources).
    volume_iops: int | None = Field(None, alias="volumeIOPS", ge=1)
    volume_throughput: int | None = Field(None, alias="volumeThroughput", ge=1)
    private_networking: bool | None = Field(None, alias="privateNetworking")
    efa_enabled: bool = Field(False, alias="efaEnabled")
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)
    # --- extensions ----------------------------------------------------------------------------
    interface_layout: Literal["current", "legacy"] = Field("current", alias="interfaceLayout")
    ena_on_efa_cards: bool = Field(False, alias="enaOnEfaCards")
    placement_group: bool | PlacementGroupName | None = Field(None, alias="placementGroup")
    """true: a new cluster placement group; false: none; a name: an existing group (not created here)."""
    placement: Placement | None = None
    """eksctl's spelling of an existing group (``placement.groupName``, eksctl types.go ``Placement``)."""
    capacity: Capacity = Capacity()


class SystemNodeGroup(_Model):
    """Extension: the small CPU node group that runs add-ons and MPI launchers."""

    instance_type: str = Field("m7i.xlarge", alias="instanceType")
    min_size: int = Field(2, alias="minSize", ge=1)
    desired_capacity: int | None = Field(None, alias="desiredCapacity", ge=1)
    max_size: int | None = Field(None, alias="maxSize", ge=1)
    volume_size: int = Field(50, alias="volumeSize", ge=20, le=16384)


NCCL_TEST_BINARIES = (
    "all_reduce_perf",
    "all_gather_perf",
    "reduce_scatter_perf",
    "alltoall_perf",
    "sendrecv_perf",
    "broadcast_perf",
    "reduce_perf",
    "gather_perf",
    "scatter_perf",
    "hypercube_perf",
)
"""The nccl-tests programs (NVIDIA/nccl-tests; the list the AWS awsome-distributed-training README gives)."""

# Pinned AWS nccl-tests image (public.ecr.aws/hpc-cloud/nccl-tests, built from the
# awsome-distributed-training nccl-tests.Dockerfile): CUDA 12.8.1, EFA installer 1.43.2,
# aws-ofi-nccl 1.16.3, NCCL 2.27.7, nccl-tests 2.16.9; sm_80..sm_100 (A100, H100/H200, B200).
DEFAULT_NCCL_TESTS_IMAGE = (
    "public.ecr.aws/hpc-cloud/nccl-tests:cuda12.8.1-efa1.43.2-ofiv1.16.3-ncclv2.27.7-1-testsv2.16.9"
)

SIZE_PATTERN = r"^[1-9][0-9]*[KMG]?$"


class NcclTest(_Model):
    """Extension: the nccl-tests MPIJob efa-stack renders (created suspended; see k8s/nccl_tests.py)."""

    node_group: str | None = Field(None, alias="nodeGroup", pattern=NAME_PATTERN)
    """Which node group the job runs on; default: the first EFA node group with NVIDIA GPUs."""
    binary: Literal[NCCL_TEST_BINARIES] = "all_reduce_perf"  # type: ignore[valid-type]
    min_bytes: str = Field("8", alias="minBytes", pattern=SIZE_PATTERN)
    """nccl-tests ``-b``: smallest message (bytes, or with a K/M/G suffix)."""
    max_bytes: str = Field("16G", alias="maxBytes", pattern=SIZE_PATTERN)
    """nccl-tests ``-e``: largest message."""
    step_factor: int = Field(2, alias="stepFactor", ge=2, le=1024)
    """nccl-tests ``-f``: multiply the size by this factor at each step."""
    iterations: int = Field(100, ge=1, le=100000)
    """nccl-tests ``-n``: timed iterations per size."""
    check: int = Field(1, ge=0, le=1000)
    """nccl-tests ``-c``: check the result this many iterations (0 turns checking off)."""
    fabric: Literal["efa", "tcp", "infiniband"] = "efa"
    """``efa`` (default); ``tcp`` renders the same job without EFA for an A/B comparison;
    ``infiniband`` renders it for an InfiniBand/RoCE cluster outside AWS (``rdma/hca``)."""
    image: str = Field(DEFAULT_NCCL_TESTS_IMAGE, pattern=r"^\S+[:@]\S+$")
    """Container image with nccl-tests, Open MPI, libfabric and aws-ofi-nccl; pin a tag or digest."""
    suspend: bool = True
    """Create the MPIJob suspended so that a deploy does not start GPU work."""
    hugepages_mib: int = Field(5120, alias="hugepagesMiB", ge=0, le=1048576)
    """``hugepages-2Mi`` per worker for libfabric (EFA only; 0 requests none)."""
    memory_mib: int = Field(8000, alias="memoryMiB", ge=256, le=4194304)
    """Memory request and limit per worker (hugepages need a memory request)."""
    shm_mib: int = Field(2048, alias="shmSizeMiB", ge=64, le=4194304)
    """Size limit of the memory-backed ``/dev/shm`` per worker (counts against ``memoryMiB``)."""


class ClusterSpec(_Model):
    api_version: Literal["eksctl.io/v1alpha5"] = Field("eksctl.io/v1alpha5", alias="apiVersion")
    kind: Literal["ClusterConfig"] = "ClusterConfig"
    metadata: Metadata
    iam: Iam = Iam()
    availability_zones: list[str] | None = Field(None, alias="availabilityZones")
    vpc: Vpc = Vpc()
    access_config: AccessConfig = Field(AccessConfig(), alias="accessConfig")
    managed_node_groups: list[ManagedNodeGroup] = Field(alias="managedNodeGroups", min_length=1)
    # --- extensions ----------------------------------------------------------------------------
    system_node_group: SystemNodeGroup = Field(SystemNodeGroup(), alias="systemNodeGroup")
    nccl_test: NcclTest = Field(NcclTest(), alias="ncclTest")
    storage: Storage | None = None
    """FSx for Lustre shared storage (spec/storage.py); absent: no file system."""


# eksctl ClusterConfig fields that efa-stack knows but does not support, with what to do instead.
UNSUPPORTED_EKSCTL_FIELDS: dict[str, str] = {
    "nodeGroups": "use managedNodeGroups (efa-stack builds EKS managed node groups only)",
    "fargateProfiles": "remove it; EFA and GPUs need EC2 nodes",
    "addons": "remove it; efa-stack installs the VPC CNI add-on at a version that supports efa-only",
    "addonsConfig": "remove it",
    "autoModeConfig": "remove it; EKS Auto Mode cannot lay out per-card EFA interfaces",
    "karpenter": "remove it; Karpenter cannot use placement groups or efa-only layouts",
    "cloudWatch": "remove it; control-plane logging is always on",
    "secretsEncryption": "remove it; secrets are always envelope-encrypted with a KMS key",
    "privateCluster": "remove it",
    "kubernetesNetworkConfig": "remove it",
    "identityProviders": "remove it",
    "iamIdentityMappings": "use accessConfig.accessEntries",
    "gitops": "remove it; apply dist/<cluster>/*.yaml with your GitOps tool",
    "localZones": "remove it; EFA node groups live in one availability zone",
    "outpost": "remove it",
    "zonalShiftConfig": "remove it",
    "remoteNetworkConfig": "remove it",
}
UNSUPPORTED_NODEGROUP_FIELDS: dict[str, str] = {
    "amiFamily": "remove it; the AMI type follows the accelerator (AL2023 NVIDIA / Neuron / standard)",
    "ami": "remove it; EKS-optimized AL2023 accelerated AMIs carry the EFA host software",
    "instanceTypes": "use instanceType (one type per EFA node group)",
    "instanceSelector": "use instanceType",
    "spot": "use capacity.type (on-demand, reservation or capacity-block)",
    "capacityReservation": "use capacity: {type: reservation, reservationId: cr-...}",
    "launchTemplate": "remove it; efa-stack writes the launch template from the instance catalog",
    "securityGroups": "remove it; the cluster and EFA security groups are attached to every interface",
    "subnets": "use availabilityZones; the node group goes in that zone's private subnet",
    "ssh": "remove it; use SSM Session Manager",
    "iam": "remove it; give pods permissions through EKS Pod Identity or IRSA",
    "disableIMDSv1": "remove it; IMDSv2 is always required",
    "disablePodIMDS": "remove it; the launch template sets a hop limit of 1",
    "volumeEncrypted": "remove it; volumes are always encrypted",
    "volumeKmsKeyID": "remove it",
    "preBootstrapCommands": "remove it",
    "overrideBootstrapCommand": "remove it",
    "maxPodsPerNode": "remove it",
    "updateConfig": "remove it",
    "releaseVersion": "remove it",
    "instanceName": "remove it",
    "instancePrefix": "remove it",
    "enableDetailedMonitoring": "remove it",
    "propagateASGTags": "remove it",
    "asgSuspendProcesses": "remove it",
    "bottlerocket": "remove it",
    "kubeletExtraConfig": "remove it",
    "nodeRepairConfig": "remove it",
}
