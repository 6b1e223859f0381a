"""Typed models of the cluster spec: an eksctl ``ClusterConfig`` plus efa-stack's extension fields.

Every model forbids unknown fields and is strict, as eksctl's Go types are; :mod:`efa_stack.spec.loader`
turns pydantic's errors into :class:`efa_stack.spec.errors.Problem` messages. Each field's docstring is its
description in the published JSON Schema and in docs/spec-reference.md (docs/design/spec-and-plan.md).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from efa_stack import contract
from efa_stack.spec import resource_names
from efa_stack.spec.errors import FixError

KUBERNETES_VERSIONS = ("1.31", "1.32", "1.33", "1.34", "1.35", "1.36", "1.37")
"""Versions with an EKS release, an ``aws_eks_v2.KubernetesVersion`` and a kubectl layer installed."""
DEFAULT_KUBERNETES_VERSION = "1.35"
"""The version of a spec that names none: in EKS standard support for months ahead (the dates:
efa_stack/planning/data/kubernetes_versions.json), with EKS AL2023 AMIs of every type (eks_al2023_ami_releases.json),
and the version of the API server that tests/test_apiserver.py runs (tools/kube-apiserver/go.mod)."""

NAME_PATTERN = r"^[a-zA-Z][-a-zA-Z0-9]*$"

# EKS User Guide, "Amazon EKS service quotas" (https://docs.aws.amazon.com/eks/latest/userguide/
# service-quotas.html): "Nodes per managed node group" 450 and "Managed node groups per cluster" 30
# (per Region; the defaults, adjustable through Service Quotas). The EKS API's NodegroupScalingConfig
# takes minSize >= 0, maxSize >= 1 and desiredSize >= 0 and defers the maximum to these quotas.
MAX_NODES_PER_NODE_GROUP = 450
MAX_MANAGED_NODE_GROUPS = 30
MAX_USER_NODE_GROUPS = MAX_MANAGED_NODE_GROUPS - 1
"""``managedNodeGroups`` entries: the quota less the system node group efa-stack adds."""
MAX_NODES_PER_SPEC_NODE_GROUP = MAX_NODES_PER_NODE_GROUP * MAX_USER_NODE_GROUPS
"""A ``managedNodeGroups`` entry larger than one EKS node group is split over several
(:attr:`efa_stack.planning.node_groups.NodeGroupPlan.parts`); all of the cluster's node groups but the system
group's together hold at most this many nodes (the plan counts the EKS node groups against the quota)."""
NODES_QUOTA_FIX = (
    f"EKS's default quotas are {MAX_NODES_PER_NODE_GROUP} nodes per managed node group (Service Quotas "
    f"L-BD136A63) and {MAX_MANAGED_NODE_GROUPS} managed node groups per cluster (L-6D54EA21): a managedNodeGroups "
    f"entry is split over EKS node groups of {MAX_NODES_PER_NODE_GROUP}, so it holds at most "
    f"{MAX_NODES_PER_SPEC_NODE_GROUP} nodes and the system node group at most {MAX_NODES_PER_NODE_GROUP}; "
    "spread larger fleets over several clusters"
)

# EC2 API Reference, LaunchTemplateEbsBlockDeviceRequest.VolumeSize (the launch template carries the
# root volume): gp2 and gp3 1-16,384 GiB, io1 4-16,384 GiB, io2 4-65,536 GiB.
EBS_MAX_VOLUME_GIB: dict[str, int] = {"gp2": 16384, "gp3": 16384, "io1": 16384, "io2": 65536}
EBS_MIN_IOPS: dict[str, int] = {"gp3": 3000, "io1": 100, "io2": 100}
"""Fewest provisioned IOPS per volume type (CloudFormation AWS::EC2::LaunchTemplate Ebs ``Iops``; the whole ranges
and ratios: efa_stack/planning/limits.py)."""
DEFAULT_NODE_COUNT = 2
"""eksctl's minSize when neither minSize nor desiredCapacity is set (types.go DefaultNodeCount)."""
DEFAULT_NODE_TYPE = "m5.large"
"""eksctl's instance type when neither instanceType nor instanceTypes is given (types.go DefaultNodeType)."""
MIN_VOLUME_GIB = 20
"""Smallest root volume: the EKS-optimized AL2023 AMIs' root snapshot is 20 GiB (eksctl's examples use 20)."""


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, strict=True, use_attribute_docstrings=True
    )


# --- extension sections: storage, training image, kubelet tuning ------------------------------------

DeploymentType = Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"]
Compression = Literal["NONE", "LZ4"]
Event = Literal["NEW", "CHANGED", "DELETED"]
_ALL_EVENTS: tuple[Event, ...] = ("NEW", "CHANGED", "DELETED")
FSX_MAX_STORAGE_CAPACITY = 2**31 - 1
"""FSx API Reference, CreateFileSystem: ``StorageCapacity`` is an Integer (32-bit) number of GiB."""
VERSION_PATTERN = r"^\d+(\.\d+){1,3}$"
DEFAULT_IMAGE_DIRECTORY = "images/efa-pytorch"
CpuManagerPolicy = Literal["none", "static"]
TopologyManagerPolicy = Literal["none", "best-effort", "restricted", "single-numa-node"]
TopologyManagerScope = Literal["container", "pod"]


class S3Link(_Model):
    """An S3 bucket (and prefix) linked to the file system."""

    bucket: str
    """The bucket name only (no ``s3://``); it must be in the cluster's region."""
    prefix: str = Field("", pattern=r"^[^\s]*$")
    """Objects under this prefix appear in the file system (``""``: the whole bucket)."""
    import_on_create: bool = Field(True, alias="importOnCreate")
    """Load the listing of the linked objects when the link is created (always on for ImportPath)."""
    auto_import: list[Event] = Field(default_factory=lambda: list(_ALL_EVENTS), alias="autoImport")
    """S3 changes that FSx imports automatically (``[]``: none after the first import)."""
    auto_export: list[Event] = Field(default_factory=list, alias="autoExport")
    """File system changes that FSx writes back to S3 automatically (PERSISTENT_2 only)."""
    file_system_path: str = Field("/", alias="fileSystemPath", pattern=r"^/[^\s]*$")
    """Where the linked objects appear in the file system (PERSISTENT_2 only; ``/`` is the root)."""


class MetadataConfiguration(_Model):
    """The metadata performance of a PERSISTENT_2 file system (FSx ``MetadataConfiguration``)."""

    mode: Literal["AUTOMATIC", "USER_PROVISIONED"] = "AUTOMATIC"
    """``AUTOMATIC``: FSx provisions metadata IOPS by storage capacity; ``USER_PROVISIONED``: ``iops`` of them."""
    iops: int | None = Field(None, gt=0)
    """Metadata IOPS with ``USER_PROVISIONED``: 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000."""


class Storage(_Model):
    """Extension: an FSx for Lustre file system shared by the training jobs (see docs/spec.md, "Shared storage")."""

    enabled: bool = True
    """Create the file system (``false`` keeps the section but builds nothing)."""
    deployment_type: DeploymentType = Field("PERSISTENT_2", alias="deploymentType")
    """FSx for Lustre deployment type."""
    storage_capacity_gib: int = Field(1200, alias="storageCapacityGiB", gt=0, le=FSX_MAX_STORAGE_CAPACITY)
    """GiB: 1200, 2400 or a multiple of 2400 (3600 for SCRATCH_1)."""
    per_unit_storage_throughput: int | None = Field(None, alias="perUnitStorageThroughput", gt=0)
    """MB/s/TiB for persistent types; default the lowest (PERSISTENT_1: 50, PERSISTENT_2: 125)."""
    data_compression: Compression = Field("NONE", alias="dataCompression")
    """``NONE`` or ``LZ4`` compression of the file system's data."""
    s3: S3Link | None = None
    """An S3 bucket linked to the file system (absent: none)."""
    mount_path: str = Field(contract.FSX_MOUNT_PATH, alias="mountPath", pattern=r"^/[A-Za-z0-9._/-]*[A-Za-z0-9._-]$")
    """Where the NCCL/training job containers see the file system."""
    node_group: str | None = Field(None, alias="nodeGroup", pattern=r"^[a-zA-Z][-a-zA-Z0-9]*$")
    """Whose availability zone and private subnet get the file system; default: the first EFA node
    group with NVIDIA GPUs (else the first EFA node group, else the first node group; with ``efa``, Karpenter pools
    count as node groups)."""
    dynamic_provisioning: bool = Field(False, alias="dynamicProvisioning")
    """Also create the ``fsx-lustre`` StorageClass: one new file system per claim (deleted with it)."""
    metadata_configuration: MetadataConfiguration | None = Field(None, alias="metadataConfiguration")
    """PERSISTENT_2 only: the metadata performance (absent: FSx's default); an EFA-enabled file system needs one."""
    efa: bool = False
    """An EFA-enabled file system (``EfaEnabled``) that the EFA nodes reach over EFA: PERSISTENT_2 with a metadata
    configuration, capacity in larger steps per throughput tier, in the EFA nodes' zone, and set at creation only
    (a change replaces the file system). The EFA nodes run AWS's EFA client setup at boot (docs/spec.md)."""
    gpu_direct_storage: bool = Field(False, alias="gpuDirectStorage")
    """With ``efa``: the EFA nodes' client setup optimized for NVIDIA GPUDirect Storage (``setup.sh
    --optimized-for-gds``; p5, p5e, p5en and p6-b200 instance types only)."""


class TrainingImage(_Model):
    """Extension: an EFA-ready PyTorch image that ``cdk deploy`` builds and pushes to the CDK assets ECR
    repository (see docs/training-jobs.md, "The training image")."""

    build: bool = False
    """Build the image during ``cdk deploy`` (needs Docker where ``cdk deploy`` runs; synth does not)."""
    directory: str = Field(DEFAULT_IMAGE_DIRECTORY, min_length=1, max_length=255)
    """The Docker build context with its ``Dockerfile``, relative to the project root (the folder of
    cdk.json) or absolute."""
    pytorch_version: str | None = Field(None, alias="pytorchVersion", pattern=VERSION_PATTERN)
    """PyTorch release; default: the Dockerfile's ``ARG PYTORCH_VERSION`` default if it has one, else the ``recipe`` set
    of the table of EFA software (efa_stack/planning/data/efa_software.json). CUDA and NCCL follow from it."""
    efa_installer_version: str | None = Field(None, alias="efaInstallerVersion", pattern=VERSION_PATTERN)
    """EFA installer release; default: the Dockerfile's ``ARG EFA_INSTALLER_VERSION`` default if it has one, else the
    table's ``recipe`` set. aws-ofi-nccl and libfabric follow from it."""


class Metadata(_Model):
    name: str = Field(pattern=NAME_PATTERN, max_length=100)
    """The cluster name; it prefixes the CloudFormation stacks and the EKS cluster."""
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    """The AWS Region to deploy into (``efa-stack catalog list`` shows the instance types it knows)."""
    version: str = DEFAULT_KUBERNETES_VERSION
    """Kubernetes version of the EKS cluster, quoted: one efa-stack builds that EKS offers for new clusters on the day of
    the synth (docs/spec.md); a version in extended support plans with a warning."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Tags on every resource of the stacks."""

    @field_validator("version", mode="before")
    @classmethod
    def _version_as_text(cls, v: object) -> object:
        # An unquoted 1.34 reads as a float; keep its text so the version check can name it.
        return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


class Nat(_Model):
    gateway: Literal["Single", "HighlyAvailable"] = "Single"
    """One NAT gateway (``Single``) or one per availability zone (``HighlyAvailable``)."""


class ClusterEndpoints(_Model):
    public_access: bool = Field(True, alias="publicAccess")
    """Serve the Kubernetes API on a public endpoint."""
    private_access: bool = Field(True, alias="privateAccess")
    """Serve the Kubernetes API inside the VPC."""


SUBNET_ID_PATTERN = r"^subnet-[0-9a-f]{8,17}$"
VPC_ID_PATTERN = r"^vpc-[0-9a-f]{8,17}$"


class SubnetSpec(_Model):
    """eksctl ``AZSubnetSpec``: one existing subnet."""

    id: str = Field(pattern=SUBNET_ID_PATTERN)
    """The subnet id (``subnet-...``)."""
    az: str | None = None
    """Its availability zone; default: the entry's key when that is a zone name (efa-stack does not call EC2 to
    look it up)."""
    cidr: str | None = None
    """Its IPv4 range (informational)."""


class VpcSubnets(_Model):
    """eksctl ``vpc.subnets``: existing subnets by name (a zone name or any name)."""

    private: dict[str, SubnetSpec] = Field(default_factory=dict)
    """Private subnets (with NAT egress) for the control plane's interfaces and the nodes."""
    public: dict[str, SubnetSpec] = Field(default_factory=dict)
    """Public subnets (for load balancers; efa-stack puts no nodes there)."""


class Vpc(_Model):
    id: str | None = Field(None, pattern=VPC_ID_PATTERN)
    """eksctl: an existing VPC (with ``subnets``) instead of the one efa-stack creates; its private subnets need
    egress to the internet (NAT) or the VPC endpoints nodes use."""
    subnets: VpcSubnets | None = None
    """eksctl: the existing VPC's subnets (with ``id``)."""
    cidr: str = "10.0.0.0/16"
    """The new VPC's IPv4 range, /16 to /20 (not used with an existing VPC, ``id``)."""
    nat: Nat = Nat()
    """NAT gateways for the private subnets."""
    cluster_endpoints: ClusterEndpoints = Field(ClusterEndpoints(), alias="clusterEndpoints")
    """Which Kubernetes API endpoints the cluster has."""
    public_access_cidrs: list[str] = Field(default_factory=list, alias="publicAccessCIDRs")
    """CIDRs allowed to reach the public endpoint (empty: any)."""
    interface_endpoints: bool = Field(True, alias="interfaceEndpoints")
    """Extension: interface endpoints for ECR, STS, EC2 and CloudWatch Logs, for private nodes."""
    pod_cidr: str | None = Field(None, alias="podCIDR", max_length=18)
    """Extension: a secondary IPv4 range (RFC 1918 or 100.64.0.0/10, /16 to /28) for the pods' addresses: efa-stack
    associates it with the VPC, carves one pod subnet per zone from it and turns on VPC CNI custom networking
    (an ENIConfig per zone), so pods no longer take addresses from the private subnets; absent: pods share the
    private subnets (docs/design/scale.md, custom networking). Not with an existing VPC (``id``)."""

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


class TaintSpec(_Model):
    key: str = Field(min_length=1)
    """The taint key."""
    value: str = ""
    """The taint value (may be empty)."""
    effect: contract.TaintEffect
    """What the taint does to pods that do not tolerate it."""


class Capacity(_Model):
    """Extension: how the node group's instances are bought."""

    type: contract.CapacityKind = contract.ON_DEMAND
    """``on-demand``; ``reservation`` (an On-Demand Capacity Reservation); ``capacity-block`` (EC2 Capacity
    Blocks for ML)."""
    reservation_id: str | None = Field(None, alias="reservationId", pattern=r"^cr-[0-9a-f]{8,17}$")
    """The reservation or Capacity Block to launch into (``cr-...``); required unless on-demand."""


# EC2 CreatePlacementGroup: a group name is up to 255 ASCII characters, unique in the account and region.
PlacementGroupName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$")]


class Placement(_Model):
    """eksctl ``placement`` on a managed node group: the launch template uses this existing group."""

    group_name: PlacementGroupName = Field(alias="groupName")
    """The name of an existing cluster placement group."""


class AccessScope(_Model):
    type: Literal["cluster", "namespace"] = "cluster"
    """Where the access policy applies: the whole cluster or the listed namespaces."""
    namespaces: list[str] = Field(default_factory=list)
    """The namespaces of a ``namespace`` scope."""


class AccessPolicy(_Model):
    policy_arn: str = Field(alias="policyARN", pattern=r"^arn:aws[a-z-]*:eks::aws:cluster-access-policy/")
    """An EKS access policy ARN (``arn:aws:eks::aws:cluster-access-policy/...``)."""
    access_scope: AccessScope = Field(AccessScope(), alias="accessScope")
    """Where the policy applies."""


AccessEntryType = Literal[
    "STANDARD", "EC2", "EC2_LINUX", "EC2_WINDOWS", "FARGATE_LINUX", "HYBRID_LINUX", "HYPERPOD_LINUX"
]


class AccessEntry(_Model):
    """eksctl ``accessConfig.accessEntries`` entry (CloudFormation ``AWS::EKS::AccessEntry``)."""

    principal_arn: str = Field(alias="principalARN", pattern=r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:")
    """The IAM principal (user or role ARN) given access."""
    type: AccessEntryType = "STANDARD"
    """``STANDARD`` (users and roles) or a node type (``EC2_LINUX``, ...: the role of nodes efa-stack does not
    manage; no policies or groups then)."""
    kubernetes_groups: list[str] = Field(default_factory=list, alias="kubernetesGroups", max_length=100)
    """Kubernetes groups the principal is in (for RBAC bindings to those groups); STANDARD only."""
    kubernetes_username: str | None = Field(None, alias="kubernetesUsername", min_length=1, max_length=255)
    """The Kubernetes user name of the principal; STANDARD only."""
    access_policies: list[AccessPolicy] = Field(default_factory=list, alias="accessPolicies")
    """The EKS access policies associated with the principal; STANDARD only."""


class AccessConfig(_Model):
    authentication_mode: Literal["API", "API_AND_CONFIG_MAP", "CONFIG_MAP"] = Field(
        "API", alias="authenticationMode"
    )
    """How the cluster authenticates IAM principals: ``API`` (access entries only) or ``API_AND_CONFIG_MAP``
    (also the aws-auth ConfigMap); efa-stack's default is ``API`` (eksctl's is ``API_AND_CONFIG_MAP``)."""
    bootstrap_cluster_creator_admin_permissions: bool = Field(
        True, alias="bootstrapClusterCreatorAdminPermissions"
    )
    """Give the identity that creates the cluster cluster-admin access."""
    access_entries: list[AccessEntry] = Field(default_factory=list, alias="accessEntries")
    """EKS access entries for further principals."""


# --- EKS add-ons and node repair ---------------------------------------------------------------
# eksctl-io/eksctl@v0.230.0:pkg/apis/eksctl.io/v1alpha5/addon.go (Addon) and iam.go (PodIdentityAssociation).
ADDON_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,99}$"
ADDON_VERSION_PATTERN = r"^v\d+\.\d+\.\d+-eksbuild\.\d+$"
"""A full add-on build as ``aws eks describe-addon-versions`` lists it (``v1.20.1-eksbuild.3``)."""
K8S_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
IAM_ROLE_ARN_PATTERN = r"^arn:aws[a-z-]*:iam::\d{12}:role/[A-Za-z0-9+=,.@_/-]+$"
IAM_POLICY_ARN_PATTERN = r"^arn:aws[a-z-]*:iam::(\d{12}|aws):policy/[A-Za-z0-9+=,.@_/-]+$"


def policy_arns(arns: list[str]) -> list[str]:
    """``arns`` when each is an IAM policy ARN; else a FixError naming the first that is not."""
    for arn in arns:
        if not re.match(IAM_POLICY_ARN_PATTERN, arn):
            raise FixError(
                f"{arn!r} is not an IAM policy ARN",
                "use arn:aws:iam::aws:policy/NAME (AWS managed) or arn:aws:iam::ACCOUNT:policy/NAME",
            )
    return arns



class PodIdentityAssociationSpec(_Model):
    """One service account of the add-on and the IAM role its pods get through EKS Pod Identity."""

    namespace: str = Field(pattern=K8S_NAME_PATTERN, max_length=63)
    """The service account's namespace (``kube-system`` for most AWS add-ons)."""
    service_account_name: str = Field(alias="serviceAccountName", pattern=K8S_NAME_PATTERN, max_length=253)
    """The add-on's service account."""
    role_arn: str | None = Field(None, alias="roleARN", pattern=IAM_ROLE_ARN_PATTERN)
    """An existing IAM role (trusting ``pods.eks.amazonaws.com``); or leave it out and list
    ``permissionPolicyARNs`` for a new role."""
    permission_policy_arns: list[str] = Field(default_factory=list, alias="permissionPolicyARNs", max_length=20)
    """Managed policies of the new role efa-stack creates for the service account."""

    @field_validator("permission_policy_arns")
    @classmethod
    def _policy_arns(cls, v: list[str]) -> list[str]:
        return policy_arns(v)


class AddonSpec(_Model):
    """An EKS add-on (``AWS::EKS::Addon``), as eksctl's ``addons`` entry spells it."""

    name: str = Field(pattern=ADDON_NAME_PATTERN)
    """The EKS add-on name (``aws eks describe-addon-versions`` lists them), e.g. ``coredns``."""
    version: str | None = None
    """A full build, ``vX.Y.Z-eksbuild.N``; absent: the build EKS marks default for the cluster's
    Kubernetes version (efa-stack pins its own add-ons)."""
    configuration_values: str | None = Field(None, alias="configurationValues", max_length=65536)
    """The add-on's configuration as a JSON or YAML mapping, in a string (validated against the add-on's
    schema where efa-stack keeps one)."""
    resolve_conflicts: Literal["none", "overwrite", "preserve", "NONE", "OVERWRITE", "PRESERVE"] | None = Field(
        None, alias="resolveConflicts"
    )
    """What EKS does with fields of an existing installation that differ: ``none`` or ``overwrite``."""
    pod_identity_associations: list[PodIdentityAssociationSpec] = Field(
        default_factory=list, alias="podIdentityAssociations", max_length=20
    )
    """IAM roles for the add-on's service accounts through EKS Pod Identity."""
    service_account_role_arn: str | None = Field(None, alias="serviceAccountRoleARN", pattern=IAM_ROLE_ARN_PATTERN)
    """An existing role for the add-on's service account through IRSA (needs ``iam.withOIDC``)."""
    attach_policy_arns: list[str] = Field(default_factory=list, alias="attachPolicyARNs", max_length=18)
    """Managed policies for a new role of the add-on's service account. eksctl makes it an IRSA role; efa-stack
    gives the same service account the same policies through EKS Pod Identity (add-ons whose service account
    efa-stack knows: planning/data/addon_service_accounts.json)."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Tags on the add-on."""

    @field_validator("attach_policy_arns")
    @classmethod
    def _policy_arns(cls, v: list[str]) -> list[str]:
        return policy_arns(v)

    @field_validator("name", mode="before")
    @classmethod
    def _lowercase_name(cls, v: object) -> object:
        # eksctl compares add-on names case-insensitively (Addon.CanonicalName lowercases).
        return v.lower() if isinstance(v, str) else v


class NodeRepairOverrideSpec(_Model):
    """eksctl ``nodeRepairConfigOverrides`` entry (types.go NodeRepairConfigOverride; CloudFormation
    ``NodeRepairConfigOverrides``): what EKS does, and after how long, for one condition and reason."""

    node_monitoring_condition: str = Field(alias="nodeMonitoringCondition", min_length=1, max_length=128)
    """A condition the node monitoring agent reports, e.g. ``AcceleratedHardwareReady``."""
    node_unhealthy_reason: str = Field(alias="nodeUnhealthyReason", min_length=1, max_length=128)
    """A reason the agent reports for it, e.g. ``NvidiaXID79Error``."""
    min_repair_wait_time_mins: int = Field(alias="minRepairWaitTimeMins", ge=1)
    """Minutes to wait before repairing a node with this condition and reason."""
    repair_action: Literal["Replace", "Reboot", "NoAction"] = Field(alias="repairAction")
    """``Replace``, ``Reboot`` or ``NoAction``."""


class NodeRepairConfigSpec(_Model):
    """EKS node auto repair of a managed node group (eksctl's ``nodeRepairConfig``; CloudFormation
    ``AWS::EKS::Nodegroup NodeRepairConfig``)."""

    enabled: bool | None = None
    """Replace or reboot nodes the node monitoring agent reports unhealthy; default: on for GPU and Neuron node
    groups, off otherwise."""
    # EKS API Reference, NodeRepairConfig: counts >= 1, percentages 1-100; a count and the percentage of the
    # same limit are exclusive (checked in spec.addons).
    max_unhealthy_node_threshold_count: int | None = Field(None, alias="maxUnhealthyNodeThresholdCount", ge=1)
    """Stop repairing above this many unhealthy nodes."""
    max_unhealthy_node_threshold_percentage: int | None = Field(
        None, alias="maxUnhealthyNodeThresholdPercentage", ge=1, le=100
    )
    """Stop repairing above this percentage of unhealthy nodes."""
    max_parallel_nodes_repaired_count: int | None = Field(None, alias="maxParallelNodesRepairedCount", ge=1)
    """Repair at most this many nodes at once."""
    max_parallel_nodes_repaired_percentage: int | None = Field(
        None, alias="maxParallelNodesRepairedPercentage", ge=1, le=100
    )
    """Repair at most this percentage of the unhealthy nodes at once."""
    node_repair_config_overrides: list[NodeRepairOverrideSpec] = Field(
        default_factory=list, alias="nodeRepairConfigOverrides", max_length=50
    )
    """Per condition and reason: the repair action and the wait before it (eksctl's field)."""


class NodeGroupUpdateConfigSpec(_Model):
    """eksctl ``updateConfig`` (eksctl-io/eksctl@v0.230.0 types.go NodeGroupUpdateConfig; CloudFormation
    ``AWS::EKS::Nodegroup UpdateConfig``): how many nodes a version update of the managed node group replaces at
    once; one of the two. EKS launches the new nodes before it drains and ends the old ones."""

    # EKS API Reference, NodegroupUpdateConfig: maxUnavailable 1 or more, at most 100; the percentage 1-100.
    max_unavailable: int | None = Field(None, alias="maxUnavailable", ge=1, le=100)
    """Nodes replaced at once (at most ``maxSize``)."""
    max_unavailable_percentage: int | None = Field(None, alias="maxUnavailablePercentage", ge=1, le=100)
    """Percentage of the nodes replaced at once (EKS: at most 100 nodes)."""


# --- eksctl node group fields: IAM, SSH, capacity reservations, bootstrap -------------------------
# eksctl-io/eksctl@v0.230.0 (99984ad): pkg/apis/eksctl.io/v1alpha5/types.go NodeGroupIAM,
# NodeGroupIAMAddonPolicies, NodeGroupSSH, CapacityReservation, InstanceMarketOptions, NodeGroupBase.
AMI_ID_PATTERN = r"^ami-[0-9a-f]{8,17}$"
RESERVATION_ID_PATTERN = r"^cr-[0-9a-f]{8,17}$"


class NodeGroupAddonPolicies(_Model):
    """eksctl ``iam.withAddonPolicies``: permissions for add-ons that run on the nodes, on the node role."""

    image_builder: bool = Field(False, alias="imageBuilder")
    """AmazonEC2ContainerRegistryPowerUser on the node role (push to ECR)."""
    auto_scaler: bool = Field(False, alias="autoScaler")
    """The Cluster Autoscaler's Auto Scaling and EC2 describe/scale actions (an inline policy, as eksctl's)."""
    external_dns: bool = Field(False, alias="externalDNS")
    """Not mapped: give ExternalDNS its Route 53 permissions through Pod Identity."""
    cert_manager: bool = Field(False, alias="certManager")
    """Not mapped: give cert-manager its Route 53 permissions through Pod Identity."""
    app_mesh: bool = Field(False, alias="appMesh")
    """Not mapped (App Mesh is discontinued)."""
    app_mesh_preview: bool = Field(False, alias="appMeshPreview")
    """Not mapped (App Mesh is discontinued)."""
    ebs: bool = False
    """service-role/AmazonEBSCSIDriverPolicy on the node role (the EBS CSI driver on the nodes' credentials)."""
    fsx: bool = False
    """``fsx:*`` and the FSx service-linked role (an inline policy, as eksctl's)."""
    efs: bool = False
    """``elasticfilesystem:*`` and the EC2 network-interface actions EFS needs (an inline policy, as eksctl's)."""
    aws_load_balancer_controller: bool = Field(False, alias="awsLoadBalancerController")
    """Not mapped: give the AWS Load Balancer Controller its policy through Pod Identity."""
    alb_ingress: bool = Field(False, alias="albIngress")
    """eksctl's older name of ``awsLoadBalancerController``; not mapped."""
    x_ray: bool = Field(False, alias="xRay")
    """The X-Ray daemon's trace and sampling actions (an inline policy, as eksctl's)."""
    cloud_watch: bool = Field(False, alias="cloudWatch")
    """CloudWatchAgentServerPolicy on the node role (CloudWatch agent, Container Insights)."""


class NodeGroupIamSpec(_Model):
    """eksctl ``iam`` of a node group: what the node group's own IAM role gets beside efa-stack's node policies
    (AmazonEKSWorkerNodePolicy, AmazonEC2ContainerRegistryPullOnly, AmazonSSMManagedInstanceCore)."""

    with_addon_policies: NodeGroupAddonPolicies = Field(NodeGroupAddonPolicies(), alias="withAddonPolicies")
    """Permissions for add-ons on the nodes, mapped as eksctl maps them."""
    attach_policy_arns: list[str] = Field(default_factory=list, alias="attachPolicyARNs", max_length=18)
    """Managed policies attached to the node role, in addition to efa-stack's node policies (eksctl attaches
    only these when set; efa-stack keeps the three a managed node needs)."""
    instance_role_arn: str | None = Field(None, alias="instanceRoleARN", pattern=IAM_ROLE_ARN_PATTERN)
    """An existing node role (trusting ec2.amazonaws.com, with the EKS node policies) instead of a new one."""
    instance_role_name: str | None = Field(
        None, alias="instanceRoleName", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9+=,.@_-]+$"
    )
    """The name of the node group's new role (default: a name CloudFormation makes up); unique in the account."""

    @field_validator("attach_policy_arns")
    @classmethod
    def _policy_arns(cls, v: list[str]) -> list[str]:
        return policy_arns(v)


class NodeGroupSshSpec(_Model):
    """eksctl ``ssh``: an EC2 key pair on the nodes; Session Manager is always on."""

    allow: bool | None = None
    """eksctl: open port 22 to the nodes. efa-stack opens no SSH port either way (nodes stay in private subnets;
    reach them through Session Manager); ``true`` needs ``publicKeyName``."""
    public_key_name: str | None = Field(None, alias="publicKeyName", min_length=1, max_length=255)
    """The name of an existing EC2 key pair in the region; on the nodes' launch template whenever it is named, as
    eksctl puts it there (``allow: false`` included)."""
    enable_ssm: bool | None = Field(None, alias="enableSsm")
    """Session Manager: always on (the node role has AmazonSSMManagedInstanceCore); ``false`` is an error."""


class CapacityReservationTargetSpec(_Model):
    capacity_reservation_id: str | None = Field(None, alias="capacityReservationID")
    """The On-Demand Capacity Reservation or Capacity Block (``cr-...``)."""
    capacity_reservation_resource_group_arn: str | None = Field(None, alias="capacityReservationResourceGroupARN")
    """A resource group of reservations (``arn:aws:resource-groups:<region>:<account>:group/<name>``): EC2 launches into
    any reservation of the group. Taken on UltraServer node groups (``p6e-gb200.36xlarge``), whose Capacity Block
    holds several reservations; other node groups name one reservation."""


class CapacityReservationSpec(_Model):
    """eksctl ``capacityReservation``: the same as ``capacity: {type: reservation, reservationId: ...}``."""

    capacity_reservation_preference: Literal["open", "none", "capacity-reservations-only"] | None = Field(
        None, alias="capacityReservationPreference"
    )
    """EC2's preference without a target (not supported: name one reservation)."""
    capacity_reservation_target: CapacityReservationTargetSpec | None = Field(None, alias="capacityReservationTarget")
    """The reservation to launch into."""


class InstanceMarketOptionsSpec(_Model):
    """eksctl ``instanceMarketOptions``; ``marketType: capacity-block`` makes the reservation a Capacity Block."""

    market_type: contract.MarketType = Field(alias="marketType")
    """``capacity-block`` (EC2 Capacity Blocks for ML)."""


AmiFamily = Literal[
    "AmazonLinux2023", "AmazonLinux2", "UbuntuPro2604", "Ubuntu2604", "UbuntuPro2404", "Ubuntu2404",
    "UbuntuPro2204", "Ubuntu2204", "UbuntuPro2004", "Ubuntu2004", "Bottlerocket", "BottlerocketFips",
    "WindowsServer2019CoreContainer", "WindowsServer2019FullContainer", "WindowsServer2022CoreContainer",
    "WindowsServer2022FullContainer", "WindowsServer2025CoreContainer", "WindowsServer2025FullContainer",
]
"""eksctl's AMI families (types.go NodeImageFamily*); efa-stack builds AmazonLinux2023 nodes."""


class KubeletExtraConfig(_Model):
    """Kubelet CPU and topology settings of a node group's nodes, with the ``KubeletConfiguration`` field
    names (eksctl spells kubelet settings of a node group ``kubeletExtraConfig``). efa-stack writes them into
    the nodes' nodeadm ``NodeConfig`` (``spec.kubelet.config``); defaults, see docs/design/node-tuning.md. Changing them
    changes the launch template, so EKS replaces the group's nodes."""

    cpu_manager_policy: CpuManagerPolicy | None = Field(None, alias="cpuManagerPolicy")
    """``static`` gives Guaranteed pods that request whole CPUs exclusive CPUs; ``none`` does not. Default:
    ``static`` on GPU and Neuron node groups, ``none`` elsewhere."""
    topology_manager_policy: TopologyManagerPolicy | None = Field(None, alias="topologyManagerPolicy")
    """How the kubelet aligns a pod's CPUs and devices on NUMA nodes: ``none``, ``best-effort``, ``restricted``
    (the fewest NUMA nodes that hold the request, or the pod is refused) or ``single-numa-node``. Default:
    ``restricted`` on GPU and Neuron node groups, ``none`` elsewhere."""
    topology_manager_scope: TopologyManagerScope | None = Field(None, alias="topologyManagerScope")
    """Align per ``container`` or for the whole ``pod``. Default: ``pod`` on GPU and Neuron node groups,
    ``container`` elsewhere."""
    reserved_system_cpus: str | None = Field(None, alias="reservedSystemCPUs", max_length=256)
    """Not supported on the EKS AL2023 AMIs (the kubelet refuses it beside nodeadm's reserved cgroups); listed
    so that a spec that sets it gets that explanation."""


class NodeGroupBase(_Model):
    """The fields a managed node group and a Karpenter pool share: the root volume, labels and taints, the EFA
    interface layout, the placement group and the kubelet's CPU and topology settings. eksctl shares its node kinds'
    common fields the same way (eksctl-io/eksctl@v0.230.0 pkg/apis/eksctl.io/v1alpha5/types.go ``NodeGroupBase``,
    embedded in ``NodeGroup`` and ``ManagedNodeGroup``); one planning function checks and derives them for both
    kinds (:func:`efa_stack.planning.node_shapes.plan_shape`)."""

    name: str
    """The node group's or pool's name (each kind gives its pattern)."""
    volume_type: Literal["gp3", "gp2", "io1", "io2"] = Field("gp3", alias="volumeType")
    """EBS type of the root volume."""
    volume_size: int = Field(200, alias="volumeSize", ge=MIN_VOLUME_GIB, le=max(EBS_MAX_VOLUME_GIB.values()))
    """Root volume size in GiB (at most 16,384, or 65,536 for io2; a Karpenter pool's EC2NodeClass takes at most
    59,000)."""
    # eksctl@99984ad pkg/apis/eksctl.io/v1alpha5/types.go NodeGroupBase: `volumeIOPS`, `volumeThroughput`
    # (MiB/s); ranges per volume type are checked in planning.limits (EBS limits, with sources).
    volume_iops: int | None = Field(None, alias="volumeIOPS", ge=1)
    """Provisioned IOPS of the root volume (gp3, io1, io2; required for io1/io2)."""
    volume_throughput: int | None = Field(None, alias="volumeThroughput", ge=1)
    """Throughput of a gp3 root volume in MiB/s."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Kubernetes labels on the nodes."""
    taints: list[TaintSpec] = Field(default_factory=list)
    """Kubernetes taints on the nodes (accelerator nodes also get the GPU or Neuron taint)."""
    interface_layout: contract.InterfaceLayout = Field("current", alias="interfaceLayout")
    """Extension: ``current`` (ENA primary + ``efa-only`` on card 0, ``efa-only`` on every further card) or
    ``legacy`` (``efa`` interfaces, as older guides and eksctl lay them out). A Karpenter pool takes ``current`` only:
    its EC2NodeClass declares ``interface`` and ``efa-only`` interfaces, no combined ``efa``."""
    ena_on_efa_cards: bool = Field(False, alias="enaOnEfaCards")
    """Extension, current layout only: an ENA interface at device 1 of every further EFA card."""
    placement_group: bool | PlacementGroupName | None = Field(None, alias="placementGroup")
    """Extension: true: a new cluster placement group (the default for on-demand EFA node groups and pools); false:
    none; a name: an existing group the nodes use (not created here; the one a capacity reservation was made in).
    Capacity Blocks take none."""
    kubelet_extra_config: KubeletExtraConfig | None = Field(None, alias="kubeletExtraConfig")
    """Extension (eksctl has it on unmanaged node groups): the kubelet's CPU manager and Topology Manager settings;
    default ``static``/``restricted``/``pod`` on GPU and Neuron nodes (see docs/design/node-tuning.md)."""
    devices: contract.DeviceMechanism = contract.DEVICES_PLUGIN
    """Extension: how pods get the nodes' GPUs, Neuron devices and EFA devices. ``plugin``: the device plugins
    (``nvidia.com/gpu``, ``aws.amazon.com/neuron``, ``vpc.amazonaws.com/efa`` counts). ``dra``: Dynamic Resource
    Allocation: the DRA drivers (EFA: aws-dranet; NVIDIA GPUs: the NVIDIA DRA driver; Neuron: the Neuron DRA driver)
    publish the devices, the jobs claim them through ResourceClaimTemplates, and no device plugin runs on the nodes.
    Managed node groups and static Karpenter pools (``replicas``) on Kubernetes 1.35 or later, without Kueue's
    topology-aware scheduling; see docs/design/dra.md."""

    @field_validator("volume_size")
    @classmethod
    def _volume_size_for_type(cls, v: int, info: ValidationInfo) -> int:
        kind = info.data.get("volume_type")
        most = EBS_MAX_VOLUME_GIB.get(kind) if isinstance(kind, str) else None
        if most is not None and v > most:
            raise FixError(
                f"{kind} volumes are at most {most} GiB",
                f"use at most {most} GiB" + ("" if kind == "io2" else (
                    f", or volumeType: io2 with volumeIOPS: {EBS_MIN_IOPS['io2']} or more (io2 takes up to "
                    f"{EBS_MAX_VOLUME_GIB['io2']} GiB and needs provisioned IOPS)")),
            )
        return v


class ManagedNodeGroupSpec(NodeGroupBase):
    """An EKS managed node group (eksctl ``managedNodeGroups`` entry): the fields it shares with a Karpenter pool
    (root volume, labels, taints, interface layout, placement group, kubelet settings), then its instance types,
    sizes, zones or subnets, capacity, IAM, bootstrap and eksctl's other node group fields."""

    # --- eksctl fields -------------------------------------------------------------------------
    name: str = Field(pattern=NAME_PATTERN, max_length=63)
    """The node group name."""
    instance_type: str | None = Field(None, alias="instanceType")
    """The EC2 instance type (``efa-stack catalog list`` shows the ones efa-stack knows); default, as eksctl's
    (types.go DefaultNodeType), ``m5.large`` unless ``instanceTypes`` is given."""
    instance_types: list[str] | None = Field(None, alias="instanceTypes", min_length=1, max_length=20)
    """eksctl: several instance types of one group without EFA (CPU or one accelerator kind and architecture);
    not together with ``instanceType``."""
    spot: bool = False
    """eksctl: Spot capacity (``instanceTypes`` helps find it); not for EFA node groups or reservations."""
    min_size: int | None = Field(None, alias="minSize", ge=0, le=MAX_NODES_PER_SPEC_NODE_GROUP)
    """Fewest nodes; default (as eksctl's, validation.go): ``desiredCapacity``, or 2 when that is unset too."""
    desired_capacity: int | None = Field(None, alias="desiredCapacity", ge=0, le=MAX_NODES_PER_SPEC_NODE_GROUP)
    """Nodes to start with; default ``minSize``."""
    max_size: int | None = Field(None, alias="maxSize", ge=1, le=MAX_NODES_PER_SPEC_NODE_GROUP)
    """Most nodes; default (as eksctl's) ``desiredCapacity``, else ``minSize``, and at least 1. Above EKS's 450 nodes
    per managed node group the group becomes several EKS node groups ``<name>-1``, ``<name>-2``, ... with the sizes
    split evenly, still one group for jobs, dashboards and checks (docs/design/scale.md)."""
    availability_zones: list[str] | None = Field(None, alias="availabilityZones")
    """The node group's zones; an EFA node group takes exactly one."""
    subnets: list[str] | None = Field(None, min_length=1)
    """eksctl, with an existing VPC: the node group's private subnets, by their name in ``vpc.subnets.private``
    or their id (an EFA node group takes exactly one)."""
    private_networking: bool | None = Field(None, alias="privateNetworking")
    """Nodes are always in private subnets; ``false`` is an error."""
    efa_enabled: bool = Field(False, alias="efaEnabled")
    """Give every node all the EFA devices its instance type has (see docs/spec.md, "What efaEnabled: true does")."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Tags on the node group."""
    # --- extensions ----------------------------------------------------------------------------
    placement: Placement | None = None
    """eksctl's spelling of an existing placement group (``placement.groupName``)."""
    capacity: Capacity = Capacity()
    """Extension: on-demand, an On-Demand Capacity Reservation, or a Capacity Block."""
    node_repair_config: NodeRepairConfigSpec | None = Field(None, alias="nodeRepairConfig")
    """EKS node auto repair; default on for GPU and Neuron node groups (``nodeRepairConfig: {enabled: false}``
    turns it off). Repair needs the ``eks-node-monitoring-agent`` add-on, which efa-stack then installs."""
    update_config: NodeGroupUpdateConfigSpec | None = Field(None, alias="updateConfig")
    """eksctl: nodes a version update replaces at once (``maxUnavailable`` or ``maxUnavailablePercentage``);
    default EKS's, one node at a time."""
    iam: NodeGroupIamSpec | None = None
    """eksctl: the node group's IAM role: add-on policies, further managed policies, or an existing role."""
    instance_prefix: str | None = Field(None, alias="instancePrefix", min_length=1, max_length=64)
    """eksctl: the instances' ``Name`` tag is ``<instancePrefix>-<instanceName>`` (instanceName's default:
    ``<cluster>-<node group>-Node``)."""
    instance_name: str | None = Field(None, alias="instanceName", min_length=1, max_length=200)
    """eksctl: the instances' ``Name`` tag (after ``instancePrefix-``)."""
    capacity_reservation: CapacityReservationSpec | None = Field(None, alias="capacityReservation")
    """eksctl's spelling of ``capacity: {type: reservation, reservationId: ...}`` (with
    ``instanceMarketOptions.marketType: capacity-block``: ``type: capacity-block``); not together with
    ``capacity``."""
    instance_market_options: InstanceMarketOptionsSpec | None = Field(None, alias="instanceMarketOptions")
    """eksctl: ``marketType: capacity-block`` with ``capacityReservation`` launches into a Capacity Block."""
    override_bootstrap_command: str | None = Field(None, alias="overrideBootstrapCommand", max_length=16384)
    """eksctl on AL2023: a nodeadm ``NodeConfig`` (YAML) merged with efa-stack's own ``NodeConfig`` in the
    user data (a kubelet setting efa-stack also sets must agree)."""
    pre_bootstrap_commands: list[str] = Field(default_factory=list, alias="preBootstrapCommands", max_length=64)
    """eksctl: shell commands run at boot before the node joins (after efa-stack's hugepages script)."""
    ssh: NodeGroupSshSpec | None = None
    """eksctl: an EC2 key pair on the nodes."""
    ami_family: AmiFamily | None = Field(None, alias="amiFamily")
    """eksctl: ``AmazonLinux2023`` only (efa-stack's user data is a nodeadm ``NodeConfig``)."""
    ami: str | None = Field(None, pattern=r"^(ami-[0-9a-f]{8,17}|auto|auto-ssm)$")
    """eksctl: a custom AMI (``ami-...``, an Amazon Linux 2023 EKS node image with the EFA and accelerator
    software; needs ``amiFamily: AmazonLinux2023``): the launch template names it and its user data carries
    the cluster's details for nodeadm. ``auto``/``auto-ssm``: the EKS-optimized AMI (the default)."""
    release_version: str | None = Field(None, alias="releaseVersion", pattern=r"^[0-9]+\.[0-9]+\.[0-9]+-[0-9]{8}$")
    """eksctl: the EKS-optimized AMI release of the nodes, as EKS spells it (``1.35.6-20260714``: the Kubernetes version
    and the amazon-eks-ami release date; the public SSM parameter ``.../recommended/release_version`` of the group's
    AMI type shows the current one): the node group's ``ReleaseVersion``, so the NVIDIA driver the nodes get is the one that release gives the instance type
    (efa_stack/planning/data/eks_al2023_nvidia_drivers.json) and a known-bad one is refused before the deploy. Default:
    the release EKS recommends when the group is created. Not with a custom ``ami``."""
    ultra_server_type: str | None = Field(None, alias="ultraServerType", pattern=r"^u-[a-z0-9-]+x[0-9]+$")
    """Extension, UltraServer node groups (``p6e-gb200.36xlarge``): the UltraServer type of the group's Capacity Block,
    ``u-p6e-gb200x72`` (18 instances in one NVLink domain) or ``u-p6e-gb200x36`` (9). A job that fits one NVLink
    domain is kept inside it."""


class SystemNodeGroup(_Model):
    """Extension: the small CPU node group that runs add-ons and MPI launchers."""

    instance_type: str = Field("m7i.xlarge", alias="instanceType")
    """A general-purpose instance type without accelerators."""
    min_size: int = Field(2, alias="minSize", ge=1, le=MAX_NODES_PER_NODE_GROUP)
    """Fewest nodes."""
    desired_capacity: int | None = Field(None, alias="desiredCapacity", ge=1, le=MAX_NODES_PER_NODE_GROUP)
    """Nodes to start with; default ``minSize``."""
    max_size: int | None = Field(None, alias="maxSize", ge=1, le=MAX_NODES_PER_NODE_GROUP)
    """Most nodes; default ``desiredCapacity``."""
    volume_size: int = Field(50, alias="volumeSize", ge=MIN_VOLUME_GIB, le=EBS_MAX_VOLUME_GIB["gp3"])
    """Root volume size in GiB (gp3)."""


DEFAULT_POOL_AMI_VERSION = "v20260724"
"""The EKS AL2023 AMI release a pool's ``al2023@<version>`` alias pins (awslabs/amazon-eks-ami tag v20260724, the
release docs/design/node-tuning.md reads nodeadm's behaviour from). Karpenter resolves the alias through the SSM
parameter ``/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<arch>/<variant>/amazon-eks-node-al2023-
<arch>-<variant>-<k8s>-<version>/image_id`` for the standard, nvidia and neuron variants (aws/karpenter-provider-aws
@v1.14.1 pkg/providers/amifamily/al2023.go ``resolvePath``)."""
MAX_CAPACITY_RESERVATION_TERMS = 30
"""EC2NodeClass ``capacityReservationSelectorTerms`` holds at most 30 terms (aws/karpenter-provider-aws@v1.14.1
pkg/apis/v1/ec2nodeclass.go, ``+kubebuilder:validation:MaxItems:=30``)."""
# aws/karpenter-provider-aws@v1.14.1 pkg/apis/crds/karpenter.sh_nodepools.yaml: consolidateAfter's pattern.
CONSOLIDATE_AFTER_PATTERN = r"^(([0-9]+(s|m|h))+|Never)$"


class KarpenterNodePoolSpec(NodeGroupBase):
    """Extension: an elastic EFA pool, Karpenter's twin of an EFA managed node group (docs/design/karpenter.md).

    efa-stack installs Karpenter and renders, per pool, an ``EC2NodeClass`` with the instance type's per-card
    ``efa-only`` interfaces, the EFA security group, the node group's user data and root volume, and a ``NodePool``
    pinned to the instance type, the zone and the capacity type, with the node group's labels and taints. Nodes
    are launched when pods need them and removed only once empty. The fields a pool shares with a managed node
    group (root volume, labels, taints, interface layout, placement group, kubelet settings) mean the same on
    both."""

    name: str = Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    """The pool's name: the NodePool's and EC2NodeClass's name and the nodes' ``efa-stack.io/node-group`` label
    (lowercase letters, digits and '-'; not the name of a managed node group)."""
    instance_type: str = Field(alias="instanceType")
    """The EFA instance type of every node (``efa-stack catalog list --efa``)."""
    max_nodes: int = Field(alias="maxNodes", ge=1, le=MAX_NODES_PER_SPEC_NODE_GROUP)
    """Most nodes the pool launches: the NodePool's ``limits`` (cpu, memory, GPUs, ``nodes``) are this many times one
    node's figures."""
    capacity: contract.CapacityKind = contract.ON_DEMAND
    """``on-demand``; ``reservation`` (On-Demand Capacity Reservations) or ``capacity-block`` (Capacity Blocks for
    ML): Karpenter's ``reserved`` capacity type, in the reservations ``capacityReservationIds`` lists."""
    capacity_reservation_ids: list[Annotated[str, Field(pattern=r"^cr-[0-9a-f]{8,17}$")]] = Field(
        default_factory=list, alias="capacityReservationIds", max_length=MAX_CAPACITY_RESERVATION_TERMS,
    )
    """The reservations or Capacity Blocks (``cr-...``) the pool launches into, all of ``instanceType`` in
    ``availabilityZone``; required unless on-demand."""
    replicas: int | None = Field(None, ge=0, le=MAX_NODES_PER_SPEC_NODE_GROUP)
    """Reserved pools only: a static NodePool that keeps this many nodes whether pods ask for them or not (Karpenter's
    ``StaticCapacity`` feature gate, alpha); absent: nodes come and go with the pods."""
    availability_zone: str | None = Field(None, alias="availabilityZone")
    """The pool's one zone (that of its reservations); default: the cluster's first zone."""
    ami_version: str = Field(DEFAULT_POOL_AMI_VERSION, alias="amiVersion", pattern=r"^v[0-9]{8}$")
    """The EKS AL2023 AMI release of the nodes (``al2023@<amiVersion>``); pinned so that no AMI release drifts
    running nodes."""
    consolidate_after: str = Field("30m", alias="consolidateAfter", pattern=CONSOLIDATE_AFTER_PATTERN)
    """How long a node stays after its last pod left before Karpenter removes it (``30m``, ``2h``, ``Never``)."""

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
    binary: Literal[NCCL_TEST_BINARIES] = "all_reduce_perf"  # type: ignore[valid-type]  # a tuple: pydantic reads it
    """The nccl-tests program to run."""
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
    fabric: contract.Fabric = "efa"
    """``efa`` (default); ``tcp`` renders the same job without EFA for an A/B comparison;
    ``infiniband`` renders it for an InfiniBand/RoCE cluster outside AWS (``rdma/hca``)."""
    image: str = Field(DEFAULT_NCCL_TESTS_IMAGE, pattern=r"^\S+[:@]\S+$")
    """Container image with nccl-tests, Open MPI, libfabric and aws-ofi-nccl; pin a tag or digest."""
    suspend: bool = True
    """Create the MPIJob suspended so that a deploy does not start GPU work."""
    hugepages_mib: int = Field(5120, alias="hugepagesMiB", ge=0, le=1048576)
    """``hugepages-2Mi`` per worker for libfabric (EFA only; 0 requests none)."""
    memory_mib: int | None = Field(None, alias="memoryMiB", ge=256, le=4194304)
    """Memory request and limit per worker (hugepages need a memory request); when unset, sized from the
    node's GPUs: 4000 MiB per GPU plus the ``/dev/shm`` (planning.nccl.worker_memory)."""
    shm_mib: int | None = Field(None, alias="shmSizeMiB", ge=64, le=4194304)
    """Size limit of the memory-backed ``/dev/shm`` per worker (counts against ``memoryMiB``); when unset,
    1024 MiB per GPU."""
    gpus_per_worker: int | None = Field(None, alias="gpusPerWorker", ge=1, le=64)
    """GPUs of each worker (one worker per node, one rank per GPU); default: every GPU of the node. Fewer than the
    node has makes sub-node workers: on a ``devices: dra`` node group only, each GPU is claimed together with the
    EFA devices on its PCIe root (a ``matchAttribute`` constraint on ``resource.kubernetes.io/pcieRoot``), for an
    aligned 1-GPU test such as dranet's; not queueable through Kueue (its DRA support takes no constraints)."""
    efa_guard: bool = Field(True, alias="efaGuard")
    """With ``fabric: efa``, fail the job instead of letting NCCL fall back to TCP sockets: an ``efa-guard``
    init container checks each worker's EFA devices, libfabric and aws-ofi-nccl against the plan, and
    ``NCCL_NET`` names the aws-ofi-nccl network (k8s/efa_guard.py). Turn it off only for an image whose
    EFA stack the guard cannot see (no ``fi_info`` on PATH, or a net plugin outside LD_LIBRARY_PATH) or
    whose plugin registers another network name; NCCL may then fall back to sockets silently again."""


class Observability(_Model):
    """Extension: CloudWatch Container Insights and a GPU/EFA dashboard (planning/observability.py)."""

    container_insights: bool | None = Field(None, alias="containerInsights")
    """Install the amazon-cloudwatch-observability add-on (GPU, Neuron and EFA metrics in CloudWatch,
    billed per observation); default: on when a node group has GPUs or Neuron devices."""
    dashboard: bool | None = None
    """A CloudWatch dashboard of those metrics per node; default: on with Container Insights."""


class TrainingOperators(_Model):
    """Extension: the Kubeflow training controllers ``cdk deploy`` installs besides those the spec's
    ``trainingJobs`` need, which are always installed (both off by default)."""

    trainer: bool = False
    """Kubeflow Trainer v2 (TrainJob, ClusterTrainingRuntime) with its JobSet controller, from the upstream
    Helm chart into namespace ``kubeflow-system``."""
    pytorch_job_v1: bool = Field(False, alias="pytorchJobV1")
    """Kubeflow Training Operator v1 serving ``kubeflow.org/v1`` PyTorchJob only, into namespace ``kubeflow``."""


class WaitForPodsReadySpec(_Model):
    """Kueue's all-or-nothing start (Kueue Configuration ``waitForPodsReady``): a job admitted by Kueue whose
    pods are not all ready within the timeout is suspended, its quota freed, and queued again after a backoff."""

    timeout_seconds: int | None = Field(None, alias="timeoutSeconds", ge=60, le=86400)
    """Seconds from admission until every pod must be ready (``waitForPodsReady.timeout``). Default: derived from
    the plan, at least Kueue's own 1800 s, longer when a queued job's nodes come from a Karpenter pool or its
    image is large (efa_stack/planning/scheduling.py ``wait_timeout``). Shorter than what the plan's nodes need
    is refused."""
    image_size_gb: int = Field(20, alias="imageSizeGB", ge=1, le=500)
    """Compressed size (GB) of the largest image a queued job pulls; the pull time it implies is part of the
    derived timeout. Default: 20, the top of AWS's "15-20 GB" for Deep Learning Container images."""
    backoff_limit_count: int | None = Field(5, alias="backoffLimitCount", ge=0, le=1000)
    """Times a job is queued again before Kueue deactivates it (``requeuingStrategy.backoffLimitCount``);
    null: without end."""
    backoff_base_seconds: int = Field(60, alias="backoffBaseSeconds", ge=1, le=86400)
    """Base of the exponential backoff before a job is queued again (``requeuingStrategy.backoffBaseSeconds``)."""
    backoff_max_seconds: int = Field(3600, alias="backoffMaxSeconds", ge=1, le=86400)
    """Longest backoff (``requeuingStrategy.backoffMaxSeconds``)."""


class KueueSpec(_Model):
    """Kueue gang admission with topology-aware scheduling over EKS's network topology labels
    (planning/scheduling.py, docs/design/kueue-tas.md)."""

    enabled: bool = False
    """Install Kueue and queue the NCCL-tests MPIJob and the training jobs through one ClusterQueue."""
    topology: Literal["required", "preferred", "none"] = "preferred"
    """How Kueue places a job's workers: ``required`` (all within one domain of ``level``, or not admitted),
    ``preferred`` (the fewest domains it can, starting at ``level``) or ``none`` (quota only)."""
    level: Literal["bottom", "layer-1", "layer-2", "layer-3", "layer-4", "hostname"] = "bottom"
    """The topology level of ``topology``: ``bottom`` is the lowest network layer of the job's instance type
    (``network-node-layer-3``, ``-4`` on p6-b200/p6-b300), ``layer-N`` is ``topology.k8s.aws/network-node-layer-N``."""
    wait_for_pods_ready: WaitForPodsReadySpec = Field(WaitForPodsReadySpec(), alias="waitForPodsReady")
    """All-or-nothing start with requeuing and backoff."""


class Scheduling(_Model):
    """Extension: how jobs are admitted and placed."""

    kueue: KueueSpec = KueueSpec()
    """Kueue with topology-aware scheduling; off by default."""
# An OCI image reference as the distribution grammar spells it (github.com/distribution/reference
# regexp.go: [domain[:port]/]path-component(/path-component)* [":" tag] ["@" digest], path components
# lowercase alphanumerics joined by '.', '_', '__' or '-'+, tag [A-Za-z0-9_][A-Za-z0-9_.-]{0,127},
# digest algorithm ":" hex of at least 32), with a tag or a digest required so nothing floats.
_OCI_DOMAIN = r"(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?/)?"
_OCI_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
_OCI_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_OCI_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_PATTERN = rf"^{_OCI_DOMAIN}{_OCI_PATH}(?::{_OCI_TAG}(?:@{_OCI_DIGEST})?|@{_OCI_DIGEST})$"
"""A container image pinned by tag or digest (``registry/repo:tag``, ``repo@sha256:...``)."""
DNS1035_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
MAX_TRAINING_JOBS = 20


class EmptyDirSpec(_Model):
    """A scratch directory that lives as long as the pod (``emptyDir``)."""

    size_mib: int | None = Field(None, alias="sizeMiB", ge=1, le=67108864)
    """Size limit in MiB (none: bounded by the node's disk)."""
    medium: Literal["", "Memory"] = ""
    """``""`` (the node's disk) or ``Memory`` (tmpfs; counts against the worker's memory limit)."""


class TrainingVolume(_Model):
    """A volume every worker of the job mounts: the spec's FSx for Lustre claim or an ``emptyDir``."""

    name: str = Field(pattern=K8S_NAME_PATTERN, max_length=63)
    """The volume's name in the pod (a DNS-1123 label; ``dshm`` is efa-stack's ``/dev/shm``)."""
    mount_path: str | None = Field(None, alias="mountPath", pattern=r"^/[^:]*$", max_length=1024)
    """Where the container mounts it (absolute); default for ``fsx``: the storage section's ``mountPath``."""
    fsx: bool = False
    """Mount the FSx for Lustre claim of the spec's ``storage`` section."""
    empty_dir: EmptyDirSpec | None = Field(None, alias="emptyDir")
    """A scratch ``emptyDir`` instead."""


class TrainingJobSpec(_Model):
    """Extension: a distributed PyTorch training job (torchrun) on one node group; see docs/training-jobs.md."""

    name: str = Field(pattern=DNS1035_NAME_PATTERN, max_length=63)
    """The job's Kubernetes name (a DNS-1035 label: lowercase letters, digits and '-', starting with a letter)."""
    node_group: str = Field(alias="nodeGroup", pattern=NAME_PATTERN)
    """The managed node group (NVIDIA GPUs) the workers run on, one worker per node."""
    image: str = Field(max_length=500, json_schema_extra={"pattern": IMAGE_PATTERN})
    """The training image (PyTorch with NCCL; with aws-ofi-nccl and libfabric for ``fabric: efa``), pinned by tag
    or digest."""
    command: list[str] | None = Field(None, min_length=1, max_length=128)
    """The command each worker runs, e.g. ``[torchrun, /workspace/train.py]``; not together with ``script``."""
    args: list[str] = Field(default_factory=list, max_length=128)
    """Arguments after the command (or after the script)."""
    script: str | None = Field(None, min_length=1, max_length=65536)
    """An inline Python training script that each worker runs under ``torchrun``; not together with ``command``."""
    nnodes: int | None = Field(None, ge=1, le=MAX_NODES_PER_SPEC_NODE_GROUP)
    """Nodes (one worker each); default: the node group's ``desiredCapacity``."""
    kind: contract.JobKind = "trainjob"
    """``trainjob`` (Kubeflow Trainer v2 TrainJob on an efa-stack ClusterTrainingRuntime) or ``pytorchjob``
    (Kubeflow Training Operator v1 PyTorchJob)."""
    fabric: contract.Fabric = "efa"
    """``efa`` (every EFA device of the node); ``tcp`` (no EFA: NCCL over sockets); ``infiniband`` (an IB/RoCE
    cluster outside AWS, with the RDMA device plugin)."""
    rdma_resource: str | None = Field(
        None, alias="rdmaResource",
        json_schema_extra={"pattern": resource_names.PATTERN, "maxLength": resource_names.MAX_LENGTH},
    )
    """``fabric: infiniband`` only: the RDMA device plugin's resource (default ``rdma/hca``)."""

    @field_validator("rdma_resource")
    @classmethod
    def _rdma_resource(cls, v: str | None) -> str | None:
        # Kubernetes' own rule for an extended resource name (efa_stack/spec/resource_names.py cites it).
        why = None if v is None else resource_names.extended_resource_violation(v)
        if why:
            raise FixError(
                f"not a Kubernetes extended resource name: it {why}",
                "give the resource your RDMA device plugin advertises (kubectl describe node lists it under "
                "Allocatable), as <domain>/<name>, e.g. rdma/hca, or leave rdmaResource out for rdma/hca",
            )
        return v
    ib_hca: str | None = Field(None, alias="ibHca", pattern=r"^[\^=]?[A-Za-z0-9_:,\-]+$", max_length=256)
    """``fabric: infiniband`` only: ``NCCL_IB_HCA`` (default ``mlx5``)."""
    ib_gid_index: int | None = Field(None, alias="ibGidIndex", ge=0, le=255)
    """``fabric: infiniband`` only: ``NCCL_IB_GID_INDEX`` (default 3, RoCE v2)."""
    socket_ifname: str | None = Field(None, alias="socketIfname", pattern=r"^[\^=]?[A-Za-z0-9_.,\-]+$", max_length=256)
    """``fabric: infiniband`` only: ``NCCL_SOCKET_IFNAME`` (default ``eth0``)."""
    env: dict[str, str] = Field(default_factory=dict, max_length=100)
    """Further environment variables of the training container."""
    volumes: list[TrainingVolume] = Field(default_factory=list, max_length=16)
    """Volumes every worker mounts."""
    namespace: str = Field(contract.TRAINING_JOB_NAMESPACE, pattern=K8S_NAME_PATTERN, max_length=63)
    """The job's namespace (must exist)."""
    suspend: bool = True
    """Create the job suspended so that a deploy does not start GPU work."""
    efa_guard: bool = Field(True, alias="efaGuard")
    """With ``fabric: efa``, fail the job instead of letting NCCL fall back to TCP sockets, as
    ``ncclTest.efaGuard`` does: an ``efa-guard`` init container checks each worker's EFA devices, libfabric
    and aws-ofi-nccl before torchrun starts, and ``NCCL_NET`` names the aws-ofi-nccl network."""
    memory_mib: int | None = Field(None, alias="memoryMiB", ge=256, le=4194304)
    """Memory request and limit per worker; default sized from the GPUs as for ncclTest (4000 MiB per GPU plus the
    ``/dev/shm``)."""
    shm_mib: int | None = Field(None, alias="shmSizeMiB", ge=64, le=4194304)
    """Size of the memory-backed ``/dev/shm`` per worker; default 1024 MiB per GPU."""

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not re.match(IMAGE_PATTERN, v):
            raise FixError(
                "not a container image reference pinned by a tag or a digest",
                "write registry/repository:tag or registry/repository@sha256:<digest> (repository in lowercase), "
                "e.g. nvcr.io/nvidia/pytorch:25.01-py3",
            )
        return v

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not re.match(ENV_NAME_PATTERN, key):
                raise FixError(
                    f"{key!r} is not an environment variable name",
                    "use letters, digits and '_', not starting with a digit",
                )
        return v


class ClusterPodIdentityAssociationSpec(PodIdentityAssociationSpec):
    """eksctl ``iam.podIdentityAssociations`` entry (CloudFormation ``AWS::EKS::PodIdentityAssociation``)."""

    role_name: str | None = Field(None, alias="roleName", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9+=,.@_-]+$")
    """The name of the new role (with ``permissionPolicyARNs``); default: a name CloudFormation makes up."""
    target_role_arn: str | None = Field(None, alias="targetRoleARN", pattern=IAM_ROLE_ARN_PATTERN)
    """A role (usually in another account) that EKS Pod Identity assumes with the role above (role chaining)."""
    disable_session_tags: bool | None = Field(None, alias="disableSessionTags")
    """Leave out the session tags EKS Pod Identity adds (cluster, namespace, service account...)."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Tags on the association."""


class Iam(_Model):
    with_oidc: bool = Field(False, alias="withOIDC")
    """Create the cluster's IAM OIDC provider (for IRSA)."""
    pod_identity_associations: list[ClusterPodIdentityAssociationSpec] = Field(
        default_factory=list, alias="podIdentityAssociations", max_length=100
    )
    """eksctl: IAM roles for your workloads' service accounts through EKS Pod Identity (an existing role, or a new
    one with managed policies); the service accounts come with your workloads."""


CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
"""EKS control-plane log types (eksctl SupportedCloudWatchClusterLogTypes)."""
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, 3653)
"""eksctl-io/eksctl@v0.230.0 pkg/apis/eksctl.io/v1alpha5/cloudwatch.go LogRetentionInDaysValues."""


class ClusterLoggingSpec(_Model):
    """eksctl ``cloudWatch.clusterLogging``: which control-plane logs go to CloudWatch Logs, kept how long."""

    enable_types: list[str] = Field(default_factory=list, alias="enableTypes", max_length=10)
    """Of ``api``, ``audit``, ``authenticator``, ``controllerManager``, ``scheduler``; ``"*"`` or ``all``: every one;
    empty: none."""
    log_retention_in_days: int | None = Field(None, alias="logRetentionInDays")
    """Days CloudWatch keeps the logs (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827 or
    3653); absent: forever."""


class CloudWatchSpec(_Model):
    """eksctl ``cloudWatch``."""

    cluster_logging: ClusterLoggingSpec | None = Field(None, alias="clusterLogging")
    """Control-plane logging; absent: efa-stack's default, every log type, kept forever."""


class ControlPlaneScalingConfigSpec(_Model):
    """eksctl ``controlPlaneScalingConfig`` (eksctl-io/eksctl@v0.230.0 types.go ControlPlaneScalingConfig; EKS API
    ControlPlaneScalingConfig, CloudFormation ``AWS::EKS::Cluster ControlPlaneScalingConfig``): EKS Provisioned
    Control Plane, capacity held for the API server whatever the load, at an extra cost per hour."""

    tier: Literal["standard", "tier-xl", "tier-2xl", "tier-4xl", "tier-8xl"] = "standard"
    """``standard`` (EKS's default, no extra cost), ``tier-xl``, ``tier-2xl``, ``tier-4xl`` or ``tier-8xl`` (EKS API
    Reference ControlPlaneScalingConfig valid values; aws-cdk-lib 2.275 aws_eks_v2.ControlPlaneScalingTier).
    ``efa-stack preflight`` checks that EKS offers the tier for the cluster's Kubernetes version."""


class ClusterSpec(_Model):
    api_version: Literal["eksctl.io/v1alpha5"] = Field("eksctl.io/v1alpha5", alias="apiVersion")
    """eksctl's API version."""
    kind: Literal["ClusterConfig"] = "ClusterConfig"
    """eksctl's kind."""
    metadata: Metadata
    """Name, region, Kubernetes version and tags of the cluster."""
    iam: Iam = Iam()
    """Cluster IAM settings."""
    availability_zones: list[str] | None = Field(None, alias="availabilityZones")
    """Zones of the VPC's subnets (two or more); default: the node groups' zones plus the region's first."""
    vpc: Vpc = Vpc()
    """The VPC efa-stack creates."""
    access_config: AccessConfig = Field(AccessConfig(), alias="accessConfig")
    """EKS access entries."""
    cloud_watch: CloudWatchSpec | None = Field(None, alias="cloudWatch")
    """eksctl: control-plane logging; absent: every log type, kept forever."""
    control_plane_scaling_config: ControlPlaneScalingConfigSpec | None = Field(
        None, alias="controlPlaneScalingConfig"
    )
    """eksctl: the EKS Provisioned Control Plane tier; absent: EKS's standard control plane."""
    managed_node_groups: list[ManagedNodeGroupSpec] = Field(
        alias="managedNodeGroups", min_length=1, max_length=MAX_USER_NODE_GROUPS
    )
    """The node groups (EKS managed node groups)."""
    addons: list[AddonSpec] = Field(default_factory=list, max_length=50)
    """EKS add-ons; entries for the add-ons efa-stack installs itself (vpc-cni, eks-pod-identity-agent,
    eks-node-monitoring-agent, aws-fsx-csi-driver) are merged with its settings."""
    # --- extensions ----------------------------------------------------------------------------
    system_node_group: SystemNodeGroup = Field(SystemNodeGroup(), alias="systemNodeGroup")
    """Extension: the CPU node group for add-ons and MPI launchers."""
    nccl_test: NcclTest = Field(NcclTest(), alias="ncclTest")
    """Extension: the nccl-tests MPIJob."""
    storage: Storage | None = None
    """FSx for Lustre shared storage (planning/storage.py); absent: no file system."""
    observability: Observability = Observability()
    """Extension: Container Insights and the GPU/EFA dashboard."""
    training_image: TrainingImage | None = Field(None, alias="trainingImage")
    """Extension: the EFA PyTorch training image ``cdk deploy`` builds (planning/image_compat.py); absent: none."""
    training_operators: TrainingOperators = Field(TrainingOperators(), alias="trainingOperators")
    """Extension: the Kubeflow training operators to install (Trainer v2, Training Operator v1 PyTorchJob)."""
    training_jobs: list[TrainingJobSpec] = Field(default_factory=list, alias="trainingJobs", max_length=MAX_TRAINING_JOBS)
    """Extension: distributed PyTorch training jobs (Kubeflow TrainJob or PyTorchJob) sized from their node group."""
    scheduling: Scheduling = Scheduling()
    """Extension: Kueue gang admission and topology-aware scheduling of the jobs."""
    karpenter_node_pools: list[KarpenterNodePoolSpec] = Field(
        default_factory=list, alias="karpenterNodePools", max_length=MAX_USER_NODE_GROUPS,
    )
    """Extension: elastic EFA pools that Karpenter launches nodes for (docs/design/karpenter.md); any pool installs
    Karpenter."""


# eksctl ClusterConfig fields that efa-stack knows but does not support, with what to do instead.
UNSUPPORTED_EKSCTL_FIELDS: dict[str, str] = {
    "nodeGroups": "move each entry to managedNodeGroups (efa-stack builds EKS managed node groups only; the "
    "fields are the same, name, instanceType, sizes, efaEnabled, availabilityZones, iam, ...)",
    "fargateProfiles": "remove it; EFA and GPUs need EC2 nodes",
    "addonsConfig": "remove it",
    "autoModeConfig": "remove it; EKS Auto Mode cannot lay out per-card EFA interfaces",
    "karpenter": "remove it; list karpenterNodePools instead (efa-stack installs Karpenter v1.14.1 itself when a "
    "pool is listed)",
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
    "instanceSelector": "use instanceType",
    "launchTemplate": "remove it; efa-stack writes the launch template from the instance catalog",
    "securityGroups": "remove it; the cluster and EFA security groups are attached to every interface",
    "disableIMDSv1": "remove it; IMDSv2 is always required",
    "disablePodIMDS": "remove it; the launch template sets a hop limit of 1",
    "volumeEncrypted": "remove it; volumes are always encrypted",
    "volumeKmsKeyID": "remove it",
    "maxPodsPerNode": "remove it",
    "enableDetailedMonitoring": "remove it",
    "propagateASGTags": "remove it",
    "asgSuspendProcesses": "remove it",
    "bottlerocket": "remove it",
}

# eksctl Addon fields (eksctl-io/eksctl@v0.230.0:pkg/apis/eksctl.io/v1alpha5/addon.go) efa-stack does not map.
_POD_IDENTITY = "use podIdentityAssociations with roleARN or permissionPolicyARNs (EKS Pod Identity)"
UNSUPPORTED_ADDON_FIELDS: dict[str, str] = {
    "attachPolicy": _POD_IDENTITY,
    "wellKnownPolicies": _POD_IDENTITY,
    "permissionsBoundary": "remove it",
    "useDefaultPodIdentityAssociations": "list podIdentityAssociations (efa-stack cannot ask EKS for its "
    "recommended roles offline)",
    "namespaceConfig": "remove it; the add-on installs in its own namespace",
    "publishers": "remove it (a filter of `eksctl utils describe-addon-versions`)",
    "types": "remove it (a filter of `eksctl utils describe-addon-versions`)",
    "owners": "remove it (a filter of `eksctl utils describe-addon-versions`)",
}
# eksctl PodIdentityAssociation fields (iam.go) beyond an existing role or a new role with managed policies.
UNSUPPORTED_POD_IDENTITY_FIELDS: dict[str, str] = {
    "wellKnownPolicies": "list the managed policies in permissionPolicyARNs",
    "permissionPolicy": "create a managed policy and list its ARN in permissionPolicyARNs",
    "permissionPolicyName": "remove it",
    "permissionsBoundaryARN": "remove it",
    "roleName": "remove it; CloudFormation names the role",
    "createServiceAccount": "remove it; the add-on creates its service accounts",
    "tags": "remove it",
    "targetRoleARN": "remove it",
    "disableSessionTags": "remove it",
}
UNSUPPORTED_NODE_IAM_FIELDS: dict[str, str] = {
    "attachPolicy": "create a managed policy with that document and list its ARN in attachPolicyARNs",
    "instanceProfileARN": "use instanceRoleARN (the managed node group makes its own instance profile)",
    "instanceRolePermissionsBoundary": "remove it",
}
UNSUPPORTED_SSH_FIELDS: dict[str, str] = {
    "publicKeyPath": "import the key (`aws ec2 import-key-pair`) and use publicKeyName",
    "publicKey": "import the key (`aws ec2 import-key-pair`) and use publicKeyName",
    "sourceSecurityGroupIds": "remove it; nodes are in private subnets, reach them through Session Manager",
}
UNSUPPORTED_NODE_REPAIR_FIELDS: dict[str, str] = {}
# eksctl iam.podIdentityAssociations fields beyond an existing role or a new role with managed policies.
UNSUPPORTED_CLUSTER_POD_IDENTITY_FIELDS: dict[str, str] = {
    **{k: v for k, v in UNSUPPORTED_POD_IDENTITY_FIELDS.items()
       if k not in ("createServiceAccount", "roleName", "tags", "targetRoleARN", "disableSessionTags")},
    "createServiceAccount": "remove it; create the service account with your workload's manifests",
}

# eksctl ClusterVPC fields (eksctl-io/eksctl@v0.230.0:pkg/apis/eksctl.io/v1alpha5/vpc.go) that
# bring an existing VPC or shape one efa-stack does not build: efa-stack always creates the VPC.
UNSUPPORTED_VPC_FIELDS: dict[str, str] = {
    "securityGroup": "remove it; efa-stack creates the cluster and EFA security groups",
    "sharedNodeSecurityGroup": "remove it; efa-stack creates the cluster and EFA security groups",
    "manageSharedNodeSecurityGroupRules": "remove it",
    "extraCIDRs": "remove it; for pod addresses from a second range use vpc.podCIDR (VPC CNI custom networking)",
    "extraIPv6CIDRs": "remove it; efa-stack builds IPv4 clusters",
    "ipv6Cidr": "remove it; efa-stack builds IPv4 clusters",
    "ipv6Pool": "remove it; efa-stack builds IPv4 clusters",
    "autoAllocateIPv6": "remove it; efa-stack builds IPv4 clusters",
    "hostnameType": "remove it",
    "controlPlaneSubnetIDs": "remove it; the control plane uses the private subnets of vpc.subnets",
    "controlPlaneSecurityGroupIDs": "remove it; efa-stack creates the cluster security group",
    "controlPlaneOnPrivateSubnets": "remove it",
    "controlPlaneEgressMode": "remove it",
}
