"""eksctl's ``addons`` and ``nodeRepairConfig`` (efa_stack/planning/addons.py): the spec, the merge with efa-stack's
own add-ons, the problems. Their templates: tests/stacks/test_addons.py, tests/stacks/test_node_groups.py.

eksctl-io/eksctl@v0.230.0: pkg/apis/eksctl.io/v1alpha5/addon.go (Addon), iam.go (PodIdentityAssociation),
types.go (NodeGroupNodeRepairConfig). CloudFormation: AWS::EKS::Addon, AWS::EKS::Nodegroup NodeRepairConfig.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from efa_stack.planning.addons import NODE_MONITORING_AGENT, VPC_CNI, addon_data, known_addon_names, pinned_version
from efa_stack.spec.models import KUBERNETES_VERSIONS
from tests.builders import BASE, Spec, cpu_group

ROLE = "arn:aws:iam::123456789012:role/external-dns"
POLICY = "arn:aws:iam::aws:policy/AmazonRoute53FullAccess"
EBS_POLICY = "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
CW_POLICY = "arn:aws:iam::aws:policy/CloudWatchFullAccess"


def addons(*entries: dict[str, Any]) -> Spec:
    """BASE with these ``addons`` entries."""
    return BASE.with_(addons=list(entries))


def fields(spec: Spec) -> list[str]:
    return [p.field for p in spec.problems()]


# --- plan: defaults and merge -------------------------------------------------------------------


def test_gpu_node_groups_get_repair_and_the_monitoring_agent_by_default():
    # GIVEN a GPU node group without nodeRepairConfig and a CPU one WHEN planned
    plan = BASE.add(cpu_group()).plan()
    # THEN repair is on for the GPU group only, and the node monitoring agent is installed
    assert plan.node_group("gpu").node_repair is not None
    assert plan.node_group("cpu").node_repair is None
    assert plan.system.node_repair is None
    assert plan.addon(NODE_MONITORING_AGENT) is not None


def test_repair_off_everywhere_leaves_out_the_monitoring_agent():
    plan = BASE.with_group(nodeRepairConfig={"enabled": False}).plan()
    assert plan.node_group("gpu").node_repair is None
    assert plan.addon(NODE_MONITORING_AGENT) is None


def test_cpu_group_can_turn_repair_on():
    plan = BASE.add(cpu_group(nodeRepairConfig={"enabled": True})).plan()
    assert plan.node_group("cpu").node_repair is not None


def version_tuple(v: str) -> tuple[int, int, int]:
    major, minor, patch = (int(x) for x in v.lstrip("v").split("-")[0].split("."))
    return major, minor, patch


def test_every_pinned_vpc_cni_supports_efa_only_and_every_kubernetes_version_has_one():
    data = addon_data()["vpc-cni"]
    assert set(data["versions"]) == set(KUBERNETES_VERSIONS)
    assert data["source"] and data["minimum_source"] and data["resolve_conflicts_source"]
    for k8s, version in data["versions"].items():
        assert version_tuple(version) >= version_tuple(data["minimum"]) >= (1, 18, 5), k8s
    # CloudFormation AWS::EKS::Addon ResolveConflicts: NONE | OVERWRITE | PRESERVE (PRESERVE: update only).
    assert data["resolve_conflicts"] in ("NONE", "OVERWRITE")


def test_vpc_cni_entry_merges_with_the_pinned_build():
    # GIVEN a vpc-cni entry with configuration only WHEN planned THEN efa-stack's pin and OVERWRITE stay
    plan = addons({"name": "vpc-cni", "configurationValues": 'env: {WARM_IP_TARGET: "5"}'}).plan()
    cni = plan.addon(VPC_CNI)
    assert cni is not None and cni.managed
    assert cni.version == pinned_version("vpc-cni", "1.34")
    assert cni.resolve_conflicts == "OVERWRITE"
    assert json.loads(cni.configuration_values or "") == {"env": {"WARM_IP_TARGET": "5"}}
    assert [a.name for a in plan.addons].count(VPC_CNI) == 1


def test_vpc_cni_version_at_or_above_the_minimum_is_taken():
    assert addons({"name": "vpc-cni", "version": "v1.19.0-eksbuild.1"}).plan().addon(VPC_CNI).version == "v1.19.0-eksbuild.1"


def test_monitoring_agent_entry_pins_its_version():
    plan = addons({"name": "eks-node-monitoring-agent", "version": "v1.4.0-eksbuild.1"}).plan()
    assert plan.addon(NODE_MONITORING_AGENT).version == "v1.4.0-eksbuild.1"


def test_fsx_csi_entry_merges_with_storage():
    spec = addons({"name": "aws-fsx-csi-driver", "version": "v1.5.0-eksbuild.1"}).with_(storage={"storageCapacityGiB": 1200})
    addon = spec.plan().addon("aws-fsx-csi-driver")
    assert addon is not None and addon.created_by == "storage" and addon.version == "v1.5.0-eksbuild.1"


def test_name_is_compared_lowercase_as_eksctl_does():
    assert addons({"name": "CoreDNS"}).plan().addon("coredns") is not None


def test_json_configuration_is_kept_as_compact_json():
    plan = addons({"name": "coredns", "configurationValues": '{"replicaCount": 3}'}).plan()
    assert plan.addon("coredns").configuration_values == '{"replicaCount":3}'


def test_known_names_hold_the_guide_names_efa_stack_uses():
    assert {"vpc-cni", "eks-pod-identity-agent", "eks-node-monitoring-agent", "aws-fsx-csi-driver"} <= set(
        known_addon_names()
    )


# --- bad input ----------------------------------------------------------------------------------


def test_fails_unknown_addon_name_with_a_suggestion():
    (p,) = addons({"name": "core-dns"}).problems()
    assert p.field == "addons[0].name" and p.value == "core-dns" and "coredns" in p.fix


def test_fails_unknown_addon_name_without_a_near_miss():
    (p,) = addons({"name": "zzqx"}).problems()
    assert "known_addons.json" in p.fix


def test_fails_bad_addon_name_format():
    assert fields(addons({"name": "core dns"})) == ["addons[0].name"]


@pytest.mark.parametrize("version", ["1.2.3", "v1.2", "latest", "v1.20.1"])
def test_fails_version_that_is_not_a_full_build(version):
    (p,) = addons({"name": "coredns", "version": version}).problems()
    assert p.field == "addons[0].version" and p.value == version


def test_fails_version_without_v_and_says_to_add_it():
    (p,) = addons({"name": "coredns", "version": "1.11.4-eksbuild.2"}).problems()
    assert p.fix == "write v1.11.4-eksbuild.2"


def test_fails_vpc_cni_below_the_efa_only_minimum():
    (p,) = addons({"name": "vpc-cni", "version": "v1.18.3-eksbuild.1"}).problems()
    assert p.field == "addons[0].version" and "1.18.5" in p.message and pinned_version("vpc-cni", "1.34") in p.fix


def test_fails_vpc_cni_resolve_conflicts_none():
    (p,) = addons({"name": "vpc-cni", "resolveConflicts": "none"}).problems()
    assert p.field == "addons[0].resolveConflicts" and "overwrite" in p.fix


def test_fails_pod_identity_on_the_vpc_cni():
    (p,) = addons({"name": "vpc-cni", "podIdentityAssociations": [
        {"namespace": "kube-system", "serviceAccountName": "aws-node", "roleARN": ROLE}]}).problems()
    assert p.field == "addons[0].podIdentityAssociations" and "aws-node" in p.message


def test_preserve_is_accepted_on_create():
    # EKS CreateAddon takes PRESERVE (like NONE on create); eksctl files use it: the plan builds
    coredns = addons({"name": "coredns", "resolveConflicts": "preserve"}).plan().addon("coredns")
    assert coredns is not None and coredns.resolve_conflicts == "PRESERVE"


def test_fails_configuration_values_not_parsable():
    (p,) = addons({"name": "coredns", "configurationValues": "{replicaCount: [3"}).problems()
    assert p.field == "addons[0].configurationValues" and "neither JSON nor YAML" in p.message


@pytest.mark.parametrize("value", ["[1, 2]", "3", "just text"])
def test_fails_configuration_values_not_a_mapping(value):
    (p,) = addons({"name": "coredns", "configurationValues": value}).problems()
    assert p.field == "addons[0].configurationValues" and "mapping" in p.message


def test_fails_monitoring_agent_configuration_outside_its_schema():
    (p,) = addons({"name": "eks-node-monitoring-agent", "configurationValues": '{"nodeAgnet": {}}'}).problems()
    assert p.field == "addons[0].configurationValues" and "nodeAgnet" in p.message


def test_monitoring_agent_configuration_inside_its_schema_is_taken():
    spec = addons({"name": "eks-node-monitoring-agent",
                   "configurationValues": '{"nodeAgent": {"tolerations": [{"operator": "Exists"}]}}'})
    assert spec.plan().addon(NODE_MONITORING_AGENT).configuration_values is not None


def test_fails_addon_listed_twice():
    assert fields(addons({"name": "coredns"}, {"name": "coredns"})) == ["addons[1].name"]


def test_fails_pod_identity_without_a_role():
    spec = addons({"name": "external-dns", "podIdentityAssociations": [
        {"namespace": "external-dns", "serviceAccountName": "external-dns"}]})
    assert fields(spec) == ["addons[0].podIdentityAssociations[0].roleARN"]


def test_fails_well_known_policies_with_the_mapping_that_works():
    problems = addons({"name": "external-dns", "podIdentityAssociations": [
        {"namespace": "external-dns", "serviceAccountName": "external-dns", "wellKnownPolicies": {"externalDNS": True}},
    ]}).problems()
    assert [p.field for p in problems] == ["addons[0].podIdentityAssociations[0].wellKnownPolicies"]
    assert "permissionPolicyARNs" in problems[0].fix


def test_fails_irsa_role_without_oidc():
    (p,) = addons({"name": "aws-ebs-csi-driver", "serviceAccountRoleARN": ROLE}).problems()
    assert p.field == "addons[0].serviceAccountRoleARN" and "withOIDC" in p.fix


@pytest.mark.parametrize("shape", [True, {"enabled": "yes"}, {"enable": True}, {"maxParallelNodesRepairedPercentage": 101}])
def test_fails_node_repair_config_with_a_bad_shape(shape):
    problems = BASE.with_group(nodeRepairConfig=shape).problems()
    assert all(p.field.startswith("managedNodeGroups[0].nodeRepairConfig") for p in problems) and problems


def test_fails_node_repair_count_and_percentage_of_one_limit():
    spec = BASE.with_group(nodeRepairConfig={"maxUnhealthyNodeThresholdCount": 2, "maxUnhealthyNodeThresholdPercentage": 10})
    assert fields(spec) == ["managedNodeGroups[0].nodeRepairConfig.maxUnhealthyNodeThresholdPercentage"]


def test_node_repair_overrides_are_eksctls_field():
    # supported since efa-stack reads eksctl's nodeRepairConfigOverrides (tests/planning/test_node_extras.py)
    (group,) = BASE.with_group(nodeRepairConfig={"nodeRepairConfigOverrides": []}).plan().node_groups
    assert group.node_repair is not None and group.node_repair_overrides == ()


def test_fails_repair_limits_with_repair_off():
    spec = BASE.with_group(nodeRepairConfig={"enabled": False, "maxParallelNodesRepairedCount": 1})
    assert fields(spec) == ["managedNodeGroups[0].nodeRepairConfig.enabled"]


# --- attachPolicyARNs (eksctl: a new IRSA role for the add-on's service account; efa-stack: the same policies for
# the same service account through EKS Pod Identity, planning/data/addon_service_accounts.json) ---------------


def test_attach_policy_arns_become_a_pod_identity_of_the_known_service_account():
    plan = addons({"name": "aws-ebs-csi-driver", "attachPolicyARNs": [EBS_POLICY]}).plan()
    (identity,) = plan.addon("aws-ebs-csi-driver").pod_identities
    assert (identity.namespace, identity.service_account) == ("kube-system", "ebs-csi-controller-sa")
    assert identity.policy_arns == (EBS_POLICY,) and identity.role_arn is None


def test_attach_policy_arns_join_efa_stacks_cloudwatch_agent_role():
    plan = addons({"name": "amazon-cloudwatch-observability", "attachPolicyARNs": [CW_POLICY]}).plan()
    (identity,) = plan.addon("amazon-cloudwatch-observability").pod_identities
    assert identity.service_account == "cloudwatch-agent"
    assert identity.aws_managed_policies == ("CloudWatchAgentServerPolicy", "AWSXrayWriteOnlyAccess")
    assert identity.policy_arns == (CW_POLICY,)


def test_fails_attach_policy_arns_of_an_addon_whose_service_account_is_unknown():
    (p,) = addons({"name": "external-dns", "attachPolicyARNs": [POLICY]}).problems()
    assert p.field == "addons[0].attachPolicyARNs" and p.value == [POLICY]
    assert p.message == "efa-stack does not know which service account the external-dns add-on's pods use"
    assert "podIdentityAssociations" in p.fix and "serviceAccountName" in p.fix


def test_fails_attach_policy_arns_beside_a_role():
    (p,) = addons({"name": "aws-ebs-csi-driver", "attachPolicyARNs": [EBS_POLICY], "serviceAccountRoleARN": ROLE},
                  {"name": "vpc-cni"}).with_(iam={"withOIDC": True}).problems()
    assert p.field == "addons[0].attachPolicyARNs"
    assert p.message == "the add-on's role is set twice (attachPolicyARNs and serviceAccountRoleARN)"


def test_fails_attach_policy_arns_on_the_vpc_cni():
    (p,) = addons({"name": "vpc-cni", "attachPolicyARNs": [POLICY]}).problems()
    assert p.field == "addons[0].attachPolicyARNs" and "aws-node" in p.message and p.fix == "remove attachPolicyARNs"


def test_fails_attach_policy_arns_that_are_not_policy_arns():
    (p,) = addons({"name": "aws-ebs-csi-driver", "attachPolicyARNs": ["AmazonEBSCSIDriverPolicy"]}).problems()
    assert p.field.startswith("addons[0].attachPolicyARNs")
