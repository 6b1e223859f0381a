"""The parts of the rehearsal that need no control plane: nodes from the plan, the rollout's translation, the webhook
rewrite, upstream patches and the process handling (tests/test_rehearsal.py runs the whole)."""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from efa_stack import contract
from efa_stack.planning.nccl import allocatable_memory_mib
from efa_stack.planning.plan import plan_from_file
from efa_stack.planning.scheduling import layer_label, network_layers
from efa_stack.planning.tuning import allocatable_cpu_milli
from efa_stack.rehearsal.client import Response
from efa_stack.rehearsal.controllers import Kueue, LocalControllers, MpiOperator, WebhookServing
from efa_stack.rehearsal.nodes import EKS_CAPACITY_TYPE_LABEL, EKS_NODEGROUP_LABEL, ZONE_LABEL, NodeOptions, plan_nodes
from efa_stack.rehearsal.processes import Processes
from efa_stack.rehearsal.releases import JobSetController, json_patch
from efa_stack.rehearsal.rollout import RolloutError, json_path_value, perform
from k8s.rollout import InstallRelease, Nodes, WaitAvailable
from tests.support import CLUSTERS


def _by_name(nodes):
    return {n["metadata"]["name"]: n for n in nodes}


def test_every_node_group_member_becomes_a_node_with_the_plans_figures():
    # GIVEN the default plan (2 p5.48xlarge, 2 m7i.xlarge system nodes, at desired size)
    plan = plan_from_file(CLUSTERS / "default.yaml")
    nodes = _by_name(plan_nodes(plan))
    p5, system = plan.node_group("p5"), plan.system
    assert sorted(nodes) == sorted([f"p5-{i}" for i in range(p5.desired_size)]
                                   + [f"system-{i}" for i in range(system.desired_size)])
    node = nodes["p5-0"]
    alloc = node["status"]["allocatable"]
    (group_addresses,) = [g for g in plan.addresses.groups if g.name == "p5"]
    max_pods = group_addresses.per_node.max_pods
    # THEN its allocatable is the plan's: devices per node, hugepages, CPU and memory less the reservations
    assert alloc[contract.GPU_RESOURCE] == str(p5.gpus_per_node)
    assert alloc[contract.EFA_RESOURCE] == str(p5.efa_devices_per_node)
    assert alloc[contract.HUGEPAGES_2MI_RESOURCE] == f"{p5.hugepages_2mi_mib}Mi"
    assert alloc["pods"] == str(max_pods)
    assert alloc["cpu"] == f"{allocatable_cpu_milli(p5.instance.vcpus)}m"
    assert alloc["memory"] == f"{allocatable_memory_mib(p5.instance, max_pods) - p5.hugepages_2mi_mib}Mi"
    assert contract.GPU_RESOURCE not in nodes["system-0"]["status"]["allocatable"]
    # AND the group's labels and taints, and the labels EKS puts on nodes
    labels = node["metadata"]["labels"]
    assert p5.labels.items() <= labels.items()
    assert labels[contract.INSTANCE_TYPE_LABEL] == "p5.48xlarge"
    assert labels[ZONE_LABEL] == p5.availability_zone
    assert labels[EKS_CAPACITY_TYPE_LABEL] == "ON_DEMAND" and labels[EKS_NODEGROUP_LABEL] == p5.parts[0].name
    assert {t["key"] for t in node["spec"]["taints"]} == {t.key for t in p5.taints}
    layers = network_layers("p5.48xlarge")
    assert all(layer_label(i) in labels for i in range(1, layers + 1))
    assert not any(k.startswith(contract.NETWORK_LAYER_LABEL_PREFIX) for k in nodes["system-0"]["metadata"]["labels"])


def test_nodes_per_domain_splits_the_lowest_layer_only():
    plan = plan_from_file(CLUSTERS / "default.yaml")
    nodes = _by_name(plan_nodes(plan, NodeOptions(nodes_per_domain=1)))
    bottom, top = layer_label(network_layers("p5.48xlarge")), layer_label(1)
    assert nodes["p5-0"]["metadata"]["labels"][bottom] != nodes["p5-1"]["metadata"]["labels"][bottom]
    assert nodes["p5-0"]["metadata"]["labels"][top] == nodes["p5-1"]["metadata"]["labels"][top]
    together = _by_name(plan_nodes(plan))
    assert together["p5-0"]["metadata"]["labels"][bottom] == together["p5-1"]["metadata"]["labels"][bottom]


def test_groups_at_maximum_size_and_a_quarantined_node():
    plan = plan_from_file(CLUSTERS / "default.yaml")
    options = NodeOptions(size="max", quarantined={"p5-1": "dcgm-failed"}, cordoned=("system-2",))
    nodes = _by_name(plan_nodes(plan, options))
    assert len([n for n in nodes if n.startswith("system-")]) == plan.system.max_size
    quarantined = nodes["p5-1"]["spec"]
    assert quarantined["unschedulable"] is True
    taint = {"key": contract.QUARANTINE_TAINT_KEY, "value": "dcgm-failed", "effect": "NoSchedule"}
    assert taint in quarantined["taints"]
    assert nodes["system-2"]["spec"]["unschedulable"] is True and "unschedulable" not in nodes["p5-0"]["spec"]


def test_a_dra_node_advertises_no_device_plugin_resource_and_its_drivers_run_and_publish_there():
    from efa_stack.planning.dra import DRIVERS
    from efa_stack.planning.node_groups import Taint
    from efa_stack.rehearsal.resource_slices import published_slices, stand_in_objects
    from k8s.components import AWS_DRANET, NVIDIA_DRA_DRIVER
    from k8s.dra import runs_on
    from k8s.rollout import releases

    # GIVEN clusters/dra-p5.yaml: 2 p5.48xlarge whose devices come from the DRA drivers
    plan = plan_from_file(CLUSTERS / "dra-p5.yaml")
    group = plan.node_group("p5")
    nodes = _by_name(plan_nodes(plan))
    alloc = nodes["p5-0"]["status"]["allocatable"]
    # THEN its nodes advertise none of the device plugins' resources (no plugin runs there), the rest as planned
    assert not {contract.GPU_RESOURCE, contract.EFA_RESOURCE, contract.NEURON_RESOURCE} & set(alloc)
    assert alloc[contract.HUGEPAGES_2MI_RESOURCE] == f"{group.hugepages_2mi_mib}Mi"
    assert nodes["p5-0"]["status"]["capacity"].keys() == alloc.keys()
    # AND each driver's stand-in is its DeviceClass and a DaemonSet placed as the chart places it: on the p5 nodes only
    for component, release in releases(plan).items():
        if component not in (AWS_DRANET, NVIDIA_DRA_DRIVER):
            continue
        device_class, daemonset = stand_in_objects(component, release)[1:]
        assert device_class["kind"] == contract.DEVICE_CLASS_KIND
        pod = daemonset["spec"]["template"]["spec"]
        where = {n for n, node in nodes.items() if runs_on(pod, node["metadata"]["labels"], [
            Taint(t["key"], t.get("value", ""), t["effect"]) for t in node["spec"].get("taints", [])])}
        assert where == {"p5-0", "p5-1"}, (release.name, where)
        # AND the slices it publishes on a node are owned by that Node, so they go with it
        live = {"metadata": {**nodes["p5-0"]["metadata"], "uid": "uid-p5-0"}}
        (published,) = published_slices(plan, component, release, [live])
        assert published["spec"]["driver"] in DRIVERS.values() and published["spec"]["nodeName"] == "p5-0"
        assert published["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": "p5-0", "uid": "uid-p5-0", "controller": True}]


class _DriverApi:
    """An API server with ``nodes`` whose stand-in driver pods come up one more per list of pods (as the DaemonSet
    controller places them one node after the other); the slices applied are kept."""

    def __init__(self, nodes: list[dict]) -> None:
        self.nodes, self.listed = nodes, 0
        self.slices: dict[str, dict] = {}

    def list(self, api_version, kind, namespace=None, **_):
        if kind == "Node":
            return self.nodes
        self.listed += 1
        return [{"spec": {"nodeName": n["metadata"]["name"]}, "status": {"phase": "Running"}}
                for n in self.nodes[:self.listed] if n["metadata"]["name"].startswith("p5-")]

    def apply(self, obj):
        self.slices[obj["metadata"]["name"]] = obj
        return Response(200, {})


def test_a_driver_publishes_on_a_node_kubernetes_still_taints_not_ready_once_its_pod_runs_there():
    from efa_stack.rehearsal.resource_slices import publish
    from k8s.components import AWS_DRANET
    from k8s.rollout import releases

    # GIVEN the dra-p5 nodes, p5-1 just Ready and still tainted not-ready by the node lifecycle controller, and the
    # aws-dranet DaemonSet's pod running on p5-0 only so far
    plan = plan_from_file(CLUSTERS / "dra-p5.yaml")
    nodes = [{**n, "metadata": {**n["metadata"], "uid": f"uid-{n['metadata']['name']}"}} for n in plan_nodes(plan)]
    p5_1 = next(n for n in nodes if n["metadata"]["name"] == "p5-1")
    p5_1["spec"]["taints"].append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
    api = _DriverApi(sorted(nodes, key=lambda n: n["metadata"]["name"]))
    # WHEN the driver publishes
    publish(api, plan, [(AWS_DRANET, releases(plan)[AWS_DRANET])], timeout=10)
    # THEN it waited for its pod on p5-1 too and published the EFA devices of both nodes, none on the system nodes
    assert sorted(api.slices) == ["p5-0-dra.net", "p5-1-dra.net"]
    assert len(api.slices["p5-1-dra.net"]["spec"]["devices"]) == plan.node_group("p5").efa_devices_per_node


def test_fails_for_a_node_the_plan_does_not_have():
    plan = plan_from_file(CLUSTERS / "default.yaml")
    with pytest.raises(ValueError, match="no node named p5-7"):
        plan_nodes(plan, NodeOptions(cordoned=("p5-7",)))


class _FakeApi:
    """An API server that establishes every CRD at once and refuses TrainJobs ``refusals`` times."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.applied: list[str] = []

    def apply(self, obj):
        if obj["kind"] == contract.TRAINJOB_KIND and self.refusals:
            self.refusals -= 1
            return Response(403, {"reason": "Forbidden", "message": "denied"})
        self.applied.append(f"{obj['kind']}/{obj['metadata']['name']}")
        return Response(200, {})

    def get(self, obj):
        established = {"conditions": [{"type": "Established", "status": "True"}]}
        return Response(200, {"spec": {"group": "g", "versions": [{"name": "v1"}]}, "status": established})

    def forget(self, api_version):
        pass


class _Actions:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def transform(self, obj):
        return obj

    def nodes_up(self, step):
        self.calls.append(step.id)

    def applied(self, step):
        self.calls.append(step.id)

    def install(self, step):
        self.calls.append(step.id)

    def available(self, step):
        self.calls.append(step.id)


@pytest.fixture(scope="module")
def tas_rollout():
    import cdk8s

    from k8s.charts import build_charts
    from k8s.rollout import plan_rollout

    plan = plan_from_file(CLUSTERS / "tas-p5.yaml")
    return plan_rollout(plan, build_charts(plan, cdk8s.App()))


def test_the_rollout_is_performed_in_an_order_that_realises_its_graph(tas_rollout):
    # GIVEN tas-p5's rollout and a server whose TrainJob webhook refuses twice WHEN it is performed
    api, actions = _FakeApi(refusals=2), _Actions()
    performed = perform(api, tas_rollout, actions, admit_interval=0)
    # THEN every step is performed once, in an order that realises every edge of the graph
    done = [step_id for step_id, _ in performed.seconds]
    assert tas_rollout.violations(done) == [] and len(done) == len(tas_rollout.steps)
    # AND every chart's objects were applied, the nodes, the release and the waits for controllers left to the actions
    rendered = [f"{o['kind']}/{o['metadata']['name']}" for objs in tas_rollout.objects.values() for o in objs]
    assert sorted(api.applied) == sorted(rendered)
    assert [c for c in actions.calls if not c.startswith("apply/")] == [
        s.id for s in tas_rollout.order() if isinstance(s, (Nodes, InstallRelease, WaitAvailable))]
    # AND the refused chart was applied again, as apply.sh's apply_until_admitted does, its refusals kept
    assert list(performed.refusals) == ["training-jobs"] and len(performed.refusals["training-jobs"]) == 2


def test_fails_when_admission_refuses_every_try(tas_rollout):
    with pytest.raises(RolloutError, match="apply/training-jobs: the server refused"):
        perform(_FakeApi(refusals=5), tas_rollout, _Actions(), admit_tries=3, admit_interval=0)


def test_json_path_values_of_the_rollouts_waits():
    obj = {"webhooks": [{"clientConfig": {"caBundle": "Q0E="}}]}
    assert json_path_value(obj, ".webhooks[0].clientConfig.caBundle") == "Q0E="
    assert json_path_value(obj, ".webhooks[1].clientConfig.caBundle") is None
    assert json_path_value({"webhooks": [{"clientConfig": {}}]}, ".webhooks[0].clientConfig.caBundle") is None
    with pytest.raises(ValueError, match="only .field and"):
        json_path_value(obj, "{.webhooks[*]}")


def _controllers() -> LocalControllers:
    controllers = [Kueue(), MpiOperator(), JobSetController()]
    names = tuple(n for c in controllers for n in c.service_names())
    serving = WebhookServing.create(names)
    # no control plane: rewrite needs only the ports and the CA
    out = LocalControllers(plane=None, bins={}, controllers=controllers, webhooks=serving)  # type: ignore[arg-type]
    out.ports = {"kueue": {"webhook": 19443, "health": 1, "metrics": 2}, "mpi-operator": {},
                 "jobset": {"webhook": 29443, "health": 3, "metrics": 4}}
    return out


def test_webhooks_of_a_local_controller_point_at_it_with_the_rehearsals_ca():
    controllers = _controllers()
    webhook = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "kueue-validating-webhook-configuration"},
        "webhooks": [{"name": "vjob.kb.io", "clientConfig": {"service": {
            "name": "kueue-webhook-service", "namespace": contract.KUEUE_NAMESPACE,
            "path": "/validate-batch-v1-job"}}}],
    }
    got = controllers.rewrite(webhook)
    config = got["webhooks"][0]["clientConfig"]
    assert config == {"url": "https://127.0.0.1:19443/validate-batch-v1-job"}  # Kueue writes the CA itself
    assert len(got["webhooks"]) == 1 and webhook["webhooks"][0]["clientConfig"].get("service")  # the input is kept
    jobset = {**webhook, "metadata": {"name": "jobset-validating-webhook-configuration"}, "webhooks": [{
        "name": "vjobset.kb.io", "clientConfig": {"service": {
            "name": "jobset-webhook-service", "namespace": contract.TRAINER_NAMESPACE, "path": "/validate"}}}]}
    config = controllers.rewrite(jobset)["webhooks"][0]["clientConfig"]
    assert config["url"] == "https://127.0.0.1:29443/validate"
    assert base64.b64decode(config["caBundle"]) == controllers.webhooks.authority.pair.cert_pem
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "x"},
           "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {
               "name": "kueue-webhook-service", "namespace": contract.KUEUE_NAMESPACE, "path": "/convert"}}}}}}
    assert controllers.rewrite(crd)["spec"]["conversion"]["webhook"]["clientConfig"]["url"].endswith(":19443/convert")


def test_fails_for_a_webhook_no_local_controller_serves():
    other = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
             "metadata": {"name": "other"},
             "webhooks": [{"name": "m.example.com", "clientConfig": {"service": {"name": "svc", "namespace": "ns"}}}]}
    with pytest.raises(KeyError, match="no local controller serves Service ns/svc"):
        _controllers().rewrite(other)


def test_json_patch_adds_and_replaces_as_kustomize_does():
    doc = {"metadata": {"name": "a"}, "webhooks": [{"name": "w0"}, {"name": "w1"}]}
    ops = [{"op": "replace", "path": "/metadata/name", "value": "b"},
           {"op": "add", "path": "/webhooks/1/objectSelector", "value": {"matchLabels": {"k": "v"}}}]
    selector = {"matchLabels": {"k": "v"}}
    assert json_patch(doc, ops) == {"metadata": {"name": "b"},
                                    "webhooks": [{"name": "w0"}, {"name": "w1", "objectSelector": selector}]}
    assert doc["metadata"]["name"] == "a"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text().split()
    return stat[2] != "Z"


def test_processes_stop_when_the_block_ends_even_on_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), Processes() as processes:
        started = processes.start("sleeper", ["sleep", "60"], tmp_path / "sleep.log")
        raise RuntimeError("boom")
    assert not _alive(started.pid)


def test_a_process_whose_starter_is_killed_dies_with_it(tmp_path):
    # GIVEN a Python process that starts a child with Processes and is then killed with SIGKILL (no clean-up runs)
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from pathlib import Path
        from efa_stack.rehearsal.processes import Processes
        p = Processes().start("sleeper", ["sleep", "60"], Path({str(tmp_path / "s.log")!r}))
        print(p.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    # THEN the child is gone too (PR_SET_PDEATHSIG), within a few seconds
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


KWOK_CORE_HELD_BACK = {"1.15.1": "v1.14.1"}
"""Karpenter releases whose core module the Go module proxy does not serve, and the core version the kwok provider
stays at meanwhile: aws/karpenter-provider-aws v1.15.1 requires sigs.k8s.io/karpenter v1.15.1, whose zip the proxy
refuses ("This module version is not available"). tools/karpenter-kwok/go.mod says the same."""


def test_karpenter_cores_kwok_provider_is_pinned_with_the_karpenter_release():
    # tools/karpenter-kwok/go.mod requires the core module the pinned aws/karpenter-provider-aws release requires, or,
    # while the proxy does not serve that one, the core held back to (KWOK_CORE_HELD_BACK)
    from efa_stack.planning.karpenter import KARPENTER_VERSION

    go_mod = (Path(__file__).resolve().parents[1] / "tools" / "karpenter-kwok" / "go.mod").read_text()
    required = re.findall(r"^(?:require)?\s*sigs\.k8s\.io/karpenter (v\S+)", go_mod, re.MULTILINE)
    assert required == [KWOK_CORE_HELD_BACK.get(KARPENTER_VERSION, f"v{KARPENTER_VERSION}")], (
        f"tools/karpenter-kwok/go.mod requires {required}, Karpenter is {KARPENTER_VERSION}: require the core version "
        "that release's go.mod requires (see the comment there)")


def test_build_sh_is_shellcheck_clean():
    import shutil

    root = Path(__file__).resolve().parents[1]
    shellcheck = shutil.which("shellcheck") or str(root / ".venv" / "bin" / "shellcheck")
    proc = subprocess.run([shellcheck, str(root / "tools" / "build.sh")], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_build_sh_names_the_binaries_it_knows():
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([str(root / "tools" / "build.sh"), "no-such-binary"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2 and "no binary no-such-binary" in proc.stderr and "kueue" in proc.stderr, proc.stderr
