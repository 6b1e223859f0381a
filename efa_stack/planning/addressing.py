"""Addresses a cluster takes in its private subnets: the nodes' interfaces and the pods' VPC CNI addresses.

Every node takes one address per interface that has one (``efa-only`` interfaces have none). The pods take the
Amazon VPC CNI's addresses, which ``ipamd`` holds on the ENIs of network card 0 only (aws/amazon-vpc-cni-k8s@v1.20.1,
the build efa-stack pins, pkg/ipamd/ipamd.go: "When ENABLE_MULTI_NIC is false, all Network Cards > 0 are marked as
unmanaged"); an ``efa-only`` interface on card 0 takes one of that card's slots. How many it holds depends on its
settings (same tag, README.md):

* default, ``WARM_ENI_TARGET`` 1: "1 elastic network interface and all of its IP addresses" kept free, so a node
  can hold every address of every ENI the CNI can attach: ENIs x ``Ipv4AddressesPerInterface``;
* ``MINIMUM_IP_TARGET`` / ``WARM_IP_TARGET``: a floor of allocated addresses and a number kept free; a node
  that runs at most ``MINIMUM_IP_TARGET`` pods holds ``MINIMUM_IP_TARGET + WARM_IP_TARGET`` (at most what its
  ENIs hold), plus the primary address of each ENI it attaches for them;
* ``ENABLE_PREFIX_DELEGATION``: /28 prefixes (16 addresses; EKS User Guide, "Assign more IP addresses to Amazon
  EKS nodes with prefixes", cni-increase-ip-addresses) instead of single addresses: enough prefixes for the
  kubelet's maxPods plus ``WARM_PREFIX_TARGET``, each slot of an ENI holding one prefix.

The kubelet's maxPods is nodeadm's: ENIs of card 0 x (IPv4 addresses per ENI - 1) + 2 (awslabs/amazon-eks-ami
nodeadm eni_max_pods.go calculateStandardMaxPods, cited in efa_stack/planning/nccl.py too). Per instance type
``Ipv4AddressesPerInterface`` comes from data/ipv4_per_interface.json. The design: docs/design/scale.md.

With ``vpc.podCIDR`` (VPC CNI custom networking, :func:`pod_network`) the pods' addresses come from one pod subnet
per zone carved from that secondary range, and the private subnets hold the nodes' own interfaces only.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

import yaml

from efa_stack import contract
from efa_stack.planning.catalog import InstanceType
from efa_stack.planning.layout import Interface
from efa_stack.planning.limits import (
    AWS_RESERVED_PER_SUBNET,
    SUBNET_MAX_MASK,
    SubnetPlan,
    subnet_plan,
)
from efa_stack.spec.errors import Problem

# Setting names: aws/amazon-vpc-cni-k8s@v1.20.1 (d885b3b) README.md; the EKS add-on takes them under "env", as
# strings (EKS User Guide, managing-vpc-cni: configurationValues '{"env":{"AWS_VPC_K8S_CNI_EXTERNALSNAT":"true"}}').
CNI_ENV = "env"
ENABLE_PREFIX_DELEGATION = "ENABLE_PREFIX_DELEGATION"
WARM_PREFIX_TARGET = "WARM_PREFIX_TARGET"
WARM_IP_TARGET = "WARM_IP_TARGET"
MINIMUM_IP_TARGET = "MINIMUM_IP_TARGET"
CNI_ADDRESS_SETTINGS = (ENABLE_PREFIX_DELEGATION, WARM_PREFIX_TARGET, WARM_IP_TARGET, MINIMUM_IP_TARGET)
PREFIX_ADDRESSES = 16
"""Addresses of a /28 IPv4 prefix."""
GENERATED_WARM_IP_TARGET = 2
"""The free addresses a node keeps when efa-stack sets the warm targets: the README's own pairing of
``MINIMUM_IP_TARGET`` (the expected pods) with ``WARM_IP_TARGET`` 2 ("uses roughly half as many IPs")."""
# VPC CNI custom networking: aws/amazon-vpc-cni-k8s@v1.20.1 (d885b3b) README.md, AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG
# ("true": ipamd allocates ENIs in the subnet and security groups of the node's ENIConfig) and ENI_CONFIG_LABEL_DEF
# (the node label whose value names the ENIConfig; topology.kubernetes.io/zone picks one ENIConfig per zone).
CUSTOM_NETWORK_CFG = "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG"
ENI_CONFIG_LABEL_DEF = "ENI_CONFIG_LABEL_DEF"
ENI_CONFIG_LABEL = "topology.kubernetes.io/zone"
CUSTOM_NETWORKING_ENV = {CUSTOM_NETWORK_CFG: "true", ENI_CONFIG_LABEL_DEF: ENI_CONFIG_LABEL}
POD_CIDR_FIELD = "vpc.podCIDR"
# AWS::EC2::VPCCidrBlock CidrBlock and the VPC User Guide ("VPC CIDR blocks", vpc-cidr-blocks): an IPv4 block between
# /16 and /28; subnets too are /16 to /28 (limits.SUBNET_MAX_MASK).
POD_CIDR_MIN_MASK, POD_CIDR_MAX_MASK = 16, 28
# The ranges a pod CIDR may come from: RFC 1918's three and 100.64.0.0/10, the shared address space the EKS User
# Guide's custom networking tutorial (cni-custom-network-tutorial) associates for pods.
PRIVATE_RANGES = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
SHARED_RANGE = ipaddress.IPv4Network("100.64.0.0/10")
SUBNET_MARGIN = 64
"""efa-stack's margin per private subnet for addresses that are not nodes' or pods': the EKS control plane's
cross-account interfaces, interface endpoints, load balancers placed there."""


@cache
def _ipv4_data() -> dict[str, Any]:
    text = resources.files("efa_stack.planning").joinpath("data/ipv4_per_interface.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def ipv4_per_interface(instance_type: str) -> int | None:
    """EC2's ``Ipv4AddressesPerInterface`` of ``instance_type``, or None when the data has no figure."""
    value = _ipv4_data()["ipv4_per_interface"].get(instance_type)
    return int(value) if value is not None else None


@dataclass(frozen=True)
class CniSettings:
    """The VPC CNI address settings in force (the user's vpc-cni ``configurationValues`` or efa-stack's)."""

    prefix_delegation: bool = False
    warm_prefix_target: int = 0
    warm_ip_target: int = 0
    minimum_ip_target: int = 0

    @property
    def warm_ip_mode(self) -> bool:
        return self.warm_ip_target > 0 or self.minimum_ip_target > 0

    def describe(self) -> str:
        if self.prefix_delegation:
            return f"prefix delegation, {WARM_PREFIX_TARGET} {self.warm_prefix_target}"
        if self.warm_ip_mode:
            return f"{MINIMUM_IP_TARGET} {self.minimum_ip_target} + {WARM_IP_TARGET} {self.warm_ip_target}"
        return "VPC CNI defaults (whole ENIs)"


def _int(value: object) -> int:
    try:
        return max(int(str(value)), 0)
    except ValueError:
        return 0


def cni_settings(configuration_values: str | None) -> CniSettings:
    """The address settings of a vpc-cni ``configurationValues`` (compact JSON from the plan)."""
    env: Mapping[str, object] = {}
    if configuration_values:
        value = json.loads(configuration_values)
        if isinstance(value, dict) and isinstance(value.get(CNI_ENV), dict):
            env = value[CNI_ENV]
    return CniSettings(
        prefix_delegation=str(env.get(ENABLE_PREFIX_DELEGATION, "false")).lower() == "true",
        warm_prefix_target=_int(env.get(WARM_PREFIX_TARGET, 0)),
        warm_ip_target=_int(env.get(WARM_IP_TARGET, 0)),
        minimum_ip_target=_int(env.get(MINIMUM_IP_TARGET, 0)),
    )


@dataclass(frozen=True)
class NodeAddresses:
    """What one node of a node group takes: its interfaces' addresses and the VPC CNI's for pods."""

    node: int
    """Addresses of the launch template's interfaces (ENA and ``efa``; ``efa-only`` has none)."""
    pods: int
    """Addresses the VPC CNI holds for pods (secondary addresses, prefixes, and its extra ENIs' primaries)."""
    cni_enis: int
    """ENIs the VPC CNI can use on network card 0 (the primary included)."""
    max_pods: int
    """The kubelet's maxPods (nodeadm's formula; with custom networking the one efa-stack sets, see
    :func:`node_addresses`)."""
    custom_networking: bool = False
    """The pods' addresses are in the zone's pod subnet, not in the node's private subnet."""

    @property
    def total(self) -> int:
        return self.node + self.pods

    @property
    def in_node_subnet(self) -> int:
        """Addresses the node takes in its private subnet."""
        return self.node if self.custom_networking else self.total

    @property
    def in_pod_subnet(self) -> int:
        """Addresses the node takes in its zone's pod subnet (custom networking only)."""
        return self.pods if self.custom_networking else 0


def card0_slots(instance: InstanceType) -> int:
    """Interfaces network card 0 takes (``MaximumNetworkInterfaces`` of card 0)."""
    return next((c.max_interfaces for c in instance.network_cards if c.index == 0), instance.max_network_interfaces)


def pod_enis(instance: InstanceType, interfaces: Sequence[Interface]) -> int:
    """ENIs the VPC CNI can attach for pods under custom networking: card 0's slots less the primary (ipamd skips
    it, pkg/ipamd/datastore/data_store.go GetAllocatableENIs ``skipPrimary`` with custom networking) and less the
    launch template's other card-0 interfaces (an ``efa-only`` one is counted unmanaged and takes a slot,
    pkg/ipamd/ipamd.go filterUnmanagedENIs ``unmanagedENI[card] += 1``, both at v1.20.1). May be 0 or less."""
    taken = sum(1 for i in interfaces if i.network_card_index == 0 and not i.is_primary)
    return card0_slots(instance) - 1 - taken


def node_addresses(
    instance: InstanceType, interfaces: Sequence[Interface], ipv4: int, settings: CniSettings,
    *, custom_networking: bool = False,
) -> NodeAddresses:
    """The addresses one node takes at most under ``settings`` (see the module docstring).

    With ``custom_networking`` the CNI's ENIs are :func:`pod_enis` (at least 1 here; :func:`custom_networking_problems`
    refuses fewer), each with its primary address in the pod subnet too, and maxPods is the EKS custom-networking
    figure, (ENIs - 1) x (IPv4 addresses per ENI - 1) + 2 (EKS User Guide, cni-custom-network: maxPods with the
    number of network interfaces minus one; awslabs/amazon-eks-ami@81fec2e nodeadm/test/e2e/cases/
    custom-max-pods-expression/scenarios/custom-networking/config.yaml ``((default_enis -1) * (ips_per_eni - 1)) +
    2``), with the ENIs the launch template's other card-0 interfaces take subtracted as well.
    """
    card0 = card0_slots(instance)
    if interfaces:
        node = sum(1 for i in interfaces if i.interface_type != contract.EFA_ONLY)
        taken = sum(1 for i in interfaces if i.network_card_index == 0 and not i.is_primary)
    else:
        node, taken = 1, 0
    if custom_networking:
        enis = max(pod_enis(instance, interfaces), 1)
        max_pods = enis * (ipv4 - 1) + 2
        own = 1  # every CNI ENI is in the pod subnet: its primary address counts there
    else:
        enis = max(card0 - taken, 1)
        max_pods = card0 * (ipv4 - 1) + 2
        own = 0  # the primary ENI's own address is counted in ``node``
    capacity = enis * (ipv4 - 1)  # secondary addresses (or prefix slots) of the CNI's ENIs
    if settings.prefix_delegation:
        prefixes = min(capacity, -(-max_pods // PREFIX_ADDRESSES) + settings.warm_prefix_target)
        used_enis = max(1, -(-prefixes // (ipv4 - 1)))
        pods = prefixes * PREFIX_ADDRESSES + (used_enis - 1 + own)
    elif settings.warm_ip_mode:
        wanted = min(capacity, max(settings.minimum_ip_target, 0) + settings.warm_ip_target)
        used_enis = max(1, -(-wanted // (ipv4 - 1)))
        pods = wanted + (used_enis - 1 + own)
    else:
        pods = capacity + (enis - 1 + own)
    return NodeAddresses(node=node, pods=pods, cni_enis=enis, max_pods=max_pods, custom_networking=custom_networking)


@dataclass(frozen=True)
class GroupAddresses:
    name: str
    zones: tuple[str, ...]
    max_nodes: int
    per_node: NodeAddresses | None
    """None: no ``Ipv4AddressesPerInterface`` figure for the type; only the node's own addresses are counted."""

    @property
    def nodes_per_zone(self) -> int:
        """Nodes in each of its zones at ``maxSize`` (spread evenly, rounded up)."""
        return -(-self.max_nodes // max(len(self.zones), 1))

    def per_zone(self) -> int:
        """Addresses the group takes in each zone's private subnet at ``maxSize``."""
        return self.nodes_per_zone * (self.per_node.in_node_subnet if self.per_node else 1)

    def pods_per_zone(self) -> int:
        """Addresses the group takes in each zone's pod subnet at ``maxSize`` (custom networking)."""
        return self.nodes_per_zone * (self.per_node.in_pod_subnet if self.per_node else 0)


@dataclass(frozen=True)
class PodNetwork:
    """VPC CNI custom networking: the secondary range and its pod subnet per zone (:func:`pod_network`)."""

    cidr: str
    """``vpc.podCIDR``, associated with the VPC as a secondary block."""
    mask: int
    """Prefix length of each pod subnet."""
    subnets: dict[str, str] = field(hash=False)
    """Zone -> the pod subnet's CIDR (the zones where nodes run, in the plan's order)."""
    per_zone: dict[str, int] = field(hash=False)
    """Zone -> addresses the nodes' pods take there at maxSize."""

    @property
    def usable(self) -> int:
        return usable_addresses(self.mask)


@dataclass(frozen=True)
class AddressPlan:
    """The private subnets' size and what the node groups take of them (:func:`address_plan`)."""

    subnets: SubnetPlan
    settings: CniSettings
    groups: tuple[GroupAddresses, ...]
    per_zone: dict[str, int] = field(hash=False)
    generated_env: dict[str, str] = field(hash=False, default_factory=dict)
    """VPC CNI settings efa-stack adds to the vpc-cni add-on's ``configurationValues`` ``env``."""
    pods: PodNetwork | None = None
    """Custom networking's pod subnets (``vpc.podCIDR``); None: pods share the private subnets."""

    @property
    def usable(self) -> int:
        return self.subnets.private_usable

    def max_pods(self, group: str) -> int | None:
        """The kubelet maxPods of ``group`` under custom networking (nodeadm's own figure counts the primary ENI,
        which then hosts no pods); None otherwise. The cluster stack writes it into the NodeConfig of a group with
        a custom AMI; on an EKS AMI the managed node group calculates the figure itself (EKS User Guide,
        cni-custom-network-tutorial). A Karpenter pool's EC2NodeClass carries it as ``kubelet.maxPods``
        (:func:`efa_stack.planning.karpenter.with_max_pods`)."""
        if self.pods is None:
            return None
        found = next((g.per_node for g in self.groups if g.name == group and g.per_node is not None), None)
        return found.max_pods if found is not None else None

    def summary_lines(self) -> list[str]:
        zones = ", ".join(f"{z} {n} of {self.usable}" for z, n in self.per_zone.items())
        what = "nodes' interfaces only; pods in the pod subnets" if self.pods else self.settings.describe()
        lines = [f"  addresses at maxSize: {zones} (private /{self.subnets.private_mask} each; {what})"]
        if self.pods is not None:
            pods = ", ".join(f"{z} {self.pods.subnets[z]} {n} of {self.pods.usable}"
                             for z, n in self.pods.per_zone.items())
            lines.append(f"  pod addresses at maxSize (custom networking, {self.pods.cidr}, /{self.pods.mask} per zone; "
                         f"{self.settings.describe()}): {pods}")
        for g in self.groups:
            if g.per_node is None:
                lines.append(f"    {g.name}: 1 per node (no IPv4-per-interface figure for its type: pods not counted)")
                continue
            a = g.per_node
            if a.custom_networking:
                lines.append(f"    {g.name}: {a.node} node + {a.pods} pod per node ({a.cni_enis} pod ENIs, maxPods "
                             f"{a.max_pods}), {g.per_zone()} node + {g.pods_per_zone()} pod per zone at "
                             f"{g.max_nodes} nodes")
                continue
            lines.append(f"    {g.name}: {a.total} per node ({a.node} node + {a.pods} pod), "
                         f"{g.per_zone()} per zone at {g.max_nodes} nodes")
        return lines


def _groups(
    groups: Sequence[Any], zones: Sequence[str], settings: CniSettings, custom: bool = False,
) -> tuple[GroupAddresses, ...]:
    out = []
    for g in groups:
        ipv4 = ipv4_per_interface(g.instance.name)
        per_node = node_addresses(g.instance, g.interfaces, ipv4, settings, custom_networking=custom) if ipv4 else None
        out.append(GroupAddresses(g.name, tuple(z for z in g.availability_zones if z in zones), g.max_size, per_node))
    return tuple(out)


def _per_zone(groups: Sequence[GroupAddresses], zones: Sequence[str]) -> dict[str, int]:
    per_zone = {z: 0 for z in zones}
    for g in groups:
        for z in g.zones:
            per_zone[z] += g.per_zone()
    return per_zone


class AddressedGroup(NamedTuple):
    """What the address plan reads of a node group (a :class:`~efa_stack.planning.node_groups.NodeGroupPlan` has the same fields)."""

    name: str
    instance: InstanceType
    interfaces: tuple[Interface, ...]
    availability_zones: tuple[str, ...]
    max_size: int


def address_plan(
    cidr: str, zones: Sequence[str], groups: Sequence[Any], user_configuration: str | None,
    *, pod_cidr: str | None = None, pools: Mapping[str, str] | None = None,
) -> tuple[AddressPlan | None, list[Problem]]:
    """The private subnets and the addresses ``groups`` (:class:`~efa_stack.planning.node_groups.NodeGroupPlan` or :class:`AddressedGroup`, the
    system group included) take.

    With the user's VPC CNI settings as given; with none of :data:`CNI_ADDRESS_SETTINGS` set and the CNI's
    defaults too large for a subnet, efa-stack sets ``MINIMUM_IP_TARGET``/``WARM_IP_TARGET`` to what the
    subnets can give each node (``generated_env``). Problems: the nodes and their pods do not fit.

    With ``pod_cidr`` (``vpc.podCIDR``) the pods take the pod subnets of :func:`pod_network` instead, and
    ``generated_env`` turns on custom networking (:data:`CUSTOM_NETWORKING_ENV`). ``pools``: the Karpenter pools'
    nodes among ``groups`` by name -> the pool's field, for :func:`custom_networking_problems`.
    """
    if pod_cidr is not None:
        return _custom_address_plan(cidr, zones, groups, user_configuration, pod_cidr, pools or {})
    user = cni_settings(user_configuration)
    user_env = json.loads(user_configuration).get(CNI_ENV) if user_configuration else None
    user_set = isinstance(user_env, dict) and any(k in user_env for k in CNI_ADDRESS_SETTINGS)
    found = _groups(groups, zones, user)
    per_zone = _per_zone(found, zones)
    subnets = subnet_plan(cidr, len(zones), max(per_zone.values(), default=0) + SUBNET_MARGIN)
    if subnets is None:
        return None, [_vpc_too_small(cidr, zones)]
    room = subnets.private_usable - SUBNET_MARGIN
    if max(per_zone.values(), default=0) <= room:
        return AddressPlan(subnets, user, found, per_zone), []
    if not user_set:
        # The most addresses each node's pods may hold (MINIMUM + WARM) so that every zone fits.
        budget = _pod_budget(found, zones, room)
        if budget is not None and budget > GENERATED_WARM_IP_TARGET:
            generated = CniSettings(minimum_ip_target=budget - GENERATED_WARM_IP_TARGET,
                                    warm_ip_target=GENERATED_WARM_IP_TARGET)
            regrouped = _groups(groups, zones, generated)
            env = {MINIMUM_IP_TARGET: str(generated.minimum_ip_target), WARM_IP_TARGET: str(generated.warm_ip_target)}
            return AddressPlan(subnets, generated, regrouped, _per_zone(regrouped, zones), env), []
    return AddressPlan(subnets, user, found, per_zone), _problems(cidr, subnets, found, per_zone, zones, user, room)


def _vpc_too_small(cidr: str, zones: Sequence[str]) -> Problem:
    return Problem(
        "vpc.cidr", cidr,
        f"too small for a public and a private subnet in each of {len(zones)} availability zones "
        f"(subnets are at least /{SUBNET_MAX_MASK})",
        "use a larger VPC CIDR such as 10.0.0.0/16, or list fewer availabilityZones",
    )


def _custom_address_plan(
    cidr: str, zones: Sequence[str], groups: Sequence[Any], user_configuration: str | None, pod_cidr: str,
    pools: Mapping[str, str],
) -> tuple[AddressPlan | None, list[Problem]]:
    user = cni_settings(user_configuration)
    problems = pod_cidr_problems(pod_cidr, cidr) + custom_networking_problems(groups, pools)
    if problems:
        return None, problems
    found = _groups(groups, zones, user, custom=True)
    per_zone = _per_zone(found, zones)
    subnets = subnet_plan(cidr, len(zones), max(per_zone.values(), default=0) + SUBNET_MARGIN)
    if subnets is None:
        return None, [_vpc_too_small(cidr, zones)]
    room = subnets.private_usable - SUBNET_MARGIN
    problems = _problems(cidr, subnets, found, per_zone, zones, user, room)
    pods, pod_problems = pod_network(pod_cidr, found, zones, user)
    problems += pod_problems
    return AddressPlan(subnets, user, found, per_zone, dict(CUSTOM_NETWORKING_ENV), pods), problems


def example_pod_cidr(vpc_cidr: str) -> str:
    """A /16 of :data:`SHARED_RANGE` outside ``vpc_cidr`` (100.64.0.0/16 unless the VPC is there): the range the
    advice names passes every rule of :func:`pod_cidr_problems`."""
    primary = ipaddress.ip_network(vpc_cidr, strict=False)
    return str(next(n for n in SHARED_RANGE.subnets(new_prefix=POD_CIDR_MIN_MASK) if not n.overlaps(primary)))


def pod_cidr_problems(pod_cidr: str, vpc_cidr: str) -> list[Problem]:
    """What is wrong with ``vpc.podCIDR`` itself and beside the VPC's primary block ``vpc_cidr``.

    A secondary block from another RFC 1918 range than the primary's is refused by EC2 (VPC User Guide,
    vpc-cidr-blocks, "IPv4 CIDR block association restrictions": a primary block in 10.0.0.0/8 takes no
    secondary block from 172.16.0.0/12 or 192.168.0.0/16, and so on), so it is refused here first."""
    example = example_pod_cidr(vpc_cidr)
    try:
        net = ipaddress.ip_network(pod_cidr, strict=True)
    except ValueError as exc:
        return [Problem(POD_CIDR_FIELD, pod_cidr, f"not an IPv4 network ({exc})",
                        f"write a network address with its prefix length, such as {example}")]
    if not isinstance(net, ipaddress.IPv4Network):
        return [Problem(POD_CIDR_FIELD, pod_cidr, "not an IPv4 network; efa-stack builds IPv4 clusters",
                        f"use an IPv4 range such as {example}")]
    problems = []
    if not POD_CIDR_MIN_MASK <= net.prefixlen <= POD_CIDR_MAX_MASK:
        problems.append(Problem(
            POD_CIDR_FIELD, pod_cidr,
            f"a VPC CIDR block (AWS::EC2::VPCCidrBlock) is /{POD_CIDR_MIN_MASK} to /{POD_CIDR_MAX_MASK}",
            f"use a prefix length from /{POD_CIDR_MIN_MASK} to /{POD_CIDR_MAX_MASK}, such as {example}",
        ))
    home = next((r for r in (*PRIVATE_RANGES, SHARED_RANGE) if net.subnet_of(r)), None)
    if home is None:
        problems.append(Problem(
            POD_CIDR_FIELD, pod_cidr, "not inside an RFC 1918 range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16) "
            f"or the shared address space {SHARED_RANGE}",
            f"use a range from {SHARED_RANGE} (EKS custom networking's usual choice), such as {example}",
        ))
    primary = ipaddress.ip_network(vpc_cidr, strict=False)
    if isinstance(primary, ipaddress.IPv4Network):
        if net.overlaps(primary):
            problems.append(Problem(
                POD_CIDR_FIELD, pod_cidr, f"overlaps the VPC's primary range vpc.cidr {vpc_cidr}",
                f"use a range outside {vpc_cidr}, such as {example}",
            ))
        primary_home = next((r for r in PRIVATE_RANGES if primary.subnet_of(r)), None)
        if home in PRIVATE_RANGES and primary_home is not None and home != primary_home:
            problems.append(Problem(
                POD_CIDR_FIELD, pod_cidr,
                f"the VPC's primary range {vpc_cidr} is in {primary_home}, and EC2 does not associate a secondary "
                f"block from another RFC 1918 range ({home}) with such a VPC",
                f"use a range from {primary_home} outside {vpc_cidr}, or from {SHARED_RANGE}",
            ))
    return problems


def custom_networking_problems(groups: Sequence[Any], pools: Mapping[str, str] | None = None) -> list[Problem]:
    """Node groups and Karpenter pools whose interface layout custom networking cannot serve, each with the reason.

    ``pools``: the name of each Karpenter pool's nodes among ``groups`` -> the pool's field (``karpenterNodePools[i]``).
    A pool is held to the same rule as a node group (its EC2NodeClass declares the same interfaces) and its problem
    names ``<field>.instanceType``: a pool cannot take the legacy layout that leaves p5's card 0 a slot for pods
    (:func:`efa_stack.planning.karpenter.layout_problems`), so its fix is another type or a node group.

    * A non-primary interface with addresses on network card 0 (an ``efa`` or ENA interface of the launch
      template): ipamd manages every untagged ENI it finds (aws/amazon-vpc-cni-k8s@v1.20.1 pkg/ipamd/ipamd.go
      setUnmanagedENIs: untagged ENIs stay managed while ``enableManageUntaggedMode`` is on, the default) and under
      custom networking leaves out only the primary ENI (pkg/ipamd/datastore/data_store.go GetAllocatableENIs), so
      it would give pods secondary addresses of that interface's subnet, the node's private subnet.
    * No card-0 slot left for a pod ENI (:func:`pod_enis` < 1): with the primary ENI hosting no pods the node could
      run host-network pods only. (Interfaces on cards above 0 are left alone: ipamd.go markUnmanagedNetworkCards
      marks every card above 0 unmanaged without ENABLE_MULTI_NIC, which efa-stack does not set.)
    * No ``Ipv4AddressesPerInterface`` figure: maxPods cannot be derived.
    """
    problems = []
    for g in groups:
        pool = (pools or {}).get(g.name)
        where = f"Karpenter pool {g.name} ({g.instance.name})" if pool else f"node group {g.name} ({g.instance.name})"
        field_name, value = (f"{pool}.instanceType", g.instance.name) if pool else (POD_CIDR_FIELD, g.name)
        addressed = [i for i in g.interfaces if i.network_card_index == 0 and not i.is_primary
                     and i.interface_type != contract.EFA_ONLY]
        if addressed:
            problems.append(Problem(
                field_name, value,
                f"{where} has an {addressed[0].interface_type} interface with addresses on network card 0 beside "
                "the primary; the VPC CNI manages it and, under custom networking, would give pods addresses of the "
                "node's private subnet from it",
                "use an instance type whose card 0 takes an efa-only interface, or remove vpc.podCIDR",
            ))
            continue
        if pod_enis(g.instance, g.interfaces) < 1:
            card0 = [i.interface_type for i in g.interfaces if i.network_card_index == 0]
            fix = (
                "choose an instance type whose network card 0 takes more interfaces (p5en, p6), run these nodes in a "
                "managedNodeGroups entry with interfaceLayout: legacy (its EFA device is then the primary interface, "
                "which leaves a card-0 slot for pods), or remove vpc.podCIDR"
            ) if pool else (
                "set the group's interfaceLayout: legacy (its EFA device is then the primary interface, which leaves "
                "a card-0 slot for pods), or remove vpc.podCIDR"
            )
            problems.append(Problem(
                field_name, value,
                f"{where}: network card 0 takes {card0_slots(g.instance)} interfaces and its interfaces use "
                f"them all ({', '.join(card0)}); with custom networking the primary interface hosts no pods, so no "
                "interface is left for the pods' ENIs",
                fix,
            ))
            continue
        if ipv4_per_interface(g.instance.name) is None:
            problems.append(Problem(
                field_name, value,
                f"{where}: no IPv4-addresses-per-interface figure, so its maxPods under custom networking cannot be "
                "derived", "use another instance type, or remove vpc.podCIDR",
            ))
    return problems


def pod_network(
    pod_cidr: str, groups: Sequence[GroupAddresses], zones: Sequence[str], settings: CniSettings,
) -> tuple[PodNetwork | None, list[Problem]]:
    """One pod subnet per zone where nodes run (equal parts of ``pod_cidr``, in ``zones``' order), and the problems
    when the pods' addresses do not fit."""
    used = [z for z in zones if any(z in g.zones and g.max_nodes > 0 for g in groups)]
    net = ipaddress.ip_network(pod_cidr)
    mask = net.prefixlen + math.ceil(math.log2(max(len(used), 1)))
    if mask > SUBNET_MAX_MASK:
        return None, [Problem(
            POD_CIDR_FIELD, pod_cidr, f"too small for a pod subnet in each of {len(used)} zones (subnets are at most "
            f"/{SUBNET_MAX_MASK})", "use a larger range, such as 100.64.0.0/16",
        )]
    per_zone = {z: 0 for z in used}
    for g in groups:
        for z in g.zones:
            if z in per_zone:
                per_zone[z] += g.pods_per_zone()
    parts = list(net.subnets(new_prefix=mask))
    pods = PodNetwork(pod_cidr, mask, {z: str(parts[i]) for i, z in enumerate(used)}, per_zone)
    problems = []
    for z, need in per_zone.items():
        if need > pods.usable:
            detail = "; ".join(f"{g.name} {g.pods_per_zone()} ({g.per_node.pods if g.per_node else 0} per node x "
                               f"{g.nodes_per_zone} nodes)" for g in groups if z in g.zones)
            problems.append(Problem(
                POD_CIDR_FIELD, pod_cidr,
                f"its pod subnet in {z} (/{mask}, {pods.usable} usable addresses) cannot hold the pods' addresses "
                f"there: {need} at maxSize with {settings.describe()} ({detail})",
                f"use a larger range (down to /{POD_CIDR_MIN_MASK}), lower maxSize, or set the vpc-cni add-on's "
                f"configurationValues env {MINIMUM_IP_TARGET}/{WARM_IP_TARGET} to the pods your nodes run",
            ))
    return pods, problems


def max_pods_override_problems(groups: Sequence[tuple[str, str | None, str | None]], plan: AddressPlan) -> list[Problem]:
    """``(field prefix, group name, its overrideBootstrapCommand NodeConfig)`` of custom-AMI node groups: under
    custom networking a ``spec.kubelet.config.maxPods`` there other than :meth:`AddressPlan.max_pods` is refused.
    The user's NodeConfig is the last part of the user data, so its value would win (nodeadm merges NodeConfigs
    in order, a later value winning: efa_stack/planning/user_data.py), and a node would admit pods its pod ENIs
    cannot address."""
    problems: list[Problem] = []
    for prefix, name, text in groups:
        want = plan.max_pods(name) if name is not None else None
        if want is None or not text:
            continue
        doc = yaml.safe_load(text)
        spec = doc.get("spec") if isinstance(doc, dict) else None
        kubelet = spec.get("kubelet") if isinstance(spec, dict) else None
        config = kubelet.get("config") if isinstance(kubelet, dict) else None
        value = config.get("maxPods") if isinstance(config, dict) else None
        if value is not None and str(value) != str(want):
            problems.append(Problem(
                f"{prefix}.overrideBootstrapCommand.spec.kubelet.config.maxPods", value,
                f"conflicts with maxPods {want}, what VPC CNI custom networking (vpc.podCIDR) lets this group's "
                "pod ENIs address (pod ENIs x (IPv4 addresses per ENI - 1) + 2)",
                f"set maxPods: {want} or remove it from overrideBootstrapCommand",
            ))
    return problems


def pod_network_refusals(pod_cidr: str | None, *, existing_vpc: bool) -> list[Problem]:
    """Where efa-stack does not build custom networking at all: an existing VPC (its CIDR associations, route
    tables and NAT gateways are the user's). Karpenter pools take it as node groups do: the layout rule of
    :func:`custom_networking_problems`, and the maxPods of :meth:`AddressPlan.max_pods` on their EC2NodeClass."""
    if pod_cidr is None or not existing_vpc:
        return []
    return [Problem(
        POD_CIDR_FIELD, pod_cidr, "efa-stack adds a secondary range and pod subnets only to the VPC it creates; "
        "with vpc.id the VPC, its ranges, route tables and NAT gateways are yours",
        "remove vpc.podCIDR (or remove vpc.id and let efa-stack create the VPC)",
    )]


def _pod_budget(groups: Sequence[GroupAddresses], zones: Sequence[str], room: int) -> int | None:
    """The largest MINIMUM_IP_TARGET + WARM_IP_TARGET with which every zone's nodes fit ``room``."""
    best = None
    for z in zones:
        nodes = [(g, -(-g.max_nodes // max(len(g.zones), 1))) for g in groups if z in g.zones]
        fixed = sum(n * (g.per_node.node if g.per_node else 1) for g, n in nodes)
        counted = sum(n for g, n in nodes if g.per_node is not None)
        if counted == 0:
            continue
        # every counted node holds the budget plus at least its ENI's own primary address (counted in .node)
        budget = (room - fixed) // counted
        best = budget if best is None else min(best, budget)
    return best


def _problems(
    cidr: str, subnets: SubnetPlan, groups: Sequence[GroupAddresses], per_zone: Mapping[str, int],
    zones: Sequence[str], settings: CniSettings, room: int,
) -> list[Problem]:
    problems = []
    for z in zones:
        need = per_zone[z]
        if need <= room:
            continue
        parts = "; ".join(
            f"{g.name} {g.per_zone()} ({g.per_node.total if g.per_node else 1} per node x "
            f"{-(-g.max_nodes // max(len(g.zones), 1))} nodes)"
            for g in groups if z in g.zones
        )
        problems.append(Problem(
            "vpc.cidr", cidr,
            f"its private subnet in {z} cannot hold the node groups there: they take {need} addresses at maxSize with {settings.describe()} ({parts}), but its "
            f"private subnet (/{subnets.private_mask}) has {subnets.private_usable} usable addresses, "
            f"{SUBNET_MARGIN} of them kept for the cluster's own interfaces",
            "use a larger VPC CIDR (at most /16; its private subnets grow up to what the zones leave), lower "
            f"maxSize, or set the vpc-cni add-on's configurationValues env {MINIMUM_IP_TARGET}/{WARM_IP_TARGET} to "
            "the pods your nodes run (fewer addresses held per node), or give the pods a secondary VPC CIDR of "
            f"their own with {POD_CIDR_FIELD} (VPC CNI custom networking)",
        ))
    return problems


def merge_cni_env(user_configuration: str | None, generated: Mapping[str, str], where: str) -> tuple[str | None, list[Problem]]:
    """The vpc-cni ``configurationValues`` with efa-stack's ``generated`` settings under ``env`` added to the user's
    (compact JSON). A setting both give with different values is a problem naming both."""
    if not generated:
        return user_configuration, []
    value: dict[str, Any] = json.loads(user_configuration) if user_configuration else {}
    env = dict(value.get(CNI_ENV) or {})
    problems = []
    for key, ours in generated.items():
        theirs = env.get(key)
        if theirs is not None and str(theirs) != ours:
            problems.append(Problem(
                f"{where}.configurationValues.{CNI_ENV}.{key}", theirs,
                f"efa-stack's address plan sets {key}={ours} so that the nodes' pods fit the private subnets",
                f"remove {key} from the vpc-cni configurationValues, or set it to {ours}",
            ))
        env.setdefault(key, ours)
    value[CNI_ENV] = env
    return json.dumps(value, sort_keys=True, separators=(",", ":")), problems


def usable_addresses(mask: int) -> int:
    return 2 ** (32 - mask) - AWS_RESERVED_PER_SUBNET
