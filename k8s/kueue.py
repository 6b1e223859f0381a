"""Kueue v0.19.2 (gang admission, topology-aware scheduling) and the queues of a :class:`KueuePlan`.

Three constructs, one per chart (k8s/charts.py): :class:`KueueCrds` (the CRDs of ``k8s/crds/kueue/crds.yaml``,
the Workload CRD in a chart of its own so each chart fits the kubectl handler's limit), :class:`KueueController`
(the controller objects of ``k8s/crds/kueue/controller.yaml`` with efa-stack's controller configuration) and
:class:`KueueQueues` (Topology, ResourceFlavor, ClusterQueue and LocalQueue objects from the plan). Both files are
``kustomize build config/default`` of kubernetes-sigs/kueue@v0.19.2 (commit
8eab68778fc1b52affe165fdf5af29d1e9b4f3cb), what the release's manifests.yaml holds. The design and its
traps: docs/design/kueue-tas.md.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import cdk8s
import yaml
from constructs import Construct

from efa_stack import contract
from efa_stack.planning.scheduling import FlavorPlan, KueuePlan
from k8s.objects import SAFE_LOADER, api_object, documents
from k8s.scheduling import system_node_selector, tolerations

KUEUE_VERSION = "v0.19.2"
KUEUE_COMMIT = "8eab68778fc1b52affe165fdf5af29d1e9b4f3cb"
KUEUE_IMAGE = f"registry.k8s.io/kueue/kueue:{KUEUE_VERSION}"
"""The release's image (the release build sets IMAGE_REGISTRY=registry.k8s.io/kueue, Makefile ``IMAGE_TAG``)."""
CRD_FILE = Path(__file__).parent / "crds" / "kueue" / "crds.yaml"
CONTROLLER_FILE = Path(__file__).parent / "crds" / "kueue" / "controller.yaml"
WORKLOAD_CRD = f"workloads.{contract.KUEUE_GROUP}"
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
"""The ConfigMap and key the manager reads ``--config=/controller_manager_config.yaml`` from
(config/components/manager/kustomization.yaml configMapGenerator, config/default/manager_config_patch.yaml)."""

INTEGRATION_RESOURCES: dict[str, tuple[str, str]] = {
    "batch/job": ("batch", "jobs"),
    f"{contract.MPIJOB_GROUP}/mpijob": (contract.MPIJOB_GROUP, contract.MPIJOB_PLURAL),
    f"{contract.PYTORCHJOB_GROUP}/pytorchjob": (contract.PYTORCHJOB_GROUP, contract.PYTORCHJOB_PLURAL),
    f"{contract.TRAINER_GROUP}/trainjob": (contract.TRAINER_GROUP, "trainjobs"),
}
"""(API group, resource) the webhooks of each integration efa-stack enables match."""

DROPPED_KINDS = ("APIService",)
"""The visibility on-demand APIServices (``v1beta1``/``v1beta2.visibility.kueue.x-k8s.io``, with
``insecureSkipTLSVerify``) are not rendered: an aggregated API that does not answer breaks API discovery for
every client, and nothing efa-stack runs reads pending workloads through it."""

VALIDATING_WEBHOOK_CONFIGURATION = "kueue-validating-webhook-configuration"
MUTATING_WEBHOOK_CONFIGURATION = "kueue-mutating-webhook-configuration"
"""The webhook configurations the certificate rotator writes its CA into before the controller reports ready
(kubernetes-sigs/kueue@c3785e5 (v0.19.2) pkg/util/cert/cert.go: ``<base>-validating|mutating-webhook-configuration``
of the webhook service ``kueue-webhook-service``). They must be the release build's own, or the rotator would
find no configuration to fill and ``cdk deploy``'s wait for an available replica would not cover the webhooks
(stacks/cluster_stack.py ``_wait_for_kueue``)."""


def crd_documents() -> list[dict[str, Any]]:
    """The vendored Kueue CRDs (a fresh copy per call)."""
    return documents(CRD_FILE)


def upstream_controller_documents() -> list[dict[str, Any]]:
    """Every non-CRD object of the vendored build, unchanged (a fresh copy per call)."""
    return documents(CONTROLLER_FILE)


def manager_configuration(plan: KueuePlan, upstream: dict[str, Any]) -> dict[str, Any]:
    """The Kueue ``Configuration`` (config.kueue.x-k8s.io/v1beta2): upstream's, with ``waitForPodsReady`` and the
    integrations of the plan (kubernetes-sigs/kueue@v0.19.2 apis/config/v1beta2/configuration_types.go:
    ``WaitForPodsReady{timeout, blockAdmission, requeuingStrategy, recoveryTimeout}``, ``RequeuingStrategy{
    timestamp, backoffLimitCount, backoffBaseSeconds, backoffMaxSeconds}``, timestamp ``Eviction`` =
    EvictionTimestamp; ``Integrations.frameworks``). ``blockAdmission`` stays false: a job that waits for nodes
    does not stop the others from being admitted."""
    config = copy.deepcopy(upstream)
    wait = plan.wait
    strategy: dict[str, Any] = {
        "timestamp": "Eviction",
        "backoffBaseSeconds": wait.backoff_base_seconds,
        "backoffMaxSeconds": wait.backoff_max_seconds,
    }
    if wait.backoff_limit_count is not None:
        strategy["backoffLimitCount"] = wait.backoff_limit_count
    config["waitForPodsReady"] = {
        "timeout": f"{wait.timeout_seconds}s",
        "blockAdmission": False,
        "requeuingStrategy": strategy,
    }
    config["integrations"] = {"frameworks": list(plan.integrations)}
    if plan.device_class_mappings:
        # DRA claims of queued jobs (``devices: dra`` node groups): each DeviceClass counts against the ClusterQueue
        # resource of its name (apis/config/v1beta2/configuration_types.go ``Resources.DeviceClassMappings``:
        # ``name``, ``deviceClassNames``; the KueueDRAIntegration gate is beta and on since v0.18).
        config.setdefault("resources", {})["deviceClassMappings"] = [
            {"name": c, "deviceClassNames": [c]} for c in plan.device_class_mappings
        ]
    return config


def controller_documents(plan: KueuePlan) -> list[dict[str, Any]]:
    """The controller's objects for ``plan``: upstream's build less :data:`DROPPED_KINDS`, the manager on the
    system nodes, its configuration from :func:`manager_configuration`, and webhooks only for Kueue's own kinds
    and the enabled integrations (Kueue answers a disabled integration's webhook with a no-op, pkg/controller/
    jobframework/setup.go ``WithNoopWebhook``; dropping them keeps a stopped controller from failing every Pod,
    Deployment and StatefulSet created outside kube-system and kueue-system, which upstream's ``Fail`` policy
    would do)."""
    wanted = {INTEGRATION_RESOURCES[i] for i in plan.integrations}
    docs = upstream_controller_documents()
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == CONFIG_MAP]
    upstream = yaml.load(config_map["data"][CONFIG_KEY], Loader=SAFE_LOADER)
    config_text = yaml.safe_dump(manager_configuration(plan, upstream), sort_keys=False)
    out: list[dict[str, Any]] = []
    for doc in docs:
        kind = doc["kind"]
        if kind in DROPPED_KINDS:
            continue
        if doc is config_map:
            doc["data"][CONFIG_KEY] = config_text
        elif kind == "Deployment" and doc["metadata"]["name"] == contract.KUEUE_CONTROLLER:
            template = doc["spec"]["template"]
            template["spec"]["nodeSelector"] = system_node_selector()
            # Kueue reads its Configuration once, at start (cmd/kueue/main.go): a changed one must roll the pods,
            # as upstream's Helm chart does with a checksum annotation (charts/kueue/templates/manager/manager.yaml
            # ``charts.kueue.x-k8s.io/config-checksum``).
            annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
            annotations[contract.ANNOTATION_CONFIG_SHA256] = config_sha256(config_text)
        elif kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            doc["webhooks"] = [
                w for w in doc["webhooks"]
                if all(
                    g == contract.KUEUE_GROUP or (g, r.split("/")[0]) in wanted
                    for rule in w["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                )
            ]
        out.append(doc)
    return out


def config_sha256(text: str) -> str:
    """The ``efa-stack.io/config-sha256`` annotation of the manager's pod template for configuration ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()


class KueueCrds(Construct):
    """Kueue's CRDs: ``workload=False`` every one but the Workload CRD, ``workload=True`` that one alone."""

    def __init__(self, scope: Construct, id: str, *, workload: bool) -> None:
        super().__init__(scope, id)
        self.crds = [
            api_object(self, doc["spec"]["names"]["kind"], doc)
            for doc in crd_documents() if (doc["metadata"]["name"] == WORKLOAD_CRD) == workload
        ]


def _api_objects(scope: Construct, docs: list[dict[str, Any]]) -> list[cdk8s.ApiObject]:
    """``docs`` as objects of ``scope``, each with an id from its kind, namespace and name (unique per chart)."""
    return [
        api_object(scope, f"{doc['kind']}-{doc['metadata'].get('namespace', '')}-{doc['metadata']['name']}", doc)
        for doc in docs
    ]


class KueueController(Construct):
    """Kueue's namespace, RBAC, configuration, Services, webhooks and the controller Deployment."""

    def __init__(self, scope: Construct, id: str, plan: KueuePlan) -> None:
        super().__init__(scope, id)
        self.objects = _api_objects(self, controller_documents(plan))


def topology_json(name: str, levels: tuple[str, ...]) -> dict[str, Any]:
    """A ``Topology`` (apis/kueue/v1beta2/topology_types.go: ``spec.levels[].nodeLabel``, top level first,
    ``kubernetes.io/hostname`` only as the lowest)."""
    return {"apiVersion": contract.KUEUE_API_VERSION, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": label} for label in levels]}}


def flavor_tolerations(flavor: FlavorPlan) -> list[dict[str, Any]]:
    """The flavor's ``tolerations``: the ones its jobs' pods carry (:func:`k8s.scheduling.tolerations`, operator
    Exists per key and effect). Kueue adds a flavor's tolerations to the pod templates it admits, skipping one equal
    to a toleration already there (kubernetes-sigs/kueue@v0.19.2 pkg/podset/podset.go ``Merge``, "make sure we don't
    duplicate tolerations"), so equal ones leave the pods as rendered; the CRD takes Exists without a value
    (apis/kueue/v1beta2/resourceflavor_types.go, "a value must be empty when 'operator' is 'Exists'")."""
    return [{"key": t.key, "operator": t.operator, "effect": t.effect} for t in tolerations(flavor.taints)]


def queue_documents(plan: KueuePlan) -> list[dict[str, Any]]:
    """Topologies, ResourceFlavors, the ClusterQueue and the LocalQueues of ``plan`` (v1beta2 fields:
    ResourceFlavorSpec ``nodeLabels``, ``tolerations``, ``topologyName``; ClusterQueueSpec ``namespaceSelector``
    (``{}``: every namespace), ``resourceGroups[].coveredResources`` and ``flavors[].resources[].nominalQuota``;
    LocalQueueSpec ``clusterQueue``)."""
    docs = [topology_json(t.name, t.levels) for t in plan.topologies]
    for f in plan.flavors:
        spec: dict[str, Any] = {"nodeLabels": dict(f.node_labels)}
        if f.taints:
            spec["tolerations"] = flavor_tolerations(f)
        if f.topology is not None:
            spec["topologyName"] = f.topology
        docs.append({"apiVersion": contract.KUEUE_API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": f.name},
                     "spec": spec})
    docs.append({
        "apiVersion": contract.KUEUE_API_VERSION, "kind": "ClusterQueue", "metadata": {"name": plan.cluster_queue},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{
                "coveredResources": list(plan.resources),
                "flavors": [
                    {"name": f.name, "resources": [{"name": r, "nominalQuota": q} for r, q in f.quotas]}
                    for f in plan.flavors
                ],
            }],
        },
    })
    docs += [
        {"apiVersion": contract.KUEUE_API_VERSION, "kind": "LocalQueue",
         "metadata": {"name": plan.local_queue, "namespace": ns}, "spec": {"clusterQueue": plan.cluster_queue}}
        for ns in plan.namespaces
    ]
    return docs


class KueueQueues(Construct):
    """The queue objects of :func:`queue_documents`."""

    def __init__(self, scope: Construct, id: str, plan: KueuePlan) -> None:
        super().__init__(scope, id)
        self.objects = _api_objects(self, queue_documents(plan))
