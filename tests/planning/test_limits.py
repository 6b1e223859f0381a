"""AWS limits known before CloudFormation (efa_stack/planning/limits.py): EKS's node group quota, CloudFormation's
resources per stack, and the subnets a VPC CIDR can hold."""

from __future__ import annotations

from efa_stack.planning.limits import CFN_MAX_RESOURCES, count_cluster_resources, subnet_plan, validate_quotas
from efa_stack.spec.models import MAX_USER_NODE_GROUPS
from tests.builders import BASE, cluster, node_group


def many_groups(n: int):
    return BASE.replace(groups=tuple(node_group(f"g{i}", min_size=None) for i in range(n)))


def test_fails_too_many_resources_for_one_stack_with_the_count_and_the_limit():
    """180 EFA node groups (a quota raised far above EKS's default): 3 resources each; CloudFormation
    allows 500 per stack (AWS CloudFormation User Guide, "Understand CloudFormation quotas")."""
    count = count_cluster_resources([False] + [True] * 180)
    (cfn,) = validate_quotas([f"g{i}" for i in range(181)], count, [2])
    assert cfn.field == "managedNodeGroups" and str(count) in cfn.message and str(CFN_MAX_RESOURCES) in cfn.message


def test_every_accepted_spec_fits_one_cluster_stack():
    """Class check: the most node groups a spec may hold, each with a new placement group, stay under
    CloudFormation's 500 resources per stack, so the limit cannot be reached through the spec."""
    assert count_cluster_resources([False] + [True] * MAX_USER_NODE_GROUPS) <= CFN_MAX_RESOURCES


def test_fails_more_node_groups_than_the_eks_default_quota():
    (p,) = many_groups(30).problems()  # 30 + the system group
    assert p.field == "managedNodeGroups" and p.value == "30 node groups"
    assert "L-6D54EA21" in p.message and "30 managed node groups" in p.message


def test_fails_180_node_groups_before_any_cloudformation():
    (p,) = many_groups(180).problems()
    assert p.field == "managedNodeGroups" and p.value == "180 node groups"


def test_small_vpc_gets_smaller_subnets_not_a_traceback():
    plan = subnet_plan("10.0.0.0/18", 2)
    assert plan is not None and plan.private_mask == 20 and plan.public_mask == 24


def test_fails_private_subnet_too_small_for_the_nodes_interfaces():
    """GIVEN a /20 VPC over 6 zones (/23 private subnets) WHEN 40 p5 nodes with the legacy layout (32
    `efa` interfaces, each with an address) land in one zone THEN vpc.cidr is reported with the count."""
    zones = tuple(f"us-east-1{z}" for z in "abcdef")
    spec = cluster(node_group(max_size=40, zones=zones[:1], interfaceLayout="legacy"), region="us-east-1", zones=zones)
    (problem,) = [p for p in spec.with_(vpc={"cidr": "10.0.0.0/20"}).problems() if p.field == "vpc.cidr"]
    assert "us-east-1a" in problem.message and "maxSize" in problem.message
