"""stacks/node_groups.py: a node group's plan as :class:`aws_constructs.node_group.ManagedNodeGroup` props
(:func:`node_group_props`) and its node role (:func:`node_role_of`), built from the plan of a spec, one construct per
node group in one App and one Stack (tests.support.StackFixture): the spec's fields reach the CloudFormation
eksctl would write without a whole synth. eksctl-io/eksctl@v0.230.0 pkg/cfn/builder/managed_nodegroup.go and
managed_launch_template.go are the reference."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from aws_cdk.assertions import Match

from tests.builders import BASE, cpu_group, node_group
from tests.support import NodeGroupsAlone

POLICY = "arn:aws:iam::111122223333:policy/training-data"
ROLE = "arn:aws:iam::111122223333:role/existing-node-role"
RESERVATION = {"type": "reservation", "reservationId": "cr-0123456789abcdef0"}
NODE_CONFIG = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  instance:\n    localStorage:\n" \
    "      strategy: RAID0\n"
OVERRIDE = {"nodeMonitoringCondition": "AcceleratedHardwareReady", "nodeUnhealthyReason": "NvidiaXID79Error",
            "minRepairWaitTimeMins": 5, "repairAction": "Replace"}
EKSCTL = BASE.with_group(
    instancePrefix="p5", instanceName="trainer", ssh={"allow": True, "publicKeyName": "ops-key", "enableSsm": True},
    preBootstrapCommands=["echo hello > /tmp/pre"], amiFamily="AmazonLinux2023",
    iam={"instanceRoleName": "p5-nodes", "attachPolicyARNs": [POLICY],
         "withAddonPolicies": {"imageBuilder": True, "efs": True, "xRay": True}},
    nodeRepairConfig={"nodeRepairConfigOverrides": [OVERRIDE]}, overrideBootstrapCommand=NODE_CONFIG,
).add(cpu_group(iam={"instanceRoleARN": ROLE}))
"""eksctl's node group fields on the GPU group (efa_stack/planning/node_extras.py) and an existing role on a CPU one."""
REPAIR = BASE.add(cpu_group(nodeRepairConfig={
    "enabled": True, "maxUnhealthyNodeThresholdPercentage": 20, "maxParallelNodesRepairedCount": 1}))

GROUPS: dict[str, tuple[Any, str]] = {
    # construct id -> (spec, node group of its plan)
    "Trn": (BASE.with_group(instanceType="trn2.48xlarge"), "gpu"),
    "Arm": (BASE.with_group(instanceType="g5g.16xlarge", efaEnabled=False), "gpu"),
    "Legacy": (BASE.with_group(interfaceLayout="legacy"), "gpu"),
    "Named": (BASE.with_group(placementGroup="pg-reserved", volumeType="io2", volumeIOPS=4000, capacity=RESERVATION),
              "gpu"),
    "Eksctl": (EKSCTL, "gpu"),
    "ExistingRole": (EKSCTL, "cpu"),
    "Spot": (BASE.add(node_group("spot", None, min_size=0, max_size=4, zones=None, efa=None,
                                 instanceTypes=["m5.xlarge", "m6i.xlarge"], spot=True)), "spot"),
    "Reserved": (BASE.with_group(capacityReservation={
        "capacityReservationTarget": {"capacityReservationID": "cr-0123456789abcdef0"}}), "gpu"),
    "Updated": (BASE.with_group(updateConfig={"maxUnavailable": 2}).add(cpu_group()), "gpu"),
    "NotUpdated": (BASE.with_group(updateConfig={"maxUnavailable": 2}).add(cpu_group()), "cpu"),
    "RepairGpu": (REPAIR, "gpu"),
    "RepairCpu": (REPAIR, "cpu"),
    "RepairSystem": (REPAIR, "system"),
}


@pytest.fixture(scope="module")
def groups() -> NodeGroupsAlone:
    """Every node group of :data:`GROUPS` as its stack builds it, in one fixture stack."""
    return NodeGroupsAlone.build({key: (spec.plan(), name) for key, (spec, name) in GROUPS.items()})


def nodegroup(groups: NodeGroupsAlone, key: str) -> dict:
    return groups.nodegroup(key)


def launch_template(groups: NodeGroupsAlone, key: str) -> dict:
    return groups.launch_data(key)


def test_neuron_node_group_uses_neuron_ami_and_taint(groups):
    ng = nodegroup(groups, "Trn")
    assert ng["AmiType"] == "AL2023_x86_64_NEURON"
    assert ng["Taints"] == [{"Effect": "NO_SCHEDULE", "Key": "aws.amazon.com/neuron", "Value": "true"}]
    nics = launch_template(groups, "Trn")["NetworkInterfaces"]
    assert len([n for n in nics if n["InterfaceType"] == "efa-only"]) == 16


def test_arm_gpu_node_group_uses_arm_nvidia_ami(groups):
    assert nodegroup(groups, "Arm")["AmiType"] == "AL2023_ARM_64_NVIDIA"


def test_legacy_layout_renders_efa_interfaces(groups):
    nics = launch_template(groups, "Legacy")["NetworkInterfaces"]
    assert {n["InterfaceType"] for n in nics} == {"efa"}
    assert [n["DeviceIndex"] for n in nics[:2]] == [0, 1]


def test_named_placement_group_is_referenced_not_created(groups):
    assert groups.groups["Named"].placement_group is None
    data = launch_template(groups, "Named")
    assert data["Placement"] == {"GroupName": "pg-reserved"}
    assert data["BlockDeviceMappings"][0]["Ebs"]["Iops"] == 4000


def test_instance_name_and_key_pair_in_launch_template(groups):
    data = launch_template(groups, "Eksctl")
    assert data["InstanceType"] == "p5.48xlarge" and data["KeyName"] == "ops-key"
    (instance,) = [t for t in data["TagSpecifications"] if t["ResourceType"] == "instance"]
    assert {"Key": "Name", "Value": "p5-trainer"} in instance["Tags"]


def test_user_data_merges_node_config_and_commands(groups):
    data = launch_template(groups, "Eksctl")["UserData"]["Fn::Base64"]
    text = data if isinstance(data, str) else base64.b64decode(data).decode()
    parts = text.split("--==EFASTACK==")
    assert "vm.nr_hugepages" in parts[1]  # efa-stack's hugepages first
    assert "echo hello > /tmp/pre" in parts[2]  # then preBootstrapCommands
    assert "cpuManagerPolicy: static" in parts[3]  # efa-stack's NodeConfig
    assert "strategy: RAID0" in parts[4] and "kind: NodeConfig" in parts[4]  # the user's NodeConfig last


def test_node_group_iam_gives_its_own_role(groups):
    template = groups.fixture.assertions()
    template.has_resource_properties("AWS::IAM::Role", {
        "Description": Match.string_like_regexp("node group gpu"),
        "RoleName": "p5-nodes",
        "ManagedPolicyArns": Match.array_with([
            {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/AmazonEKSWorkerNodePolicy"]]},
            {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                               ":iam::aws:policy/AmazonEC2ContainerRegistryPowerUser"]]},
            POLICY,
        ]),
    })
    template.has_resource_properties("AWS::IAM::Policy", {
        "PolicyDocument": {"Statement": Match.array_with([
            Match.object_like({"Action": "elasticfilesystem:*", "Resource": "*"}),
            Match.object_like({"Action": Match.array_with(["xray:PutTraceSegments"]), "Resource": "*"}),
        ])},
    })


def test_instance_role_arn_is_the_node_role(groups):
    assert nodegroup(groups, "ExistingRole")["NodeRole"] == ROLE


def test_node_repair_overrides_in_node_group(groups):
    assert nodegroup(groups, "Eksctl")["NodeRepairConfig"] == {"Enabled": True, "NodeRepairConfigOverrides": [{
        "NodeMonitoringCondition": "AcceleratedHardwareReady", "NodeUnhealthyReason": "NvidiaXID79Error",
        "MinRepairWaitTimeMins": 5, "RepairAction": "Replace",
    }]}


def test_spot_with_several_instance_types(groups):
    ng = nodegroup(groups, "Spot")
    assert (ng["NodegroupName"], ng["CapacityType"], ng["InstanceTypes"]) == ("spot", "SPOT", ["m5.xlarge", "m6i.xlarge"])
    assert "InstanceType" not in launch_template(groups, "Spot")  # the node group lists the types


def test_capacity_reservation_in_launch_template(groups):
    data = launch_template(groups, "Reserved")
    assert data["InstanceType"] == "p5.48xlarge"
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"},
    }


def test_update_config_reaches_the_node_group(groups):
    assert nodegroup(groups, "Updated")["UpdateConfig"] == {"MaxUnavailable": 2}
    assert "UpdateConfig" not in nodegroup(groups, "NotUpdated")


def test_node_repair_config_on_the_node_groups(groups):
    assert nodegroup(groups, "RepairGpu")["NodeRepairConfig"] == {"Enabled": True}
    assert nodegroup(groups, "RepairCpu")["NodeRepairConfig"] == {
        "Enabled": True, "MaxUnhealthyNodeThresholdPercentage": 20, "MaxParallelNodesRepairedCount": 1,
    }
    assert "NodeRepairConfig" not in nodegroup(groups, "RepairSystem")
