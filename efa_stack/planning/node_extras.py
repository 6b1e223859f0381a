"""eksctl node group fields beyond instances and interfaces: IAM, instance names, capacity reservations,
bootstrap (NodeConfig and commands), SSH and the AMI family, each checked and mapped with eksctl's meaning.

eksctl-io/eksctl@v0.230.0 (99984ad): pkg/apis/eksctl.io/v1alpha5/types.go (the fields),
pkg/cfn/builder/iam_helper.go (``withAddonPolicies``: managed policies for imageBuilder, cloudWatch and ebs,
inline statements for the rest), pkg/cfn/builder/nodegroup.go ``generateNodeName`` (the ``Name`` tag).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from efa_stack import contract
from efa_stack.spec.errors import PLACEHOLDER, Problem
from efa_stack.spec.models import RESERVATION_ID_PATTERN, ManagedNodeGroupSpec

# eksctl iam_helper.go makeManagedPolicies: AWS managed policies by name.
ADDON_MANAGED_POLICIES: dict[str, str] = {
    "imageBuilder": "AmazonEC2ContainerRegistryPowerUser",
    "cloudWatch": "CloudWatchAgentServerPolicy",
    "ebs": "service-role/AmazonEBSCSIDriverPolicy",
}
# eksctl iam_helper.go createRole + statement.go: inline policies of these actions (Resource "*").
ADDON_INLINE_POLICIES: dict[str, tuple[tuple[str, ...], ...]] = {
    "autoScaler": ((
        "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
        "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities",
        "autoscaling:DescribeTags", "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplateVersions",
        "autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup", "ec2:DescribeImages",
        "ec2:GetInstanceTypesFromInstanceRequirements", "eks:DescribeNodegroup",
    ),),
    "fsx": (("fsx:*",), ("iam:CreateServiceLinkedRole", "iam:AttachRolePolicy", "iam:PutRolePolicy")),
    "efs": ((
        "elasticfilesystem:*",
    ), (
        "ec2:DescribeSubnets", "ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces",
        "ec2:DeleteNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute", "ec2:DescribeNetworkInterfaceAttribute",
    )),
    "xRay": ((
        "xray:PutTraceSegments", "xray:PutTelemetryRecords", "xray:GetSamplingRules", "xray:GetSamplingTargets",
        "xray:GetSamplingStatisticSummaries",
    ),),
}
"""Per add-on: statements (each a tuple of actions). fsx's second statement is on service-linked roles only."""
SERVICE_LINKED_ROLES = "iam::*:role/aws-service-role/*"
_NOT_MAPPED = {
    "externalDNS": "ExternalDNS",
    "certManager": "cert-manager",
    "appMesh": "App Mesh",
    "appMeshPreview": "App Mesh",
    "awsLoadBalancerController": "the AWS Load Balancer Controller",
    "albIngress": "the AWS Load Balancer Controller",
}
NODECONFIG_API_VERSIONS = ("node.eks.aws/v1alpha1", "node.eks.aws/v1beta1")


@dataclass(frozen=True)
class NodeExtras:
    """What the eksctl fields of one node group add to its plan."""

    node_role_arn: str | None = None
    node_role_name: str | None = None
    """The name of the node group's own role (eksctl ``iam.instanceRoleName``)."""
    managed_policies: tuple[str, ...] = ()
    """AWS managed policy names (``CloudWatchAgentServerPolicy``) and policy ARNs beside efa-stack's node policies."""
    inline_policies: tuple[str, ...] = ()
    """``withAddonPolicies`` names with an inline policy (:data:`ADDON_INLINE_POLICIES`)."""
    instance_name: str | None = None
    key_name: str | None = None
    node_config: str | None = None
    """The user's nodeadm NodeConfig document (``overrideBootstrapCommand``), normalized YAML."""
    pre_bootstrap_commands: tuple[str, ...] = ()
    ami_id: str | None = None
    """A custom AMI (eksctl ``ami``); None: the EKS-optimized AMI of the node group's AMI type."""


@dataclass(frozen=True)
class NodeUpdatePlan:
    """How many nodes a version update of the managed node group replaces at once (eksctl ``updateConfig``)."""

    max_unavailable: int | None = None
    max_unavailable_percentage: int | None = None
    """Neither set: EKS's default, one node at a time (EKS User Guide, managed-node-update-behavior)."""


def node_update_of(prefix: str, ng: ManagedNodeGroupSpec, max_size: int, problems: list[Problem]) -> NodeUpdatePlan:
    """eksctl ``updateConfig`` as eksctl checks it (eksctl-io/eksctl@v0.230.0 pkg/apis/eksctl.io/v1alpha5/
    validation.go ``validateNodeGroupBase``: one of the two limits, ``maxUnavailable`` at most ``maxSize``)."""
    update = ng.update_config
    if update is None:
        return NodeUpdatePlan()
    count, percentage = update.max_unavailable, update.max_unavailable_percentage
    where = f"{prefix}.updateConfig"
    if count is None and percentage is None:
        problems.append(Problem(
            where, {}, "no limit given", "add maxUnavailable: <nodes> or maxUnavailablePercentage: <1-100>, or remove "
            "updateConfig for EKS's default (one node at a time)",
        ))
        return NodeUpdatePlan()
    if count is not None and percentage is not None:
        problems.append(Problem(
            where, update.model_dump(by_alias=True), "maxUnavailable and maxUnavailablePercentage both limit the update",
            "keep one: maxUnavailable or maxUnavailablePercentage",
        ))
        return NodeUpdatePlan()
    if count is not None and count > max_size:
        problems.append(Problem(
            f"{where}.maxUnavailable", count, f"more nodes than the node group's maxSize {max_size}",
            f"use {max_size} or fewer, or maxUnavailablePercentage",
        ))
        return NodeUpdatePlan()
    return NodeUpdatePlan(count, percentage)


RESOURCE_GROUP_ARN = re.compile(r"^arn:aws[a-z-]*:resource-groups:[a-z0-9-]+:\d{12}:group/[A-Za-z0-9_.-]{1,300}$")
"""A resource group's ARN: ``arn:<partition>:resource-groups:<region>:<account>:group/<name>``, the name of letters,
digits, ``_``, ``.`` and ``-``, at most 300 (AWS Resource Groups API Reference, ``Group.GroupArn`` and
``GroupName``)."""


@dataclass(frozen=True)
class CapacityChoice:
    """How a node group's instances are bought: the kind, and the reservation or the resource group of reservations
    (an UltraServer Capacity Block) its launch template targets."""

    kind: contract.CapacityKind
    reservation_id: str | None = None
    resource_group_arn: str | None = None


def capacity_of(prefix: str, ng: ManagedNodeGroupSpec, problems: list[Problem], *,
                groups_allowed: bool = False) -> CapacityChoice:
    """``capacity``, or what eksctl's ``capacityReservation`` and ``instanceMarketOptions`` say the same way.
    ``groups_allowed``: the node group may target a resource group of reservations (UltraServer node groups, whose
    Capacity Block holds several reservations: EC2 User Guide, "Capacity Blocks for ML", UltraServers; the launch
    template's ``CapacityReservationTarget.CapacityReservationResourceGroupArn``)."""
    cr, market = ng.capacity_reservation, ng.instance_market_options
    if cr is None and market is None:
        return CapacityChoice(ng.capacity.type, ng.capacity.reservation_id)
    kind: contract.CapacityKind = contract.CAPACITY_BLOCK if market is not None else contract.RESERVATION
    target = cr.capacity_reservation_target if cr is not None else None
    eksctl_fields = " and ".join(
        f for f, v in (("capacityReservation", cr), ("instanceMarketOptions", market)) if v is not None
    )
    if "capacity" in ng.model_fields_set:
        problems.append(Problem(
            f"{prefix}.capacity", ng.capacity.model_dump(by_alias=True, exclude_defaults=True) or {"type": ng.capacity.type},
            f"capacity and {eksctl_fields} both say how the nodes are bought",
            f"keep one: remove capacity (eksctl's {eksctl_fields} say the same) or remove {eksctl_fields}",
        ))
    if cr is None:
        problems.append(Problem(
            f"{prefix}.instanceMarketOptions", {"marketType": contract.CAPACITY_BLOCK},
            "a Capacity Block is named by capacityReservation",
            "add capacityReservation: {capacityReservationTarget: {capacityReservationID: cr-...}}",
        ))
        return CapacityChoice(kind)
    group_arn = target.capacity_reservation_resource_group_arn if target is not None else None
    if group_arn and groups_allowed and target is not None and target.capacity_reservation_id is None:
        return CapacityChoice(kind, None, _resource_group(prefix, group_arn, cr.capacity_reservation_preference, problems))
    if target is None or target.capacity_reservation_id is None:
        shown = target.model_dump(by_alias=True, exclude_none=True) if target is not None else \
            cr.model_dump(by_alias=True, exclude_none=True)
        reason = ("a resource group of reservations is taken by UltraServer node groups only (p6e-gb200.36xlarge)"
                  if group_arn else
                  f"capacityReservationPreference: {cr.capacity_reservation_preference} is not supported"
                  if cr.capacity_reservation_preference else "no reservation is named")
        problems.append(Problem(
            f"{prefix}.capacityReservation", shown, f"efa-stack launches into one named reservation; {reason}",
            "name it: capacityReservation: {capacityReservationTarget: {capacityReservationID: cr-...}} "
            "(`aws ec2 describe-capacity-reservations` lists them)",
        ))
        return CapacityChoice(kind)
    rid = target.capacity_reservation_id
    if group_arn:
        problems.append(Problem(
            f"{prefix}.capacityReservation.capacityReservationTarget.capacityReservationResourceGroupARN",
            group_arn, "give either a reservation id or a resource group",
            "remove capacityReservationResourceGroupARN (the reservation id is used)",
        ))
    if cr.capacity_reservation_preference not in (None, "capacity-reservations-only"):
        problems.append(Problem(
            f"{prefix}.capacityReservation.capacityReservationPreference", cr.capacity_reservation_preference,
            "a preference other than capacity-reservations-only does not go with a named reservation",
            "remove capacityReservationPreference",
        ))
    if not re.match(RESERVATION_ID_PATTERN, rid):
        problems.append(Problem(
            f"{prefix}.capacityReservation.capacityReservationTarget.capacityReservationID", rid,
            "a placeholder left in the file" if PLACEHOLDER.search(rid) else
            "not a capacity reservation id (cr- and 8 to 17 hexadecimal digits)",
            "replace it with your reservation's or Capacity Block's id, e.g. cr-0123456789abcdef0 "
            "(`aws ec2 describe-capacity-reservations`)",
        ))
        return CapacityChoice(kind)
    return CapacityChoice(kind, rid)


def _resource_group(prefix: str, arn: str, preference: str | None, problems: list[Problem]) -> str | None:
    """A resource group of reservations as the target, checked: its ARN's form, and no preference besides
    ``capacity-reservations-only`` (a target, as with a named reservation)."""
    where = f"{prefix}.capacityReservation.capacityReservationTarget.capacityReservationResourceGroupARN"
    if preference not in (None, "capacity-reservations-only"):
        problems.append(Problem(
            f"{prefix}.capacityReservation.capacityReservationPreference", preference,
            "a preference other than capacity-reservations-only does not go with a targeted resource group",
            "remove capacityReservationPreference",
        ))
    if not RESOURCE_GROUP_ARN.match(arn):
        problems.append(Problem(
            where, arn, "a placeholder left in the file" if PLACEHOLDER.search(arn) else "not a resource group ARN",
            "write the ARN of the resource group that holds the UltraServer's Capacity Blocks, e.g. "
            "arn:aws:resource-groups:us-east-1:123456789012:group/gb200-ultraserver "
            "(`aws resource-groups list-groups`)",
        ))
        return None
    return arn


def node_extras(
    prefix: str, ng: ManagedNodeGroupSpec, cluster: str, kubelet_config: Mapping[str, str], problems: list[Problem],
) -> NodeExtras:
    """The IAM, name, bootstrap and SSH settings of ``ng`` (its capacity: :func:`capacity_of`)."""
    role_arn, managed, inline = _iam(prefix, ng, problems)
    instance_name = None
    if ng.instance_prefix is not None or ng.instance_name is not None:
        # eksctl nodegroup.go generateNodeName: [instancePrefix "-"] (instanceName | <cluster>-<ng>-Node)
        instance_name = (f"{ng.instance_prefix}-" if ng.instance_prefix else "") + (
            ng.instance_name or f"{cluster}-{ng.name}-Node"
        )
        if len(instance_name) > 256:  # EC2 tag values are at most 256 characters
            problems.append(Problem(
                f"{prefix}.instancePrefix", instance_name, "the instances' Name tag is longer than 256 characters",
                "shorten instancePrefix or instanceName",
            ))
    key_name = None
    if ng.ssh is not None:
        if ng.ssh.enable_ssm is False:
            problems.append(Problem(
                f"{prefix}.ssh.enableSsm", False, "Session Manager is always on for efa-stack nodes",
                "remove enableSsm (eksctl deprecated it too: SSM is always enabled)",
            ))
        if ng.ssh.allow and not ng.ssh.public_key_name:
            problems.append(Problem(
                f"{prefix}.ssh.allow", True, "SSH access needs a key pair (eksctl would read ~/.ssh/id_rsa.pub)",
                "add publicKeyName: <an EC2 key pair in the region> (`aws ec2 describe-key-pairs`), or remove ssh "
                "and use Session Manager (`aws ssm start-session`)",
            ))
        else:
            # eksctl-io/eksctl@v0.230.0 pkg/cfn/builder/managed_launch_template.go makeLaunchTemplateData: KeyName
            # whenever publicKeyName is set; ``allow`` only decides whether eksctl opens port 22 (efa-stack never does)
            key_name = ng.ssh.public_key_name
    ami_id = ng.ami if ng.ami is not None and ng.ami.startswith("ami-") else None
    if ami_id is not None and ng.ami_family != "AmazonLinux2023":
        problems.append(Problem(
            f"{prefix}.ami", ami_id, "a custom AMI needs its family, and efa-stack builds Amazon Linux 2023 nodes",
            "add amiFamily: AmazonLinux2023 (an AL2023 EKS node image with nodeadm, and the EFA and accelerator "
            "software for EFA or GPU groups), or remove ami for the EKS-optimized AMI",
        ))
    if ng.ami_family is not None and ng.ami_family != "AmazonLinux2023":
        problems.append(Problem(
            f"{prefix}.amiFamily", ng.ami_family,
            "efa-stack builds Amazon Linux 2023 nodes (EKS-optimized AL2023 AMIs with nodeadm user data)",
            "set amiFamily: AmazonLinux2023 or remove it",
        ))
    node_config = _node_config(prefix, ng, kubelet_config, problems)
    for i, command in enumerate(ng.pre_bootstrap_commands):
        if not command.strip():
            problems.append(Problem(f"{prefix}.preBootstrapCommands[{i}]", command, "an empty command",
                                    "remove the empty entry"))
    return NodeExtras(
        node_role_arn=role_arn, node_role_name=ng.iam.instance_role_name if ng.iam is not None else None,
        managed_policies=managed, inline_policies=inline, instance_name=instance_name, key_name=key_name, node_config=node_config,
        pre_bootstrap_commands=tuple(ng.pre_bootstrap_commands), ami_id=ami_id,
    )


def _iam(prefix: str, ng: ManagedNodeGroupSpec, problems: list[Problem]) -> tuple[str | None, tuple[str, ...], tuple[str, ...]]:
    if ng.iam is None:
        return None, (), ()
    addons = ng.iam.with_addon_policies.model_dump(by_alias=True)
    wanted = [name for name, on in addons.items() if on]
    for name in wanted:
        if name in _NOT_MAPPED:
            problems.append(Problem(
                f"{prefix}.iam.withAddonPolicies.{name}", True,
                f"efa-stack does not put {_NOT_MAPPED[name]}'s permissions on the node role",
                f"remove it and give {_NOT_MAPPED[name]} its permissions through EKS Pod Identity "
                "(addons[].podIdentityAssociations) or list a policy in iam.attachPolicyARNs",
            ))
    managed = [ADDON_MANAGED_POLICIES[n] for n in wanted if n in ADDON_MANAGED_POLICIES]
    for arn in ng.iam.attach_policy_arns:
        if arn not in managed:
            managed.append(arn)
    inline = tuple(n for n in wanted if n in ADDON_INLINE_POLICIES)
    role_arn = ng.iam.instance_role_arn
    if role_arn is not None and ng.iam.instance_role_name is not None:
        problems.append(Problem(
            f"{prefix}.iam.instanceRoleName", ng.iam.instance_role_name, "instanceRoleARN already names the role",
            "remove instanceRoleName (it names a new role) or instanceRoleARN",
        ))
    if role_arn is not None and (managed or inline):
        problems.append(Problem(
            f"{prefix}.iam.instanceRoleARN", role_arn,
            "an existing node role is used as it is; withAddonPolicies and attachPolicyARNs cannot change it",
            "attach those policies to the role yourself and remove withAddonPolicies/attachPolicyARNs, "
            "or remove instanceRoleARN",
        ))
    return role_arn, tuple(managed), inline


def _node_config(
    prefix: str, ng: ManagedNodeGroupSpec, kubelet_config: Mapping[str, str], problems: list[Problem],
) -> str | None:
    text = ng.override_bootstrap_command
    if text is None:
        return None
    field_name = f"{prefix}.overrideBootstrapCommand"
    shown = text if len(text) <= 60 else text[:57] + "..."
    stripped = text.lstrip()
    if stripped.startswith("#!") or stripped.upper().startswith("MIME-VERSION"):
        problems.append(Problem(
            field_name, shown, "on AL2023 nodes eksctl's overrideBootstrapCommand is a nodeadm NodeConfig document",
            "write a NodeConfig (apiVersion: node.eks.aws/v1alpha1, kind: NodeConfig) and move shell commands "
            "to preBootstrapCommands",
        ))
        return None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problems.append(Problem(field_name, shown, f"not valid YAML: {getattr(exc, 'problem', exc)}",
                                "write one NodeConfig YAML document"))
        return None
    if not isinstance(doc, dict) or doc.get("kind") != "NodeConfig" or doc.get("apiVersion") not in NODECONFIG_API_VERSIONS:
        problems.append(Problem(
            field_name, shown, "not a nodeadm NodeConfig",
            f"write apiVersion: {NODECONFIG_API_VERSIONS[0]}, kind: NodeConfig and a spec",
        ))
        return None
    spec = doc.get("spec")
    kubelet = spec.get("kubelet") if isinstance(spec, dict) else None
    config = kubelet.get("config") if isinstance(kubelet, dict) else None
    if isinstance(config, dict):
        own = "kubeletExtraConfig" if ng.kubelet_extra_config is not None else "efa-stack's kubelet defaults"
        for key, value in config.items():
            if key in kubelet_config and str(value) != kubelet_config[key]:
                problems.append(Problem(
                    f"{field_name}.spec.kubelet.config.{key}", value,
                    f"conflicts with {key}: {kubelet_config[key]} from {own} ({prefix}.kubeletExtraConfig.{key})",
                    f"set the same value in both, or set {key} in kubeletExtraConfig only",
                ))
    return yaml.safe_dump(doc, sort_keys=False)
