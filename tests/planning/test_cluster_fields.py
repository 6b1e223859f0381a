"""eksctl cluster fields read with eksctl's meaning: vpc.id/vpc.subnets (an existing VPC), managedNodeGroups[].subnets,
cloudWatch.clusterLogging, the API endpoint, the control plane tier, accessConfig and iam.podIdentityAssociations;
planned, or refused naming field, value and fix. Their templates: tests/stacks/test_cluster_stack.py (tests.builders
OPTIONS) and tests/stacks/test_addons.py (Pod Identity associations)."""

from __future__ import annotations

import pytest

from efa_stack.planning.plan import plan_from_text
from efa_stack.spec.errors import SpecError
from tests.builders import BASE, OPTIONS

SUBNET_A, SUBNET_B = "subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"
PRIVATE = {"us-west-2a": {"id": SUBNET_A}, "b-side": {"id": SUBNET_B, "az": "us-west-2b"}}
VPC = {"id": "vpc-0123456789abcdef0", "subnets": {"private": PRIVATE}}
EXISTING = BASE.replace(zones=None).with_(vpc=VPC)
"""BASE in the existing VPC of :data:`VPC`, its zones from the subnets."""
LOGGING = {"clusterLogging": {"enableTypes": ["api", "audit"], "logRetentionInDays": 30}}


def test_existing_vpc_plans_zones_from_subnets():
    plan = EXISTING.plan()
    assert plan.existing_vpc is not None
    assert plan.availability_zones == ("us-west-2a", "us-west-2b")
    assert plan.existing_vpc.private_subnets == ((SUBNET_A, "us-west-2a"), (SUBNET_B, "us-west-2b"))


def test_node_group_subnets_name_the_existing_subnet():
    (group,) = EXISTING.with_group(availabilityZones=None, subnets=["b-side"]).plan().node_groups
    assert group.subnet_ids == (SUBNET_B,)
    assert group.availability_zones == ("us-west-2b",)


@pytest.mark.parametrize(("vpc", "field", "value", "fix"), [
    ({"id": "vpc-0123456789abcdef0"}, "vpc.subnets", None, "vpc.subnets.private"),
    ({**VPC, "subnets": {"private": {"a-side": {"id": SUBNET_A}, "b-side": PRIVATE["b-side"]}}},
     "vpc.subnets.private.a-side.az", None, "add az: <zone>"),
    ({**VPC, "subnets": {"private": {**PRIVATE, "b-side": {"id": SUBNET_B, "az": "us-west-2a"}}}},
     "vpc.subnets.private", ["us-west-2a"], "two or more zones"),
])
def test_fails_existing_vpc_that_cannot_be_used(vpc, field, value, fix):
    problems = BASE.replace(zones=None).with_(vpc=vpc).problems()
    p = next(p for p in problems if p.field == field)
    assert p.value == value
    assert fix in p.fix


def test_fails_efa_group_in_zone_without_existing_private_subnet():
    p = EXISTING.with_group(availabilityZones=["us-west-2c"]).one_problem()
    assert (p.field, p.value) == ("managedNodeGroups[0].availabilityZones", "us-west-2c")
    assert "no private subnet of vpc.subnets" in p.message
    assert "add a private subnet of us-west-2c" in p.fix


def test_fails_node_group_subnets_without_existing_vpc():
    p = BASE.with_group(subnets=[SUBNET_A]).one_problem()
    assert p.field == "managedNodeGroups[0].subnets"
    assert "use availabilityZones" in p.fix


def test_fails_placeholder_vpc_with_every_other_problem():
    # a published config's placeholders, and its other problems, in one run
    text = EXISTING.replace(version="1.27").with_(vpc={"id": "PLACEHOLDER_VPC_ID"}).text
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
    public = "subnet-0bbbbbbbbbbbbbbb1"
    spec = EXISTING.with_(vpc={"subnets": {"public": {"us-west-2a": {"id": public}}}})
    p = spec.with_group(availabilityZones=None, subnets=[public]).one_problem()
    assert (p.field, p.value) == ("managedNodeGroups[0].subnets", public)
    assert "public subnet" in p.message and "vpc.subnets.private" in p.fix


def test_control_plane_logging_as_eksctl_says():
    plan = BASE.with_(cloudWatch=LOGGING).plan()
    assert (plan.log_types, plan.log_retention_days) == (("api", "audit"), 30)
    assert BASE.with_(cloudWatch={"clusterLogging": {"enableTypes": ["*"]}}).plan().log_types == (
        "api", "audit", "authenticator", "controllerManager", "scheduler")
    assert BASE.plan().log_types[-1] == "scheduler"  # without the section: every type, as before


@pytest.mark.parametrize(("logging", "field", "value", "fix"), [
    ({"enableTypes": ["adit"]}, "cloudWatch.clusterLogging.enableTypes[0]", "adit", "did you mean audit?"),
    ({"enableTypes": ["api"], "logRetentionInDays": 10}, "cloudWatch.clusterLogging.logRetentionInDays", 10,
     "use one of 1, 3"),
    ({"logRetentionInDays": 30}, "cloudWatch.clusterLogging.logRetentionInDays", 30, "add enableTypes"),
])
def test_fails_control_plane_logging(logging, field, value, fix):
    p = BASE.with_(cloudWatch={"clusterLogging": logging}).one_problem()
    assert (p.field, p.value) == (field, value)
    assert fix in p.fix


def test_fails_no_api_endpoint():
    p = BASE.with_(vpc={"clusterEndpoints": {"publicAccess": False, "privateAccess": False}}).one_problem()
    assert p.field == "vpc.clusterEndpoints"


def test_fails_cidrs_without_public_endpoint():
    p = BASE.with_(vpc={"clusterEndpoints": {"publicAccess": False}, "publicAccessCIDRs": ["203.0.113.0/24"]}).one_problem()
    assert p.field == "vpc.publicAccessCIDRs"


def test_control_plane_tier_is_planned_and_summarized():
    plan = OPTIONS.plan()
    assert plan.control_plane_tier == "tier-2xl"
    assert "control plane tier-2xl" in plan.summary()


def test_fails_unknown_control_plane_tier():
    p = BASE.with_(controlPlaneScalingConfig={"tier": "tier-16xl"}).one_problem()
    assert p.field == "controlPlaneScalingConfig.tier" and "tier-xl" in p.fix


def test_fails_node_access_entry_with_groups():
    p = BASE.with_(accessConfig={"accessEntries": [{
        "principalARN": "arn:aws:iam::111122223333:role/nodes", "type": "EC2_LINUX", "kubernetesGroups": ["admins"],
    }]}).one_problem()
    assert (p.field, p.value) == ("accessConfig.accessEntries[0].kubernetesGroups", ["admins"])
    assert "type: STANDARD" in p.fix


def test_fails_config_map_authentication():
    p = BASE.with_(accessConfig={"authenticationMode": "CONFIG_MAP"}).one_problem()
    assert (p.field, p.value) == ("accessConfig.authenticationMode", "CONFIG_MAP")
    assert "API_AND_CONFIG_MAP" in p.fix


def pod_identity(**entry) -> object:
    return BASE.with_(iam={"podIdentityAssociations": [{"namespace": "a", "serviceAccountName": "b", **entry}]})


@pytest.mark.parametrize(("entry", "field", "fix"), [
    ({}, "iam.podIdentityAssociations[0].roleARN", "set roleARN"),
    ({"roleARN": "arn:aws:iam::111122223333:role/r", "permissionPolicyARNs": ["arn:aws:iam::aws:policy/X"]},
     "iam.podIdentityAssociations[0].permissionPolicyARNs", "remove permissionPolicyARNs or roleARN"),
])
def test_fails_pod_identity_association_without_one_role(entry, field, fix):
    p = pod_identity(**entry).one_problem()
    assert p.field == field and fix in p.fix


def test_fails_pod_identity_association_create_service_account_says_what_to_do():
    (p,) = pod_identity(roleARN="arn:aws:iam::111122223333:role/r", createServiceAccount=True).problems()
    assert p.field == "iam.podIdentityAssociations[0].createServiceAccount"
    assert "your workload's manifests" in p.fix


def test_self_managed_node_groups_are_judged_as_managed_ones_in_the_same_run():
    # the fix for nodeGroups is "move each entry to managedNodeGroups": the entries' own problems come now
    text = BASE.with_(nodeGroups=[{
        "name": "old", "instanceType": "p5.48xlarge", "efaEnabled": True, "availabilityZones": ["us-west-2a"],
        "capacityReservation": {"capacityReservationTarget": {"capacityReservationID": "cr-xxxxxxxxxxxx"}},
        "classicLoadBalancerNames": ["lb"],
    }]).text
    with pytest.raises(SpecError) as info:
        plan_from_text(text)
    got = [(p.field, p.message) for p in info.value.problems]
    assert got[0] == ("nodeGroups", "an eksctl field that efa-stack does not support")
    assert ("nodeGroups[0].classicLoadBalancerNames", "once moved to managedNodeGroups: unknown field") in got
    assert ("nodeGroups[0].capacityReservation.capacityReservationTarget.capacityReservationID",
            "once moved to managedNodeGroups: a placeholder left in the file") in got
