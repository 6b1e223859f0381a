"""Kept for test modules that still import from here: the helpers are in tests/support.py."""

from tests.support import (
    BASE,
    SOURCE,
    cluster_header,
    cluster_spec,
    cpu_group,
    one_problem,
    plan_of,
    problems_of,
    structural_problems,
)

__all__ = ["BASE", "SOURCE", "cluster_header", "cluster_spec", "cpu_group", "one_problem", "plan_of", "problems_of", "structural_problems"]
