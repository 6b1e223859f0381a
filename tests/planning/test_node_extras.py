"""eksctl node group fields read with eksctl's meaning (efa_stack/planning/node_extras.py): iam, instancePrefix
and instanceName, ssh, overrideBootstrapCommand, preBootstrapCommands, amiFamily; each synthesizes into the
CloudFormation eksctl would write, and a bad value is refused naming the field, the value and the fix."""

from __future__ import annotations

import base64

import pytest
from aws_cdk.assertions import Match, Template

from tests.support import BASE, cpu_group, one_problem, plan_of, problems_of, synth_text

NODE_CONFIG = (
    "    overrideBootstrapCommand: |\n"
    "      apiVersion: node.eks.aws/v1alpha1\n"
    "      kind: NodeConfig\n"
    "      spec:\n"
    "        instance:\n"
    "          localStorage:\n"
    "            strategy: RAID0\n"
)
POLICY = "arn:aws:iam::111122223333:policy/training-data"
ROLE = "arn:aws:iam::111122223333:role/existing-node-role"
EKSCTL_GPU = BASE + (
    "    instancePrefix: p5\n"
    "    instanceName: trainer\n"
    "    ssh: {allow: true, publicKeyName: ops-key, enableSsm: true}\n"
    "    preBootstrapCommands: [\"echo hello > /tmp/pre\"]\n"
    "    amiFamily: AmazonLinux2023\n"
    "    iam:\n"
    "      instanceRoleName: p5-nodes\n"
    f"      attachPolicyARNs: [{POLICY}]\n"
    "      withAddonPolicies: {imageBuilder: true, efs: true, xRay: true}\n"
    + "    nodeRepairConfig:\n      nodeRepairConfigOverrides:\n"
    "        - {nodeMonitoringCondition: AcceleratedHardwareReady, nodeUnhealthyReason: NvidiaXID79Error,\n"
    "           minRepairWaitTimeMins: 5, repairAction: Replace}\n"
    + NODE_CONFIG
    + cpu_group("m7i.xlarge")
    + f"    iam: {{instanceRoleARN: {ROLE}}}\n"
)


@pytest.fixture(scope="module")
def synthesized():
    return synth_text(EKSCTL_GPU)


def _gpu_launch_template(s) -> dict:
    (lt,) = [v["Properties"]["LaunchTemplateData"] for v in s.resources("cluster", "AWS::EC2::LaunchTemplate").values()
             if v["Properties"]["LaunchTemplateData"]["InstanceType"] == "p5.48xlarge"]
    return lt


def test_instance_name_and_key_pair_in_launch_template(synthesized):
    template = Template.from_json(synthesized.template("cluster"))
    template.has_resource_properties("AWS::EC2::LaunchTemplate", {
        "LaunchTemplateData": Match.object_like({
            "InstanceType": "p5.48xlarge",
            "KeyName": "ops-key",
            "TagSpecifications": Match.array_with([Match.object_like({
                "ResourceType": "instance", "Tags": Match.array_with([{"Key": "Name", "Value": "p5-trainer"}]),
            })]),
        }),
    })


def test_user_data_merges_node_config_and_commands(synthesized):
    data = _gpu_launch_template(synthesized)["UserData"]["Fn::Base64"]
    text = data if isinstance(data, str) else base64.b64decode(data).decode()
    parts = text.split("--==EFASTACK==")
    assert "vm.nr_hugepages" in parts[1]  # efa-stack's hugepages first
    assert "echo hello > /tmp/pre" in parts[2]  # then preBootstrapCommands
    assert "cpuManagerPolicy: static" in parts[3]  # efa-stack's NodeConfig
    assert "strategy: RAID0" in parts[4] and "kind: NodeConfig" in parts[4]  # the user's NodeConfig last


def test_node_group_iam_gives_its_own_role(synthesized):
    template = Template.from_json(synthesized.template("cluster"))
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


def test_instance_role_arn_is_the_node_role(synthesized):
    template = Template.from_json(synthesized.template("cluster"))
    template.has_resource_properties("AWS::EKS::Nodegroup", {
        "NodegroupName": Match.string_like_regexp("cpu"),
        "NodeRole": ROLE,
    })


@pytest.mark.parametrize(("field_text", "field", "value", "fix"), [
    ("    ssh: {allow: true}\n", "managedNodeGroups[0].ssh.allow", True, "add publicKeyName"),
    ("    ssh: {enableSsm: false}\n", "managedNodeGroups[0].ssh.enableSsm", False, "remove enableSsm"),
    ("    amiFamily: AmazonLinux2\n", "managedNodeGroups[0].amiFamily", "AmazonLinux2", "set amiFamily: AmazonLinux2023"),
    ("    iam: {withAddonPolicies: {externalDNS: true}}\n", "managedNodeGroups[0].iam.withAddonPolicies.externalDNS",
     True, "EKS Pod Identity"),
    (f"    iam: {{instanceRoleARN: {ROLE}, withAddonPolicies: {{ebs: true}}}}\n",
     "managedNodeGroups[0].iam.instanceRoleARN", ROLE, "attach those policies to the role yourself"),
    ("    instanceMarketOptions: {marketType: capacity-block}\n", "managedNodeGroups[0].instanceMarketOptions",
     {"marketType": "capacity-block"}, "add capacityReservation"),
    ("    overrideBootstrapCommand: |\n      #!/bin/bash\n      /etc/eks/bootstrap.sh c\n",
     "managedNodeGroups[0].overrideBootstrapCommand", "#!/bin/bash\n/etc/eks/bootstrap.sh c\n",
     "move shell commands to preBootstrapCommands"),
    ("    overrideBootstrapCommand: 'kind: Pod'\n", "managedNodeGroups[0].overrideBootstrapCommand", "kind: Pod",
     "kind: NodeConfig"),
])
def test_fails_eksctl_node_group_field(field_text, field, value, fix):
    p = one_problem(BASE + field_text)
    assert (p.field, p.value) == (field, value)
    assert fix in p.fix


def test_fails_node_config_that_contradicts_efa_stack_kubelet_settings():
    # GPU node groups get cpuManagerPolicy: static (docs/design/node-tuning.md); the user's NodeConfig says none
    text = BASE + (
        "    overrideBootstrapCommand: |\n      apiVersion: node.eks.aws/v1alpha1\n      kind: NodeConfig\n"
        "      spec: {kubelet: {config: {cpuManagerPolicy: none}}}\n"
    )
    p = one_problem(text)
    assert p.field == "managedNodeGroups[0].overrideBootstrapCommand.spec.kubelet.config.cpuManagerPolicy"
    assert p.value == "none"
    assert "managedNodeGroups[0].kubeletExtraConfig.cpuManagerPolicy" in p.message
    assert "set cpuManagerPolicy in kubeletExtraConfig only" in p.fix


def test_node_config_that_agrees_with_kubelet_extra_config_plans():
    text = BASE + (
        "    kubeletExtraConfig: {cpuManagerPolicy: none}\n"
        "    overrideBootstrapCommand: |\n      apiVersion: node.eks.aws/v1alpha1\n      kind: NodeConfig\n"
        "      spec: {kubelet: {config: {cpuManagerPolicy: none}}}\n"
    )
    (group,) = plan_of(text).node_groups
    assert group.node_config is not None and "cpuManagerPolicy: none" in group.node_config


def test_fails_bad_attach_policy_arn():
    (p,) = problems_of(BASE + "    iam: {attachPolicyARNs: [AmazonS3ReadOnlyAccess]}\n")
    assert p.field == "managedNodeGroups[0].iam.attachPolicyARNs"
    assert "'AmazonS3ReadOnlyAccess' is not an IAM policy ARN" in p.message
    assert "arn:aws:iam::aws:policy/NAME" in p.fix


def test_instance_prefix_alone_names_instances_as_eksctl():
    (group,) = plan_of(BASE + "    instancePrefix: p5\n").node_groups
    assert group.instance_name == "p5-t-gpu-Node"  # eksctl generateNodeName: <prefix>-<cluster>-<group>-Node


def test_node_repair_overrides_in_node_group(synthesized):
    template = Template.from_json(synthesized.template("cluster"))
    template.has_resource_properties("AWS::EKS::Nodegroup", {
        "NodeRepairConfig": Match.object_like({
            "Enabled": True,
            "NodeRepairConfigOverrides": [{
                "NodeMonitoringCondition": "AcceleratedHardwareReady", "NodeUnhealthyReason": "NvidiaXID79Error",
                "MinRepairWaitTimeMins": 5, "RepairAction": "Replace",
            }],
        }),
    })


def test_fails_node_repair_overrides_with_repair_off():
    text = BASE + (
        "    nodeRepairConfig:\n      enabled: false\n      nodeRepairConfigOverrides:\n"
        "        - {nodeMonitoringCondition: A, nodeUnhealthyReason: B, minRepairWaitTimeMins: 5, repairAction: Reboot}\n"
    )
    p = one_problem(text)
    assert p.field == "managedNodeGroups[0].nodeRepairConfig.nodeRepairConfigOverrides"
    assert "enabled: true" in p.fix


def test_fails_node_repair_override_action_not_eks():
    text = BASE + (
        "    nodeRepairConfig:\n      nodeRepairConfigOverrides:\n"
        "        - {nodeMonitoringCondition: A, nodeUnhealthyReason: B, minRepairWaitTimeMins: 5, repairAction: Restart}\n"
    )
    (p,) = problems_of(text)
    assert p.field == "managedNodeGroups[0].nodeRepairConfig.nodeRepairConfigOverrides[0].repairAction"
    assert p.value == "Restart" and "'Replace', 'Reboot' or 'NoAction'" in p.fix


@pytest.mark.parametrize(("sizes", "expected"), [
    ("    desiredCapacity: 3\n", (3, 3, 3)),  # eksctl validation.go: minSize and maxSize follow desiredCapacity
    ("", (2, 2, 2)),  # neither: DefaultNodeCount
    ("    desiredCapacity: 0\n", (0, 0, 1)),  # maxSize at least 1
])
def test_sizes_default_as_eksctl(sizes, expected):
    text = BASE.replace("    minSize: 1\n", "").replace("    desiredCapacity: 2\n", "").replace("    maxSize: 3\n", "")
    (group,) = plan_of(text + sizes).node_groups
    assert (group.min_size, group.desired_size, group.max_size) == expected


SPOT_CPU = "\n  - name: spot\n    instanceTypes: [m5.xlarge, m6i.xlarge]\n    spot: true\n    minSize: 0\n    maxSize: 4\n"


def test_spot_with_several_instance_types_synthesizes():
    s = synth_text(BASE + SPOT_CPU)
    template = Template.from_json(s.template("cluster"))
    template.has_resource_properties("AWS::EKS::Nodegroup", {
        "NodegroupName": Match.string_like_regexp("spot"),
        "CapacityType": "SPOT",
        "InstanceTypes": ["m5.xlarge", "m6i.xlarge"],
    })
    types = [v["Properties"]["LaunchTemplateData"].get("InstanceType")
             for v in s.resources("cluster", "AWS::EC2::LaunchTemplate").values()]
    assert None in types  # the spot group's template names no type (the node group lists them)


@pytest.mark.parametrize(("group", "field", "fix"), [
    ("    instanceTypes: [p5.48xlarge, p5e.48xlarge]\n", "managedNodeGroups[0].instanceTypes",
     "use instanceType: p5.48xlarge"),
    ("    spot: true\n", "managedNodeGroups[0].spot", "remove spot"),
])
def test_fails_efa_group_with_several_types_or_spot(group, field, fix):
    text = BASE + group
    if "instanceTypes" in group:
        text = text.replace("    instanceType: p5.48xlarge\n", "")
    p = one_problem(text)
    assert p.field == field and fix in p.fix


def test_fails_instance_types_of_different_kinds():
    text = BASE + "\n  - name: mixed\n    instanceTypes: [m5.xlarge, g5.xlarge]\n"
    p = one_problem(text)
    assert (p.field, p.value) == ("managedNodeGroups[1].instanceTypes", ["m5.xlarge", "g5.xlarge"])
    assert "of one kind" in p.fix


def test_instance_type_defaults_to_eksctl_default():
    (_, group) = plan_of(BASE + "\n  - name: plain\n    minSize: 1\n").node_groups
    assert group.instance_type == "m5.large"


CUSTOM_AMI = "    ami: ami-0123456789abcdef0\n    amiFamily: AmazonLinux2023\n"


def test_custom_ami_synthesizes_with_the_cluster_details_for_nodeadm():
    s = synth_text(BASE + CUSTOM_AMI)
    data = _gpu_launch_template(s)
    assert data["ImageId"] == "ami-0123456789abcdef0"
    joined = data["UserData"]["Fn::Base64"]["Fn::Join"][1]
    assert {"Fn::GetAtt": ["EksCluster", "Endpoint"]} in joined
    assert {"Fn::GetAtt": ["EksCluster", "KubernetesNetworkConfig.ServiceIpv4Cidr"]} in joined
    (gpu,) = [v["Properties"] for v in s.resources("cluster", "AWS::EKS::Nodegroup").values()
              if v["Properties"]["NodegroupName"].endswith("gpu")]
    assert "AmiType" not in gpu  # CloudFormation: no AmiType with a custom AMI in the launch template


def test_fails_custom_ami_without_its_family():
    p = one_problem(BASE + "    ami: ami-0123456789abcdef0\n")
    assert (p.field, p.value) == ("managedNodeGroups[0].ami", "ami-0123456789abcdef0")
    assert "add amiFamily: AmazonLinux2023" in p.fix


@pytest.mark.parametrize(("ssh", "key"), [
    ("{publicKeyName: k}", "k"),  # eksctl defaults.go setSSHDefaults: a named key turns SSH on
    # eksctl-io/eksctl@v0.230.0 pkg/cfn/builder/managed_launch_template.go makeLaunchTemplateData: KeyName whenever
    # publicKeyName is set; allow only decides whether eksctl opens port 22 (its SSH security group)
    ("{allow: false, publicKeyName: k}", "k"),
    ("{allow: true, publicKeyName: k}", "k"),
    ("{allow: false}", None),
    ("{enableSsm: true}", None),
])
def test_ssh_key_as_eksctl_reads_it(ssh, key):
    (group,) = plan_of(BASE + f"    ssh: {ssh}\n").node_groups
    assert group.key_name == key


def test_fails_instance_name_tag_too_long():
    p = one_problem(BASE + f"    instancePrefix: {'p' * 64}\n    instanceName: {'n' * 200}\n")
    assert p.field == "managedNodeGroups[0].instancePrefix"
    assert len(p.value) == 265 and "256" in p.message
    assert "shorten instancePrefix or instanceName" in p.fix


def test_fails_empty_pre_bootstrap_command():
    p = one_problem(BASE + "    preBootstrapCommands: ['echo ok', ' ']\n")
    assert (p.field, p.value) == ("managedNodeGroups[0].preBootstrapCommands[1]", " ")
    assert "remove the empty entry" in p.fix


def test_capacity_reservation_in_launch_template():
    s = synth_text(BASE + "    capacityReservation: {capacityReservationTarget: {capacityReservationID: cr-0123456789abcdef0}}\n")
    Template.from_json(s.template("cluster")).has_resource_properties("AWS::EC2::LaunchTemplate", {
        "LaunchTemplateData": Match.object_like({
            "InstanceType": "p5.48xlarge",
            "CapacityReservationSpecification": {
                "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"},
            },
        }),
    })
