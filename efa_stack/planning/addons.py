"""EKS add-ons and node auto repair: the spec's ``addons`` merged with the add-ons efa-stack installs itself.

efa-stack's own add-ons (``vpc-cni``, ``eks-pod-identity-agent``, ``eks-node-monitoring-agent``,
``aws-fsx-csi-driver``, ``amazon-cloudwatch-observability``) come from data/addons.json; a user's entry of
the same name is merged with them, and anything that would break them is a spec problem. Which add-ons
and why: docs/design/addons.md.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, Literal

from efa_stack.spec.errors import Problem, SpecError
from efa_stack.spec.models import ADDON_VERSION_PATTERN, AddonSpec, NodeRepairConfigSpec

DATA = Path(__file__).resolve().parent / "data"
ADDONS_FILE = DATA / "addons.json"
KNOWN_ADDONS_FILE = DATA / "known_addons.json"
SERVICE_ACCOUNTS_FILE = DATA / "addon_service_accounts.json"

VPC_CNI = "vpc-cni"
POD_IDENTITY_AGENT = "eks-pod-identity-agent"
NODE_MONITORING_AGENT = "eks-node-monitoring-agent"
FSX_CSI_DRIVER = "aws-fsx-csi-driver"
CLOUDWATCH_OBSERVABILITY = "amazon-cloudwatch-observability"
# Amazon EKS User Guide, "Amazon CloudWatch Observability agent": the add-on's service account and namespace,
# and the AWS managed policies its role takes (CloudWatchAgentServerPolicy for metrics and logs,
# AWSXrayWriteOnlyAccess for the Application Signals traces the add-on turns on by default).
CLOUDWATCH_AGENT_NAMESPACE = "amazon-cloudwatch"
CLOUDWATCH_AGENT_SERVICE_ACCOUNT = "cloudwatch-agent"
CLOUDWATCH_AGENT_POLICIES = ("CloudWatchAgentServerPolicy", "AWSXrayWriteOnlyAccess")

CreatedBy = Literal["cluster", "storage"]


@dataclass(frozen=True)
class PodIdentityPlan:
    """A service account and the IAM role its pods get through EKS Pod Identity: an add-on's (``addons[]``) or the
    cluster's (eksctl ``iam.podIdentityAssociations``)."""

    namespace: str
    service_account: str
    role_arn: str | None = None
    """An existing role; None: a new role with ``policy_arns`` and ``aws_managed_policies``."""
    policy_arns: tuple[str, ...] = ()
    aws_managed_policies: tuple[str, ...] = ()
    """Names of AWS managed policies for a new role (efa-stack's own add-ons; the stack adds the partition)."""
    role_name: str | None = None
    """The new role's name (default: one CloudFormation makes up)."""
    target_role_arn: str | None = None
    disable_session_tags: bool | None = None
    tags: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AddonPlan:
    """One ``AWS::EKS::Addon``: the user's entry merged with efa-stack's own settings."""

    name: str
    version: str | None = None
    """A full ``vX.Y.Z-eksbuild.N`` build, or None for the build EKS marks default."""
    configuration_values: str | None = None
    """The configuration as compact JSON (what EKS takes), or None."""
    resolve_conflicts: str | None = None
    """``NONE`` or ``OVERWRITE`` (CloudFormation AWS::EKS::Addon ResolveConflicts), or None (EKS: NONE)."""
    pod_identities: tuple[PodIdentityPlan, ...] = ()
    service_account_role_arn: str | None = None
    tags: dict[str, str] = field(hash=False, default_factory=dict)
    created_by: CreatedBy = "cluster"
    """The part of the stack that creates it (the FSx CSI driver comes with the storage)."""
    managed: bool = False
    """efa-stack's own add-on (it keeps the add-on's IAM wiring)."""
    node_dependency: bool = False
    """Node groups wait for it (the CNI and the Pod Identity agent must run before nodes need them)."""


@dataclass(frozen=True)
class NodeRepairPlan:
    """EKS node auto repair of one managed node group (CloudFormation AWS::EKS::Nodegroup NodeRepairConfig)."""

    max_unhealthy_node_threshold_count: int | None = None
    max_unhealthy_node_threshold_percentage: int | None = None
    max_parallel_nodes_repaired_count: int | None = None
    max_parallel_nodes_repaired_percentage: int | None = None

    def cfn(self) -> dict[str, Any]:
        """The ``NodeRepairConfig`` property (``Enabled`` plus the limits that are set)."""
        limits = {
            "MaxUnhealthyNodeThresholdCount": self.max_unhealthy_node_threshold_count,
            "MaxUnhealthyNodeThresholdPercentage": self.max_unhealthy_node_threshold_percentage,
            "MaxParallelNodesRepairedCount": self.max_parallel_nodes_repaired_count,
            "MaxParallelNodesRepairedPercentage": self.max_parallel_nodes_repaired_percentage,
        }
        return {"Enabled": True, **{k: v for k, v in limits.items() if v is not None}}


@cache
def addon_data() -> dict[str, Any]:
    """data/addons.json: efa-stack's add-ons (pinned versions, conflict policy, who creates them)."""
    return {k: v for k, v in json.loads(ADDONS_FILE.read_text()).items() if not k.startswith("_")}


@cache
def known_addon_names() -> tuple[str, ...]:
    """Add-on names of the EKS User Guide's "AWS add-ons" and "Community add-ons" (data/known_addons.json)."""
    data = json.loads(KNOWN_ADDONS_FILE.read_text())
    return tuple(sorted({n for k, v in data.items() if not k.startswith("_") for n in v["names"]}))


@cache
def addon_service_account(name: str) -> tuple[str, str] | None:
    """(namespace, name) of the service account whose pods need the add-on's IAM permissions, where efa-stack
    knows it (data/addon_service_accounts.json)."""
    entry = json.loads(SERVICE_ACCOUNTS_FILE.read_text()).get(name)
    return (entry["namespace"], entry["name"]) if isinstance(entry, dict) else None


def _attached_policies(prefix: str, entry: AddonSpec, problems: list[Problem]) -> PodIdentityPlan | None:
    """eksctl's add-on ``attachPolicyARNs`` (a new IRSA role for the add-on's service account,
    eksctl-io/eksctl@v0.230.0 pkg/actions/addon/create.go) as a new role for the same service account through
    EKS Pod Identity; None when the add-on's entry has none or a problem was reported."""
    if not entry.attach_policy_arns:
        return None
    if entry.pod_identity_associations or entry.service_account_role_arn:
        other = "podIdentityAssociations" if entry.pod_identity_associations else "serviceAccountRoleARN"
        problems.append(Problem(
            f"{prefix}.attachPolicyARNs", list(entry.attach_policy_arns),
            f"the add-on's role is set twice (attachPolicyARNs and {other})", f"keep attachPolicyARNs or {other}",
        ))
        return None
    account = addon_service_account(entry.name)
    if account is None:
        problems.append(Problem(
            f"{prefix}.attachPolicyARNs", list(entry.attach_policy_arns),
            f"efa-stack does not know which service account the {entry.name} add-on's pods use",
            "use podIdentityAssociations: [{namespace: ..., serviceAccountName: ..., permissionPolicyARNs: [...]}] "
            "with the service account the add-on's documentation names",
        ))
        return None
    return PodIdentityPlan(account[0], account[1], policy_arns=tuple(entry.attach_policy_arns))


@cache
def configuration_schema(name: str) -> dict[str, Any] | None:
    """The add-on's configuration JSON schema when efa-stack keeps one (addons.json ``configuration_schema``)."""
    file = addon_data().get(name, {}).get("configuration_schema")
    return json.loads((DATA / file).read_text()) if file else None


def pinned_version(name: str, kubernetes_version: str) -> str | None:
    """The build efa-stack pins for ``name`` on ``kubernetes_version`` (None: EKS's default build)."""
    versions = addon_data().get(name, {}).get("versions", {})
    return versions.get(kubernetes_version)


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("-", 1)[0]))


# --- node repair ----------------------------------------------------------------------------------


def node_repair_plan(prefix: str, accelerated: bool, spec: NodeRepairConfigSpec | None) -> tuple[
    NodeRepairPlan | None, list[Problem]
]:
    """Repair on or off for one node group: the spec's ``enabled``, else on for GPU/Neuron node groups.

    EKS API Reference, NodeRepairConfig: a count and a percentage of the same limit cannot both be set.
    """
    problems: list[Problem] = []
    enabled = spec.enabled if spec is not None and spec.enabled is not None else accelerated
    if spec is None:
        return (NodeRepairPlan() if enabled else None), problems
    for count, pct in (
        ("maxUnhealthyNodeThresholdCount", "maxUnhealthyNodeThresholdPercentage"),
        ("maxParallelNodesRepairedCount", "maxParallelNodesRepairedPercentage"),
    ):
        values = spec.model_dump(by_alias=True)
        if values[count] is not None and values[pct] is not None:
            problems.append(Problem(
                f"{prefix}.nodeRepairConfig.{pct}", values[pct],
                f"EKS takes {count} or {pct}, not both", f"remove one of {count} and {pct}",
            ))
    limits = NodeRepairPlan(
        max_unhealthy_node_threshold_count=spec.max_unhealthy_node_threshold_count,
        max_unhealthy_node_threshold_percentage=spec.max_unhealthy_node_threshold_percentage,
        max_parallel_nodes_repaired_count=spec.max_parallel_nodes_repaired_count,
        max_parallel_nodes_repaired_percentage=spec.max_parallel_nodes_repaired_percentage,
    )
    if not enabled and limits != NodeRepairPlan():
        problems.append(Problem(
            f"{prefix}.nodeRepairConfig.enabled", spec.enabled,
            "repair limits are set but node repair is off",
            "set enabled: true, or remove the limits",
        ))
    return (limits if enabled else None), problems


# --- add-ons --------------------------------------------------------------------------------------


def parse_configuration(prefix: str, name: str, text: str) -> tuple[str | None, list[Problem]]:
    """``configurationValues`` (JSON or YAML, as eksctl reads it) as compact JSON, checked against the
    add-on's schema where efa-stack keeps one (otherwise EKS checks it at deploy against
    ``aws eks describe-addon-configuration``)."""
    where = f"{prefix}.configurationValues"
    try:
        value: Any = json.loads(text)
    except ValueError:
        from efa_stack.spec.loader import read_yaml

        try:
            value = read_yaml(text, source=where)
        except SpecError as exc:
            detail = exc.problems[0].message if exc.problems else "not YAML"
            return None, [Problem(
                where, text, f"is neither JSON nor YAML ({detail})",
                "write a JSON object or a YAML mapping, e.g. '{\"resources\": {\"limits\": {\"memory\": \"1Gi\"}}}'",
            )]
    if not isinstance(value, dict):
        return None, [Problem(
            where, text, f"must be a mapping of settings, not {type(value).__name__}",
            "write a JSON object or a YAML mapping of the add-on's settings",
        )]
    schema = configuration_schema(name)
    if schema is not None:
        import jsonschema

        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
        problems = [
            Problem(
                where + "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in e.absolute_path),
                e.instance if not isinstance(e.instance, dict) else "{...}",
                f"does not fit the {name} configuration schema: {e.message}",
                f"see `aws eks describe-addon-configuration --addon-name {name}` for the settings it takes",
            )
            for e in errors[:5]
        ]
        if problems:
            return None, problems
    return json.dumps(value, sort_keys=True, separators=(",", ":")), []


def _check_version(prefix: str, name: str, version: str | None, own: AddonPlan | None = None) -> list[Problem]:
    """``version`` as a full build; the ``v`` it lacks is proposed only where that build passes efa-stack's
    minimum for its own add-on ``own`` too (else the minimum's fix, so the advice passes every rule)."""
    if version is None or re.match(ADDON_VERSION_PATTERN, version):
        return []
    # eksctl (eksctl-io/eksctl@v0.230.0 pkg/actions/addon/addon.go getLatestMatchingVersion) resolves
    # "latest" and partial versions through DescribeAddonVersions at deploy time; efa-stack synthesizes offline.
    fix = (f"pin a full build from `aws eks describe-addon-versions --addon-name {name} --kubernetes-version X.Y`"
           " (vX.Y.Z-eksbuild.N), or leave version out for EKS's default build")
    reason = ("efa-stack cannot look up the newest build offline" if version == "latest"
              else "is not a full add-on build vX.Y.Z-eksbuild.N")
    if re.match(r"^\d+\.\d+\.\d+-eksbuild\.\d+$", version):
        below = _below_minimum(own, f"v{version}") if own is not None else None
        if below is None:
            fix = f"write v{version}"
        else:
            reason, fix = f"{reason}, and {below[0]}", below[1]
    return [Problem(f"{prefix}.version", version, reason, fix)]


def _below_minimum(own: AddonPlan, version: str) -> tuple[str, str] | None:
    """(why, fix) when the full build ``version`` of efa-stack's add-on ``own`` is older than efa-stack needs."""
    minimum = addon_data().get(own.name, {}).get("minimum")
    if not minimum or _version_tuple(version) >= _version_tuple(minimum):
        return None
    return {
        VPC_CNI: (
            f"efa-only interfaces need the VPC CNI {minimum} or later",
            f"use {own.version or minimum} or a later build, or leave version out (efa-stack pins {own.version})",
        ),
        CLOUDWATCH_OBSERVABILITY: (
            ("efa-stack gives cloudwatch-agent its role through EKS Pod Identity, which the add-on takes "
             f"from {minimum} (EFA metrics need v1.5.2 or later)"),
            f"use {minimum} or a later build, or leave version out (EKS's default build)",
        ),
    }[own.name]


def _resolve(prefix: str, entry: AddonSpec) -> tuple[str | None, list[Problem]]:
    """The spec's ``resolveConflicts`` as CloudFormation's value. EKS CreateAddon takes NONE, OVERWRITE and
    PRESERVE ("Preserve - This is similar to the NONE option ... This option works differently during the
    update operation", EKS API Reference, CreateAddon ``resolveConflicts``)."""
    value = entry.resolve_conflicts
    if value is None:
        return None, []
    return value.upper(), []


def role_problems(where: str, role_arn: str | None, policy_arns: Sequence[str]) -> list[Problem]:
    """A pod identity association's role: an existing ``roleARN`` (used as it is, so no policies), or
    ``permissionPolicyARNs`` for a new role; one of the two."""
    if role_arn and policy_arns:
        return [Problem(
            f"{where}.permissionPolicyARNs", list(policy_arns),
            "an existing role (roleARN) is used as it is and takes no policies here",
            "remove permissionPolicyARNs or roleARN",
        )]
    if not role_arn and not policy_arns:
        return [Problem(
            f"{where}.roleARN", None, "the service account needs a role",
            "set roleARN (an existing role trusting pods.eks.amazonaws.com) or permissionPolicyARNs (a new role "
            "with those policies)",
        )]
    return []


def dcgm_tolerations(taints: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    """Tolerations (``Exists`` per key and effect) for the node monitoring agent's DCGM server.

    aws/eks-node-monitoring-agent@v1.7.0 (c399089) charts/eks-node-monitoring-agent/values.yaml:
    ``nodeAgent.tolerations`` defaults to ``[{operator: Exists}]`` but ``dcgmAgent.tolerations`` to ``[]``,
    and templates/dcgm-daemonset.yaml renders the ``dcgm-server`` DaemonSet with only those tolerations,
    so it never runs on efa-stack's tainted GPU nodes and the agent reports DCGM as failed there, which
    node auto repair acts on. Exactly the accelerated node groups' taints, nothing broader.
    """
    return [{"key": k, "operator": "Exists", "effect": e} for k, e in sorted(set(taints))]


def _with_dcgm_tolerations(config: dict[str, Any], tolerations: list[dict[str, str]]) -> dict[str, Any]:
    """``config`` with ``tolerations`` appended to ``dcgmAgent.tolerations`` (those it lacks), the rest kept."""
    if not tolerations:
        return config
    dcgm = dict(config.get("dcgmAgent") or {})
    have = list(dcgm.get("tolerations") or [])
    dcgm["tolerations"] = have + [t for t in tolerations if t not in have]
    return {**config, "dcgmAgent": dcgm}


def _compact(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _own_addons(kubernetes_version: str, repair: bool, storage: bool, observability: bool,
                dcgm_taints: Iterable[tuple[str, str]] = ()) -> dict[str, AddonPlan]:
    own: dict[str, AddonPlan] = {}
    data = addon_data()
    for name in (VPC_CNI, POD_IDENTITY_AGENT):
        own[name] = AddonPlan(
            name=name, version=pinned_version(name, kubernetes_version),
            resolve_conflicts=data[name].get("resolve_conflicts"), managed=True,
            node_dependency=bool(data[name].get("node_dependency")),
        )
    if repair:
        tolerations = dcgm_tolerations(dcgm_taints)
        config = _compact(_with_dcgm_tolerations({}, tolerations)) if tolerations else None
        own[NODE_MONITORING_AGENT] = AddonPlan(name=NODE_MONITORING_AGENT, managed=True, configuration_values=config)
    if storage:
        own[FSX_CSI_DRIVER] = AddonPlan(name=FSX_CSI_DRIVER, managed=True, created_by="storage")
    if observability:
        own[CLOUDWATCH_OBSERVABILITY] = AddonPlan(
            name=CLOUDWATCH_OBSERVABILITY, managed=True,
            pod_identities=(PodIdentityPlan(
                CLOUDWATCH_AGENT_NAMESPACE, CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
                aws_managed_policies=CLOUDWATCH_AGENT_POLICIES,
            ),),
        )
    return own


def _merge(prefix: str, own: AddonPlan, entry: AddonSpec, problems: list[Problem]) -> AddonPlan:
    """efa-stack's add-on with the user's version, configurationValues, resolveConflicts and tags."""
    version = entry.version or own.version
    below = (_below_minimum(own, entry.version)
             if entry.version and re.match(ADDON_VERSION_PATTERN, entry.version) else None)
    if below is not None:
        problems.append(Problem(f"{prefix}.version", entry.version, *below))
    resolve, more = _resolve(prefix, entry)
    problems.extend(more)
    if own.resolve_conflicts == "OVERWRITE" and resolve not in (None, "OVERWRITE"):
        problems.append(Problem(
            f"{prefix}.resolveConflicts", entry.resolve_conflicts,
            f"EKS installs a self-managed {own.name} with every cluster and the add-on must take it over",
            "use overwrite or leave resolveConflicts out",
        ))
    pod_identities = own.pod_identities
    if entry.attach_policy_arns and own.name == CLOUDWATCH_OBSERVABILITY and not (
            entry.pod_identity_associations or entry.service_account_role_arn):
        # the user's policies join the ones efa-stack gives cloudwatch-agent, on the same role
        pod_identities = tuple(
            replace(p, policy_arns=(*p.policy_arns, *entry.attach_policy_arns)) for p in own.pod_identities)
    elif entry.pod_identity_associations or entry.service_account_role_arn or entry.attach_policy_arns:
        field_name = ("podIdentityAssociations" if entry.pod_identity_associations else
                      "serviceAccountRoleARN" if entry.service_account_role_arn else "attachPolicyARNs")
        why = {
            VPC_CNI: "efa-stack gives aws-node its role (AmazonEKS_CNI_Policy) through EKS Pod Identity",
            POD_IDENTITY_AGENT: "the Pod Identity agent uses the node role and takes no role of its own",
            FSX_CSI_DRIVER: "efa-stack gives fsx-csi-controller-sa its role through EKS Pod Identity",
            NODE_MONITORING_AGENT: "the node monitoring agent needs no IAM permissions",
            CLOUDWATCH_OBSERVABILITY: "efa-stack gives cloudwatch-agent its role (CloudWatchAgentServerPolicy, "
            "AWSXrayWriteOnlyAccess) through EKS Pod Identity",
        }[own.name]
        problems.append(Problem(f"{prefix}.{field_name}", "set", why, f"remove {field_name}"))
    return AddonPlan(
        name=own.name, version=version, configuration_values=own.configuration_values,
        resolve_conflicts=resolve or own.resolve_conflicts, tags=dict(entry.tags), created_by=own.created_by,
        managed=True, node_dependency=own.node_dependency, pod_identities=pod_identities,
    )


def addon_plans(
    entries: Iterable[AddonSpec], *, kubernetes_version: str, repair: bool, storage: bool, with_oidc: bool,
    observability: bool = False, accelerator_taints: Iterable[tuple[str, str]] = (),
) -> tuple[tuple[AddonPlan, ...], list[Problem]]:
    """Every add-on the stacks create, efa-stack's own first (in a fixed order), then the user's in spec order.

    ``accelerator_taints``: (key, effect) of every taint the plan puts on NVIDIA GPU node groups (DCGM needs their
    GPUs; on Neuron nodes it would have nothing to run on); the node
    monitoring agent's DCGM server tolerates them (:func:`dcgm_tolerations`), also beside a user's own
    ``configurationValues`` of the agent."""
    problems: list[Problem] = []
    accelerator_taints = tuple(accelerator_taints)
    own = _own_addons(kubernetes_version, repair, storage, observability, accelerator_taints)
    known = known_addon_names()
    merged: dict[str, AddonPlan] = dict(own)
    extra: list[AddonPlan] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        prefix = f"addons[{i}]"
        if entry.name in seen:
            problems.append(Problem(f"{prefix}.name", entry.name, "the add-on is listed twice", "list it once"))
            continue
        seen.add(entry.name)
        if entry.name not in known:
            close = difflib.get_close_matches(entry.name, known, n=1, cutoff=0.6)
            problems.append(Problem(
                f"{prefix}.name", entry.name, "not an EKS add-on efa-stack knows (EKS User Guide, AWS and community "
                "add-ons)", f"did you mean {close[0]}?" if close else
                "use a name `aws eks describe-addon-versions` lists (efa-stack's list: efa_stack/planning/data/"
                "known_addons.json)",
            ))
            continue
        problems.extend(_check_version(prefix, entry.name, entry.version, own.get(entry.name)))
        config: str | None = None
        if entry.configuration_values is not None:
            config, more = parse_configuration(prefix, entry.name, entry.configuration_values)
            problems.extend(more)
        if entry.service_account_role_arn and entry.pod_identity_associations:
            # eksctl Addon.Validate: IRSA settings and pod identity associations are exclusive.
            problems.append(Problem(
                f"{prefix}.serviceAccountRoleARN", entry.service_account_role_arn,
                "an add-on takes an IRSA role or pod identity associations, not both",
                "remove serviceAccountRoleARN (or podIdentityAssociations)",
            ))
        if entry.service_account_role_arn and not with_oidc:
            problems.append(Problem(
                f"{prefix}.serviceAccountRoleARN", entry.service_account_role_arn,
                "IRSA needs the cluster's IAM OIDC provider", "set iam.withOIDC: true, or use podIdentityAssociations",
            ))
        identities: list[PodIdentityPlan] = []
        for j, pia in enumerate(entry.pod_identity_associations):
            where = f"{prefix}.podIdentityAssociations[{j}]"
            problems.extend(role_problems(where, pia.role_arn, pia.permission_policy_arns))
            identities.append(PodIdentityPlan(
                pia.namespace, pia.service_account_name, pia.role_arn, tuple(pia.permission_policy_arns)
            ))
        if entry.name not in own:
            attached = _attached_policies(prefix, entry, problems)
            if attached is not None:
                identities.append(attached)
        if entry.name in own:
            base = _merge(prefix, own[entry.name], entry, problems)
            if entry.name == NODE_MONITORING_AGENT and config is not None:
                config = _compact(_with_dcgm_tolerations(json.loads(config), dcgm_tolerations(accelerator_taints)))
            merged[entry.name] = replace(base, configuration_values=config or base.configuration_values)
            continue
        resolve, more = _resolve(prefix, entry)
        problems.extend(more)
        extra.append(AddonPlan(
            name=entry.name, version=entry.version, configuration_values=config,
            resolve_conflicts=resolve or addon_data().get(entry.name, {}).get("resolve_conflicts"),
            pod_identities=tuple(identities), service_account_role_arn=entry.service_account_role_arn,
            tags=dict(entry.tags),
        ))
    return (*merged.values(), *extra), problems
