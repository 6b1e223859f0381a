"""The rollout (:class:`k8s.rollout.Rollout`, the step graph ``cdk deploy`` and ``apply.sh`` translate too) performed
against the rehearsal's API server.

:func:`perform` takes the steps in the order ``apply.sh`` takes them (:meth:`k8s.rollout.Rollout.order`): a chart's
objects are server-side applied (what ``kubectl apply --server-side`` sends), again while admission refuses them where
the step says so, as ``apply.sh``'s ``apply_until_admitted`` does; a CRD is waited for until Established; a value is
waited for as ``wait_for_value`` does. What the nodes, a Helm release and a controller's availability are in the
rehearsal is the caller's (:class:`Actions`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from efa_stack.rehearsal.client import Api
from k8s.dist import ADMIT_INTERVAL_S, ADMIT_TRIES, CRD_WAIT_INTERVAL_S, CRD_WAIT_TRIES
from k8s.rollout import ApplyChart, InstallRelease, Nodes, Rollout, Step, WaitAvailable, WaitEstablished, WaitValue

VALUE_TIMEOUT = 300
"""Seconds a :class:`~k8s.rollout.WaitValue` may take (``apply.sh``'s ``wait_for_value`` allows as long)."""
OBJECT_TYPES = {"validatingwebhookconfiguration": ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration")}
"""The ``kubectl get`` types a :class:`~k8s.rollout.WaitValue` names -> (apiVersion, kind)."""


class RolloutError(RuntimeError):
    """A step failed; nothing after it was performed (as ``apply.sh``'s ``set -e`` and a failed CloudFormation
    resource both stop)."""


class Actions(Protocol):
    """What the steps that are not applies or waits for the API server mean where the rehearsal runs them."""

    def transform(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as the rehearsal applies it (webhook client configurations pointed at local controllers)."""

    def nodes_up(self, step: Nodes) -> None:
        """The nodes the controllers run on are up."""

    def applied(self, step: ApplyChart) -> None:
        """A chart was applied: the cluster would now start the pods of its Deployments."""

    def install(self, step: InstallRelease) -> None:
        """``helm upgrade --install ... --wait``: the release's objects, and its controllers ready."""

    def available(self, step: WaitAvailable) -> None:
        """The controller's Deployment has an available replica and the controller serves."""


@dataclass
class Performed:
    """What :func:`perform` did."""

    seconds: list[tuple[str, float]] = field(default_factory=list)
    """(step id, seconds it took), in the order performed."""
    refusals: dict[str, list[str]] = field(default_factory=dict)
    """Chart id -> the server's messages for the tries it refused before it admitted the chart's objects."""


def wait_established(api: Api, name: str, timeout: float = CRD_WAIT_TRIES * CRD_WAIT_INTERVAL_S) -> None:
    """Poll CRD ``name`` until its Established condition is "True" (``apply.sh`` gives it 60 polls 2 s apart; polled
    here every 0.2 s); :class:`RolloutError` after ``timeout`` seconds."""
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
            raise RolloutError(f"crd/{name} not Established after {timeout:.0f}s: {last}")
        time.sleep(0.2)


_PATH_PART = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]")


def json_path_value(obj: Any, path: str) -> Any:
    """The value at ``path`` (``.webhooks[0].clientConfig.caBundle``: fields and list indexes, the JSONPath the
    rollout's waits use), or None when something on the way is missing."""
    pos = 0
    for match in _PATH_PART.finditer(path):
        if match.start() != pos:
            raise ValueError(f"JSONPath {path}: only .field and [index] are read here")
        pos = match.end()
        name, index = match.groups()
        if name is not None:
            obj = obj.get(name) if isinstance(obj, dict) else None
        else:
            obj = obj[int(index)] if isinstance(obj, list) and int(index) < len(obj) else None
        if obj is None:
            return None
    if pos != len(path):
        raise ValueError(f"JSONPath {path}: only .field and [index] are read here")
    return obj


def wait_value(api: Api, step: WaitValue, timeout: float = VALUE_TIMEOUT) -> None:
    """Poll the step's object until its ``json_path`` yields a non-empty value."""
    if step.object_type not in OBJECT_TYPES:
        raise RolloutError(f"{step.id}: the rehearsal reads no {step.object_type} (known: {sorted(OBJECT_TYPES)})")
    api_version, kind = OBJECT_TYPES[step.object_type]
    target = {"apiVersion": api_version, "kind": kind, "metadata": {"name": step.name}}
    deadline = time.monotonic() + timeout
    while True:
        got = api.get(target)
        if got.status == 200 and json_path_value(got.body, step.json_path):
            return
        if time.monotonic() > deadline:
            raise RolloutError(f"{step.id}: {step.object_type}/{step.name} has no {step.json_path} after {timeout:.0f}s")
        time.sleep(0.5)


def _apply_chart(api: Api, actions: Actions, objects: list[dict[str, Any]]) -> list[str]:
    """Apply ``objects``; the server's message for each it refused."""
    refused = []
    for obj in objects:
        what = f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
        try:
            got = api.apply(actions.transform(obj))
        except KeyError as err:
            refused.append(f"{what}: {err}")
            continue
        if not got.ok:
            refused.append(f"{what}: {got.message()}")
    return refused


def _apply(api: Api, rollout: Rollout, step: ApplyChart, actions: Actions, performed: Performed,
           admit_tries: int, admit_interval: float) -> None:
    objects = [json.loads(json.dumps(o)) for o in rollout.objects[step.chart]]
    tries = admit_tries if step.retry_admission else 1
    for attempt in range(tries):
        refused = _apply_chart(api, actions, objects)
        if not refused:
            break
        performed.refusals.setdefault(step.chart, []).extend(refused)
        if attempt + 1 < tries:
            time.sleep(admit_interval)
    else:
        raise RolloutError(f"{step.id}: the server refused:\n" + "\n".join(refused))
    actions.applied(step)


def perform(api: Api, rollout: Rollout, actions: Actions, *, admit_tries: int = ADMIT_TRIES,
            admit_interval: float = ADMIT_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> Performed:
    """Perform ``rollout`` against ``api`` (module docstring); :class:`RolloutError` at the first step that fails."""
    performed = Performed()
    for step in rollout.order():
        started = clock()
        _perform(api, rollout, step, actions, performed, admit_tries, admit_interval)
        performed.seconds.append((step.id, clock() - started))
    return performed


def _perform(api: Api, rollout: Rollout, step: Step, actions: Actions, performed: Performed, admit_tries: int,
             admit_interval: float) -> None:
    if isinstance(step, Nodes):
        actions.nodes_up(step)
    elif isinstance(step, ApplyChart):
        _apply(api, rollout, step, actions, performed, admit_tries, admit_interval)
    elif isinstance(step, InstallRelease):
        actions.install(step)
    elif isinstance(step, WaitEstablished):
        wait_established(api, step.crd)
    elif isinstance(step, WaitAvailable):
        actions.available(step)
    elif isinstance(step, WaitValue):
        wait_value(api, step)
    else:
        raise RolloutError(f"{step.id}: a kind of step the rehearsal does not know ({type(step).__name__})")
