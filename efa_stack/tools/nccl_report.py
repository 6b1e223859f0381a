"""``efa-stack nccl-report``: the command's entry point; the report itself is :mod:`efa_stack.nccl_report`.

The CLI and ``verify --run-nccl`` import this module lazily, so the other commands keep working when
the report (matplotlib, pydantic models) cannot be imported.
"""

from efa_stack.nccl_report import DEFAULT_THRESHOLD, report_command

__all__ = ["DEFAULT_THRESHOLD", "report_command"]
