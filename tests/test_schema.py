"""The published JSON Schema matches the models and accepts the shipped specs."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from efa_stack.spec.schema import SCHEMA_FILE, schema_text
from tests.conftest import CLUSTERS, UPDATE_GOLDEN


def test_published_schema_is_up_to_date():
    if UPDATE_GOLDEN:
        SCHEMA_FILE.write_text(schema_text())
    assert SCHEMA_FILE.read_text() == schema_text(), "run `make snapshots` (or python -m spec.schema)"


@pytest.mark.parametrize("spec", sorted(p.name for p in CLUSTERS.glob("*.yaml")))
def test_shipped_specs_validate_against_schema(spec):
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.validate(yaml.safe_load((CLUSTERS / spec).read_text()), schema)


def test_schema_rejects_unknown_field():
    schema = json.loads(SCHEMA_FILE.read_text())
    doc = yaml.safe_load((CLUSTERS / "default.yaml").read_text())
    doc["managedNodeGroups"][0]["spot"] = True
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)
