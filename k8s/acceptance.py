"""What ``efa-stack verify --acceptance`` creates: one check pod per node and one 2-node NCCL-tests MPIJob
per pair.

The check pod is the :class:`AcceptanceCheckPod` construct; the pair job is the charts' own
:class:`k8s.nccl_tests.NcclTestsJob` pinned to the pair's two nodes. Every number comes from the plan.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cdk8s
from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract
from efa_stack.planning import lustre_efa
from efa_stack.planning.nccl import MEMORY_PER_GPU_MIB, SHM_PER_GPU_MIB, NcclJobPlan
from efa_stack.planning.node_groups import NodeGroupPlan, Taint
from k8s.nccl_tests import ImageLayout, NcclTestsJob, NcclTestsJobProps, pin_to_nodes
from k8s.scheduling import mebibytes, tolerations

DEFAULT_LIB_ARCH = "x86_64-linux-gnu"
"""The multiarch directory of the image's libraries when the node group has no NCCL job plan."""

CHECK_SCRIPT = Path(__file__).parent / "scripts" / "acceptance_check.sh"
RESULTS_DIR = "/results"
DCGM_RESULT = f"{RESULTS_DIR}/dcgm.txt"
LUSTRE_RESULT = f"{RESULTS_DIR}/lustre.txt"
CHECK_CONTAINER = "check"
DCGM_CONTAINER = "dcgm"
LUSTRE_CONTAINER = "lustre"
LUSTRE_VOLUME = "fsx"
NVIDIA_PROC_VOLUME = "proc-nvidia"
NVIDIA_PROC_DIR = "/proc/driver/nvidia"
"""The NVIDIA driver's procfs directory on the host; its ``params`` file lists the module's parameters (NVIDIA/aicr's
GB200 NVreg preflight reads the same file: validators/performance/nccl_preflight_nvreg.go)."""
NVIDIA_PROC_MOUNT = "/host-proc-nvidia"
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


def acceptance_tolerations(group: NodeGroupPlan) -> list[dict[str, str]]:
    """The group's taints, plus the quarantine taint (so a quarantined node can be accepted again)."""
    return [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in acceptance_taints(group)]


def node_resources(group: NodeGroupPlan, job: NcclJobPlan | None, *, efa: bool) -> dict[str, str]:
    """Requests = limits: all GPUs, all EFA devices, the node's hugepages and the NCCL worker's memory."""
    memory = job.worker.memory.memory_mib if job else (MEMORY_PER_GPU_MIB + SHM_PER_GPU_MIB) * group.gpus_per_node
    res = {contract.GPU_RESOURCE: str(group.gpus_per_node), "memory": f"{memory}Mi"}
    if efa and group.efa_devices_per_node:
        res[contract.EFA_RESOURCE] = str(group.efa_devices_per_node)
        if group.hugepages_2mi_mib:
            res[contract.HUGEPAGES_2MI_RESOURCE] = f"{group.hugepages_2mi_mib}Mi"
    return res


@dataclass(frozen=True)
class LustreProbe:
    """The LNet check of a node whose Lustre should ride EFA: the FSx claim to write to (in the pod's namespace) and
    where to mount it; the write's size and bound come from :mod:`efa_stack.planning.lustre_efa`."""

    claim_name: str
    mount_path: str
    write_mib: int = lustre_efa.PROBE_WRITE_MIB
    unit: str = lustre_efa.CLIENT_UNIT
    timeout_seconds: int = lustre_efa.PROBE_TIMEOUT_SECONDS


def check_pod(
    group: NodeGroupPlan, node: str, *, namespace: str, image: str, job: NcclJobPlan | None,
    dcgm_level: int, efa: bool, dcgm_image: str, lustre: LustreProbe | None = None,
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

    With ``lustre`` (an EFA-enabled file system), a second init container reads the host's LNet and writes to the
    claim (:func:`lustre_container`).
    """
    return render_check_pod(AcceptanceCheckPodProps(
        group=group, node=node, name=pod_name(node), namespace=namespace, image=image, dcgm_image=dcgm_image,
        script=CHECK_SCRIPT.read_text(), dcgm_level=dcgm_level, job=job, efa=efa, labels=labels_of(group),
        lustre=lustre,
    ))


def pair_job(job: NcclJobPlan, group: NodeGroupPlan, name: str, nodes: tuple[str, str], namespace: str) -> dict[str, Any]:
    """The chart's NCCL-tests MPIJob for a pair: 2 workers pinned to ``nodes``, started at once, not retried.

    Rendered by :class:`k8s.nccl_tests.NcclTestsJob` from the group's job plan (so the workers carry the
    chart's ``efa-guard`` init container, whole-CPU requests = limits and mpirun arguments), with
    ``PAIR_MAX_BYTES`` as the largest message, the acceptance label, and tolerations of the group's taints
    plus the quarantine taint.
    """
    # No ComputeDomain: without IMEX channels NCCL cannot use multi-node NVLink, so a pair on an UltraServer measures
    # EFA between the two nodes (the fabric acceptance judges), and it claims no other job's channel.
    pair = dataclasses.replace(job, name=name, namespace=namespace, workers=2, suspend=False, max_bytes=PAIR_MAX_BYTES,
                               compute_domain=None)
    props = NcclTestsJobProps(job=pair, taints=acceptance_taints(group), backoff_limit=PAIR_BACKOFF_LIMIT,
                              labels=labels_of(group), pin_nodes=tuple(nodes))
    chart = scratch_chart()
    NcclTestsJob(chart, "Pair", props)
    (mpijob,) = chart.to_json()
    return dict(mpijob)



def _quantities(resources: Mapping[str, str]) -> dict[str, k8s_l1.Quantity]:
    # strings as node_resources gives them ("8", "5120Mi"): the API body keeps the same values
    return {k: k8s_l1.Quantity.from_string(v) for k, v in resources.items()}


@dataclass(frozen=True)
class AcceptanceCheckPodProps:
    """group / job: the plan of the node group (job None: no NCCL job for it). node: the node to check.
    name / namespace: the pod's. image: the NCCL-tests image (the checks); dcgm_image: the DCGM image.
    script: ``check.sh``'s text. dcgm_level: ``dcgmi diag -r`` level. efa: check the EFA devices.
    labels: extra labels on the pod. lustre: the LNet check of an EFA-enabled file system; none when None.
    """

    group: NodeGroupPlan
    node: str
    name: str
    namespace: str
    image: str
    dcgm_image: str
    script: str
    dcgm_level: int
    job: NcclJobPlan | None = None
    efa: bool = True
    layout: ImageLayout = field(default_factory=ImageLayout)
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    lustre: LustreProbe | None = None


def lustre_container(props: AcceptanceCheckPodProps, lustre: LustreProbe, results: k8s_l1.VolumeMount) -> k8s_l1.Container:
    """The init container of the LNet check: ``check.sh lustre`` (the script says what it runs).

    LNet and the EFA client's systemd unit are the host's, so the container runs ``lnetctl`` and ``systemctl`` in the
    host's mount and network namespaces with ``nsenter -t 1`` (util-linux nsenter(1): run a program in the namespaces
    of a target process; PID 1 is the host's init because the pod shares the host's PID namespace, and entering
    another process's namespaces needs the privileges of a privileged container). It requests no GPU or EFA device:
    the write goes through the kernel's Lustre client, which picks its own network interfaces.
    """
    return k8s_l1.Container(
        name=LUSTRE_CONTAINER,
        image=props.image,
        command=["/bin/bash", "-c", props.script, "check.sh", "lustre", lustre.mount_path, str(lustre.write_mib),
                 lustre.unit, str(lustre.timeout_seconds), LUSTRE_RESULT],
        security_context=k8s_l1.SecurityContext(privileged=True, run_as_user=0),
        volume_mounts=[results, k8s_l1.VolumeMount(name=LUSTRE_VOLUME, mount_path=lustre.mount_path)],
    )


class AcceptanceCheckPod(Construct):
    """The check pod of one node (see the module docstring). ``self.pod``: the ``KubePod``.

    With ``props.lustre`` it also mounts the FSx claim in a second init container and shares the host's PID namespace
    (:func:`lustre_container`); the check container prints that container's sections after its EFA checks.
    """

    def __init__(self, scope: Construct, id: str, props: AcceptanceCheckPodProps) -> None:
        super().__init__(scope, id)
        self.props = props
        group, job, layout = props.group, props.job, props.layout
        res = node_resources(group, job, efa=props.efa)
        limits = _quantities(res)
        gpu_res = _quantities({contract.GPU_RESOURCE: res[contract.GPU_RESOURCE], "memory": f"{DCGM_MEMORY_MIB}Mi"})
        env = [
            k8s_l1.EnvVar(name="PATH", value=":".join((*layout.path, layout.tests_dir))),
            k8s_l1.EnvVar(name="LD_LIBRARY_PATH",
                          value=layout.ld_library_path(job.worker.lib_arch if job else DEFAULT_LIB_ARCH)),
            k8s_l1.EnvVar(name="FI_EFA_FORK_SAFE", value="1"),
        ]
        results = k8s_l1.VolumeMount(name="results", mount_path=RESULTS_DIR)
        shm = job.worker.memory.shm_mib if job else 1024 * group.gpus_per_node
        efa_expected = group.efa_devices_per_node if props.efa else 0
        lustre = props.lustre
        extra_init = [lustre_container(props, lustre, results)] if lustre is not None else []
        extra_volumes = [k8s_l1.Volume(
            name=LUSTRE_VOLUME,
            persistent_volume_claim=k8s_l1.PersistentVolumeClaimVolumeSource(claim_name=lustre.claim_name),
        )] if lustre is not None else []
        # UltraServer nodes: the host's NVIDIA procfs directory, read-only, for the module options check (check.sh
        # node, NVREG_PARAMS); the container's own /proc/driver/nvidia is what the container runtime mounts
        nvreg = group.ultraserver is not None
        nvreg_mounts = [k8s_l1.VolumeMount(name=NVIDIA_PROC_VOLUME, mount_path=NVIDIA_PROC_MOUNT, read_only=True)] \
            if nvreg else []
        if nvreg:
            env.append(k8s_l1.EnvVar(name="NVREG_PARAMS", value=f"{NVIDIA_PROC_MOUNT}/params"))
            extra_volumes.append(k8s_l1.Volume(name=NVIDIA_PROC_VOLUME, host_path=k8s_l1.HostPathVolumeSource(
                path=NVIDIA_PROC_DIR, type="Directory")))
        self.pod = k8s_l1.KubePod(
            self,
            "Pod",
            metadata=k8s_l1.ObjectMeta(name=props.name, namespace=props.namespace, labels=dict(props.labels)),
            spec=k8s_l1.PodSpec(
                restart_policy="Never",
                host_pid=True if lustre is not None else None,
                affinity=k8s_l1.Affinity(node_affinity=pin_to_nodes((props.node,))),
                tolerations=tolerations(acceptance_taints(group)),
                init_containers=[
                    # no restartPolicy: a restartable (sidecar) init container would keep its GPUs
                    k8s_l1.Container(
                        name=DCGM_CONTAINER,
                        image=props.dcgm_image,
                        command=["/bin/bash", "-c", props.script, "check.sh", "dcgm", str(props.dcgm_level),
                                 DCGM_RESULT],
                        resources=k8s_l1.ResourceRequirements(requests=gpu_res, limits=dict(gpu_res)),
                        security_context=k8s_l1.SecurityContext(privileged=True, run_as_user=0),
                        volume_mounts=[results],
                    ),
                    *extra_init,
                ],
                containers=[
                    k8s_l1.Container(
                        name=CHECK_CONTAINER,
                        image=props.image,
                        command=["/bin/bash", "-c", props.script, "check.sh", "node", str(group.gpus_per_node),
                                 str(efa_expected), DCGM_RESULT, *([LUSTRE_RESULT] if lustre is not None else [])],
                        env=env,
                        resources=k8s_l1.ResourceRequirements(requests=limits, limits=dict(limits)),
                        volume_mounts=[results, k8s_l1.VolumeMount(name="dshm", mount_path="/dev/shm"), *nvreg_mounts],
                    )
                ],
                volumes=[
                    k8s_l1.Volume(name="results", empty_dir=k8s_l1.EmptyDirVolumeSource()),
                    k8s_l1.Volume(
                        name="dshm", empty_dir=k8s_l1.EmptyDirVolumeSource(medium="Memory", size_limit=mebibytes(shm))
                    ),
                    *extra_volumes,
                ],
            ),
        )


def scratch_chart() -> cdk8s.Chart:
    """A chart in a throwaway app (never synthesized), labelled like the project's charts."""
    return cdk8s.Chart(cdk8s.App(), "acceptance", labels=dict(contract.COMMON_LABELS),
                       disable_resource_name_hashes=True)


def render_check_pod(props: AcceptanceCheckPodProps) -> dict[str, Any]:
    """The check pod as its Kubernetes API body (a plain dict)."""
    chart = scratch_chart()
    AcceptanceCheckPod(chart, "CheckPod", props)
    (pod,) = chart.to_json()
    return dict(pod)
