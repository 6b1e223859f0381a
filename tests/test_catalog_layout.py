"""The instance catalog and the interface layouts derived from its per-card data."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App, Stack

from aws_constructs.launch_template import EfaLaunchTemplate, LaunchTemplateProps
from efa_stack.planning import catalog
from efa_stack.planning.layout import LayoutError, efa_devices, interface_layout
from tests.support import GOLDEN, golden_check

GOLDEN_TYPES = [
    "p4d.24xlarge",
    "p5.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "trn2.48xlarge",
    "g6e.48xlarge",
]


# --- catalog -------------------------------------------------------------------------------------

def test_catalog_covers_every_efa_capable_type_of_its_source():
    assert catalog.source()["efa_capable"] == len(catalog.efa_capable())
    assert len(catalog.efa_capable()) > 250


@pytest.mark.parametrize(
    ("name", "gpus", "accel", "efa", "cards"),
    [
        ("p4d.24xlarge", 8, "nvidia", 4, 4),
        ("p5.48xlarge", 8, "nvidia", 32, 32),
        ("p5en.48xlarge", 8, "nvidia", 16, 16),
        ("p6-b200.48xlarge", 8, "nvidia", 8, 8),
        ("p6-b300.48xlarge", 8, "nvidia", 16, 17),
        ("trn2.48xlarge", 0, "neuron", 16, 16),
        ("g6e.48xlarge", 8, "nvidia", 4, 4),
    ],
)
def test_catalog_records(name, gpus, accel, efa, cards):
    it = catalog.get(name)
    assert it.gpus == gpus
    assert it.accelerator == accel
    assert it.max_efa_interfaces == efa
    assert len(it.network_cards) == cards


def test_trn2_has_neuron_devices():
    it = catalog.get("trn2.48xlarge")
    assert it.neuron_devices == 16 and it.neuron.name == "Trainium2"


def test_p6_b300_card_zero_is_ena_only():
    card0 = catalog.get("p6-b300.48xlarge").network_cards[0]
    assert card0.interface_types == ("interface",)


def test_unknown_type_suggests_close_names():
    with pytest.raises(catalog.UnknownInstanceType) as info:
        catalog.get("p5.48xlarg")
    assert "p5.48xlarge" in info.value.suggestions


def test_regions_list_zones():
    assert "us-west-2a" in catalog.regions()["us-west-2"]


# --- layouts: fine-grained -----------------------------------------------------------------------

def test_current_layout_p5():
    lay = interface_layout(catalog.get("p5.48xlarge"))
    assert lay[0] == (0, 0, "interface")
    assert lay[1] == (0, 1, "efa-only")
    assert all(i == (i.network_card_index, 0, "efa-only") for i in lay[2:])
    assert efa_devices(lay) == 32


def test_current_layout_p6_b300_skips_ena_only_card():
    lay = interface_layout(catalog.get("p6-b300.48xlarge"))
    assert lay[0] == (0, 0, "interface")
    assert not any(i.network_card_index == 0 and i.is_efa for i in lay)
    assert [i.network_card_index for i in lay[1:]] == list(range(1, 17))
    assert efa_devices(lay) == 16


def test_legacy_layout_p4d():
    lay = interface_layout(catalog.get("p4d.24xlarge"), "legacy")
    assert lay == ((0, 0, "efa"), (1, 1, "efa"), (2, 1, "efa"), (3, 1, "efa"))


def test_ena_on_efa_cards_adds_device_one():
    lay = interface_layout(catalog.get("p5en.48xlarge"), ena_on_efa_cards=True)
    assert (1, 1, "interface") in lay and (15, 1, "interface") in lay
    assert efa_devices(lay) == 16


def test_single_interface_card_zero_uses_efa_primary():
    lay = interface_layout(catalog.get("hpc6id.32xlarge"))
    assert lay == ((0, 0, "efa"), (1, 0, "efa-only"))


def test_fails_layout_for_type_without_efa():
    with pytest.raises(LayoutError, match="does not support EFA"):
        interface_layout(catalog.get("m7i.xlarge"))


# --- layouts: property over every EFA-capable type ----------------------------------------------

def _check_layout(it, lay):
    assert efa_devices(lay) == it.max_efa_interfaces
    cards = {c.index: c for c in it.network_cards}
    primaries = [i for i in lay if i.is_primary]
    assert len(primaries) == 1 and primaries[0].interface_type != "efa-only"
    seen = set()
    for i in lay:
        assert i.interface_type in cards[i.network_card_index].interface_types, (it.name, i)
        assert (i.network_card_index, i.device_index) not in seen
        seen.add((i.network_card_index, i.device_index))
    for idx, card in cards.items():
        assert sum(1 for i in lay if i.network_card_index == idx) <= card.max_interfaces, (it.name, idx)
        assert sum(1 for i in lay if i.network_card_index == idx and i.is_efa) <= 1
    assert len(lay) <= it.max_network_interfaces


def test_every_efa_capable_type_gets_all_its_efa_devices():
    types = catalog.efa_capable()
    for it in types:
        for layout, ena in (("current", False), ("current", True), ("legacy", False)):
            _check_layout(it, interface_layout(it, layout, ena_on_efa_cards=ena))


# --- golden launch templates -------------------------------------------------------------------

@pytest.fixture(scope="module")
def launch_templates() -> dict[str, dict]:
    app = App(builtin_cloud_formation_validation=False)
    stack = Stack(app, "Golden")
    for name in GOLDEN_TYPES:
        it = catalog.get(name)
        EfaLaunchTemplate(
            stack,
            name.replace(".", "-"),
            LaunchTemplateProps(
                instance_type=name, interfaces=interface_layout(it), volume_size_gib=500, placement_group_name="pg-golden",
            ),
            security_group_ids=["sg-cluster", "sg-efa"],
        )
    template = app.synth().get_stack_by_name("Golden").template
    out = {}
    for res in template["Resources"].values():
        data = res["Properties"]["LaunchTemplateData"]
        out[data["InstanceType"]] = data
    return out


SAME_LAYOUT_AS = {"trn2.48xlarge": "p5en.48xlarge", "g6e.48xlarge": "p4d.24xlarge"}
"""Types whose launch template is another golden type's with only ``InstanceType`` changed (the catalog gives
them the same interface layout); asserted here instead of a second golden file with the same content."""


@pytest.mark.parametrize("name", GOLDEN_TYPES)
def test_golden_launch_template(launch_templates, name):
    data = launch_templates[name]
    nics = data["NetworkInterfaces"]
    efa = [n for n in nics if n["InterfaceType"] in ("efa", "efa-only")]
    assert len(efa) == catalog.get(name).max_efa_interfaces
    assert all(n["Groups"] == ["sg-cluster", "sg-efa"] for n in nics)
    assert "SecurityGroupIds" not in data and "SubnetId" not in json.dumps(data)
    golden = GOLDEN / "launch_templates" / f"{name}.json"
    if name in SAME_LAYOUT_AS:
        assert data == {**launch_templates[SAME_LAYOUT_AS[name]], "InstanceType": name}
        assert not golden.exists(), f"{golden.name}: the layout is {SAME_LAYOUT_AS[name]}'s (SAME_LAYOUT_AS)"
        return
    golden_check(golden, json.dumps(data, indent=1, sort_keys=True) + "\n")
