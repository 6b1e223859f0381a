"""stacks/addons.py: the plan's add-ons as ``AWS::EKS::Addon`` with their Pod Identity roles (:func:`user_addons`) and
eksctl's ``iam.podIdentityAssociations`` (:func:`pod_identities`), built from the plan of a spec in one App and one
Stack with an imported cluster (tests.support.StackFixture). The VPC CNI and the Pod Identity agent, which the cluster
stack makes itself, and what waits for them: tests/stacks/test_cluster_stack.py."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match
from constructs import Construct

from efa_stack.planning.addons import (
    CLOUDWATCH_AGENT_POLICIES,
    CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
    CLOUDWATCH_OBSERVABILITY,
    NODE_MONITORING_AGENT,
)
from stacks.addons import pod_identities, user_addons
from tests.builders import BASE, cpu_group
from tests.support import StackFixture

ROLE = "arn:aws:iam::123456789012:role/external-dns"
POLICY = "arn:aws:iam::aws:policy/AmazonRoute53FullAccess"
CW_POLICY = "arn:aws:iam::aws:policy/CloudWatchFullAccess"
ADDONS = BASE.add(cpu_group()).with_(addons=[
    {"name": "coredns", "version": "v1.11.4-eksbuild.2", "configurationValues": "replicaCount: 3\n"},
    {"name": "external-dns", "resolveConflicts": "overwrite", "tags": {"team": "infra"}, "podIdentityAssociations": [
        {"namespace": "external-dns", "serviceAccountName": "external-dns", "permissionPolicyARNs": [POLICY]}]},
    {"name": "cert-manager", "podIdentityAssociations": [
        {"namespace": "cert-manager", "serviceAccountName": "cert-manager", "roleARN": ROLE}]},
    {"name": "eks-node-monitoring-agent", "version": "v1.4.0-eksbuild.1"},
    {"name": "amazon-cloudwatch-observability", "attachPolicyARNs": [CW_POLICY]},
], iam={"podIdentityAssociations": [
    {"namespace": "training", "serviceAccountName": "trainer", "roleName": "trainer-s3", "tags": {"team": "ml"},
     "permissionPolicyARNs": ["arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"]},
    {"namespace": "default", "serviceAccountName": "reader", "roleARN": "arn:aws:iam::111122223333:role/reader"},
]})
"""Every add-on field at once, with eksctl's Pod Identity associations."""


@pytest.fixture(scope="module")
def built() -> StackFixture:
    """The add-ons and Pod Identity associations of :data:`ADDONS`' plan, as the cluster stack makes them."""
    f, plan = StackFixture(), ADDONS.plan()
    user_addons(f.stack, f.cluster, plan)
    pod_identities(f.stack, f.cluster, Construct(f.stack, "PodIdentityAgent"), plan)
    f.template()
    return f


def addons_by_name(f: StackFixture) -> dict[str, dict]:
    return {r["Properties"]["AddonName"]: r for r in f.resources("AWS::EKS::Addon").values()}


def role_of(f: StackFixture, association: dict) -> dict:
    return f.template()["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]["Properties"]


def test_user_addon_becomes_an_eks_addon_with_version_and_configuration(built):
    coredns = addons_by_name(built)["coredns"]["Properties"]
    assert coredns["AddonVersion"] == "v1.11.4-eksbuild.2"
    assert json.loads(coredns["ConfigurationValues"]) == {"replicaCount": 3}
    # EKS installs a self-managed CoreDNS; the data file takes it over
    assert coredns["ResolveConflicts"] == "OVERWRITE"


def test_addon_without_version_leaves_the_build_to_eks(built):
    assert "AddonVersion" not in addons_by_name(built)["external-dns"]["Properties"]


def test_resolve_conflicts_and_tags(built):
    props = addons_by_name(built)["external-dns"]["Properties"]
    assert props["ResolveConflicts"] == "OVERWRITE"
    assert {"Key": "team", "Value": "infra"} in props["Tags"]


def test_permission_policy_arns_make_a_pod_identity_role(built):
    (assoc,) = addons_by_name(built)["external-dns"]["Properties"]["PodIdentityAssociations"]
    assert assoc["ServiceAccount"] == "external-dns"
    role = role_of(built, assoc)
    assert role["ManagedPolicyArns"] == [POLICY]
    principals = [s["Principal"] for s in role["AssumeRolePolicyDocument"]["Statement"]]
    assert {"Service": "pods.eks.amazonaws.com"} in principals


def test_role_arn_is_associated_as_given(built):
    (assoc,) = addons_by_name(built)["cert-manager"]["Properties"]["PodIdentityAssociations"]
    assert assoc == {"RoleArn": ROLE, "ServiceAccount": "cert-manager"}


def test_monitoring_agent_is_one_addon_at_the_users_version(built):
    agents = [a for a in built.resources("AWS::EKS::Addon").values()
              if a["Properties"]["AddonName"] == NODE_MONITORING_AGENT]
    assert len(agents) == 1 and agents[0]["Properties"]["AddonVersion"] == "v1.4.0-eksbuild.1"


def test_container_insights_gets_cloudwatch_agents_role_with_the_attached_policies(built):
    (assoc,) = addons_by_name(built)[CLOUDWATCH_OBSERVABILITY]["Properties"]["PodIdentityAssociations"]
    assert assoc["ServiceAccount"] == CLOUDWATCH_AGENT_SERVICE_ACCOUNT
    role = role_of(built, assoc)
    policies = json.dumps(role["ManagedPolicyArns"])
    assert all(f":iam::aws:policy/{p}" in policies for p in CLOUDWATCH_AGENT_POLICIES)
    assert CW_POLICY in role["ManagedPolicyArns"] and len(role["ManagedPolicyArns"]) == 3
    assert "pods.eks.amazonaws.com" in json.dumps(role["AssumeRolePolicyDocument"])


def test_pod_identity_associations(built):
    template = built.assertions()
    template.has_resource_properties("AWS::EKS::PodIdentityAssociation", {
        "Namespace": "training", "ServiceAccount": "trainer", "RoleArn": {"Fn::GetAtt": [Match.any_value(), "Arn"]},
        "Tags": Match.array_with([{"Key": "team", "Value": "ml"}]),
    })
    template.has_resource_properties("AWS::EKS::PodIdentityAssociation", {
        "Namespace": "default", "ServiceAccount": "reader", "RoleArn": "arn:aws:iam::111122223333:role/reader",
    })
    template.has_resource_properties("AWS::IAM::Role", {
        "RoleName": "trainer-s3",
        "ManagedPolicyArns": ["arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"],
        "AssumeRolePolicyDocument": Match.object_like({"Statement": Match.array_with([
            Match.object_like({"Principal": {"Service": "pods.eks.amazonaws.com"}}),
        ])}),
    })
