"""Network-interface layouts derived from an instance type's per-card data.

``current`` follows the EC2 user guide "Maximize network bandwidth on Amazon EC2 instances with
multiple network cards": network card 0 device 0 is an ENA ``interface`` (an efa-only interface can
never be primary; on a card 0 that takes a single interface the primary is an ``efa`` interface,
which is EFA and ENA in one); if card 0 supports EFA, card 0 device 1 is ``efa-only``; every further EFA-capable
card gets ``efa-only`` at device 0 and, when ``ena_on_efa_cards`` is set, an ENA ``interface`` at
device 1 (for more IP bandwidth or addresses). Cards that do not support EFA (card 0 of
p6-b300.48xlarge) carry no EFA device.

``legacy`` is the layout of older guides and eksctl: an ``efa`` interface (EFA + ENA) as the primary
on card 0 and an ``efa`` interface at device index 1 on every further card.

Either way the number of EFA devices equals ``EfaInfo.MaximumEfaInterfaces``; :func:`interface_layout`
raises :class:`LayoutError` when the card data cannot provide that.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from efa_stack.planning.catalog import InstanceType, NetworkCard

Layout = Literal["current", "legacy"]
LAYOUTS: tuple[Layout, ...] = ("current", "legacy")
EFA_TYPES = ("efa", "efa-only")
EfaKind = Literal["efa", "efa-only"]


class Interface(NamedTuple):
    network_card_index: int
    device_index: int
    interface_type: Literal["interface", "efa", "efa-only"]

    @property
    def is_efa(self) -> bool:
        return self.interface_type in EFA_TYPES

    @property
    def is_primary(self) -> bool:
        return self.network_card_index == 0 and self.device_index == 0


class LayoutError(ValueError):
    pass


def _efa_kind(card: NetworkCard, prefer: EfaKind) -> EfaKind | None:
    other: EfaKind = "efa" if prefer == "efa-only" else "efa-only"
    if prefer in card.interface_types:
        return prefer
    if other in card.interface_types:
        return other
    return None


def interface_layout(
    instance: InstanceType, layout: Layout = "current", *, ena_on_efa_cards: bool = False
) -> tuple[Interface, ...]:
    """The interfaces a launch template should declare for ``instance``."""
    if not instance.efa_supported or instance.max_efa_interfaces < 1:
        raise LayoutError(f"{instance.name} does not support EFA")
    if layout not in LAYOUTS:
        raise LayoutError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    wanted = instance.max_efa_interfaces
    cards = sorted(instance.network_cards, key=lambda c: c.index)
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
                kind = _efa_kind(card, "efa-only")
                if kind is not None:
                    result.append(Interface(0, 1, kind))
                    efa += 1
            continue
        if efa >= wanted:
            break
        if layout == "current":
            kind = _efa_kind(card, "efa-only")
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
    label = {"interface": "ENA", "efa": "efa", "efa-only": "efa-only"}
    parts = [f"{counts[k]} {label[k]}" for k in ("interface", "efa", "efa-only") if k in counts]
    cards = len({i.network_card_index for i in interfaces})
    return " + ".join(parts) + f" on {cards} card{'s' if cards != 1 else ''}"
