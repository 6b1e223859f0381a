"""The AWS EFA Kubernetes device plugin: advertises ``vpc.amazonaws.com/efa`` on EFA nodes.

Mirrors the aws/eks-charts ``aws-efa-k8s-device-plugin`` chart, with two deliberate differences:

* Placement is by node label (``efa-stack.io/efa=true``, set on every EFA node group), not by the
  chart's hand-kept list of instance types: a new EFA instance type needs no edit here.
* The chart's split is kept: EFA nodes *without* Neuron devices run the plugin unprivileged
  (the chart's ``securityContext``: no privilege escalation, all capabilities dropped,
  ``runAsNonRoot: false`` because the plugin runs as root to open ``/dev/infiniband``). Only
  Neuron (trn/inf) EFA nodes get the chart's ``privilegedSecurityContext`` DaemonSet, which the
  plugin needs there to read Neuron topology under ``/opt/aws/neuron`` (eks-charts PR #1245,
  "allocate EFA based on neuron-efa topology alignment"). It is only rendered when the cluster has
  a Neuron EFA node group (and the standard one only when there is a non-Neuron EFA group).

Both DaemonSets run in ``kube-system`` with ``priorityClassName: system-node-critical``,
``hostNetwork: true`` and no service-account token (as the chart), tolerate ``CriticalAddonsOnly``
and the taints of the node groups they serve (``nvidia.com/gpu``, ``aws.amazon.com/neuron`` ...), and
mount the kubelet's ``/var/lib/kubelet/device-plugins`` and the host's ``/dev/infiniband``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cdk8s_plus_33 import k8s as kplus
from constructs import Construct

from efa_stack import contract
from efa_stack.spec.plan import LABEL_ACCELERATOR, LABEL_EFA, Taint
from k8s.images import EFA_DEVICE_PLUGIN_TAG, efa_device_plugin_image
from k8s.scheduling import (
    SYSTEM_NODE_CRITICAL,
    LabelRequirement,
    mebibytes,
    millicores,
    node_daemon_set,
    required_node_affinity,
    tolerations,
)

NAMESPACE = contract.KUBE_SYSTEM
NAME = contract.EFA_DEVICE_PLUGIN_NAME
NEURON_NAME = NAME + "-neuron"
RESOURCE = contract.EFA_RESOURCE
"""The extended resource the plugin advertises (one per EFA device)."""

DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
INFINIBAND_DIR = "/dev/infiniband"
NEURON_TOOLS_DIR = "/opt/aws/neuron"


@dataclass(frozen=True)
class EfaDevicePluginProps:
    """What the EFA device plugin needs to know; every default is the eks-charts chart's.

    region: picks the EKS ECR registry the image is pulled from (see :func:`k8s.images.eks_registry`).
    standard: render the unprivileged DaemonSet for EFA nodes without Neuron devices (default True).
    tolerate: taints of the EFA node groups without Neuron devices (e.g. ``nvidia.com/gpu``).
    neuron_tolerate: taints of the Neuron EFA node groups; ``None`` (default) renders no Neuron
        DaemonSet at all, an empty tuple renders it with no extra tolerations.
    image_tag: plugin image tag, default :data:`k8s.images.EFA_DEVICE_PLUGIN_TAG`.
    cpu_millicores / memory_mib: resource requests, default 10m / 20Mi as the chart.
    """

    region: str
    standard: bool = True
    tolerate: tuple[Taint, ...] = ()
    neuron_tolerate: tuple[Taint, ...] | None = None
    image_tag: str = EFA_DEVICE_PLUGIN_TAG
    cpu_millicores: int = 10
    memory_mib: int = 20
    labels: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def image(self) -> str:
        return efa_device_plugin_image(self.region, self.image_tag)


class EfaDevicePlugin(Construct):
    """The standard DaemonSet, the privileged one for Neuron EFA nodes, or both, in ``kube-system``."""

    def __init__(self, scope: Construct, id: str, props: EfaDevicePluginProps) -> None:
        super().__init__(scope, id)
        self.props = props
        if not props.standard and props.neuron_tolerate is None:
            raise ValueError("EfaDevicePlugin would render nothing: set standard=True or neuron_tolerate")
        self.daemon_set: kplus.KubeDaemonSet | None = None
        if props.standard:
            self.daemon_set = self._daemon_set(
                "Standard",
                NAME,
                props.tolerate,
                # EFA nodes that carry no Neuron devices; NotIn also matches nodes without the label
                # (CPU-only EFA groups).
                LabelRequirement(LABEL_ACCELERATOR, "NotIn", ("neuron",)),
                privileged=False,
            )
        self.neuron_daemon_set: kplus.KubeDaemonSet | None = None
        if props.neuron_tolerate is not None:
            self.neuron_daemon_set = self._daemon_set(
                "Neuron",
                NEURON_NAME,
                props.neuron_tolerate,
                LabelRequirement(LABEL_ACCELERATOR, "In", ("neuron",)),
                privileged=True,
            )

    def _daemon_set(
        self, id: str, name: str, taints: Sequence[Taint], accelerator: LabelRequirement, *, privileged: bool
    ) -> kplus.KubeDaemonSet:
        p = self.props
        selector = {"name": name}
        mounts = [
            kplus.VolumeMount(name="device-plugin", mount_path=DEVICE_PLUGIN_DIR),
            kplus.VolumeMount(name="infiniband-volume", mount_path=INFINIBAND_DIR),
        ]
        volumes = [
            kplus.Volume(name="device-plugin", host_path=kplus.HostPathVolumeSource(path=DEVICE_PLUGIN_DIR)),
            kplus.Volume(name="infiniband-volume", host_path=kplus.HostPathVolumeSource(path=INFINIBAND_DIR)),
        ]
        if privileged:
            mounts.append(kplus.VolumeMount(name="neuron-tools", mount_path=NEURON_TOOLS_DIR))
            volumes.append(
                kplus.Volume(
                    name="neuron-tools",
                    host_path=kplus.HostPathVolumeSource(path=NEURON_TOOLS_DIR, type="DirectoryOrCreate"),
                )
            )
            security = kplus.SecurityContext(
                allow_privilege_escalation=True, privileged=True, run_as_non_root=False, run_as_user=0
            )
        else:
            security = kplus.SecurityContext(
                allow_privilege_escalation=False,
                capabilities=kplus.Capabilities(drop=["ALL"]),
                run_as_non_root=False,
            )
        return node_daemon_set(
            self,
            id,
            name=name,
            namespace=NAMESPACE,
            labels={"app.kubernetes.io/name": NAME, **p.labels},
            selector=selector,
            host_access_reason=(
                "registers EFA devices with the kubelet through /var/lib/kubelet/device-plugins and "
                "reads them from /dev/infiniband"
                + (
                    "; Neuron EFA nodes also need /opt/aws/neuron and privileges to map Neuron-EFA topology"
                    if privileged
                    else ""
                )
            ),
            pod=kplus.PodSpec(
                automount_service_account_token=False,
                host_network=True,
                priority_class_name=SYSTEM_NODE_CRITICAL,
                tolerations=tolerations(taints, critical_addons=True),
                affinity=required_node_affinity(LabelRequirement(LABEL_EFA, "In", ("true",)), accelerator),
                containers=[
                    kplus.Container(
                        name=NAME,
                        image=p.image,
                        security_context=security,
                        resources=kplus.ResourceRequirements(
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
