"""Advice that fits the case: every problem at once, eksctl fields mapped to what efa-stack says
instead, and fixes that name something a user can read."""

from __future__ import annotations

from pathlib import Path

import pytest

from efa_stack.planning import catalog
from tests.support import BASE, plan_of, problems_of
from tests.support import structural_problems as structural


def test_fails_every_problem_reported_with_a_group_that_has_one_already():
    # GIVEN a GPU node group with a problem of its own (public subnets) and an ncclTest that
    # would not fit on its nodes
    text = BASE.replace("privateNetworking: true", "privateNetworking: false") + "ncclTest: {memoryMiB: 4000000}\n"
    # WHEN it is planned, THEN both problems are reported, not only the first
    fields = [p.field for p in problems_of(text)]
    assert fields == ["managedNodeGroups[0].privateNetworking", "ncclTest.memoryMiB"]


def test_fails_every_problem_reported_with_an_unknown_instance_type():
    # GIVEN an unknown instance type next to problems elsewhere in the same group and the spec
    text = (BASE.replace("p5.48xlarge", "p9.mega").replace("minSize: 1", "minSize: 5")
            + "    capacity: {type: reservation}\n"
            + "  - {name: cpu, instanceType: m7i.large, privateNetworking: false}\n"
            + "systemNodeGroup: {instanceType: g5.xlarge}\n"
            + "ncclTest: {nodeGroup: nope}\n")
    fields = [p.field for p in problems_of(text)]
    assert fields == [
        "managedNodeGroups[0].instanceType",
        "managedNodeGroups[0].minSize/desiredCapacity/maxSize",
        "managedNodeGroups[0].capacity.reservationId",
        "managedNodeGroups[1].privateNetworking",
        "systemNodeGroup.instanceType",
        "ncclTest.nodeGroup",
    ]


def test_fails_unknown_instance_type_points_at_the_catalog_command():
    (p,) = problems_of(BASE.replace("p5.48xlarge", "zz9.huge"))
    assert p.field == "managedNodeGroups[0].instanceType"
    assert "efa-stack catalog list" in p.fix
    assert "spec/data" not in p.fix


def test_fails_unknown_region_lists_the_regions():
    problems = problems_of(BASE.replace("region: us-west-2", "region: xx-east-7"))
    p = next(p for p in problems if p.field == "metadata.region")
    assert "spec/data" not in p.fix
    for region in ("us-east-1", "us-west-2", "eu-west-1"):
        assert region in p.fix
    assert len(p.fix.split(", ")) == len(catalog.regions())


@pytest.mark.parametrize(("field", "fix"), [
    ("securityGroup", "creates the cluster and EFA security groups"),
    ("ipv6Cidr", "IPv4 clusters"),
])
def test_fails_unsupported_vpc_field_explained(field, fix):
    (p,) = structural(BASE + f"vpc:\n  {field}: x\n")
    assert p.field == f"vpc.{field}"
    assert p.message == "an eksctl field that efa-stack does not support"
    assert fix in p.fix
    assert "did you mean" not in p.fix


CB = "cr-0123456789abcdef0"


def test_eksctl_capacity_block_plans_as_capacity():
    # GIVEN eksctl's way of saying "launch into this Capacity Block" (types.go CapacityReservation,
    # InstanceMarketOptions): the same as capacity: {type: capacity-block, reservationId: ...}
    text = BASE + (
        "    capacityReservation:\n      capacityReservationTarget:\n"
        f"        capacityReservationID: {CB}\n"
        "    instanceMarketOptions:\n      marketType: capacity-block\n"
    )
    (group,) = plan_of(text).node_groups
    assert (group.capacity, group.reservation_id) == ("capacity-block", CB)


def test_eksctl_reservation_target_plans_as_reservation():
    text = BASE + f"    capacityReservation: {{capacityReservationTarget: {{capacityReservationID: {CB}}}}}\n"
    (group,) = plan_of(text).node_groups
    assert (group.capacity, group.reservation_id, group.placement_group) == ("reservation", CB, False)


def test_fails_eksctl_open_reservation_preference_says_it_is_not_supported():
    (p,) = problems_of(BASE + "    capacityReservation: {capacityReservationPreference: open}\n")
    assert p.field == "managedNodeGroups[0].capacityReservation"
    assert "capacityReservationPreference: open is not supported" in p.message
    assert "capacityReservationID: cr-..." in p.fix


def test_fails_capacity_and_capacity_reservation_name_both():
    text = BASE + (
        f"    capacity: {{type: reservation, reservationId: {CB}}}\n"
        f"    capacityReservation: {{capacityReservationTarget: {{capacityReservationID: {CB}}}}}\n"
    )
    (p,) = problems_of(text)
    assert p.field == "managedNodeGroups[0].capacity"
    assert "capacity and capacityReservation both say" in p.message
    assert "remove capacity" in p.fix and "or remove capacityReservation" in p.fix


def test_fails_capacity_reservation_placeholder_id():
    text = BASE + "    capacityReservation: {capacityReservationTarget: {capacityReservationID: cr-xxxxxxxxxxxx}}\n"
    (p,) = problems_of(text)
    assert p.field == "managedNodeGroups[0].capacityReservation.capacityReservationTarget.capacityReservationID"
    assert p.value == "cr-xxxxxxxxxxxx"
    assert p.message == "a placeholder left in the file"
    assert "describe-capacity-reservations" in p.fix


def test_fixed_capacity_block_spec_plans():
    # The advice, applied, gives a valid spec.
    plan = plan_of(BASE + f"    capacity: {{type: capacity-block, reservationId: {CB}}}\n")
    assert plan.node_groups[0].capacity == "capacity-block"
    assert plan.node_groups[0].reservation_id == CB


def test_fails_catalog_refresh_without_credentials_does_not_mention_preflight(monkeypatch, tmp_path: Path):
    from typer.testing import CliRunner

    from efa_stack.tools import cli
    from tests.test_cli import no_credentials

    no_credentials(monkeypatch, tmp_path)
    result = CliRunner().invoke(cli.app, ["catalog", "refresh", "--output", str(tmp_path / "c.json"),
                                          "--regions-output", str(tmp_path / "r.json")])
    assert result.exit_code == 2
    assert "no AWS credentials" in result.stderr
    assert "preflight" not in result.stderr
    assert "run `efa-stack catalog refresh` again" in " ".join(result.stderr.split())
