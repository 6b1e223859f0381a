"""Scale: spec node groups above EKS's per-group node quota, the EKS node group quota, stack sizes and addresses."""

from __future__ import annotations

import itertools

import pytest

from efa_stack import contract
from efa_stack.planning.limits import CFN_MAX_RESOURCES
from efa_stack.planning.node_groups import part_count, split_sizes
from efa_stack.planning.plan import build_plan, plan_from_file
from efa_stack.spec.errors import SpecError
from efa_stack.spec.loader import parse_spec
from efa_stack.spec.models import MAX_MANAGED_NODE_GROUPS, MAX_NODES_PER_NODE_GROUP, MAX_USER_NODE_GROUPS
from tests.support import CLUSTERS, built, synth_spec, synth_text, worker

SCALE = CLUSTERS / "scale-1000-p5.yaml"
HEAD = """apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata: {name: scale, region: us-west-2, version: "1.34"}
availabilityZones: [us-west-2a, us-west-2b]
managedNodeGroups:
"""


def group(name: str, nodes: int, instance: str = "p5.48xlarge", extra: str = "") -> str:
    return (f"  - {{name: {name}, instanceType: {instance}, minSize: {nodes}, desiredCapacity: {nodes}, "
            f"maxSize: {nodes}, availabilityZones: [us-west-2a], efaEnabled: true{extra}}}\n")


def problems_of(text: str) -> list:
    with pytest.raises(SpecError) as exc:
        build_plan(parse_spec(text))
    return exc.value.problems


# --- splitting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_size", [1, 2, 449, 450, 451, 899, 900, 901, 1000, 4321, 13050])
def test_split_sizes_fit_the_quota_with_the_fewest_parts_and_keep_the_totals(max_size):
    for min_size, desired in {(0, 0), (0, max_size), (max_size // 3, max_size // 2), (max_size, max_size)}:
        parts = split_sizes(min_size, desired, max_size)
        assert len(parts) == -(-max_size // MAX_NODES_PER_NODE_GROUP) == part_count(max_size)
        assert [sum(p[i] for p in parts) for i in range(3)] == [min_size, desired, max_size]
        for lo, mid, hi in parts:
            assert 0 <= lo <= mid <= hi <= MAX_NODES_PER_NODE_GROUP and hi >= 1
        # even: the shares of each size differ by at most one
        for i in range(3):
            assert max(p[i] for p in parts) - min(p[i] for p in parts) <= 1


def test_a_group_within_the_quota_stays_one_eks_node_group_of_its_own_name():
    ng = build_plan(parse_spec(HEAD + group("p5", MAX_NODES_PER_NODE_GROUP))).node_groups[0]
    (part,) = ng.parts
    assert (part.name, part.max_size, part.index) == ("p5", MAX_NODES_PER_NODE_GROUP, 0)
    assert ng.parts_summary() == ""


def test_the_1000_node_spec_plans_three_parts_of_one_logical_group():
    plan = plan_from_file(SCALE)
    (ng,) = plan.node_groups
    assert ng.max_size == 1000
    assert [p.name for p in ng.parts] == ["p5-1", "p5-2", "p5-3"]
    assert [p.max_size for p in ng.parts] == [334, 333, 333]
    assert "as 3 EKS node groups p5-1..p5-3" in plan.summary()


def test_a_split_group_synthesizes_one_eks_node_group_per_part_with_one_label_and_one_placement_group():
    s = synth_spec(str(SCALE))
    nodegroups = {v["Properties"]["NodegroupName"]: v["Properties"]
                  for v in s.resources("cluster", "AWS::EKS::Nodegroup").values()}
    assert sorted(nodegroups) == ["p5-1", "p5-2", "p5-3", "system"]
    parts = [nodegroups[n] for n in ("p5-1", "p5-2", "p5-3")]
    assert sum(p["ScalingConfig"]["MaxSize"] for p in parts) == 1000
    assert sum(p["ScalingConfig"]["DesiredSize"] for p in parts) == 1000
    assert {p["Labels"][contract.LABEL_NODE_GROUP] for p in parts} == {"p5"}
    assert {p["Tags"][contract.LABEL_NODE_GROUP] for p in parts} == {"p5"}
    (pg_id,) = s.resources("cluster", "AWS::EC2::PlacementGroup")
    templates = s.resources("cluster", "AWS::EC2::LaunchTemplate")
    efa_templates = [t for t in templates.values() if "Placement" in t["Properties"]["LaunchTemplateData"]]
    assert len(efa_templates) == 3
    assert all(t["Properties"]["LaunchTemplateData"]["Placement"]["GroupName"] == {"Fn::GetAtt": [pg_id, "GroupName"]}
               for t in efa_templates)
    # every part launches the same interfaces: the launch template contents differ in nothing
    datas = [{k: v for k, v in t["Properties"]["LaunchTemplateData"].items() if k != "TagSpecifications"}
             for t in efa_templates]
    assert all(d == datas[0] for d in datas)


def test_a_split_group_still_gets_one_nccl_job_sized_for_all_its_nodes():
    b = built("scale-1000-p5")
    assert b.plan.nccl_job is not None and b.plan.nccl_job.workers == 1000
    job = b.mpijob()
    assert worker(job)["replicas"] == 1000
    selector = worker(job)["template"]["spec"]["nodeSelector"]
    assert selector[contract.LABEL_NODE_GROUP] == "p5"


def test_a_split_reservation_group_targets_the_reservation_from_every_part():
    text = HEAD + group("p5", 600, extra=", capacity: {type: reservation, reservationId: cr-0123456789abcdef0}")
    s = synth_text(text)
    targets = [t["Properties"]["LaunchTemplateData"].get("CapacityReservationSpecification")
               for t in s.resources("cluster", "AWS::EC2::LaunchTemplate").values()
               if "NetworkInterfaces" in t["Properties"]["LaunchTemplateData"]]
    assert len(targets) == 2
    assert all(t == targets[0] and "cr-0123456789abcdef0" in str(t) for t in targets)
    assert not s.resources("cluster", "AWS::EC2::PlacementGroup")


def test_fails_more_eks_node_groups_than_the_quota_with_the_count_and_the_fix():
    # 2 groups of 13 parts + 1 of 3 parts + the system group = 30 is fine; one node more is 31
    fine = HEAD + group("a", 13 * 450) + group("b", 13 * 450) + group("c", 3 * 450)
    assert [p for p in problems_of(fine) if p.field.startswith("managedNodeGroups")] == []  # only vpc.cidr's
    (p,) = [p for p in problems_of(HEAD + group("a", 13 * 450) + group("b", 13 * 450) + group("c", 3 * 450 + 1))
            if p.field == "managedNodeGroups"]
    assert p.value == f"{MAX_MANAGED_NODE_GROUPS + 1} EKS node groups"
    assert f"quota of {MAX_MANAGED_NODE_GROUPS} managed node groups per cluster" in p.message
    assert "a 13, b 13, c 4" in p.message
    assert "lower maxSize" in p.fix and "quota is adjustable" in p.fix


def test_fails_a_part_name_that_another_group_has():
    (p,) = [p for p in problems_of(HEAD + group("p5", 500) + group("p5-2", 2)) if "part name" in p.message]
    assert p.field == "managedNodeGroups(p5).name" and "'p5-2'" in p.message and "rename" in p.fix


def test_fails_a_node_count_above_what_the_quota_can_hold():
    most = MAX_NODES_PER_NODE_GROUP * MAX_USER_NODE_GROUPS
    found = problems_of(HEAD + group("p5", most + 1))
    assert {p.field for p in found} == {f"managedNodeGroups[0].{f}" for f in ("minSize", "desiredCapacity", "maxSize")}
    assert all(str(most) in p.message and f"holds at most {most} nodes" in p.fix for p in found)


def test_split_parts_are_counted_against_the_stack_size():
    from efa_stack.planning.limits import CLUSTER_STACK_FIXED_RESOURCES, count_cluster_resources, network_resource_count

    s = synth_spec(str(SCALE))
    actual = len(s.template("cluster")["Resources"])
    groups = s.plan.all_node_groups
    network = network_resource_count(2, s.plan.nat_gateways, s.plan.interface_endpoints, existing_vpc=False)
    bound = count_cluster_resources([g.placement_group for g in groups], [len(g.parts) for g in groups], network=network)
    assert actual <= bound < CFN_MAX_RESOURCES
    assert bound - CLUSTER_STACK_FIXED_RESOURCES - network == 2 * (1 + 3) + 1


def test_parts_names_combine_as_expected():
    names = [p.name for p in build_plan(parse_spec(HEAD + group("gpu", 2000))).node_groups[0].parts]
    assert names == [f"gpu-{i}" for i in range(1, 6)]
    assert len(set(itertools.chain(names))) == 5


# --- CloudFormation: 500 resources per stack ---------------------------------------------------------


def test_the_most_eks_node_groups_a_spec_can_make_keep_every_template_under_500_resources():
    """29 EFA node groups (the quota of 30 with the system group), each with its own placement group and its own
    node role, synthesize with every stack under CloudFormation's 500 resources per stack (AWS CloudFormation
    User Guide, "Understand CloudFormation quotas"): EKS's quota, not CloudFormation's, bounds the node groups."""
    role = ", iam: {attachPolicyARNs: [arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess]}"
    text = HEAD + "".join(group(f"g{i}", 1, extra=role) for i in range(MAX_USER_NODE_GROUPS))
    s = synth_text(text)
    nodegroups = s.resources("cluster", "AWS::EKS::Nodegroup")
    assert len(nodegroups) == MAX_MANAGED_NODE_GROUPS
    assert len(s.resources("cluster", "AWS::EC2::PlacementGroup")) == MAX_USER_NODE_GROUPS
    sizes = {name: len(t["Resources"]) for name, t in s.templates.items()}
    assert all(n < CFN_MAX_RESOURCES for n in sizes.values()), sizes


# --- addresses ------------------------------------------------------------------------------------------


def test_ipv4_per_interface_data_is_moto_s_recorded_describe_instance_types():
    import boto3
    from moto import mock_aws

    from efa_stack.planning.addressing import _ipv4_data

    data = _ipv4_data()["ipv4_per_interface"]
    with mock_aws():
        client = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        recorded = {
            t["InstanceType"]: t["NetworkInfo"]["Ipv4AddressesPerInterface"]
            for page in client.get_paginator("describe_instance_types").paginate() for t in page["InstanceTypes"]
        }
    assert data and all(recorded[k] == v for k, v in data.items())
    assert data["p5.48xlarge"] == 50


def test_a_p5_node_takes_its_primary_eni_s_addresses_only():
    from efa_stack.planning import catalog
    from efa_stack.planning.addressing import CniSettings, ipv4_per_interface, node_addresses
    from efa_stack.planning.layout import interface_layout

    p5 = catalog.get("p5.48xlarge")
    ipv4 = ipv4_per_interface(p5.name)
    # card 0 has 2 slots: the ENA primary and an efa-only interface, so the CNI has the primary ENI alone
    a = node_addresses(p5, interface_layout(p5, "current"), ipv4, CniSettings())
    assert (a.node, a.cni_enis, a.pods, a.total) == (1, 1, ipv4 - 1, ipv4)
    assert a.max_pods == 2 * (ipv4 - 1) + 2
    warm = node_addresses(p5, interface_layout(p5, "current"), ipv4, CniSettings(minimum_ip_target=8, warm_ip_target=2))
    assert warm.pods == 10
    prefix = node_addresses(p5, interface_layout(p5, "current"), ipv4, CniSettings(True, warm_prefix_target=1))
    assert prefix.pods == (-(-a.max_pods // 16) + 1) * 16


def test_the_1000_node_spec_gets_warm_ip_targets_that_fit_its_subnet():
    plan = plan_from_file(SCALE)
    a = plan.addresses
    assert a is not None and a.subnets.private_mask == 18  # larger than /19: 1,000 nodes' pods need it
    env = a.generated_env
    assert set(env) == {"MINIMUM_IP_TARGET", "WARM_IP_TARGET"}
    cni = plan.addon("vpc-cni")
    assert cni is not None and cni.configuration_values is not None
    import json

    assert json.loads(cni.configuration_values)["env"] == env
    assert max(a.per_zone.values()) <= a.usable
    p5 = next(g for g in a.groups if g.name == "p5")
    assert p5.per_node is not None
    assert p5.per_zone() == 1000 * p5.per_node.total == 1000 * (1 + int(env["MINIMUM_IP_TARGET"]) + int(env["WARM_IP_TARGET"]))
    assert "addresses at maxSize: us-west-2a" in plan.summary() and "MINIMUM_IP_TARGET" in plan.summary()


def test_small_specs_keep_the_cni_defaults_and_their_subnets():
    plan = plan_from_file(CLUSTERS / "default.yaml")
    assert plan.addresses is not None and plan.addresses.generated_env == {}
    assert plan.addresses.subnets.private_mask == 19
    assert plan.addon("vpc-cni").configuration_values is None


def test_a_user_s_prefix_delegation_drives_the_arithmetic_and_is_kept():
    config = '{"env":{"ENABLE_PREFIX_DELEGATION":"true","WARM_PREFIX_TARGET":"1"}}'
    text = HEAD + group("p5", 4) + f"addons:\n  - name: vpc-cni\n    configurationValues: '{config}'\n"
    plan = build_plan(parse_spec(text))
    assert plan.addresses.settings.prefix_delegation and plan.addresses.generated_env == {}
    p5 = next(g for g in plan.addresses.groups if g.name == "p5")
    assert p5.per_node.pods % 16 == 0 and p5.per_node.pods > 50
    assert "prefix delegation" in plan.summary()


def test_fails_pods_that_do_not_fit_with_the_user_s_settings_and_says_what_to_do():
    config = '{"env":{"MINIMUM_IP_TARGET":"40","WARM_IP_TARGET":"5"}}'
    text = HEAD + group("p5", 1000) + f"addons:\n  - name: vpc-cni\n    configurationValues: '{config}'\n"
    (p,) = [p for p in problems_of(text) if p.field == "vpc.cidr"]
    assert "us-west-2a" in p.message and "46 per node x 1000 nodes" in p.message and "/18" in p.message
    assert "secondary VPC CIDR" in p.fix and "MINIMUM_IP_TARGET" in p.fix


def test_generated_cni_settings_merge_with_the_user_s_and_a_conflict_names_both():
    import json

    from efa_stack.planning.addressing import merge_cni_env

    merged, problems = merge_cni_env('{"env":{"AWS_VPC_K8S_CNI_EXTERNALSNAT":"true"}}', {"WARM_IP_TARGET": "2"}, "addons[0]")
    assert problems == [] and json.loads(merged)["env"] == {"AWS_VPC_K8S_CNI_EXTERNALSNAT": "true", "WARM_IP_TARGET": "2"}
    _, (p,) = merge_cni_env('{"env":{"WARM_IP_TARGET":"9"}}', {"WARM_IP_TARGET": "2"}, "addons[0]")
    assert p.field == "addons[0].configurationValues.env.WARM_IP_TARGET" and p.value == "9"
    assert "WARM_IP_TARGET=2" in p.message and "set it to 2" in p.fix
