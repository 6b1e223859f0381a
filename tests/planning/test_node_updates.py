"""eksctl ``updateConfig``: how many nodes of a managed node group EKS replaces at once in a version update.

eksctl-io/eksctl@v0.230.0 pkg/apis/eksctl.io/v1alpha5/types.go NodeGroupUpdateConfig (``maxUnavailable``,
``maxUnavailablePercentage``), validation.go (one of the two, ``maxUnavailable`` at most ``maxSize``),
pkg/cfn/builder/managed_nodegroup.go (CloudFormation ``AWS::EKS::Nodegroup UpdateConfig``); CloudFormation and the
EKS API (NodegroupUpdateConfig): both 1 to 100. The node group construct and its template:
tests/aws_constructs/test_node_group.py and tests/stacks/test_node_groups.py.
"""

from __future__ import annotations

import pytest

from efa_stack.planning.node_extras import NodeUpdatePlan
from tests.builders import BASE


@pytest.mark.parametrize(("update", "planned"), [
    ({"maxUnavailable": 2}, NodeUpdatePlan(max_unavailable=2)),
    ({"maxUnavailable": 3}, NodeUpdatePlan(max_unavailable=3)),  # eksctl: at most maxSize (3)
    ({"maxUnavailablePercentage": 50}, NodeUpdatePlan(max_unavailable_percentage=50)),
])
def test_update_config_is_planned_as_eksctl_writes_it(update, planned):
    (group,) = BASE.with_group(updateConfig=update).plan().node_groups
    assert group.update == planned


def test_without_update_config_eks_decides():
    # EKS User Guide, managed-node-update-behavior: one node at a time, new nodes launched before old ones go
    (group,) = BASE.plan().node_groups
    assert group.update == NodeUpdatePlan(None, None)


@pytest.mark.parametrize(("update", "field", "phrase"), [
    ({"maxUnavailable": 2, "maxUnavailablePercentage": 50}, "updateConfig", "keep one"),
    ({}, "updateConfig", "add maxUnavailable"),
    ({"maxUnavailable": 4}, "updateConfig.maxUnavailable", "3 or fewer"),
])
def test_fails_update_config_eksctl_refuses(update, field, phrase):
    p = BASE.with_group(updateConfig=update).one_problem()
    assert p.field == f"managedNodeGroups[0].{field}"
    assert phrase in p.fix


@pytest.mark.parametrize("update", [{"maxUnavailable": 0}, {"maxUnavailablePercentage": 101}])
def test_fails_update_config_out_of_eks_range(update):
    p = BASE.with_group(updateConfig=update).one_problem()
    assert p.field.startswith("managedNodeGroups[0].updateConfig.maxUnavailable")
