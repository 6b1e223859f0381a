"""Apply a cluster's ``dist/`` in the order its ``apply.sh`` takes, against a live API server.

Until the rollout is one step graph that ``cdk deploy``, ``apply.sh`` and the rehearsal all translate, this reads the
steps from ``apply.sh`` itself (:func:`script_steps`: ``kubectl apply -f``, ``helm upgrade --install``,
``wait_established``, ``kubectl rollout status``, ``apply_until_admitted``), so the order rehearsed is the order users
run; :func:`apply_dist` is the one function to replace. Objects are server-side applied (what ``kubectl apply
--server-side`` sends); what a Helm release or a Deployment's rollout means in the rehearsal is the caller's
(:class:`Actions`).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import yaml

from efa_stack.rehearsal.client import Api, Response
from k8s.dist import ADMIT_INTERVAL_S, ADMIT_TRIES, AFTER_CRDS_DIR, APPLY_SCRIPT, CRD_WAIT_INTERVAL_S, CRD_WAIT_TRIES

LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
StepKind = Literal["apply", "apply-until-admitted", "helm", "wait-established", "rollout-status"]
SCRIPT_FUNCTIONS: dict[str, StepKind] = {
    "wait_established": "wait-established", "apply_until_admitted": "apply-until-admitted",
}
"""Shell functions ``apply.sh`` defines (k8s/dist.py ``WAIT_ESTABLISHED``, ``APPLY_UNTIL_ADMITTED``) -> the step."""


@dataclass(frozen=True)
class Step:
    """One top-level command of ``apply.sh``."""

    kind: StepKind
    target: str
    """The file or folder applied, the Helm release, the CRD waited for, or the Deployment."""
    namespace: str | None = None
    line: str = ""


class ApplyError(RuntimeError):
    """A step of ``apply.sh`` failed; nothing after it was applied (as ``set -e`` does)."""


def script_steps(script: str) -> list[Step]:
    """The steps of ``apply.sh`` in order; ``set``, ``cd``, ``command -v`` and function bodies are left out, and a
    command this module does not know is an error."""
    steps: list[Step] = []
    in_function = False
    for line in script.splitlines():
        if in_function:
            in_function = line != "}"
            continue
        words = shlex.split(line, comments=True)
        if not words or words[0] in {"set", "cd", "command"}:
            continue
        if words[0].endswith("()"):
            in_function = True
            continue
        text = shlex.join(words)
        if words[0] in SCRIPT_FUNCTIONS:
            steps.append(Step(SCRIPT_FUNCTIONS[words[0]], words[1], line=text))
        elif words[:2] == ["kubectl", "apply"] and words[2:3] == ["-f"]:
            steps.append(Step("apply", words[3], line=text))
        elif words[:3] == ["helm", "upgrade", "--install"]:
            steps.append(Step("helm", words[3], words[words.index("--namespace") + 1], line=text))
        elif words[:3] == ["kubectl", "rollout", "status"]:
            kind, _, name = words[3].partition("/")
            if kind != "deployment":
                raise ValueError(f"apply.sh: rollout of a {kind}, not a Deployment: {text}")
            steps.append(Step("rollout-status", name, words[words.index("-n") + 1], line=text))
        else:
            raise ValueError(f"apply.sh: a command the rehearsal does not know: {text}")
    return steps


def documents(path: Path, dist: Path) -> list[tuple[str, dict[str, Any]]]:
    """(file relative to ``dist``, object) for what ``kubectl apply -f path`` reads: the file, or the .yaml/.yml/.json
    files directly in the folder, in name order."""
    files = [path] if path.is_file() else sorted(
        p for p in path.iterdir() if p.is_file() and p.suffix in {".yaml", ".yml", ".json"}
    )
    return [(f.relative_to(dist).as_posix(), o)
            for f in files for o in yaml.load_all(f.read_text(), Loader=LOADER) if o]


def dist_objects(dist: Path) -> list[dict[str, Any]]:
    """Every object of ``dist/<cluster>/`` and its ``after-crds/``."""
    later = dist / AFTER_CRDS_DIR
    return [o for _, o in documents(dist, dist)] + ([o for _, o in documents(later, dist)] if later.is_dir() else [])


class Actions(Protocol):
    """What the steps that are not ``kubectl apply`` mean where the rehearsal runs them."""

    def transform(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as the rehearsal applies it (webhook client configurations pointed at local controllers)."""

    def after_first_step(self) -> None:
        """The first step is applied: the cluster would now start the pods of its Deployments."""

    def helm(self, release: str, namespace: str) -> None:
        """``helm upgrade --install ... --wait``: the release's objects, and its controllers ready."""

    def rollout(self, deployment: str, namespace: str) -> None:
        """``kubectl rollout status``: the Deployment is available and its controller serves."""


@dataclass
class Applied:
    """What :func:`apply_dist` did."""

    objects: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(file, object as applied)."""
    refusals: dict[str, list[str]] = field(default_factory=dict)
    """File applied with ``apply_until_admitted`` -> the server's messages for the tries it refused."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Step line -> seconds it took."""


def wait_established(api: Api, name: str, timeout: float = CRD_WAIT_TRIES * CRD_WAIT_INTERVAL_S) -> None:
    """What ``wait_established`` does: poll CRD ``name`` until its Established condition is "True" (``apply.sh`` gives
    it 60 polls 2 s apart; polled here every 0.2 s); :class:`ApplyError` after ``timeout`` seconds."""
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": name}}
    last = ""
    deadline = time.monotonic() + timeout
    while True:
        got = api.get(crd)
        if got.status == 200:
            conditions = {c["type"]: c for c in (got.body.get("status") or {}).get("conditions") or []}
            if conditions.get("Established", {}).get("status") == "True":
                for version in got.body["spec"]["versions"]:
                    api.forget(f"{got.body['spec']['group']}/{version['name']}")
                return
            last = json.dumps(list(conditions.values()))
        else:
            last = got.message()
        if time.monotonic() > deadline:
            raise ApplyError(f"crd/{name} not Established after {timeout:.0f}s: {last}")
        time.sleep(0.2)


def _apply_all(api: Api, actions: Actions, items: list[tuple[str, dict[str, Any]]]) -> list[str]:
    refused = []
    for source, obj in items:
        sent = actions.transform(obj)
        try:
            got: Response = api.apply(sent)
        except KeyError as err:
            refused.append(f"{source}: {obj['kind']} {obj['metadata']['name']}: {err}")
            continue
        if not got.ok:
            refused.append(f"{source}: {obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}: "
                           f"{got.message()}")
    return refused


def apply_dist(api: Api, dist: Path, actions: Actions, *, admit_tries: int = ADMIT_TRIES,
               admit_interval: float = ADMIT_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> Applied:
    """Run the steps of ``dist/apply.sh`` against ``api`` (module docstring); :class:`ApplyError` at the first step that
    fails, with the server's messages."""
    applied = Applied()
    first = True
    for step in script_steps((dist / APPLY_SCRIPT).read_text()):
        started = clock()
        if step.kind in ("apply", "apply-until-admitted"):
            items = documents(dist / step.target, dist)
            tries = admit_tries if step.kind == "apply-until-admitted" else 1
            for attempt in range(tries):
                refused = _apply_all(api, actions, items)
                if not refused:
                    break
                applied.refusals.setdefault(step.target, []).extend(refused)
                if attempt + 1 < tries:
                    time.sleep(admit_interval)
            else:
                raise ApplyError(f"apply.sh: {step.line}: the server refused:\n" + "\n".join(refused))
            applied.objects += items
            if first:
                first = False
                actions.after_first_step()
        elif step.kind == "helm":
            assert step.namespace is not None
            actions.helm(step.target, step.namespace)
        elif step.kind == "wait-established":
            wait_established(api, step.target)
        else:
            assert step.namespace is not None
            actions.rollout(step.target, step.namespace)
        applied.seconds[step.line] = clock() - started
    return applied
