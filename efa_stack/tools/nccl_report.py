"""``efa-stack nccl-report``: the command's entry point; the report itself is :mod:`efa_stack.nccl_report`.

The CLI's ``nccl-report`` command imports this module lazily, so the other commands keep working when the
report cannot be imported (``verify --run-nccl`` calls :func:`efa_stack.nccl_report.report_from_text`).
"""

from efa_stack.nccl_report import report_command

__all__ = ["report_command"]
