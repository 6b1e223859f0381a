"""Bad input is rejected before any CloudFormation exists, naming the field, the value and the fix."""

from __future__ import annotations

import pytest

from efa_stack.planning.plan import plan_from_file, plan_from_text
from efa_stack.spec.errors import SpecError
from efa_stack.spec.loader import load_spec, parse_spec
from tests.support import BASE, cluster_spec, one_problem, plan_of, problems_of, structural_problems


def test_base_spec_is_valid():
    plan = plan_of(BASE)
    assert plan.node_groups[0].efa_devices_per_node == 32


def test_fails_unknown_instance_type_with_suggestion():
    p = one_problem(BASE.replace("p5.48xlarge", "p5.48xlarg"))
    assert p.field == "managedNodeGroups[0].instanceType"
    assert p.value == "p5.48xlarg"
    assert "unknown instance type" in p.message
    assert "p5.48xlarge" in p.fix


def test_fails_efa_on_instance_type_without_efa():
    p = one_problem(BASE.replace("p5.48xlarge", "g5.xlarge"))
    assert p.field == "managedNodeGroups[0].instanceType"
    assert p.value == "g5.xlarge"
    assert "does not support EFA" in p.message
    assert "g5.8xlarge" in p.fix and "efaEnabled: false" in p.fix


def test_fails_efa_node_group_spanning_two_zones():
    p = one_problem(BASE.replace("availabilityZones: [us-west-2a]\n", "availabilityZones: [us-west-2a, us-west-2b]\n"))
    assert p.field == "managedNodeGroups[0].availabilityZones"
    assert p.value == ["us-west-2a", "us-west-2b"]
    assert "exactly one availability zone" in p.message


def test_efa_node_group_without_zone_takes_the_first_zone():
    # eksctl-io/eksctl@v0.230.0 pkg/vpc/vpc.go: an EFA node group without zones gets one subnet, "arbitrarily
    # choosing one"; efa-stack takes the cluster's first zone.
    plan = plan_of(BASE.replace("    availabilityZones: [us-west-2a]\n", ""))
    (group,) = plan.node_groups
    assert group.availability_zones == (plan.availability_zones[0],)


def test_fails_efa_node_group_in_public_subnet():
    p = one_problem(BASE.replace("privateNetworking: true", "privateNetworking: false"))
    assert p.field == "managedNodeGroups[0].privateNetworking"
    assert p.value is False
    assert "cannot get public IPs" in p.message
    assert "privateNetworking: true" in p.fix


@pytest.mark.parametrize(
    ("sizes", "values"),
    [
        ("minSize: 3\n    desiredCapacity: 2\n    maxSize: 3", {"minSize": 3, "desiredCapacity": 2, "maxSize": 3}),
        ("minSize: 1\n    desiredCapacity: 4\n    maxSize: 3", {"minSize": 1, "desiredCapacity": 4, "maxSize": 3}),
    ],
)
def test_fails_sizes_out_of_order(sizes, values):
    text = BASE.replace("minSize: 1\n    desiredCapacity: 2\n    maxSize: 3", sizes)
    p = one_problem(text)
    assert p.field == "managedNodeGroups[0].minSize/desiredCapacity/maxSize"
    assert p.value == values
    assert "minSize <= desiredCapacity <= maxSize" in p.message


@pytest.mark.parametrize("kind", ["reservation", "capacity-block"])
def test_fails_reservation_without_id(kind):
    p = one_problem(BASE + f"    capacity: {{type: {kind}}}\n")
    assert p.field == "managedNodeGroups[0].capacity.reservationId"
    assert kind in p.message
    assert "reservationId: cr-" in p.fix


def test_fails_reservation_id_on_on_demand():
    p = one_problem(BASE + "    capacity: {type: on-demand, reservationId: cr-0123456789abcdef0}\n")
    assert p.field == "managedNodeGroups[0].capacity.reservationId"
    assert p.value == "cr-0123456789abcdef0"


def test_fails_badly_formed_reservation_id():
    with pytest.raises(SpecError) as info:
        parse_spec(BASE + "    capacity: {type: reservation, reservationId: res-1}\n")
    (p,) = info.value.problems
    assert p.field == "managedNodeGroups[0].capacity.reservationId"
    assert p.value == "res-1"
    assert "cr-" in p.fix


def test_fails_placement_group_with_capacity_block():
    p = one_problem(BASE + "    placementGroup: true\n    capacity: {type: capacity-block, reservationId: cr-0123456789abcdef0}\n")
    assert p.field == "managedNodeGroups[0].placementGroup"


def test_fails_zone_outside_region():
    problems = problems_of(BASE.replace("availabilityZones: [us-west-2a, us-west-2b]", "availabilityZones: [us-west-2a, us-east-1b]"))
    p = next(p for p in problems if p.field == "availabilityZones")
    assert p.value == "us-east-1b"
    assert "not in region us-west-2" in p.message
    assert "us-west-2c" in p.fix


def test_fails_node_group_zone_not_in_cluster_zones():
    p = one_problem(BASE.replace("availabilityZones: [us-west-2a]\n", "availabilityZones: [us-west-2c]\n"))
    assert p.field == "managedNodeGroups[0].availabilityZones"
    assert p.value == "us-west-2c"


def test_fails_single_cluster_zone():
    p = one_problem(BASE.replace("availabilityZones: [us-west-2a, us-west-2b]", "availabilityZones: [us-west-2a]"))
    assert p.field == "availabilityZones"
    assert "at least two" in p.message


def test_fails_unknown_region():
    problems = problems_of(BASE.replace("region: us-west-2", "region: us-west-9"))
    assert problems[0].field == "metadata.region" and problems[0].value == "us-west-9"


def test_fails_unknown_field_with_did_you_mean():
    with pytest.raises(SpecError) as info:
        parse_spec(BASE.replace("efaEnabled: true", "efaEnabled: true\n    desiredCapcity: 2"))
    (p,) = info.value.problems
    assert p.field == "managedNodeGroups[0].desiredCapcity"
    assert p.message == "unknown field"
    assert "desiredCapacity" in p.fix


@pytest.mark.parametrize(
    ("snippet", "field", "fix"),
    [
        ("    volumeKmsKeyID: alias/k\n", "managedNodeGroups[0].volumeKmsKeyID", "remove it"),
        ("    bottlerocket: {}\n", "managedNodeGroups[0].bottlerocket", "remove it"),
    ],
)
def test_fails_unsupported_eksctl_nodegroup_fields(snippet, field, fix):
    with pytest.raises(SpecError) as info:
        parse_spec(BASE + snippet)
    (p,) = info.value.problems
    assert p.field == field
    assert "eksctl field that efa-stack does not support" in p.message
    assert fix in p.fix


def test_fails_unsupported_eksctl_top_level_field():
    with pytest.raises(SpecError) as info:
        parse_spec(BASE + "fargateProfiles: []\n")
    (p,) = info.value.problems
    assert p.field == "fargateProfiles"
    assert "does not support" in p.message


def test_fails_unsupported_kubernetes_version():
    p = one_problem(BASE.replace('version: "1.34"', 'version: "1.21"'))
    assert p.field == "metadata.version" and p.value == "1.21"
    assert "1.34" in p.fix


def test_unquoted_version_is_read_as_text():
    plan = plan_of(BASE.replace('version: "1.34"', "version: 1.34"))
    assert plan.kubernetes_version == "1.34"


def test_reports_several_problems_together():
    text = BASE.replace("p5.48xlarge", "nope.large").replace("privateNetworking: true", "privateNetworking: false")
    text = text.replace("minSize: 1\n    desiredCapacity: 2\n    maxSize: 3", "minSize: 4\n    desiredCapacity: 2\n    maxSize: 3")
    fields = {p.field for p in problems_of(text)}
    assert {
        "managedNodeGroups[0].instanceType",
        "managedNodeGroups[0].privateNetworking",
        "managedNodeGroups[0].minSize/desiredCapacity/maxSize",
    } <= fields


def test_structural_problems_are_reported_together():
    text = BASE.replace("minSize: 1", "minSize: many").replace("efaEnabled: true", "efaEnabled: true\n    bogus: 1")
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    fields = [p.field for p in info.value.problems]
    assert fields == ["managedNodeGroups[0].minSize", "managedNodeGroups[0].bogus"]


def test_a_badly_formed_name_and_the_job_naming_it_leave_the_rest_of_the_file_planned():
    # GIVEN a node group name with '_' (and the training job that names it) beside a label only efa-stack may set
    text = BASE.replace("name: gpu", "name: gpu_nodes").replace("efaEnabled: true", "efaEnabled: true\n    labels: {efa-stack.io/x: y}")
    text += ("trainingJobs:\n  - {name: llm, nodeGroup: gpu_nodes, image: nvcr.io/nvidia/pytorch:25.01-py3,"
             " command: [torchrun, x.py]}\n")
    with pytest.raises(SpecError) as info:
        plan_from_text(text)
    # THEN the two pattern errors and, in the same run, the label's problem (the name is read with a stand-in that
    # the job's reference follows, so the job raises nothing about a node group it cannot find)
    assert [p.field for p in info.value.problems] == [
        "managedNodeGroups[0].name", "trainingJobs[0].nodeGroup", "managedNodeGroups[0].labels",
    ]


def test_fails_missing_required_fields():
    with pytest.raises(SpecError) as info:
        parse_spec("apiVersion: eksctl.io/v1alpha5\nkind: ClusterConfig\n")
    fields = {p.field for p in info.value.problems}
    assert fields == {"metadata", "managedNodeGroups"}
    assert all("required" in p.message for p in info.value.problems)


def test_fails_wrong_kind():
    with pytest.raises(SpecError) as info:
        parse_spec(BASE.replace("kind: ClusterConfig", "kind: Cluster"))
    (p,) = info.value.problems
    assert p.field == "kind" and p.value == "Cluster" and "ClusterConfig" in p.fix


def test_fails_duplicate_and_reserved_node_group_names():
    text = BASE + BASE.split("managedNodeGroups:\n", 1)[1] + BASE.split("managedNodeGroups:\n", 1)[1].replace("name: gpu", "name: system")
    problems = problems_of(text)
    assert [p.field for p in problems if p.field.endswith(".name")] == ["managedNodeGroups[1].name", "managedNodeGroups[2].name"]


def test_fails_reserved_label_prefix():
    p = one_problem(BASE + "    labels: {efa-stack.io/role: mine}\n")
    assert p.field == "managedNodeGroups[0].labels" and p.value == "efa-stack.io/role"


def test_fails_accelerated_system_node_group():
    p = one_problem(BASE + "systemNodeGroup: {instanceType: g5.xlarge}\n")
    assert p.field == "systemNodeGroup.instanceType"


def test_fails_non_yaml_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("metadata: {name: x\nmanagedNodeGroups: [\n")
    with pytest.raises(SpecError) as info:
        load_spec(f)
    (p,) = info.value.problems
    assert p.field == "file"
    assert "not valid YAML" in p.message
    assert str(p.value).startswith("line ")


def test_fails_yaml_that_is_not_a_mapping(tmp_path):
    f = tmp_path / "list.yaml"
    f.write_text("- a\n- b\n")
    with pytest.raises(SpecError) as info:
        load_spec(f)
    assert "YAML mapping" in info.value.problems[0].message


def test_fails_missing_file(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "nope.yaml")
    assert "does not exist" in info.value.problems[0].message


def test_fails_unreadable_file(tmp_path):
    f = tmp_path / "binary.yaml"
    f.write_bytes(b"\xff\xfe\x00\x01garbage")
    with pytest.raises(SpecError) as info:
        load_spec(f)
    assert "not UTF-8 text" in info.value.problems[0].message


def test_render_names_field_value_and_fix():
    with pytest.raises(SpecError) as info:
        plan_of(BASE.replace("p5.48xlarge", "p5.48xlarg"))
    text = info.value.render()
    assert "t.yaml: 1 problem in the cluster spec" in text
    assert "managedNodeGroups[0].instanceType: unknown instance type (got 'p5.48xlarg'). Fix: did you mean" in text


def test_shipped_specs_are_valid():
    from tests.conftest import CLUSTERS

    for f in sorted(CLUSTERS.glob("*.yaml")):
        plan = plan_from_file(f)
        assert plan.node_groups, f


# --- numbers in range, and of the right type ------------------------------------------------------


@pytest.mark.parametrize("count", ["1000000000", "13051"])
def test_fails_node_count_beyond_eks_quota(count):
    # GIVEN maxSize above what 29 EKS node groups of 450 nodes hold (a larger group is split: tests/test_scale.py)
    (p,) = structural_problems(BASE.replace("maxSize: 3", f"maxSize: {count}"))
    assert p.field == "managedNodeGroups[0].maxSize" and p.value == int(count)
    assert "less than or equal to 13050" in p.message
    assert "450 nodes per managed node group" in p.fix and "L-BD136A63" in p.fix


def test_node_count_at_eks_quota_is_accepted():
    text = BASE.replace("minSize: 1\n    desiredCapacity: 2\n    maxSize: 3", "minSize: 0\n    desiredCapacity: 0\n    maxSize: 450")
    assert plan_of(text).node_groups[0].max_size == 450


@pytest.mark.parametrize(
    ("old", "new", "field", "value"),
    [
        ("maxSize: 3", "maxSize: 1.0e+40", "managedNodeGroups[0].maxSize", 1e40),
        ("maxSize: 3", "maxSize: 3.0", "managedNodeGroups[0].maxSize", 3.0),
        ("minSize: 1", "minSize: true", "managedNodeGroups[0].minSize", True),
        ("desiredCapacity: 2", 'desiredCapacity: "2"', "managedNodeGroups[0].desiredCapacity", "2"),
        ("efaEnabled: true", "efaEnabled: true\n    volumeSize: '300'", "managedNodeGroups[0].volumeSize", "300"),
    ],
)
def test_fails_counts_that_are_not_whole_numbers(old, new, field, value):
    (p,) = structural_problems(BASE.replace(old, new))
    assert p.field == field and p.value == value
    assert p.message == "not a whole number"
    assert "without quotes or a decimal point" in p.fix


@pytest.mark.parametrize(
    ("snippet", "field"),
    [
        ("ncclTest: {iterations: 1.5}\n", "ncclTest.iterations"),
        ("ncclTest: {stepFactor: true}\n", "ncclTest.stepFactor"),
        ("ncclTest: {hugepagesMiB: '5120'}\n", "ncclTest.hugepagesMiB"),
        ("systemNodeGroup: {minSize: 2.0}\n", "systemNodeGroup.minSize"),
        ("storage: {storageCapacityGiB: '1200'}\n", "storage.storageCapacityGiB"),
        ("storage: {perUnitStorageThroughput: 125.0}\n", "storage.perUnitStorageThroughput"),
    ],
)
def test_fails_extension_numbers_that_are_not_whole_numbers(snippet, field):
    (p,) = structural_problems(BASE + snippet)
    assert p.field == field and p.message == "not a whole number"


def test_fails_bool_given_as_text():
    (p,) = structural_problems(BASE.replace("efaEnabled: true", 'efaEnabled: "true"'))
    assert p.field == "managedNodeGroups[0].efaEnabled" and p.value == "true"
    assert p.message == "not true or false"


def test_fails_system_node_count_beyond_eks_quota():
    (p,) = structural_problems(BASE + "systemNodeGroup: {minSize: 500}\n")
    assert p.field == "systemNodeGroup.minSize" and "450" in p.fix


@pytest.mark.parametrize(("vtype", "size", "ok"), [("gp3", 16384, True), ("gp3", 16385, False), ("io1", 20000, False),
                                                 ("io2", 65536, True), ("io2", 65537, False)])
def test_volume_size_follows_ebs_limit_of_its_type(vtype, size, ok):
    text = BASE + f"    volumeType: {vtype}\n    volumeSize: {size}\n"
    if ok:
        assert parse_spec(text).managed_node_groups[0].volume_size == size
        return
    (p,) = structural_problems(text)
    assert p.field == "managedNodeGroups[0].volumeSize" and p.value == size
    assert ("io2 volumes are at most 65536 GiB" if vtype == "io2" else f"{vtype} volumes are at most 16384 GiB") in p.message \
        or "less than or equal to 65536" in p.message


def test_fails_too_many_node_groups():
    group = "  - {name: g%d, instanceType: m7i.large}\n"
    text = BASE.split("managedNodeGroups:\n")[0] + "managedNodeGroups:\n" + "".join(group % i for i in range(30))
    (p,) = structural_problems(text)
    assert p.field == "managedNodeGroups" and p.value == "30 node groups"
    assert "more than 29 node groups" in p.message and "L-6D54EA21" in p.message


def test_fails_storage_capacity_beyond_fsx_limit():
    (p,) = structural_problems(BASE + "storage: {storageCapacityGiB: 1000000000000000}\n")
    assert p.field == "storage.storageCapacityGiB"


def test_fails_vpc_range_too_small_for_the_subnets():
    # GIVEN a /20 and 2 zones whose private subnets (derived from the range by
    # planning.limits.subnet_plan) cannot hold 450 p5 nodes with 32 addressed efa interfaces each
    text = BASE.replace("maxSize: 3", "maxSize: 450\n    interfaceLayout: legacy") + "vpc: {cidr: 10.20.0.0/20}\n"
    (p,) = problems_of(text)
    assert p.field == "vpc.cidr" and p.value == "10.20.0.0/20"
    assert "cannot hold" in p.message and "larger VPC CIDR" in p.fix


def test_vpc_range_of_a_slash_18_is_accepted():
    # the fuzz test once found /18 crashing in synth ("1 of /19 exceeds remaining space"): the subnet
    # sizes now follow the range, so a /18 holds two zones
    assert plan_of(BASE + "vpc: {cidr: 10.20.0.0/18}\n").vpc_cidr == "10.20.0.0/18"


def test_vpc_range_that_holds_the_subnets_is_accepted():
    text = BASE.replace("[us-west-2a, us-west-2b]", "[us-west-2a, us-west-2b, us-west-2c]") + "vpc: {cidr: 10.20.0.0/17}\n"
    assert plan_of(text).vpc_cidr == "10.20.0.0/17"


def test_fails_max_size_zero_with_the_lower_bound_fix_not_the_quota():
    # GIVEN maxSize 0 WHEN parsed THEN the fix says what EKS needs, not the 450-node quota of the upper bound
    text = cluster_spec().replace("minSize: 1", "minSize: 0\n    desiredCapacity: 0\n    maxSize: 0")
    (p,) = problems_of(text)
    assert p.field == "managedNodeGroups[0].maxSize" and "maxSize 1 or more" in p.fix and "quota" not in p.fix
