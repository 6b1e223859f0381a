"""Network-interface layouts (``current`` and ``legacy``) derived from an instance type's per-card data.

Either way the number of EFA devices equals ``EfaInfo.MaximumEfaInterfaces``; :func:`interface_layout`
raises :class:`LayoutError` when the card data cannot provide that. The rules and their sources:
docs/design/efa-interfaces.md.
"""

from __future__ import annotations

from typing import NamedTuple, get_args

from efa_stack import contract
from efa_stack.planning.catalog import InstanceType, NetworkCard

LAYOUTS: tuple[contract.InterfaceLayout, ...] = get_args(contract.InterfaceLayout)


class Interface(NamedTuple):
    network_card_index: int
    device_index: int
    interface_type: contract.InterfaceType

    @property
    def is_efa(self) -> bool:
        return self.interface_type in contract.EFA_INTERFACE_TYPES

    @property
    def is_primary(self) -> bool:
        return self.network_card_index == 0 and self.device_index == 0


class LayoutError(ValueError):
    pass


def _efa_kind(card: NetworkCard, prefer: contract.EfaInterfaceType) -> contract.EfaInterfaceType | None:
    other: contract.EfaInterfaceType = contract.EFA_INTERFACE if prefer == contract.EFA_ONLY else contract.EFA_ONLY
    if prefer in card.interface_types:
        return prefer
    if other in card.interface_types:
        return other
    return None


def _takes_efa_at_card0(card: NetworkCard, wanted: int, layout: contract.InterfaceLayout) -> bool:
    """Whether card 0 carries an EFA device in ``layout`` (the rules of :func:`interface_layout` for card 0)."""
    if wanted < 1:
        return False
    if layout == "legacy" or card.max_interfaces < 2:
        return _efa_kind(card, "efa") == "efa"
    return card.max_interfaces > 1 and _efa_kind(card, contract.EFA_ONLY) is not None


def _spread(cards: list[NetworkCard], wanted: int, layout: contract.InterfaceLayout) -> list[NetworkCard]:
    """``cards`` with the further EFA cards thinned to one per group when the instance type has more EFA-capable
    cards than EFA devices to place and their number is a whole multiple of it: card 0, then every k-th EFA-capable
    further card (k = their number / the EFA devices left), the other cards in between dropped.

    EKS's GB200 page configures a p6e-gb200.36xlarge (17 cards, 4 EFA devices) with "1 efa-only interface in each NCI
    group" (awsdocs/amazon-eks-user-guide@00e3293 latest/ug/ml/ml-eks-nvidia-ultraserver.adoc, "Install the EFA device
    plugin"): one EFA device per equal group of consecutive cards. That the groups are consecutive cards is read from
    that sentence, not from the API; every other type in the catalog has no more EFA-capable further cards than EFA
    devices to place, so this changes none of them (tests/test_catalog_layout.py)."""
    if not cards:
        return cards
    first, further = cards[0], cards[1:]
    left = wanted - (1 if first.index == 0 and _takes_efa_at_card0(first, wanted, layout) else 0)
    capable = [c for c in further if c.efa_capable]
    if left < 1 or len(capable) <= left or len(capable) % left:
        return cards
    step = len(capable) // left
    keep = {c.index for c in capable[::step]}
    return [first, *(c for c in further if c.index in keep or not c.efa_capable)]


def interface_layout(
    instance: InstanceType, layout: contract.InterfaceLayout = "current", *, ena_on_efa_cards: bool = False
) -> tuple[Interface, ...]:
    """The interfaces a launch template should declare for ``instance``."""
    if not instance.efa_supported or instance.max_efa_interfaces < 1:
        raise LayoutError(f"{instance.name} does not support EFA")
    if layout not in LAYOUTS:
        raise LayoutError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    wanted = instance.max_efa_interfaces
    cards = _spread(sorted(instance.network_cards, key=lambda c: c.index), wanted, layout)
    result: list[Interface] = []
    efa = 0
    for card in cards:
        used = 0
        if card.index == 0:
            # The primary is ENA, except in the legacy layout or when card 0 takes only one
            # interface (hpc6id.32xlarge): then it is an ``efa`` interface, EFA and ENA in one.
            single = card.max_interfaces < 2
            if (layout == "legacy" or single) and _efa_kind(card, "efa") == "efa" and efa < wanted:
                result.append(Interface(0, 0, "efa"))
                efa += 1
            else:
                result.append(Interface(0, 0, "interface"))
            used = 1
            if layout == "current" and efa < wanted and card.max_interfaces > used:
                kind = _efa_kind(card, contract.EFA_ONLY)
                if kind is not None:
                    result.append(Interface(0, 1, kind))
                    efa += 1
            continue
        if efa >= wanted:
            break
        if layout == "current":
            kind = _efa_kind(card, contract.EFA_ONLY)
            if kind is None:
                continue
            result.append(Interface(card.index, 0, kind))
            efa += 1
            if ena_on_efa_cards and card.max_interfaces > 1 and "interface" in card.interface_types:
                result.append(Interface(card.index, 1, "interface"))
        else:
            kind = _efa_kind(card, "efa")
            if kind is None:
                continue
            result.append(Interface(card.index, 1, kind))
            efa += 1
    if efa != wanted:
        raise LayoutError(
            f"{instance.name}: the {layout} layout reaches {efa} EFA devices but the instance type "
            f"has {wanted} (MaximumEfaInterfaces)"
        )
    if len(result) > instance.max_network_interfaces:
        raise LayoutError(
            f"{instance.name}: {len(result)} interfaces exceed MaximumNetworkInterfaces "
            f"({instance.max_network_interfaces})"
        )
    return tuple(result)


def efa_devices(interfaces: tuple[Interface, ...]) -> int:
    return sum(1 for i in interfaces if i.is_efa)


def describe(interfaces: tuple[Interface, ...]) -> str:
    """A short human description, e.g. ``1 ENA + 32 efa-only on 32 cards``."""
    counts: dict[str, int] = {}
    for i in interfaces:
        counts[i.interface_type] = counts.get(i.interface_type, 0) + 1
    label = {contract.ENA_INTERFACE: "ENA", contract.EFA_INTERFACE: contract.EFA_INTERFACE, contract.EFA_ONLY: contract.EFA_ONLY}
    parts = [f"{counts[k]} {label[k]}" for k in get_args(contract.InterfaceType) if k in counts]
    cards = len({i.network_card_index for i in interfaces})
    return " + ".join(parts) + f" on {cards} card{'s' if cards != 1 else ''}"
