"""The published JSON Schema matches the models and accepts the shipped specs."""

from __future__ import annotations

import json
from functools import cache

import jsonschema
import pytest
import yaml

from efa_stack.spec.models import NodeGroupBase
from efa_stack.spec.schema import SCHEMA_FILE, schema_text
from tests.conftest import CLUSTERS, UPDATE_GOLDEN
from tests.support import schema_validate


def test_published_schema_is_up_to_date():
    if UPDATE_GOLDEN:
        SCHEMA_FILE.write_text(schema_text())
    assert SCHEMA_FILE.read_text() == schema_text(), "run `make snapshots` (or python -m spec.schema)"


@cache
def published_schema() -> dict:
    return json.loads(SCHEMA_FILE.read_text())


@pytest.mark.parametrize("spec", sorted(p.name for p in CLUSTERS.glob("*.yaml")))
def test_shipped_specs_validate_against_schema(spec):
    schema_validate(yaml.safe_load((CLUSTERS / spec).read_text()), published_schema())


def test_schema_rejects_unknown_field():
    doc = yaml.safe_load((CLUSTERS / "default.yaml").read_text())
    doc["managedNodeGroups"][0]["bottlerocket"] = {}
    with pytest.raises(jsonschema.ValidationError):
        schema_validate(doc, published_schema())


# --- docs/spec.md's defaults tables agree with the schema (one source: the models) ---------------

README = CLUSTERS.parent / "docs" / "spec.md"
"""The hand-written spec guide that holds the defaults tables (the README links to it)."""


def _schema_node(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    if "anyOf" in node:  # Optional[Model]: the non-null branch
        node = next(n for n in node["anyOf"] if n.get("type") != "null")
        return _schema_node(schema, node)
    return node


def schema_default(schema: dict, path: str) -> object:
    """The schema's default for a README field path such as ``managedNodeGroups[].capacity``."""
    node: dict = schema
    default: object = None
    for part in path.split("."):
        node = _schema_node(schema, node)
        if part.endswith("[]"):
            node = _schema_node(schema, node["properties"][part[:-2]]["items"])
            continue
        prop = node["properties"][part]
        default = prop.get("default")
        node = prop
    return default


def readme_table(heading: str, prefix: str = "") -> list[tuple[str, str]]:
    """(field, default) rows of the markdown table that follows ``heading`` in docs/spec.md."""
    text = README.read_text().split(heading, 1)[1]
    rows: list[tuple[str, str]] = []
    for line in text.splitlines()[1:]:
        if not line.strip():
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ("field", "---") or set(cells[0]) <= {"-"}:
            continue
        fields = [f.strip().strip("`") for f in cells[0].split(" / ")]
        defaults = [d.strip() for d in cells[1].split(" / ")] if len(fields) > 1 else [cells[1]]
        assert len(fields) == len(defaults), line
        rows += [(prefix + f, d) for f, d in zip(fields, defaults)]
    return rows


README_DEFAULTS = readme_table("Extension fields, for what eksctl cannot say:") + readme_table(
    "`ncclTest` in the spec (all optional):", "ncclTest."
)


def _agrees(readme: str, default: object) -> bool:
    literals = readme.split("`")[1::2]
    prose = readme.replace("`", "")
    if default is None:  # computed default: the README explains it in words
        return bool(prose.strip()) and not (len(literals) == 1 and readme.strip() == f"`{literals[0]}`")
    if isinstance(default, dict):
        for lit in literals:
            parsed = yaml.safe_load(lit)
            if isinstance(parsed, dict) and not parsed.items() <= default.items():
                return False
            if not isinstance(parsed, dict) and parsed not in default.values():
                return False
        counts = [int(w) for w, nxt in zip(prose.split(), prose.split()[1:]) if w.isdigit() and nxt.startswith("node")]
        return all(c == default.get("minSize") for c in counts) and bool(literals)
    shown = json.dumps(default) if isinstance(default, bool) else str(default)
    if readme.strip() == f"`{shown}`":
        return True
    # "`true` for EFA groups, ..." or "pinned `<image>` tag": the literal begins or is part of the default
    return bool(literals) and (literals[0] == shown or (isinstance(default, str) and literals[0] in default
                                                        and prose.strip() != literals[0]))


@pytest.mark.parametrize(("field", "readme_default"), README_DEFAULTS, ids=[f for f, _ in README_DEFAULTS])
def test_readme_defaults_match_schema(field, readme_default):
    # GIVEN the README's row for a field, WHEN compared with the published schema's default,
    # THEN they agree (a computed default is described in words, not given as a literal)
    schema = json.loads(SCHEMA_FILE.read_text())
    assert _agrees(readme_default, schema_default(schema, field)), (field, readme_default)


def test_readme_tables_are_read():
    fields = [f for f, _ in README_DEFAULTS]
    assert "managedNodeGroups[].interfaceLayout" in fields and "ncclTest.shmSizeMiB" in fields
    assert len(fields) >= 18


def test_schema_carries_field_descriptions():
    schema = json.loads(SCHEMA_FILE.read_text())
    ng = schema["$defs"]["ManagedNodeGroupSpec"]["properties"]
    assert "efa-only" in ng["interfaceLayout"]["description"]
    missing = [
        f"{name}.{field}" for name, d in schema["$defs"].items() for field, p in d.get("properties", {}).items()
        if not p.get("description")
    ]
    assert missing == []


def test_node_groups_and_pools_share_one_declared_base():
    # GIVEN the two node kinds WHEN their fields are compared THEN what both declare is the base's, once: the same
    # schema (type, bounds, description) on both, except each kind's own name pattern and the fields that mean
    # something else on each (a node group's optional instanceType, its capacity object)
    schema = json.loads(SCHEMA_FILE.read_text())["$defs"]
    group, pool = schema["ManagedNodeGroupSpec"]["properties"], schema["KarpenterNodePoolSpec"]["properties"]
    shared = {f.alias or n for n, f in NodeGroupBase.model_fields.items()}
    assert set(group) & set(pool) == shared | {"instanceType", "capacity"}
    assert {"volumeIOPS", "volumeThroughput"} <= shared
    assert [f for f in sorted(shared - {"name"}) if group[f] != pool[f]] == []
