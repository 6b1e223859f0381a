"""IAM roles for add-ons through EKS Pod Identity, and their association with an EKS add-on."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

PODS_PRINCIPAL = "pods.eks.amazonaws.com"


def pod_identity_role(
    scope: Construct, id: str, *, description: str, managed_policies: Sequence[str] = ()
) -> iam.Role:
    """A role EKS Pod Identity can assume for a service account (``sts:AssumeRole`` + ``sts:TagSession``)."""
    pods = iam.ServicePrincipal(PODS_PRINCIPAL)
    role = iam.Role(
        scope,
        id,
        assumed_by=pods,
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in managed_policies] or None,
        description=description,
    )
    role.assume_role_policy.add_statements(iam.PolicyStatement(actions=["sts:TagSession"], principals=[pods]))
    return role


def associate_with_addon(addon: eks.Addon, role: iam.IRole, service_account: str) -> None:
    """Give the add-on's ``service_account`` the role (the add-on's ``PodIdentityAssociations``)."""
    cfn = addon.node.default_child
    assert isinstance(cfn, eks.CfnAddon)
    cfn.add_property_override("PodIdentityAssociations", [{"RoleArn": role.role_arn, "ServiceAccount": service_account}])
