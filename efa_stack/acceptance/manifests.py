"""The API bodies acceptance creates: one check pod per node and one 2-node NCCL-tests MPIJob per pair.

Both are rendered from typed constructs: the check pod from :class:`k8s.acceptance.AcceptanceCheckPod`,
the pair job from the charts' own :class:`k8s.nccl_tests.NcclTestsJob` (the same launcher, workers,
environment, ``efa-guard`` init container and Guaranteed-QoS resources as the chart's job), pinned to
the pair's two nodes. Numbers come from the plan (:class:`NodeGroupPlan`, :class:`NcclJobPlan`):
every GPU and every EFA device of the node, the node's hugepages with a memory request (Kubernetes
requires one with hugepages), a memory-backed ``/dev/shm``.

The constructs (cdk8s, hence a jsii runtime) are imported only when a body is made, so loading this
module stays cheap for the rest of the CLI.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from efa_stack import contract
from efa_stack.spec.nccl import NcclJobPlan
from efa_stack.spec.plan import NodeGroupPlan, Taint

CHECK_SCRIPT = Path(__file__).parent / "check.sh"
RESULTS_DIR = "/results"
DCGM_RESULT = f"{RESULTS_DIR}/dcgm.txt"
CHECK_CONTAINER = "check"
DCGM_CONTAINER = "dcgm"
DCGM_MEMORY_MIB = 2048
PAIR_MAX_BYTES = "4G"
PAIR_BACKOFF_LIMIT = 0
"""A pair job is not retried: a failed run is evidence, and the verdict is read from it."""

# Pin a pod to one node through the scheduler (so resources and taints are honoured) with a node
# affinity on the node's name: the DaemonSet controller does the same (kubernetes.io, "DaemonSet",
# "How Daemon Pods are scheduled": nodeAffinity with matchFields on metadata.name).
# The affinity is made by k8s.nccl_tests.pin_to_nodes, for the check pod and the pair job alike.


def pod_name(node: str, prefix: str = "accept") -> str:
    """``accept-<first DNS label of the node name>``, a valid pod name (DNS-1123 subdomain, <= 63 here)."""
    head = re.sub(r"[^a-z0-9-]", "-", node.split(".")[0].lower()).strip("-") or "node"
    return f"{prefix}-{head}"[:63].rstrip("-")


def acceptance_taints(group: NodeGroupPlan) -> tuple[Taint, ...]:
    """The taints acceptance pods tolerate: the group's, plus the quarantine taint (so a quarantined node
    can be accepted again). Tolerations match on key and effect (operator Exists), so the value is empty."""
    return (*group.taints, Taint(contract.QUARANTINE_TAINT_KEY, "", "NoSchedule"))


def labels_of(group: NodeGroupPlan) -> dict[str, str]:
    """The labels of every object acceptance creates for ``group``."""
    return {contract.LABEL_ACCEPTANCE: group.name, contract.LABEL_NODE_GROUP: group.name}


def tolerations(group: NodeGroupPlan) -> list[dict[str, str]]:
    """The group's taints, plus the quarantine taint (so a quarantined node can be accepted again)."""
    return [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in acceptance_taints(group)]


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
    from k8s.acceptance import AcceptanceCheckPodProps, render_check_pod

    return render_check_pod(AcceptanceCheckPodProps(
        group=group, node=node, name=pod_name(node), namespace=namespace, image=image, dcgm_image=dcgm_image,
        script=CHECK_SCRIPT.read_text(), dcgm_level=dcgm_level, job=job, efa=efa, labels=labels_of(group),
    ))


def pair_job(job: NcclJobPlan, group: NodeGroupPlan, name: str, nodes: tuple[str, str], namespace: str) -> dict[str, Any]:
    """The chart's NCCL-tests MPIJob for a pair: 2 workers pinned to ``nodes``, started at once, not retried.

    Rendered by :class:`k8s.nccl_tests.NcclTestsJob` from the group's job plan (so the workers carry the
    chart's ``efa-guard`` init container, whole-CPU requests = limits and mpirun arguments), with
    ``PAIR_MAX_BYTES`` as the largest message, the acceptance label, and tolerations of the group's taints
    plus the quarantine taint.
    """
    from k8s.acceptance import scratch_chart
    from k8s.nccl_tests import NcclTestsJob, NcclTestsJobProps

    pair = dataclasses.replace(job, name=name, namespace=namespace, workers=2, suspend=False, max_bytes=PAIR_MAX_BYTES)
    props = NcclTestsJobProps(job=pair, taints=acceptance_taints(group), backoff_limit=PAIR_BACKOFF_LIMIT,
                              labels=labels_of(group), pin_nodes=tuple(nodes))
    chart = scratch_chart()
    NcclTestsJob(chart, "Pair", props)
    (mpijob,) = chart.to_json()
    return dict(mpijob)
