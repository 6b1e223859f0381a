"""Scale, planned: spec node groups above EKS's per-group node quota (their parts), the EKS node group quota and the
addresses; their templates: tests/stacks/test_cluster_stack.py."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from efa_stack import contract
from efa_stack.planning.node_groups import part_count, split_sizes
from efa_stack.planning.plan import plan_from_file
from efa_stack.spec.models import MAX_MANAGED_NODE_GROUPS, MAX_NODES_PER_NODE_GROUP, MAX_USER_NODE_GROUPS
from tests.builders import Spec, cluster, node_group
from tests.support import CLUSTERS, built, worker

SCALE = CLUSTERS / "scale-1000-p5.yaml"
def group(name: str, nodes: int, instance: str = "p5.48xlarge", **fields: Any) -> dict[str, Any]:
    return node_group(name, instance, min_size=nodes, desired=nodes, max_size=nodes, **fields)


def scale(*groups: dict[str, Any]) -> Spec:
    return cluster(*groups, name="scale")


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
    ng = scale(group("p5", MAX_NODES_PER_NODE_GROUP)).plan().node_groups[0]
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


def test_a_split_group_still_gets_one_nccl_job_sized_for_all_its_nodes():
    b = built("scale-1000-p5")
    assert b.plan.nccl_job is not None and b.plan.nccl_job.workers == 1000
    job = b.mpijob()
    assert worker(job)["replicas"] == 1000
    selector = worker(job)["template"]["spec"]["nodeSelector"]
    assert selector[contract.LABEL_NODE_GROUP] == "p5"


def test_fails_more_eks_node_groups_than_the_quota_with_the_count_and_the_fix():
    # 2 groups of 13 parts + 1 of 3 parts + the system group = 30 is fine; one node more is 31
    fine = scale(group("a", 13 * 450), group("b", 13 * 450), group("c", 3 * 450))
    assert [p for p in fine.problems() if p.field.startswith("managedNodeGroups")] == []  # only vpc.cidr's
    (p,) = [p for p in scale(group("a", 13 * 450), group("b", 13 * 450), group("c", 3 * 450 + 1)).problems()
            if p.field == "managedNodeGroups"]
    assert p.value == f"{MAX_MANAGED_NODE_GROUPS + 1} EKS node groups"
    assert f"quota of {MAX_MANAGED_NODE_GROUPS} managed node groups per cluster" in p.message
    assert "a 13, b 13, c 4" in p.message
    assert "lower maxSize" in p.fix and "quota is adjustable" in p.fix


def test_fails_a_part_name_that_another_group_has():
    (p,) = [p for p in scale(group("p5", 500), group("p5-2", 2)).problems() if "part name" in p.message]
    assert p.field == "managedNodeGroups(p5).name" and "'p5-2'" in p.message and "rename" in p.fix


def test_fails_a_node_count_above_what_the_quota_can_hold():
    most = MAX_NODES_PER_NODE_GROUP * MAX_USER_NODE_GROUPS
    found = scale(group("p5", most + 1)).problems()
    assert {p.field for p in found} == {f"managedNodeGroups[0].{f}" for f in ("minSize", "desiredCapacity", "maxSize")}
    assert all(str(most) in p.message and f"holds at most {most} nodes" in p.fix for p in found)


def test_parts_names_combine_as_expected():
    names = [p.name for p in scale(group("gpu", 2000)).plan().node_groups[0].parts]
    assert names == [f"gpu-{i}" for i in range(1, 6)]
    assert len(set(itertools.chain(names))) == 5


# --- addresses ------------------------------------------------------------------------------------------


def test_ipv4_per_interface_data_is_moto_s_recorded_describe_instance_types():
    # what moto serves as DescribeInstanceTypes: getmoto/moto@5.2.1 moto/ec2/models/instance_types.py,
    # InstanceTypeBackend.describe_instance_types returns the entries of INSTANCE_TYPES (its recorded data file), read
    # here without starting moto's mock (the paginated calls took about 20 s of CPU)
    from efa_stack.planning.addressing import _ipv4_data
    from tests.support import moto_instance_types

    data = _ipv4_data()["ipv4_per_interface"]
    recorded = {name: t["NetworkInfo"]["Ipv4AddressesPerInterface"] for name, t in moto_instance_types().items()}
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
    plan = scale(group("p5", 4)).with_(addons=[{"name": "vpc-cni", "configurationValues": config}]).plan()
    assert plan.addresses.settings.prefix_delegation and plan.addresses.generated_env == {}
    p5 = next(g for g in plan.addresses.groups if g.name == "p5")
    assert p5.per_node.pods % 16 == 0 and p5.per_node.pods > 50
    assert "prefix delegation" in plan.summary()


def test_fails_pods_that_do_not_fit_with_the_user_s_settings_and_says_what_to_do():
    config = '{"env":{"MINIMUM_IP_TARGET":"40","WARM_IP_TARGET":"5"}}'
    spec = scale(group("p5", 1000)).with_(addons=[{"name": "vpc-cni", "configurationValues": config}])
    (p,) = [p for p in spec.problems() if p.field == "vpc.cidr"]
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
