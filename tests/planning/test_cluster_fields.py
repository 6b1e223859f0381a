"""eksctl cluster fields read with eksctl's meaning: vpc.id/vpc.subnets (an existing VPC),
managedNodeGroups[].subnets and cloudWatch.clusterLogging; synthesized, or refused naming field, value and fix."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match, Template

from efa_stack.planning.plan import plan_from_text
from efa_stack.spec.errors import SpecError
from tests.support import BASE, cluster_spec, one_problem, plan_of, problems_of, synth_text

VPC = (
    "vpc:\n  id: vpc-0123456789abcdef0\n  subnets:\n    private:\n"
    "      us-west-2a: {id: subnet-0aaaaaaaaaaaaaaa1}\n"
    "      b-side: {id: subnet-0aaaaaaaaaaaaaaa2, az: us-west-2b}\n"
)
NO_ZONES = "availabilityZones: [us-west-2a, us-west-2b]\n"
LOGGING = "cloudWatch:\n  clusterLogging: {enableTypes: [api, audit], logRetentionInDays: 30}\n"


def test_existing_vpc_plans_zones_from_subnets():
    plan = plan_of(BASE.replace(NO_ZONES, "") + VPC)
    assert plan.existing_vpc is not None
    assert plan.availability_zones == ("us-west-2a", "us-west-2b")
    assert plan.existing_vpc.private_subnets == (
        ("subnet-0aaaaaaaaaaaaaaa1", "us-west-2a"), ("subnet-0aaaaaaaaaaaaaaa2", "us-west-2b"),
    )


def test_node_group_subnets_name_the_existing_subnet():
    text = BASE.replace(NO_ZONES, "").replace("    availabilityZones: [us-west-2a]\n", "    subnets: [b-side]\n") + VPC
    (group,) = plan_of(text).node_groups
    assert group.subnet_ids == ("subnet-0aaaaaaaaaaaaaaa2",)
    assert group.availability_zones == ("us-west-2b",)


@pytest.mark.parametrize(("vpc", "field", "value", "fix"), [
    ("vpc:\n  id: vpc-0123456789abcdef0\n", "vpc.subnets", None, "vpc.subnets.private"),
    (VPC.replace("us-west-2a: {id", "a-side: {id"), "vpc.subnets.private.a-side.az", None, "add az: <zone>"),
    (VPC.replace(", az: us-west-2b", ", az: us-west-2a"), "vpc.subnets.private", ["us-west-2a"], "two or more zones"),
])
def test_fails_existing_vpc_that_cannot_be_used(vpc, field, value, fix):
    problems = problems_of(BASE.replace(NO_ZONES, "") + vpc)
    p = next(p for p in problems if p.field == field)
    assert p.value == value
    assert fix in p.fix


def test_fails_efa_group_in_zone_without_existing_private_subnet():
    text = BASE.replace(NO_ZONES, "").replace("[us-west-2a]", "[us-west-2c]") + VPC
    p = one_problem(text)
    assert (p.field, p.value) == ("managedNodeGroups[0].availabilityZones", "us-west-2c")
    assert "no private subnet of vpc.subnets" in p.message
    assert "add a private subnet of us-west-2c" in p.fix


def test_fails_node_group_subnets_without_existing_vpc():
    p = one_problem(BASE + "    subnets: [subnet-0aaaaaaaaaaaaaaa1]\n")
    assert p.field == "managedNodeGroups[0].subnets"
    assert "use availabilityZones" in p.fix


def test_fails_placeholder_vpc_with_every_other_problem():
    # a published config's placeholders, and its other problems, in one run
    text = BASE.replace(NO_ZONES, "").replace('version: "1.34"', 'version: "1.27"') + VPC.replace(
        "vpc-0123456789abcdef0", "PLACEHOLDER_VPC_ID")
    with pytest.raises(SpecError) as info:
        plan_from_text(text)
    problems = info.value.problems
    assert [(p.field, p.message) for p in problems][:1] == [("vpc.id", "a placeholder left in the file")]
    assert "metadata.version" in [p.field for p in problems]


PUBLIC_ONLY_VPC = """
apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig

metadata:
  name: my-test
  region: us-west-2

vpc:
  id: "vpc-11111"
  subnets:
    public:
      us-west-2d:
          id: "subnet-0153e560b3129a696"
      us-west-2c:
          id: "subnet-0cc9c5aebe75083fd"
      us-west-2a:
          id: "subnet-009fa0199ec203c37"
      us-west-2b:
          id: "subnet-018fa0176ba320e45"

nodeGroups:
  - name: ng-1
"""
"""eksctl's "custom VPC 4x public subnets" config (eksctl-io/eksctl@99984ad userdocs/src/usage/vpc-configuration.md)."""


def test_a_public_only_vpc_is_told_it_has_no_private_subnet_beside_its_bad_id():
    with pytest.raises(SpecError) as info:
        plan_from_text(PUBLIC_ONLY_VPC)
    by_field = {p.field: p for p in info.value.problems}
    assert by_field["vpc.id"].value == "vpc-11111"
    # the planning problem of the rest of the file, in the same run as the badly formed id
    private = by_field["vpc.subnets.private"]
    assert "no private subnet for the nodes" in private.message and "vpc.subnets.private" in private.fix


def test_fails_node_group_naming_a_public_subnet():
    public = "    public:\n      us-west-2a: {id: subnet-0bbbbbbbbbbbbbbb1}\n"
    text = BASE.replace(NO_ZONES, "").replace("    availabilityZones: [us-west-2a]\n", "    subnets: [us-west-2a]\n")
    text = text + VPC.replace("    private:\n", public + "    private:\n")
    text = text.replace("subnets: [us-west-2a]", "subnets: [subnet-0bbbbbbbbbbbbbbb1]")
    p = one_problem(text)
    assert (p.field, p.value) == ("managedNodeGroups[0].subnets", "subnet-0bbbbbbbbbbbbbbb1")
    assert "public subnet" in p.message and "vpc.subnets.private" in p.fix


def test_control_plane_logging_as_eksctl_says():
    plan = plan_of(BASE + LOGGING)
    assert (plan.log_types, plan.log_retention_days) == (("api", "audit"), 30)
    assert plan_of(BASE + "cloudWatch: {clusterLogging: {enableTypes: ['*']}}\n").log_types == (
        "api", "audit", "authenticator", "controllerManager", "scheduler")
    assert plan_of(BASE).log_types[-1] == "scheduler"  # without the section: every type, as before


def test_control_plane_logging_synthesizes():
    s = synth_text(cluster_spec("logs", desired=1, max_size=1) + LOGGING)
    template = Template.from_json(s.template("cluster"))
    template.has_resource_properties("AWS::EKS::Cluster", {
        "Logging": {"ClusterLogging": {"EnabledTypes": [{"Type": "api"}, {"Type": "audit"}]}},
    })
    template.has_resource_properties("AWS::Logs::LogGroup", {
        "LogGroupName": "/aws/eks/logs/cluster", "RetentionInDays": 30,
    })
    template.has_resource("AWS::EKS::Cluster", {"DependsOn": Match.array_with(["ControlPlaneLogGroup"])})


@pytest.mark.parametrize(("logging", "field", "value", "fix"), [
    ("{enableTypes: [adit]}", "cloudWatch.clusterLogging.enableTypes[0]", "adit", "did you mean audit?"),
    ("{enableTypes: [api], logRetentionInDays: 10}", "cloudWatch.clusterLogging.logRetentionInDays", 10, "use one of 1, 3"),
    ("{logRetentionInDays: 30}", "cloudWatch.clusterLogging.logRetentionInDays", 30, "add enableTypes"),
])
def test_fails_control_plane_logging(logging, field, value, fix):
    p = one_problem(BASE + f"cloudWatch: {{clusterLogging: {logging}}}\n")
    assert (p.field, p.value) == (field, value)
    assert fix in p.fix


def test_fails_node_access_entry_with_groups():
    text = BASE + (
        "accessConfig:\n  accessEntries:\n    - principalARN: arn:aws:iam::111122223333:role/nodes\n"
        "      type: EC2_LINUX\n      kubernetesGroups: [admins]\n"
    )
    p = one_problem(text)
    assert (p.field, p.value) == ("accessConfig.accessEntries[0].kubernetesGroups", ["admins"])
    assert "type: STANDARD" in p.fix


def test_fails_config_map_authentication():
    p = one_problem(BASE + "accessConfig: {authenticationMode: CONFIG_MAP}\n")
    assert (p.field, p.value) == ("accessConfig.authenticationMode", "CONFIG_MAP")
    assert "API_AND_CONFIG_MAP" in p.fix


def test_api_and_config_map_authentication_synthesizes():
    s = synth_text(cluster_spec("auth", desired=1, max_size=1) + "accessConfig: {authenticationMode: API_AND_CONFIG_MAP}\n")
    Template.from_json(s.template("cluster")).has_resource_properties("AWS::EKS::Cluster", {
        "AccessConfig": Match.object_like({"AuthenticationMode": "API_AND_CONFIG_MAP"}),
    })


PIA = (
    "iam:\n  podIdentityAssociations:\n"
    "    - {namespace: training, serviceAccountName: trainer, roleName: trainer-s3, tags: {team: ml},\n"
    "       permissionPolicyARNs: [arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess]}\n"
    "    - {namespace: default, serviceAccountName: reader, roleARN: arn:aws:iam::111122223333:role/reader}\n"
)


def test_pod_identity_associations_synthesize():
    s = synth_text(cluster_spec("pia", desired=1, max_size=1) + PIA)
    template = Template.from_json(s.template("cluster"))
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


@pytest.mark.parametrize(("entry", "field", "fix"), [
    ("{namespace: a, serviceAccountName: b}", "iam.podIdentityAssociations[0].roleARN", "set roleARN"),
    (("{namespace: a, serviceAccountName: b, roleARN: arn:aws:iam::111122223333:role/r, "
     "permissionPolicyARNs: [arn:aws:iam::aws:policy/X]}"), "iam.podIdentityAssociations[0].permissionPolicyARNs",
     "remove permissionPolicyARNs or roleARN"),
])
def test_fails_pod_identity_association_without_one_role(entry, field, fix):
    p = one_problem(BASE + f"iam:\n  podIdentityAssociations: [{entry}]\n")
    assert p.field == field and fix in p.fix


def test_fails_pod_identity_association_create_service_account_says_what_to_do():
    (p,) = problems_of(BASE + "iam:\n  podIdentityAssociations:\n"
                       "    - {namespace: a, serviceAccountName: b, roleARN: arn:aws:iam::111122223333:role/r, "
                       "createServiceAccount: true}\n")
    assert p.field == "iam.podIdentityAssociations[0].createServiceAccount"
    assert "your workload's manifests" in p.fix


def test_self_managed_node_groups_are_judged_as_managed_ones_in_the_same_run():
    # the fix for nodeGroups is "move each entry to managedNodeGroups": the entries' own problems come now
    text = BASE + (
        "nodeGroups:\n  - name: old\n    instanceType: p5.48xlarge\n    efaEnabled: true\n"
        "    availabilityZones: [us-west-2a]\n    capacityReservation: {capacityReservationTarget: "
        "{capacityReservationID: cr-xxxxxxxxxxxx}}\n    classicLoadBalancerNames: [lb]\n"
    )
    with pytest.raises(SpecError) as info:
        plan_from_text(text)
    got = [(p.field, p.message) for p in info.value.problems]
    assert got[0] == ("nodeGroups", "an eksctl field that efa-stack does not support")
    assert ("nodeGroups[0].classicLoadBalancerNames", "once moved to managedNodeGroups: unknown field") in got
    assert ("nodeGroups[0].capacityReservation.capacityReservationTarget.capacityReservationID",
            "once moved to managedNodeGroups: a placeholder left in the file") in got
