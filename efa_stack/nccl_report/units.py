"""Sizes as people read them."""

from __future__ import annotations


def human_size(n: int) -> str:
    """``0 B``, ``512 B``, ``1 KiB``, ``1.5 KiB``, ``2 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if value == int(value) else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
