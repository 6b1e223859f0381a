"""Upstream files efa-stack keeps: the CRDs and controller objects it applies (``k8s/crds/``, but for
``mpijob.yaml``, which is efa-stack's own) and those its tests compare with (``tests/fixtures/upstream/``).

Each stored file is made from its pinned original by one command, ``python -m k8s.vendored [--select crds|others]
ORIGINAL STORED``, and starts with a header that says so (:data:`UPSTREAM`, :data:`DIGEST`, :data:`MADE_BY`,
:data:`KEPT` lines): where the original comes from (repository, tag, commit and path or build), the sha256 of the
original, and the command. What the command changes: CustomResourceDefinitions lose their schema ``description``
strings (:func:`without_descriptions`), which nothing efa-stack runs reads (``kubectl explain`` on a cluster would:
efa-stack's CRDs document no fields); ``--select`` keeps the CRDs of a build or the other objects; the original's
leading comment lines (licence notices) are kept; every document is written again in PyYAML's block style
(:func:`dump_documents`). Nothing else changes. To move a pin: fetch the new original, run the command with
``--upstream`` naming it, and read the diff (docs/design/kubernetes-side.md, "Vendored upstream files").
"""

from __future__ import annotations

import argparse
import hashlib
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from k8s.objects import SAFE_LOADER

UPSTREAM = "# Upstream: "
DIGEST = "# Original sha256: "
MADE_BY = "# Made by: "
KEPT = "# Kept: "
COMMAND = "python -m k8s.vendored"

CRD_KIND = "CustomResourceDefinition"
SELECTIONS: dict[str, tuple[str, Callable[[dict[str, Any]], bool]]] = {
    "all": ("every document", lambda d: True),
    "crds": ("the CustomResourceDefinitions", lambda d: d.get("kind") == CRD_KIND),
    "others": ("every document but the CustomResourceDefinitions", lambda d: d.get("kind") != CRD_KIND),
}
"""``--select`` value -> (what the header says is kept, which documents)."""


class VendorError(ValueError):
    """An original or a stored file that the command cannot use; the message says what to do."""


def without_descriptions(node: Any) -> Any:
    """``node`` with every schema ``description`` string removed (a property *named* description, whose
    value is a schema object, stays)."""
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


SAFE_DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's safe dumper when PyYAML was built with it (the same text as PyYAML's own, several times faster)."""
_NO_FOLDING = 1 << 30
"""A line width no line reaches: no string is folded over lines."""


def dump_documents(docs: list[dict[str, Any]]) -> str:
    """``docs`` as a YAML stream, each after ``---``, keys in their order, no line folded."""
    return yaml.dump_all(docs, Dumper=SAFE_DUMPER, sort_keys=False, width=_NO_FOLDING, explicit_start=True)


def leading_comments(text: str) -> list[str]:
    """The comment lines ``text`` starts with (a licence notice), verbatim."""
    out = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        out.append(line)
    return out


def selected(docs: list[dict[str, Any]], select: str) -> list[dict[str, Any]]:
    """The documents ``select`` keeps, CRDs without their descriptions."""
    keep = SELECTIONS[select][1]
    return [without_descriptions(d) if d.get("kind") == CRD_KIND else d for d in docs if keep(d)]


def command(select: str, stored: str) -> str:
    """The command line that makes ``stored`` from the original (named ORIGINAL)."""
    option = [] if select == "all" else ["--select", select]
    return " ".join([COMMAND, *option, "ORIGINAL", shlex.quote(stored)])


def kept(select: str, docs: list[dict[str, Any]]) -> str:
    """The header's account of what the stored file keeps of the original."""
    what = SELECTIONS[select][0]
    if any(d.get("kind") == CRD_KIND for d in docs):
        return f"{what}; CRD schemas without their description strings, nothing else changed"
    return f"{what}, unchanged"


def header(upstream: str, digest: str, select: str, stored: str, docs: list[dict[str, Any]],
           notes: list[str]) -> str:
    lines = [UPSTREAM + upstream, DIGEST + digest, MADE_BY + command(select, stored), KEPT + kept(select, docs), *notes]
    return "\n".join(lines) + "\n"


def stored_text(original: str, *, upstream: str, select: str, stored: str) -> str:
    """The stored file ``stored`` (a path relative to the repository) made from the text ``original``."""
    if select not in SELECTIONS:
        raise VendorError(f"--select {select!r}: choose one of {', '.join(SELECTIONS)}")
    try:
        docs = [d for d in yaml.load_all(original, Loader=SAFE_LOADER) if d]
    except yaml.YAMLError as e:
        raise VendorError(f"the original is not YAML ({e.__class__.__name__}): give the upstream file itself") from e
    if not all(isinstance(d, dict) and "kind" in d for d in docs):
        raise VendorError("the original holds a document that is not a Kubernetes object: give the upstream file")
    docs = selected(docs, select)
    if not docs:
        raise VendorError(f"the original has no document that --select {select} keeps: check the file and --select")
    digest = hashlib.sha256(original.encode()).hexdigest()
    return header(upstream, digest, select, stored, docs, leading_comments(original)) + dump_documents(docs)


@dataclass(frozen=True)
class Header:
    """The header of a stored file."""

    upstream: str
    digest: str
    select: str
    stored: str
    notes: list[str]


def read_header(text: str) -> Header:
    """The header of a stored file's ``text`` (:class:`VendorError` when it has none)."""
    lines = text.splitlines()
    prefixes = (UPSTREAM, DIGEST, MADE_BY, KEPT)
    if len(lines) < len(prefixes) or not all(line.startswith(p) for line, p in zip(lines, prefixes, strict=False)):
        raise VendorError(f"no vendoring header (lines starting {', '.join(repr(p) for p in prefixes)})")
    words = shlex.split(lines[2].removeprefix(MADE_BY))
    program = COMMAND.split()
    try:
        if words[: len(program)] != program:
            raise SystemExit(2)
        parsed = _parser().parse_args(words[len(program):])
    except SystemExit as e:
        raise VendorError(f"the Made by line {lines[2]!r} is not a `{COMMAND}` command: write it again") from e
    return Header(upstream=lines[0].removeprefix(UPSTREAM), digest=lines[1].removeprefix(DIGEST),
                  select=parsed.select, stored=parsed.stored, notes=leading_comments("\n".join(lines[4:])))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--select", choices=list(SELECTIONS), default="all", help="which documents to keep")
    p.add_argument("--upstream", help="where the original comes from (default: the stored file's Upstream line)")
    p.add_argument("original", help="the upstream file or build output ('-': standard input)")
    p.add_argument("stored", help="the stored file to write, relative to the repository root")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    stored = Path(args.stored)
    try:
        upstream = args.upstream
        if upstream is None:
            if not stored.is_file():
                raise VendorError(f"{stored} does not exist yet: name its origin with --upstream")
            upstream = read_header(stored.read_text()).upstream
        original = sys.stdin.read() if args.original == "-" else Path(args.original).read_text()
        text = stored_text(original, upstream=upstream, select=args.select, stored=args.stored)
    except (VendorError, OSError) as e:
        print(f"{COMMAND}: {e}", file=sys.stderr)
        return 2
    stored.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
