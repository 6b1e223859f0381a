"""The Kubeflow MPI operator (v2beta1 MPIJob controller) and its ``mpijobs.kubeflow.org`` CRD.

:class:`MpiJobCrd` loads the structural CRD in ``k8s/crds/mpijob.yaml`` (sized for CDK's manifest limit);
:class:`MpiOperator` is the namespace, RBAC and one-replica Deployment on the system nodes. Where the
ClusterRole comes from: docs/design/kubernetes-side.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import cdk8s
from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract
from k8s.images import MPI_OPERATOR_IMAGE
from k8s.objects import api_object, documents
from k8s.scheduling import mebibytes, millicores, system_node_selector

CRD_FILE = Path(__file__).parent / "crds" / "mpijob.yaml"

LABELS = {
    "app": contract.MPI_OPERATOR_NAME,
    "app.kubernetes.io/name": contract.MPI_OPERATOR_NAME,
    "app.kubernetes.io/component": "mpijob",
}


class MpiJobCrd(Construct):
    """The ``mpijobs.kubeflow.org`` CRD from ``k8s/crds/mpijob.yaml`` (cluster-scoped)."""

    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        (doc,) = documents(CRD_FILE)
        # Keys in sorted order, as the manifests of earlier releases had them (cdk8s.Include sorted them), so an
        # update of a deployed stack finds the CRD's manifest unchanged.
        self.crd: cdk8s.ApiObject = api_object(self, "Crd", json.loads(json.dumps(doc, sort_keys=True)))


@dataclass(frozen=True)
class MpiOperatorProps:
    """image: default :data:`k8s.images.MPI_OPERATOR_IMAGE`.
    node_selector: where the controller runs; default the system node group.
    cpu_millicores / memory_mib: requests (default 100m / 128Mi; no limits).
    """

    image: str = MPI_OPERATOR_IMAGE
    node_selector: dict[str, str] = field(default_factory=system_node_selector, hash=False)
    cpu_millicores: int = 100
    memory_mib: int = 128


def cluster_role_rules() -> list[k8s_l1.PolicyRule]:
    """What the controller reads and writes (see the module docstring for the sources)."""
    r = k8s_l1.PolicyRule
    return [
        r(api_groups=[""], resources=["configmaps", "secrets", "services"],
          verbs=["create", "get", "list", "watch", "update", "delete"]),
        r(api_groups=[""], resources=["pods"], verbs=["create", "get", "list", "watch", "delete", "update", "patch"]),
        r(api_groups=[""], resources=["events"], verbs=["create", "patch"]),
        r(api_groups=["batch"], resources=["jobs"], verbs=["create", "get", "list", "watch", "update", "patch", "delete"]),
        r(api_groups=["scheduling.k8s.io"], resources=["priorityclasses"], verbs=["get", "list", "watch"]),
        r(api_groups=["coordination.k8s.io"], resources=["leases"], verbs=["create", "get", "update"]),
        r(api_groups=[contract.MPIJOB_GROUP], resources=["mpijobs", "mpijobs/finalizers", "mpijobs/status"],
          verbs=["get", "list", "watch", "update", "patch"]),
    ]


class MpiOperator(Construct):
    """Namespace, ServiceAccount, ClusterRole(+Binding) and the controller Deployment."""

    def __init__(self, scope: Construct, id: str, props: MpiOperatorProps | None = None) -> None:
        super().__init__(scope, id)
        props = props or MpiOperatorProps()
        meta = {"labels": dict(LABELS)}
        self.namespace = k8s_l1.KubeNamespace(self, "Namespace", metadata=k8s_l1.ObjectMeta(name=contract.MPI_OPERATOR_NAMESPACE, **meta))
        self.service_account = k8s_l1.KubeServiceAccount(
            self, "ServiceAccount", metadata=k8s_l1.ObjectMeta(name=contract.MPI_OPERATOR_NAME, namespace=contract.MPI_OPERATOR_NAMESPACE, **meta)
        )
        self.cluster_role = k8s_l1.KubeClusterRole(
            self, "ClusterRole", metadata=k8s_l1.ObjectMeta(name=contract.MPI_OPERATOR_NAME, **meta), rules=cluster_role_rules()
        )
        self.cluster_role_binding = k8s_l1.KubeClusterRoleBinding(
            self,
            "ClusterRoleBinding",
            metadata=k8s_l1.ObjectMeta(name=contract.MPI_OPERATOR_NAME, **meta),
            role_ref=k8s_l1.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=contract.MPI_OPERATOR_NAME),
            subjects=[k8s_l1.Subject(kind="ServiceAccount", name=contract.MPI_OPERATOR_NAME, namespace=contract.MPI_OPERATOR_NAMESPACE)],
        )
        self.deployment = k8s_l1.KubeDeployment(
            self,
            "Deployment",
            metadata=k8s_l1.ObjectMeta(name=contract.MPI_OPERATOR_NAME, namespace=contract.MPI_OPERATOR_NAMESPACE, **meta),
            spec=k8s_l1.DeploymentSpec(
                replicas=1,
                selector=k8s_l1.LabelSelector(match_labels=dict(LABELS)),
                template=k8s_l1.PodTemplateSpec(
                    metadata=k8s_l1.ObjectMeta(labels=dict(LABELS)),
                    spec=k8s_l1.PodSpec(
                        service_account_name=contract.MPI_OPERATOR_NAME,
                        node_selector=dict(props.node_selector),
                        containers=[
                            k8s_l1.Container(
                                name=contract.MPI_OPERATOR_NAME,
                                image=props.image,
                                args=["-alsologtostderr", "--lock-namespace", contract.MPI_OPERATOR_NAMESPACE],
                                resources=k8s_l1.ResourceRequirements(
                                    requests={
                                        "cpu": millicores(props.cpu_millicores),
                                        "memory": mebibytes(props.memory_mib),
                                    }
                                ),
                                security_context=k8s_l1.SecurityContext(
                                    allow_privilege_escalation=False,
                                    capabilities=k8s_l1.Capabilities(drop=["ALL"]),
                                ),
                            )
                        ],
                    ),
                ),
            ),
        )
        # Objects in the namespace need it first (kubectl applies a chart's list in order anyway).
        for obj in (self.service_account, self.deployment):
            obj.add_dependency(self.namespace)
