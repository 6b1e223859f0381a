"""eksctl's ``addons`` and ``nodeRepairConfig``: the spec, the merge with efa-stack's own add-ons, the templates.

eksctl-io/eksctl@v0.230.0: pkg/apis/eksctl.io/v1alpha5/addon.go (Addon), iam.go (PodIdentityAssociation),
types.go (NodeGroupNodeRepairConfig). CloudFormation: AWS::EKS::Addon, AWS::EKS::Nodegroup NodeRepairConfig.
"""

from __future__ import annotations

import json

import pytest

from efa_stack.planning.addons import NODE_MONITORING_AGENT, VPC_CNI, known_addon_names, pinned_version
from tests.support import cluster_spec, cpu_group, plan_of, problems_of, synth_text

BASE = cluster_spec()
CPU_GROUP = cpu_group("m7i.xlarge")
ROLE = "arn:aws:iam::123456789012:role/external-dns"
POLICY = "arn:aws:iam::aws:policy/AmazonRoute53FullAccess"

# One synthesized app for the template assertions (the spec exercises every add-on field at once).
SYNTH_SPEC = BASE + CPU_GROUP + """    nodeRepairConfig: {enabled: true, maxUnhealthyNodeThresholdPercentage: 20, maxParallelNodesRepairedCount: 1}
addons:
  - name: coredns
    version: v1.11.4-eksbuild.2
    configurationValues: |
      replicaCount: 3
  - name: external-dns
    resolveConflicts: overwrite
    tags: {team: infra}
    podIdentityAssociations:
      - {namespace: external-dns, serviceAccountName: external-dns, permissionPolicyARNs: [%POLICY%]}
  - name: cert-manager
    podIdentityAssociations:
      - {namespace: cert-manager, serviceAccountName: cert-manager, roleARN: %ROLE%}
  - name: eks-node-monitoring-agent
    version: v1.4.0-eksbuild.1
  - name: vpc-cni
    configurationValues: '{"env": {"ENABLE_PREFIX_DELEGATION": "true"}}'
""".replace("%POLICY%", POLICY).replace("%ROLE%", ROLE)


def fields(text: str) -> list[str]:
    return [p.field for p in problems_of(text)]


@pytest.fixture(scope="module")
def synth():
    return synth_text(SYNTH_SPEC)


def addons_by_name(synth) -> dict[str, dict]:
    return {
        r["Properties"]["AddonName"]: r for r in synth.resources("cluster", "AWS::EKS::Addon").values()
    }


# --- plan: defaults and merge -------------------------------------------------------------------


def test_gpu_node_groups_get_repair_and_the_monitoring_agent_by_default():
    # GIVEN a GPU node group without nodeRepairConfig and a CPU one WHEN planned
    plan = plan_of(BASE + CPU_GROUP)
    # THEN repair is on for the GPU group only, and the node monitoring agent is installed
    assert plan.node_group("gpu").node_repair is not None
    assert plan.node_group("cpu").node_repair is None
    assert plan.system.node_repair is None
    assert plan.addon(NODE_MONITORING_AGENT) is not None


def test_repair_off_everywhere_leaves_out_the_monitoring_agent():
    plan = plan_of(BASE + "    nodeRepairConfig: {enabled: false}\n")
    assert plan.node_group("gpu").node_repair is None
    assert plan.addon(NODE_MONITORING_AGENT) is None


def test_cpu_group_can_turn_repair_on():
    plan = plan_of(BASE + CPU_GROUP + "    nodeRepairConfig: {enabled: true}\n")
    assert plan.node_group("cpu").node_repair is not None


def test_vpc_cni_entry_merges_with_the_pinned_build():
    # GIVEN a vpc-cni entry with configuration only WHEN planned THEN efa-stack's pin and OVERWRITE stay
    plan = plan_of(BASE + "addons:\n  - name: vpc-cni\n    configurationValues: 'env: {WARM_IP_TARGET: \"5\"}'\n")
    cni = plan.addon(VPC_CNI)
    assert cni is not None and cni.managed
    assert cni.version == pinned_version("vpc-cni", "1.34")
    assert cni.resolve_conflicts == "OVERWRITE"
    assert json.loads(cni.configuration_values or "") == {"env": {"WARM_IP_TARGET": "5"}}
    assert [a.name for a in plan.addons].count(VPC_CNI) == 1


def test_vpc_cni_version_at_or_above_the_minimum_is_taken():
    plan = plan_of(BASE + "addons:\n  - {name: vpc-cni, version: v1.19.0-eksbuild.1}\n")
    assert plan.addon(VPC_CNI).version == "v1.19.0-eksbuild.1"


def test_monitoring_agent_entry_pins_its_version():
    plan = plan_of(BASE + "addons:\n  - {name: eks-node-monitoring-agent, version: v1.4.0-eksbuild.1}\n")
    assert plan.addon(NODE_MONITORING_AGENT).version == "v1.4.0-eksbuild.1"


def test_fsx_csi_entry_merges_with_storage():
    text = BASE + "storage: {storageCapacityGiB: 1200}\naddons:\n  - {name: aws-fsx-csi-driver, version: v1.5.0-eksbuild.1}\n"
    addon = plan_of(text).addon("aws-fsx-csi-driver")
    assert addon is not None and addon.created_by == "storage" and addon.version == "v1.5.0-eksbuild.1"


def test_name_is_compared_lowercase_as_eksctl_does():
    assert plan_of(BASE + "addons:\n  - {name: CoreDNS}\n").addon("coredns") is not None


def test_json_configuration_is_kept_as_compact_json():
    plan = plan_of(BASE + "addons:\n  - {name: coredns, configurationValues: '{\"replicaCount\": 3}'}\n")
    assert plan.addon("coredns").configuration_values == '{"replicaCount":3}'


def test_known_names_hold_the_guide_names_efa_stack_uses():
    assert {"vpc-cni", "eks-pod-identity-agent", "eks-node-monitoring-agent", "aws-fsx-csi-driver"} <= set(
        known_addon_names()
    )


# --- templates ----------------------------------------------------------------------------------


def test_user_addon_becomes_an_eks_addon_with_version_and_configuration(synth):
    coredns = addons_by_name(synth)["coredns"]["Properties"]
    assert coredns["AddonVersion"] == "v1.11.4-eksbuild.2"
    assert json.loads(coredns["ConfigurationValues"]) == {"replicaCount": 3}
    # EKS installs a self-managed CoreDNS; the data file takes it over
    assert coredns["ResolveConflicts"] == "OVERWRITE"


def test_addon_without_version_leaves_the_build_to_eks(synth):
    assert "AddonVersion" not in addons_by_name(synth)["external-dns"]["Properties"]


def test_resolve_conflicts_and_tags(synth):
    props = addons_by_name(synth)["external-dns"]["Properties"]
    assert props["ResolveConflicts"] == "OVERWRITE"
    assert {"Key": "team", "Value": "infra"} in props["Tags"]


def test_permission_policy_arns_make_a_pod_identity_role(synth):
    (assoc,) = addons_by_name(synth)["external-dns"]["Properties"]["PodIdentityAssociations"]
    assert assoc["ServiceAccount"] == "external-dns"
    roles = synth.resources("cluster", "AWS::IAM::Role")
    role = roles[assoc["RoleArn"]["Fn::GetAtt"][0]]
    assert role["Properties"]["ManagedPolicyArns"] == [POLICY]
    principals = [s["Principal"] for s in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]]
    assert {"Service": "pods.eks.amazonaws.com"} in principals


def test_role_arn_is_associated_as_given(synth):
    (assoc,) = addons_by_name(synth)["cert-manager"]["Properties"]["PodIdentityAssociations"]
    assert assoc == {"RoleArn": ROLE, "ServiceAccount": "cert-manager"}


def test_vpc_cni_keeps_its_pin_and_takes_the_users_configuration(synth):
    props = addons_by_name(synth)["vpc-cni"]["Properties"]
    assert props["AddonVersion"] == pinned_version("vpc-cni", "1.34")
    assert props["ResolveConflicts"] == "OVERWRITE"
    assert json.loads(props["ConfigurationValues"]) == {"env": {"ENABLE_PREFIX_DELEGATION": "true"}}
    assert props["PodIdentityAssociations"][0]["ServiceAccount"] == "aws-node"


def test_monitoring_agent_is_one_addon_at_the_users_version(synth):
    agents = [a for a in synth.resources("cluster", "AWS::EKS::Addon").values()
              if a["Properties"]["AddonName"] == NODE_MONITORING_AGENT]
    assert len(agents) == 1 and agents[0]["Properties"]["AddonVersion"] == "v1.4.0-eksbuild.1"


def test_node_repair_config_on_the_node_groups(synth):
    groups = {r["Properties"]["NodegroupName"]: r["Properties"]
              for r in synth.resources("cluster", "AWS::EKS::Nodegroup").values()}
    assert groups["gpu"]["NodeRepairConfig"] == {"Enabled": True}
    assert groups["cpu"]["NodeRepairConfig"] == {
        "Enabled": True, "MaxUnhealthyNodeThresholdPercentage": 20, "MaxParallelNodesRepairedCount": 1,
    }
    assert "NodeRepairConfig" not in groups["system"]


def test_node_groups_wait_for_the_cni_and_the_pod_identity_agent(synth):
    addons = synth.resources("cluster", "AWS::EKS::Addon")
    needed = {k for k, v in addons.items() if v["Properties"]["AddonName"] in ("vpc-cni", "eks-pod-identity-agent")}
    for group in synth.resources("cluster", "AWS::EKS::Nodegroup").values():
        assert needed <= set(group["DependsOn"])


# --- bad input ----------------------------------------------------------------------------------


def test_fails_unknown_addon_name_with_a_suggestion():
    (p,) = problems_of(BASE + "addons:\n  - {name: core-dns}\n")
    assert p.field == "addons[0].name" and p.value == "core-dns" and "coredns" in p.fix


def test_fails_unknown_addon_name_without_a_near_miss():
    (p,) = problems_of(BASE + "addons:\n  - {name: zzqx}\n")
    assert "known_addons.json" in p.fix


def test_fails_bad_addon_name_format():
    assert fields(BASE + "addons:\n  - {name: 'core dns'}\n") == ["addons[0].name"]


@pytest.mark.parametrize("version", ["1.2.3", "v1.2", "latest", "v1.20.1"])
def test_fails_version_that_is_not_a_full_build(version):
    (p,) = problems_of(BASE + f"addons:\n  - {{name: coredns, version: '{version}'}}\n")
    assert p.field == "addons[0].version" and p.value == version


def test_fails_version_without_v_and_says_to_add_it():
    (p,) = problems_of(BASE + "addons:\n  - {name: coredns, version: 1.11.4-eksbuild.2}\n")
    assert p.fix == "write v1.11.4-eksbuild.2"


def test_fails_vpc_cni_below_the_efa_only_minimum():
    (p,) = problems_of(BASE + "addons:\n  - {name: vpc-cni, version: v1.18.3-eksbuild.1}\n")
    assert p.field == "addons[0].version" and "1.18.5" in p.message and pinned_version("vpc-cni", "1.34") in p.fix


def test_fails_vpc_cni_resolve_conflicts_none():
    (p,) = problems_of(BASE + "addons:\n  - {name: vpc-cni, resolveConflicts: none}\n")
    assert p.field == "addons[0].resolveConflicts" and "overwrite" in p.fix


def test_fails_pod_identity_on_the_vpc_cni():
    text = BASE + (
        "addons:\n  - name: vpc-cni\n    podIdentityAssociations:\n"
        f"      - {{namespace: kube-system, serviceAccountName: aws-node, roleARN: {ROLE}}}\n"
    )
    (p,) = problems_of(text)
    assert p.field == "addons[0].podIdentityAssociations" and "aws-node" in p.message


def test_preserve_is_accepted_on_create():
    # EKS CreateAddon takes PRESERVE (like NONE on create); eksctl files use it: the plan builds
    coredns = plan_of(BASE + "addons:\n  - {name: coredns, resolveConflicts: preserve}\n").addon("coredns")
    assert coredns is not None and coredns.resolve_conflicts == "PRESERVE"


def test_fails_configuration_values_not_parsable():
    (p,) = problems_of(BASE + "addons:\n  - {name: coredns, configurationValues: '{replicaCount: [3'}\n")
    assert p.field == "addons[0].configurationValues" and "neither JSON nor YAML" in p.message


@pytest.mark.parametrize("value", ["'[1, 2]'", "'3'", "'just text'"])
def test_fails_configuration_values_not_a_mapping(value):
    (p,) = problems_of(BASE + f"addons:\n  - {{name: coredns, configurationValues: {value}}}\n")
    assert p.field == "addons[0].configurationValues" and "mapping" in p.message


def test_fails_monitoring_agent_configuration_outside_its_schema():
    text = BASE + "addons:\n  - {name: eks-node-monitoring-agent, configurationValues: '{\"nodeAgnet\": {}}'}\n"
    (p,) = problems_of(text)
    assert p.field == "addons[0].configurationValues" and "nodeAgnet" in p.message


def test_monitoring_agent_configuration_inside_its_schema_is_taken():
    text = BASE + (
        "addons:\n  - name: eks-node-monitoring-agent\n"
        "    configurationValues: '{\"nodeAgent\": {\"tolerations\": [{\"operator\": \"Exists\"}]}}'\n"
    )
    assert plan_of(text).addon(NODE_MONITORING_AGENT).configuration_values is not None


def test_fails_addon_listed_twice():
    assert fields(BASE + "addons:\n  - {name: coredns}\n  - {name: coredns}\n") == ["addons[1].name"]


def test_fails_pod_identity_without_a_role():
    text = BASE + "addons:\n  - name: external-dns\n    podIdentityAssociations:\n" \
        "      - {namespace: external-dns, serviceAccountName: external-dns}\n"
    assert fields(text) == ["addons[0].podIdentityAssociations[0].roleARN"]


def test_fails_well_known_policies_with_the_mapping_that_works():
    text = BASE + "addons:\n  - name: external-dns\n    podIdentityAssociations:\n" \
        "      - {namespace: external-dns, serviceAccountName: external-dns, wellKnownPolicies: {externalDNS: true}}\n"
    problems = problems_of(text)
    assert [p.field for p in problems] == ["addons[0].podIdentityAssociations[0].wellKnownPolicies"]
    assert "permissionPolicyARNs" in problems[0].fix


def test_fails_irsa_role_without_oidc():
    text = BASE + f"addons:\n  - {{name: aws-ebs-csi-driver, serviceAccountRoleARN: '{ROLE}'}}\n"
    (p,) = problems_of(text)
    assert p.field == "addons[0].serviceAccountRoleARN" and "withOIDC" in p.fix


@pytest.mark.parametrize("shape", ["true", "{enabled: 'yes'}", "{enable: true}", "{maxParallelNodesRepairedPercentage: 101}"])
def test_fails_node_repair_config_with_a_bad_shape(shape):
    problems = problems_of(BASE + f"    nodeRepairConfig: {shape}\n")
    assert all(p.field.startswith("managedNodeGroups[0].nodeRepairConfig") for p in problems) and problems


def test_fails_node_repair_count_and_percentage_of_one_limit():
    text = BASE + "    nodeRepairConfig: {maxUnhealthyNodeThresholdCount: 2, maxUnhealthyNodeThresholdPercentage: 10}\n"
    assert fields(text) == ["managedNodeGroups[0].nodeRepairConfig.maxUnhealthyNodeThresholdPercentage"]


def test_node_repair_overrides_are_eksctls_field():
    # supported since efa-stack reads eksctl's nodeRepairConfigOverrides (tests/test_spec_eksctl_fields.py)
    (group,) = plan_of(BASE + "    nodeRepairConfig: {nodeRepairConfigOverrides: []}\n").node_groups
    assert group.node_repair is not None and group.node_repair_overrides == ()


def test_fails_repair_limits_with_repair_off():
    text = BASE + "    nodeRepairConfig: {enabled: false, maxParallelNodesRepairedCount: 1}\n"
    assert fields(text) == ["managedNodeGroups[0].nodeRepairConfig.enabled"]


# --- attachPolicyARNs (eksctl: a new IRSA role for the add-on's service account; efa-stack: the same policies for
# the same service account through EKS Pod Identity, planning/data/addon_service_accounts.json) ---------------
EBS_POLICY = "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
CW_POLICY = "arn:aws:iam::aws:policy/CloudWatchFullAccess"


def test_attach_policy_arns_become_a_pod_identity_of_the_known_service_account():
    plan = plan_of(BASE + f"addons:\n  - name: aws-ebs-csi-driver\n    attachPolicyARNs: [{EBS_POLICY}]\n")
    (identity,) = plan.addon("aws-ebs-csi-driver").pod_identities
    assert (identity.namespace, identity.service_account) == ("kube-system", "ebs-csi-controller-sa")
    assert identity.policy_arns == (EBS_POLICY,) and identity.role_arn is None


def test_attach_policy_arns_join_efa_stacks_cloudwatch_agent_role():
    plan = plan_of(BASE + f"addons:\n  - name: amazon-cloudwatch-observability\n    attachPolicyARNs: [{CW_POLICY}]\n")
    (identity,) = plan.addon("amazon-cloudwatch-observability").pod_identities
    assert identity.service_account == "cloudwatch-agent"
    assert identity.aws_managed_policies == ("CloudWatchAgentServerPolicy", "AWSXrayWriteOnlyAccess")
    assert identity.policy_arns == (CW_POLICY,)


def test_attach_policy_arns_on_cloudwatch_agent_role_in_the_template():
    s = synth_text(BASE + f"addons:\n  - name: amazon-cloudwatch-observability\n    attachPolicyARNs: [{CW_POLICY}]\n")
    (assoc,) = addons_by_name(s)["amazon-cloudwatch-observability"]["Properties"]["PodIdentityAssociations"]
    assert assoc["ServiceAccount"] == "cloudwatch-agent"
    role = s.resources("cluster", "AWS::IAM::Role")[assoc["RoleArn"]["Fn::GetAtt"][0]]
    assert CW_POLICY in role["Properties"]["ManagedPolicyArns"]
    assert len(role["Properties"]["ManagedPolicyArns"]) == 3


def test_fails_attach_policy_arns_of_an_addon_whose_service_account_is_unknown():
    (p,) = problems_of(BASE + f"addons:\n  - name: external-dns\n    attachPolicyARNs: [{POLICY}]\n")
    assert p.field == "addons[0].attachPolicyARNs" and p.value == [POLICY]
    assert p.message == "efa-stack does not know which service account the external-dns add-on's pods use"
    assert "podIdentityAssociations" in p.fix and "serviceAccountName" in p.fix


def test_fails_attach_policy_arns_beside_a_role():
    (p,) = problems_of(BASE + f"addons:\n  - name: aws-ebs-csi-driver\n    attachPolicyARNs: [{EBS_POLICY}]\n"
                       f"    serviceAccountRoleARN: {ROLE}\n  - {{name: vpc-cni}}\niam: {{withOIDC: true}}\n")
    assert p.field == "addons[0].attachPolicyARNs"
    assert p.message == "the add-on's role is set twice (attachPolicyARNs and serviceAccountRoleARN)"


def test_fails_attach_policy_arns_on_the_vpc_cni():
    (p,) = problems_of(BASE + f"addons:\n  - name: vpc-cni\n    attachPolicyARNs: [{POLICY}]\n")
    assert p.field == "addons[0].attachPolicyARNs" and "aws-node" in p.message and p.fix == "remove attachPolicyARNs"


def test_fails_attach_policy_arns_that_are_not_policy_arns():
    (p,) = problems_of(BASE + "addons:\n  - name: aws-ebs-csi-driver\n    attachPolicyARNs: [AmazonEBSCSIDriverPolicy]\n")
    assert p.field.startswith("addons[0].attachPolicyARNs")
