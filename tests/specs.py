"""Spec texts and plan helpers shared by the tests of the spec (no tests here).

:func:`cluster_spec` writes the small spec most tests start from: one EFA node group ``gpu`` of
p5.48xlarge in us-west-2a, in a cluster spanning us-west-2a/b on Kubernetes 1.34. Tests append to it
(sections after it, node group fields indented by four spaces). :func:`plan_of` plans a spec text,
:func:`problems_of` returns the problems of one that is refused.
"""

from __future__ import annotations

import textwrap

import pytest

from efa_stack.planning.plan import ClusterPlan, build_plan
from efa_stack.spec.errors import Problem, SpecError
from efa_stack.spec.loader import parse_spec

SOURCE = "t.yaml"
"""The file name the spec's problems are reported against."""


def cluster_spec(name: str = "t", *, instance_type: str = "p5.48xlarge", min_size: int = 1,
                 desired: int | None = None, max_size: int | None = None, private: bool = False) -> str:
    """A spec with one EFA node group ``gpu`` (``instance_type``, ``minSize`` ``min_size``, ``desiredCapacity``
    and ``maxSize`` only when given, ``privateNetworking: true`` when ``private``); starts with a blank line."""
    group = [f"    instanceType: {instance_type}", f"    minSize: {min_size}"]
    if desired is not None:
        group.append(f"    desiredCapacity: {desired}")
    if max_size is not None:
        group.append(f"    maxSize: {max_size}")
    group.append("    availabilityZones: [us-west-2a]")
    if private:
        group.append("    privateNetworking: true")
    group.append("    efaEnabled: true")
    return cluster_header(name) + "\n".join(["  - name: gpu", *group, ""])


def cluster_header(name: str = "t") -> str:
    """A blank line, then the spec up to ``managedNodeGroups:`` (cluster ``name`` in us-west-2a/b, Kubernetes 1.34)."""
    return "\n".join([
        "",
        "apiVersion: eksctl.io/v1alpha5",
        "kind: ClusterConfig",
        f'metadata: {{name: {name}, region: us-west-2, version: "1.34"}}',
        "availabilityZones: [us-west-2a, us-west-2b]",
        "managedNodeGroups:",
        "",
    ])


def cpu_group(instance_type: str) -> str:
    """A second node group ``cpu`` (one ``instance_type`` node) to append to :func:`cluster_spec`."""
    return f"\n  - name: cpu\n    instanceType: {instance_type}\n    minSize: 1\n"


BASE = cluster_spec(desired=2, max_size=3, private=True)
"""The spec of the validation tests: 1 to 3 p5.48xlarge nodes (2 desired) on private subnets."""


def plan_of(text: str) -> ClusterPlan:
    """The plan of the spec ``text`` (dedented); raises :class:`SpecError` if it is refused."""
    return build_plan(parse_spec(textwrap.dedent(text), source=SOURCE), source=SOURCE)


def problems_of(text: str) -> list[Problem]:
    """Every problem with the spec ``text``; fails the test if the spec is accepted."""
    with pytest.raises(SpecError) as info:
        plan_of(text)
    return info.value.problems


def one_problem(text: str) -> Problem:
    """The one problem with the spec ``text``; fails the test if there are none or several."""
    problems = problems_of(text)
    assert len(problems) == 1, [p.render() for p in problems]
    return problems[0]


def structural_problems(text: str) -> list[Problem]:
    """The problems parsing finds in the spec ``text`` (its shape and types), before any planning."""
    with pytest.raises(SpecError) as info:
        parse_spec(textwrap.dedent(text), source=SOURCE)
    return info.value.problems
