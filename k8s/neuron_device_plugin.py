"""The AWS Neuron device plugin: advertises ``aws.amazon.com/neuron`` (and ``/neuroncore``) on trn/inf nodes.

Follows aws-neuron/neuron-helm-charts' device plugin (RBAC, ``kube-system`` DaemonSet on
``efa-stack.io/accelerator=neuron`` nodes). Neuron node groups get no NCCL job. Details and the chart
version: docs/design/kubernetes-side.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract
from efa_stack.planning.node_groups import Taint
from k8s.images import NEURON_DEVICE_PLUGIN_IMAGE
from k8s.scheduling import (
    NOT_ON_DRA_NODES,
    SYSTEM_NODE_CRITICAL,
    LabelRequirement,
    node_daemon_set,
    required_node_affinity,
    tolerations,
)

DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
RUN_DIR = "/run"
AWS_CONFIG_DIR = "/opt/aws"


@dataclass(frozen=True)
class NeuronDevicePluginProps:
    """tolerate: taints of the Neuron node groups. image: default :data:`k8s.images.NEURON_DEVICE_PLUGIN_IMAGE`."""

    tolerate: tuple[Taint, ...] = ()
    image: str = NEURON_DEVICE_PLUGIN_IMAGE
    labels: dict[str, str] = field(default_factory=dict, hash=False)


class NeuronDevicePlugin(Construct):
    """ServiceAccount, ClusterRole, ClusterRoleBinding and DaemonSet in ``kube-system``."""

    def __init__(self, scope: Construct, id: str, props: NeuronDevicePluginProps) -> None:
        super().__init__(scope, id)
        labels = {"app.kubernetes.io/name": contract.NEURON_DEVICE_PLUGIN_NAME, **props.labels}
        self.service_account = k8s_l1.KubeServiceAccount(
            self, "ServiceAccount", metadata=k8s_l1.ObjectMeta(name=contract.NEURON_DEVICE_PLUGIN_NAME, namespace=contract.KUBE_SYSTEM, labels=labels)
        )
        self.cluster_role = k8s_l1.KubeClusterRole(
            self,
            "ClusterRole",
            metadata=k8s_l1.ObjectMeta(name=contract.NEURON_DEVICE_PLUGIN_NAME, labels=labels),
            rules=[
                k8s_l1.PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "list", "watch"]),
                k8s_l1.PolicyRule(api_groups=[""], resources=["events"], verbs=["create", "patch"]),
                k8s_l1.PolicyRule(
                    api_groups=[""], resources=["pods"], verbs=["update", "patch", "get", "list", "watch"]
                ),
                k8s_l1.PolicyRule(api_groups=[""], resources=["nodes/status"], verbs=["patch", "update"]),
            ],
        )
        self.cluster_role_binding = k8s_l1.KubeClusterRoleBinding(
            self,
            "ClusterRoleBinding",
            metadata=k8s_l1.ObjectMeta(name=contract.NEURON_DEVICE_PLUGIN_NAME, labels=labels),
            role_ref=k8s_l1.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=contract.NEURON_DEVICE_PLUGIN_NAME),
            subjects=[k8s_l1.Subject(kind="ServiceAccount", name=contract.NEURON_DEVICE_PLUGIN_NAME, namespace=contract.KUBE_SYSTEM)],
        )
        selector = {"name": contract.NEURON_DEVICE_PLUGIN_NAME + "-ds"}
        self.daemon_set = node_daemon_set(
            self,
            "DaemonSet",
            name=contract.NEURON_DEVICE_PLUGIN_NAME,
            namespace=contract.KUBE_SYSTEM,
            labels=labels,
            selector=selector,
            host_access_reason=(
                f"registers Neuron devices with the kubelet through {DEVICE_PLUGIN_DIR}, reads the device map under "
                f"{RUN_DIR} and the Neuron tools' configuration under {AWS_CONFIG_DIR} (read-only)"
            ),
            pod=k8s_l1.PodSpec(
                service_account_name=contract.NEURON_DEVICE_PLUGIN_NAME,
                priority_class_name=SYSTEM_NODE_CRITICAL,
                tolerations=tolerations(props.tolerate, critical_addons=True),
                affinity=required_node_affinity(LabelRequirement(contract.LABEL_ACCELERATOR, "In", ("neuron",)), NOT_ON_DRA_NODES),
                containers=[
                    k8s_l1.Container(
                        name=contract.NEURON_DEVICE_PLUGIN_NAME,
                        image=props.image,
                        env=[
                            k8s_l1.EnvVar(name="KUBECONFIG", value="/etc/kubernetes/kubelet.conf"),
                            k8s_l1.EnvVar(
                                name="NODE_NAME",
                                value_from=k8s_l1.EnvVarSource(
                                    field_ref=k8s_l1.ObjectFieldSelector(field_path="spec.nodeName")
                                ),
                            ),
                        ],
                        security_context=k8s_l1.SecurityContext(
                            allow_privilege_escalation=False,
                            capabilities=k8s_l1.Capabilities(drop=["ALL"]),
                        ),
                        volume_mounts=[
                            k8s_l1.VolumeMount(name="device-plugin", mount_path=DEVICE_PLUGIN_DIR),
                            k8s_l1.VolumeMount(name="infa-map", mount_path=RUN_DIR),
                            k8s_l1.VolumeMount(name="aws-config", mount_path=AWS_CONFIG_DIR, read_only=True),
                        ],
                    )
                ],
                volumes=[
                    k8s_l1.Volume(name="device-plugin", host_path=k8s_l1.HostPathVolumeSource(path=DEVICE_PLUGIN_DIR)),
                    k8s_l1.Volume(name="infa-map", host_path=k8s_l1.HostPathVolumeSource(path=RUN_DIR)),
                    k8s_l1.Volume(name="aws-config", host_path=k8s_l1.HostPathVolumeSource(path=AWS_CONFIG_DIR)),
                ],
            ),
        )
