"""Read a cluster spec file into :class:`efa_stack.spec.models.ClusterSpec`, or fail with every problem.

Reading is bounded before anything is built: the file's size, the YAML nesting depth and the number
of nodes (aliases counted as what they expand to) have fixed limits, a key given twice in one
mapping and a second YAML document are errors, and the bytes must be UTF-8. Whatever the input,
the result is a spec or a :class:`SpecError`, in well under a second.
"""

from __future__ import annotations

import difflib
import re
import stat
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from efa_stack.spec.errors import MISSING, PLACEHOLDER, FixError, Problem, SpecError
from efa_stack.spec.irsa import service_account_problems
from efa_stack.spec.models import (
    MAX_MANAGED_NODE_GROUPS,
    MAX_USER_NODE_GROUPS,
    MIN_VOLUME_GIB,
    NODES_QUOTA_FIX,
    UNSUPPORTED_ADDON_FIELDS,
    UNSUPPORTED_CLUSTER_POD_IDENTITY_FIELDS,
    UNSUPPORTED_EKSCTL_FIELDS,
    UNSUPPORTED_NODE_IAM_FIELDS,
    UNSUPPORTED_NODE_REPAIR_FIELDS,
    UNSUPPORTED_NODEGROUP_FIELDS,
    UNSUPPORTED_POD_IDENTITY_FIELDS,
    UNSUPPORTED_SSH_FIELDS,
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
        self.duplicates: list[Problem] = []

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
        # twice (eksctl-io/eksctl@v0.230.0:pkg/eks/api.go ParseConfig). PyYAML keeps the last one;
        # every duplicate is recorded and reported together (read_yaml).
        first: dict[str, Any] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if key_node.value in first:
                self.duplicates.append(Problem(
                    "file", _where(key_node.start_mark),
                    f"key '{key_node.value}' is given twice in the same mapping "
                    f"(first at {_where(first[key_node.value])}); YAML keeps only one of them",
                    "keep one of the two entries (eksctl rejects duplicate keys too)",
                ))
            else:
                first[key_node.value] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: ScalarNode) -> Any:
        if len(node.value) > MAX_INT_DIGITS:
            # not converted (Python's int() of a huge literal is slow); parse_spec names the field it is in
            return _LongInteger(node.value, _where(node.start_mark))
        return super().construct_yaml_int(node)


class _LongInteger:
    """An integer literal longer than :data:`MAX_INT_DIGITS`, kept as text until its field is known."""

    def __init__(self, text: str, where: str):
        self.text = text
        self.where = where

    def __repr__(self) -> str:
        return f"an integer of {len(self.text)} digits at {self.where}"


def _take_long_integers(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], _LongInteger]]:
    """Every :class:`_LongInteger` in ``data`` with its path, each removed (a list keeps a None in its place)."""
    found: list[tuple[tuple[Any, ...], _LongInteger]] = []
    items = list(data.items()) if isinstance(data, dict) else list(enumerate(data)) if isinstance(data, list) else []
    for key, value in items:
        if isinstance(value, _LongInteger):
            found.append(((*path, key), value))
            if isinstance(data, dict):
                del data[key]
            else:
                data[key] = None
        else:
            found.extend(_take_long_integers(value, (*path, key)))
    return found


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
    data, duplicates = _read(text, source)
    if duplicates:
        raise SpecError(source, duplicates)
    return data


def _read(text: str, source: str) -> tuple[Any, list[Problem]]:
    """``text``'s document and every duplicate key in it (reported with the rest of the file's problems)."""
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(source, [Problem("file", f"{len(text)} characters",
                                         f"the spec is larger than {MAX_SPEC_BYTES // 1024} KiB", _FIX_SIZE)])
    loader = _SpecLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, []
        _check_expansion(node)
        data = loader.construct_document(node)
        return data, sorted(loader.duplicates, key=lambda p: tuple(int(n) for n in re.findall(r"\d+", p.value)))
    except _Refused as exc:
        raise SpecError(source, [Problem("file", exc.where, exc.message, exc.fix)]) from None
    except ComposerError as exc:
        if exc.context == "expected a single document in the stream":
            raise SpecError(source, [Problem(
                "file", _where(exc.problem_mark), "the file holds more than one YAML document ('---')",
                "put one ClusterConfig per file (efa-stack reads exactly one document)",
            )]) from None
        raise SpecError(source, [_syntax_problem(exc, text)]) from None
    except yaml.YAMLError as exc:
        if _LIBYAML_TOO_DEEP in str(getattr(exc, "problem", "")):
            # libyaml 0.2.6 (PyYAML 6.0.4's wheels) refuses flow collections nested past its own limit (1000) while
            # it reads ahead, before compose_node counts to MAX_YAML_DEPTH: the same refusal, told the same way.
            deep = _too_deep(getattr(exc, "problem_mark", None))
            raise SpecError(source, [Problem("file", deep.where, deep.message, deep.fix)]) from None
        raise SpecError(source, [_syntax_problem(exc, text)]) from None
    except RecursionError:  # pragma: no cover - the depth limit is far below Python's
        raise SpecError(source, [Problem("file", "unknown position", "the document nests too deeply",
                                         "flatten the structure")]) from None
    finally:
        loader.dispose()


def _syntax_problem(exc: yaml.YAMLError, text: str = "") -> Problem:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    lines = text.splitlines()
    line = lines[mark.line] if mark is not None and 0 <= mark.line < len(lines) else ""
    if "\t" in line[: len(line) - len(line.lstrip())] or "tab" in problem:
        # libyaml says "found character that cannot start any token" for a tab that indents a key
        return Problem("file", _where(mark), "a tab character in the indentation (YAML indents with spaces only)",
                       "replace the tabs at the start of that line with spaces")
    return Problem("file", _where(mark), f"not valid YAML: {problem}", "fix the YAML syntax at that position")


def parse_spec(text: str, *, source: str = "<spec>") -> ClusterSpec:
    data, early = _read(text, source)
    if not isinstance(data, dict):
        raise SpecError(
            source,
            [Problem("file", type(data).__name__ if data is not None else "an empty document",
                     "the spec must be a YAML mapping (an eksctl ClusterConfig)",
                     "start from clusters/default.yaml")],
        )
    long_fields: list[str] = []
    for path, number in _take_long_integers(data):
        long_fields.append(_loc_text(path))
        early.append(Problem(
            _loc_text(path), f"{number.text[:12]}... ({len(number.text)} digits)", f"a number of {len(number.text)} digits",
            "use a number within the documented limits of the field",
        ))
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as exc:
        lenient = _lenient(data, exc)
        stripped = [*long_fields, *lenient.stripped]
        raise SpecError(source, [*early, *problems_from_validation(exc, data), *lenient.moved], partial=lenient.partial,
                        stripped=tuple(stripped), renames=tuple(lenient.renames)) from None
    if early:
        raise SpecError(source, early, partial=spec, stripped=tuple(long_fields))
    return spec


MAX_LENIENT_ROUNDS = 5
"""Rounds of leaving out the fields with problems before :func:`_lenient` gives up."""


def _data_path(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The longest prefix of ``loc`` that exists in ``data`` (pydantic adds union members to locations)."""
    cur, path = data, []
    for part in loc:
        if isinstance(cur, dict) and part in cur or isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            cur = cur[part]
            path.append(part)
        else:
            break
    return tuple(path)


def _name_stand_in(kind: str, *, reference: bool = False) -> Any:
    """A stand-in for the name of entry ``i`` of a list of named entries: the name as written, lowercased with
    what a name cannot hold made '-', or ``<kind>-<i>`` when that is still no name or is taken. A ``reference`` to
    such a name (a training job's ``nodeGroup``) is made the same way, so that it still names the same entry."""
    def make(path: tuple[Any, ...], value: Any, work: dict[str, Any]) -> str:
        entries = [e for key in ("managedNodeGroups", "karpenterNodePools") for e in _as_list(work.get(key))]
        taken = set() if reference else {e.get("name") for e in entries if isinstance(e, dict)}
        text = re.sub(r"[^a-z0-9]+", "-", value.lower()) if isinstance(value, str) else ""
        text = re.sub(r"^[^a-z]+", "", text)[:63].rstrip("-")
        return text if text and text not in taken else f"{kind}-{path[-2]}"
    return make


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _subnet_id_stand_in(path: tuple[Any, ...], value: Any, work: dict[str, Any]) -> str:
    """A well-formed id for a subnet whose ``id`` is missing or badly formed, one per subnet entry; the node groups
    that name the subnet by that id name it by the stand-in then (eksctl ``managedNodeGroups[].subnets``)."""
    stand_in = f"subnet-{zlib.crc32(_loc_text(path).encode()):08x}"
    for group in _as_list(work.get("managedNodeGroups")):
        names = group.get("subnets") if isinstance(group, dict) else None
        if isinstance(value, str) and isinstance(names, list):
            group["subnets"] = [stand_in if n == value else n for n in names]
    return stand_in


_StandIn = Callable[[tuple[Any, ...], Any, dict[str, Any]], str]
_STAND_INS: tuple[tuple[tuple[str, ...], str | _StandIn, tuple[str, ...]], ...] = (
    (("metadata", "region"), "us-east-1",
     ("availabilityZones", "managedNodeGroups[].availabilityZones", "vpc.subnets.*.*.az")),
    (("metadata", "name"), "cluster", ()),
    (("vpc", "id"), "vpc-00000000", ()),
    (("vpc", "subnets", "*", "*", "id"), _subnet_id_stand_in, ()),
    (("managedNodeGroups", "[]", "name"), _name_stand_in("group"), ()),
    (("karpenterNodePools", "[]", "name"), _name_stand_in("pool"), ()),
    (("trainingJobs", "[]", "nodeGroup"), _name_stand_in("group", reference=True), ()),
)
"""Fields read with a stand-in when their value has a problem or is missing: (path, with ``*`` for any key and
``[]`` for any index; the stand-in or what makes it from the path, the value and the data; the fields whose
planning problems then mean nothing). Without them the field's default would change what the rest of the file
means (no ``vpc.id``: no existing VPC) or no spec could be read at all (a required name), and planning could not
judge the rest of the file."""


def _stand_in_for(path: tuple[Any, ...]) -> tuple[str | _StandIn, tuple[str, ...]] | None:
    for pattern, value, meaningless in _STAND_INS:
        if len(pattern) == len(path) and all(
            p == "*" and isinstance(k, str) or p == "[]" and isinstance(k, int) or p == k for p, k in zip(pattern, path)
        ):
            return value, meaningless
    return None


@dataclass
class _Lenient:
    """What :func:`_lenient` found: the spec without the fields that have problems, and how to read its planning."""

    partial: ClusterSpec | None = None
    stripped: list[str] = field(default_factory=list)
    """Fields left out (or read with a stand-in): planning problems under them mean nothing."""
    moved: list[Problem] = field(default_factory=list)
    """Problems of the self-managed ``nodeGroups`` entries read as managed node groups (named ``nodeGroups[i]``)."""
    renames: list[tuple[str, str]] = field(default_factory=list)
    """(``managedNodeGroups[k]``, ``nodeGroups[i]``): where the moved entries are in ``partial``."""


_CONSEQUENCES = {
    ".ssh.publicKeyPath": "allow",
    ".ssh.publicKey": "allow",
    ".permissionPolicy": "roleARN",
    ".wellKnownPolicies": "roleARN",
}
"""A field left out (the key) and the sibling whose planning problem it causes (the key-less ``allow``)."""

MOVED = "once moved to managedNodeGroups: "
"""The start of a problem of a self-managed node group read as a managed one."""


def _rename(text: str, renames: list[tuple[str, str]]) -> str | None:
    for old, new in renames:
        if text == old or text.startswith((old + ".", old + "[")):
            return new + text[len(old):]
    return None


def _lenient(data: dict[str, Any], exc: ValidationError) -> _Lenient:
    """The spec with every field that has a problem left out (so its default applies), and those fields.

    Planning then judges the rest of the file, so a file gets all its problems in one run and not in
    waves. Self-managed ``nodeGroups`` entries are read as managed node groups (what the problem about them
    says to do), so their own problems come in the same run too. A required field that cannot be left out
    gives no spec.
    """
    import copy

    work = copy.deepcopy(data)
    out = _Lenient()
    groups = work.get("nodeGroups")
    if isinstance(groups, list) and all(isinstance(g, dict) for g in groups):
        del work["nodeGroups"]
        managed = work.get("managedNodeGroups")
        base = managed if isinstance(managed, list) else []
        work["managedNodeGroups"] = [*base, *groups]
        out.renames = [(f"managedNodeGroups[{len(base) + j}]", f"nodeGroups[{j}]") for j in range(len(groups))]
        try:
            out.partial = ClusterSpec.model_validate(work)
            return out
        except ValidationError as moved:
            exc = moved
    for round_no in range(MAX_LENIENT_ROUNDS):
        dropped: list[tuple[list[Any], int, tuple[Any, ...]]] = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            renamed = _rename(_loc_text(loc), out.renames)
            if renamed is not None and round_no == 0:
                problem = _problem(err, work)
                out.moved.append(Problem(renamed, problem.value, MOVED + problem.message, problem.fix))
            if _read_with_stand_in(work, loc, err["type"] == "missing", out):
                continue
            if err["type"] == "missing":
                # a required field of an entry in a mapping (vpc.subnets.private.<name>.id): leave the entry out
                entry = _data_path(work, loc[:-1])
                holder = _value_at(work, entry[:-1]) if len(entry) >= 2 else None
                if entry != tuple(loc[:-1]) or not isinstance(holder, dict) or not isinstance(entry[-2], str):
                    return out
                loc = entry
            path = _data_path(work, loc)
            if not path:
                return out
            parent = _value_at(work, path[:-1])
            if isinstance(parent, dict):
                parent.pop(path[-1], None)
            elif isinstance(parent, list) and not any(isinstance(v, dict) for v in parent if v is not parent[path[-1]]):
                # an entry of a list of values (capacityReservationIds): left out below, the list's problems mean
                # nothing then (an ODCR pool whose only id is badly formed has ids all the same)
                dropped.append((parent, path[-1], path[:-1]))
                continue
            elif isinstance(parent, list):
                parent[path[-1]] = None  # keep the indices of the other entries
            out.stripped.append(_loc_text(path))
        for values, index, holder in sorted(dropped, key=lambda d: -d[1]):
            if index < len(values):
                del values[index]
            out.stripped.extend((_loc_text((*holder, index)), _loc_text(holder)))
        # node groups name the existing VPC's subnets: a subnet left out makes their names mean nothing
        if any(re.fullmatch(r"vpc(\.subnets(\.(private|public)(\.[^.]+)?)?)?", f) for f in out.stripped):
            out.stripped.append("managedNodeGroups[].subnets")
        # a field left out leaves its sibling short of it: the same problem told twice (ssh.allow without a key)
        out.stripped.extend(
            f.rsplit(".", 1)[0] + "." + sibling
            for f in list(out.stripped) for suffix, sibling in _CONSEQUENCES.items() if f.endswith(suffix)
        )
        try:
            out.partial = ClusterSpec.model_validate(work)
            return out
        except ValidationError as again:
            exc = again
    return out


def _read_with_stand_in(work: dict[str, Any], loc: tuple[Any, ...], missing: bool, out: _Lenient) -> bool:
    """Put the stand-in of :data:`_STAND_INS` at ``loc`` (a missing field, or one whose value has a problem) and
    record the fields whose planning problems then mean nothing; False when ``loc`` has no stand-in."""
    path = tuple(loc) if missing else _data_path(work, loc)
    found = _stand_in_for(path) if path else None
    parent = _value_at(work, path[:-1]) if found is not None else None
    if found is None or not isinstance(parent, dict):
        return False
    value, meaningless = found
    parent[path[-1]] = value if isinstance(value, str) else value(path, parent.get(path[-1]), work)
    out.stripped.extend((_loc_text(path), *meaningless))
    return True


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
        ("managedNodeGroups", "[]", "iam"): UNSUPPORTED_NODE_IAM_FIELDS,
        ("iam", "podIdentityAssociations", "[]"): UNSUPPORTED_CLUSTER_POD_IDENTITY_FIELDS,
        ("managedNodeGroups", "[]", "ssh"): UNSUPPORTED_SSH_FIELDS,
    }.get(parent, {})


# The EKS API's NodegroupScalingConfig: maxSize >= 1, minSize and desiredSize >= 0.
_LOWER_BOUND_FIXES: dict[str, str] = {
    "minSize": "use 0 or more",
    "desiredCapacity": "use 0 or more",
    "maxSize": "EKS needs maxSize 1 or more; to run no nodes, set minSize and desiredCapacity to 0",
    "volumeSize": f"use {MIN_VOLUME_GIB} to 16384 GiB (65536 for volumeType io2), the EBS limits of a root volume",
}
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
        if err["type"] == "extra_forbidden" and tuple(err["loc"]) == ("iam", "serviceAccounts"):
            problems.extend(service_account_problems(err.get("input")))  # one per entry, each with its equivalent
            continue
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
    if isinstance(value, str) and PLACEHOLDER.search(value):
        return Problem(field, value, "a placeholder left in the file", f"replace it with your own {name}")
    if kind == "string_pattern_mismatch":
        pattern = ctx.get("pattern", "")
        return Problem(field, value, "badly formed", f"use a value matching {pattern}{_pattern_hint(str(name))}")
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        below = kind.startswith("greater")
        fix = (_LOWER_BOUND_FIXES if below else _BOUND_FIXES).get(str(name), "change the number to fit that bound")
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
        return Problem(field, value, "not a whole number", _whole_number_fix(loc, value))
    if kind == "bool_type":
        return Problem(field, value, "not true or false", f"write {name}: true or {name}: false, without quotes")
    if kind.startswith(("bool_", "string_", "dict_", "list_", "model_", "float_")):
        return Problem(field, value, err["msg"], f"give '{name}' a value of the right type{_described(loc)}")
    cause = ctx.get("error")
    if isinstance(cause, FixError):
        return Problem(field, value, cause.message, cause.fix)
    return Problem(field, value, err["msg"].removeprefix("Value error, "), "correct the value")


def _whole_number_fix(loc: tuple[Any, ...], value: Any) -> str:
    """The fix of a number that is not a whole one: the user's own number when it is whole and within the field's
    bounds (``3.0`` or ``"3"``: write 3), else the bounds with an example inside them."""
    name = str(loc[-1]) if loc else "value"
    model = _model_at(loc)
    info = next((f for n, f in model.model_fields.items() if (f.alias or n) == name), None) if model else None
    low = high = None
    for meta in info.metadata if info is not None else ():
        low = getattr(meta, "ge", None) if getattr(meta, "ge", None) is not None else (
            meta.gt + 1 if getattr(meta, "gt", None) is not None else low)
        high = getattr(meta, "le", None) if getattr(meta, "le", None) is not None else high
    try:
        number = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None
    except ValueError:
        number = None
    whole = int(number) if number is not None and number.is_integer() else None
    if whole is not None and (low is None or whole >= low) and (high is None or whole <= high):
        return f"write {name}: {whole}, without quotes or a decimal point"
    default = info.default if info is not None and type(info.default) is int else None
    example = default if default is not None else low if low is not None else 2
    bounds = (f" from {low} to {high}" if low is not None and high is not None else
              f" of {low} or more" if low is not None else f" of at most {high}" if high is not None else "")
    return f"write a whole number{bounds} without quotes or a decimal point, e.g. {name}: {example}"


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
        "ami": " (an AMI id such as ami-0123456789abcdef0, or auto)",
        "id": " (the resource's id, e.g. vpc-0123456789abcdef0 or subnet-0123456789abcdef0)",
    }.get(name, "")

