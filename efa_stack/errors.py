"""The one error type a command reports to its user: what went wrong, how to fix it, the exit code.

Every command (preflight, catalog refresh, nccl-report, verify and its acceptance mode) raises
:class:`efa_stack.errors.UserError` for input it cannot use or a service it cannot ask; every command prints it with
:func:`efa_stack.console.print_error`, as one console line or as the ``--json`` error document.
Spec problems keep their own type, :class:`efa_stack.spec.errors.SpecError`, printed by the same function.

This module imports nothing, so every layer may use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USER_ERROR = 2


class UserError(Exception):
    """A problem the user can fix: bad input, no access, a missing object. Never shown as a traceback.

    ``details`` are extra fields of the ``--json`` error (nccl-report puts the log's file, line and
    layout there); the console line shows only the message and the fix.
    """

    def __init__(
        self,
        message: str,
        fix: str = "",
        *,
        exit_code: int = EXIT_USER_ERROR,
        details: Mapping[str, Any] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.exit_code = exit_code
        self.details: dict[str, Any] = dict(details or {})

    def render(self) -> str:
        """The console text: the message, then ``Fix: ...`` on its own line when there is a fix."""
        return self.message + (f"\nFix: {self.fix}" if self.fix else "")

    def to_json(self) -> dict[str, Any]:
        """The error fields of a ``--json`` error document (``ok`` is false; the command adds its context)."""
        return {"ok": False, "error": self.message, "fix": self.fix}
