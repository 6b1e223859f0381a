"""The cluster stack's EKS add-ons and Pod Identity associations: the spec's add-ons with their roles
(:func:`user_addons`), the plan's settings on any add-on (:func:`apply_addon_settings`), and eksctl's
``iam.podIdentityAssociations`` (:func:`pod_identities`)."""

from __future__ import annotations

import re
from typing import Any

from aws_cdk import CfnTag, Stack, Tags
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from aws_constructs.pod_identity import pod_identity_role
from aws_constructs.security import acknowledge, managed_policy
from efa_stack.planning.addons import POD_IDENTITY_AGENT, VPC_CNI, AddonPlan
from efa_stack.planning.plan import ClusterPlan


def addon_construct_id(name: str) -> str:
    """The construct id of an add-on the spec adds (``coredns`` -> ``AddonCoredns``): stable per name."""
    return "Addon" + "".join(part.capitalize() for part in re.split(r"[-_]", name))


def apply_addon_settings(addon: eks.Addon, plan: AddonPlan, *, version: bool = True) -> None:
    """The plan's version, configurationValues, resolveConflicts, IRSA role and tags on ``addon``'s CfnAddon."""
    cfn = addon.node.default_child
    assert isinstance(cfn, eks.CfnAddon)
    if version and plan.version:
        cfn.addon_version = plan.version
    if plan.configuration_values:
        cfn.configuration_values = plan.configuration_values
    if plan.resolve_conflicts:
        cfn.resolve_conflicts = plan.resolve_conflicts
    if plan.service_account_role_arn:
        cfn.service_account_role_arn = plan.service_account_role_arn
    for key, value in sorted(plan.tags.items()):
        Tags.of(addon).add(key, value)


def user_addons(stack: Stack, cluster: eks.ICluster, plan: ClusterPlan) -> dict[str, eks.Addon]:
    """An ``AWS::EKS::Addon`` for every add-on of the plan the cluster stack creates and nothing else
    does (the VPC CNI and the Pod Identity agent above; the FSx CSI driver comes with storage)."""
    made: dict[str, eks.Addon] = {}
    for addon in plan.addons:
        if addon.created_by != "cluster" or addon.name in (VPC_CNI, POD_IDENTITY_AGENT):
            continue
        construct = eks.Addon(
            stack, addon_construct_id(addon.name), cluster=cluster, addon_name=addon.name,
            addon_version=addon.version, preserve_on_delete=False,
        )
        apply_addon_settings(construct, addon, version=False)
        associations: list[dict[str, Any]] = []
        for i, identity in enumerate(addon.pod_identities):
            role: iam.IRole
            if identity.role_arn:
                role = iam.Role.from_role_arn(stack, f"{construct.node.id}Role{i}", identity.role_arn, mutable=False)
            elif identity.aws_managed_policies:  # efa-stack's own add-on: AWS managed policies by name
                role = pod_identity_role(
                    construct, f"Role{i}", managed_policies=identity.aws_managed_policies,
                    description=f"{addon.name} ({identity.namespace}/{identity.service_account}) through EKS "
                    "Pod Identity",
                )
                for name in identity.aws_managed_policies:
                    acknowledge(
                        role, "AwsSolutions-IAM4",
                        f"{name} is the AWS-maintained policy the {addon.name} add-on documents for its role.",
                        managed_policy(name),
                    )
                for arn in identity.policy_arns:  # the spec's attachPolicyARNs of the add-on, on the same role
                    role.add_managed_policy(iam.ManagedPolicy.from_managed_policy_arn(role, arn, arn))
                    acknowledge(
                        role, "AwsSolutions-IAM4",
                        "A managed policy the spec's addons[].attachPolicyARNs name for this add-on.",
                        f"Policy::{arn}",
                    )
            else:
                role = pod_identity_role(
                    construct, f"Role{i}",
                    description=f"{addon.name} ({identity.namespace}/{identity.service_account}) through EKS "
                    "Pod Identity",
                )
                for arn in identity.policy_arns:
                    role.add_managed_policy(iam.ManagedPolicy.from_managed_policy_arn(role, arn, arn))
                    acknowledge(
                        role, "AwsSolutions-IAM4",
                        "A managed policy the spec's addons[] (podIdentityAssociations or attachPolicyARNs) "
                        "name for this add-on.",
                        f"Policy::{arn}",
                    )
            associations.append({"RoleArn": role.role_arn, "ServiceAccount": identity.service_account})
        if associations:
            # CloudFormation AWS::EKS::Addon PodIdentityAssociations: [{RoleArn, ServiceAccount}], in the
            # add-on's namespace.
            cfn = construct.node.default_child
            assert isinstance(cfn, eks.CfnAddon)
            cfn.add_property_override("PodIdentityAssociations", associations)
        made[addon.name] = construct
    return made


def pod_identities(stack: Stack, cluster: eks.ICluster, agent: Construct, plan: ClusterPlan) -> None:
    """eksctl ``iam.podIdentityAssociations``: an ``AWS::EKS::PodIdentityAssociation`` per service account,
    with the existing role or a new one with the listed managed policies, each after the Pod Identity ``agent``."""
    for i, pia in enumerate(plan.pod_identities):
        role: iam.IRole
        if pia.role_arn:
            role = iam.Role.from_role_arn(stack, f"PodIdentityRole{i}", pia.role_arn, mutable=False)
        else:
            new_role = pod_identity_role(
                stack, f"PodIdentityRole{i}",
                description=f"{pia.namespace}/{pia.service_account} through EKS Pod Identity",
            )
            if pia.role_name:
                role_cfn = new_role.node.default_child
                assert isinstance(role_cfn, iam.CfnRole)
                role_cfn.role_name = pia.role_name
            for arn in pia.policy_arns:
                new_role.add_managed_policy(iam.ManagedPolicy.from_managed_policy_arn(new_role, arn, arn))
                acknowledge(
                    new_role, "AwsSolutions-IAM4",
                    "A managed policy the spec's iam.podIdentityAssociations name for this service account.",
                    f"Policy::{arn}",
                )
            role = new_role
        association = eks.CfnPodIdentityAssociation(
            stack, f"PodIdentityAssociation{i}", cluster_name=cluster.cluster_name,
            namespace=pia.namespace, service_account=pia.service_account, role_arn=role.role_arn,
            target_role_arn=pia.target_role_arn, disable_session_tags=pia.disable_session_tags,
            tags=[CfnTag(key=k, value=v) for k, v in pia.tags] or None,
        )
        association.node.add_dependency(agent)
