"""EFA-enabled FSx for Lustre (``storage.efa``), planned (efa_stack/planning/lustre_efa.py): the spec's refusals with
their fixes, which nodes run AWS's EFA client setup and how many LNet EFA interfaces they bind. The file system
construct: tests/aws_constructs/test_fsx.py; the example spec's synth: tests/stacks/test_storage_stack.py;
``verify --acceptance``'s proof that Lustre rides EFA: tests/acceptance/test_lustre_efa.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from efa_stack.planning import lustre_efa
from efa_stack.planning.node_groups import LustreEfaClient
from efa_stack.planning.plan import plan_from_file
from efa_stack.planning.storage import MetadataPlan, capacity_allowed
from efa_stack.planning.user_data import node_user_data
from tests.builders import BASE, Spec, cpu_group, node_group, shipped
from tests.support import CLUSTERS, plan_of

EFA_STORAGE = {"perUnitStorageThroughput": 1000, "storageCapacityGiB": 4800,
               "metadataConfiguration": {"mode": "AUTOMATIC"}, "efa": True}
EFA = BASE.with_(storage=EFA_STORAGE)
"""A valid EFA-enabled file system for the test spec's p5.48xlarge group ``gpu`` (us-west-2a)."""


def efa_spec(*groups: dict[str, Any], **storage: Any) -> Spec:
    """:data:`EFA` with ``storage`` fields merged into its storage section (None removes one) and ``groups`` added."""
    return EFA.add(*groups).with_(storage=storage)


def gpu2(instance_type: str, zone: str = "us-west-2a") -> dict[str, Any]:
    return node_group("gpu2", instance_type, zones=(zone,), private=True)


# --- the spec: refusals, each with its fix ---------------------------------------------------------------


def test_a_valid_efa_file_system_is_accepted():
    assert EFA.plan().storage.efa


def test_fails_efa_on_a_deployment_type_other_than_persistent_2():
    # a PERSISTENT_1 file system cannot have the metadata configuration EFA needs either: both are said
    problems = efa_spec(deploymentType="PERSISTENT_1", perUnitStorageThroughput=200, metadataConfiguration=None).problems()
    assert [p.field for p in problems] == ["storage.deploymentType", "storage.metadataConfiguration"]
    p = problems[0]
    assert p.value == "PERSISTENT_1" and "PERSISTENT_2" in p.message
    assert p.fix == "use deploymentType: PERSISTENT_2, or set efa: false"


def test_fails_efa_without_a_metadata_configuration():
    p = efa_spec(metadataConfiguration=None).one_problem()
    assert p.field == "storage.metadataConfiguration"
    assert p.fix.startswith("add metadataConfiguration: {mode: AUTOMATIC}")


@pytest.mark.parametrize(("tier", "gib", "step", "near"), [
    (1000, 2400, 4800, "4800"),
    (500, 4800, 9600, "9600"),
    (250, 9600, 19200, "19200"),
    (125, 19200, 38400, "38400"),
    (1000, 7200, 4800, "4800 or 9600"),
])
def test_fails_efa_capacity_below_or_between_the_tiers_steps(tier, gib, step, near):
    p = efa_spec(perUnitStorageThroughput=tier, storageCapacityGiB=gib).one_problem()
    assert (p.field, p.value) == ("storage.storageCapacityGiB", gib)
    assert f"multiples of {step} GiB" in p.message
    assert p.fix.startswith(f"use storageCapacityGiB: {near};")


def test_the_capacity_floor_at_250_is_16_times_the_smallest_file_system():
    p = efa_spec(perUnitStorageThroughput=250, storageCapacityGiB=1200).one_problem()
    assert "16 times the 1200 GiB" in p.message


def test_efa_capacity_advice_keeps_every_rule():
    # GIVEN the advice for an undersized EFA-enabled file system at the default tier (125 MB/s/TiB)
    p = efa_spec(perUnitStorageThroughput=None, storageCapacityGiB=3000).one_problem()
    advised = [int(v) for v in re.findall(r"\d+", p.fix.split(";")[0])]
    assert advised == [38400]
    # THEN the advised capacity is one FSx accepts with and without EFA, and the spec with it is accepted
    assert all(capacity_allowed("PERSISTENT_2", v) for v in advised)
    assert efa_spec(perUnitStorageThroughput=None, storageCapacityGiB=38400).plan().storage.capacity_gib == 38400


def test_fails_an_efa_node_group_in_another_zone_than_the_file_system():
    p = efa_spec(gpu2("p5.48xlarge", "us-west-2b")).one_problem()
    assert (p.field, p.value) == ("storage.efa", True)
    assert "gpu2 (us-west-2b)" in p.message and "would use TCP" in p.message
    assert p.fix == "put those node groups in us-west-2a (availabilityZones: [us-west-2a]), or set efa: false"
    # AND the advice is accepted
    assert efa_spec(gpu2("p5.48xlarge")).plan().storage.efa


def test_fails_efa_without_an_efa_node_group():
    p = next(p for p in EFA.with_group(efaEnabled=None).problems() if p.field.startswith("storage"))
    assert (p.field, p.fix) == ("storage.efa", "set efaEnabled: true on a GPU node group, or set efa: false")


def test_fails_gds_on_an_instance_type_off_the_scripts_allowlist():
    p = efa_spec(gpu2("p4d.24xlarge"), gpuDirectStorage=True).one_problem()
    assert (p.field, p.value) == ("managedNodeGroups[1].instanceType", "p4d.24xlarge")
    assert "--optimized-for-gds" in p.message
    assert p.fix.startswith("use one of p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p6-b200.48xlarge for node group gpu2")


def test_fails_gds_without_efa():
    p = BASE.with_(storage={"gpuDirectStorage": True}).one_problem()
    assert (p.field, p.value) == ("storage.gpuDirectStorage", True)
    assert p.fix.startswith("remove gpuDirectStorage")


@pytest.mark.parametrize(("storage", "field", "fix"), [
    ({"mode": "AUTOMATIC", "iops": 3000}, "storage.metadataConfiguration.iops",
     "remove iops, or set mode: USER_PROVISIONED"),
    ({"mode": "USER_PROVISIONED"}, "storage.metadataConfiguration.iops",
     "set iops: 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000, or use mode: AUTOMATIC"),
    ({"mode": "USER_PROVISIONED", "iops": 9000}, "storage.metadataConfiguration.iops",
     "use 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000"),
])
def test_fails_metadata_configurations_fsx_refuses(storage, field, fix):
    p = efa_spec(metadataConfiguration=storage).one_problem()
    assert (p.field, p.fix) == (field, fix)


def test_fails_metadata_configuration_on_a_scratch_file_system():
    p = BASE.with_(storage={"deploymentType": "SCRATCH_2", "metadataConfiguration": {"mode": "AUTOMATIC"}}).one_problem()
    assert p.field == "storage.metadataConfiguration"
    assert p.fix == "remove metadataConfiguration, or use deploymentType: PERSISTENT_2"


def test_user_provisioned_metadata_iops_are_planned():
    plan = efa_spec(metadataConfiguration={"mode": "USER_PROVISIONED", "iops": 24000}).plan()
    assert plan.storage.metadata == MetadataPlan("USER_PROVISIONED", 24000)


# --- the plan: who runs the EFA client, with how many LNet interfaces -------------------------------------


def test_efa_groups_run_the_client_with_the_catalogs_interface_count_and_cpu_groups_do_not():
    groups = {g.name: g for g in efa_spec(cpu_group(min_size=None, availabilityZones=["us-west-2a"])).plan().node_groups}
    assert groups["gpu"].lustre_efa == LustreEfaClient(gds=False, lnet_interfaces=8)
    assert groups["cpu"].lustre_efa is None and groups["cpu"].lustre_client


def test_an_instance_type_without_a_figure_expects_at_least_one_interface():
    plan = efa_spec(gpu2("p4d.24xlarge")).plan()
    assert plan.node_group("gpu2").lustre_efa == LustreEfaClient(gds=False, lnet_interfaces=None)


def test_without_efa_no_node_runs_the_client():
    assert not any(g.lustre_efa for g in plan_from_file(CLUSTERS / "fsx.yaml").all_node_groups)


def test_the_interface_counts_are_the_sources_agreement():
    # FSx guide's table and aws-parallelcluster-cookbook's EFA_EXPECTED_BOUND_DEVICES (data/fsx_lustre_efa.json)
    assert {t: lustre_efa.lnet_interfaces(t) for t in ("p5.48xlarge", "p5en.48xlarge", "p6-b300.48xlarge")} == {
        "p5.48xlarge": 8, "p5en.48xlarge": 8, "p6-b300.48xlarge": 16}
    assert lustre_efa.lnet_interfaces("p6e-gb200.36xlarge") is None


def test_user_data_runs_awss_setup_after_the_lustre_client():
    client = LustreEfaClient(gds=False, lnet_interfaces=8)
    text = node_user_data(0, True, lustre_efa=client)
    assert text is not None
    lines = text.splitlines()
    setup = lines.index('(cd "$efa_fsx/configure-efa-fsx-lustre-client" && ./setup.sh)')
    assert lines.index("dnf install -y lustre-client") < setup
    assert any(lustre_efa.CLIENT_PACKAGE_URL in ln and ln.startswith("curl -fsSL") for ln in lines[:setup])
    gds = node_user_data(0, True, lustre_efa=LustreEfaClient(gds=True))
    assert gds is not None and "./setup.sh --optimized-for-gds)" in gds


def test_fails_the_efa_client_without_the_lustre_client():
    with pytest.raises(ValueError, match="needs lustre_client"):
        node_user_data(0, False, lustre_efa=LustreEfaClient())


def test_karpenter_pools_in_the_zone_run_the_client_too():
    from k8s.karpenter import node_class_spec

    plan = plan_of(shipped("karpenter-p5", storage=EFA_STORAGE))
    (pool,) = plan.karpenter.pools
    assert pool.group.lustre_efa == LustreEfaClient(gds=False, lnet_interfaces=8)
    assert "./setup.sh)" in node_class_spec(pool, plan.karpenter, "node-role")["userData"]
    assert plan.storage.availability_zone == pool.group.availability_zone
