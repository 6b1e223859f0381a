"""The catalog knows every instance type EC2 sells that moto's recording (or the cited supplement) has.

GIVEN the system and CPU types of most public eksctl configs (c5, m5) and older GPU types (p3, g3),
WHEN a spec uses them, THEN it plans; a type the catalog lacks gets the advice to refresh the catalog,
and a type with accelerators efa-stack has no device plugin for says so.
"""

from __future__ import annotations

import json

import pytest

from efa_stack.planning import catalog
from efa_stack.planning.catalog import SUPPLEMENT_FILE
from efa_stack.planning.plan import build_plan
from efa_stack.spec.errors import SpecError
from efa_stack.spec.models import ClusterSpec
from tests.support import moto_instance_types

# Instance families listed on the EC2 documentation's instance-type pages ("Amazon EC2 instance
# types": general purpose gp.html, compute optimized co.html, memory optimized mo.html, storage
# optimized so.html, accelerated computing ac.html, high-performance computing hpc.html, under
# https://docs.aws.amazon.com/ec2/latest/instancetypes/).
DOC_FAMILIES = ["a1", "m4", "m5", "m5a", "m5ad", "m5d", "m5dn", "m5n", "m5zn", "m6a", "m6g", "m6gd", "m6i", "m6id", "m6idn", "m6in", "m7a", "m7g", "m7gd", "m7i", "m7i-flex", "m8g", "m8gd", "mac1", "mac2", "mac2-m1ultra", "mac2-m2", "mac2-m2pro", "t2", "t3", "t3a", "t4g", "c4", "c5", "c5a", "c5ad", "c5d", "c5n", "c6a", "c6g", "c6gd", "c6gn", "c6i", "c6id", "c6in", "c7a", "c7g", "c7gd", "c7gn", "c7i", "c7i-flex", "c8g", "c8gd", "c8gn", "r4", "r5", "r5a", "r5ad", "r5b", "r5d", "r5dn", "r5n", "r6a", "r6g", "r6gd", "r6i", "r6id", "r6idn", "r6in", "r7a", "r7g", "r7gd", "r7i", "r7iz", "r8g", "r8gd", "u-3tb1", "u-6tb1", "u7i-12tb", "u7in-16tb", "x1", "x1e", "x2gd", "x2idn", "x2iedn", "x2iezn", "x8g", "z1d", "d2", "d3", "d3en", "h1", "i3", "i3en", "i4g", "i4i", "i7i", "i7ie", "i8g", "im4gn", "is4gen", "dl1", "dl2q", "f2", "g3", "g4dn", "g5", "g5g", "g6", "g6e", "g6f", "gr6", "gr6f", "inf1", "inf2", "p3", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "trn1", "trn1n", "trn2", "vt1", "hpc6a", "hpc6id", "hpc7a", "hpc7g"]

SUPPLEMENT = json.loads(SUPPLEMENT_FILE.read_text())["instance_types"]


def _family(name: str) -> str:
    return name.split(".", 1)[0]


def test_every_documented_family_moto_or_the_supplement_knows_is_in_the_catalog_with_every_size():
    known = set(catalog.names())
    sources = [*moto_instance_types(), *SUPPLEMENT]
    missing = [t for t in sources if _family(t) in DOC_FAMILIES and t not in known]
    assert missing == []
    covered = {_family(t) for t in sources}
    assert {"c5", "m5", "r5", "p3", "g3", "dl1"} <= covered & set(DOC_FAMILIES)


def test_every_type_moto_knows_is_in_the_catalog_whatever_its_generation_flag():
    assert set(moto_instance_types()) <= set(catalog.names())


@pytest.mark.parametrize("name", sorted(SUPPLEMENT))
def test_supplement_types_carry_their_documented_figures_and_a_source(name):
    data = json.loads(SUPPLEMENT_FILE.read_text())
    assert data["sources"][name].startswith("https://docs.aws.amazon.com/")
    assert catalog.get(name).model_dump(exclude_none=True) == catalog.InstanceType.model_validate(
        SUPPLEMENT[name]).model_dump(exclude_none=True)


def test_p3_figures_from_the_ec2_documentation():
    p3 = catalog.get("p3.16xlarge")
    assert (p3.gpus, p3.vcpus, p3.memory_mib, p3.efa_supported) == (8, 64, 488 * 1024, False)
    assert p3.accelerator == "nvidia" and p3.gpu is not None and p3.gpu.name == "V100"


def _spec(system: str, groups: list[dict]) -> ClusterSpec:
    return ClusterSpec.model_validate({
        "metadata": {"name": "t", "region": "us-west-2"},
        "availabilityZones": ["us-west-2a", "us-west-2b"],
        "systemNodeGroup": {"instanceType": system},
        "managedNodeGroups": groups,
    })


@pytest.mark.parametrize("system", ["m5.large", "c5.xlarge", "c5.2xlarge", "m5.4xlarge"])
def test_previous_generation_flagged_types_plan_as_the_system_group(system):
    plan = build_plan(_spec(system, [{"name": "cpu", "instanceType": "c5.2xlarge"}]))
    assert plan.system.instance_type == system
    assert plan.node_group("cpu").role == "cpu"


def test_p3_plans_as_a_gpu_group_without_efa():
    plan = build_plan(_spec("m5.large", [{"name": "v100", "instanceType": "p3.8xlarge"}]))
    assert plan.node_group("v100").gpus_per_node == 4 and plan.node_group("v100").efa_devices_per_node == 0


def _problem(instance_type: str):
    with pytest.raises(SpecError) as info:
        build_plan(_spec("m5.large", [{"name": "g", "instanceType": instance_type}]))
    (p,) = info.value.problems
    return p


def test_fails_unknown_type_advises_a_catalog_refresh_not_a_near_miss():
    p = _problem("p7.48xlarge")
    assert p.field == "managedNodeGroups[0].instanceType" and p.message == "unknown instance type"
    assert "efa-stack catalog refresh" in p.fix and "did you mean" not in p.fix


def test_fails_another_family_one_letter_away_is_not_suggested():
    assert catalog.typo_suggestions("c5.xlarge", ["c5a.xlarge", "c5d.xlarge"]) == []
    assert catalog.typo_suggestions("p4.24xlarge", ["p4d.24xlarge"]) == []
    assert catalog.typo_suggestions("c5.", ["c5.large", "c5.xlarge"]) == []
    assert catalog.typo_suggestions("p5.48xl", ["p5.48xlarge", "p5e.48xlarge"]) == ["p5.48xlarge"]


def test_fails_clear_typo_suggests_the_known_type():
    assert "did you mean p5.48xlarge?" in _problem("p5.48xlarg").fix
    assert "did you mean p5.48xlarge?" in _problem("P5.48xlarge").fix
    assert "did you mean p4d.24xlarge?" in _problem("p4d.24xlagre").fix


def test_fails_dl1_says_gaudi_is_not_supported():
    p = _problem("dl1.24xlarge")
    assert p.message.startswith("dl1.24xlarge carries Habana Gaudi")
    assert "efa-stack does not support (no device plugin)" in p.message
    assert "NVIDIA" in p.fix and "Trainium" in p.fix


@pytest.mark.parametrize(("name", "maker"), [("dl2q.24xlarge", "Qualcomm"), ("vt1.3xlarge", "Xilinx"),
                                             ("f2.6xlarge", "Xilinx")])
def test_fails_other_unsupported_accelerators_say_so(name, maker):
    p = _problem(name)
    assert maker in p.message and "does not support" in p.message


def test_unsupported_accelerators_are_exactly_the_non_nvidia_non_neuron_ones():
    for name in catalog.names():
        it = catalog.get(name)
        flagged = it.unsupported_accelerator is not None
        has_other = (it.gpu is not None and it.gpu.manufacturer.upper() != "NVIDIA") or (
            it.other_accelerator is not None and it.neuron is None)
        assert flagged == has_other, name
