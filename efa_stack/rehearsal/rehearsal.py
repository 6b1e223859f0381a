"""One rehearsal: a plan's rollout performed on a local control plane with the real controllers, on nodes made
from the plan, and the means to start its jobs the way users do and to watch what the controllers make of them.

What is rehearsed: the objects efa-stack renders, server-side applied in the rollout's order through the real
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
import json
import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from efa_stack import contract
from efa_stack.planning.plan import ClusterPlan
from efa_stack.rehearsal.binaries import CONTROL_PLANE, binaries, to_stderr
from efa_stack.rehearsal.client import Api, ApiError, poll
from efa_stack.rehearsal.control_plane import ControlPlane, control_plane
from efa_stack.rehearsal.controllers import CONTROLLERS, LocalController, LocalControllers, controllers_for
from efa_stack.rehearsal.jobs import JobFollower
from efa_stack.rehearsal.karpenter import reserved_pool_nodes
from efa_stack.rehearsal.manifests import stack_objects
from efa_stack.rehearsal.nodes import NodeOptions, plan_nodes
from efa_stack.rehearsal.releases import RELEASES, release_objects
from efa_stack.rehearsal.resource_slices import publish, release_kind, stand_in_objects
from efa_stack.rehearsal.rollout import Performed, RolloutError, perform, wait_established
from k8s.rollout import ApplyChart, HelmRelease, InstallRelease, Nodes, Rollout, WaitAvailable, plan_rollout

ROLLOUT_TIMEOUT = 300
"""Seconds a controller's Deployment may take to become available (``apply.sh`` allows 300, k8s/dist.py)."""
NODES_READY_TIMEOUT = 300
"""Seconds for kwok to report every node Ready (1,000 nodes on a busy 2-core machine take a minute)."""
NODE_REQUESTS = 8
"""Node creations in flight at once."""
Progress = Callable[[str], None]


def deployment_available(api: Api, namespace: str, name: str) -> bool:
    """The Deployment's controller saw its latest spec, its ``Available`` condition is "True" and every replica is up to
    date and available, none of an older template left (what ``kubectl rollout status`` waits for)."""
    got = api.get({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": namespace, "name": name}})
    if got.status != 200:
        return False
    status, spec = got.body.get("status") or {}, got.body["spec"]
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    want = spec.get("replicas", 1)
    return (status.get("observedGeneration") == got.body["metadata"].get("generation")
            and conditions.get("Available") == "True" and status.get("updatedReplicas") == want
            and status.get("availableReplicas") == want and status.get("replicas") == want)


@dataclass
class Rehearsal:
    """A rolled-out plan; also the :class:`~efa_stack.rehearsal.rollout.Actions` of its rollout."""

    plan: ClusterPlan
    plane: ControlPlane
    controllers: LocalControllers
    rollout: Rollout
    objects: list[dict[str, Any]]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    performed: Performed | None = None
    timings: dict[str, float] = field(default_factory=dict)
    progress: Progress = to_stderr
    name: str = ""
    """What the caller calls this rehearsal (a spec's name), for messages."""
    release_deployments: set[tuple[str, str]] = field(default_factory=set)
    """(namespace, name) of the Deployments among the Helm releases' stand-in objects."""
    drivers: dict[str, tuple[str, HelmRelease]] = field(default_factory=dict)
    """The DRA drivers installed: release name -> (component, release); they publish on the nodes added later too."""

    @property
    def api(self) -> Api:
        return self.plane.api

    @property
    def jobs(self) -> JobFollower:
        """Starts the plan's jobs by their start command and follows them (:mod:`efa_stack.rehearsal.jobs`)."""
        return JobFollower(self.api, self.plan, self.start)

    # --- the rollout's actions ------------------------------------------------------------------------------
    def transform(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.controllers.rewrite(obj)

    def nodes_up(self, step: Nodes) -> None:
        """The nodes exist already (:func:`rehearse` creates them first, as a cluster has its node groups before
        ``apply.sh`` runs); they must still be Ready."""
        self._wait_nodes_ready({n["metadata"]["name"] for n in self.nodes})

    def applied(self, step: ApplyChart) -> None:
        """The chart's Deployments would start their pods now: the local controller of each starts under its
        ServiceAccount once the CRDs created so far are Established (an operator's pod restarts until its CRDs are
        served), and is waited for until it answers ready. A controller that runs already is restarted when its
        Deployment's pod template changed, once the Deployment rolled out (the new pod starts with what the cluster
        holds now: its configuration, arguments, certificates); otherwise it keeps running, as its pod would."""
        mine = {(o["metadata"].get("namespace"), o["metadata"]["name"])
                for o in self.rollout.objects[step.chart] if o["kind"] == "Deployment"}
        for c in self.controllers.controllers:
            if (c.namespace, c.deployment) not in mine:
                continue
            running = self.controllers.running.get(c.name)
            if running is None:
                for crd in self.api.list("apiextensions.k8s.io/v1", "CustomResourceDefinition"):
                    wait_established(self.api, crd["metadata"]["name"])
                self.timings[f"{c.name} ready"] = self.controllers.start(c.name, self.objects).ready_in
            elif running.template != self.controllers.template(c):
                assert c.deployment is not None
                self._wait_rolled_out(c.namespace, c.deployment)
                self.progress(f"Deployment {c.namespace}/{c.deployment} rolled out a new pod: restarting {c.name}")
                self.timings[f"{c.name} restarted"] = self.controllers.restart(c.name, self.objects).ready_in

    def _wait_rolled_out(self, namespace: str, name: str) -> None:
        poll(f"Deployment {namespace}/{name} rolled out", lambda: True if deployment_available(
            self.api, namespace, name) else None, ROLLOUT_TIMEOUT)

    def install(self, step: InstallRelease) -> None:
        """The release's stand-in (:mod:`efa_stack.rehearsal.releases`): its objects applied, its CRDs established,
        its controllers started and ready (what ``helm --wait`` waits for). A DRA driver's release is stood in for by
        its DeviceClass and DaemonSet, and the ResourceSlices it publishes where that runs
        (:mod:`efa_stack.rehearsal.resource_slices`)."""
        assert step.release is not None
        if release_kind(step.component, step.release) is not None:
            self._install_driver(step.id, step.component, step.release)
            return
        try:
            objects = release_objects(step.release.name, step.release.namespace, step.release.values)
        except KeyError as err:
            raise RolloutError(str(err)) from None
        for cls in RELEASES[step.release.name]:  # taken on first: the release's webhooks point at them
            self.controllers.add(cls())
        for obj in objects:
            got = self.api.apply(self.transform(obj))
            if not got.ok:
                raise RolloutError(f"{step.id}: {obj['kind']} {obj['metadata']['name']}: {got.message()}")
            if obj["kind"] == "Deployment":
                self.release_deployments.add((obj["metadata"]["namespace"], obj["metadata"]["name"]))
        for obj in objects:
            if obj["kind"] == "CustomResourceDefinition":
                wait_established(self.api, obj["metadata"]["name"])
        for cls in RELEASES[step.release.name]:
            before = self.controllers.running.get(cls.name)
            if before is None:
                self.timings[f"{cls.name} ready"] = self.controllers.start(cls.name, self.objects,
                                                                           step.release.values).ready_in
            elif dict(before.values) != dict(step.release.values):  # helm upgrade with new values: new pods
                before.values = step.release.values
                self.timings[f"{cls.name} restarted"] = self.controllers.restart(cls.name, self.objects).ready_in

    def _install_driver(self, step: str, component: str, release: HelmRelease) -> None:
        for obj in stand_in_objects(component, release):
            got = self.api.apply(obj)
            if not got.ok:
                raise RolloutError(f"{step}: {obj['kind']} {obj['metadata']['name']}: {got.message()}")
        self.drivers[release.name] = (component, release)
        try:
            publish(self.api, self.plan, [(component, release)])
        except ApiError as err:
            raise RolloutError(f"{step}: {err}") from None

    def available(self, step: WaitAvailable) -> None:
        """A rendered Deployment: available (kwok runs its pod) and its local controller running. A Helm release's
        Deployment is not rendered here: its local controller answered ready when the release was installed, or, where
        the release's stand-in is the Deployment itself, that is available."""
        owner = next((r for r in self.controllers.running.values() if r.controller.namespace == step.namespace
                      and step.deployment in (r.controller.deployment, r.controller.release_deployment)), None)
        if owner is None and (step.namespace, step.deployment) in self.release_deployments:
            self._wait_rolled_out(step.namespace, step.deployment)  # a stand-in object kwok runs, no process
            return
        if owner is None or not owner.process.running():
            raise RolloutError(f"{step.id}: no local controller runs for Deployment {step.namespace}/{step.deployment}")
        if owner.controller.deployment is not None:
            self._wait_rolled_out(step.namespace, step.deployment)

    # --- nodes and jobs ---------------------------------------------------------------------------------------
    def create_nodes(self, options: NodeOptions | None = None) -> list[dict[str, Any]]:
        """Create the plan's nodes (and those of its pools of reserved capacity, which Karpenter's kwok provider cannot
        launch: :mod:`efa_stack.rehearsal.karpenter`) and wait until kwok reports every one Ready."""
        return self.add_nodes([*plan_nodes(self.plan, options), *reserved_pool_nodes(self.plan)])

    def add_nodes(self, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Create ``nodes`` (several requests at a time: a group of 1,000 nodes is one request each), wait until
        kwok reports every one Ready, and until the DRA drivers installed run and publish their devices there."""
        with ThreadPoolExecutor(NODE_REQUESTS) as pool:
            for node, got in zip(nodes, pool.map(self.api.create, nodes), strict=True):
                if got.status != 201:
                    raise ApiError(f"Node {node['metadata']['name']}: {got.message()}")
        self._wait_nodes_ready({n["metadata"]["name"] for n in nodes})
        self.nodes += nodes
        publish(self.api, self.plan, self.drivers.values())
        return nodes

    def _wait_nodes_ready(self, names: set[str]) -> None:
        def all_ready() -> bool | None:
            ready = {n["metadata"]["name"] for n in self.api.list("v1", "Node") if any(
                c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions", []))}
            return True if names <= ready else None

        poll("every node Ready (kwok)", all_ready, NODES_READY_TIMEOUT)

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

    def reapply(self, obj: dict[str, Any]) -> None:
        """Apply rendered ``obj`` again, as the rollout did (a job deleted by a scenario comes back suspended)."""
        got = self.api.apply(self.transform(json.loads(json.dumps(obj))))
        if not got.ok:
            raise ApiError(f"{obj['kind']} {obj['metadata']['name']}: {got.message()}")

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.api.list("v1", "Pod", namespace, label_selector=selector)

    def node(self, name: str) -> dict[str, Any]:
        return next(n for n in self.nodes if n["metadata"]["name"] == name)


def local_controllers(objects: Sequence[dict[str, Any]], releases: Sequence[str]) -> list[LocalController]:
    """The controllers of the rendered Deployments, then those standing in for the Helm releases."""
    return [*controllers_for(list(objects)), *(cls() for r in releases for cls in RELEASES.get(r, ()))]


@contextlib.contextmanager
def rehearse(plan: ClusterPlan, state: Path, *, nodes: NodeOptions | None = None,
             progress: Progress = to_stderr) -> Iterator[Rehearsal]:
    """Build what is missing, plan the rollout of ``plan`` (:func:`k8s.rollout.plan_rollout`, the graph ``cdk deploy``
    and ``apply.sh`` translate), start the control plane under ``state``, create the nodes, apply what the stacks
    apply beside the charts (:mod:`efa_stack.rehearsal.manifests`) and perform the rollout; the processes stop when
    the ``with`` block ends. ``progress`` gets a line at each phase."""
    import cdk8s

    from k8s.charts import build_charts

    rollout = plan_rollout(plan, build_charts(plan, cdk8s.App()))
    objects = [json.loads(json.dumps(o)) for objs in rollout.objects.values() for o in objs]
    releases = [s.release.name for s in rollout.of_type(InstallRelease) if s.release is not None]
    wanted = local_controllers(objects, releases)
    bins = binaries([*CONTROL_PLANE, *(c.binary for c in wanted if c.binary is not None)], echo=progress)
    progress(f"starting the control plane in {state}")
    with control_plane(state / "cluster", bins) as plane:
        known = (*(cls() for cls in CONTROLLERS.values()), *(cls() for v in RELEASES.values() for cls in v))
        controllers = LocalControllers.create(plane, bins, wanted, plan, known)
        rehearsal = Rehearsal(plan, plane, controllers, rollout, objects, timings={"control plane": plane.started_in},
                              progress=progress)
        try:
            started = time.monotonic()
            made = rehearsal.create_nodes(nodes)
            rehearsal.timings["nodes"] = time.monotonic() - started
            progress(f"{len(made)} nodes Ready; applying what the stacks apply beside the charts")
            for obj in stack_objects(plan):
                rehearsal.reapply(obj)
            progress(f"performing the rollout ({len(rollout.steps)} steps)")
            started = time.monotonic()
            rehearsal.performed = perform(plane.api, rollout, rehearsal)
            rehearsal.timings["rollout"] = time.monotonic() - started
            progress(f"rolled out in {rehearsal.timings['rollout']:.0f}s")
            yield rehearsal
        finally:
            controllers.close()
