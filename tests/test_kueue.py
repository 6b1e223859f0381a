"""Kueue: the plan's topologies, flavors and quotas, the controller's configuration, the queued jobs, and offline
validation of every Kueue object against the vendored v0.19.2 CRDs (the real API server: tests/test_apiserver.py)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from efa_stack import contract
from efa_stack.planning.scheduling import network_layers, node_figures
from efa_stack.spec.errors import SpecError
from k8s.dist import dist_files
from k8s.kueue import CONFIG_KEY, CONFIG_MAP, KUEUE_IMAGE, crd_documents
from k8s.scheduling import system_node_selector
from tests.support import KUBECTL_HANDLER_LIMIT, _build, built, plan_of, spec_text

KUEUE_ON = """
scheduling:
  kueue:
    enabled: true
"""
LAYER = contract.NETWORK_LAYER_LABEL_PREFIX


def _kueue(extra: str = "") -> str:
    return KUEUE_ON + "".join(f"    {line}\n" for line in extra.splitlines() if line)


def _flavor(b: Any, name: str) -> dict[str, Any]:
    return b.find("ResourceFlavor", name)


def _quotas(b: Any, flavor: str) -> dict[str, str]:
    cq = b.find("ClusterQueue", contract.KUEUE_QUEUE_NAME)
    (group,) = cq["spec"]["resourceGroups"]
    (entry,) = [f for f in group["flavors"] if f["name"] == flavor]
    return {r["name"]: r["nominalQuota"] for r in entry["resources"]}


def _worker(mpijob: dict[str, Any]) -> dict[str, Any]:
    return mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]


def _launcher(mpijob: dict[str, Any]) -> dict[str, Any]:
    return mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]


# --- the data ------------------------------------------------------------------------------------------


def test_network_layers_are_the_ec2_topology_lists():
    # EC2 "Prerequisites for Amazon EC2 topology": p5/p5en/trn2 return 3 network nodes, p6-b200/p6-b300 4
    assert network_layers("p5.48xlarge") == 3
    assert network_layers("p5en.48xlarge") == 3
    assert network_layers("trn2.48xlarge") == 3
    assert network_layers("p6-b200.48xlarge") == 4
    assert network_layers("p6-b300.48xlarge") == 4
    assert network_layers("m7i.xlarge") == 0


def test_the_data_file_names_its_source_and_only_known_depths():
    from efa_stack.planning.scheduling import TOPOLOGY_FILE

    data = json.loads(TOPOLOGY_FILE.read_text())
    assert "ec2-instance-topology-prerequisites" in data["_source"] and "ml-workload-topology" in data["_source"]
    assert set(data["layers"].values()) == {3, 4}


# --- the plan ------------------------------------------------------------------------------------------


def test_kueue_is_off_by_default():
    plan = plan_of(spec_text())
    assert plan.kueue is None
    b = _build(plan)
    assert not [c for c in b.chart_ids if c.startswith("kueue")]
    job = b.mpijob()
    assert contract.KUEUE_QUEUE_LABEL not in job["metadata"]["labels"]
    assert job["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"


def test_p5_topology_is_three_network_layers_then_the_hostname():
    b = built("tas-p5")
    topology = b.find("Topology")
    assert topology["metadata"]["name"] == "network-3-layers"
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [
        f"{LAYER}1", f"{LAYER}2", f"{LAYER}3", "kubernetes.io/hostname",
    ]


def test_flavor_per_node_group_with_its_label_taints_and_topology():
    b = built("tas-p5")
    p5 = _flavor(b, "p5")
    assert p5["spec"]["nodeLabels"] == {contract.LABEL_NODE_GROUP: "p5", contract.LABEL_ROLE: "gpu"}
    assert p5["spec"]["topologyName"] == "network-3-layers"
    group = next(g for g in b.plan.node_groups if g.name == "p5")
    assert [(t["key"], t["effect"]) for t in p5["spec"]["tolerations"]] == [(t.key, t.effect) for t in group.taints]
    system = _flavor(b, "system")
    assert system["spec"]["nodeLabels"] == {contract.LABEL_NODE_GROUP: contract.SYSTEM_NODE_GROUP,
                                            contract.LABEL_ROLE: "system"}
    assert "topologyName" not in system["spec"]
    # the launcher's node selector contradicts every flavor but the system one, the workers' every flavor but theirs
    launcher = _launcher(b.mpijob())["spec"]["nodeSelector"]
    worker = _worker(b.mpijob())["spec"]["nodeSelector"]
    for flavor, selector in ((p5, launcher), (system, worker)):
        assert any(flavor["spec"]["nodeLabels"].get(k, v) != v for k, v in selector.items()), flavor["metadata"]


def test_quotas_are_max_size_times_what_one_node_gives():
    b = built("tas-p5")
    group = next(g for g in b.plan.node_groups if g.name == "p5")
    quotas = _quotas(b, "p5")
    n = group.max_size
    assert quotas[contract.GPU_RESOURCE] == str(group.instance.gpus * n) == "16"
    assert quotas[contract.EFA_RESOURCE] == str(group.efa_devices_per_node * n) == "64"
    assert quotas[contract.HUGEPAGES_2MI_RESOURCE] == f"{group.hugepages_2mi_mib * n}Mi"
    assert quotas["cpu"] == str(group.guaranteed_cpus * n)
    assert quotas["memory"] == f"{node_figures(group)['memory'] * n}Mi"
    # the NCCL workers fit the quota: Kueue would never admit a job that asks for more
    worker = _worker(b.mpijob())["spec"]["containers"][0]["resources"]["requests"]
    workers = b.mpijob()["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert int(worker[contract.GPU_RESOURCE]) * workers <= int(quotas[contract.GPU_RESOURCE])
    assert int(worker["cpu"]) * workers <= int(quotas["cpu"])


def test_every_flavor_lists_the_covered_resources_in_order():
    b = built("tas-p5")
    (group,) = b.find("ClusterQueue")["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", contract.GPU_RESOURCE, contract.EFA_RESOURCE,
                                         contract.HUGEPAGES_2MI_RESOURCE]
    for flavor in group["flavors"]:
        assert [r["name"] for r in flavor["resources"]] == group["coveredResources"], flavor["name"]
    assert _quotas(b, "system")[contract.GPU_RESOURCE] == "0"


def test_local_queues_in_every_namespace_of_a_job():
    b = built("tas-p5")
    queues = [o for _, o in b.objects() if o["kind"] == "LocalQueue"]
    namespaces = {b.plan.nccl_job.namespace, *(j.namespace for j in b.plan.training_jobs)}
    assert {q["metadata"]["namespace"] for q in queues} == namespaces
    assert {q["spec"]["clusterQueue"] for q in queues} == {contract.KUEUE_QUEUE_NAME}


def test_four_layer_types_get_their_own_topology():
    extra = """  - name: b200
    instanceType: p6-b200.48xlarge
    minSize: 1
    desiredCapacity: 1
    maxSize: 3
    availabilityZones: ["us-west-2a"]
    privateNetworking: true
    efaEnabled: true
""" + KUEUE_ON
    b = _build(plan_of(spec_text(extra=extra)))
    four = b.find("Topology", "network-4-layers")
    assert [lv["nodeLabel"] for lv in four["spec"]["levels"]][-2:] == [f"{LAYER}4", "kubernetes.io/hostname"]
    assert _flavor(b, "b200")["spec"]["topologyName"] == "network-4-layers"
    assert _flavor(b, "gpu")["spec"]["topologyName"] == "network-3-layers"
    assert _quotas(b, "b200")[contract.GPU_RESOURCE] == "24"  # 8 B200 GPUs x maxSize 3


def test_bottom_level_is_the_lowest_network_layer_of_the_instance_type():
    plan = plan_of(spec_text("p6-b200.48xlarge", extra=KUEUE_ON))
    assert plan.kueue.binding("gpu").pod_annotations == {contract.KUEUE_PREFERRED_TOPOLOGY: f"{LAYER}4"}
    plan = plan_of(spec_text(extra=_kueue("topology: required\nlevel: layer-2")))
    assert plan.kueue.binding("gpu").pod_annotations == {contract.KUEUE_REQUIRED_TOPOLOGY: f"{LAYER}2"}
    plan = plan_of(spec_text(extra=_kueue("topology: none")))
    assert plan.kueue.binding("gpu").pod_annotations == {}
    assert plan.kueue.binding("gpu").job_labels == {contract.KUEUE_QUEUE_LABEL: contract.KUEUE_QUEUE_NAME}


def test_a_group_without_topology_labels_gets_a_warning_and_no_topology():
    plan = plan_of(spec_text("g5.48xlarge", extra=KUEUE_ON))
    assert any("gpu" in w and "topology-aware scheduling cannot place" in w for w in plan.warnings), plan.warnings
    b = _build(plan)
    assert "topologyName" not in _flavor(b, "gpu")["spec"]
    assert not [o for _, o in b.objects() if o["kind"] == "Topology"]
    assert "annotations" not in _worker(b.mpijob())["metadata"]


def test_a_level_the_instance_type_lacks_is_refused():
    with pytest.raises(SpecError) as err:
        plan_of(spec_text(extra=_kueue("level: layer-4")))
    (problem,) = err.value.problems
    assert problem.field == "scheduling.kueue.level" and problem.value == "layer-4"
    assert "layer-3" in problem.fix


def test_a_backoff_base_over_its_maximum_is_refused():
    with pytest.raises(SpecError) as err:
        plan_of(spec_text(extra=_kueue("waitForPodsReady:\n  backoffBaseSeconds: 600\n  backoffMaxSeconds: 60")))
    assert [p.field for p in err.value.problems] == ["scheduling.kueue.waitForPodsReady.backoffBaseSeconds"]


# --- the jobs ------------------------------------------------------------------------------------------


def test_nccl_mpijob_is_queued_with_topology_on_its_workers_only():
    job = built("tas-p5").mpijob()
    # created suspended: its queue waits in an annotation until it is started, or Kueue would admit and start it
    # at deploy (kueue@v0.19.2 jobframework/reconciler.go unsuspends an admitted job)
    assert contract.KUEUE_QUEUE_LABEL not in job["metadata"]["labels"]
    assert job["metadata"]["annotations"][contract.ANNOTATION_QUEUE] == contract.KUEUE_QUEUE_NAME
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    assert job["metadata"]["annotations"][contract.ANNOTATION_START] == (
        f"kubectl label mpijob {name} -n {ns} {contract.KUEUE_QUEUE_LABEL}={contract.KUEUE_QUEUE_NAME}")
    assert _worker(job)["metadata"]["annotations"] == {contract.KUEUE_PREFERRED_TOPOLOGY: f"{LAYER}3"}
    assert "annotations" not in _launcher(job).get("metadata", {})


def test_queued_mpijob_avoids_the_operator_traps_and_keeps_the_launcher_gate():
    job = built("tas-p5").mpijob()
    # WaitForWorkersReady is evaluated while Kueue keeps the job suspended (kubeflow/mpi-operator #615)
    assert job["spec"]["launcherCreationPolicy"] == "AtStartup"
    # no second gang scheduler beside Kueue
    assert "schedulingPolicy" not in job["spec"]["runPolicy"]
    assert job["spec"]["runPolicy"]["suspend"] is True
    command = _launcher(job)["spec"]["containers"][0]["command"]
    assert "wait-for-workers" in command and "getent hosts" in command[2]


def test_training_job_is_queued_and_its_runtime_carries_the_topology():
    b = built("tas-p5")
    trainjob = b.find("TrainJob")
    assert trainjob["spec"]["suspend"] is True and contract.KUEUE_QUEUE_LABEL not in trainjob["metadata"]["labels"]
    assert trainjob["metadata"]["annotations"][contract.ANNOTATION_QUEUE] == contract.KUEUE_QUEUE_NAME
    assert trainjob["metadata"]["annotations"][contract.ANNOTATION_START].startswith("kubectl label trainjob ")
    runtime = b.find("ClusterTrainingRuntime")
    (replicated,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    pod = replicated["template"]["spec"]["template"]
    assert pod["metadata"]["annotations"] == {contract.KUEUE_PREFERRED_TOPOLOGY: f"{LAYER}3"}


def test_pytorchjob_pods_carry_the_topology():
    extra = _kueue("topology: required") + """
trainingJobs:
  - name: ddp
    nodeGroup: gpu
    image: example.com/train:1
    kind: pytorchjob
    command: ["python", "train.py"]
"""
    b = _build(plan_of(spec_text(nodes=3, extra=extra)))
    job = b.find("PyTorchJob")
    assert job["metadata"]["annotations"][contract.ANNOTATION_QUEUE] == contract.KUEUE_QUEUE_NAME
    for replica in ("Master", "Worker"):
        meta = job["spec"]["pytorchReplicaSpecs"][replica]["template"]["metadata"]
        assert meta["annotations"] == {contract.KUEUE_REQUIRED_TOPOLOGY: f"{LAYER}3"}, replica


# --- the controller ------------------------------------------------------------------------------------


def _config(b: Any) -> dict[str, Any]:
    cm = b.find("ConfigMap", CONFIG_MAP)
    config: dict[str, Any] = yaml.safe_load(cm["data"][CONFIG_KEY])
    return config


def test_wait_for_pods_ready_comes_from_the_spec():
    b = _build(plan_of(spec_text(extra=_kueue(
        "waitForPodsReady:\n  timeoutSeconds: 900\n  backoffLimitCount: 3\n  backoffBaseSeconds: 30\n  backoffMaxSeconds: 600"
    ))))
    config = _config(b)
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["waitForPodsReady"] == {
        "timeout": "900s", "blockAdmission": False,
        "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 30, "backoffMaxSeconds": 600,
                              "backoffLimitCount": 3},
    }
    # upstream's settings are kept
    assert config["webhook"] == {"port": 9443} and config["leaderElection"]["leaderElect"] is True


def test_endless_requeuing_leaves_the_limit_out():
    config = _config(_build(plan_of(spec_text(extra=_kueue("waitForPodsReady:\n  backoffLimitCount: null")))))
    assert "backoffLimitCount" not in config["waitForPodsReady"]["requeuingStrategy"]


def test_integrations_are_the_jobs_efa_stack_renders():
    assert _config(built("tas-p5"))["integrations"] == {"frameworks": [
        "batch/job", "kubeflow.org/mpijob", "kubeflow.org/pytorchjob", "trainer.kubeflow.org/trainjob",
    ]}


def test_webhooks_only_for_kueue_kinds_and_enabled_integrations():
    b = built("tas-p5")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        hooks = b.find(kind)["webhooks"]
        resources = {(g, r) for w in hooks for rule in w["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
        assert ("kubeflow.org", "mpijobs") in resources and ("batch", "jobs") in resources
        assert ("", "pods") not in resources and ("apps", "deployments") not in resources
        assert all(w["clientConfig"]["service"]["name"] == "kueue-webhook-service" for w in hooks)


def test_controller_runs_the_pinned_image_on_the_system_nodes():
    b = built("tas-p5")
    deployment = b.find("Deployment", contract.KUEUE_CONTROLLER)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == system_node_selector()
    assert pod["containers"][0]["image"] == KUEUE_IMAGE == "registry.k8s.io/kueue/kueue:v0.19.2"
    assert not [o for _, o in b.objects() if o["kind"] == "APIService"]


def test_apply_script_waits_for_the_controller_before_the_queues():
    files = dist_files(built("tas-p5").plan)
    lines = files["apply.sh"].splitlines()
    rollout = lines.index(f"kubectl rollout status deployment/{contract.KUEUE_CONTROLLER} -n "
                          f"{contract.KUEUE_NAMESPACE} --timeout=300s")
    queues = next(i for i, line in enumerate(lines) if "kueue-queues.yaml" in line)
    assert rollout < queues
    assert "wait_established workloads.kueue.x-k8s.io" not in lines  # no rendered object is a Workload
    assert "24-kueue-crd.yaml" in files and "25-kueue-workload-crd.yaml" in files


# --- offline validation --------------------------------------------------------------------------------


def _schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for doc in crd_documents():
        for version in doc["spec"]["versions"]:
            out[(f"{doc['spec']['group']}/{version['name']}", doc["spec"]["names"]["kind"])] = (
                version["schema"]["openAPIV3Schema"]
            )
    return out


def test_every_kueue_object_validates_against_its_crd_and_the_rest_against_kubernetes():
    b = built("tas-p5")
    schemas = _schemas()
    seen = set()
    for chart, obj in b.objects():
        if not chart.startswith("kueue"):
            continue
        key = (obj["apiVersion"], obj["kind"])
        if key in schemas:
            jsonschema.validate(obj, schemas[key])
            seen.add(obj["kind"])
        else:
            kubernetes_validate.validate(obj, b.plan.kubernetes_version, strict=True)
    assert seen == {"Topology", "ResourceFlavor", "ClusterQueue", "LocalQueue"}


@pytest.mark.parametrize(("kind", "fault"), [
    ("Topology", lambda o: o["spec"]["levels"].append({"nodeLabel": "not a label!"})),
    ("ResourceFlavor", lambda o: o["spec"].update(topologyName=7)),
    ("ClusterQueue", lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(nominalQuota=[1])),
    ("LocalQueue", lambda o: o["spec"].pop("clusterQueue") and o["spec"].update(clusterQueue="Bad_Name")),
])
def test_fails_a_broken_kueue_object_against_its_crd(kind, fault):
    b = built("tas-p5")
    obj = json.loads(json.dumps(next(o for _, o in b.objects() if o["kind"] == kind)))
    fault(obj)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(obj, _schemas()[(obj["apiVersion"], kind)])


def test_every_kueue_chart_fits_the_kubectl_handler_limit():
    b = built("tas-p5")
    for chart in ("kueue-crd", "kueue-workload-crd", "kueue", "kueue-queues"):
        size = len(json.dumps(b.manifests[chart]))
        assert size < KUBECTL_HANDLER_LIMIT, f"{chart}: {size} bytes"


def test_the_vendored_crds_are_the_pinned_release():
    names = sorted(d["metadata"]["name"] for d in crd_documents())
    assert names == sorted(f"{p}.kueue.x-k8s.io" for p in (
        "admissionchecks", "clusterqueues", "cohorts", "localqueues", "multikueueclusters", "multikueueconfigs",
        "provisioningrequestconfigs", "resourceflavors", "topologies", "workloadpriorityclasses", "workloads",
    ))
    for d in crd_documents():
        assert [v["name"] for v in d["spec"]["versions"] if v.get("storage")] == [contract.KUEUE_VERSION]
        assert '"description"' not in json.dumps(d["spec"]["versions"][-1]["schema"]).replace('"description": {', "")


def test_hostname_level_names_the_lowest_topology_level():
    plan = plan_of(spec_text(extra=_kueue("topology: required\nlevel: hostname")))
    assert plan.kueue.binding("gpu").pod_annotations == {contract.KUEUE_REQUIRED_TOPOLOGY: "kubernetes.io/hostname"}
    (topology,) = plan.kueue.topologies
    assert topology.levels[-1] == "kubernetes.io/hostname"


def test_the_webhook_configurations_the_stack_waits_for_are_the_release_builds():
    from k8s.kueue import (
        MUTATING_WEBHOOK_CONFIGURATION,
        VALIDATING_WEBHOOK_CONFIGURATION,
        upstream_controller_documents,
    )

    names = {(d["kind"], d["metadata"]["name"]) for d in upstream_controller_documents()}
    assert ("ValidatingWebhookConfiguration", VALIDATING_WEBHOOK_CONFIGURATION) in names
    assert ("MutatingWebhookConfiguration", MUTATING_WEBHOOK_CONFIGURATION) in names


def test_cdk_deploy_applies_queues_and_queued_jobs_once_kueue_admits_them():
    """Kueue's webhooks fail closed: the queues and the queued NCCL job wait for the controller's available replica,
    after the system nodes; the queues also for their kinds' CRDs."""
    from efa_stack.tools.deploy_model import dependencies, transitive_dependencies
    from tests.support import CLUSTERS, synth_spec

    s = synth_spec(str(CLUSTERS / "tas-p5.yaml"))
    t = s.template("cluster")
    graph = dependencies(t)

    def needs(start: str) -> set[str]:
        return transitive_dependencies(graph, start)

    lid = {k: k for k in t["Resources"]}
    queues = next(k for k in lid if k.startswith("Clusterkueuequeues"))
    nccl = next(k for k in lid if k.startswith("Clusternccltests"))
    # an available replica serves both webhooks (its readiness waits for the CA in both configurations)
    waits = {k for k in lid if k.startswith("KueueAvailable")}
    crds = {k for k in lid if k.startswith("KueueCrdEstablished")}
    system = next(k for k, v in t["Resources"].items() if v["Type"] == "AWS::EKS::Nodegroup" and "system" in k)
    assert len(waits) == 1 and len(crds) == 5
    assert waits | crds | {system} <= needs(queues)
    assert waits <= needs(nccl)


def test_a_job_created_running_is_queued_at_once():
    # suspend: false asks for the job to run at deploy: with Kueue that means the queue label from the start
    plan = plan_of(spec_text(extra=_kueue("topology: preferred") + "ncclTest: {suspend: false}\n"))
    job = _build(plan).mpijob()
    assert job["metadata"]["labels"][contract.KUEUE_QUEUE_LABEL] == contract.KUEUE_QUEUE_NAME
    assert contract.ANNOTATION_QUEUE not in job["metadata"].get("annotations", {})
    assert "suspend" in job["metadata"]["annotations"][contract.ANNOTATION_START]
