"""eksctl configs modelled on public ones (tests/fixtures/eksctl/SOURCES.md): each synthesizes with the
expected properties, or is rejected with every problem named."""

from __future__ import annotations

import pytest

from efa_stack import contract
from efa_stack.planning import catalog
from efa_stack.planning.plan import plan_from_file
from efa_stack.spec.errors import SpecError
from tests.conftest import ROOT, synth_spec

FIXTURES = ROOT / "tests" / "fixtures" / "eksctl"
CB = "cr-0f1e2d3c4b5a69788"
ODCR = "cr-0a1b2c3d4e5f60718"

REJECTED: dict[str, list[tuple[str, str]]] = {
    # file: [(field, a phrase of its fix)], in the order reported
    "p4de-odcr.yaml": [
        ("managedNodeGroups[0].iam", "Pod Identity or IRSA"),
        ("managedNodeGroups[1].instancePrefix", "remove it"),
        ("managedNodeGroups[1].capacityReservation",
         f"replace capacityReservation with capacity: {{type: reservation, reservationId: {ODCR}}}"),
        ("managedNodeGroups[1].iam", "Pod Identity or IRSA"),
    ],
    "p5-capacity-block.yaml": [
        ("vpc.id", "always creates its own VPC"),
        ("vpc.subnets", "always creates its own VPC"),
        ("managedNodeGroups[0].capacityReservation",
         f"replace capacityReservation and instanceMarketOptions with capacity: {{type: capacity-block, reservationId: {CB}}}"),
        ("managedNodeGroups[0].instanceMarketOptions",
         f"replace capacityReservation and instanceMarketOptions with capacity: {{type: capacity-block, reservationId: {CB}}}"),
        ("managedNodeGroups[0].overrideBootstrapCommand", "remove it"),
        ("managedNodeGroups[0].iam", "Pod Identity or IRSA"),
    ],
    "access-entries.yaml": [
        ("accessConfig.accessEntries[0].accessPolicies", "add 'accessPolicies': The EKS access policies"),
        ("accessConfig.accessEntries[0].type", "remove it; known fields here: principalARN, accessPolicies"),
        ("accessConfig.accessEntries[0].kubernetesGroups", "remove it; known fields here"),
        ("accessConfig.accessEntries[2].accessPolicies", "add 'accessPolicies'"),
        ("accessConfig.accessEntries[2].type", "remove it"),
        ("accessConfig.authenticationMode", "remove it"),
    ],
    "managed-nodes.yaml": [
        ("managedNodeGroups[0].updateConfig", "remove it"),
        ("managedNodeGroups[0].securityGroups", "security groups are attached to every interface"),
        ("managedNodeGroups[0].ssh", "SSM Session Manager"),
        ("managedNodeGroups[0].iam", "Pod Identity or IRSA"),
        ("managedNodeGroups[2].instanceType", "add 'instanceType'"),
        ("managedNodeGroups[2].amiFamily", "AMI type follows the accelerator"),
        ("managedNodeGroups[2].ami", "remove it"),
        ("managedNodeGroups[3].instanceType", "add 'instanceType'"),
        ("managedNodeGroups[3].launchTemplate", "writes the launch template"),
    ],
}
ACCEPTED = ["p4de-odcr-efa-stack.yaml", "p5-capacity-block-efa-stack.yaml", "access-entries-efa-stack.yaml",
            "mixed-cpu-gpu.yaml"]


def test_every_fixture_is_judged():
    assert sorted(p.name for p in FIXTURES.glob("*.yaml")) == sorted([*REJECTED, *ACCEPTED])


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_fails_eksctl_config_with_every_problem_named(name):
    with pytest.raises(SpecError) as info:
        plan_from_file(FIXTURES / name)
    got = [(p.field, p.fix) for p in info.value.problems]
    assert [f for f, _ in got] == [f for f, _ in REJECTED[name]]
    for (_, fix), (_, phrase) in zip(got, REJECTED[name]):
        assert phrase in fix


def _synth(name: str):
    return synth_spec(str(FIXTURES / name))


def _nodegroups(s) -> dict[str, dict]:
    return {v["Properties"]["Labels"][contract.LABEL_NODE_GROUP]: v["Properties"]
            for v in s.resources("cluster", "AWS::EKS::Nodegroup").values()}


def _launch_data(s, group: dict) -> dict:
    ref = group["LaunchTemplate"]["Id"]["Ref"]
    return s.template("cluster")["Resources"][ref]["Properties"]["LaunchTemplateData"]


def _efa_nics(data: dict) -> int:
    return sum(1 for n in data.get("NetworkInterfaces", []) if n["InterfaceType"] in ("efa", "efa-only"))


def test_p4de_reservation_config_synthesizes():
    s = _synth("p4de-odcr-efa-stack.yaml")
    groups = _nodegroups(s)
    gpu = groups["p4de-odcr"]
    assert gpu["CapacityType"] == "ON_DEMAND"
    assert gpu["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 2, "MaxSize": 10}
    data = _launch_data(s, gpu)
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] == ODCR
    assert _efa_nics(data) == catalog.get("p4de.24xlarge").max_efa_interfaces == 4


def test_p5_capacity_block_config_synthesizes():
    s = _synth("p5-capacity-block-efa-stack.yaml")
    gpu = _nodegroups(s)["p5-block"]
    assert gpu["CapacityType"] == "CAPACITY_BLOCK"
    data = _launch_data(s, gpu)
    assert data["InstanceMarketOptions"]["MarketType"] == "capacity-block"
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] == CB
    assert _efa_nics(data) == 32
    assert not s.resources("cluster", "AWS::EC2::PlacementGroup")


def test_access_entries_config_synthesizes():
    s = _synth("access-entries-efa-stack.yaml")
    entries = {v["Properties"]["PrincipalArn"]: v["Properties"]
               for v in s.resources("cluster", "AWS::EKS::AccessEntry").values()
               if isinstance(v["Properties"]["PrincipalArn"], str)}  # the rest: the kubectl handler's role
    assert len(entries) == 2
    viewer = entries["arn:aws:iam::111122223333:role/role-name-1"]
    (policy,) = viewer["AccessPolicies"]
    assert policy["PolicyArn"]["Fn::Join"][1][-1].endswith("cluster-access-policy/AmazonEKSViewPolicy")
    assert policy["AccessScope"] == {"Type": "namespace", "Namespaces": ["default", "my-namespace"]}
    admin = entries["arn:aws:iam::111122223333:role/admin-role"]
    assert admin["AccessPolicies"][0]["AccessScope"] == {"Type": "cluster"}


def test_mixed_cpu_gpu_config_synthesizes():
    s = _synth("mixed-cpu-gpu.yaml")
    groups = _nodegroups(s)
    assert sorted(groups) == ["cpu-workers", "gpu", contract.SYSTEM_NODE_GROUP]
    cpu = groups["cpu-workers"]
    assert cpu["Labels"]["role"] == "worker"
    assert {"Key": "key1", "Value": "value1", "Effect": "NO_SCHEDULE"} in cpu["Taints"]
    assert cpu["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 3, "MaxSize": 4}
    gpu = groups["gpu"]
    assert _efa_nics(_launch_data(s, gpu)) == catalog.get("p5en.48xlarge").max_efa_interfaces
