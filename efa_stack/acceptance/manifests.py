"""The API bodies acceptance creates: one check pod per node and one 2-node NCCL-tests MPIJob per pair.

Numbers come from the plan (:class:`NodeGroupPlan`, :class:`NcclJobPlan`), as for the NCCL-tests MPIJob
the charts render: every GPU and every EFA device of the node, the node's hugepages with a memory
request (Kubernetes requires one with hugepages), a memory-backed ``/dev/shm``. The MPIJob's launcher
command and environment are made by the same functions as the chart's (:mod:`k8s.nccl_tests`).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from efa_stack import contract
from efa_stack.spec.nccl import NcclJobPlan
from efa_stack.spec.plan import NodeGroupPlan

CHECK_SCRIPT = Path(__file__).parent / "check.sh"
RESULTS_DIR = "/results"
DCGM_RESULT = f"{RESULTS_DIR}/dcgm.txt"
CHECK_CONTAINER = "check"
PAIR_MAX_BYTES = "4G"

# Pin a pod to one node through the scheduler (so resources and taints are honoured) with a node
# affinity on the node's name: the DaemonSet controller does the same (kubernetes.io, "DaemonSet",
# "How Daemon Pods are scheduled": nodeAffinity with matchFields on metadata.name).
NODE_NAME_FIELD = "metadata.name"


def pod_name(node: str, prefix: str = "accept") -> str:
    """``accept-<first DNS label of the node name>``, a valid pod name (DNS-1123 subdomain, <= 63 here)."""
    head = re.sub(r"[^a-z0-9-]", "-", node.split(".")[0].lower()).strip("-") or "node"
    return f"{prefix}-{head}"[:63].rstrip("-")


def _pin(nodes: list[str]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": list(nodes)}]}
    ]}}}


def tolerations(group: NodeGroupPlan) -> list[dict[str, str]]:
    """The group's taints, plus the quarantine taint (so a quarantined node can be accepted again)."""
    out = [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in group.taints]
    out.append({"key": contract.QUARANTINE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"})
    return out


def node_resources(group: NodeGroupPlan, job: NcclJobPlan | None, *, efa: bool) -> dict[str, str]:
    """Requests = limits: all GPUs, all EFA devices, the node's hugepages and the NCCL worker's memory."""
    from efa_stack.spec.nccl import MEMORY_PER_GPU_MIB, SHM_PER_GPU_MIB

    memory = job.memory_mib if job else (MEMORY_PER_GPU_MIB + SHM_PER_GPU_MIB) * group.gpus_per_node
    res = {contract.GPU_RESOURCE: str(group.gpus_per_node), "memory": f"{memory}Mi"}
    if efa and group.efa_devices_per_node:
        res[contract.EFA_RESOURCE] = str(group.efa_devices_per_node)
        if group.hugepages_2mi_mib:
            res[contract.HUGEPAGES_2MI_RESOURCE] = f"{group.hugepages_2mi_mib}Mi"
    return res


def check_pod(
    group: NodeGroupPlan, node: str, *, namespace: str, image: str, job: NcclJobPlan | None,
    dcgm_level: int, efa: bool, dcgm_image: str,
) -> dict[str, Any]:
    """The check pod of ``node``: a DCGM init container, then the checks in the NCCL-tests image.

    Both containers request every GPU of the node, and the node has no more to give: this works because
    the kubelet's device manager hands the devices of a finished init container on to the app containers.
    kubernetes/kubernetes@7510f32 pkg/kubelet/cm/devicemanager/manager.go: ``Allocate`` adds a
    non-restartable init container's devices to ``devicesToReuse[podUID]``, and ``devicesToAllocate``
    "Allocates from reusableDevices list first" for the app container; a restartable (sidecar) init
    container keeps its devices instead, so the DCGM container must not set ``restartPolicy: Always``.
    The scheduler counts the pod's GPU request as max(largest init container, sum of app containers)
    (kubernetes.io, "Init Containers", "Resource sharing within containers"), so the pod fits the node.

    The DCGM container: ``dcgmi`` talks to an ``nv-hostengine`` (DCGM docs, command-line reference
    "dcgmi": "connects to the host engine on localhost"), and the pod's own network namespace has none,
    so ``check.sh`` starts one in the container (the image's entrypoint is nv-hostengine: NVIDIA/DCGM@v4.6.0
    docker/Dockerfile.ubuntu22.04). nv-hostengine "can run without root privileges, but ... portions of
    diagnostics can require root" (DCGM docs, "nv-hostengine"); the Kubernetes deployments of DCGM and
    dcgmi diag upstream run it privileged (NVIDIA/gpu-operator@v26.7.0 assets/state-dcgm/0400_dcgm.yml,
    GoogleCloudPlatform/cluster-health-scanner deploy/helm/health_checks/gpu_healthcheck). ``SYS_ADMIN``
    alone is documented only for dcgm-exporter's profiling (DCP) metrics, not for diagnostics.
    """
    from k8s.nccl_tests import ImageLayout

    script = CHECK_SCRIPT.read_text()
    layout = ImageLayout()
    res = node_resources(group, job, efa=efa)
    gpu_res = {contract.GPU_RESOURCE: res[contract.GPU_RESOURCE], "memory": "2048Mi"}
    env = [
        {"name": "PATH", "value": ":".join((*layout.path, layout.tests_dir))},
        {"name": "LD_LIBRARY_PATH", "value": layout.ld_library_path(job.lib_arch if job else "x86_64-linux-gnu")},
        {"name": "FI_EFA_FORK_SAFE", "value": "1"},
    ]
    mounts = [{"name": "results", "mountPath": RESULTS_DIR}]
    shm = job.shm_mib if job else 1024 * group.gpus_per_node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(node),
            "namespace": namespace,
            "labels": {contract.LABEL_ACCEPTANCE: group.name, contract.LABEL_NODE_GROUP: group.name,
                       **contract.COMMON_LABELS},
        },
        "spec": {
            "restartPolicy": "Never",
            "affinity": _pin([node]),
            "tolerations": tolerations(group),
            "initContainers": [{
                "name": "dcgm",
                "image": dcgm_image,
                "command": ["/bin/bash", "-c", script, "check.sh", "dcgm", str(dcgm_level), DCGM_RESULT],
                "resources": {"requests": gpu_res, "limits": gpu_res},
                "securityContext": {"privileged": True, "runAsUser": 0},
                "volumeMounts": mounts,
            }],
            "containers": [{
                "name": CHECK_CONTAINER,
                "image": image,
                "command": ["/bin/bash", "-c", script, "check.sh", "node", str(group.gpus_per_node),
                            str(group.efa_devices_per_node if efa else 0), DCGM_RESULT],
                "env": env,
                "resources": {"requests": res, "limits": res},
                "volumeMounts": [*mounts, {"name": "dshm", "mountPath": "/dev/shm"}],
            }],
            "volumes": [
                {"name": "results", "emptyDir": {}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm}Mi"}},
            ],
        },
    }


def pair_job(job: NcclJobPlan, group: NodeGroupPlan, name: str, nodes: tuple[str, str], namespace: str) -> dict[str, Any]:
    """A 2-node NCCL-tests MPIJob (the chart's launcher command and env) whose workers are pinned to ``nodes``."""
    from k8s.nccl_tests import LABEL_JOB, LABEL_MPI_ROLE, NcclTestsJobProps, fabric_env, launcher_command

    pair = dataclasses.replace(job, name=name, namespace=namespace, workers=2, suspend=False, max_bytes=PAIR_MAX_BYTES)
    props = NcclTestsJobProps(job=pair, taints=group.taints)
    env = [{"name": k, "value": v} for k, v in fabric_env(props)]
    res: dict[str, str] = {contract.GPU_RESOURCE: str(pair.gpus_per_worker), "memory": f"{pair.memory_mib}Mi"}
    if pair.efa_per_worker:
        res[contract.EFA_RESOURCE] = str(pair.efa_per_worker)
    if pair.hugepages_mib:
        res[contract.HUGEPAGES_2MI_RESOURCE] = f"{pair.hugepages_mib}Mi"
    worker_labels = {LABEL_JOB: name, LABEL_MPI_ROLE: "worker"}
    labels = {contract.LABEL_ACCEPTANCE: group.name, contract.LABEL_NODE_GROUP: group.name, **contract.COMMON_LABELS}
    return {
        "apiVersion": contract.MPIJOB_API_VERSION,
        "kind": contract.MPIJOB_KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "slotsPerWorker": pair.slots_per_worker,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiImplementation": "OpenMPI",
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "OnFailure", "template": {
                    "metadata": {"labels": {LABEL_JOB: name, LABEL_MPI_ROLE: "launcher"}},
                    "spec": {
                        "nodeSelector": {contract.LABEL_ROLE: contract.SYSTEM_NODE_GROUP},
                        "containers": [{
                            "name": "launcher", "image": pair.image, "command": launcher_command(props), "env": env,
                            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                        }],
                    },
                }},
                "Worker": {"replicas": 2, "restartPolicy": "Never", "template": {
                    "metadata": {"labels": worker_labels},
                    "spec": {
                        "affinity": {
                            **_pin(list(nodes)),
                            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                                {"labelSelector": {"matchLabels": worker_labels},
                                 "topologyKey": "kubernetes.io/hostname"}
                            ]},
                        },
                        "tolerations": tolerations(group),
                        "containers": [{
                            "name": "worker", "image": pair.image, "env": env,
                            "resources": {"requests": res, "limits": res},
                            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                        }],
                        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{pair.shm_mib}Mi"}}],
                    },
                }},
            },
        },
    }
