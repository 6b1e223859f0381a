"""eksctl node group fields read with eksctl's meaning (efa_stack/planning/node_extras.py): iam, instancePrefix
and instanceName, ssh, overrideBootstrapCommand, preBootstrapCommands, amiFamily, sizes, instance types; planned, or
refused naming the field, the value and the fix. The CloudFormation eksctl would write for them:
tests/stacks/test_node_groups.py (and a custom AMI's cluster details: tests/stacks/test_cluster_stack.py)."""

from __future__ import annotations

import pytest

from tests.builders import BASE, node_group

ROLE = "arn:aws:iam::111122223333:role/existing-node-role"
KUBELET_NONE = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: {kubelet: {config: {cpuManagerPolicy: none}}}\n"


@pytest.mark.parametrize(("fields", "field", "value", "fix"), [
    ({"ssh": {"allow": True}}, "managedNodeGroups[0].ssh.allow", True, "add publicKeyName"),
    ({"ssh": {"enableSsm": False}}, "managedNodeGroups[0].ssh.enableSsm", False, "remove enableSsm"),
    ({"amiFamily": "AmazonLinux2"}, "managedNodeGroups[0].amiFamily", "AmazonLinux2", "set amiFamily: AmazonLinux2023"),
    ({"iam": {"withAddonPolicies": {"externalDNS": True}}}, "managedNodeGroups[0].iam.withAddonPolicies.externalDNS",
     True, "EKS Pod Identity"),
    ({"iam": {"instanceRoleARN": ROLE, "withAddonPolicies": {"ebs": True}}},
     "managedNodeGroups[0].iam.instanceRoleARN", ROLE, "attach those policies to the role yourself"),
    ({"instanceMarketOptions": {"marketType": "capacity-block"}}, "managedNodeGroups[0].instanceMarketOptions",
     {"marketType": "capacity-block"}, "add capacityReservation"),
    ({"overrideBootstrapCommand": "#!/bin/bash\n/etc/eks/bootstrap.sh c\n"},
     "managedNodeGroups[0].overrideBootstrapCommand", "#!/bin/bash\n/etc/eks/bootstrap.sh c\n",
     "move shell commands to preBootstrapCommands"),
    ({"overrideBootstrapCommand": "kind: Pod"}, "managedNodeGroups[0].overrideBootstrapCommand", "kind: Pod",
     "kind: NodeConfig"),
])
def test_fails_eksctl_node_group_field(fields, field, value, fix):
    p = BASE.with_group(**fields).one_problem()
    assert (p.field, p.value) == (field, value)
    assert fix in p.fix


def test_fails_node_config_that_contradicts_efa_stack_kubelet_settings():
    # GPU node groups get cpuManagerPolicy: static (docs/design/node-tuning.md); the user's NodeConfig says none
    p = BASE.with_group(overrideBootstrapCommand=KUBELET_NONE).one_problem()
    assert p.field == "managedNodeGroups[0].overrideBootstrapCommand.spec.kubelet.config.cpuManagerPolicy"
    assert p.value == "none"
    assert "managedNodeGroups[0].kubeletExtraConfig.cpuManagerPolicy" in p.message
    assert "set cpuManagerPolicy in kubeletExtraConfig only" in p.fix


def test_node_config_that_agrees_with_kubelet_extra_config_plans():
    spec = BASE.with_group(kubeletExtraConfig={"cpuManagerPolicy": "none"}, overrideBootstrapCommand=KUBELET_NONE)
    (group,) = spec.plan().node_groups
    assert group.node_config is not None and "cpuManagerPolicy: none" in group.node_config


def test_fails_bad_attach_policy_arn():
    (p,) = BASE.with_group(iam={"attachPolicyARNs": ["AmazonS3ReadOnlyAccess"]}).problems()
    assert p.field == "managedNodeGroups[0].iam.attachPolicyARNs"
    assert "'AmazonS3ReadOnlyAccess' is not an IAM policy ARN" in p.message
    assert "arn:aws:iam::aws:policy/NAME" in p.fix


def test_instance_prefix_alone_names_instances_as_eksctl():
    (group,) = BASE.with_group(instancePrefix="p5").plan().node_groups
    assert group.instance_name == "p5-t-gpu-Node"  # eksctl generateNodeName: <prefix>-<cluster>-<group>-Node


def repair_override(action: str, **repair: object) -> dict:
    return {**repair, "nodeRepairConfigOverrides": [{
        "nodeMonitoringCondition": "A", "nodeUnhealthyReason": "B", "minRepairWaitTimeMins": 5, "repairAction": action}]}


def test_fails_node_repair_overrides_with_repair_off():
    p = BASE.with_group(nodeRepairConfig=repair_override("Reboot", enabled=False)).one_problem()
    assert p.field == "managedNodeGroups[0].nodeRepairConfig.nodeRepairConfigOverrides"
    assert "enabled: true" in p.fix


def test_fails_node_repair_override_action_not_eks():
    (p,) = BASE.with_group(nodeRepairConfig=repair_override("Restart")).problems()
    assert p.field == "managedNodeGroups[0].nodeRepairConfig.nodeRepairConfigOverrides[0].repairAction"
    assert p.value == "Restart" and "'Replace', 'Reboot' or 'NoAction'" in p.fix


@pytest.mark.parametrize(("sizes", "expected"), [
    ({"desiredCapacity": 3}, (3, 3, 3)),  # eksctl validation.go: minSize and maxSize follow desiredCapacity
    ({}, (2, 2, 2)),  # neither: DefaultNodeCount
    ({"desiredCapacity": 0}, (0, 0, 1)),  # maxSize at least 1
])
def test_sizes_default_as_eksctl(sizes, expected):
    spec = BASE.with_group(minSize=None, desiredCapacity=None, maxSize=None).with_group(**sizes)
    (group,) = spec.plan().node_groups
    assert (group.min_size, group.desired_size, group.max_size) == expected


@pytest.mark.parametrize(("fields", "field", "fix"), [
    ({"instanceType": None, "instanceTypes": ["p5.48xlarge", "p5e.48xlarge"]}, "managedNodeGroups[0].instanceTypes",
     "use instanceType: p5.48xlarge"),
    ({"spot": True}, "managedNodeGroups[0].spot", "remove spot"),
])
def test_fails_efa_group_with_several_types_or_spot(fields, field, fix):
    p = BASE.with_group(**fields).one_problem()
    assert p.field == field and fix in p.fix


def test_fails_instance_types_of_different_kinds():
    p = BASE.add(node_group("mixed", None, min_size=None, zones=None, efa=None,
                            instanceTypes=["m5.xlarge", "g5.xlarge"])).one_problem()
    assert (p.field, p.value) == ("managedNodeGroups[1].instanceTypes", ["m5.xlarge", "g5.xlarge"])
    assert "of one kind" in p.fix


def test_instance_type_defaults_to_eksctl_default():
    (_, group) = BASE.add(node_group("plain", None, zones=None, efa=None)).plan().node_groups
    assert group.instance_type == "m5.large"


def test_fails_custom_ami_without_its_family():
    p = BASE.with_group(ami="ami-0123456789abcdef0").one_problem()
    assert (p.field, p.value) == ("managedNodeGroups[0].ami", "ami-0123456789abcdef0")
    assert "add amiFamily: AmazonLinux2023" in p.fix


@pytest.mark.parametrize(("ssh", "key"), [
    ({"publicKeyName": "k"}, "k"),  # eksctl defaults.go setSSHDefaults: a named key turns SSH on
    # eksctl-io/eksctl@v0.230.0 pkg/cfn/builder/managed_launch_template.go makeLaunchTemplateData: KeyName whenever
    # publicKeyName is set; allow only decides whether eksctl opens port 22 (its SSH security group)
    ({"allow": False, "publicKeyName": "k"}, "k"),
    ({"allow": True, "publicKeyName": "k"}, "k"),
    ({"allow": False}, None),
    ({"enableSsm": True}, None),
])
def test_ssh_key_as_eksctl_reads_it(ssh, key):
    (group,) = BASE.with_group(ssh=ssh).plan().node_groups
    assert group.key_name == key


def test_fails_instance_name_tag_too_long():
    p = BASE.with_group(instancePrefix="p" * 64, instanceName="n" * 200).one_problem()
    assert p.field == "managedNodeGroups[0].instancePrefix"
    assert len(p.value) == 265 and "256" in p.message
    assert "shorten instancePrefix or instanceName" in p.fix


def test_fails_empty_pre_bootstrap_command():
    p = BASE.with_group(preBootstrapCommands=["echo ok", " "]).one_problem()
    assert (p.field, p.value) == ("managedNodeGroups[0].preBootstrapCommands[1]", " ")
    assert "remove the empty entry" in p.fix
