"""The check pod of ``efa-stack verify --acceptance``, as a typed construct.

One pod per node: a DCGM init container, then the node checks (``efa_stack/acceptance/check.sh``) in the
NCCL-tests image. Every number comes from the plan (:class:`NodeGroupPlan`, :class:`NcclJobPlan`) through
:func:`efa_stack.acceptance.manifests.node_resources`; placement (a node-name affinity, tolerations of the
group's taints and the quarantine taint) and the image layout are the NCCL-tests job's
(:mod:`k8s.nccl_tests`, :mod:`k8s.scheduling`). Why both containers may request every GPU of the node and
why the DCGM container runs privileged: :func:`efa_stack.acceptance.manifests.check_pod`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import cdk8s
from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract
from efa_stack.acceptance.manifests import (
    CHECK_CONTAINER,
    DCGM_CONTAINER,
    DCGM_MEMORY_MIB,
    DCGM_RESULT,
    RESULTS_DIR,
    acceptance_taints,
    node_resources,
)
from efa_stack.spec.nccl import NcclJobPlan
from efa_stack.spec.plan import NodeGroupPlan
from k8s.nccl_tests import ImageLayout, pin_to_nodes
from k8s.scheduling import mebibytes, tolerations

DEFAULT_LIB_ARCH = "x86_64-linux-gnu"
"""The multiarch directory of the image's libraries when the node group has no NCCL job plan."""


def _quantities(resources: Mapping[str, str]) -> dict[str, k8s_l1.Quantity]:
    # strings as node_resources gives them ("8", "5120Mi"): the API body keeps the same values
    return {k: k8s_l1.Quantity.from_string(v) for k, v in resources.items()}


@dataclass(frozen=True)
class AcceptanceCheckPodProps:
    """group / job: the plan of the node group (job None: no NCCL job for it). node: the node to check.
    name / namespace: the pod's. image: the NCCL-tests image (the checks); dcgm_image: the DCGM image.
    script: ``check.sh``'s text. dcgm_level: ``dcgmi diag -r`` level. efa: check the EFA devices.
    labels: extra labels on the pod.
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


class AcceptanceCheckPod(Construct):
    """The check pod of one node (see the module docstring). ``self.pod``: the ``KubePod``."""

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
                          value=layout.ld_library_path(job.lib_arch if job else DEFAULT_LIB_ARCH)),
            k8s_l1.EnvVar(name="FI_EFA_FORK_SAFE", value="1"),
        ]
        results = k8s_l1.VolumeMount(name="results", mount_path=RESULTS_DIR)
        shm = job.shm_mib if job else 1024 * group.gpus_per_node
        efa_expected = group.efa_devices_per_node if props.efa else 0
        self.pod = k8s_l1.KubePod(
            self,
            "Pod",
            metadata=k8s_l1.ObjectMeta(name=props.name, namespace=props.namespace, labels=dict(props.labels)),
            spec=k8s_l1.PodSpec(
                restart_policy="Never",
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
                    )
                ],
                containers=[
                    k8s_l1.Container(
                        name=CHECK_CONTAINER,
                        image=props.image,
                        command=["/bin/bash", "-c", props.script, "check.sh", "node", str(group.gpus_per_node),
                                 str(efa_expected), DCGM_RESULT],
                        env=env,
                        resources=k8s_l1.ResourceRequirements(requests=limits, limits=dict(limits)),
                        volume_mounts=[results, k8s_l1.VolumeMount(name="dshm", mount_path="/dev/shm")],
                    )
                ],
                volumes=[
                    k8s_l1.Volume(name="results", empty_dir=k8s_l1.EmptyDirVolumeSource()),
                    k8s_l1.Volume(
                        name="dshm", empty_dir=k8s_l1.EmptyDirVolumeSource(medium="Memory", size_limit=mebibytes(shm))
                    ),
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
