"""The one error type a command reports to its user: what went wrong, how to fix it, the exit code.

Every command (preflight, catalog refresh, nccl-report, verify and its acceptance mode) raises
:class:`efa_stack.errors.UserError` for input it cannot use or a service it cannot ask; the command line prints it with
:func:`efa_stack.errors.print_error`, as one console line or as the ``--json`` error document.
Spec problems keep their own type, :class:`efa_stack.spec.errors.SpecError`, printed by the same function.

This module imports nothing from the package (rich only when printing), so every layer may use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
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



def print_error(
    exc: UserError,
    *,
    json_out: bool,
    console: Any,
    echo: Callable[[str], None] | None = None,
    context: Mapping[str, Any] | None = None,
    document: Mapping[str, Any] | None = None,
) -> int:
    """Print ``exc`` for its user and return its exit code: the one way every command reports a UserError.

    With ``json_out`` the ``--json`` error document goes to ``echo`` (default: ``console``'s file):
    ``document`` when the command has its own shape (nccl-report's report), else ``context`` (e.g. the
    cluster's name) followed by :meth:`efa_stack.errors.UserError.to_json`. Otherwise ``console`` gets one
    ``error: MESSAGE`` line and ``Fix: FIX`` when there is a fix.
    """
    if json_out:
        doc = dict(document) if document is not None else {**(context or {}), **exc.to_json()}
        text = json.dumps(doc, indent=2, default=str)
        if echo is not None:
            echo(text)
        else:
            console.file.write(text + "\n")
            console.file.flush()
    else:
        from rich.markup import escape

        console.print(f"[bold red]error[/]: {escape(exc.render())}", highlight=False)
    return exc.exit_code
