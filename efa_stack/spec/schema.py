"""The published JSON Schema of the cluster spec, generated from the models.

    python -m efa_stack.spec.schema        # rewrite efa_stack/spec/schema/cluster-spec.schema.json
"""

from __future__ import annotations

import json
from pathlib import Path

from efa_stack.spec.models import ClusterSpec

SCHEMA_FILE = Path(__file__).parent / "schema" / "cluster-spec.schema.json"


def schema_text() -> str:
    schema = ClusterSpec.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "efa-stack cluster spec (eksctl ClusterConfig + extensions)"
    return json.dumps(schema, indent=1, sort_keys=True) + "\n"


def main() -> None:
    SCHEMA_FILE.write_text(schema_text())
    print(f"wrote {SCHEMA_FILE}")


if __name__ == "__main__":
    main()
