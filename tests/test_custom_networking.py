"""VPC CNI custom networking (vpc.podCIDR): the spec's checks, the address plan, the VPC's secondary block and pod
subnets, the ENIConfigs, the CNI settings and the nodes' maxPods, and the layouts it refuses. The template facts come
from one whole synth (:data:`SYNTH`: a node group, a Karpenter pool and a custom-AMI group under custom networking)."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from efa_stack import contract
from efa_stack.planning import catalog
from efa_stack.planning.addressing import (
    CUSTOM_NETWORK_CFG,
    ENI_CONFIG_LABEL,
    ENI_CONFIG_LABEL_DEF,
    POD_CIDR_FIELD,
    card0_slots,
    ipv4_per_interface,
)
from tests.builders import Spec, cluster, node_group, pool
from tests.support import _build, gpu_launch_template

POD_CIDR = "100.64.0.0/16"


def spec(instance_type: str = "p5en.48xlarge", max_size: int = 4, *, pod_cidr: str | None = POD_CIDR,
         layout: str | None = None, **vpc: Any) -> Spec:
    """A node group ``gpu`` of up to ``max_size`` ``instance_type`` nodes, the VPC's ``pod_cidr`` and ``vpc`` fields."""
    layout_field: dict[str, Any] = {"interfaceLayout": layout} if layout else {}
    group = node_group(instance_type=instance_type, max_size=max_size, private=True, **layout_field)
    return cluster(group).with_(vpc={"cidr": "10.0.0.0/16", **({"podCIDR": pod_cidr} if pod_cidr else {}), **vpc})


def pools(*instance_types: str, pod_cidr: str | None = POD_CIDR, zone: str = "us-west-2b") -> Spec:
    """:func:`spec` with one Karpenter pool per type (``pool0``, ``pool1``, ...) in ``zone``."""
    return spec(pod_cidr=pod_cidr).with_pools(*(pool(f"pool{i}", t, zone=zone) for i, t in enumerate(instance_types)))


def pool_spec(*instance_types: str, pod_cidr: str | None = POD_CIDR, zone: str = "us-west-2b") -> str:
    """The text of :func:`pools` (tests/test_apiserver.py plans it)."""
    return pools(*instance_types, pod_cidr=pod_cidr, zone=zone).text


def pod_problems(spec: Spec) -> list[Any]:
    return [p for p in spec.problems() if p.field == POD_CIDR_FIELD]


# --- the spec's checks ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "says"), [
    ("100.64.0.0/12", "/16 to /28"),
    ("8.8.0.0/16", "RFC 1918"),
    ("10.0.128.0/17", "overlaps the VPC's primary range"),
    ("192.168.0.0/16", "another RFC 1918 range"),
    ("100.64.0.1/16", "not an IPv4 network"),
])
def test_fails_a_pod_cidr_that_ec2_or_the_plan_cannot_take(value, says):
    problems = pod_problems(spec(pod_cidr=value))
    assert any(says in p.message for p in problems), [p.render() for p in problems]
    assert all(p.value == value and p.fix for p in problems)


def test_fails_a_pod_cidr_too_small_for_the_pods():
    problems = pod_problems(spec(max_size=40, pod_cidr="100.64.0.0/24"))
    assert len(problems) == 1
    assert "cannot hold the pods' addresses" in problems[0].message and "us-west-2a" in problems[0].message
    assert "larger range" in problems[0].fix


def test_fails_a_pod_cidr_with_an_existing_vpc():
    problems = pod_problems(spec(id="vpc-0123456789abcdef0", subnets={"private": {
        "us-west-2a": {"id": "subnet-0123456789abcdef0"}, "us-west-2b": {"id": "subnet-0123456789abcdef1"}}}))
    assert any("vpc.id" in p.message and "remove vpc.podCIDR" in p.fix for p in problems), [p.render() for p in problems]


# --- the rule where the layout does not allow it -----------------------------------------------------------------

def test_fails_a_group_whose_card0_has_no_slot_left_for_pod_enis():
    # p5.48xlarge: card 0 takes 2 interfaces, the primary and the efa-only interface of the current layout.
    assert card0_slots(catalog.get("p5.48xlarge")) == 2
    problems = pod_problems(spec("p5.48xlarge"))
    assert len(problems) == 1 and problems[0].value == "gpu"
    assert "no interface is left for the pods' ENIs" in problems[0].message
    assert "interfaceLayout: legacy" in problems[0].fix


def test_the_legacy_layout_leaves_p5_one_card0_slot_for_pods():
    plan = spec("p5.48xlarge", layout="legacy").plan()
    assert plan.addresses is not None
    gpu = next(g for g in plan.addresses.groups if g.name == "gpu")
    assert gpu.per_node is not None and gpu.per_node.cni_enis == 1
    assert gpu.per_node.max_pods == 1 * (ipv4_per_interface("p5.48xlarge") - 1) + 2


def test_fails_an_addressed_interface_beside_the_primary_on_card0():
    from efa_stack.planning.addressing import AddressedGroup, custom_networking_problems
    from efa_stack.planning.layout import Interface

    instance = catalog.get("p5en.48xlarge")
    group = AddressedGroup("g", instance, (Interface(0, 0, "interface"), Interface(0, 1, "efa")), ("us-west-2a",), 1)
    problems = custom_networking_problems([group])
    assert len(problems) == 1 and "node's private subnet" in problems[0].message


# --- the plan's numbers --------------------------------------------------------------------------------------------

def test_the_pods_take_the_pod_subnets_and_the_nodes_the_private_ones():
    plan = spec(max_size=10).plan()
    addresses = plan.addresses
    assert addresses is not None and addresses.pods is not None
    pods = addresses.pods
    instance = catalog.get("p5en.48xlarge")
    ipv4 = ipv4_per_interface(instance.name)
    assert ipv4 is not None
    enis = card0_slots(instance) - 2  # the primary and the efa-only interface on card 0
    gpu = next(g for g in addresses.groups if g.name == "gpu")
    assert gpu.per_node is not None
    assert gpu.per_node.cni_enis == enis
    assert gpu.per_node.max_pods == enis * (ipv4 - 1) + 2
    assert gpu.per_node.pods == enis * ipv4  # whole ENIs (WARM_ENI_TARGET 1), each ENI's own address included
    assert gpu.per_zone() == 10 * gpu.per_node.node  # nothing of the pods in the private subnet
    assert pods.per_zone["us-west-2a"] >= 10 * gpu.per_node.pods
    # equal parts of the range, one per zone, inside it and apart
    nets = [ipaddress.ip_network(c) for c in pods.subnets.values()]
    assert list(pods.subnets) == ["us-west-2a", "us-west-2b"]
    assert all(n.subnet_of(ipaddress.ip_network(POD_CIDR)) and n.prefixlen == pods.mask for n in nets)
    assert not nets[0].overlaps(nets[1])
    assert addresses.max_pods("gpu") == gpu.per_node.max_pods
    summary = plan.summary()
    assert f"maxPods {gpu.per_node.max_pods}" in summary and pods.subnets["us-west-2a"] in summary


def test_the_cni_add_on_turns_custom_networking_on_by_zone():
    plan = spec().plan()
    cni = plan.addon("vpc-cni")
    assert cni is not None and cni.configuration_values is not None
    env = json.loads(cni.configuration_values)["env"]
    assert env[CUSTOM_NETWORK_CFG] == "true" and env[ENI_CONFIG_LABEL_DEF] == ENI_CONFIG_LABEL


def test_without_a_pod_cidr_nothing_changes():
    plan = spec(pod_cidr=None).plan()
    assert plan.addresses is not None and plan.addresses.pods is None
    assert plan.addresses.max_pods("gpu") is None
    cni = plan.addon("vpc-cni")
    assert cni is not None and CUSTOM_NETWORK_CFG not in (cni.configuration_values or "")


# --- the template and the ENIConfigs -------------------------------------------------------------------------------

CUSTOM_AMI: dict[str, Any] = {"ami": "ami-0123456789abcdef0", "amiFamily": "AmazonLinux2023"}
SYNTH = pools("p5en.48xlarge").add(node_group("ami", "p5en.48xlarge", max_size=4, private=True, **CUSTOM_AMI))
"""The one whole synth: the node group ``gpu`` (an EKS AMI), the pool ``pool0`` in us-west-2b and the custom-AMI
group ``ami``, under custom networking."""


@pytest.fixture(scope="module")
def synthesized():
    return SYNTH.synth()


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def _cluster_template(synthesized) -> dict[str, Any]:
    return next(t for t in synthesized.templates.values() if _resources(t, "AWS::EKS::Cluster"))


def test_the_vpc_takes_the_pod_range_and_a_routed_pod_subnet_per_zone(synthesized):
    template = _cluster_template(synthesized)
    blocks = _resources(template, "AWS::EC2::VPCCidrBlock")
    assert [b["Properties"]["CidrBlock"] for b in blocks.values()] == [POD_CIDR]
    block_id = next(iter(blocks))
    pods = synthesized.plan.addresses.pods
    subnets = {v["Properties"]["CidrBlock"]: (k, v) for k, v in _resources(template, "AWS::EC2::Subnet").items()}
    for zone, cidr in pods.subnets.items():
        logical, subnet = subnets[cidr]
        assert subnet["Properties"]["AvailabilityZone"] == zone
        assert block_id in subnet.get("DependsOn", [])
        assoc = next(v for v in _resources(template, "AWS::EC2::SubnetRouteTableAssociation").values()
                     if v["Properties"]["SubnetId"] == {"Ref": logical})
        table = assoc["Properties"]["RouteTableId"]
        route = next(v for v in _resources(template, "AWS::EC2::Route").values()
                     if v["Properties"]["RouteTableId"] == table)
        assert route["Properties"]["DestinationCidrBlock"] == "0.0.0.0/0" and "NatGatewayId" in route["Properties"]
        s3 = next(v for v in _resources(template, "AWS::EC2::VPCEndpoint").values()
                  if v["Properties"].get("VpcEndpointType") == "Gateway")
        assert table in s3["Properties"]["RouteTableIds"]


def test_the_endpoints_admit_https_from_the_pods(synthesized):
    template = _cluster_template(synthesized)
    groups = _resources(template, "AWS::EC2::SecurityGroup")
    endpoint_groups = [g for k, g in groups.items() if "Ecr" in k or "Sts" in k]
    assert endpoint_groups
    for g in endpoint_groups:
        assert any(r.get("CidrIp") == POD_CIDR and r["FromPort"] == 443 for r in g["Properties"]["SecurityGroupIngress"])


def _manifest_with(template: dict[str, Any], kind: str) -> tuple[str, dict[str, Any]]:
    for k, v in template["Resources"].items():
        if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and kind in json.dumps(v["Properties"]["Manifest"]):
            return k, v
    raise AssertionError(f"no manifest with {kind}")


def test_eniconfigs_name_each_zone_its_pod_subnet_and_the_cluster_group(synthesized):
    template = _cluster_template(synthesized)
    _, manifest = _manifest_with(template, contract.ENICONFIG_KIND)
    text = json.dumps(manifest["Properties"]["Manifest"])
    for zone in synthesized.plan.addresses.pods.subnets:
        assert f'\\"name\\":\\"{zone}\\"' in text
    assert contract.ENICONFIG_API_VERSION in text and "ClusterSecurityGroupId" in text
    assert text.count('\\"subnet\\"') == len(synthesized.plan.addresses.pods.subnets)


def test_node_groups_wait_for_the_eniconfigs_which_wait_for_the_crd(synthesized):
    template = _cluster_template(synthesized)
    eni_id, manifest = _manifest_with(template, contract.ENICONFIG_KIND)
    waits = [d for d in manifest.get("DependsOn", []) if "EniConfigCrdEstablished" in d]
    assert waits
    wait = template["Resources"][waits[0]]
    assert contract.ENICONFIG_CRD_NAME in json.dumps(wait["Properties"])
    for k, ng in _resources(template, "AWS::EKS::Nodegroup").items():
        assert eni_id in ng.get("DependsOn", []), k


def test_an_eks_ami_group_leaves_max_pods_to_the_managed_node_group(synthesized):
    # EKS appends its own NodeConfig to an EKS AMI's user data and calculates maxPods for custom networking itself
    plan = synthesized.plan
    eks_ami = [g for g in plan.all_node_groups if not g.ami_id]
    assert {g.name for g in eks_ami} == {"system", "gpu"}
    assert all(plan.addresses.max_pods(g.name) is not None for g in eks_ami)
    assert not any("maxPods" in _user_data(json.dumps(gpu_launch_template(synthesized, g.name))) for g in eks_ami)


def test_a_custom_ami_group_gets_the_custom_networking_max_pods(synthesized):
    plan = synthesized.plan
    (group,) = [g for g in plan.all_node_groups if g.ami_id]
    want = plan.addresses.max_pods(group.name)
    assert want is not None
    assert f"maxPods: {want}" in _user_data(json.dumps(gpu_launch_template(synthesized, group.name)))


def _user_data(properties_json: str) -> str:
    import base64

    data = json.loads(properties_json).get("UserData")
    if isinstance(data, dict) and "Fn::Base64" in data and isinstance(data["Fn::Base64"], str):
        return data["Fn::Base64"]
    if isinstance(data, str):
        return base64.b64decode(data).decode()
    return json.dumps(data)


# --- Karpenter pools -----------------------------------------------------------------------------------------------

def test_a_p5en_pool_takes_custom_networking_and_its_max_pods():
    plan = pools("p5en.48xlarge").plan()
    addresses = plan.addresses
    assert addresses is not None and addresses.pods is not None and plan.karpenter is not None
    instance = catalog.get("p5en.48xlarge")
    ipv4 = ipv4_per_interface(instance.name)
    assert ipv4 is not None
    twin = next(g for g in addresses.groups if g.name == "pool0")
    assert twin.zones == ("us-west-2b",) and twin.per_node is not None and twin.per_node.custom_networking
    enis = card0_slots(instance) - 2  # the primary and the pool's efa-only interface on card 0
    assert twin.per_node.cni_enis == enis and twin.per_node.max_pods == enis * (ipv4 - 1) + 2
    # the pool's pods are counted in its zone's pod subnet, not in its private subnet
    assert twin.per_zone() == twin.nodes_per_zone * twin.per_node.node
    assert addresses.pods.per_zone["us-west-2b"] >= 4 * twin.per_node.pods
    assert "us-west-2b" in addresses.pods.subnets
    (pool,) = plan.karpenter.pools
    assert pool.max_pods == addresses.max_pods("pool0") == twin.per_node.max_pods
    node_class = _build(plan).find("EC2NodeClass", "pool0")
    assert node_class["spec"]["kubelet"]["maxPods"] == twin.per_node.max_pods


def test_without_a_pod_cidr_a_pool_keeps_karpenters_max_pods():
    plan = pools("p5en.48xlarge", pod_cidr=None).plan()
    assert plan.karpenter is not None and plan.karpenter.pools[0].max_pods is None
    assert "maxPods" not in _build(plan).find("EC2NodeClass", "pool0")["spec"]["kubelet"]


def test_fails_a_p5_pool_whose_card0_has_no_slot_left_for_pod_enis():
    problems = pools("p5en.48xlarge", "p5.48xlarge").problems()
    pool_problems = [p for p in problems if p.field.startswith("karpenterNodePools")]
    assert len(pool_problems) == 1, [p.render() for p in problems]
    (p,) = pool_problems
    assert p.field == "karpenterNodePools[1].instanceType" and p.value == "p5.48xlarge"
    assert "Karpenter pool pool1" in p.message and "no interface is left for the pods' ENIs" in p.message
    assert "managedNodeGroups" in p.fix and "remove vpc.podCIDR" in p.fix
    # no refusal of pools as such: the p5en pool and the node group pass
    assert not any(p.field == POD_CIDR_FIELD for p in problems), [p.render() for p in problems]


def test_the_pools_wait_for_the_eniconfigs_of_their_zones(synthesized):
    template = _cluster_template(synthesized)
    eni_id, eni_manifest = _manifest_with(template, contract.ENICONFIG_KIND)
    pools = [(k, v) for k, v in _resources(template, "Custom::AWSCDK-EKS-KubernetesResource").items()
             if '\\"kind\\":\\"EC2NodeClass\\",\\"metadata\\"' in json.dumps(v["Properties"]["Manifest"])]
    assert len(pools) == 1
    _, pools_manifest = pools[0]
    assert eni_id in pools_manifest.get("DependsOn", [])
    # the pool's zone has a pod subnet and an ENIConfig naming it
    pod_subnets = synthesized.plan.addresses.pods.subnets
    subnets = {v["Properties"]["CidrBlock"]: k for k, v in _resources(template, "AWS::EC2::Subnet").items()}
    pool_subnet = subnets[pod_subnets["us-west-2b"]]
    eni_text = json.dumps(eni_manifest["Properties"]["Manifest"])
    assert '\\"name\\":\\"us-west-2b\\"' in eni_text and pool_subnet in eni_text
    # Karpenter picks the nodes' subnets by the discovery tag: the private subnets only, never a pod subnet
    tagged = {k for k, v in _resources(template, "AWS::EC2::Subnet").items()
              if any(t["Key"] == contract.KARPENTER_DISCOVERY_TAG for t in v["Properties"].get("Tags", []))}
    assert tagged and pool_subnet not in tagged and not tagged & {subnets[c] for c in pod_subnets.values()}


def _custom_ami_spec(node_config: str = "") -> Spec:
    return spec().with_group(**CUSTOM_AMI, **({"overrideBootstrapCommand": node_config} if node_config else {}))


NODECONFIG = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: {}\n"


def test_a_custom_ami_groups_own_max_pods_must_be_the_custom_networking_figure():
    # GIVEN a custom-AMI group whose overrideBootstrapCommand sets maxPods WHEN planned with podCIDR
    want = _custom_ami_spec().plan().addresses.max_pods("gpu")
    assert want is not None and want != 250
    # THEN another figure is refused, naming the field, both values and the fix
    (p,) = [p for p in _custom_ami_spec(NODECONFIG.format(250)).problems()
            if p.field.endswith("overrideBootstrapCommand.spec.kubelet.config.maxPods")]
    assert p.field == "managedNodeGroups[0].overrideBootstrapCommand.spec.kubelet.config.maxPods"
    assert p.value == 250 and f"maxPods {want}" in p.message and f"maxPods: {want}" in p.fix
    # AND the same figure is accepted
    assert _custom_ami_spec(NODECONFIG.format(want)).plan().addresses.max_pods("gpu") == want
