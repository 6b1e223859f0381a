"""Kubernetes objects given as documents (vendored YAML files, dicts the charts derive) as cdk8s ApiObjects.

:func:`documents` parses a vendored file once per process with libyaml (where PyYAML has it) and hands out fresh
copies; :func:`api_object` makes one ApiObject of a document, its fields as JSON patches. Both are what every
chart of vendored objects uses: building the object from the parsed document costs a few milliseconds, where
``cdk8s.Include`` (which parses the file in the jsii kernel on every build) costs about 0.1 s.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import cdk8s
import yaml
from constructs import Construct

SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML was built with it (the same objects as PyYAML's own, several times faster)."""


@cache
def _documents_json(path: Path) -> str:
    return json.dumps([d for d in yaml.load_all(path.read_text(), Loader=SAFE_LOADER) if d])


def documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty YAML documents of ``path`` (a fresh copy per call: callers may change them)."""
    docs: list[dict[str, Any]] = json.loads(_documents_json(path))
    return docs


_METADATA = frozenset({"name", "namespace", "labels", "annotations"})


def api_object(scope: Construct, id: str, doc: dict[str, Any]) -> cdk8s.ApiObject:
    """``doc`` as an ApiObject: its name, namespace, labels and annotations as metadata, every other top-level
    field as a JSON patch, so the object renders as the document. Other metadata would be lost, so it is refused."""
    meta = doc["metadata"]
    other = sorted(set(meta) - _METADATA)
    if other:
        raise ValueError(f"{doc['kind']} {meta.get('name')}: metadata {other} would not be rendered")
    obj = cdk8s.ApiObject(scope, id, api_version=doc["apiVersion"], kind=doc["kind"], metadata=cdk8s.ApiObjectMetadata(
        name=meta["name"], namespace=meta.get("namespace"), labels=meta.get("labels"),
        annotations=meta.get("annotations"),
    ))
    for key, value in doc.items():
        if key not in ("apiVersion", "kind", "metadata"):
            obj.add_json_patch(cdk8s.JsonPatch.add(f"/{key}", value))
    return obj
