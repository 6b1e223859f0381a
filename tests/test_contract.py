"""The names in efa_stack/contract.py are defined there once: no package source types them again."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest

from efa_stack import contract
from tests.support import source_tree

pytestmark = pytest.mark.xdist_group("sources")  # one worker parses the project's modules (source_tree)

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(
    p for d in ("efa_stack", "k8s", "stacks", "aws_constructs") for p in (ROOT / d).rglob("*.py")
    if p.name != "contract.py" and "imports" not in p.parts
) + [ROOT / "app.py"]


def distinctive_values() -> dict[str, str]:
    """Contract string values specific enough that typing one again is a second definition: those with
    a '/', '.' or '-' (resource names, label keys, API groups, object names), not plain words."""
    values: dict[str, str] = {}
    for name in dir(contract):
        value = getattr(contract, name)
        if name.isupper() and isinstance(value, str) and any(c in value for c in "/.-") and len(value) > 6:
            values[value] = name
    return values


@cache
def literals(path: Path) -> list[tuple[int, str]]:
    tree = source_tree(path)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


# Same text, other meaning: cdk8s chart ids (they name the dist/ files), not Kubernetes objects.
OTHER_MEANING = {
    ("k8s/components.py", "neuron-device-plugin"), ("k8s/components.py", "mpi-operator"),
    ("k8s/components.py", "training-operator"), ("k8s/components.py", "kubeflow-trainer"),
    # the names of binaries tools/build.sh builds
    ("efa_stack/rehearsal/binaries.py", "mpi-operator"), ("efa_stack/rehearsal/binaries.py", "training-operator"),
    ("efa_stack/rehearsal/controllers.py", "mpi-operator"), ("efa_stack/rehearsal/controllers.py", "training-operator"),
}


def test_contract_values_are_not_typed_again_in_the_package():
    values = distinctive_values()
    assert "vpc.amazonaws.com/efa" in values and "mpijobs.kubeflow.org" in values  # the check is not empty
    retyped = [
        f"{path.relative_to(ROOT)}:{line}: {text!r} is contract.{values[text]}"
        for path in SOURCES
        for line, text in literals(path)
        if text in values and (str(path.relative_to(ROOT)), text) not in OTHER_MEANING
    ]
    assert retyped == [], "import these from efa_stack.contract:\n" + "\n".join(retyped)


def test_the_check_finds_a_retyped_name(tmp_path):
    # GIVEN a module that types the EFA resource name itself, THEN the scan reports it
    module = tmp_path / "m.py"
    module.write_text('RESOURCE = "vpc.amazonaws.com/efa"\n')
    assert (1, "vpc.amazonaws.com/efa") in literals(module)


# --- short shared strings and literal types -----------------------------------------------------------------
# Strings too short or too plain for the scan above that still cross components: the FSx mount path, the
# interface types of a launch template and the fabric names. Each must come from the contract.
SHORT_SHARED = {contract.FSX_MOUNT_PATH, contract.EFA_ONLY}


def literal_sets(path: Path) -> list[tuple[int, frozenset[object]]]:
    """Every ``Literal[...]`` in ``path`` with the set of its members (constants only)."""
    tree = source_tree(path)
    out: list[tuple[int, frozenset[object]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if all(isinstance(e, ast.Constant) for e in elts):
                out.append((node.lineno, frozenset(e.value for e in elts if isinstance(e, ast.Constant))))
    return out


def contract_literals() -> dict[frozenset[object], str]:
    return {frozenset(get_args(value)): name for name, value in vars(contract).items()
            if get_origin(value) is Literal}


def test_short_shared_strings_are_not_typed_again():
    retyped = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in SOURCES
        for line, text in literals(path)
        if text in SHORT_SHARED
    ]
    assert retyped == [], "use the contract's name for:\n" + "\n".join(retyped)


def test_contract_literal_types_are_not_declared_again():
    shared = contract_literals()
    # the check is not empty: the fabric names and interface types are contract literals
    assert shared[frozenset(contract.FABRICS)] == "Fabric" and frozenset(contract.EFA_INTERFACE_TYPES) < next(
        k for k, v in shared.items() if v == "InterfaceType")
    again = [
        f"{path.relative_to(ROOT)}:{line}: Literal of {sorted(map(str, members))} is contract.{shared[members]}"
        for path in SOURCES
        for line, members in literal_sets(path)
        if members in shared
    ]
    assert again == [], "use the contract's literal type:\n" + "\n".join(again)


def test_the_literal_check_finds_a_declared_fabric(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('from typing import Literal\nFabric = Literal["efa", "tcp", "infiniband"]\n')
    assert (2, frozenset(contract.FABRICS)) in literal_sets(module)
