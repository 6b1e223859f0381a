"""The AWS EFA Kubernetes device plugin: advertises ``vpc.amazonaws.com/efa`` on EFA nodes.

Mirrors the released aws/eks-charts chart (privileged, host network, ``system-node-critical``), placed by
the ``efa-stack.io/efa=true`` label instead of a list of instance types. The chart version it follows and
why: docs/design/kubernetes-side.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract
from efa_stack.planning.node_groups import Taint
from k8s.images import EFA_DEVICE_PLUGIN_TAG, efa_device_plugin_image
from k8s.scheduling import (
    NOT_ON_DRA_NODES,
    SYSTEM_NODE_CRITICAL,
    LabelRequirement,
    mebibytes,
    millicores,
    node_daemon_set,
    required_node_affinity,
    tolerations,
)

"""The extended resource the plugin advertises (one per EFA device)."""

DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
INFINIBAND_DIR = "/dev/infiniband"
NEURON_TOOLS_DIR = "/opt/aws/neuron"


@dataclass(frozen=True)
class EfaDevicePluginProps:
    """What the EFA device plugin needs to know; every default is the eks-charts chart's.

    region: picks the EKS ECR registry the image is pulled from (see :func:`k8s.images.eks_registry`).
    tolerate: taints of the EFA node groups (e.g. ``nvidia.com/gpu``, ``aws.amazon.com/neuron``).
    image_tag: plugin image tag, default :data:`k8s.images.EFA_DEVICE_PLUGIN_TAG`.
    cpu_millicores / memory_mib: resource requests, default 10m / 20Mi as the chart.
    """

    region: str
    tolerate: tuple[Taint, ...] = ()
    image_tag: str = EFA_DEVICE_PLUGIN_TAG
    cpu_millicores: int = 10
    memory_mib: int = 20
    labels: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def image(self) -> str:
        return efa_device_plugin_image(self.region, self.image_tag)


class EfaDevicePlugin(Construct):
    """The EFA device plugin DaemonSet in ``kube-system`` (``self.daemon_set``)."""

    def __init__(self, scope: Construct, id: str, props: EfaDevicePluginProps) -> None:
        super().__init__(scope, id)
        self.props = props
        p = props
        selector = {"name": contract.EFA_DEVICE_PLUGIN_NAME}
        mounts = [
            k8s_l1.VolumeMount(name="device-plugin", mount_path=DEVICE_PLUGIN_DIR),
            k8s_l1.VolumeMount(name="infiniband-volume", mount_path=INFINIBAND_DIR),
            k8s_l1.VolumeMount(name="neuron-tools", mount_path=NEURON_TOOLS_DIR),
        ]
        volumes = [
            k8s_l1.Volume(name="device-plugin", host_path=k8s_l1.HostPathVolumeSource(path=DEVICE_PLUGIN_DIR)),
            k8s_l1.Volume(name="infiniband-volume", host_path=k8s_l1.HostPathVolumeSource(path=INFINIBAND_DIR)),
            k8s_l1.Volume(
                name="neuron-tools",
                host_path=k8s_l1.HostPathVolumeSource(path=NEURON_TOOLS_DIR, type="DirectoryOrCreate"),
            ),
        ]
        # the chart's values.yaml securityContext, on every node it serves
        security = k8s_l1.SecurityContext(
            allow_privilege_escalation=True, privileged=True, run_as_non_root=False, run_as_user=0
        )
        self.daemon_set = node_daemon_set(
            self,
            "Standard",
            name=contract.EFA_DEVICE_PLUGIN_NAME,
            namespace=contract.KUBE_SYSTEM,
            labels={"app.kubernetes.io/name": contract.EFA_DEVICE_PLUGIN_NAME, **p.labels},
            selector=selector,
            host_access_reason=(
                f"registers EFA devices with the kubelet through {DEVICE_PLUGIN_DIR}, opens them under "
                f"{INFINIBAND_DIR} and reads Neuron-EFA topology from {NEURON_TOOLS_DIR} (created if absent); "
                "runs privileged as root on the host network, as the aws/eks-charts aws-efa-k8s-device-plugin chart"
            ),
            pod=k8s_l1.PodSpec(
                automount_service_account_token=False,
                host_network=True,
                priority_class_name=SYSTEM_NODE_CRITICAL,
                tolerations=tolerations(p.tolerate, critical_addons=True),
                affinity=required_node_affinity(LabelRequirement(contract.LABEL_EFA, "In", ("true",)), NOT_ON_DRA_NODES),
                containers=[
                    k8s_l1.Container(
                        name=contract.EFA_DEVICE_PLUGIN_NAME,
                        image=p.image,
                        security_context=security,
                        resources=k8s_l1.ResourceRequirements(
                            requests={
                                "cpu": millicores(p.cpu_millicores),
                                "memory": mebibytes(p.memory_mib),
                            }
                        ),
                        volume_mounts=mounts,
                    )
                ],
                volumes=volumes,
            ),
        )
