"""The documentation stays true: the generated spec reference is current, every Sphinx-style cross
reference in the project's Python files resolves, and every data file names its sources."""

from __future__ import annotations

import ast
import fnmatch
import importlib
import json
import re
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from efa_stack.spec.reference import REFERENCE_FILE, reference_text, render_reference
from tests.conftest import ROOT, UPDATE_GOLDEN
from tests.support import source_tree

# --- docs/spec-reference.md is generated from the published schema ---------------------------------


def test_spec_reference_is_up_to_date():
    # GIVEN the reference rendered from the published JSON Schema, THEN the checked-in page is the same
    if UPDATE_GOLDEN:
        REFERENCE_FILE.write_text(reference_text())
    assert REFERENCE_FILE.read_text() == reference_text(), "docs/spec-reference.md is stale: run `make docs`"


def test_spec_reference_lists_every_field():
    # every property of every model appears under its section, with its type and default columns
    schema = json.loads((ROOT / "efa_stack/spec/schema/cluster-spec.schema.json").read_text())
    text = REFERENCE_FILE.read_text()
    for name, model in schema["$defs"].items():
        if "properties" not in model:
            continue
        section = text.split(f"\n## `{name}`\n", 1)
        assert len(section) == 2, f"no section for {name}"
        body = section[1].split("\n## ", 1)[0]
        for field in model["properties"]:
            assert f"| `{field}` |" in body, f"{name}.{field} missing from docs/spec-reference.md"



def test_render_reference_formats_types_defaults_and_links():
    # GIVEN a small schema with a required field, a default, an enum, a nullable reference and a pipe
    schema = {
        "properties": {"name": {"type": "string", "maxLength": 63, "description": "The name."},
                       "part": {"anyOf": [{"$ref": "#/$defs/Part"}, {"type": "null"}], "default": None,
                                "description": "A | B."}},
        "required": ["name"],
        "$defs": {"Part": {"properties": {"kind": {"enum": ["a", "b"], "default": "a", "description": "Kind."}}}},
    }
    # WHEN rendered, THEN each field is one table row with its type, default and description
    text = render_reference(schema)
    assert "| `name` | string (≤ 63 chars) | required | The name. |" in text
    assert "| `part` | [Part](#part) | none (derived or unset) | A \\| B. |" in text
    assert "## `Part`" in text and '| `kind` | `"a"` \\| `"b"` | `"a"` | Kind. |' in text

# --- :mod:`X`, :class:`X`, ... resolve -------------------------------------------------------------

SOURCES = ["efa_stack", "k8s", "aws_constructs", "stacks", "app.py", "bench"]
ROLE = re.compile(r":(mod|func|class|meth|attr|data|exc|obj):`([^`]+)`")
SCRIPTS = {"app", "bench.empty_app", "bench.run"}
"""Modules that are not imported to read their namespace (importing bench.empty_app synthesizes an app)."""

KNOWN_BROKEN: set[tuple[str, str]] = set()
"""(file, target) references in files whose owner has not fixed them yet; each entry must still fail, so
the list only shrinks (see test_known_broken_references_are_still_broken)."""


def python_files() -> list[Path]:
    files: list[Path] = []
    for name in SOURCES:
        path = ROOT / name
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return files


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def top_level_names(path: Path) -> frozenset[str]:
    """Names bound at the top of a file (definitions, assignments, imports), read without importing it."""
    names: set[str] = set()
    for node in source_tree(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def _import(name: str) -> ModuleType | None:
    if name in SCRIPTS:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _getattrs(obj: object, attrs: list[str]) -> bool:
    for attr in attrs:
        if attr in getattr(obj, "__annotations__", {}) or attr in getattr(obj, "model_fields", {}):
            obj = None  # a dataclass/pydantic field without a class-level value
            continue
        if obj is None or not hasattr(obj, attr):
            return False
        obj = getattr(obj, attr)
    return True


def resolves_absolute(target: str) -> bool:
    """``target`` is an importable module, or a module followed by attributes."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        module = _import(".".join(parts[:cut]))
        if module is not None:
            return _getattrs(module, parts[cut:])
    return False


def resolves(target: str, referrer: Path) -> bool:
    target = target.split("<")[-1].rstrip(">").strip().lstrip("~")  # "title <target>" and "~a.b"
    here = module_name(referrer)
    package = here if referrer.name == "__init__.py" else here.rpartition(".")[0]
    if target.startswith("."):
        target = target[1:]
        return any(resolves_absolute(f"{base}.{target}") for base in (here, package) if base)
    if resolves_absolute(target):
        return True
    head, *rest = target.split(".")
    if here in SCRIPTS:  # a name defined in the script itself
        return head in top_level_names(referrer) and not rest
    module = _import(here)
    return module is not None and _getattrs(module, [head, *rest])


def references() -> list[tuple[str, str]]:
    refs: set[tuple[str, str]] = set()
    for path in python_files():
        for match in ROLE.finditer(path.read_text()):
            refs.add((str(path.relative_to(ROOT)), match.group(2)))
    return sorted(refs)


def broken_references() -> list[tuple[str, str]]:
    return [(f, t) for f, t in references() if not resolves(t, ROOT / f)]


def test_resolver_accepts_and_refuses():
    referrer = ROOT / "efa_stack/planning/training.py"
    assert resolves("efa_stack.planning.plan", referrer)  # a module
    assert resolves("~efa_stack.planning.plan.NodeGroupPlan", referrer)  # a class
    assert resolves("efa_stack.planning.plan.NodeGroupPlan.guaranteed_cpus", referrer)  # a field
    assert resolves("TrainingJobPlan", referrer)  # a name of the referring module
    assert resolves(".nccl.worker_sizing", referrer)  # relative to the package
    assert not resolves("efa_stack.spec.plan", referrer)  # before the move to efa_stack.planning
    assert not resolves("NoSuchName", referrer)


def test_there_are_references_to_check():
    assert len(references()) > 50


def test_every_reference_resolves():
    broken = [ref for ref in broken_references() if ref not in KNOWN_BROKEN]
    assert broken == [], "unresolvable :role:`target` references:\n" + "\n".join(f"{f}: {t}" for f, t in broken)


def test_known_broken_references_are_still_broken():
    fixed = KNOWN_BROKEN - set(broken_references())
    assert fixed == set(), f"these now resolve, remove them from KNOWN_BROKEN: {sorted(fixed)}"


# --- every data file names its sources ------------------------------------------------------------

PROVENANCE_KEY = "_source"
DATA_FILES = sorted([*(ROOT / "efa_stack/planning/data").glob("*.json"), *(ROOT / "efa_stack/acceptance/data").glob("*.json")])


@pytest.mark.parametrize("path", DATA_FILES, ids=[p.name for p in DATA_FILES])
def test_data_file_names_its_sources(path):
    # GIVEN a data file the package reads, THEN its top level says where its facts come from, under one key
    data = json.loads(path.read_text())
    assert isinstance(data.get(PROVENANCE_KEY), str) and len(data[PROVENANCE_KEY]) >= 20, (
        f"{path.relative_to(ROOT)}: add a top-level {PROVENANCE_KEY!r} naming its sources"
    )
    others = {"_comment", "$comment", "_about", "about", "_provenance", "source"} & set(data)
    assert others == set(), f"{path.relative_to(ROOT)}: provenance goes under {PROVENANCE_KEY!r}, not {others}"


def test_data_files_are_found():
    assert {p.name for p in DATA_FILES} >= {"instance_catalog.json", "addons.json", "nvlink.json"}


# --- links between the README and docs/ point at files and headings that exist --------------------

DOC_PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors: the heading lowercased, punctuation other than ``-``/``_`` dropped, spaces as ``-``."""
    anchors: set[str] = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("page", DOC_PAGES, ids=[str(p.relative_to(ROOT)) for p in DOC_PAGES])
def test_doc_links_resolve(page):
    broken = []
    text = re.sub(r"`[^`\n]*`", "", page.read_text())  # code spans hold patterns such as `[a-z](...)`
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest)):
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)}: links to missing files or headings: {broken}"


def test_readme_is_short_and_links_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for page in ("docs/spec-reference.md", "docs/preflight.md", "docs/verify.md", "docs/acceptance.md",
                 "docs/nccl-report.md", "docs/deploy-and-apply.md"):
        assert f"({page})" in readme, page


def test_the_kubernetes_side_table_lists_every_component_in_order():
    # GIVEN the component table the rollout is made of WHEN the design page's table is read
    from k8s.components import COMPONENTS

    page = (ROOT / "docs" / "design" / "kubernetes-side.md").read_text()
    rows = re.findall(r"^\| (\d+) \| `([a-z0-9-]+)` \|", page, flags=re.MULTILINE)
    # THEN it lists every chart and release, with its position, in apply order
    assert [(int(n), c) for n, c in rows] == [(c.order, c.id) for c in COMPONENTS]


# --- the README's map ("What lives where") names every folder and package, and only paths that exist ----------

PATH_SPAN = re.compile(r"^[\w.-]+(/[\w.-]+)*/?$")


def readme_map() -> list[tuple[list[str], list[str]]]:
    """Each row of the README's "What lives where" table: the paths of its first column, the code spans of its second."""
    section = (ROOT / "README.md").read_text().split("\n## What lives where\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [(re.findall(r"`([^`]+)`", first), re.findall(r"`([^`]+)`", rest))
            for first, rest in (row.strip("| ").split(" | ", 1) for row in rows)]


def is_path(span: str) -> bool:
    """A code span that names a file or folder (``plan.py``, ``data/``), not a command (``cdk deploy``)."""
    return bool(PATH_SPAN.match(span)) and (span.endswith("/") or bool(Path(span).suffix))


def ignored(name: str) -> bool:
    patterns = [p.rstrip("/") for p in (ROOT / ".gitignore").read_text().split() if not p.startswith("#")]
    return name.startswith(".") or any(fnmatch.fnmatch(name, p) for p in patterns)


def test_the_readme_map_names_every_top_level_folder():
    named = {path.split("/")[0] for paths, _ in readme_map() for path in paths}
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and not ignored(p.name)}
    assert folders >= {"efa_stack", "stacks", "k8s", "aws_constructs", "tests", "docs"}
    assert sorted(folders - named) == []


def test_the_readme_map_names_every_package_and_module_of_efa_stack():
    named = {path.rstrip("/") for paths, _ in readme_map() for path in paths}
    own = {p.relative_to(ROOT).as_posix() for p in (ROOT / "efa_stack").iterdir()
           if (p.is_dir() and any(p.glob("*.py"))) or (p.suffix == ".py" and p.name != "__init__.py")}
    assert {"efa_stack/planning", "efa_stack/tools", "efa_stack/errors.py"} <= own
    assert sorted(own - named) == []


def test_the_readme_map_names_every_module_of_stacks():
    (spans,) = [spans for paths, spans in readme_map() if paths == ["stacks/"]]
    modules = {p.name for p in (ROOT / "stacks").glob("*.py") if p.name != "__init__.py"}
    assert "kubernetes.py" in modules
    assert sorted(modules - set(spans)) == []


def test_every_path_in_the_readme_map_exists():
    missing = []
    for paths, spans in readme_map():
        folders = [ROOT / p for p in paths if p.endswith("/")]
        missing += [p for p in paths if not (ROOT / p).exists()]
        missing += [f"{s} (in the row of {', '.join(paths)})" for s in spans
                    if is_path(s) and not any((base / s).exists() for base in (*folders, ROOT))]
    assert missing == []


def test_the_map_reader_tells_paths_from_commands():
    assert [is_path(s) for s in ("plan.py", "data/", "schema/cluster-spec.schema.json", "cdk deploy", "efa-stack",
                                 "verify --acceptance")] == [True, True, True, False, False, False]
