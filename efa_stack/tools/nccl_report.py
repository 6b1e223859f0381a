"""``efa-stack nccl-report``: the implementation lives in :mod:`efa_stack.nccl_report`; this re-exports it."""

from efa_stack import nccl_report as _impl
from efa_stack.nccl_report import *

__all__ = list(_impl.__all__)
