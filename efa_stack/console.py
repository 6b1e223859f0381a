"""What every command prints the same way: an error with its fix and exit code, and the colour of a status.

* :func:`efa_stack.console.print_error` is the one printer of bad input and no access, for ``efa-stack`` (every
  command), nccl-report, verify and acceptance, and the CDK entry point (``app.py``): a
  :class:`efa_stack.errors.UserError`, or a spec's :class:`efa_stack.spec.errors.SpecError` with its problems;
* :data:`efa_stack.console.STATUS_STYLE` is the one colour table: every status a command prints in colour
  (preflight's, verify's, acceptance's, nccl-report's verdicts and host findings) and the words ``error`` and
  ``note``. No other module names a colour (``tests/test_console.py``).

Exit codes (README, "Commands"): 0 all good, 1 a check failed, 2 bad input or no access.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from rich.markup import escape
from rich.text import Text

from efa_stack.errors import EXIT_USER_ERROR, UserError
from efa_stack.spec.errors import SpecError

STATUS_STYLE: Mapping[str, str] = {
    # efa_stack.contract.CheckStatus: preflight findings, verify's nodes and node groups, the NCCL test
    "pass": "green", "warn": "yellow", "fail": "bold red",
    # acceptance: node verdicts and per-check evidence (efa_stack.acceptance.model)
    "slow": "yellow", "failed": "bold red", "ambiguous": "magenta", "skipped": "dim",
    # nccl-report: a run's verdict (efa_stack.nccl_report.model.VerdictStatus) where the run is ok; a run that is not
    # ok is printed as "fail" whatever its status (efa_stack.nccl_report.render.render_run)
    "below expectation": "bold red", "not EFA": "bold red",
    "single rank": "yellow", "not applicable": "yellow", "not judged": "yellow",
    # nccl-report: which host makes the runs slow (efa_stack.nccl_report.hosts.AnalysisStatus)
    "named": "bold red", "all pass": "green", "no data": "",
    # the words every command prints before a message
    "error": "bold red", "note": "yellow",
}
"""The colour (a rich style) of every status and marker word a command prints; docs/design/commands.md, "Statuses"."""


def styled(status: str, text: str | None = None) -> str:
    """``text`` (default: ``STATUS`` upper-cased) in the colour of ``status``, as escaped rich markup."""
    shown = escape(status.upper() if text is None else text)
    style = STATUS_STYLE.get(status, "")
    return f"[{style}]{shown}[/]" if style else shown


def spec_error_document(exc: SpecError) -> dict[str, Any]:
    """A bad spec as the fields of a ``--json`` error document: the headline, every fix and every problem
    (``unchecked``: what planning could not check yet, when anything)."""
    n = len(exc.problems)
    return {
        "ok": False,
        "error": f"{exc.source}: {n} problem{'s' if n != 1 else ''} in the cluster spec",
        "fix": "; ".join(p.fix for p in exc.problems),
        "problems": [{"field": p.field, "message": p.message, "fix": p.fix, "value": repr(p.value)}
                     for p in exc.problems],
        **({"unchecked": list(exc.unchecked)} if exc.unchecked else {}),
    }


def print_error(
    exc: UserError | SpecError,
    *,
    json_out: bool,
    console: Any,
    echo: Callable[[str], None] | None = None,
    context: Mapping[str, Any] | None = None,
    document: Mapping[str, Any] | None = None,
) -> int:
    """Print ``exc`` for its user and return the exit code: the one way every command reports an error.

    With ``json_out`` the ``--json`` error document goes to ``echo`` (default: ``console``'s file): ``document``
    when the command has its own shape (nccl-report's report), else ``context`` (e.g. the cluster's name)
    followed by the error's fields (:meth:`efa_stack.errors.UserError.to_json`,
    :func:`efa_stack.console.spec_error_document`). Otherwise ``console`` (stderr) gets the spec's own text
    (:meth:`efa_stack.spec.errors.SpecError.render`), or ``error: MESSAGE`` and ``Fix: FIX`` when there is a fix, each
    line unwrapped.
    A spec problem is bad input (exit 2); a UserError carries its exit code.
    """
    if isinstance(exc, SpecError):
        fields, text, code = spec_error_document(exc), Text(exc.render()), EXIT_USER_ERROR
    else:
        fields, code = exc.to_json(), exc.exit_code
        text = Text.assemble(("error", STATUS_STYLE["error"]), ": ", exc.render())
    if json_out:
        doc = dict(document) if document is not None else {**(context or {}), **fields}
        out = json.dumps(doc, indent=2, default=str)
        if echo is not None:
            echo(out)
        else:
            console.file.write(out + "\n")
            console.file.flush()
    else:
        console.print(text, highlight=False, soft_wrap=True)  # a problem on one line, wrapped by the terminal
    return code
