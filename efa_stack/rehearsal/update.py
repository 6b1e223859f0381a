"""A changed spec re-applied to a rehearsed cluster, as ``cdk deploy`` updates the stack.

The new plan's rollout is performed on the running control plane with one apply per chart (CloudFormation applies a
manifest once; ``apply.sh`` would try again while admission refuses), then what the old rollout applied and the new
one does not is deleted, the last applied first (the kubectl handler prunes what left a manifest; CloudFormation
deletes the resources that left the template), except the objects of retained charts (CRDs). A controller whose
Deployment's pod template changed is restarted once the Deployment rolled out (:meth:`Rehearsal.applied`); one whose
pod template did not change keeps running with what it read at its start, as its pod would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from efa_stack.planning.plan import ClusterPlan
from efa_stack.rehearsal.client import poll
from efa_stack.rehearsal.controllers import controllers_for
from efa_stack.rehearsal.rehearsal import Rehearsal
from efa_stack.rehearsal.rollout import Performed, perform
from k8s.rollout import ApplyChart, Rollout, plan_rollout

DELETE_TIMEOUT = 120


def _key(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return obj["apiVersion"].split("/")[0], obj["kind"], meta.get("namespace", ""), meta["name"]


def removed_objects(old: Rollout, new: Rollout) -> list[Mapping[str, Any]]:
    """What ``old`` applied and ``new`` does not, in ``old``'s order, without the objects of retained charts."""
    kept = {_key(o) for objs in new.objects.values() for o in objs}
    retained = {s.chart for s in old.of_type(ApplyChart) if s.retain}
    return [o for step in old.order() if isinstance(step, ApplyChart) and step.chart not in retained
            for o in old.objects[step.chart] if _key(o) not in kept]


def update(r: Rehearsal, plan: ClusterPlan, *, admit_tries: int = 1) -> tuple[Performed, list[Mapping[str, Any]]]:
    """Re-apply ``plan`` to ``r`` (module docstring); (what was performed, what was deleted)."""
    import cdk8s

    from k8s.charts import build_charts

    new = plan_rollout(plan, build_charts(plan, cdk8s.App()))
    old = r.rollout
    r.plan, r.controllers.plan, r.rollout = plan, plan, new
    r.objects = [json.loads(json.dumps(o)) for objs in new.objects.values() for o in objs]
    for c in controllers_for(r.objects):
        r.controllers.add(c)
    r.progress(f"re-applying the changed spec ({len(new.steps)} steps, one apply each)")
    performed = perform(r.api, new, r, admit_tries=admit_tries)
    removed = [json.loads(json.dumps(o)) for o in removed_objects(old, new)]
    for obj in reversed(removed):
        r.api.delete(obj)
    for obj in removed:
        poll(f"{obj['kind']} {obj['metadata']['name']} deleted", _gone(r, obj), DELETE_TIMEOUT)
    return performed, removed


def _gone(r: Rehearsal, obj: dict[str, Any]) -> Callable[[], bool | None]:
    return lambda: True if r.api.get(obj).status == 404 else None
