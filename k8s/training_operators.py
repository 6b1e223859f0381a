"""The Kubeflow training controllers: Training Operator v1 (PyTorchJob) and Trainer v2 (TrainJob).

Which ones are installed is :class:`efa_stack.planning.plan.TrainingOperatorsPlan`. Trainer v2 comes from
its upstream Helm chart (its CRDs are too large for ``kubectl apply``); Training Operator v1 is typed cdk8s
manifests with only the PyTorchJob CRD (:class:`PyTorchJobCrd`). The facts behind both:
docs/design/training.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cdk8s
from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract
from k8s import images
from k8s.objects import documents
from k8s.scheduling import mebibytes, millicores, system_node_selector

CRD_FILE = Path(__file__).parent / "crds" / "kubeflow.org_pytorchjobs.yaml"

# Upstream's labels (manifests/base/deployment.yaml, service.yaml, webhook/kustomization.yaml).
SELECTOR = {"control-plane": "kubeflow-training-operator"}
LABELS = {"app": contract.TRAINING_OPERATOR_NAME, "app.kubernetes.io/name": contract.TRAINING_OPERATOR_NAME, "app.kubernetes.io/component": "pytorchjob", **SELECTOR}

# cmd/training-operator.v1/main.go defaults: webhook-secret-name, webhook-service-name, the webhook
# configuration the cert rotator patches, and the enabled scheme (case-insensitive kind).
WEBHOOK_SECRET = "training-operator-webhook-cert"
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
WEBHOOK_PATH = "/validate-kubeflow-org-v1-pytorchjob"
WEBHOOK_PORT = 9443
METRICS_PORT = 8080
PROBE_PORT = 8081
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # the path pkg/cert/cert.go writes to
ENABLED_SCHEME = "pytorchjob"


def pytorchjob_crd_document(file: Path = CRD_FILE) -> dict[str, Any]:
    """Upstream's PyTorchJob CRD, stored without its documentation strings (:mod:`k8s.vendored`; a fresh copy per
    call)."""
    (doc,) = documents(file)
    return doc


class PyTorchJobCrd(Construct):
    """The ``pytorchjobs.kubeflow.org`` CRD (upstream v1.9.4 without descriptions, ``k8s/crds/``)."""

    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        doc = pytorchjob_crd_document(CRD_FILE)
        self.crd = cdk8s.ApiObject(self, "Crd", api_version=doc["apiVersion"], kind=doc["kind"],
                                   metadata=cdk8s.ApiObjectMetadata(name=doc["metadata"]["name"],
                                                                             annotations=doc["metadata"].get("annotations")))
        self.crd.add_json_patch(cdk8s.JsonPatch.add("/spec", doc["spec"]))


@dataclass(frozen=True)
class TrainingOperatorProps:
    """image: default :data:`k8s.images.TRAINING_OPERATOR_IMAGE`.
    node_selector: where the controller runs; default the system node group.
    cpu_millicores / memory_mib: requests (default 100m / 128Mi; no limits).
    """

    image: str = images.TRAINING_OPERATOR_IMAGE
    node_selector: dict[str, str] = field(default_factory=system_node_selector, hash=False)
    cpu_millicores: int = 100
    memory_mib: int = 128

    def __post_init__(self) -> None:
        if self.cpu_millicores < 1 or self.memory_mib < 1:
            raise ValueError(
                f"TrainingOperatorProps: cpu_millicores={self.cpu_millicores} and memory_mib={self.memory_mib} "
                "must both be at least 1"
            )


_ALL_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
_JOB_KINDS = ("jaxjobs", "mpijobs", "paddlejobs", "pytorchjobs", "tfjobs", "xgboostjobs")


def cluster_role_rules() -> list[k8s_l1.PolicyRule]:
    """Upstream's ClusterRole rules, in upstream's order (kubeflow/trainer@v1.9.4 manifests/base/rbac/role.yaml).

    Kept whole although only PyTorchJob is enabled: the rules are generated from the markers of every
    reconciler and upstream ships no narrower role.
    """
    r = k8s_l1.PolicyRule
    rules = [
        r(api_groups=[""], resources=["configmaps"], verbs=["create", "list", "update", "watch"]),
        r(api_groups=[""], resources=["events"], verbs=list(_ALL_VERBS)),
        r(api_groups=[""], resources=["pods"], verbs=list(_ALL_VERBS)),
        r(api_groups=[""], resources=["pods/exec"], verbs=["create"]),
        r(api_groups=[""], resources=["secrets"], verbs=["get", "list", "update", "watch"]),
        r(api_groups=[""], resources=["serviceaccounts"], verbs=["create", "get", "list", "watch"]),
        r(api_groups=[""], resources=["services"], verbs=["create", "delete", "get", "list", "watch"]),
        r(api_groups=["admissionregistration.k8s.io"], resources=["validatingwebhookconfigurations"],
          verbs=["get", "list", "update", "watch"]),
        r(api_groups=["autoscaling"], resources=["horizontalpodautoscalers"], verbs=list(_ALL_VERBS)),
    ]
    for kind in _JOB_KINDS:
        rules += [
            r(api_groups=[contract.PYTORCHJOB_GROUP], resources=[kind], verbs=list(_ALL_VERBS)),
            r(api_groups=[contract.PYTORCHJOB_GROUP], resources=[f"{kind}/finalizers"], verbs=["update"]),
            r(api_groups=[contract.PYTORCHJOB_GROUP], resources=[f"{kind}/status"], verbs=["get", "patch", "update"]),
        ]
    rules += [
        r(api_groups=["rbac.authorization.k8s.io"], resources=["rolebindings"], verbs=["create", "list", "update", "watch"]),
        r(api_groups=["rbac.authorization.k8s.io"], resources=["roles"], verbs=["create", "list", "update", "watch"]),
        r(api_groups=["scheduling.volcano.sh"], resources=["podgroups"], verbs=list(_ALL_VERBS)),
        r(api_groups=["scheduling.x-k8s.io"], resources=["podgroups"], verbs=list(_ALL_VERBS)),
    ]
    return rules


class TrainingOperator(Construct):
    """Namespace, RBAC, webhook Secret/Service/configuration and the controller Deployment (PyTorchJob only)."""

    def __init__(self, scope: Construct, id: str, props: TrainingOperatorProps | None = None) -> None:
        super().__init__(scope, id)
        props = props or TrainingOperatorProps()
        labels = dict(LABELS)

        def meta(name: str, *, namespaced: bool = True) -> k8s_l1.ObjectMeta:
            return k8s_l1.ObjectMeta(name=name, namespace=contract.TRAINING_OPERATOR_NAMESPACE if namespaced else None, labels=dict(labels))

        self.namespace = k8s_l1.KubeNamespace(self, "Namespace", metadata=meta(contract.TRAINING_OPERATOR_NAMESPACE, namespaced=False))
        self.service_account = k8s_l1.KubeServiceAccount(self, "ServiceAccount", metadata=meta(contract.TRAINING_OPERATOR_NAME))
        self.cluster_role = k8s_l1.KubeClusterRole(
            self, "ClusterRole", metadata=meta(contract.TRAINING_OPERATOR_NAME, namespaced=False), rules=cluster_role_rules()
        )
        self.cluster_role_binding = k8s_l1.KubeClusterRoleBinding(
            self,
            "ClusterRoleBinding",
            metadata=meta(contract.TRAINING_OPERATOR_NAME, namespaced=False),
            role_ref=k8s_l1.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=contract.TRAINING_OPERATOR_NAME),
            subjects=[k8s_l1.Subject(kind="ServiceAccount", name=contract.TRAINING_OPERATOR_NAME, namespace=contract.TRAINING_OPERATOR_NAMESPACE)],
        )
        # Empty: the controller's cert rotator writes the CA and serving certificate into it.
        self.webhook_secret = k8s_l1.KubeSecret(self, "WebhookSecret", metadata=meta(WEBHOOK_SECRET), type="Opaque")
        self.service = k8s_l1.KubeService(
            self,
            "Service",
            metadata=meta(contract.TRAINING_OPERATOR_NAME),
            spec=k8s_l1.ServiceSpec(
                type="ClusterIP",
                selector=dict(SELECTOR),
                ports=[
                    k8s_l1.ServicePort(name="monitoring-port", port=METRICS_PORT,
                                       target_port=k8s_l1.IntOrString.from_number(METRICS_PORT)),
                    k8s_l1.ServicePort(name="webhook-server", port=443, protocol="TCP",
                                       target_port=k8s_l1.IntOrString.from_number(WEBHOOK_PORT)),
                ],
            ),
        )
        # manifests/base/webhook/manifests.yaml, the PyTorchJob entry only; caBundle comes from the rotator.
        self.webhook = k8s_l1.KubeValidatingWebhookConfiguration(
            self,
            "ValidatingWebhook",
            metadata=meta(WEBHOOK_CONFIGURATION, namespaced=False),
            webhooks=[
                k8s_l1.ValidatingWebhook(
                    name="validator.pytorchjob.training-operator.kubeflow.org",
                    admission_review_versions=["v1"],
                    client_config=k8s_l1.WebhookClientConfig(
                        service=k8s_l1.ServiceReference(name=contract.TRAINING_OPERATOR_NAME, namespace=contract.TRAINING_OPERATOR_NAMESPACE, path=WEBHOOK_PATH)
                    ),
                    failure_policy="Fail",
                    side_effects="None",
                    rules=[
                        k8s_l1.RuleWithOperations(
                            api_groups=[contract.PYTORCHJOB_GROUP],
                            api_versions=[contract.PYTORCHJOB_VERSION],
                            operations=["CREATE", "UPDATE"],
                            resources=[contract.PYTORCHJOB_PLURAL],
                        )
                    ],
                )
            ],
        )
        self.deployment = k8s_l1.KubeDeployment(
            self,
            "Deployment",
            metadata=meta(contract.TRAINING_OPERATOR_NAME),
            spec=k8s_l1.DeploymentSpec(
                replicas=1,
                selector=k8s_l1.LabelSelector(match_labels=dict(SELECTOR)),
                template=k8s_l1.PodTemplateSpec(
                    metadata=k8s_l1.ObjectMeta(labels=dict(labels), annotations={"sidecar.istio.io/inject": "false"}),
                    spec=k8s_l1.PodSpec(
                        service_account_name=contract.TRAINING_OPERATOR_NAME,
                        node_selector=dict(props.node_selector),
                        termination_grace_period_seconds=10,
                        containers=[self._container(props)],
                        volumes=[
                            k8s_l1.Volume(
                                name="cert",
                                secret=k8s_l1.SecretVolumeSource(secret_name=WEBHOOK_SECRET, default_mode=420),
                            )
                        ],
                    ),
                ),
            ),
        )
        for obj in (self.service_account, self.webhook_secret, self.service, self.deployment):
            obj.add_dependency(self.namespace)

    @staticmethod
    def _container(props: TrainingOperatorProps) -> k8s_l1.Container:
        def probe(path: str, delay: int, period: int) -> k8s_l1.Probe:
            return k8s_l1.Probe(
                http_get=k8s_l1.HttpGetAction(path=path, port=k8s_l1.IntOrString.from_number(PROBE_PORT)),
                initial_delay_seconds=delay, period_seconds=period, timeout_seconds=3,
            )

        def field_env(name: str, path: str) -> k8s_l1.EnvVar:
            return k8s_l1.EnvVar(
                name=name, value_from=k8s_l1.EnvVarSource(field_ref=k8s_l1.ObjectFieldSelector(field_path=path))
            )

        return k8s_l1.Container(
            name=contract.TRAINING_OPERATOR_NAME,
            image=props.image,
            command=["/manager"],
            args=[f"--enable-scheme={ENABLED_SCHEME}"],
            # pkg/cert/cert.go reads the namespace for the certificate's DNS name from MY_POD_NAMESPACE.
            env=[field_env("MY_POD_NAMESPACE", "metadata.namespace"), field_env("MY_POD_NAME", "metadata.name")],
            ports=[
                k8s_l1.ContainerPort(container_port=METRICS_PORT),
                k8s_l1.ContainerPort(container_port=WEBHOOK_PORT, name="webhook-server", protocol="TCP"),
            ],
            liveness_probe=probe("/healthz", 15, 20),
            readiness_probe=probe("/readyz", 10, 15),
            resources=k8s_l1.ResourceRequirements(
                requests={"cpu": millicores(props.cpu_millicores), "memory": mebibytes(props.memory_mib)}
            ),
            security_context=k8s_l1.SecurityContext(
                allow_privilege_escalation=False, capabilities=k8s_l1.Capabilities(drop=["ALL"])
            ),
            volume_mounts=[k8s_l1.VolumeMount(mount_path=CERT_DIR, name="cert", read_only=True)],
        )


# --- Trainer v2 (Helm) -----------------------------------------------------------------------------

TRAINER_CHART = images.TRAINER_CHART_REPOSITORY.rsplit("/", 1)[-1]
"""The chart name, the last part of its OCI reference (``kubeflow-trainer``)."""


@dataclass(frozen=True)
class TrainerHelmProps:
    """The ``cluster.add_helm_chart`` arguments for Kubeflow Trainer v2 (see the module docstring).

    repository / version: the OCI chart and its pinned version (:mod:`k8s.images`).
    node_selector: where the Trainer manager and the JobSet controller run (default: the system nodes).
    """

    repository: str = images.TRAINER_CHART_REPOSITORY
    version: str = images.TRAINER_CHART_VERSION
    node_selector: dict[str, str] = field(default_factory=system_node_selector, hash=False)

    def values(self) -> dict[str, Any]:
        """The chart values: pinned images, the manager and JobSet on ``node_selector``, no bundled runtimes.

        Keys from kubeflow/trainer@v2.3.0 charts/kubeflow-trainer/values.yaml (``image.*``,
        ``manager.nodeSelector``, ``crds.enabled``, ``jobset.install``, ``runtimes.defaultEnabled``,
        ``runtimes.installer.nodeSelector``) and kubernetes-sigs/jobset@v0.12.0 charts/jobset/values.yaml
        (``image.repository/tag``, ``controller.nodeSelector``), passed under the subchart name ``jobset``.
        """
        selector = dict(self.node_selector)
        return {
            "crds": {"enabled": True},
            "image": {
                "registry": images.TRAINER_IMAGE_REGISTRY,
                "repository": images.TRAINER_IMAGE_REPOSITORY,
                "tag": images.TRAINER_IMAGE_TAG,
            },
            "manager": {"nodeSelector": selector},
            "jobset": {
                "install": True,
                "image": {"repository": images.JOBSET_IMAGE_REPOSITORY, "tag": images.JOBSET_IMAGE_TAG},
                "controller": {"nodeSelector": dict(selector)},
            },
            # ClusterTrainingRuntimes are efa-stack's own (chart training-runtimes), not the chart's.
            "runtimes": {"defaultEnabled": False, "installer": {"nodeSelector": dict(selector)}},
        }
