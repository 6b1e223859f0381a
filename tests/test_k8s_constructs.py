"""Construct tests for k8s/: each construct on its own (GIVEN props, WHEN synthesized, THEN manifest)."""

from __future__ import annotations

import pytest
from cdk8s import Testing as K8sTesting

from k8s.charts import (
    CHART_ORDER,
    EFA_DEVICE_PLUGIN,
    MPI_OPERATOR,
    MPI_OPERATOR_CRD,
    NCCL_TESTS,
    NEURON_DEVICE_PLUGIN,
    NVIDIA_DEVICE_PLUGIN,
    chart_file_name,
)
from k8s.efa_device_plugin import NAME as EFA_NAME
from k8s.efa_device_plugin import NEURON_NAME as EFA_NEURON_NAME
from k8s.efa_device_plugin import EfaDevicePlugin, EfaDevicePluginProps
from k8s.images import (
    EFA_DEVICE_PLUGIN_TAG,
    MPI_OPERATOR_IMAGE,
    NVIDIA_DEVICE_PLUGIN_BROKEN,
    NVIDIA_DEVICE_PLUGIN_IMAGE,
    eks_registry,
)
from k8s.mpi_operator import MpiJobCrd, MpiOperator, MpiOperatorProps
from k8s.mpijob import MpiJob, MpiJobSpec, ReplicaSpec, RunPolicy
from k8s.neuron_device_plugin import NeuronDevicePlugin, NeuronDevicePluginProps
from k8s.nvidia_device_plugin import BrokenNvidiaPluginVersion, NvidiaDevicePlugin, NvidiaDevicePluginProps
from efa_stack.spec.plan import GPU_TAINT_KEY, LABEL_ACCELERATOR, LABEL_EFA, LABEL_ROLE, NEURON_TAINT_KEY, Taint
from tests.test_k8s_support import built, built_text, spec_text

GPU_TAINT = Taint(GPU_TAINT_KEY, "true", "NoSchedule")
NEURON_TAINT = Taint(NEURON_TAINT_KEY, "true", "NoSchedule")


def synth(build) -> list[dict]:
    chart = K8sTesting.chart()
    build(chart)
    return K8sTesting.synth(chart)


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def match_expressions(obj: dict) -> list[dict]:
    terms = pod_spec(obj)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = terms["nodeSelectorTerms"]
    return term["matchExpressions"]


# --- images ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("region", "host"),
    [
        ("us-west-2", "602401143452.dkr.ecr.us-west-2.amazonaws.com"),
        ("eu-west-1", "602401143452.dkr.ecr.eu-west-1.amazonaws.com"),
        ("af-south-1", "877085696533.dkr.ecr.af-south-1.amazonaws.com"),
        ("me-south-1", "558608220178.dkr.ecr.me-south-1.amazonaws.com"),
        ("cn-north-1", "918309763551.dkr.ecr.cn-north-1.amazonaws.com.cn"),
        ("us-gov-west-1", "013241004608.dkr.ecr.us-gov-west-1.amazonaws.com"),
    ],
)
def test_eks_registry_follows_the_region(region, host):
    assert eks_registry(region) == host


def test_images_are_pinned():
    for image in (NVIDIA_DEVICE_PLUGIN_IMAGE, MPI_OPERATOR_IMAGE):
        assert ":" in image and not image.endswith(":latest")
    assert NVIDIA_DEVICE_PLUGIN_IMAGE.rsplit(":", 1)[1] not in NVIDIA_DEVICE_PLUGIN_BROKEN


# --- EFA device plugin ----------------------------------------------------------------------------

def test_efa_device_plugin_runs_on_efa_labelled_nodes_unprivileged():
    # GIVEN a GPU EFA node group's taint WHEN the plugin is synthesized
    (ds,) = synth(lambda c: EfaDevicePlugin(c, "Efa", EfaDevicePluginProps(region="us-west-2", tolerate=(GPU_TAINT,))))
    # THEN it is one DaemonSet in kube-system, placed by the efa-stack label, not an instance list
    assert ds["kind"] == "DaemonSet" and ds["metadata"]["namespace"] == "kube-system"
    assert ds["metadata"]["name"] == EFA_NAME
    exprs = match_expressions(ds)
    assert {"key": LABEL_EFA, "operator": "In", "values": ["true"]} in exprs
    assert {"key": LABEL_ACCELERATOR, "operator": "NotIn", "values": ["neuron"]} in exprs
    assert "node.kubernetes.io/instance-type" not in str(ds)
    spec = pod_spec(ds)
    assert spec["priorityClassName"] == "system-node-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in spec["tolerations"]
    (container,) = spec["containers"]
    assert container["image"] == (
        f"602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:{EFA_DEVICE_PLUGIN_TAG}"
    )
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": False,
    }
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/var/lib/kubelet/device-plugins", "/dev/infiniband"}
    assert {v["hostPath"]["path"] for v in spec["volumes"]} == {"/var/lib/kubelet/device-plugins", "/dev/infiniband"}
    assert spec["automountServiceAccountToken"] is False


def test_efa_device_plugin_neuron_daemonset_only_when_asked():
    # GIVEN Neuron EFA nodes WHEN synthesized THEN a second, privileged DaemonSet serves them
    std, neuron = synth(lambda c: EfaDevicePlugin(c, "Efa", EfaDevicePluginProps(
        region="us-east-2", tolerate=(), neuron_tolerate=(NEURON_TAINT,))))
    assert std["metadata"]["name"] == EFA_NAME and neuron["metadata"]["name"] == EFA_NEURON_NAME
    assert {"key": LABEL_ACCELERATOR, "operator": "In", "values": ["neuron"]} in match_expressions(neuron)
    assert pod_spec(neuron)["containers"][0]["securityContext"]["privileged"] is True
    assert "privileged" not in pod_spec(std)["containers"][0]["securityContext"]
    assert {"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in pod_spec(neuron)["tolerations"]
    assert std["spec"]["selector"] != neuron["spec"]["selector"]


def test_fails_efa_device_plugin_with_nothing_to_render():
    with pytest.raises(ValueError, match="would render nothing"):
        synth(lambda c: EfaDevicePlugin(c, "Efa", EfaDevicePluginProps(region="us-east-2", standard=False)))


def test_efa_device_plugin_image_from_the_cluster_region():
    (ds,) = synth(lambda c: EfaDevicePlugin(c, "Efa", EfaDevicePluginProps(region="ap-southeast-3")))
    assert pod_spec(ds)["containers"][0]["image"].startswith("296578399912.dkr.ecr.ap-southeast-3.amazonaws.com/eks/")


# --- NVIDIA / Neuron device plugins ---------------------------------------------------------------

def test_nvidia_device_plugin_on_nvidia_nodes_without_mofed():
    (ds,) = synth(lambda c: NvidiaDevicePlugin(c, "Nvidia", NvidiaDevicePluginProps(tolerate=(GPU_TAINT,))))
    assert match_expressions(ds) == [{"key": LABEL_ACCELERATOR, "operator": "In", "values": ["nvidia"]}]
    spec = pod_spec(ds)
    (container,) = spec["containers"]
    assert container["image"] == NVIDIA_DEVICE_PLUGIN_IMAGE
    assert {"name": "MOFED_ENABLED", "value": "false"} in container["env"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert [v["hostPath"]["path"] for v in spec["volumes"]] == ["/var/lib/kubelet/device-plugins"]


@pytest.mark.parametrize("tag", NVIDIA_DEVICE_PLUGIN_BROKEN)
def test_fails_nvidia_device_plugin_that_mounts_infiniband(tag):
    with pytest.raises(BrokenNvidiaPluginVersion, match="conflicts with the EFA device plugin"):
        NvidiaDevicePluginProps(image=f"nvcr.io/nvidia/k8s-device-plugin:{tag}")


def test_neuron_device_plugin_with_rbac():
    objs = synth(lambda c: NeuronDevicePlugin(c, "Neuron", NeuronDevicePluginProps(tolerate=(NEURON_TAINT,))))
    kinds = [o["kind"] for o in objs]
    assert kinds == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"]
    ds = objs[-1]
    assert match_expressions(ds) == [{"key": LABEL_ACCELERATOR, "operator": "In", "values": ["neuron"]}]
    assert pod_spec(ds)["serviceAccountName"] == objs[0]["metadata"]["name"]
    binding = objs[2]
    assert binding["roleRef"]["name"] == objs[1]["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "neuron-device-plugin", "namespace": "kube-system"}]


# --- MPI operator ---------------------------------------------------------------------------------

def test_mpi_operator_on_system_nodes():
    objs = synth(lambda c: MpiOperator(c, "Op", MpiOperatorProps()))
    by_kind = {o["kind"]: o for o in objs}
    assert list(by_kind) == ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"]
    assert by_kind["Namespace"]["metadata"]["name"] == "mpi-operator"
    dep = by_kind["Deployment"]
    assert dep["metadata"]["namespace"] == "mpi-operator"
    assert pod_spec(dep)["nodeSelector"] == {LABEL_ROLE: "system"}
    (container,) = pod_spec(dep)["containers"]
    assert container["image"] == MPI_OPERATOR_IMAGE
    assert container["args"] == ["-alsologtostderr", "--lock-namespace", "mpi-operator"]
    rules = {(g, r): set(rule["verbs"]) for rule in by_kind["ClusterRole"]["rules"]
             for g in rule["apiGroups"] for r in rule["resources"]}
    assert {"create", "get", "update"} <= rules[("coordination.k8s.io", "leases")]  # leader election
    assert {"create", "list", "watch", "delete"} <= rules[("", "pods")]
    assert {"create", "list", "watch", "update"} <= rules[("batch", "jobs")]
    assert {"get", "list", "watch", "update"} <= rules[("kubeflow.org", "mpijobs")]
    assert "*" not in str(by_kind["ClusterRole"]["rules"])


def test_mpijob_crd_is_loaded_from_the_shipped_file():
    (crd,) = synth(lambda c: MpiJobCrd(c, "Crd"))
    assert crd["kind"] == "CustomResourceDefinition" and crd["metadata"]["name"] == "mpijobs.kubeflow.org"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v2beta1" and version["subresources"] == {"status": {}}


# --- typed MPIJob ---------------------------------------------------------------------------------

def _template():
    from cdk8s_plus_33 import k8s as kplus

    return kplus.PodTemplateSpec(spec=kplus.PodSpec(containers=[kplus.Container(name="c", image="busybox:1.36")]))


def test_mpijob_renders_typed_fields():
    spec = MpiJobSpec(
        slots_per_worker=4,
        launcher_creation_policy="WaitForWorkersReady",
        run_policy=RunPolicy(clean_pod_policy="Running", suspend=True),
        launcher=ReplicaSpec(replicas=1, restart_policy="OnFailure", template=_template()),
        worker=ReplicaSpec(replicas=3, template=_template()),
    )
    (obj,) = synth(lambda c: MpiJob(c, "Job", name="j", namespace="default", spec=spec))
    assert obj["apiVersion"] == "kubeflow.org/v2beta1" and obj["kind"] == "MPIJob"
    s = obj["spec"]
    assert s["slotsPerWorker"] == 4 and s["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert s["runPolicy"] == {"cleanPodPolicy": "Running", "suspend": True}
    assert s["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    assert s["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"] == [{"name": "c", "image": "busybox:1.36"}]


def test_fails_mpijob_with_two_launchers():
    with pytest.raises(ValueError, match="exactly one launcher"):
        MpiJobSpec(launcher=ReplicaSpec(replicas=2, template=_template()))


def test_fails_mpijob_with_zero_slots():
    with pytest.raises(ValueError, match="slotsPerWorker"):
        MpiJobSpec(slots_per_worker=0, launcher=ReplicaSpec(replicas=1, template=_template()))


# --- charts ---------------------------------------------------------------------------------------

def test_default_cluster_charts_in_apply_order():
    b = built("default")
    assert b.chart_ids == [EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN, MPI_OPERATOR_CRD, MPI_OPERATOR, NCCL_TESTS]
    assert [CHART_ORDER[i] for i in b.chart_ids] == sorted(CHART_ORDER[i] for i in b.chart_ids)
    assert chart_file_name(NCCL_TESTS) == "40-nccl-tests.yaml"


def test_chart_dependencies_point_backwards():
    b = built("default")
    charts = {c.node.id: c for c in b.charts}
    deps = {d.node.id for d in charts[NCCL_TESTS].node.dependencies}
    assert {MPI_OPERATOR_CRD, MPI_OPERATOR, NVIDIA_DEVICE_PLUGIN, EFA_DEVICE_PLUGIN} <= deps
    assert {d.node.id for d in charts[MPI_OPERATOR].node.dependencies} == {MPI_OPERATOR_CRD}
    for chart_id, chart in charts.items():
        for dep in chart.node.dependencies:
            assert CHART_ORDER[dep.node.id] < CHART_ORDER[chart_id]


def test_trainium_cluster_gets_neuron_plugin_and_no_nccl_job():
    b = built("trn2")
    assert b.chart_ids == [EFA_DEVICE_PLUGIN, NEURON_DEVICE_PLUGIN, MPI_OPERATOR_CRD, MPI_OPERATOR]
    # only Neuron EFA nodes: only the (privileged) Neuron DaemonSet of the EFA plugin
    names = [o["metadata"]["name"] for o in b.manifests[EFA_DEVICE_PLUGIN]]
    assert names == [EFA_NEURON_NAME]
    # no NVIDIA node group: no NVIDIA device plugin at all
    assert NVIDIA_DEVICE_PLUGIN not in b.manifests


def test_every_object_is_named_so_no_hash_suffixes():
    for _, obj in built("default").objects():
        assert obj["metadata"]["name"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "efa-stack"


def test_mixed_gpu_and_trainium_cluster():
    extra = """  - name: trn
    instanceType: trn2.48xlarge
    minSize: 1
    desiredCapacity: 1
    maxSize: 1
    availabilityZones: ["us-west-2a"]
    privateNetworking: true
    efaEnabled: true
"""
    b = built_text(spec_text(extra=extra))
    assert b.chart_ids == [
        EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN, NEURON_DEVICE_PLUGIN, MPI_OPERATOR_CRD, MPI_OPERATOR, NCCL_TESTS,
    ]
    std, neuron = b.manifests[EFA_DEVICE_PLUGIN]
    assert [t.get("key") for t in pod_spec(std)["tolerations"]] == ["CriticalAddonsOnly", GPU_TAINT_KEY]
    assert [t.get("key") for t in pod_spec(neuron)["tolerations"]] == ["CriticalAddonsOnly", NEURON_TAINT_KEY]
    assert b.mpijob()["metadata"]["name"] == "nccl-tests-gpu"
