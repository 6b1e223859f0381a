"""Validation problems that name the field, the value received and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Problem:
    field: str
    value: Any
    message: str
    fix: str

    def render(self) -> str:
        shown = _show(self.value)
        return f"{self.field}: {self.message} (got {shown}). Fix: {self.fix}"


def _show(value: Any) -> str:
    if value is _MISSING:
        return "nothing"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Missing:
    def __repr__(self) -> str:
        return "nothing"


_MISSING: Any = _Missing()
MISSING = _MISSING


class FixError(ValueError):
    """A model validator's error that carries its own fix (the loader puts it in the :class:`Problem`)."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.message = message
        self.fix = fix


class SpecError(Exception):
    """One or more problems in a cluster spec; raised before any CloudFormation exists."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = problems
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.problems)
        head = f"{self.source}: {n} problem{'s' if n != 1 else ''} in the cluster spec"
        return head + "\n" + "\n".join(f"  - {p.render()}" for p in self.problems)
