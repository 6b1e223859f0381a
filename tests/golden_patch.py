"""Golden files of what efa-stack changes in a vendored manifest: "the pinned upstream file, by digest, plus these
patches", instead of a second copy of upstream's text; and of how one spec's chart differs from the reference
spec's (:func:`patch_from`), instead of a second copy of the reference's.

A patch golden names the stored upstream file and its sha256, the objects efa-stack leaves out, and per changed
object a JSON Patch (RFC 6902). Every chart adds efa-stack's labels (:data:`efa_stack.contract.COMMON_LABELS`) to
the objects that lack a label of that key (``cdk8s.Chart(labels=...)``), so those are not repeated per object.
:func:`patch_of` writes the golden from the upstream objects and the chart's; :func:`apply_patch` re-derives the
chart's objects from the upstream objects and the golden (with the ``jsonpatch`` library), which is what the tests
compare with the chart.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from efa_stack import contract
from tests.support import ROOT


def object_id(doc: dict[str, Any]) -> str:
    """``Kind namespace/name`` (``Kind name`` for a cluster-scoped object)."""
    meta = doc["metadata"]
    return f"{doc['kind']} {meta['namespace'] + '/' if meta.get('namespace') else ''}{meta['name']}"


def with_chart_labels(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as a chart renders it unchanged: efa-stack's labels added where it has none of that key."""
    out = copy.deepcopy(doc)
    labels = out["metadata"].setdefault("labels", {})
    for key, value in contract.COMMON_LABELS.items():
        labels.setdefault(key, value)
    return out


def _pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _named(items: list[Any]) -> bool:
    names = [i.get("name") for i in items if isinstance(i, dict)]
    return len(names) == len(items) and None not in names and len(set(names)) == len(names)


def operations(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    """JSON Patch operations that turn ``old`` into ``new``: keys added, removed or changed one by one; items of a
    list of named objects (webhooks, containers) left out one by one, highest index first, each operation also
    naming the item (RFC 6902 ignores other members); items of two lists of one length item by item; any other
    change replaces the value."""
    if old == new:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        ops: list[dict[str, Any]] = [{"op": "remove", "path": f"{path}/{_pointer(k)}"} for k in old if k not in new]
        for k, v in new.items():
            where = f"{path}/{_pointer(k)}"
            ops += [{"op": "add", "path": where, "value": v}] if k not in old else operations(old[k], v, where)
        return ops
    if isinstance(old, list) and isinstance(new, list) and _named(old) and _named(new):
        names = {n["name"] for n in new}
        kept = [i for i in old if i["name"] in names]
        if [i["name"] for i in kept] == [n["name"] for n in new]:
            ops = [{"op": "remove", "path": f"{path}/{i}", "name": item["name"]}
                   for i, item in reversed(list(enumerate(old))) if item["name"] not in names]
            for i, (a, b) in enumerate(zip(kept, new, strict=True)):
                ops += operations(a, b, f"{path}/{i}")
            return ops
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [op for i, (a, b) in enumerate(zip(old, new, strict=True)) for op in operations(a, b, f"{path}/{i}")]
    return [{"op": "replace", "path": path, "value": new}]


def patch_of(upstream: list[dict[str, Any]], rendered: list[dict[str, Any]]) -> dict[str, Any]:
    """What turns the ``upstream`` objects into the ``rendered`` ones: ``removed`` object ids, ``changed``: id ->
    operations. Refuses objects added or reordered (not a patch of upstream's build)."""
    ids = [object_id(d) for d in rendered]
    by_id = {object_id(d): d for d in upstream}
    assert set(ids) <= set(by_id), f"objects upstream lacks: {sorted(set(ids) - set(by_id))}"
    assert ids == [i for i in by_id if i in ids], "the chart reorders upstream's objects"
    changed = {i: ops for i in ids if (ops := operations(with_chart_labels(by_id[i]), rendered[ids.index(i)]))}
    return {"removed": [i for i in by_id if i not in ids], "changed": changed}


def apply_patch(upstream: list[dict[str, Any]], patch: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``upstream`` objects less ``patch["removed"]``, with the chart's labels and ``patch["changed"]``."""
    out = []
    for doc in upstream:
        i = object_id(doc)
        if i not in patch["removed"]:
            out.append(jsonpatch.apply_patch(with_chart_labels(doc), patch["changed"].get(i, [])))
    return out


def patch_from(base: list[dict[str, Any]], docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """What turns another spec's objects of a chart (``base``) into ``docs``, object by object in order: id of the
    object in ``docs`` -> operations. Refuses charts of other lengths or kinds (not one chart of two specs)."""
    assert [d["kind"] for d in base] == [d["kind"] for d in docs], "not the same objects in the same order"
    return {object_id(d): operations(b, d) for b, d in zip(base, docs, strict=True)}


def apply_from(base: list[dict[str, Any]], patch: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """``base`` patched object by object as :func:`patch_from` wrote."""
    assert len(patch) == len(base), f"{len(patch)} patches for {len(base)} objects"
    return [jsonpatch.apply_patch(b, ops) for b, ops in zip(base, patch.values(), strict=True)]


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a configuration file in a ConfigMap) as literal blocks, readable in a diff."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _represent_str)


def golden_text(head: list[str], patch: dict[str, Any]) -> str:
    """A patch golden: ``head`` as comment lines, then the patch."""
    return "".join(f"# {line}\n" for line in head) + yaml.dump(patch, Dumper=_Dumper, sort_keys=False,
                                                                width=1 << 30)


def patch_text(stored: Path, upstream_line: str, what: str, patch: dict[str, Any]) -> str:
    """The golden of :func:`patch_of`: a header naming the stored upstream file (path, sha256, its Upstream line)."""
    digest = hashlib.sha256(stored.read_bytes()).hexdigest()
    return golden_text([
        f"{what}: the objects of {stored.relative_to(ROOT).as_posix()} (sha256 {digest}),",
        f"made from {upstream_line},",
        "with efa-stack's labels where an object has none of that key, less the objects under `removed`, each",
        "object under `changed` patched as its JSON Patch (RFC 6902) says.",
    ], patch)
