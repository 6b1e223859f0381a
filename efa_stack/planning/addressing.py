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
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

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
    """The kubelet's maxPods (nodeadm's formula)."""

    @property
    def total(self) -> int:
        return self.node + self.pods


def node_addresses(
    instance: InstanceType, interfaces: Sequence[Interface], ipv4: int, settings: CniSettings,
) -> NodeAddresses:
    """The addresses one node takes at most under ``settings`` (see the module docstring)."""
    card0 = next((c.max_interfaces for c in instance.network_cards if c.index == 0), instance.max_network_interfaces)
    if interfaces:
        node = sum(1 for i in interfaces if i.interface_type != contract.EFA_ONLY)
        taken = sum(1 for i in interfaces if i.network_card_index == 0 and not i.is_primary)
    else:
        node, taken = 1, 0
    enis = max(card0 - taken, 1)
    max_pods = card0 * (ipv4 - 1) + 2
    capacity = enis * (ipv4 - 1)  # secondary addresses (or prefix slots) of the CNI's ENIs
    if settings.prefix_delegation:
        prefixes = min(capacity, -(-max_pods // PREFIX_ADDRESSES) + settings.warm_prefix_target)
        used_enis = max(1, -(-prefixes // (ipv4 - 1)))
        pods = prefixes * PREFIX_ADDRESSES + (used_enis - 1)
    elif settings.warm_ip_mode:
        wanted = min(capacity, max(settings.minimum_ip_target, 0) + settings.warm_ip_target)
        used_enis = max(1, -(-wanted // (ipv4 - 1)))
        pods = wanted + (used_enis - 1)
    else:
        pods = capacity + (enis - 1)
    return NodeAddresses(node=node, pods=pods, cni_enis=enis, max_pods=max_pods)


@dataclass(frozen=True)
class GroupAddresses:
    name: str
    zones: tuple[str, ...]
    max_nodes: int
    per_node: NodeAddresses | None
    """None: no ``Ipv4AddressesPerInterface`` figure for the type; only the node's own addresses are counted."""

    def per_zone(self) -> int:
        """Addresses the group takes in each of its zones at ``maxSize`` (nodes spread evenly, rounded up)."""
        nodes = -(-self.max_nodes // max(len(self.zones), 1))
        return nodes * (self.per_node.total if self.per_node else 1)


@dataclass(frozen=True)
class AddressPlan:
    """The private subnets' size and what the node groups take of them (:func:`address_plan`)."""

    subnets: SubnetPlan
    settings: CniSettings
    groups: tuple[GroupAddresses, ...]
    per_zone: dict[str, int] = field(hash=False)
    generated_env: dict[str, str] = field(hash=False, default_factory=dict)
    """VPC CNI settings efa-stack adds to the vpc-cni add-on's ``configurationValues`` ``env``."""

    @property
    def usable(self) -> int:
        return self.subnets.private_usable

    def summary_lines(self) -> list[str]:
        zones = ", ".join(f"{z} {n} of {self.usable}" for z, n in self.per_zone.items())
        lines = [(f"  addresses at maxSize: {zones} (private /{self.subnets.private_mask} each; "
                  f"{self.settings.describe()})")]
        for g in self.groups:
            if g.per_node is None:
                lines.append(f"    {g.name}: 1 per node (no IPv4-per-interface figure for its type: pods not counted)")
                continue
            a = g.per_node
            lines.append(f"    {g.name}: {a.total} per node ({a.node} node + {a.pods} pod), "
                         f"{g.per_zone()} per zone at {g.max_nodes} nodes")
        return lines


def _groups(groups: Sequence[Any], zones: Sequence[str], settings: CniSettings) -> tuple[GroupAddresses, ...]:
    out = []
    for g in groups:
        ipv4 = ipv4_per_interface(g.instance.name)
        per_node = node_addresses(g.instance, g.interfaces, ipv4, settings) if ipv4 else None
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
) -> tuple[AddressPlan | None, list[Problem]]:
    """The private subnets and the addresses ``groups`` (:class:`~efa_stack.planning.node_groups.NodeGroupPlan` or :class:`AddressedGroup`, the
    system group included) take.

    With the user's VPC CNI settings as given; with none of :data:`CNI_ADDRESS_SETTINGS` set and the CNI's
    defaults too large for a subnet, efa-stack sets ``MINIMUM_IP_TARGET``/``WARM_IP_TARGET`` to what the
    subnets can give each node (``generated_env``). Problems: the nodes and their pods do not fit.
    """
    user = cni_settings(user_configuration)
    user_env = json.loads(user_configuration).get(CNI_ENV) if user_configuration else None
    user_set = isinstance(user_env, dict) and any(k in user_env for k in CNI_ADDRESS_SETTINGS)
    found = _groups(groups, zones, user)
    per_zone = _per_zone(found, zones)
    subnets = subnet_plan(cidr, len(zones), max(per_zone.values(), default=0) + SUBNET_MARGIN)
    if subnets is None:
        return None, [Problem(
            "vpc.cidr", cidr,
            f"too small for a public and a private subnet in each of {len(zones)} availability zones "
            f"(subnets are at least /{SUBNET_MAX_MASK})",
            "use a larger VPC CIDR such as 10.0.0.0/16, or list fewer availabilityZones",
        )]
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
            "the pods your nodes run (fewer addresses held per node); pods beyond that need a secondary VPC CIDR "
            "with VPC CNI custom networking (ENIConfig per zone), which efa-stack does not build",
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
