"""Shared training storage as the spec says it and the plan derives it (efa_stack/planning/storage.py): defaults, the S3
link, FSx for Lustre's capacity and throughput rules, every bad input refused before any CloudFormation, and what
the storage changes in the NCCL job and the nodes. The file system construct: tests/aws_constructs/test_fsx.py; the
storage part of the cluster stack: tests/stacks/test_storage_stack.py."""

from __future__ import annotations

import pytest

from efa_stack.planning.plan import build_plan, plan_from_file
from efa_stack.planning.storage import S3LinkPlan, bucket_name_problem, capacity_allowed, validate_storage
from efa_stack.spec.errors import SpecError
from efa_stack.spec.loader import parse_spec
from tests.builders import BASE, SCRATCH_STORAGE, Spec, cpu_group, merged
from tests.support import CLUSTERS

SCRATCH = BASE.with_(storage=SCRATCH_STORAGE)
"""SCRATCH_2, S3 linked through its import path (the storage of tests.builders.PRIVATE)."""


def storage_problems(spec: Spec) -> list:
    """The storage problems of a spec, whether or not build_plan already runs validate_storage."""
    parsed = parse_spec(spec.text, source="t.yaml")
    try:
        plan = build_plan(parsed, source="t.yaml")
    except SpecError as exc:
        return [p for p in exc.problems if p.field.startswith("storage")]
    return validate_storage(parsed, plan.node_groups)


def one_problem(spec: Spec):
    problems = storage_problems(spec)
    assert len(problems) == 1, [p.render() for p in problems]
    return problems[0]


def with_storage(**section) -> Spec:
    return BASE.with_(storage=section)


def scratch_s3(**link) -> Spec:
    return BASE.with_(storage=merged(SCRATCH_STORAGE, {"s3": link}))


def test_enabled_false_keeps_the_section_but_creates_nothing():
    plan = with_storage(enabled=False, storageCapacityGiB=3000).plan()
    assert plan.storage is None


def test_defaults_follow_the_gpu_node_group():
    # GIVEN a spec with a CPU group first and the EFA GPU group second
    spec = BASE.replace(groups=(cpu_group(min_size=None), *BASE.groups))
    # WHEN storage is turned on with defaults
    plan = spec.with_(storage={}).plan()
    sp = plan.storage
    # THEN the file system sits in the GPU group's zone, as PERSISTENT_2 at the lowest throughput
    assert (sp.node_group, sp.availability_zone) == ("gpu", "us-west-2a")
    assert (sp.deployment_type, sp.capacity_gib, sp.per_unit_storage_throughput) == ("PERSISTENT_2", 1200, 125)
    assert sp.mount_path == "/fsx" and sp.claim_name == "fsx-claim" and sp.capacity_quantity == "1200Gi"
    assert sp.lustre_version == "2.15" and sp.s3 is None and not sp.dynamic_provisioning
    assert [(t.key, t.effect) for t in sp.tolerations] == [("nvidia.com/gpu", "NoSchedule")]


def test_scratch_link_uses_import_path_and_association_only_on_persistent_2():
    sp = SCRATCH.plan().storage
    assert sp.s3.kind == "import-path" and not sp.uses_association
    assert sp.s3.data_repository_path == "s3://training-data.example/tfrecords/"
    assert sp.s3.auto_import_policy == "NEW_CHANGED"
    assert S3LinkPlan("b1b", "", "import-path", "/", True, (), ()).data_repository_path == "s3://b1b/"
    assert sp.per_unit_storage_throughput is None
    p2 = SCRATCH.with_(storage={"deploymentType": "PERSISTENT_2"}).plan().storage
    assert p2.s3.kind == "association" and p2.uses_association


@pytest.mark.parametrize(
    ("deployment_type", "gib", "ok"),
    [
        ("SCRATCH_2", 1200, True), ("SCRATCH_2", 2400, True), ("SCRATCH_2", 4800, True), ("SCRATCH_2", 3600, False),
        ("PERSISTENT_2", 7200, True), ("PERSISTENT_2", 1000, False), ("PERSISTENT_1", 9600, True),
        ("SCRATCH_1", 3600, True), ("SCRATCH_1", 7200, True), ("SCRATCH_1", 4800, False),
    ],
)
def test_capacity_rules_per_deployment_type(deployment_type, gib, ok):
    assert capacity_allowed(deployment_type, gib) is ok


@pytest.mark.parametrize("name", ["abc", "my-bucket.v2", "training-data.example", "a" * 63, "1bucket"])
def test_bucket_names_that_are_bucket_names(name):
    assert bucket_name_problem(name) is None


def test_fails_capacity_not_allowed_for_the_deployment_type():
    p = one_problem(with_storage(deploymentType="PERSISTENT_2", storageCapacityGiB=3000))
    assert (p.field, p.value) == ("storage.storageCapacityGiB", 3000)
    assert "not allowed for deploymentType PERSISTENT_2" in p.message
    assert "multiple of 2400" in p.fix and "2400 or 4800" in p.fix


def test_fails_capacity_of_scratch_1_in_steps_of_2400():
    p = one_problem(with_storage(deploymentType="SCRATCH_1", storageCapacityGiB=4800))
    assert p.value == 4800 and "multiple of 3600" in p.fix and "3600 or 7200" in p.fix


def test_fails_throughput_not_allowed_for_the_deployment_type():
    p = one_problem(with_storage(deploymentType="PERSISTENT_2", perUnitStorageThroughput=200))
    assert (p.field, p.value) == ("storage.perUnitStorageThroughput", 200)
    assert "not allowed for deploymentType PERSISTENT_2" in p.message
    assert p.fix == "use one of 125, 250, 500, 1000 (MB/s per TiB)"


def test_fails_throughput_on_a_scratch_file_system():
    p = one_problem(with_storage(deploymentType="SCRATCH_2", perUnitStorageThroughput=125))
    assert p.field == "storage.perUnitStorageThroughput" and "SCRATCH_2" in p.message
    assert "remove perUnitStorageThroughput" in p.fix


def test_fails_s3_export_on_a_deployment_type_that_cannot_have_one():
    # GIVEN a SCRATCH_2 file system, which links S3 through ImportPath (no data repository association)
    spec = scratch_s3(autoExport=["NEW"])
    # WHEN the spec is validated THEN automatic export is refused, naming the type and the way out
    p = one_problem(spec)
    assert (p.field, p.value) == ("storage.s3.autoExport", ["NEW"])
    assert "data repository association" in p.message and "SCRATCH_2" in p.message
    assert "PERSISTENT_2" in p.fix


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"fileSystemPath": "/datasets"}, "storage.s3.fileSystemPath"),
        ({"importOnCreate": False}, "storage.s3.importOnCreate"),
    ],
)
def test_fails_association_only_link_settings_on_scratch(section, field):
    assert one_problem(scratch_s3(**section)).field == field


def test_fails_auto_import_events_the_import_path_link_cannot_express():
    p = one_problem(scratch_s3(autoImport=["CHANGED"]))
    assert (p.field, p.value) == ("storage.s3.autoImport", ["CHANGED"])


@pytest.mark.parametrize(
    ("bucket", "why"),
    [
        ("s3://my-bucket", "bucket name alone"),
        ("my-bucket/tfrecords", "bucket name alone"),
        ("ab", "3 to 63"),
        ("b" * 64, "3 to 63"),
        ("My_Bucket", "lowercase"),
        ("-bucket", "begin and end"),
        ("bucket.", "begin and end"),
        ("my..bucket", "two adjacent periods"),
        ("192.168.5.4", "IP address"),
        ("xn--bucket", "'xn--'"),
        ("data-s3alias", "'-s3alias'"),
    ],
)
def test_fails_a_bucket_name_that_is_not_a_bucket_name(bucket, why):
    p = one_problem(with_storage(s3={"bucket": bucket}))
    assert (p.field, p.value) == ("storage.s3.bucket", bucket)
    assert p.message == "not an S3 bucket name" and why in p.fix


def test_fails_storage_node_group_that_does_not_exist():
    p = one_problem(with_storage(nodeGroup="gpus"))
    assert (p.field, p.value) == ("storage.nodeGroup", "gpus") and "gpu" in p.fix


def test_fails_all_storage_problems_at_once():
    problems = storage_problems(with_storage(
        deploymentType="SCRATCH_2", storageCapacityGiB=1000, perUnitStorageThroughput=50,
        s3={"bucket": "Bad_Bucket", "autoExport": ["NEW"]},
    ))
    assert {p.field for p in problems} == {
        "storage.storageCapacityGiB", "storage.perUnitStorageThroughput", "storage.s3.bucket", "storage.s3.autoExport",
    }


@pytest.mark.parametrize(
    ("section", "field", "fix"),
    [
        ({"deploymentTyp": "SCRATCH_2"}, "storage.deploymentTyp", "did you mean 'deploymentType'?"),
        ({"deploymentType": "SCRATCH_3"}, "storage.deploymentType", "use one of"),
        ({"dataCompression": "GZIP"}, "storage.dataCompression", "use one of"),
        ({"s3": {"bucket": "b1b", "autoExport": ["MOVED"]}}, "storage.s3.autoExport[0]", "use one of"),
    ],
)
def test_fails_malformed_storage_section_before_planning(section, field, fix):
    with pytest.raises(SpecError) as info:
        parse_spec(with_storage(**section).text, source="t.yaml")
    (p,) = info.value.problems
    assert p.field == field and fix in p.fix


def test_fails_bad_storage_before_any_cloudformation():
    """The storage plan exists only inside a plan, and build_plan validates the section first."""
    spec = parse_spec(with_storage(storageCapacityGiB=3000).text)
    with pytest.raises(SpecError) as info:
        build_plan(spec)
    assert [p.field for p in info.value.problems] == ["storage.storageCapacityGiB"]


def test_nccl_job_mounts_the_claim_and_nodes_get_the_lustre_client():
    """The storage section reaches the NCCL job and the GPU nodes' user data, from one spec."""
    import yaml

    from k8s.dist import render_dist

    plan = plan_from_file(CLUSTERS / "fsx.yaml")
    sp = plan.storage
    (job,) = [o for o in yaml.safe_load_all(render_dist(plan)["40-nccl-tests.yaml"]) if o and o["kind"] == "MPIJob"]
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": sp.claim_name}} in worker["volumes"]
    assert {"mountPath": sp.mount_path, "name": "fsx"} in worker["containers"][0]["volumeMounts"]
    gpu = [n for n in plan.node_groups if n.role == "gpu"]
    assert gpu and all(n.lustre_client for n in gpu) and not plan.system.lustre_client


def test_every_node_group_that_can_mount_the_claim_gets_the_lustre_client():
    """The claim is ReadWriteMany and the CSI node plugin runs on every node: CPU node groups mount it
    too, so they install the client as well (not only GPU/Neuron groups)."""
    plan = BASE.add(cpu_group(min_size=None, availabilityZones=["us-west-2a"])).with_(storage={}).plan()
    assert {n.name: n.lustre_client for n in plan.node_groups} == {"gpu": True, "cpu": True}


def test_nodes_without_storage_do_not_install_lustre():
    assert not any(n.lustre_client for n in plan_from_file(CLUSTERS / "default.yaml").all_node_groups)
