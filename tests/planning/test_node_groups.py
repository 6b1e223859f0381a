"""A node group's plan (efa_stack/planning/node_groups.py): its root volume (eksctl volumeType, volumeIOPS,
volumeThroughput) and its placement group beside a capacity reservation, planned or refused."""

from __future__ import annotations

import pytest

from tests.builders import BASE

RESERVED = BASE.with_group(capacity={"type": "reservation", "reservationId": "cr-0123456789abcdef0"})


def test_fails_io1_without_iops():
    """EC2 requires Iops for io1/io2 (CloudFormation AWS::EC2::LaunchTemplate Ebs, Iops)."""
    (p,) = BASE.with_group(volumeType="io1").problems()
    assert p.field == "managedNodeGroups[0].volumeIOPS" and "volumeIOPS" in p.fix


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"volumeType": "io2", "volumeIOPS": 50}, "volumeIOPS", "between 100 and 256000"),
        ({"volumeType": "io1", "volumeSize": 100, "volumeIOPS": 6000}, "volumeIOPS", "50 IOPS per GiB"),
        ({"volumeType": "gp3", "volumeIOPS": 20000}, "volumeIOPS", "between 3000 and 16000"),
        ({"volumeType": "gp2", "volumeIOPS": 3000}, "volumeIOPS", "take no provisioned IOPS"),
        ({"volumeType": "io2", "volumeIOPS": 3000, "volumeThroughput": 500}, "volumeThroughput", "no provisioned throughput"),
        ({"volumeThroughput": 1200}, "volumeThroughput", "125-1000"),
        ({"volumeThroughput": 1000}, "volumeThroughput", "0.25 MiB/s per provisioned IOPS"),
    ],
)
def test_fails_volume_settings_ebs_does_not_take(fields, field, words):
    problems = BASE.with_group(**fields).problems()
    assert [p.field for p in problems] == [f"managedNodeGroups[0].{field}"], [p.render() for p in problems]
    assert words in problems[0].message


def test_io2_and_gp3_settings_reach_the_launch_template():
    (io2,) = BASE.with_group(volumeType="io2", volumeIOPS=16000).plan().node_groups
    assert (io2.volume_iops, io2.volume_throughput) == (16000, None)
    (gp3,) = BASE.with_group(volumeIOPS=6000, volumeThroughput=500).plan().node_groups
    assert (gp3.volume_type, gp3.volume_iops, gp3.volume_throughput) == ("gp3", 6000, 500)


def test_reservation_node_group_gets_no_new_placement_group():
    """A reservation's capacity is in a placement group only if it was created there (eksctl #7949)."""
    (ng,) = RESERVED.plan().node_groups
    assert (ng.placement_group, ng.placement_group_name) == (False, None)


def test_fails_new_placement_group_on_a_reservation():
    (p,) = RESERVED.with_group(placementGroup=True).problems()
    assert p.field == "managedNodeGroups[0].placementGroup" and "placementGroup: <name>" in p.fix


@pytest.mark.parametrize("spelling", [{"placementGroup": "pg-reserved"}, {"placement": {"groupName": "pg-reserved"}}])
def test_reservation_uses_the_named_existing_placement_group(spelling):
    (ng,) = RESERVED.with_group(**spelling).plan().node_groups
    assert (ng.placement_group, ng.placement_group_name) == (False, "pg-reserved")


def test_fails_two_different_placement_group_names():
    problems = BASE.with_group(placementGroup="pg-a", placement={"groupName": "pg-b"}).problems()
    assert [p.field for p in problems] == ["managedNodeGroups[0].placement.groupName"]
