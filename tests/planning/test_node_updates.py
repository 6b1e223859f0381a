"""eksctl ``updateConfig``: how many nodes of a managed node group EKS replaces at once in a version update.

eksctl-io/eksctl@v0.230.0 pkg/apis/eksctl.io/v1alpha5/types.go NodeGroupUpdateConfig (``maxUnavailable``,
``maxUnavailablePercentage``), validation.go (one of the two, ``maxUnavailable`` at most ``maxSize``),
pkg/cfn/builder/managed_nodegroup.go (CloudFormation ``AWS::EKS::Nodegroup UpdateConfig``); CloudFormation and the
EKS API (NodegroupUpdateConfig): both 1 to 100.
"""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Match, Template

from aws_constructs.launch_template import LaunchTemplateProps
from aws_constructs.node_group import ManagedNodeGroup, ManagedNodeGroupProps
from efa_stack.planning.node_extras import NodeUpdatePlan
from tests.support import BASE, cpu_group, one_problem, plan_of, synth_text


@pytest.mark.parametrize(("update", "planned"), [
    ("{maxUnavailable: 2}", NodeUpdatePlan(max_unavailable=2)),
    ("{maxUnavailable: 3}", NodeUpdatePlan(max_unavailable=3)),  # eksctl: at most maxSize (3)
    ("{maxUnavailablePercentage: 50}", NodeUpdatePlan(max_unavailable_percentage=50)),
])
def test_update_config_is_planned_as_eksctl_writes_it(update, planned):
    (group,) = plan_of(BASE + f"    updateConfig: {update}\n").node_groups
    assert group.update == planned


def test_without_update_config_eks_decides():
    # EKS User Guide, managed-node-update-behavior: one node at a time, new nodes launched before old ones go
    (group,) = plan_of(BASE).node_groups
    assert group.update == NodeUpdatePlan(None, None)


@pytest.mark.parametrize(("update", "field", "phrase"), [
    ("{maxUnavailable: 2, maxUnavailablePercentage: 50}", "updateConfig", "keep one"),
    ("{}", "updateConfig", "add maxUnavailable"),
    ("{maxUnavailable: 4}", "updateConfig.maxUnavailable", "3 or fewer"),
])
def test_fails_update_config_eksctl_refuses(update, field, phrase):
    p = one_problem(BASE + f"    updateConfig: {update}\n")
    assert p.field == f"managedNodeGroups[0].{field}"
    assert phrase in p.fix


@pytest.mark.parametrize("update", ["{maxUnavailable: 0}", "{maxUnavailablePercentage: 101}"])
def test_fails_update_config_out_of_eks_range(update):
    p = one_problem(BASE + f"    updateConfig: {update}\n")
    assert p.field.startswith("managedNodeGroups[0].updateConfig.maxUnavailable")


def test_node_group_construct_passes_update_config():
    # GIVEN a plain CDK app and a node group whose props say how many nodes an update takes down at once
    stack = Stack(App(builtin_cloud_formation_validation=False), "Mine")
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0abc", availability_zones=["us-west-2a"])
    cluster = eks.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="mine", vpc=vpc)
    subnet = ec2.Subnet.from_subnet_attributes(stack, "Subnet", subnet_id="subnet-0abc", availability_zone="us-west-2a")
    for name, percentage in (("Rolled", 25), ("Default", None)):
        ManagedNodeGroup(
            stack, name,
            ManagedNodeGroupProps(LaunchTemplateProps(instance_type="m7i.xlarge"), nodegroup_name=name, max_size=4,
                                  max_unavailable_percentage=percentage),
            cluster=cluster, subnets=[subnet], security_group_ids=["sg-0abc"],
        )
    # THEN the EKS node group carries it, and leaves it to EKS without it
    t = Template.from_stack(stack)
    t.has_resource_properties("AWS::EKS::Nodegroup", {
        "NodegroupName": "Rolled", "UpdateConfig": {"MaxUnavailablePercentage": 25},
    })
    t.has_resource_properties("AWS::EKS::Nodegroup", {"NodegroupName": "Default", "UpdateConfig": Match.absent()})


def test_update_config_reaches_the_template():
    s = synth_text(BASE + "    updateConfig: {maxUnavailable: 2}\n" + cpu_group("m7i.xlarge"))
    groups = {g["Properties"]["NodegroupName"]: g["Properties"]
              for g in s.resources("cluster", "AWS::EKS::Nodegroup").values()}
    assert groups["gpu"]["UpdateConfig"] == {"MaxUnavailable": 2}
    assert "UpdateConfig" not in groups["cpu"]
