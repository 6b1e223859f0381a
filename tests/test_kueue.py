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
from k8s.kueue import (
    CONFIG_KEY,
    CONFIG_MAP,
    CONTROLLER_FILE,
    KUEUE_IMAGE,
    KueueController,
    KueueQueues,
    crd_documents,
    upstream_controller_documents,
)
from k8s.nccl_tests import NcclTestsJob, NcclTestsJobProps
from k8s.scheduling import system_node_selector
from k8s.training_jobs import TrainingJob, TrainingJobProps
from k8s.vendored import read_header
from tests.golden_patch import apply_patch, patch_of, patch_text
from tests.support import (
    GOLDEN,
    KUBECTL_HANDLER_LIMIT,
    Built,
    _build,
    built,
    chart_alone,
    crd_schemas,
    crd_validate,
    golden_check,
    plan_of,
    problems_of,
    schema_validate,
    spec_text,
)

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
    # the flavor tolerates as the workers do (Exists per key and effect), so Kueue adds nothing to their pods
    assert p5["spec"]["tolerations"] == _worker(b.mpijob())["spec"]["tolerations"]
    assert all(t["operator"] == "Exists" and "value" not in t for t in p5["spec"]["tolerations"])
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
    b = _queues(plan_of(spec_text(extra=extra)))
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
    b = _queues(plan)
    assert "topologyName" not in _flavor(b, "gpu")["spec"]
    assert not [o for _, o in b.objects() if o["kind"] == "Topology"]
    assert "annotations" not in _worker(_nccl_job(plan).mpijob())["metadata"]


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


def _pytorchjob(kueue: str, nnodes: int | None = None) -> dict[str, Any]:
    extra = _kueue(kueue) + """
trainingJobs:
  - name: ddp
    nodeGroup: gpu
    image: example.com/train:1
    kind: pytorchjob
    command: ["python", "train.py"]
""" + (f"    nnodes: {nnodes}\n" if nnodes else "")
    (plan_job,) = plan_of(spec_text(nodes=3, extra=extra)).training_jobs
    props = TrainingJobProps(job=plan_job, queue=plan_job.queue, do_not_disrupt=plan_job.do_not_disrupt)
    job: dict[str, Any] = chart_alone(None, lambda chart: TrainingJob(chart, "ddp", props)).find("PyTorchJob")
    return job


def _replica_annotations(job: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {role: (r["template"].get("metadata") or {}).get("annotations") or {}
            for role, r in job["spec"]["pytorchReplicaSpecs"].items()}


def test_pytorchjob_master_and_workers_are_one_podset_group():
    # GIVEN a queued PyTorchJob over the group's 3 nodes (Master + 2 Workers: two PodSets)
    from efa_stack.planning.scheduling import PYTORCHJOB_PODSET_GROUP

    job = _pytorchjob("topology: required")
    assert job["metadata"]["annotations"][contract.ANNOTATION_QUEUE] == contract.KUEUE_QUEUE_NAME
    annotations = _replica_annotations(job)
    # THEN both PodSets carry the same topology request and the same group, so Kueue places rank 0 with its workers
    assert set(annotations) == {"Master", "Worker"}
    for role, got in annotations.items():
        assert got == {contract.KUEUE_REQUIRED_TOPOLOGY: f"{LAYER}3",
                       contract.KUEUE_PODSET_GROUP: PYTORCHJOB_PODSET_GROUP}, role
    # AND the group meets Kueue's rules (jobframework/tas_validation.go): two PodSets, one of them a single pod,
    # one topology annotation each and the same one, a name that is not a number
    replicas = {role: r["replicas"] for role, r in job["spec"]["pytorchReplicaSpecs"].items()}
    assert sorted(replicas.values()) == [1, 2]
    assert not PYTORCHJOB_PODSET_GROUP.isdigit()
    topology_keys = {contract.KUEUE_REQUIRED_TOPOLOGY, contract.KUEUE_PREFERRED_TOPOLOGY}
    assert [len(topology_keys & set(a)) for a in annotations.values()] == [1, 1]


def test_pytorchjob_group_follows_the_preferred_topology():
    annotations = _replica_annotations(_pytorchjob("topology: preferred"))
    assert {a[contract.KUEUE_PREFERRED_TOPOLOGY] for a in annotations.values()} == {f"{LAYER}3"}
    assert len({a[contract.KUEUE_PODSET_GROUP] for a in annotations.values()}) == 1


def test_no_group_without_a_topology_or_a_second_podset():
    # Kueue refuses a group name without a topology annotation; a one-node job has no Worker PodSet to group with
    assert _replica_annotations(_pytorchjob("topology: none")) == {"Master": {}, "Worker": {}}
    single = _replica_annotations(_pytorchjob("topology: required", nnodes=1))
    assert single == {"Master": {contract.KUEUE_REQUIRED_TOPOLOGY: f"{LAYER}3"}}


def test_mpijob_and_trainjob_pods_are_not_grouped():
    # the launcher runs on the system flavor, unconstrained; a TrainJob on an efa-stack runtime is one PodSet
    b = built("tas-p5")
    assert contract.KUEUE_PODSET_GROUP not in _worker(b.mpijob())["metadata"]["annotations"]
    assert "annotations" not in _launcher(b.mpijob()).get("metadata", {})
    (replicated,) = b.find("ClusterTrainingRuntime")["spec"]["template"]["spec"]["replicatedJobs"]
    assert contract.KUEUE_PODSET_GROUP not in replicated["template"]["spec"]["template"]["metadata"]["annotations"]


# --- the controller ------------------------------------------------------------------------------------


def _queues(plan: Any) -> Built:
    """The queues chart of ``plan`` alone (k8s/kueue.py KueueQueues)."""
    return chart_alone(plan, lambda chart: KueueQueues(chart, "KueueQueues", plan.kueue))


def _controller(plan: Any) -> Built:
    """The controller chart of ``plan`` alone (k8s/kueue.py KueueController), with its rollout."""
    from k8s.components import KUEUE

    return chart_alone(plan, lambda chart: KueueController(chart, "Kueue", plan.kueue), chart_id=KUEUE)


def _nccl_job(plan: Any) -> Built:
    """The NCCL-tests MPIJob of ``plan`` alone, with what the charts pass it from the plan (k8s/charts.py)."""
    job = plan.nccl_job
    return chart_alone(plan, lambda chart: NcclTestsJob(chart, "NcclTests", NcclTestsJobProps(
        job=job, queue=job.queue, worker_wait_seconds=job.worker_wait_seconds, do_not_disrupt=job.do_not_disrupt)))


def _config(b: Any) -> dict[str, Any]:
    cm = b.find("ConfigMap", CONFIG_MAP)
    config: dict[str, Any] = yaml.safe_load(cm["data"][CONFIG_KEY])
    return config


KARPENTER_POOL = """
karpenterNodePools:
  - name: elastic
    instanceType: p5.48xlarge
    maxNodes: 2
    availabilityZone: us-west-2a
ncclTest:
  nodeGroup: elastic
"""


def test_the_default_timeout_is_kueues_own_for_node_groups_that_exist():
    # nodes of a managed node group are there at admission: the 20 GB pull fits Kueue's own 30 minutes
    from efa_stack.planning.scheduling import KUEUE_DEFAULT_TIMEOUT_SECONDS, PULL_SECONDS_PER_GB

    plan = plan_of(spec_text(extra=KUEUE_ON))
    assert plan.kueue.wait.derived
    assert plan.kueue.wait.timeout_seconds == KUEUE_DEFAULT_TIMEOUT_SECONDS == 30 * 60
    assert 20 * PULL_SECONDS_PER_GB < KUEUE_DEFAULT_TIMEOUT_SECONDS
    assert _config(_controller(plan))["waitForPodsReady"]["timeout"] == f"{KUEUE_DEFAULT_TIMEOUT_SECONDS}s"


def test_a_large_image_lengthens_the_default_timeout():
    from efa_stack.planning.scheduling import PULL_SECONDS_PER_GB

    plan = plan_of(spec_text(extra=_kueue("waitForPodsReady:\n  imageSizeGB: 100")))
    assert plan.kueue.wait.timeout_seconds == 100 * PULL_SECONDS_PER_GB


def test_a_karpenter_pool_adds_registration_and_node_start_to_the_default_timeout():
    from efa_stack.planning.scheduling import (
        KARPENTER_REGISTRATION_SECONDS,
        KUEUE_DEFAULT_TIMEOUT_SECONDS,
        NODE_START_SECONDS,
        PULL_SECONDS_PER_GB,
    )

    kueue = _kueue("waitForPodsReady:\n  imageSizeGB: 40")
    pool = plan_of(spec_text(extra=kueue + KARPENTER_POOL))
    static = plan_of(spec_text(extra=kueue))
    want = KARPENTER_REGISTRATION_SECONDS + NODE_START_SECONDS + 40 * PULL_SECONDS_PER_GB
    assert pool.kueue.wait.timeout_seconds == want > KUEUE_DEFAULT_TIMEOUT_SECONDS
    assert static.kueue.wait.timeout_seconds == KUEUE_DEFAULT_TIMEOUT_SECONDS < want
    # the shipped pool spec leaves the timeout to the plan, and gets no less than a node Karpenter waits for
    shipped = built("karpenter-p5").plan.kueue.wait
    assert shipped.derived and shipped.timeout_seconds >= KARPENTER_REGISTRATION_SECONDS + NODE_START_SECONDS


def test_a_timeout_shorter_than_a_pool_node_needs_is_refused():
    with pytest.raises(SpecError) as err:
        plan_of(spec_text(extra=_kueue("waitForPodsReady:\n  timeoutSeconds: 1200") + KARPENTER_POOL))
    (problem,) = err.value.problems
    assert problem.field == "scheduling.kueue.waitForPodsReady.timeoutSeconds" and problem.value == 1200
    assert "elastic" in problem.message and "register" in problem.message
    need = int(problem.fix.split("raise timeoutSeconds to ")[1].split()[0])
    assert need > 1200 and "leave it out" in problem.fix
    # the figure it names is accepted
    plan = plan_of(spec_text(extra=_kueue(f"waitForPodsReady:\n  timeoutSeconds: {need}") + KARPENTER_POOL))
    assert plan.kueue.wait.timeout_seconds == need and not plan.kueue.wait.derived


def test_a_timeout_shorter_than_the_image_pull_is_refused_on_a_node_group():
    with pytest.raises(SpecError) as err:
        plan_of(spec_text(extra=_kueue("waitForPodsReady:\n  timeoutSeconds: 600\n  imageSizeGB: 30")))
    (problem,) = err.value.problems
    assert problem.field == "scheduling.kueue.waitForPodsReady.timeoutSeconds"
    assert "node group gpu" in problem.message and "30 GB" in problem.message


def test_wait_for_pods_ready_comes_from_the_spec():
    b = _controller(plan_of(spec_text(extra=_kueue(
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
    config = _config(_controller(plan_of(spec_text(extra=_kueue("waitForPodsReady:\n  backoffLimitCount: null")))))
    assert "backoffLimitCount" not in config["waitForPodsReady"]["requeuingStrategy"]


def test_integrations_are_those_whose_crds_the_plan_installs():
    # tas-p5 runs a TrainJob (Kubeflow Trainer installed), no PyTorchJob (no Training Operator v1)
    assert _config(built("tas-p5"))["integrations"] == {"frameworks": [
        "batch/job", "kubeflow.org/mpijob", "trainer.kubeflow.org/trainjob",
    ]}
    # karpenter-p5 runs the NCCL test only: no integration whose CRD Kueue would wait for, or exit without
    b = built("karpenter-p5")
    assert _config(b)["integrations"] == {"frameworks": ["batch/job", "kubeflow.org/mpijob"]}
    resources = {(g, r) for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
                 for w in b.find(kind)["webhooks"] for rule in w["rules"] for g in rule["apiGroups"]
                 for r in rule["resources"]}
    assert not {g for g, _ in resources} & {contract.TRAINER_GROUP} and ("kubeflow.org", "pytorchjobs") not in resources


def test_topology_none_renders_no_topology_so_every_flavor_admits_the_workers():
    # GIVEN topology: none ("quota only") on a group whose nodes carry network layers
    plan = plan_of(spec_text(extra=_kueue("topology: none")))
    b = _queues(plan)
    # THEN no flavor names a topology and no Topology is rendered: Kueue refuses a flavor with topologyName to a
    # PodSet that asks for none, and the workers ask for none
    assert plan.kueue.topologies == () and all(f.topology is None for f in plan.kueue.flavors)
    assert not [o for _, o in b.objects() if o["kind"] == "Topology"]
    assert all("topologyName" not in o["spec"] for _, o in b.objects() if o["kind"] == "ResourceFlavor")
    assert plan.kueue.binding("gpu").pod_annotations == {}


def test_fails_topology_required_at_hostname_for_jobs_of_several_workers():
    # GIVEN topology: required at level hostname and an NCCL test of 2 whole-node workers
    problems = problems_of(spec_text(extra=_kueue("topology: required\nlevel: hostname")))
    # THEN it is refused: no node fits two workers, so Kueue would never admit the job
    (p,) = [p for p in problems if p.field == "scheduling.kueue.level"]
    assert p.value == "hostname" and "ncclTest runs 2 whole-node workers on node group gpu" in p.message
    assert "level: bottom" in p.fix and "topology: preferred" in p.fix
    # AND the advice holds: either fix plans
    plan_of(spec_text(extra=_kueue("topology: required\nlevel: bottom")))
    plan_of(spec_text(extra=_kueue("topology: preferred\nlevel: hostname")))


def test_a_changed_configuration_rolls_kueue_and_runs_its_wait_again():
    # GIVEN two plans that differ only in waitForPodsReady's timeout
    from k8s.kueue import CONFIG_KEY, config_sha256

    one = _controller(plan_of(spec_text(extra=_kueue("waitForPodsReady:\n  timeoutSeconds: 3600"))))
    two = _controller(plan_of(spec_text(extra=_kueue("waitForPodsReady:\n  timeoutSeconds: 3700"))))
    deployments = [b.find("Deployment", contract.KUEUE_CONTROLLER)["spec"]["template"] for b in (one, two)]
    configs = [b.find("ConfigMap", CONFIG_MAP)["data"][CONFIG_KEY] for b in (one, two)]
    # THEN each pod template carries its configuration's digest, so the changed one rolls the pods (Kueue reads its
    # configuration once, at start)
    for template, config in zip(deployments, configs):
        assert template["metadata"]["annotations"][contract.ANNOTATION_CONFIG_SHA256] == config_sha256(config)
    assert deployments[0] != deployments[1]
    # AND the rollout's wait for Kueue has a new revision, so cdk deploy waits for the new pods again
    from k8s.components import KUEUE
    from k8s.rollout import available_id

    revisions = [b.rollout[available_id(KUEUE)].revision for b in (one, two)]
    assert all(revisions) and revisions[0] != revisions[1]


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


PATCH_GOLDEN = GOLDEN / "kueue" / "controller.patch.yaml"


def test_the_controller_chart_is_the_pinned_build_with_efa_stacks_changes():
    """Chart kueue is k8s/crds/kueue/controller.yaml (the release build, by digest) with the changes of
    :func:`k8s.kueue.controller_documents`; its golden holds those changes, not upstream's objects again."""
    b = built("tas-p5")
    upstream = upstream_controller_documents()
    header = read_header(CONTROLLER_FILE.read_text())
    patch = patch_of(upstream, b.manifests["kueue"])
    golden_check(PATCH_GOLDEN, patch_text(CONTROLLER_FILE, header.upstream, f"Chart kueue of cluster {b.plan.name}",
                                          patch))
    # re-derived from upstream's objects and the golden alone, the chart is what efa-stack renders
    assert apply_patch(upstream, yaml.safe_load(PATCH_GOLDEN.read_text())) == b.manifests["kueue"]
    assert patch["removed"] == ["APIService v1beta1.visibility.kueue.x-k8s.io",
                                "APIService v1beta2.visibility.kueue.x-k8s.io"]


def test_the_controller_chart_differs_between_specs_only_in_the_wait_and_the_integrations():
    # the spec's timeout (tas-p5), the plan's for a Karpenter pool (karpenter-p5)
    import dataclasses

    from k8s.kueue import controller_documents

    tas, pool = built("tas-p5"), built("karpenter-p5")
    assert _config(tas)["waitForPodsReady"]["timeout"] == "1200s"
    assert _config(pool)["waitForPodsReady"]["timeout"] == f"{pool.plan.kueue.wait.timeout_seconds}s" == "1800s"
    assert pool.plan.kueue.wait.derived and not tas.plan.kueue.wait.derived
    # and the TrainJob integration tas-p5's Trainer brings; nothing else of the controller's objects differs
    assert set(tas.plan.kueue.integrations) - set(pool.plan.kueue.integrations) == {"trainer.kubeflow.org/trainjob"}
    swapped = dataclasses.replace(tas.plan.kueue, wait=pool.plan.kueue.wait, integrations=pool.plan.kueue.integrations)
    assert controller_documents(swapped) == controller_documents(pool.plan.kueue)
    assert controller_documents(tas.plan.kueue) != controller_documents(pool.plan.kueue)


def test_apply_script_waits_for_the_controller_before_the_queues():
    files = dist_files(built("tas-p5").plan)
    lines = files["apply.sh"].splitlines()
    rollout = lines.index(f"kubectl rollout status deployment/{contract.KUEUE_CONTROLLER} -n "
                          f"{contract.KUEUE_NAMESPACE} --timeout=300s")
    queues = next(i for i, line in enumerate(lines) if "kueue-queues.yaml" in line)
    assert rollout < queues
    # no rendered object is a Workload, but Kueue reconciles them: its availability follows their CRD
    assert lines.index("wait_established workloads.kueue.x-k8s.io") < rollout
    assert "24-kueue-crd.yaml" in files and "25-kueue-workload-crd.yaml" in files


# --- offline validation --------------------------------------------------------------------------------


def test_every_kueue_object_validates_against_its_crd_and_the_rest_against_kubernetes():
    b = built("tas-p5")
    schemas = crd_schemas()
    seen = set()
    for chart, obj in b.objects():
        if not chart.startswith("kueue"):
            continue
        key = (obj["apiVersion"], obj["kind"])
        if key in schemas:
            schema_validate(obj, schemas[key])
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
        crd_validate(obj)


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
    plan = plan_of(spec_text(extra=_kueue("topology: preferred\nlevel: hostname")))
    assert plan.kueue.binding("gpu").pod_annotations == {contract.KUEUE_PREFERRED_TOPOLOGY: "kubernetes.io/hostname"}
    (topology,) = plan.kueue.topologies
    assert topology.levels[-1] == "kubernetes.io/hostname"


def test_the_webhook_configurations_kueues_readiness_covers_are_the_release_builds():
    # Kueue reports ready only after its rotator has filled these two: the stack's replica wait relies on it
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
    job = _nccl_job(plan).mpijob()
    assert job["metadata"]["labels"][contract.KUEUE_QUEUE_LABEL] == contract.KUEUE_QUEUE_NAME
    assert contract.ANNOTATION_QUEUE not in job["metadata"].get("annotations", {})
    assert "suspend" in job["metadata"]["annotations"][contract.ANNOTATION_START]
