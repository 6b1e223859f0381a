"""Construct tests for k8s/: each construct on its own (GIVEN props, WHEN synthesized, THEN manifest)."""

from __future__ import annotations

import pytest
from cdk8s import Testing as K8sTesting

from efa_stack import contract
from efa_stack.contract import ANNOTATION_HOST_ACCESS_REASON
from efa_stack.planning.node_groups import Taint
from k8s.components import (
    CHART_ORDER,
    EFA_DEVICE_PLUGIN,
    MPI_OPERATOR,
    MPI_OPERATOR_CRD,
    NCCL_TESTS,
    NEURON_DEVICE_PLUGIN,
    NVIDIA_DEVICE_PLUGIN,
    chart_file_name,
)
from k8s.efa_device_plugin import EfaDevicePlugin, EfaDevicePluginProps
from k8s.images import (
    EFA_DEVICE_PLUGIN_TAG,
    MPI_OPERATOR_IMAGE,
    NVIDIA_DEVICE_PLUGIN_BROKEN,
    NVIDIA_DEVICE_PLUGIN_IMAGE,
    eks_registry,
)
from k8s.mpi_operator import MpiJobCrd, MpiOperator, MpiOperatorProps
from k8s.mpijob import MpiJob, MpiJobProps, MpiJobSpec, ReplicaSpec, RunPolicy
from k8s.neuron_device_plugin import NeuronDevicePlugin, NeuronDevicePluginProps
from k8s.nvidia_device_plugin import BrokenNvidiaPluginVersion, NvidiaDevicePlugin, NvidiaDevicePluginProps
from tests.support import built, built_text, spec_text

GPU_TAINT = Taint(contract.GPU_TAINT_KEY, "true", "NoSchedule")
NEURON_TAINT = Taint(contract.NEURON_TAINT_KEY, "true", "NoSchedule")


def synth(build) -> list[dict]:
    chart = K8sTesting.chart()
    build(chart)
    return K8sTesting.synth(chart)


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


NOT_ON_DRA = {"key": contract.LABEL_DEVICES, "operator": "NotIn", "values": [contract.DEVICES_DRA]}


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

def test_efa_device_plugin_runs_on_efa_labelled_nodes_as_the_released_chart():
    # GIVEN a GPU EFA node group's taint WHEN the plugin is synthesized
    (ds,) = synth(lambda c: EfaDevicePlugin(c, "Efa", EfaDevicePluginProps(region="us-west-2", tolerate=(GPU_TAINT,))))
    # THEN it is one DaemonSet in kube-system, placed by the efa-stack label, not an instance list
    assert ds["kind"] == "DaemonSet" and ds["metadata"]["namespace"] == "kube-system"
    assert ds["metadata"]["name"] == contract.EFA_DEVICE_PLUGIN_NAME
    assert match_expressions(ds) == [{"key": contract.LABEL_EFA, "operator": "In", "values": ["true"]},
                                     NOT_ON_DRA]  # never where a DRA driver serves the devices
    assert "node.kubernetes.io/instance-type" not in str(ds)
    spec = pod_spec(ds)
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["hostNetwork"] is True
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in spec["tolerations"]
    (container,) = spec["containers"]
    assert container["image"] == (
        f"602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:{EFA_DEVICE_PLUGIN_TAG}"
    )
    # AND it runs with the released chart's security context on GPU nodes too: aws/eks-charts
    # stable/aws-efa-k8s-device-plugin/values.yaml since PR #1245 (c64d880), unchanged at 5239609
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": True, "privileged": True, "runAsNonRoot": False, "runAsUser": 0,
    }
    # AND the chart's three host mounts (templates/daemonset.yaml), /opt/aws/neuron DirectoryOrCreate
    assert {m["mountPath"] for m in container["volumeMounts"]} == {
        "/var/lib/kubelet/device-plugins", "/dev/infiniband", "/opt/aws/neuron",
    }
    host = {v["hostPath"]["path"]: v["hostPath"].get("type") for v in spec["volumes"]}
    assert host == {"/var/lib/kubelet/device-plugins": None, "/dev/infiniband": None, "/opt/aws/neuron": "DirectoryOrCreate"}
    assert spec["automountServiceAccountToken"] is False


def test_efa_device_plugin_is_one_daemonset_for_gpu_and_neuron_nodes():
    # GIVEN GPU and Neuron EFA taints WHEN synthesized THEN one DaemonSet tolerates both (the chart has one)
    (ds,) = synth(lambda c: EfaDevicePlugin(c, "Efa", EfaDevicePluginProps(
        region="us-east-2", tolerate=(GPU_TAINT, NEURON_TAINT))))
    keys = [t.get("key") for t in pod_spec(ds)["tolerations"]]
    assert keys == ["CriticalAddonsOnly", contract.GPU_TAINT_KEY, contract.NEURON_TAINT_KEY]


def test_efa_device_plugin_image_from_the_cluster_region():
    (ds,) = synth(lambda c: EfaDevicePlugin(c, "Efa", EfaDevicePluginProps(region="ap-southeast-3")))
    assert pod_spec(ds)["containers"][0]["image"].startswith("296578399912.dkr.ecr.ap-southeast-3.amazonaws.com/eks/")


# --- NVIDIA / Neuron device plugins ---------------------------------------------------------------

def test_nvidia_device_plugin_on_nvidia_nodes_without_mofed():
    (ds,) = synth(lambda c: NvidiaDevicePlugin(c, "Nvidia", NvidiaDevicePluginProps(tolerate=(GPU_TAINT,))))
    assert match_expressions(ds) == [{"key": contract.LABEL_ACCELERATOR, "operator": "In", "values": ["nvidia"]},
                                     NOT_ON_DRA]  # never where a DRA driver serves the devices
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
    assert match_expressions(ds) == [{"key": contract.LABEL_ACCELERATOR, "operator": "In", "values": ["neuron"]},
                                     NOT_ON_DRA]  # never where a DRA driver serves the devices
    assert pod_spec(ds)["serviceAccountName"] == objs[0]["metadata"]["name"]
    binding = objs[2]
    assert binding["roleRef"]["name"] == objs[1]["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "neuron-device-plugin", "namespace": "kube-system"}]
    # the chart's read-only /opt/aws host mount (aws-neuron/neuron-helm-charts values.yaml, aws-config)
    (container,) = pod_spec(ds)["containers"]
    assert {"name": "aws-config", "mountPath": "/opt/aws", "readOnly": True} in container["volumeMounts"]
    assert {"name": "aws-config", "hostPath": {"path": "/opt/aws"}} in pod_spec(ds)["volumes"]


HOST_ACCESS_STEMS = ("default", "trn2")


@pytest.mark.parametrize("stem", HOST_ACCESS_STEMS)
def test_host_access_reason_names_every_host_access_the_pod_has(stem):
    # class check over every workload with host access: its annotation names each host path it
    # mounts, and says so when it runs privileged or on the host network
    checked = 0
    for _, obj in built(stem).objects():
        if obj["kind"] != "DaemonSet":
            continue
        spec = pod_spec(obj)
        reason = obj["metadata"].get("annotations", {}).get(ANNOTATION_HOST_ACCESS_REASON, "")
        host_paths = [v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v]
        privileged = any(c.get("securityContext", {}).get("privileged") for c in spec["containers"])
        if not (host_paths or privileged or spec.get("hostNetwork")):
            continue
        checked += 1
        for path in host_paths:
            assert path.rstrip("/") in reason, f"{obj['metadata']['name']}: reason does not name {path}: {reason!r}"
        assert ("privileged" in reason) == privileged, f"{obj['metadata']['name']}: {reason!r}"
        assert ("host network" in reason) == bool(spec.get("hostNetwork")), f"{obj['metadata']['name']}: {reason!r}"
    assert checked >= 2


# --- MPI operator ---------------------------------------------------------------------------------

def test_mpi_operator_on_system_nodes():
    objs = synth(lambda c: MpiOperator(c, "Op", MpiOperatorProps()))
    by_kind = {o["kind"]: o for o in objs}
    assert list(by_kind) == ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"]
    assert by_kind["Namespace"]["metadata"]["name"] == "mpi-operator"
    dep = by_kind["Deployment"]
    assert dep["metadata"]["namespace"] == "mpi-operator"
    assert pod_spec(dep)["nodeSelector"] == {contract.LABEL_ROLE: "system"}
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
    from cdk8s_plus_33 import k8s as k8s_l1

    return k8s_l1.PodTemplateSpec(spec=k8s_l1.PodSpec(containers=[k8s_l1.Container(name="c", image="busybox:1.36")]))


def test_mpijob_renders_typed_fields():
    spec = MpiJobSpec(
        slots_per_worker=4,
        launcher_creation_policy="WaitForWorkersReady",
        run_policy=RunPolicy(clean_pod_policy="Running", suspend=True),
        launcher=ReplicaSpec(replicas=1, restart_policy="OnFailure", template=_template()),
        worker=ReplicaSpec(replicas=3, template=_template()),
    )
    (obj,) = synth(lambda c: MpiJob(c, "Job", MpiJobProps(name="j", namespace="default", spec=spec)))
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
    # the MPIJob's CRD is no chart need: the rollout orders it after the CRD is Established (tests/test_rollout.py)
    assert deps == {MPI_OPERATOR, NVIDIA_DEVICE_PLUGIN, EFA_DEVICE_PLUGIN}
    assert {d.node.id for d in charts[MPI_OPERATOR].node.dependencies} == {MPI_OPERATOR_CRD}
    for chart_id, chart in charts.items():
        for dep in chart.node.dependencies:
            assert CHART_ORDER[dep.node.id] < CHART_ORDER[chart_id]


def test_trainium_cluster_gets_neuron_plugin_and_no_nccl_job():
    b = built("trn2")
    assert b.chart_ids == [EFA_DEVICE_PLUGIN, NEURON_DEVICE_PLUGIN, MPI_OPERATOR_CRD, MPI_OPERATOR]
    # Neuron EFA nodes get the same (single) EFA plugin DaemonSet, tolerating the Neuron taint
    (ds,) = b.manifests[EFA_DEVICE_PLUGIN]
    assert ds["metadata"]["name"] == contract.EFA_DEVICE_PLUGIN_NAME
    assert contract.NEURON_TAINT_KEY in [t.get("key") for t in pod_spec(ds)["tolerations"]]
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
    (ds,) = b.manifests[EFA_DEVICE_PLUGIN]
    assert [t.get("key") for t in pod_spec(ds)["tolerations"]] == ["CriticalAddonsOnly", contract.NEURON_TAINT_KEY, contract.GPU_TAINT_KEY]
    assert b.mpijob()["metadata"]["name"] == "nccl-tests-gpu"


def test_a_document_with_metadata_the_object_would_drop_is_refused():
    import cdk8s

    from k8s.objects import api_object

    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "finalizers": ["f"]}, "data": {}}
    with pytest.raises(ValueError, match=r"ConfigMap x: metadata \['finalizers'\]"):
        api_object(cdk8s.Chart(cdk8s.App(), "c"), "x", doc)
