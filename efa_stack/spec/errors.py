"""Validation problems that name the field, the value received and the fix."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PLACEHOLDER = re.compile(r"PLACEHOLDER|^<.*>$|x{6,}|X{6,}|\$\{[A-Za-z_]+\}")
"""Values that published configs leave for their readers to fill in (``PLACEHOLDER_VPC_ID``, ``<my-cluster>``,
``cr-xxxxxxxxxxxx``, ``${AWS_REGION}``)."""


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

    def __init__(
        self, source: str, problems: list[Problem], *, partial: Any = None, stripped: tuple[str, ...] = (),
        renames: tuple[tuple[str, str], ...] = (), unchecked: tuple[str, ...] = (),
    ):
        self.source = source
        self.problems = problems
        self.partial = partial
        """The spec read without the fields of ``problems`` (their defaults instead), so that planning can
        report the file's remaining problems in the same run; None when a required field is missing."""
        self.stripped = stripped
        """The fields left out of ``partial`` (planning's problems under them are not reported)."""
        self.renames = renames
        """(field prefix in ``partial``, field prefix in the file): self-managed ``nodeGroups`` entries that
        ``partial`` holds as managed node groups."""
        self.unchecked = unchecked
        """What planning could not check because its input could not be planned (``<field>: <why>``); it is
        checked once the problems are fixed."""
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.problems)
        head = f"{self.source}: {n} problem{'s' if n != 1 else ''} in the cluster spec"
        lines = [f"  - {p.render()}" for p in self.problems]
        lines += [f"  not checked until those are fixed: {u}" for u in self.unchecked]
        return head + "\n" + "\n".join(lines)
