"""Read a cluster spec file into :class:`efa_stack.spec.models.ClusterSpec`, or fail with every problem.

Reading is bounded before anything is built: the file's size, the YAML nesting depth and the number
of nodes (aliases counted as what they expand to) have fixed limits, a key given twice in one
mapping and a second YAML document are errors, and the bytes must be UTF-8. Whatever the input,
the result is a spec or a :class:`SpecError`, in well under a second.
"""

from __future__ import annotations

import difflib
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from efa_stack import contract
from efa_stack.spec.errors import MISSING, FixError, Problem, SpecError
from efa_stack.spec.models import (
    MAX_MANAGED_NODE_GROUPS,
    MAX_USER_NODE_GROUPS,
    MIN_VOLUME_GIB,
    NODES_QUOTA_FIX,
    UNSUPPORTED_ADDON_FIELDS,
    UNSUPPORTED_EKSCTL_FIELDS,
    UNSUPPORTED_NODE_REPAIR_FIELDS,
    UNSUPPORTED_NODEGROUP_FIELDS,
    UNSUPPORTED_POD_IDENTITY_FIELDS,
    UNSUPPORTED_VPC_FIELDS,
    ClusterSpec,
)

MAX_SPEC_BYTES = 64 * 1024
"""Largest spec file read (bytes). eksctl's own examples are 1-5 KB; 29 node groups fit with room."""
MAX_YAML_DEPTH = 20
"""Deepest nesting of mappings and sequences (the spec's own structure is at most 6 levels deep)."""
MAX_YAML_NODES = 20_000
"""Most YAML nodes (scalars, sequences, mappings) in the document, aliases counted as expanded."""
MAX_INT_DIGITS = 20
"""Longest integer literal (digits) read; every number in the spec fits in far fewer."""
MAX_PROBLEMS = 50
"""Most problems listed from the structural check; the rest are counted in one final line."""

_FIX_SIZE = "keep the spec to one eksctl ClusterConfig (a few KB); move generated content elsewhere"

try:  # libyaml's event parser when PyYAML has it; the composer stays in Python, where it is bounded
    from yaml._yaml import CParser as _EventSource
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _EventSource(Reader, Scanner, Parser):  # type: ignore[no-redef]  # the pure-Python fallback
        def __init__(self, stream: str):
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)


class _Refused(yaml.YAMLError):
    """Input that is well-formed YAML but outside what a spec may be (with where and how to fix it)."""

    def __init__(self, mark: Any, message: str, fix: str):
        super().__init__(message)
        self.mark = mark
        self.message = message
        self.fix = fix

    @property
    def where(self) -> str:
        return _where(self.mark)


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown position"


_LIBYAML_TOO_DEEP = "maximum nesting depth"
"""In libyaml's error for nesting past its own limit ("exceeded maximum nesting depth", libyaml 0.2.6)."""


def _too_deep(mark: Any) -> _Refused:
    return _Refused(mark, f"the document nests deeper than {MAX_YAML_DEPTH} levels",
                    "a cluster spec nests at most 6 levels; flatten the structure at that position")


class _SpecLoader(Composer, _EventSource, SafeConstructor, Resolver):
    """A safe loader with limits: depth and node count while composing, no duplicate keys, short ints."""

    def __init__(self, text: str):
        _EventSource.__init__(self, text)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        Composer.__init__(self)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()
        mark = event.start_mark if event is not None else None
        self._nodes += 1
        if self._nodes > MAX_YAML_NODES:
            raise _Refused(mark, f"the document has more than {MAX_YAML_NODES} YAML nodes", _FIX_SIZE)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise _too_deep(mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        # eksctl reads the file with sigs.k8s.io/yaml UnmarshalStrict, which rejects a key given
        # twice (eksctl-io/eksctl@v0.230.0:pkg/eks/api.go ParseConfig). PyYAML keeps the last one.
        first: dict[str, Any] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if key_node.value in first:
                raise _Refused(
                    key_node.start_mark,
                    f"key '{key_node.value}' is given twice in the same mapping "
                    f"(first at {_where(first[key_node.value])}); YAML keeps only one of them",
                    "keep one of the two entries (eksctl rejects duplicate keys too)",
                )
            first[key_node.value] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        if len(node.value) > MAX_INT_DIGITS:
            raise _Refused(
                node.start_mark, f"an integer of {len(node.value)} characters",
                "use a number within the documented limits of the field",
            )
        return super().construct_yaml_int(node)


_SpecLoader.add_constructor(  # type: ignore[type-var]  # the stub admits only yaml's own Loader classes
    "tag:yaml.org,2002:int", _SpecLoader.construct_yaml_int
)


def _check_expansion(root: Node) -> None:
    """Refuse alias bombs and alias cycles: count nodes and depth as if every alias were copied."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in on_path:
            raise _Refused(node.start_mark, "an alias refers to a node that contains it",
                           "write the value out instead of the recursive alias")
        if depth > MAX_YAML_DEPTH:
            raise _Refused(node.start_mark, f"aliases nest the document deeper than {MAX_YAML_DEPTH} levels",
                           "write the values out instead of nesting aliases")
        on_path.add(key)
        total = 1
        if isinstance(node, SequenceNode):
            children: list[Node] = list(node.value)
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        for child in children:
            total += size(child, depth + 1)
            if total > MAX_YAML_NODES:
                raise _Refused(
                    node.start_mark,
                    f"aliases expand the document to more than {MAX_YAML_NODES} YAML nodes",
                    "write the values out instead of repeating aliases (anchors are for small shared values)",
                )
        on_path.discard(key)
        sizes[key] = total
        return total

    size(root, 1)


def _file_problem(path: Path, message: str, fix: str, value: Any = None) -> SpecError:
    return SpecError(str(path), [Problem("file", str(path) if value is None else value, message, fix)])


def load_spec(path: str | Path) -> ClusterSpec:
    """Load and structurally validate ``path``; raises :class:`SpecError`."""
    path = Path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            # A FIFO or a device would block or never end: only regular files are read.
            raise _file_problem(path, "the spec path is not a regular file", "pass a YAML file, e.g. clusters/default.yaml")
        with path.open("rb") as fh:
            raw = fh.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise _file_problem(path, "the spec file does not exist", "pass an existing file, e.g. clusters/default.yaml") from None
    except OSError as exc:
        raise _file_problem(
            path, f"the spec file cannot be read ({exc.__class__.__name__}: {exc.strerror or exc})",
            "pass a readable YAML file",
        ) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise _file_problem(path, f"the spec file is larger than {MAX_SPEC_BYTES // 1024} KiB", _FIX_SIZE)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise _file_problem(
            path, f"the spec file is not UTF-8 text (byte {raw[exc.start]:#04x} at line {line}, offset {exc.start})",
            "save the file as UTF-8 (eksctl reads UTF-8 too)", value=f"line {line}",
        ) from None
    return parse_spec(text, source=str(path))


def read_yaml(text: str, *, source: str = "<spec>") -> Any:
    """The single YAML document in ``text`` as Python data, within the limits above; raises :class:`SpecError`."""
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(source, [Problem("file", f"{len(text)} characters",
                                         f"the spec is larger than {MAX_SPEC_BYTES // 1024} KiB", _FIX_SIZE)])
    loader = _SpecLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except _Refused as exc:
        raise SpecError(source, [Problem("file", exc.where, exc.message, exc.fix)]) from None
    except ComposerError as exc:
        if exc.context == "expected a single document in the stream":
            raise SpecError(source, [Problem(
                "file", _where(exc.problem_mark), "the file holds more than one YAML document ('---')",
                "put one ClusterConfig per file (efa-stack reads exactly one document)",
            )]) from None
        raise SpecError(source, [_syntax_problem(exc)]) from None
    except yaml.YAMLError as exc:
        if _LIBYAML_TOO_DEEP in str(getattr(exc, "problem", "")):
            # libyaml 0.2.6 (PyYAML 6.0.4's wheels) refuses flow collections nested past its own limit (1000) while
            # it reads ahead, before compose_node counts to MAX_YAML_DEPTH: the same refusal, told the same way.
            deep = _too_deep(getattr(exc, "problem_mark", None))
            raise SpecError(source, [Problem("file", deep.where, deep.message, deep.fix)]) from None
        raise SpecError(source, [_syntax_problem(exc)]) from None
    except RecursionError:  # pragma: no cover - the depth limit is far below Python's
        raise SpecError(source, [Problem("file", "unknown position", "the document nests too deeply",
                                         "flatten the structure")]) from None
    finally:
        loader.dispose()


def _syntax_problem(exc: yaml.YAMLError) -> Problem:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return Problem("file", _where(mark), f"not valid YAML: {problem}", "fix the YAML syntax at that position")


def parse_spec(text: str, *, source: str = "<spec>") -> ClusterSpec:
    data = read_yaml(text, source=source)
    if not isinstance(data, dict):
        raise SpecError(
            source,
            [Problem("file", type(data).__name__ if data is not None else "an empty document",
                     "the spec must be a YAML mapping (an eksctl ClusterConfig)",
                     "start from clusters/default.yaml")],
        )
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(source, problems_from_validation(exc, data)) from None


def _loc_text(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "spec"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that owns the field at ``loc`` (for 'did you mean' suggestions)."""
    model: Any = ClusterSpec
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = next(
            (f for n, f in model.model_fields.items() if (f.alias or n) == part), None
        )
        if field is None:
            return None
        ann = field.annotation
        for candidate in getattr(ann, "__args__", (ann,)):
            inner = getattr(candidate, "__args__", (candidate,))
            found = next((c for c in inner if isinstance(c, type) and issubclass(c, BaseModel)), None)
            if found is not None:
                model = found
                break
        else:
            return None
    return model


def _value_at(data: Any, loc: tuple[Any, ...]) -> Any:
    cur = data
    for part in loc:
        try:
            cur = cur[part]
        except (KeyError, IndexError, TypeError):
            return MISSING
    return cur


def _unsupported_here(loc: tuple[Any, ...]) -> dict[str, str]:
    """eksctl fields known to be unsupported at the place of ``loc`` (the parent of the field)."""
    parent = tuple("[]" if isinstance(p, int) else p for p in loc[:-1])
    return {
        (): UNSUPPORTED_EKSCTL_FIELDS,
        ("managedNodeGroups", "[]"): UNSUPPORTED_NODEGROUP_FIELDS,
        ("vpc",): UNSUPPORTED_VPC_FIELDS,
        ("addons", "[]"): UNSUPPORTED_ADDON_FIELDS,
        ("addons", "[]", "podIdentityAssociations", "[]"): UNSUPPORTED_POD_IDENTITY_FIELDS,
        ("managedNodeGroups", "[]", "nodeRepairConfig"): UNSUPPORTED_NODE_REPAIR_FIELDS,
    }.get(parent, {})


def _capacity_advice(group: Any) -> str | None:
    """The ``capacity`` that says what eksctl's capacityReservation/instanceMarketOptions said.

    eksctl (eksctl-io/eksctl@v0.230.0:pkg/apis/eksctl.io/v1alpha5/types.go, NodeGroupBase) targets a
    reservation with ``capacityReservation.capacityReservationTarget.capacityReservationID`` and a
    Capacity Block with, in addition, ``instanceMarketOptions.marketType: capacity-block``.
    """
    if not isinstance(group, dict):
        return None
    reservation = group.get("capacityReservation")
    market = group.get("instanceMarketOptions")
    target = reservation.get("capacityReservationTarget") if isinstance(reservation, dict) else None
    rid = target.get("capacityReservationID") if isinstance(target, dict) else None
    # eksctl instanceMarketOptions.marketType spells the EC2 value, which is also efa-stack's capacity type
    block = isinstance(market, dict) and market.get("marketType") == contract.CAPACITY_BLOCK
    kind = contract.CAPACITY_BLOCK if block else contract.RESERVATION
    shown = rid if isinstance(rid, str) and rid else "cr-..."
    replaced = " and ".join(k for k in ("capacityReservation", "instanceMarketOptions") if k in group)
    if isinstance(reservation, dict) and "capacityReservationPreference" in reservation and not block:
        return (f"replace {replaced} with capacity: {{type: reservation, reservationId: cr-...}}; efa-stack targets "
                "one reservation by id (an 'open' preference is not supported)")
    if isinstance(target, dict) and "capacityReservationResourceGroupARN" in target:
        return (f"replace {replaced} with capacity: {{type: {kind}, reservationId: cr-...}}; efa-stack targets one "
                "reservation by id (a resource group is not supported)")
    return f"replace {replaced} with capacity: {{type: {kind}, reservationId: {shown}}}"


_BOUND_FIXES: dict[str, str] = {
    "minSize": NODES_QUOTA_FIX,
    "desiredCapacity": NODES_QUOTA_FIX,
    "maxSize": NODES_QUOTA_FIX,
    "volumeSize": f"use {MIN_VOLUME_GIB} to 16384 GiB (65536 for volumeType io2), the EBS limits of a root volume",
}


def problems_from_validation(exc: ValidationError, data: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    errors = exc.errors()
    for err in errors[:MAX_PROBLEMS]:
        problems.append(_problem(err, data))
    if len(errors) > MAX_PROBLEMS:
        problems.append(Problem(
            "spec", f"{len(errors) - MAX_PROBLEMS} more", f"{len(errors) - MAX_PROBLEMS} further problems not listed",
            "fix the problems above and run again",
        ))
    return problems


def _problem(err: Any, data: dict[str, Any]) -> Problem:
    loc = tuple(err["loc"])
    field = _loc_text(loc)
    value = err.get("input", MISSING) if err["type"] != "missing" else MISSING
    kind = err["type"]
    name = loc[-1] if loc else ""
    ctx = err.get("ctx", {})
    if kind == "extra_forbidden":
        unsupported = _unsupported_here(loc)
        if name in unsupported:
            fix = unsupported[str(name)]
            if name in ("capacityReservation", "instanceMarketOptions"):
                fix = _capacity_advice(_value_at(data, loc[:-1])) or fix
            return Problem(field, value, "an eksctl field that efa-stack does not support", fix)
        model = _model_at(loc)
        known = [f.alias or n for n, f in model.model_fields.items()] if model else []
        close = difflib.get_close_matches(str(name), known, n=1)
        fix = f"did you mean '{close[0]}'?" if close else (
            f"remove it; known fields here: {', '.join(known)}" if known else "remove it"
        )
        return Problem(field, value, "unknown field", fix)
    if kind == "missing":
        return Problem(field, MISSING, "required field is missing", f"add '{name}'{_described(loc)}")
    if kind == "literal_error":
        return Problem(field, value, "value not allowed", f"use one of {ctx.get('expected', '')}")
    if kind == "string_pattern_mismatch":
        pattern = ctx.get("pattern", "")
        return Problem(field, value, "badly formed", f"use a value matching {pattern}{_pattern_hint(str(name))}")
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        fix = _BOUND_FIXES.get(str(name), "change the number to fit that bound")
        return Problem(field, value, err["msg"].lower(), fix)
    if kind == "too_long" and name == "managedNodeGroups":
        return Problem(
            field, f"{ctx.get('actual_length')} node groups",
            f"more than {MAX_USER_NODE_GROUPS} node groups; with the system node group that passes EKS's default "
            f"quota of {MAX_MANAGED_NODE_GROUPS} managed node groups per cluster (Service Quotas L-6D54EA21)",
            "merge node groups that share an instance type and zone",
        )
    if kind in ("too_long", "too_short"):
        return Problem(field, _show_len(value), err["msg"], "change the number of entries to fit that bound")
    if kind == "int_type" or kind.startswith("int_"):
        return Problem(field, value, "not a whole number",
                       f"write a whole number without quotes or a decimal point, e.g. {name}: 2")
    if kind == "bool_type":
        return Problem(field, value, "not true or false", f"write {name}: true or {name}: false, without quotes")
    if kind.startswith(("bool_", "string_", "dict_", "list_", "model_", "float_")):
        return Problem(field, value, err["msg"], f"give '{name}' a value of the right type{_described(loc)}")
    cause = ctx.get("error")
    if isinstance(cause, FixError):
        return Problem(field, value, cause.message, cause.fix)
    return Problem(field, value, err["msg"].removeprefix("Value error, "), "correct the value")


def _described(loc: tuple[Any, ...]) -> str:
    """``: <the field's description>`` from the model (the schema's text), or nothing."""
    model = _model_at(loc)
    name = loc[-1] if loc else None
    if model is None or not isinstance(name, str):
        return ""
    field = next((f for n, f in model.model_fields.items() if (f.alias or n) == name), None)
    text = " ".join((field.description or "").split()) if field is not None else ""
    return f": {text}" if text else ""


def _show_len(value: Any) -> Any:
    return f"{len(value)} entries" if isinstance(value, (list, dict)) else value


def _pattern_hint(name: str) -> str:
    return {
        "name": " (letters, digits and '-', starting with a letter)",
        "region": " (an AWS region such as us-west-2)",
        "reservationId": " (a capacity reservation id such as cr-0123456789abcdef0)",
    }.get(name, "")

