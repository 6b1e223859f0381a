"""One rehearsal: a plan's ``dist/`` rolled out on a local control plane with the real controllers, on nodes made
from the plan, and the means to start its jobs the way users do and to watch what the controllers make of them.

What is rehearsed: the objects efa-stack renders, server-side applied in ``apply.sh``'s order through the real
admission chain (every webhook served by its real controller); the real scheduler placing every pod against the
nodes' labels, taints and allocatable; the real kube-controller-manager (Deployments, DaemonSets, Jobs, garbage
collection, ServiceAccounts); the MPI operator, Kueue and the Kubeflow controllers at their pinned versions, under the
RBAC efa-stack renders; a job started by its own ``efa-stack.io/start`` command.

What is not: AWS (capacity, EFA traffic, images, the network), what runs inside a container (kwok marks a bound pod
Running at once), the kubelet's own admission (device plugins, CPU and topology managers), and what a Helm chart
renders: releases are stood in for as each handler of :class:`Rehearsal` says.
"""

from __future__ import annotations

import contextlib
import shlex
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from efa_stack import contract
from efa_stack.planning.plan import ClusterPlan
from efa_stack.rehearsal.apply import Applied, ApplyError, apply_dist, dist_objects, script_steps, wait_established
from efa_stack.rehearsal.binaries import CONTROL_PLANE, binaries
from efa_stack.rehearsal.client import Api, ApiError, poll
from efa_stack.rehearsal.control_plane import ControlPlane, control_plane
from efa_stack.rehearsal.controllers import LocalController, LocalControllers, controllers_for
from efa_stack.rehearsal.nodes import NodeOptions, plan_nodes
from efa_stack.rehearsal.releases import RELEASES, release_objects
from k8s.dist import APPLY_SCRIPT

ROLLOUT_TIMEOUT = 300
"""Seconds ``kubectl rollout status`` waits in ``apply.sh`` (k8s/dist.py ``ROLLOUT_TIMEOUT``)."""
NODES_READY_TIMEOUT = 60


def deployment_available(api: Api, namespace: str, name: str) -> bool:
    """The Deployment's ``Available`` condition is "True" and every replica is up to date and available."""
    got = api.get({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": namespace, "name": name}})
    if got.status != 200:
        return False
    status, spec = got.body.get("status") or {}, got.body["spec"]
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    want = spec.get("replicas", 1)
    return (conditions.get("Available") == "True" and status.get("updatedReplicas") == want
            and status.get("availableReplicas") == want)


@dataclass
class Rehearsal:
    """A rolled-out plan; also the :class:`~efa_stack.rehearsal.apply.Actions` of its roll-out."""

    plan: ClusterPlan
    plane: ControlPlane
    controllers: LocalControllers
    dist: Path
    objects: list[dict[str, Any]]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    applied: Applied | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def api(self) -> Api:
        return self.plane.api

    # --- the roll-out's actions -----------------------------------------------------------------------------
    def transform(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.controllers.rewrite(obj)

    def after_first_step(self) -> None:
        """The rendered Deployments' pods would start now: their CRDs are waited for (an operator checks for its
        CRD at start), then each local controller is started under its ServiceAccount and waited for."""
        for obj in self.objects:
            if obj["kind"] == "CustomResourceDefinition":
                wait_established(self.api, obj["metadata"]["name"])
        for c in self.controllers.controllers:
            if c.deployment is not None:
                running = self.controllers.start(c.name, self.objects)
                self.timings[f"{c.name} ready"] = running.ready_in

    def helm(self, release: str, namespace: str) -> None:
        """The release's stand-in (:mod:`efa_stack.rehearsal.releases`): its objects applied, its CRDs established,
        its controllers started and ready (what ``helm --wait`` waits for)."""
        try:
            objects = release_objects(release, namespace)
        except KeyError as err:
            raise ApplyError(str(err)) from None
        for obj in objects:
            got = self.api.apply(self.transform(obj))
            if not got.ok:
                raise ApplyError(f"helm {release}: {obj['kind']} {obj['metadata']['name']}: {got.message()}")
        for obj in objects:
            if obj["kind"] == "CustomResourceDefinition":
                wait_established(self.api, obj["metadata"]["name"])
        for cls in RELEASES[release]:
            running = self.controllers.start(cls.name, self.objects)
            self.timings[f"{cls.name} ready"] = running.ready_in

    def rollout(self, deployment: str, namespace: str) -> None:
        """The Deployment's pod runs (kwok) and is available, and its local controller answers ready."""
        poll(f"Deployment {namespace}/{deployment} available", lambda: True if deployment_available(
            self.api, namespace, deployment) else None, ROLLOUT_TIMEOUT)
        owner = next((r for r in self.controllers.running.values() if r.controller.deployment == deployment
                      and r.controller.namespace == namespace), None)
        if owner is None or not owner.process.running():
            raise ApplyError(f"Deployment {namespace}/{deployment}: no local controller runs for it")

    # --- nodes and jobs ---------------------------------------------------------------------------------------
    def create_nodes(self, options: NodeOptions | None = None) -> list[dict[str, Any]]:
        """Create the plan's nodes and wait until kwok reports every one Ready."""
        nodes = plan_nodes(self.plan, options)
        for node in nodes:
            got = self.api.create(node)
            if got.status != 201:
                raise ApiError(f"Node {node['metadata']['name']}: {got.message()}")
        names = {n["metadata"]["name"] for n in nodes}

        def all_ready() -> bool | None:
            ready = {n["metadata"]["name"] for n in self.api.list("v1", "Node") if any(
                c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions", []))}
            return True if names <= ready else None

        poll("every node Ready (kwok)", all_ready, NODES_READY_TIMEOUT)
        self.nodes += nodes
        return nodes

    def start(self, obj: dict[str, Any]) -> str:
        """Run the job's ``efa-stack.io/start`` command (a ``kubectl patch --type merge`` or ``kubectl label``) against
        the rehearsal's API server; returns the command."""
        command = obj["metadata"].get("annotations", {}).get(contract.ANNOTATION_START)
        if not command:
            raise ValueError(f"{obj['kind']} {obj['metadata']['name']} has no {contract.ANNOTATION_START} annotation")
        words = shlex.split(command)
        target = {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                  "metadata": {"name": words[3], "namespace": words[words.index("-n") + 1]}}
        if words[:2] == ["kubectl", "patch"] and words[words.index("--type") + 1] == "merge":
            import json

            patch = json.loads(words[words.index("-p") + 1])
        elif words[:2] == ["kubectl", "label"]:
            labels = dict(w.split("=", 1) for w in words[4:] if "=" in w and not w.startswith("-"))
            patch = {"metadata": {"labels": labels}}
        else:
            raise ValueError(f"a start command the rehearsal does not know: {command}")
        got = self.api.merge_patch(target, patch)
        if not got.ok:
            raise ApiError(f"{command}: {got.message()}")
        return command

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.api.list("v1", "Pod", namespace, label_selector=selector)

    def node(self, name: str) -> dict[str, Any]:
        return next(n for n in self.nodes if n["metadata"]["name"] == name)


def local_controllers(objects: Sequence[dict[str, Any]], releases: Sequence[str]) -> list[LocalController]:
    """The controllers of the rendered Deployments, then those standing in for the Helm releases."""
    return [*controllers_for(list(objects)), *(cls() for r in releases for cls in RELEASES.get(r, ()))]


@contextlib.contextmanager
def rehearse(plan: ClusterPlan, state: Path, *, nodes: NodeOptions | None = None) -> Iterator[Rehearsal]:
    """Build what is missing, write ``plan``'s ``dist/`` under ``state``, start the control plane, create the nodes and
    roll ``dist/`` out; the processes stop when the ``with`` block ends."""
    from k8s.dist import dist_dir, write_dist

    dist = dist_dir(plan, state / "dist")
    write_dist(plan, dist)
    objects = dist_objects(dist)
    releases = [s.target for s in script_steps((dist / APPLY_SCRIPT).read_text()) if s.kind == "helm"]
    wanted = local_controllers(objects, releases)
    bins = binaries([*CONTROL_PLANE, *(c.binary for c in wanted)])
    with control_plane(state / "cluster", bins) as plane:
        controllers = LocalControllers.create(plane, bins, wanted)
        rehearsal = Rehearsal(plan, plane, controllers, dist, objects, timings={"control plane": plane.started_in})
        try:
            started = time.monotonic()
            rehearsal.create_nodes(nodes)
            rehearsal.timings["nodes"] = time.monotonic() - started
            started = time.monotonic()
            rehearsal.applied = apply_dist(plane.api, dist, rehearsal)
            rehearsal.timings["apply"] = time.monotonic() - started
            yield rehearsal
        finally:
            controllers.close()
