"""An unknown instance type is answered from the catalog by what the type is (its family, series and generation,
then its size), never by spelling alone (efa_stack/planning/catalog.py ``nearest_types``, ``unknown_type_advice``);
the spec's problem and ``nccl-report`` say the same."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from efa_stack import contract
from efa_stack.nccl_report import report_command
from efa_stack.planning import catalog
from tests.support import BASE, plan_of, problems_of

G4DN_LOG = Path(__file__).parent / "fixtures" / "nccl" / "g4dn.metal-2node-efa-mpijob.log"


def test_a_size_the_family_lacks_gets_the_family_first_nearest_size_first():
    # p5 comes in 4xlarge and 48xlarge; spelling alone once gave p5.4xlarge, c5.9xlarge, r5.16xlarge
    assert catalog.nearest_types("p5.96xlarge") == ["p5.48xlarge", "p5.4xlarge", "p5e.48xlarge"]
    assert catalog.family_sizes("p5") == ["4xlarge", "48xlarge"]


def test_an_unknown_generation_gets_the_nearest_generation_of_its_series():
    assert catalog.nearest_types("p9.48xlarge") == ["p6-b200.48xlarge", "p6-b300.48xlarge", "p5.48xlarge"]
    assert catalog.nearest_types("trn3.48xlarge")[:2] == ["trn2.48xlarge", "trn2u.48xlarge"]


def test_an_unknown_series_gets_nothing_rather_than_a_lookalike():
    assert catalog.nearest_types("zz9.48xlarge") == []


def test_suggestions_keep_to_what_the_caller_accepts():
    # types whose accelerators efa-stack has no device plugin for are never suggested
    assert all(catalog.get(n).unsupported_accelerator is None for n in catalog.nearest_types("dl9.24xlarge", n=20))
    efa = catalog.nearest_types("g6.96xlarge", lambda it: it.efa_supported, n=20)
    assert efa and all(catalog.get(n).efa_supported for n in efa)


def test_advice_names_the_family_sizes_and_the_nearest_types():
    advice = catalog.unknown_type_advice("p5.96xlarge")
    assert "the catalog's p5 sizes are 4xlarge, 48xlarge" in advice
    assert "the nearest known types are p5.48xlarge, p5.4xlarge, p5e.48xlarge" in advice
    assert "efa-stack catalog refresh" in advice
    assert catalog.unknown_type_advice("p5.48xlarg") == "did you mean p5.48xlarge?"


def test_spec_problem_suggests_by_family_and_each_suggestion_is_accepted():
    (p,) = problems_of(BASE.replace("p5.48xlarge", "p5.96xlarge"))
    assert p.field == "managedNodeGroups[0].instanceType"
    assert "the nearest known types are p5.48xlarge, p5.4xlarge, p5e.48xlarge" in p.fix
    for name in ("p5.48xlarge", "p5.4xlarge", "p5e.48xlarge"):
        plan_of(BASE.replace("p5.48xlarge", name))  # an EFA node group on each: all three have EFA


def test_spec_problem_on_an_efa_group_suggests_only_types_with_efa():
    (p,) = problems_of(BASE.replace("p5.48xlarge", "g6.96xlarge"))
    near = p.fix.split("the nearest known types are ", 1)[1].split(";", 1)[0].split(", ")
    assert near and all(catalog.get(n).efa_supported for n in near)


def test_system_group_suggestions_carry_no_accelerator():
    problems = problems_of(BASE + "systemNodeGroup: {instanceType: g6.96xlarge}\n")
    (p,) = [p for p in problems if p.field == "systemNodeGroup.instanceType"]
    near = p.fix.split("the nearest known types are ", 1)[1].split(";", 1)[0].split(", ") \
        if "nearest" in p.fix else []
    assert all(catalog.get(n).accelerator is None for n in near)


@pytest.mark.parametrize(("name", "expected"), [
    ("p9.48xlarge", "p6-b200.48xlarge, p6-b300.48xlarge, p5.48xlarge"),
    ("p5.96xlarge", "p5.48xlarge, p5.4xlarge, p5e.48xlarge"),
])
def test_nccl_report_suggests_by_family(name, expected):
    out, err = io.StringIO(), io.StringIO()
    code = report_command(
        [G4DN_LOG], name, None, False, None, contract.NCCL_PASS_THRESHOLD,
        console=Console(file=out, width=400, color_system=None), err_console=Console(file=err, width=400, color_system=None),
    )
    text = " ".join(err.getvalue().split())
    assert code == 2 and f"unknown instance type '{name}'" in text
    assert expected in text


def test_a_size_one_digit_away_is_another_machine_not_a_typo():
    assert catalog.typo_suggestions("g6.96xlarge") == []
    assert catalog.nearest_types("g6.96xlarge")[0] == "g6.48xlarge"
    assert catalog.typo_suggestions("g6.48xlareg") == ["g6.48xlarge"]
