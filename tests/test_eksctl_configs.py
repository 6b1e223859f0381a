"""eksctl configs modelled on public ones (tests/fixtures/eksctl/SOURCES.md): each is planned, its node groups built
alone with the expected properties (tests.support.NodeGroupsAlone), or it is rejected with every problem named; the
whole synth of every accepted public config, with cdk-nag and the project's rules, is in the integration tier."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
import yaml
from aws_cdk.assertions import Match, Template

from efa_stack import contract
from efa_stack.planning import catalog
from efa_stack.planning.plan import plan_from_file
from efa_stack.spec.errors import SpecError
from stacks.node_groups import NODE_ROLE_POLICIES
from tests.support import ROOT, NodeGroupsAlone, scratch_dir, synth_spec

FIXTURES = ROOT / "tests" / "fixtures" / "eksctl"
CB = "cr-0f1e2d3c4b5a69788"
ODCR = "cr-0a1b2c3d4e5f60718"

REJECTED: dict[str, list[tuple[str, str]]] = {
    # file: [(field, a phrase of its fix)], in the order reported; every problem of the file in one run
    "managed-nodes.yaml": [
        ("managedNodeGroups[0].ssh.publicKeyPath", "aws ec2 import-key-pair"),
        ("managedNodeGroups[0].securityGroups", "security groups are attached to every interface"),
        ("managedNodeGroups[2].ami", "an AMI id such as ami-0123456789abcdef0"),
        ("managedNodeGroups[3].launchTemplate", "writes the launch template"),
        ("managedNodeGroups[0].iam.withAddonPolicies.externalDNS", "through EKS Pod Identity"),
        ("managedNodeGroups[0].iam.withAddonPolicies.certManager", "through EKS Pod Identity"),
        ("managedNodeGroups[2].amiFamily", "set amiFamily: AmazonLinux2023"),
    ],
}
# The public files (SOURCES.md, copied unchanged): what each is refused for.
PUBLIC_REFUSED: dict[str, list[tuple[str, str]]] = {
    "aws-do-eks-eks-ami.yaml": [
        ('managedNodeGroups[1].ami', 'add amiFamily: AmazonLinux2023 (an AL2023 EKS no'),
        ('managedNodeGroups[1].overrideBootstrapCommand', 'write a NodeConfig (apiVersion: node.eks.aws/v1a'),
        ('addons[0].version', 'use v1.20.1-eksbuild.3 or a later build, or leav'),
    ],
    "aws-do-eks-eks-dl1.yaml": [
        ('managedNodeGroups[0].instanceType', 'use an NVIDIA GPU type (e.g. p5.48xlarge, p4d.24'),
        ('managedNodeGroups[0].ami', 'add amiFamily: AmazonLinux2023 (an AL2023 EKS no'),
        ('managedNodeGroups[0].overrideBootstrapCommand', 'write a NodeConfig (apiVersion: node.eks.aws/v1a'),
    ],
    "aws-do-eks-eks-gpu-fsdp.yaml": [
        ('addons[0].version', 'use v1.20.1-eksbuild.3 or a later build, or leav'),
    ],
    "aws-do-eks-eks-gpu-g4-p3-p4.yaml": [
        ('addons[0].version', 'use v1.20.1-eksbuild.3 or a later build, or leav'),
    ],
    "aws-do-eks-eks-gpu-p4de-odcr-vpc.yaml": [
        ('vpc.id', 'replace it with your own id'),
        ('vpc.subnets.private.p4de-1a.id', 'replace it with your own id'),
        ('vpc.subnets.private.p4de-1c.id', 'replace it with your own id'),
        ('vpc.subnets.public.endpoint-one.id', 'replace it with your own id'),
        ('vpc.subnets.public.endpoint-two.id', 'replace it with your own id'),
        ('managedNodeGroups', "add 'managedNodeGroups': The node groups (EKS ma"),
        ('nodeGroups', 'move each entry to managedNodeGroups (efa-stack'),
        # the subnets' zones, in the same run as their placeholder ids (their keys are no zone names)
        ('vpc.subnets.private.p4de-1a.az', 'add az: <zone> to the subnet'),
        ('vpc.subnets.private.p4de-1c.az', 'add az: <zone> to the subnet'),
        ('vpc.subnets.public.endpoint-one.az', 'add az: <zone> to the subnet'),
        ('vpc.subnets.public.endpoint-two.az', 'add az: <zone> to the subnet'),
        ('nodeGroups[0].capacityReservation.capacityReservationTarget.capacityReservationID', "replace it with your reservation's or Capacity B"),
    ],
    "aws-do-eks-eks-gpu-p4de-odcr.yaml": [
        ('nodeGroups', 'move each entry to managedNodeGroups (efa-stack'),
        ('nodeGroups[0].capacityReservation.capacityReservationTarget.capacityReservationID', "replace it with your reservation's or Capacity B"),
    ],
    "aws-do-eks-eks-gpu-p4de.yaml": [
        ('nodeGroups', 'move each entry to managedNodeGroups (efa-stack'),
    ],
    "aws-do-eks-eks-gpu-p5-cbr-etc.yaml": [
        ('managedNodeGroups[1].capacityReservation.capacityReservationTarget.capacityReservationID', "replace it with your reservation's or Capacity B"),
    ],
    "aws-do-eks-eks-gpu-p5-cbr-ssh.yaml": [
        ('managedNodeGroups[1].ssh.publicKey', 'import the key (`aws ec2 import-key-pair`) and u'),
        ('managedNodeGroups[1].capacityReservation.capacityReservationTarget.capacityReservationID', "replace it with your reservation's or Capacity B"),
    ],
    "aws-do-eks-eks-gpu-p5-cbr.yaml": [
        ('managedNodeGroups[1].capacityReservation.capacityReservationTarget.capacityReservationID', "replace it with your reservation's or Capacity B"),
    ],
    "aws-do-eks-eks-gpu-p5en-cbr.yaml": [
        ('managedNodeGroups[1].capacityReservation.capacityReservationTarget.capacityReservationID', "replace it with your reservation's or Capacity B"),
    ],
    "aws-do-eks-eks-gpu-p6-b200-cbr.yaml": [
        ('managedNodeGroups[1].capacityReservation.capacityReservationTarget.capacityReservationID', "replace it with your reservation's or Capacity B"),
    ],
    "awsome-dt-eks-g4dn-vpc.yaml": [
        ('metadata.region', 'replace it with your own region'),
        ('vpc.id', 'replace it with your own id'),
        ('vpc.subnets.private.private-one.id', 'replace it with your own id'),
        ('vpc.subnets.private.private-two.id', 'replace it with your own id'),
        ('vpc.subnets.public.public-one.id', 'replace it with your own id'),
        ('vpc.subnets.public.public-two.id', 'replace it with your own id'),
    ],
    "awsome-dt-eks-g4dn.yaml": [
        ('metadata.region', 'replace it with your own region'),
    ],
    "awsome-dt-eks-g5-node-autorepair.yaml": [
        ('metadata.region', 'replace it with your own region'),
    ],
    "awsome-dt-eks-p4de-odcr-vpc.yaml": [
        ('metadata.region', 'replace it with your own region'),
        ('vpc.id', 'replace it with your own id'),
        ('vpc.subnets.private.private-one.id', 'replace it with your own id'),
        ('vpc.subnets.private.private-two.id', 'replace it with your own id'),
        ('vpc.subnets.public.public-one.id', 'replace it with your own id'),
        ('vpc.subnets.public.public-two.id', 'replace it with your own id'),
        ('managedNodeGroups[1].capacityReservation.capacityReservationTarget.capacityReservationID', "replace it with your reservation's or Capacity B"),
    ],
    "awsome-dt-eks-p4de-odcr.yaml": [
        ('metadata.region', 'replace it with your own region'),
        ('managedNodeGroups[1].capacityReservation.capacityReservationTarget.capacityReservationID', "replace it with your reservation's or Capacity B"),
    ],
    "awsome-dt-eks-p5-capacity-block.yaml": [
        ('metadata.region', 'replace it with your own region'),
        ('vpc.id', 'replace it with your own id'),
        ('vpc.subnets.private.private-one.id', 'replace it with your own id'),
        ('vpc.subnets.private.private-two.id', 'replace it with your own id'),
        ('vpc.subnets.public.public-one.id', 'replace it with your own id'),
        ('vpc.subnets.public.public-two.id', 'replace it with your own id'),
        ('managedNodeGroups[0].capacityReservation.capacityReservationTarget.capacityReservationID', "replace it with your reservation's or Capacity B"),
    ],
    "awsome-dt-eks-p5-odcr-vpc.yaml": [
        ('metadata.region', 'replace it with your own region'),
        ('vpc.id', 'replace it with your own id'),
        ('vpc.subnets.private.private-one.id', 'replace it with your own id'),
        ('vpc.subnets.private.private-two.id', 'replace it with your own id'),
        ('vpc.subnets.public.public-one.id', 'replace it with your own id'),
        ('vpc.subnets.public.public-two.id', 'replace it with your own id'),
        ('managedNodeGroups[0].capacityReservation.capacityReservationTarget.capacityReservationID', "replace it with your reservation's or Capacity B"),
    ],
    "awsome-dt-nemo-p4de-cluster-config.yaml": [
        ('metadata.name', 'replace it with your own name'),
        ('metadata.version', 'use one of 1.31, 1.32, 1.33, 1.34, 1.35, 1.36, quoted (version: "1.36")'),
        ('managedNodeGroups[1].capacityReservation.capacityReservationTarget.capacityReservationID', "replace it with your reservation's or Capacity B"),
    ],
    "eksctl-07-ssh-keys.yaml": [
        ('managedNodeGroups', "add 'managedNodeGroups': The node groups (EKS ma"),
        ('nodeGroups', 'move each entry to managedNodeGroups (efa-stack '),
        ('nodeGroups[0].ssh.publicKeyPath', 'import the key (`aws ec2 import-key-pair`) and u'),
        ('nodeGroups[3].ssh.publicKey', 'import the key (`aws ec2 import-key-pair`) and u'),
        ('nodeGroups[1].ssh.allow', 'add publicKeyName: <an EC2 key pair in the regio'),
    ],
    "eksctl-13-iamserviceaccounts.yaml": [
        ('iam.serviceAccounts[0]', 'write this iam.podIdentityAssociations entry ins'),
        ('iam.serviceAccounts[1]', 'write an iam.podIdentityAssociations entry {name'),
        ('iam.serviceAccounts[2]', 'write this iam.podIdentityAssociations entry ins'),
        ('iam.serviceAccounts[3]', 'write an iam.podIdentityAssociations entry {name'),
        ('iam.serviceAccounts[4]', 'write an iam.podIdentityAssociations entry {name'),
        ('iam.serviceAccounts[5]', 'write an iam.podIdentityAssociations entry {name'),
        ('iam.serviceAccounts[6]', 'write an iam.podIdentityAssociations entry {name'),
        ('iam.serviceAccounts[7]', 'write this iam.podIdentityAssociations entry ins'),
        ('iam.serviceAccounts[8]', 'write this iam.podIdentityAssociations entry ins'),
        ('iam.serviceAccounts[9]', 'write an iam.podIdentityAssociations entry {name'),
        ('iam.serviceAccounts[10]', 'write an iam.podIdentityAssociations entry like '),
        ('managedNodeGroups', "add 'managedNodeGroups': The node groups (EKS ma"),
        ('nodeGroups', 'move each entry to managedNodeGroups (efa-stack '),
    ],
    "eksctl-15-managed-nodes.yaml": [
        ('managedNodeGroups[0].ssh.publicKeyPath', 'import the key (`aws ec2 import-key-pair`) and u'),
        ('managedNodeGroups[0].ssh.sourceSecurityGroupIds', 'remove it; nodes are in private subnets, reach t'),
        ('managedNodeGroups[0].securityGroups', 'remove it; the cluster and EFA security groups a'),
        ('managedNodeGroups[2].ami', 'use a value matching ^(ami-[0-9a-f]{8,17}|auto|a'),
        ('managedNodeGroups[3].launchTemplate', 'remove it; efa-stack writes the launch template'),
        ('managedNodeGroups[0].iam.withAddonPolicies.externalDNS', 'remove it and give ExternalDNS its permissions t'),
        ('managedNodeGroups[0].iam.withAddonPolicies.certManager', 'remove it and give cert-manager its permissions'),
        ('managedNodeGroups[2].amiFamily', 'set amiFamily: AmazonLinux2023 or remove it'),
        ('managedNodeGroups[2].overrideBootstrapCommand', 'write a NodeConfig (apiVersion: node.eks.aws/v1a'),
    ],
    "eksctl-24-nodegroup-subnets.yaml": [
        # a subnet without its id, and in the same run the node group that names public subnets
        ('vpc.subnets.private.private-one.id', "add 'id'"),
        ('managedNodeGroups', "add 'managedNodeGroups': The node groups (EKS ma"),
        ('nodeGroups', 'move each entry to managedNodeGroups (efa-stack '),
        ('vpc.subnets.private.private-one.az', 'add az: <zone> to the subnet'),
        ('vpc.subnets.private.private-two.az', 'add az: <zone> to the subnet'),
        ('vpc.subnets.private.private-three.az', 'add az: <zone> to the subnet'),
        ('vpc.subnets.public.public-one.az', 'add az: <zone> to the subnet'),
        ('vpc.subnets.public.public-two.az', 'add az: <zone> to the subnet'),
        ('vpc.subnets.public.public-three.az', 'add az: <zone> to the subnet'),
        ('nodeGroups[0].subnets', 'name a subnet listed under vpc.subnets.private'),
        ('nodeGroups[0].subnets', 'name a subnet listed under vpc.subnets.private'),
    ],
    "eksctl-34-taints.yaml": [
        ('nodeGroups', 'move each entry to managedNodeGroups (efa-stack'),
    ],
    "eksctl-39-pod-identity-association.yaml": [
        ('iam.podIdentityAssociations[0].createServiceAccount', 'remove it; create the service account with your'),
        ('iam.podIdentityAssociations[1].wellKnownPolicies', 'list the managed policies in permissionPolicyARN'),
        ('iam.podIdentityAssociations[1].permissionsBoundaryARN', 'remove it'),
        ('iam.podIdentityAssociations[2].permissionPolicy', 'create a managed policy and list its ARN in perm'),
        ('iam.podIdentityAssociations[3].createServiceAccount', 'remove it; create the service account with your'),
        ('iam.podIdentityAssociations[4].createServiceAccount', 'remove it; create the service account with your'),
    ],
    "eksctl-44-node-repair.yaml": [
        ('managedNodeGroups[3].nodeRepairConfig.nodeRepairConfigOverrides[0].repairAction', "use one of 'Replace', 'Reboot' or 'NoAction'"),
        ('managedNodeGroups[3].nodeRepairConfig.nodeRepairConfigOverrides[1].repairAction', "use one of 'Replace', 'Reboot' or 'NoAction'"),
        ('managedNodeGroups[4].nodeRepairConfig.nodeRepairConfigOverrides[0].repairAction', "use one of 'Replace', 'Reboot' or 'NoAction'"),
    ],
    "flux-operator-broker-eks.yaml": [
        ('metadata.version', 'use one of 1.31, 1.32, 1.33, 1.34, 1.35, 1.36, quoted (version: "1.36")'),
    ],
    "flux-operator-flux-restful.yaml": [
        ('managedNodeGroups[0].ssh.publicKeyPath', 'import the key (`aws ec2 import-key-pair`) and u'),
        ('metadata.version', 'use one of 1.31, 1.32, 1.33, 1.34, 1.35, 1.36, quoted (version: "1.36")'),
    ],
    "flux-operator-mountpoint-s3.yaml": [
        ('metadata.version', 'use one of 1.31, 1.32, 1.33, 1.34, 1.35, 1.36, quoted (version: "1.36")'),
    ],
}
PUBLIC_ACCEPTED = [
    "aws-do-eks-eks-gpu-g5.yaml",
    "aws-do-eks-eks-gpu-p3dn.yaml",
    "aws-do-eks-eks-gpu-p5.yaml",
    "aws-do-eks-eks-gpu-p5en.yaml",
    "aws-do-eks-eks-gpu.yaml",
    "aws-do-eks-eks-hpc.yaml",
    "aws-do-eks-eks-inference-workshop.yaml",
    "aws-do-eks-eks-karpenter-efa.yaml",
    "aws-do-eks-eks-trn-inf.yaml",
    "aws-do-eks-eks-workshop.yaml",
    "aws-do-eks-eks.yaml",
    "eksctl-26-managed-nodegroup-spot-instances.yaml",
]
ACCEPTED = ["access-entries.yaml", "access-entries-efa-stack.yaml", "mixed-cpu-gpu.yaml", "p4de-odcr-efa-stack.yaml", "p4de-odcr.yaml", "p5-capacity-block-efa-stack.yaml", "p5-capacity-block.yaml", *PUBLIC_ACCEPTED]
ALL_REJECTED = {**REJECTED, **PUBLIC_REFUSED}


def test_every_fixture_is_judged():
    assert sorted(p.name for p in FIXTURES.glob("*.yaml")) == sorted([*ALL_REJECTED, *ACCEPTED])


def test_every_public_fixture_has_its_provenance():
    sources = (FIXTURES / "SOURCES.md").read_text()
    for name in [*PUBLIC_REFUSED, *PUBLIC_ACCEPTED]:
        row = next((line for line in sources.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, name
        assert re.search(r"\| `[0-9a-f]{40}` \| (MIT-0|Apache-2\.0|MIT \(Copyright .+\)) \|$", row), row


@pytest.mark.parametrize("name", sorted(ALL_REJECTED))
def test_fails_eksctl_config_with_every_problem_named(name):
    with pytest.raises(SpecError) as info:
        plan_from_file(FIXTURES / name)
    got = [(p.field, p.fix) for p in info.value.problems]
    assert [f for f, _ in got] == [f for f, _ in ALL_REJECTED[name]], [p.render() for p in info.value.problems]
    for (_, fix), (_, phrase) in zip(got, ALL_REJECTED[name]):
        assert phrase in fix


@pytest.mark.parametrize("name", PUBLIC_ACCEPTED)
def test_public_eksctl_config_is_planned_unchanged(name):
    # the file as published plans, with every node group it names and the system node group
    plan = plan_from_file(FIXTURES / name)
    spec_groups = yaml.safe_load((FIXTURES / name).read_text())["managedNodeGroups"]
    assert sorted(g.name for g in plan.all_node_groups) == sorted([*(g["name"] for g in spec_groups),
                                                                  contract.SYSTEM_NODE_GROUP])


# The public files that only need their placeholders filled, as their READMEs ask, to synthesize: each token and
# the value a reader would write for it (a region, zones, a reservation id). Nothing else of the file changes.
PLACEHOLDER_VALUES = {
    "PLACEHOLDER_AWS_REGION": "us-west-2", "PLACEHOLDER_AZ_1": "us-west-2a", "PLACEHOLDER_AZ_2": "us-west-2b",
    "PLACEHOLDER_CAPACITY_RESERVATION_ID": CB, "PLACEHOLDER_VPC_ID": "vpc-0a1b2c3d4e5f60718",
    "PLACEHOLDER_SUBNET_PRIVATE_1": "subnet-0a1b2c3d4e5f60011", "PLACEHOLDER_SUBNET_PRIVATE_2": "subnet-0a1b2c3d4e5f60012",
    "PLACEHOLDER_SUBNET_PUBLIC_1": "subnet-0a1b2c3d4e5f60001", "PLACEHOLDER_SUBNET_PUBLIC_2": "subnet-0a1b2c3d4e5f60002",
}
SUBNET_ZONES = (
    ("subnet-0a1b2c3d4e5f60001", "us-west-2a"), ("subnet-0a1b2c3d4e5f60002", "us-west-2b"),
    ("subnet-0a1b2c3d4e5f60011", "us-west-2a"), ("subnet-0a1b2c3d4e5f60012", "us-west-2b"),
)
"""What `efa-stack lookup` would record for those subnets (an existing VPC's subnets named without a zone)."""
RESERVATION_PLACEHOLDER = re.compile(r"cr-x{8,17}\b")  # aws-do-eks's "cr-xxxxxxxxxxxxxxxxx"
FILLED_IN_SYNTHESIZE = [
    "awsome-dt-eks-g4dn-vpc.yaml",
    "awsome-dt-eks-p4de-odcr-vpc.yaml",
    "awsome-dt-eks-p5-capacity-block.yaml",
    "awsome-dt-eks-p5-odcr-vpc.yaml",
    "aws-do-eks-eks-gpu-p5-cbr-etc.yaml",
    "aws-do-eks-eks-gpu-p5-cbr.yaml",
    "aws-do-eks-eks-gpu-p5en-cbr.yaml",
    "aws-do-eks-eks-gpu-p6-b200-cbr.yaml",
    "awsome-dt-eks-g4dn.yaml",
    "awsome-dt-eks-g5-node-autorepair.yaml",
    "awsome-dt-eks-p4de-odcr.yaml",
]


def _filled_in(name: str) -> str:
    text = (FIXTURES / name).read_text()
    for token, value in PLACEHOLDER_VALUES.items():
        text = text.replace(token, value)
    return RESERVATION_PLACEHOLDER.sub(CB, text)


@cache
def _filled_in_file(name: str) -> Path:
    path = scratch_dir("filled-in") / name
    path.write_text(_filled_in(name))
    return path


@pytest.mark.parametrize("name", FILLED_IN_SYNTHESIZE)
def test_public_config_with_only_placeholders_is_planned_once_they_are_filled(name):
    # refused as published for its placeholders only ...
    assert {fix for _, fix in PUBLIC_REFUSED[name]} <= {
        "replace it with your own region", "replace it with your reservation's or Capacity B",
        "replace it with your own id"}
    # ... and planned once a reader fills them in, every other line unchanged
    original, filled = (FIXTURES / name).read_text().splitlines(), _filled_in(name).splitlines()
    changed = [a for a, b in zip(original, filled, strict=True) if a != b]
    assert changed and all("PLACEHOLDER_" in line or RESERVATION_PLACEHOLDER.search(line) for line in changed)
    plan = plan_from_file(_filled_in_file(name), subnet_zones=dict(SUBNET_ZONES))
    spec_groups = yaml.safe_load(_filled_in(name))["managedNodeGroups"]
    assert sorted(g.name for g in plan.all_node_groups) == sorted([*(g["name"] for g in spec_groups),
                                                                  contract.SYSTEM_NODE_GROUP])


@pytest.mark.integration
@pytest.mark.parametrize("name", [*PUBLIC_ACCEPTED, *FILLED_IN_SYNTHESIZE])
def test_every_accepted_public_config_synthesizes(name):
    # the whole synth, with cdk-nag and the project's rules (a finding fails it), of the file as published (or filled
    # in): every planned node group is an EKS node group
    path = _filled_in_file(name) if name in FILLED_IN_SYNTHESIZE else FIXTURES / name
    s = synth_spec(str(path), SUBNET_ZONES if name in FILLED_IN_SYNTHESIZE else (), nag=True)
    assert sorted(_nodegroups(s)) == sorted(g.name for g in s.plan.all_node_groups)


def _synth(name: str):
    return synth_spec(str(FIXTURES / name))


ALONE = {  # construct id -> (config, node group)
    "P4deReserved": ("p4de-odcr-efa-stack.yaml", "p4de-odcr"),
    "P5Block": ("p5-capacity-block-efa-stack.yaml", "p5-block"),
    "MixedCpu": ("mixed-cpu-gpu.yaml", "cpu-workers"),
    "MixedGpu": ("mixed-cpu-gpu.yaml", "gpu"),
    "P4deEksctl": ("p4de-odcr.yaml", "p4de-odcr"),
    "P4deEksctlSys": ("p4de-odcr.yaml", "sys"),
    "P4deEksctlSystem": ("p4de-odcr.yaml", contract.SYSTEM_NODE_GROUP),
    "P5en": ("aws-do-eks-eks-gpu-p5en.yaml", "p5en"),
}


@pytest.fixture(scope="module")
def alone() -> NodeGroupsAlone:
    """The node groups of :data:`ALONE`, each built alone from its config's plan as the cluster stack builds it."""
    plans = {config: plan_from_file(FIXTURES / config) for config, _ in ALONE.values()}
    return NodeGroupsAlone.build({key: (plans[config], group) for key, (config, group) in ALONE.items()})


def _nodegroups(s) -> dict[str, dict]:
    return {v["Properties"]["Labels"][contract.LABEL_NODE_GROUP]: v["Properties"]
            for v in s.resources("cluster", "AWS::EKS::Nodegroup").values()}


def _launch_data(s, group: dict) -> dict:
    ref = group["LaunchTemplate"]["Id"]["Ref"]
    return s.template("cluster")["Resources"][ref]["Properties"]["LaunchTemplateData"]


def _efa_nics(data: dict) -> int:
    return sum(1 for n in data.get("NetworkInterfaces", []) if n["InterfaceType"] in ("efa", "efa-only"))


def test_p4de_reservation_config_builds_its_node_group(alone):
    gpu = alone.nodegroup("P4deReserved")
    assert gpu["CapacityType"] == "ON_DEMAND"
    assert gpu["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 2, "MaxSize": 10}
    data = alone.launch_data("P4deReserved")
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] == ODCR
    assert _efa_nics(data) == catalog.get("p4de.24xlarge").max_efa_interfaces == 4


def test_p5_capacity_block_config_builds_its_node_group(alone):
    gpu = alone.nodegroup("P5Block")
    assert gpu["CapacityType"] == "CAPACITY_BLOCK"
    data = alone.launch_data("P5Block")
    assert data["InstanceMarketOptions"]["MarketType"] == "capacity-block"
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] == CB
    assert _efa_nics(data) == 32
    assert alone.groups["P5Block"].placement_group is None and "Placement" not in data  # none made, none named


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


def test_mixed_cpu_gpu_config_builds_its_node_groups(alone):
    plan = plan_from_file(FIXTURES / "mixed-cpu-gpu.yaml")
    assert sorted(g.name for g in plan.all_node_groups) == ["cpu-workers", "gpu", contract.SYSTEM_NODE_GROUP]
    cpu = alone.nodegroup("MixedCpu")
    assert cpu["Labels"]["role"] == "worker"
    assert {"Key": "key1", "Value": "value1", "Effect": "NO_SCHEDULE"} in cpu["Taints"]
    assert cpu["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 3, "MaxSize": 4}
    assert _efa_nics(alone.launch_data("MixedGpu")) == catalog.get("p5en.48xlarge").max_efa_interfaces


def _role_of(alone: NodeGroupsAlone, key: str) -> dict:
    return alone.fixture.props(alone.roles[key])


def _policy_names(role: dict) -> list[str]:
    return [p["Fn::Join"][1][-1].split(":iam::aws:policy/", 1)[-1] for p in role["ManagedPolicyArns"]]


def test_p4de_eksctl_reservation_config_builds_its_node_groups(alone):
    # capacityReservation, instancePrefix and iam.withAddonPolicies, as eksctl means them
    gpu = alone.nodegroup("P4deEksctl")
    assert gpu["CapacityType"] == "ON_DEMAND"
    data = alone.launch_data("P4deEksctl")
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] == ODCR
    assert "Placement" not in data
    instance_tags = next(t["Tags"] for t in data["TagSpecifications"] if t["ResourceType"] == "instance")
    assert {"Key": "Name", "Value": "p4de-odcr-p4de-odcr-p4de-odcr-Node"} in instance_tags
    role = _role_of(alone, "P4deEksctl")
    assert _policy_names(role) == [
        "AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly", "AmazonSSMManagedInstanceCore",
        "service-role/AmazonEBSCSIDriverPolicy", "CloudWatchAgentServerPolicy",
    ]
    alone.fixture.assertions().has_resource_properties("AWS::IAM::Policy", {
        "Roles": [{"Ref": gpu["NodeRole"]["Fn::GetAtt"][0]}],
        "PolicyDocument": {"Statement": Match.array_with([
            Match.object_like({"Action": Match.array_with(["autoscaling:SetDesiredCapacity"]), "Resource": "*"}),
            Match.object_like({"Action": "fsx:*", "Resource": "*"}),
        ])},
    })
    sys_role = _role_of(alone, "P4deEksctlSys")
    assert "service-role/AmazonEBSCSIDriverPolicy" not in _policy_names(sys_role)  # each group its own role
    # the system node group has the cluster's shared node role, with these policies only (its stack's snapshot)
    assert alone.roles["P4deEksctlSystem"] is alone.shared_role
    assert NODE_ROLE_POLICIES == (
        "AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly", "AmazonSSMManagedInstanceCore",
    )


def test_public_p5en_config_builds_its_node_group(alone):
    data = alone.launch_data("P5en")
    assert _efa_nics(data) == catalog.get("p5en.48xlarge").max_efa_interfaces
    instance_tags = next(t["Tags"] for t in data["TagSpecifications"] if t["ResourceType"] == "instance")
    assert {"Key": "Name", "Value": "p5en-do-eks-yaml-p5-p5en-Node"} in instance_tags
    assert "CloudWatchAgentServerPolicy" in _policy_names(_role_of(alone, "P5en"))


def test_p5_capacity_block_in_existing_vpc_synthesizes():
    # vpc.id/vpc.subnets: no VPC is created; the group goes in its zone's existing private subnet
    s = _synth("p5-capacity-block.yaml")
    assert not s.resources("network", "AWS::EC2::VPC")
    network = Template.from_json(s.template("network"))
    network.has_resource_properties("AWS::EC2::SecurityGroup", {"VpcId": "vpc-0123456789abcdef0"})
    gpu = _nodegroups(s)["p5-block"]
    assert gpu["Subnets"] == ["subnet-0aaaaaaaaaaaaaaa1"]
    assert gpu["CapacityType"] == "CAPACITY_BLOCK"
    cluster = Template.from_json(s.template("cluster"))
    cluster.has_resource_properties("AWS::EKS::Cluster", {
        "ResourcesVpcConfig": Match.object_like({"SubnetIds": ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"]}),
    })


def test_eksctl_access_entries_synthesize():
    s = _synth("access-entries.yaml")
    template = Template.from_json(s.template("cluster"))
    template.has_resource_properties("AWS::EKS::AccessEntry", {
        "PrincipalArn": "arn:aws:iam::111122223333:user/my-user-name", "Type": "STANDARD",
        "KubernetesGroups": ["group1", "group2"],
    })
    template.has_resource_properties("AWS::EKS::AccessEntry", {
        "PrincipalArn": "arn:aws:iam::111122223333:role/role-name-2", "Type": "EC2_LINUX",
    })
    template.has_resource_properties("AWS::EKS::Cluster", {
        "AccessConfig": {"AuthenticationMode": "API", "BootstrapClusterCreatorAdminPermissions": False},
    })


def test_eksctl_ssh_example_keeps_every_named_key():
    # GIVEN eksctl's examples/07-ssh-keys.yaml, each node group's ssh block on a managed node group
    from tests.support import BASE, plan_of

    groups = {g["name"]: g["ssh"] for g in yaml.safe_load((FIXTURES / "eksctl-07-ssh-keys.yaml").read_text())["nodeGroups"]
              if "ssh" in g and "publicKeyPath" not in g["ssh"] and "publicKey" not in g["ssh"] and g["ssh"] != {"allow": True}}
    assert groups["ng-5"] == {"publicKeyName": "ec2_dev_key", "allow": False}
    keys = {}
    for name, ssh in groups.items():
        (group,) = plan_of(BASE + "    ssh: " + yaml.safe_dump(ssh, default_flow_style=True)).node_groups
        keys[name] = group.key_name
    # THEN the key is on the nodes whenever it is named, allow: false included (it only keeps port 22 closed)
    assert keys == {"ng-3": "ec2_dev_key", "ng-5": "ec2_dev_key", "ng-6": None}
