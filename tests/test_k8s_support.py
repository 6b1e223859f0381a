"""Kept for test modules that still import from here: the helpers are in tests/support.py."""

from tests.support import (
    CRD_FILE,
    GOLDEN_K8S,
    GOLDEN_SPECS,
    KUBECTL_HANDLER_LIMIT,
    Built,
    arg_after,
    built,
    built_text,
    crd,
    crd_schema,
    env_of,
    launcher_command,
    mpirun_args,
    spec_text,
    worker,
    worker_container,
)

__all__ = ["CRD_FILE", "GOLDEN_K8S", "GOLDEN_SPECS", "KUBECTL_HANDLER_LIMIT", "Built", "arg_after", "built", "built_text", "crd", "crd_schema", "env_of", "launcher_command", "mpirun_args", "spec_text", "worker", "worker_container"]
