"""Every shipped spec rehearsed on a local control plane (efa_stack/rehearsal/): the real kube-scheduler and
kube-controller-manager, the MPI operator, Kueue, the Kubeflow controllers and Karpenter core's kwok provider at their
pinned versions, under the RBAC efa-stack renders, with kwok nodes made from the plan. Each spec's rollout
(k8s/rollout.py, the step graph ``cdk deploy`` and ``apply.sh`` translate) is performed in ``apply.sh``'s order, then
each scenario runs against it, in the order of this file, every one leaving the cluster as it found it:

1. every rendered controller is available and runs;
2. every job, started by its own ``efa-stack.io/start`` command, is admitted with the flavors the plan meant, gets
   its launcher and workers, one worker per node of its group inside one topology domain, runs and completes;
3. every DaemonSet runs on every node it must serve, a DRA driver's publishing its devices there (after 2: a pool's
   nodes exist once a job needed them);
4. with too few nodes a job waits with the reason Kueue (or the scheduler) gives, and a queued one makes no pod;
5. a node quarantined the way ``verify --acceptance --quarantine`` does it is avoided, or replaced as
   docs/design/kueue-tas.md says (in the job's domain only with ``topology: required``);
6. a spec change re-applied the way ``cdk deploy`` applies it leaves the other jobs and the CRDs in place and
   takes effect in the controller (last: it changes the cluster).

The specs: every file under clusters/ (scale-1000-p5 at its desired size, 1,000 nodes) and
``tas-p5-required-pytorchjob`` (tests/rehearsal_support.py), which adds the PyTorchJob no shipped spec renders and
``topology: required``. The binaries are built on first use by tools/build.sh (tens of CPU-minutes once;
docs/development.md), so nothing here is skipped. All tests of one spec share one rehearsal (a module-scoped
fixture per spec); the defects' own scenarios are in tests/test_rehearsal_defects.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from efa_stack import contract
from efa_stack.planning import dra
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.planning.scheduling import layer_label, network_layers
from efa_stack.rehearsal.compute_domains import COMPUTE_DOMAIN_LABEL, DRIVER
from efa_stack.rehearsal.jobs import KINDS, JobOutcome, pod_running
from efa_stack.rehearsal.nodes import NodeOptions
from efa_stack.rehearsal.rehearsal import Rehearsal, deployment_available, rehearse
from efa_stack.rehearsal.releases import RELEASES
from efa_stack.rehearsal.resource_slices import release_kind
from efa_stack.rehearsal.update import update
from k8s.nccl_tests import GATE_NAME
from k8s.rollout import HelmRelease, InstallRelease
from tests.rehearsal_support import (
    JOB_TIMEOUT,
    SETTLE,
    VARIANTS,
    add_nodes,
    changed_spec,
    compute_domain,
    cordon,
    delete_nodes,
    fresh,
    has_jobs,
    job_flavor,
    job_group,
    jobs,
    live_nodes,
    log,
    node_labels,
    quarantine,
    quarantine_note,
    release,
    shipped,
    spec_plan,
    wait_for,
)

pytestmark = [pytest.mark.rehearsal, pytest.mark.xdist_group("rehearsal")]

SPECS = [*shipped(), *VARIANTS]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every scenario for every spec; those that start a job (marker ``jobs``) for the specs that render one."""
    if "rehearsed" in metafunc.fixturenames:
        specs = [s for s in SPECS if has_jobs(s)] if metafunc.definition.get_closest_marker("jobs") else SPECS
        metafunc.parametrize("rehearsed", specs, indirect=True, scope="module")


@pytest.fixture(scope="module")
def rehearsed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    name = request.param
    started = time.monotonic()
    with rehearse(spec_plan(name), tmp_path_factory.mktemp(f"rehearsal-{name}"), nodes=NodeOptions()) as r:
        log(f"{name}: rolled out in {time.monotonic() - started:.1f}s; "
            + ", ".join(f"{k} {v:.1f}s" for k, v in r.timings.items()))
        slow = [f"{step} {s:.1f}s" for step, s in (r.performed.seconds if r.performed else []) if s >= 1]
        log(f"{name}: steps of a second or more: {', '.join(slow) or 'none'}")
        for chart, refusals in (r.performed.refusals if r.performed else {}).items():
            log(f"{name}: chart {chart} was refused {len(refusals)} times before it was admitted; "
                f"first: {refusals[0]}")
        r.name = name
        yield r
        peak = r.plane.peak_memory_mib()
        log(f"{name}: peak memory {sum(peak.values())} MiB (" + ", ".join(f"{k} {v}" for k, v in peak.items()) + ")")


def _role(r: Rehearsal, node: str) -> str:
    return node_labels(r, node).get(contract.LABEL_ROLE, "")


# --- 1. controllers -----------------------------------------------------------------------------------------


def test_every_rendered_controller_is_available_and_serves(rehearsed):
    # GIVEN the rolled-out spec WHEN its Deployments' pods run on the system nodes (kwok)
    deployments = [o for o in rehearsed.objects if o["kind"] == "Deployment"]
    assert deployments
    for d in deployments:
        namespace, name = d["metadata"]["namespace"], d["metadata"]["name"]
        # THEN each is available, on a system node, and the controller it stands for runs locally under its account
        wait_for(f"Deployment {namespace}/{name} available", lambda n=namespace, m=name: True if deployment_available(
            rehearsed.api, n, m) else None)
        selector = ",".join(f"{k}={v}" for k, v in d["spec"]["selector"]["matchLabels"].items())
        pods = rehearsed.pods(namespace, selector)
        assert pods and all(pod_running(p) for p in pods), [p["status"] for p in pods]
        assert {_role(rehearsed, p["spec"]["nodeName"]) for p in pods} == {"system"}
        running = [c for c in rehearsed.controllers.running.values() if c.controller.deployment == name]
        assert running and running[0].process.running(), f"no local controller for {namespace}/{name}"
    # AND the controllers standing in for the Helm releases run too; a release stood in for by its objects alone
    # (Node Feature Discovery) has its Deployments available, their pods run by kwok; a DRA driver's release is stood
    # in for by its DaemonSet and the ResourceSlices it publishes (scenario 3)
    for helm in _releases(rehearsed):
        if helm.name in rehearsed.drivers:
            continue
        for cls in RELEASES[helm.name]:
            running = rehearsed.controllers.running.get(cls.name)
            assert running is not None and running.process.running(), f"release {helm.name}: {cls.name} does not run"
        if not RELEASES[helm.name]:
            mine = [(ns, name) for ns, name in rehearsed.release_deployments if ns == helm.namespace]
            assert mine, f"release {helm.name}: neither a local controller nor a Deployment stands in for it"
            for ns, name in mine:
                assert deployment_available(rehearsed.api, ns, name), f"release {helm.name}: {ns}/{name}"
    rehearsed.plane.check_running()


def _releases(r: Rehearsal) -> list[HelmRelease]:
    return [s.release for s in r.rollout.of_type(InstallRelease) if s.release is not None]


# --- 2. jobs ------------------------------------------------------------------------------------------------


def assert_placed(r: Rehearsal, job: dict[str, Any], outcome: JobOutcome) -> None:
    """Admitted with the plan's flavors, one worker per node of the job's group, the launcher on a system node, the
    workers in one lowest-layer domain where the plan asks Kueue for a topology."""
    group = job_group(r, job)
    workers = KINDS[job["kind"]].worker_count(job)
    assert len(set(outcome.nodes)) == len(outcome.nodes) == workers, outcome
    assert {node_labels(r, n)[contract.LABEL_NODE_GROUP] for n in outcome.nodes} == {group.name}, outcome
    if outcome.launcher_node is not None:
        assert _role(r, outcome.launcher_node) == "system", outcome
    domain = compute_domain(r, job)
    if domain is not None and domain.within_domain:
        # a job that fits one NVLink domain keeps its workers in one GFD clique (k8s/compute_domains.py)
        assert len({node_labels(r, n)[contract.GPU_CLIQUE_LABEL] for n in outcome.nodes}) == 1, outcome
    flavor = job_flavor(r, job)
    if r.plan.kueue is None:
        assert not outcome.queued and outcome.flavors == {}, outcome
        return
    assert outcome.queued and flavor is not None, outcome
    system = r.plan.kueue.flavor(r.plan.system.name)
    assert system is not None
    for podset, flavors in outcome.flavors.items():
        assert flavors == ((system.name,) if podset == "launcher" else (flavor.name,)), outcome.flavors
    if r.plan.kueue.binding(group.name).worker_annotations:
        bottom = layer_label(network_layers(group.instance_type))
        assert len({node_labels(r, n)[bottom] for n in outcome.nodes}) == 1, outcome


def _daemon_set_nodes(r: Rehearsal, uid: str) -> set[str] | None:
    """The nodes of the running pods of the IMEX daemon DaemonSet the driver's controller made for ComputeDomain
    ``uid`` (None until there is such a DaemonSet)."""
    selector = f"{COMPUTE_DOMAIN_LABEL}={uid}"
    if not r.api.list("apps/v1", "DaemonSet", contract.NVIDIA_DRA_NAMESPACE, label_selector=selector):
        return None
    return {p["spec"]["nodeName"] for p in r.pods(contract.NVIDIA_DRA_NAMESPACE, selector) if pod_running(p)}


def assert_compute_domain(r: Rehearsal, job: dict[str, Any], outcome: JobOutcome) -> None:
    """An UltraServer job's ComputeDomain as the NVIDIA DRA driver's controller serves it: its finalizer on it, the
    channel ResourceClaimTemplate the workers claim made by it, each worker's channel allocated on its own node from
    the slices the kubelet plugin publishes, and the IMEX daemon DaemonSet it made running on exactly the job's
    nodes (the plugin labels each node whose channel it prepared)."""
    domain = compute_domain(r, job)
    assert domain is not None
    cd = r.api.get({"apiVersion": contract.COMPUTE_DOMAIN_API_VERSION, "kind": contract.COMPUTE_DOMAIN_KIND,
                    "metadata": {"namespace": domain.namespace, "name": domain.name}}).body
    uid = cd["metadata"]["uid"]
    assert COMPUTE_DOMAIN_LABEL in cd["metadata"].get("finalizers", []), cd["metadata"]
    template = r.api.get({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                          "metadata": {"namespace": domain.namespace, "name": domain.channel_claim_template}}).body
    assert template["metadata"]["labels"][COMPUTE_DOMAIN_LABEL] == uid, template["metadata"]
    claims = {c["metadata"]["name"]: c for c in r.api.list("resource.k8s.io/v1", "ResourceClaim", domain.namespace)}
    for pod in r.jobs.workers(job):
        (ref,) = pod["status"]["resourceClaimStatuses"]
        (result,) = claims[ref["resourceClaimName"]]["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (DRIVER, pod["spec"]["nodeName"], "channel-0")
    nodes = wait_for(f"the IMEX daemons of ComputeDomain {domain.name} on its {len(outcome.nodes)} nodes",
                     lambda: True if _daemon_set_nodes(r, uid) == set(outcome.nodes) else None)
    assert nodes


@pytest.mark.jobs
def test_every_job_started_as_documented_lands_and_completes(rehearsed):
    for job in jobs(rehearsed):
        # GIVEN a suspended job WHEN it is started by its own efa-stack.io/start command
        outcome = rehearsed.jobs.land(job, timeout=JOB_TIMEOUT, settle=JOB_TIMEOUT)
        log(f"{rehearsed.name}: {outcome.kind} {outcome.name} running {outcome.seconds_to_running}s after "
            f"{outcome.start!r} on {', '.join(outcome.nodes)}")
        # THEN every pod runs, placed as the plan means
        assert outcome.landed, outcome.reason
        assert_placed(rehearsed, job, outcome)
        if compute_domain(rehearsed, job) is not None:
            assert_compute_domain(rehearsed, job, outcome)
        # AND it completes once its pods exit 0 (the next job finds its nodes free)
        assert rehearsed.jobs.finish(outcome, job, JOB_TIMEOUT).completed, outcome


# --- 3. DaemonSets ------------------------------------------------------------------------------------------


def _dra(g: NodeGroupPlan) -> bool:
    return g.devices == contract.DEVICES_DRA


SERVED_GROUPS: dict[str, Callable[[NodeGroupPlan], bool]] = {
    contract.EFA_DEVICE_PLUGIN_NAME: lambda g: g.efa_enabled and not _dra(g),
    contract.NVIDIA_DEVICE_PLUGIN_NAME: lambda g: g.role == "gpu" and not _dra(g),
    contract.NEURON_DEVICE_PLUGIN_NAME: lambda g: g.role == "neuron" and not _dra(g),
    contract.AWS_DRANET_RELEASE: lambda g: g.efa_enabled and _dra(g),
    contract.NVIDIA_DRA_RELEASE: lambda g: g.role == "gpu" and _dra(g),
    contract.NEURON_DRA_RELEASE: lambda g: g.role == "neuron" and _dra(g),
    contract.GPU_FEATURE_DISCOVERY_NAME: lambda g: g.ultraserver is not None,
    f"{contract.NVIDIA_DRA_RELEASE}-kubelet-plugin": lambda g: g.ultraserver is not None,
    f"{contract.NFD_RELEASE}-worker": lambda g: g.ultraserver is not None,
}
"""DaemonSet -> the node groups whose every node it must run on (the plan's own facts: EFA, GPU, Neuron groups, their
devices from the device plugins or, ``devices: dra``, from the DRA drivers, whose DaemonSets the rehearsal stands in
for: efa_stack/rehearsal/resource_slices.py; UltraServer groups for GPU feature discovery, the NVIDIA DRA driver's
kubelet plugin and NFD's worker)."""


def test_every_daemonset_runs_on_every_node_it_must_serve(rehearsed):
    # GIVEN every DaemonSet of the cluster (the device plugins rendered, the releases' stand-ins, the DRA drivers'
    # installed) but the IMEX daemons a ComputeDomain's controller makes per job (scenario 2), and the live nodes (a
    # pool's launched ones too)
    daemonsets = [d for d in rehearsed.api.list("apps/v1", "DaemonSet")
                  if COMPUTE_DOMAIN_LABEL not in (d["metadata"].get("labels") or {})]
    assert daemonsets
    groups = [*rehearsed.plan.all_node_groups, *rehearsed.plan.pool_groups]
    for ds in daemonsets:
        name, namespace = ds["metadata"]["name"], ds["metadata"]["namespace"]
        assert name in SERVED_GROUPS, f"DaemonSet {name}: say here which node groups it must serve"
        served = {g.name for g in groups if SERVED_GROUPS[name](g)}
        want = {n["metadata"]["name"] for n in live_nodes(rehearsed)
                if n["metadata"]["labels"].get(contract.LABEL_NODE_GROUP) in served}
        selector = ",".join(f"{k}={v}" for k, v in ds["spec"]["selector"]["matchLabels"].items())

        def placed(n: str = namespace, s: str = selector, w: set[str] = want) -> set[str] | None:
            pods = [p for p in rehearsed.pods(n, s) if pod_running(p)]
            got = {p["spec"]["nodeName"] for p in pods}
            return got if got == w and len(pods) == len(w) else None

        # THEN one running pod on each node of the groups it serves, and on no other node
        assert wait_for(f"DaemonSet {namespace}/{name} on {len(want)} nodes", placed) == want
        assert want or not served
        if name in rehearsed.drivers:
            # AND a DRA driver publishes its devices on exactly those nodes
            component, release = rehearsed.drivers[name]
            driver = dra.DRIVERS[release_kind(component, release)]
            slices = rehearsed.api.list(contract.RESOURCE_API_VERSION, contract.RESOURCE_SLICE_KIND)
            assert sorted(s["spec"]["nodeName"] for s in slices if s["spec"]["driver"] == driver) == sorted(want)


# --- 4. too few nodes ---------------------------------------------------------------------------------------


@pytest.mark.jobs
def test_with_too_few_nodes_a_job_waits_with_the_reason(rehearsed):
    for job in jobs(rehearsed):
        _too_few_nodes(rehearsed, job)


def _too_few_nodes(r: Rehearsal, job: dict[str, Any]) -> None:
    group, flavor = job_group(r, job), job_flavor(r, job)
    workers = KINDS[job["kind"]].worker_count(job)
    # GIVEN one node fewer than the job's workers can take (the others cordoned)
    nodes = live_nodes(r, group.name)
    cordoned = nodes[workers - 1:]
    assert cordoned, f"{group.name} has {len(nodes)} nodes for {workers} workers"
    cordon(r, cordoned)
    try:
        fresh(r, job)
        # WHEN the job is started
        outcome = r.jobs.land(job, timeout=JOB_TIMEOUT, settle=SETTLE)
        log(f"{r.name}: {job['metadata']['name']} with {workers - 1} schedulable nodes: {outcome.reason}")
        # THEN it does not run, and says why
        assert not outcome.running and outcome.reasons, outcome
        if flavor is not None and flavor.topology is not None:
            # Kueue's topology-aware scheduling sees the nodes: it keeps the job queued, names the topology that cannot
            # hold the workers, and no pod exists
            assert not outcome.admitted, outcome
            assert any(f'topology "{flavor.topology}"' in m for m in outcome.reasons), outcome.reasons
            assert r.jobs.workers(job) == [] and r.jobs.leaders(job) == []
            if KINDS[job["kind"]].leader_selector is None:
                # one flavor for all its PodSets: the Workload's own message names the topology too (the system
                # flavor, which it can never use, is tried first, not last: efa_stack/planning/scheduling.py)
                assert f'topology "{flavor.topology}"' in outcome.workload_message, outcome.workload_message
        else:
            # without a topology the queue (if any) admits it for quota and the scheduler keeps the workers pending
            assert outcome.admitted and any("nodes are available" in m for m in outcome.reasons), outcome.reasons
            pending = [p for p in r.jobs.workers(job) if not p["spec"].get("nodeName")]
            assert pending, outcome
            if job["kind"] == contract.MPIJOB_KIND:
                # the MPI operator made the launcher Job while the job was suspended (0 of 0 workers ready,
                # kubeflow/mpi-operator@v0.8.2 pkg/controller/mpi_job_controller.go:678), so whatever its
                # launcherCreationPolicy its pod starts beside the pending workers: efa-stack's gate holds mpirun
                for pod in r.jobs.leaders(job):
                    assert pod["spec"]["containers"][0]["command"][3] == GATE_NAME, pod["spec"]["containers"][0]
    finally:
        r.jobs.remove(job, JOB_TIMEOUT)
        cordon(r, cordoned, unschedulable=False)
        r.reapply(job)


# --- 5. a quarantined node ----------------------------------------------------------------------------------


def _domain(r: Rehearsal, group, node: str) -> str:
    return node_labels(r, node)[layer_label(network_layers(group.instance_type))]


def _replaced(r: Rehearsal, job: dict[str, Any], gone: str, workers: int) -> list[str] | None:
    pods = r.jobs.workers(job)
    nodes = [p["spec"].get("nodeName") for p in pods if pod_running(p)]
    return nodes if len(nodes) == workers and gone not in nodes else None


@pytest.mark.jobs
def test_a_quarantined_node_is_avoided_or_replaced_in_the_domain_the_docs_say(rehearsed):
    r = rehearsed
    job = jobs(r)[0]
    group, flavor = job_group(r, job), job_flavor(r, job)
    workers = KINDS[job["kind"]].worker_count(job)
    size = len([n for n in live_nodes(r, group.name)])
    topology = flavor is not None and flavor.topology is not None
    domain = compute_domain(r, job)
    if domain is not None and domain.within_domain and workers == domain.domain_nodes:
        _quarantined_in_a_whole_nvlink_domain(r, job)
        return
    # GIVEN spare nodes of the job's group: with a topology, two more in the job's domain and one in another
    spares = add_nodes(r, group, range(size, size + (3 if topology else 1)), size + 2 if topology else None)
    fresh(r, job)
    bad = None
    try:
        if not topology:
            # WHEN a node is quarantined before the job starts THEN the job lands on the others
            bad = live_nodes(r, group.name)[0]["metadata"]["name"]
            quarantine(r, bad)
            outcome = r.jobs.land(job, timeout=JOB_TIMEOUT, settle=JOB_TIMEOUT)
            assert outcome.landed and bad not in outcome.nodes, outcome.reason or outcome
            return
        # WHEN the job runs and one of its nodes is quarantined and its pod there ends
        outcome = r.jobs.land(job, timeout=JOB_TIMEOUT, settle=JOB_TIMEOUT)
        assert outcome.landed and len(outcome.domains) == 1, outcome
        bad, domain = outcome.nodes[0], outcome.domains[0]
        quarantine(r, bad)
        (pod,) = [p for p in r.jobs.workers(job) if p["spec"].get("nodeName") == bad]
        r.api.delete(pod)
        nodes = wait_for(f"{job['metadata']['name']}: a worker replacing {bad}",
                         lambda: _replaced(r, job, bad, workers))
        (new,) = set(nodes) - set(outcome.nodes)
        free_in_domain = [s for s in spares if _domain(r, group, s) == domain and s not in nodes]
        log(f"{r.name}: {bad} in {domain} replaced by {new} in {_domain(r, group, new)}; free in {domain}: "
            f"{free_in_domain}")
        note = quarantine_note(r.plan, group.name)
        # THEN Kueue replaced it where docs/design/kueue-tas.md says, and the quarantine note says the same
        assert free_in_domain, "a free node waited in the job's own domain"
        if r.plan.kueue.mode == "required":
            assert _domain(r, group, new) == domain
            assert "in the job's own" in note, note
        else:
            # preferred: Kueue took the node of the other domain (its best fit for one pod) though one waited here
            assert _domain(r, group, new) != domain
            assert "another" in note and "domain" in note, note
    finally:
        r.jobs.remove(job, JOB_TIMEOUT)
        if bad is not None and bad not in spares:
            release(r, bad)
        delete_nodes(r, spares)
        r.reapply(job)


def _quarantined_in_a_whole_nvlink_domain(r: Rehearsal, job: dict[str, Any]) -> None:
    """An UltraServer job whose workers fill its NVLink domain (every node of the UltraServer) has no node to avoid a
    quarantined one with: no other node shares the domain, and its workers must stay in one clique."""
    group = job_group(r, job)
    bad = live_nodes(r, group.name)[0]["metadata"]["name"]
    fresh(r, job)
    try:
        # WHEN a node of its UltraServer is quarantined before the job starts
        quarantine(r, bad)
        outcome = r.jobs.land(job, timeout=JOB_TIMEOUT, settle=SETTLE)
        log(f"{r.name}: {job['metadata']['name']} with {bad} quarantined: {outcome.reason}")
        # THEN it does not run, says why, and no worker runs on the quarantined node or outside the domain
        assert not outcome.running and any("nodes are available" in m for m in outcome.reasons), outcome
        running = [p["spec"]["nodeName"] for p in r.jobs.workers(job) if pod_running(p)]
        assert bad not in running
        assert len({node_labels(r, n)[contract.GPU_CLIQUE_LABEL] for n in running}) <= 1, running
        # AND once the node is released (or replaced in its UltraServer), the job lands in its domain
        release(r, bad)
        outcome = r.jobs.land(job, timeout=JOB_TIMEOUT, settle=JOB_TIMEOUT)
        assert outcome.landed and bad in outcome.nodes, outcome
        assert_placed(r, job, outcome)
    finally:
        release(r, bad)
        r.jobs.remove(job, JOB_TIMEOUT)
        r.reapply(job)


# --- 6. a spec change ---------------------------------------------------------------------------------------


def _uids(r: Rehearsal, kind: str, api_version: str) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["uid"] for o in r.api.list(api_version, kind)}


@pytest.mark.jobs
def test_a_spec_change_reapplied_keeps_the_rest_and_takes_effect_in_the_controller(rehearsed):
    from efa_stack.planning.plan import plan_from_text

    r = rehearsed
    before_jobs = {(j["kind"], j["metadata"]["name"]): r.api.get(j).body["metadata"]["uid"] for j in jobs(r)}
    domains = {j["metadata"]["name"]: d for j in jobs(r) if (d := compute_domain(r, j)) is not None}
    domain_uids = {name: _compute_domain_uid(r, d) for name, d in domains.items()}
    crds = _uids(r, "CustomResourceDefinition", "apiextensions.k8s.io/v1")
    kueue = r.controllers.running.get("kueue")
    kueue_pid = kueue.process.pid if kueue is not None else None
    # GIVEN the spec changed as a user changes it WHEN it is re-applied as cdk deploy applies it (one apply per chart)
    text, what = changed_spec(r.name)
    plan = plan_from_text(text)
    _, removed = update(r, plan)
    log(f"{r.name}: re-applied ({what}); deleted {[o['kind'] + '/' + o['metadata']['name'] for o in removed]}")
    after = {(j["kind"], j["metadata"]["name"]) for j in jobs(r)}
    # THEN the removed jobs are gone, the others are the same objects, and every CRD is still there, unchanged
    for key, uid in before_jobs.items():
        live = r.api.get({"apiVersion": KIND_API[key[0]], "kind": key[0],
                          "metadata": {"name": key[1], "namespace": "default"}})
        if key in after:
            assert live.body["metadata"]["uid"] == uid, key
        else:
            assert live.status == 404, key
    assert {k: v for k, v in _uids(r, "CustomResourceDefinition", "apiextensions.k8s.io/v1").items()
            if k in crds} == crds
    # AND a removed UltraServer job's ComputeDomain is gone once the NVIDIA DRA driver's controller cleared its
    # finalizer, with the channel template and the IMEX daemon DaemonSet it made; a kept one's are there
    for name, domain in domains.items():
        uid = domain_uids[name]
        made = {(kind, o["metadata"]["name"]) for api, kind in (("resource.k8s.io/v1", "ResourceClaimTemplate"),
                                                              ("apps/v1", "DaemonSet"))
                for o in r.api.list(api, kind, label_selector=f"{COMPUTE_DOMAIN_LABEL}={uid}")}
        if any(n == name for _, n in after):
            assert _compute_domain_uid(r, domain) == uid and len(made) == 3, (name, made)
        else:
            assert _compute_domain_uid(r, domain) is None and not made, (name, made)
    # AND Kueue, whose configuration changed, runs with the new one: its Deployment rolled a new pod and the
    # controller restarted from it
    if plan.kueue is not None:
        now = r.controllers.running["kueue"]
        assert now.process.pid != kueue_pid and now.process.running(), "Kueue still runs its old configuration"
        config = next(a for a in now.launch.args if a.startswith("--config=")).removeprefix("--config=")
        assert f"timeout: {plan.kueue.wait.timeout_seconds}s" in Path(config).read_text()
    # AND the first job still lands
    job = jobs(r)[0]
    fresh(r, job)
    outcome = r.jobs.land(job, timeout=JOB_TIMEOUT, settle=JOB_TIMEOUT)
    assert outcome.landed, outcome.reason
    assert_placed(r, job, outcome)


def _compute_domain_uid(r: Rehearsal, domain: Any) -> str | None:
    got = r.api.get({"apiVersion": contract.COMPUTE_DOMAIN_API_VERSION, "kind": contract.COMPUTE_DOMAIN_KIND,
                     "metadata": {"namespace": domain.namespace, "name": domain.name}})
    return str(got.body["metadata"]["uid"]) if got.status == 200 else None


KIND_API = {contract.MPIJOB_KIND: contract.MPIJOB_API_VERSION, contract.TRAINJOB_KIND: contract.TRAINER_API_VERSION,
            contract.PYTORCHJOB_KIND: contract.PYTORCHJOB_API_VERSION}

