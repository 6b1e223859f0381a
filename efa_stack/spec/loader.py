"""Read a cluster spec file into :class:`spec.models.ClusterSpec`, or fail with every problem."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from efa_stack.spec.errors import MISSING, Problem, SpecError
from efa_stack.spec.models import (
    UNSUPPORTED_EKSCTL_FIELDS,
    UNSUPPORTED_NODEGROUP_FIELDS,
    ClusterSpec,
)


def load_spec(path: str | Path) -> ClusterSpec:
    """Load and structurally validate ``path``; raises :class:`SpecError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(
            str(path), [Problem("file", str(path), "the spec file does not exist", "pass an existing file, e.g. clusters/default.yaml")]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            str(path), [Problem("file", str(path), f"the spec file cannot be read ({exc.__class__.__name__}: {exc})", "pass a readable UTF-8 YAML file")]
        ) from None
    return parse_spec(text, source=str(path))


def parse_spec(text: str, *, source: str = "<spec>") -> ClusterSpec:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(
            source, [Problem("file", where, f"not valid YAML: {problem}", "fix the YAML syntax at that position")]
        ) from None
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


def problems_from_validation(exc: ValidationError, data: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = _loc_text(loc)
        value = err.get("input", MISSING) if err["type"] != "missing" else MISSING
        kind = err["type"]
        name = loc[-1] if loc else ""
        in_nodegroup = len(loc) >= 2 and loc[0] == "managedNodeGroups"
        if kind == "extra_forbidden":
            unsupported = UNSUPPORTED_NODEGROUP_FIELDS if in_nodegroup and len(loc) == 3 else (
                UNSUPPORTED_EKSCTL_FIELDS if len(loc) == 1 else {}
            )
            if name in unsupported:
                problems.append(Problem(field, value, "an eksctl field that efa-stack does not support", unsupported[name]))
                continue
            model = _model_at(loc)
            known = [f.alias or n for n, f in model.model_fields.items()] if model else []
            close = difflib.get_close_matches(str(name), known, n=1)
            fix = f"did you mean '{close[0]}'?" if close else (
                f"remove it; known fields here: {', '.join(known)}" if known else "remove it"
            )
            problems.append(Problem(field, value, "unknown field", fix))
        elif kind == "missing":
            problems.append(Problem(field, MISSING, "required field is missing", f"add '{name}' (see clusters/default.yaml)"))
        elif kind == "literal_error":
            expected = err.get("ctx", {}).get("expected", "")
            problems.append(Problem(field, value, "value not allowed", f"use one of {expected}"))
        elif kind == "string_pattern_mismatch":
            pattern = err.get("ctx", {}).get("pattern", "")
            problems.append(Problem(field, value, "badly formed", f"use a value matching {pattern}{_pattern_hint(str(name))}"))
        elif kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
            problems.append(Problem(field, value, err["msg"].lower(), "change the number to fit that bound"))
        elif kind.startswith(("int_", "bool_", "string_", "dict_", "list_", "model_", "float_")):
            problems.append(Problem(field, value, err["msg"], f"give '{name}' a value of the right type (see clusters/default.yaml)"))
        else:
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(Problem(field, value, msg, "correct the value"))
    return problems


def _pattern_hint(name: str) -> str:
    return {
        "name": " (letters, digits and '-', starting with a letter)",
        "region": " (an AWS region such as us-west-2)",
        "reservationId": " (a capacity reservation id such as cr-0123456789abcdef0)",
    }.get(name, "")

