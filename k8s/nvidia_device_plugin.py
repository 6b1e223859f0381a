"""The NVIDIA device plugin: advertises ``nvidia.com/gpu`` on NVIDIA GPU nodes.

Follows NVIDIA/k8s-device-plugin's static manifest, placed on ``efa-stack.io/accelerator=nvidia`` nodes,
with the image pinned outside the releases that take EFA devices (``MOFED_ENABLED=false`` as well). Why:
docs/design/kubernetes-side.md. The chart renders nothing without an NVIDIA node group.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract
from efa_stack.planning.node_groups import Taint
from k8s.images import NVIDIA_DEVICE_PLUGIN_BROKEN, NVIDIA_DEVICE_PLUGIN_IMAGE
from k8s.scheduling import (
    NOT_ON_DRA_NODES,
    SYSTEM_NODE_CRITICAL,
    LabelRequirement,
    node_daemon_set,
    required_node_affinity,
    tolerations,
)

DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


class BrokenNvidiaPluginVersion(ValueError):
    pass


@dataclass(frozen=True)
class NvidiaDevicePluginProps:
    """tolerate: taints of the NVIDIA node groups (default ``nvidia.com/gpu`` comes from the plan).
    image: default :data:`k8s.images.NVIDIA_DEVICE_PLUGIN_IMAGE`; v0.19.0-v0.19.2 are rejected.
    """

    tolerate: tuple[Taint, ...] = ()
    image: str = NVIDIA_DEVICE_PLUGIN_IMAGE
    labels: dict[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        tag = self.image.rsplit(":", 1)[-1]
        if tag in NVIDIA_DEVICE_PLUGIN_BROKEN:
            raise BrokenNvidiaPluginVersion(
                f"nvidia device plugin image {self.image}: {tag} mounts /dev/infiniband by default and "
                f"conflicts with the EFA device plugin; use v0.19.3 or later (or v0.17.x)"
            )


class NvidiaDevicePlugin(Construct):
    """A DaemonSet in ``kube-system`` on ``efa-stack.io/accelerator=nvidia`` nodes."""

    def __init__(self, scope: Construct, id: str, props: NvidiaDevicePluginProps) -> None:
        super().__init__(scope, id)
        selector = {"name": "nvidia-device-plugin-ds"}
        self.daemon_set = node_daemon_set(
            self,
            "DaemonSet",
            name=contract.NVIDIA_DEVICE_PLUGIN_NAME,
            namespace=contract.KUBE_SYSTEM,
            labels={"app.kubernetes.io/name": "nvidia-device-plugin", **props.labels},
            selector=selector,
            host_access_reason=(
                "registers GPUs with the kubelet through the host's /var/lib/kubelet/device-plugins socket"
            ),
            pod=k8s_l1.PodSpec(
                priority_class_name=SYSTEM_NODE_CRITICAL,
                automount_service_account_token=False,
                tolerations=tolerations(props.tolerate, critical_addons=True),
                affinity=required_node_affinity(LabelRequirement(contract.LABEL_ACCELERATOR, "In", ("nvidia",)), NOT_ON_DRA_NODES),
                containers=[
                    k8s_l1.Container(
                        name="nvidia-device-plugin-ctr",
                        image=props.image,
                        env=[
                            k8s_l1.EnvVar(name="FAIL_ON_INIT_ERROR", value="false"),
                            # never inject /dev/infiniband (MOFED) devices: EFA owns them
                            k8s_l1.EnvVar(name="MOFED_ENABLED", value="false"),
                        ],
                        security_context=k8s_l1.SecurityContext(
                            allow_privilege_escalation=False,
                            capabilities=k8s_l1.Capabilities(drop=["ALL"]),
                        ),
                        volume_mounts=[
                            k8s_l1.VolumeMount(name="kubelet-device-plugins-dir", mount_path=DEVICE_PLUGIN_DIR)
                        ],
                    )
                ],
                volumes=[
                    k8s_l1.Volume(
                        name="kubelet-device-plugins-dir",
                        host_path=k8s_l1.HostPathVolumeSource(path=DEVICE_PLUGIN_DIR, type="Directory"),
                    )
                ],
            ),
        )
