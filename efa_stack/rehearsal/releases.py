"""What a Helm release of the rollout is in the rehearsal, which has neither helm nor a registry to pull charts from.

Kubeflow Trainer (release ``kubeflow-trainer``, chart 2.3.0 with the JobSet 0.12.0 subchart) is stood in for by the
objects of upstream's kustomize base at the same versions, read from the Go modules the controllers are built from
(``tools/build.sh --module-dir``: the files of kubeflow/trainer v2.3.0 and kubernetes-sigs/jobset v0.12.0, checked by
``go.sum``): the three Trainer CRDs and the JobSet CRD, each controller's ServiceAccount, ClusterRole and binding,
JobSet's leader-election Role, and both controllers' webhook configurations with the patches their kustomizations
apply (names, the Service, the ``objectSelector`` that keeps JobSet's pod webhooks to JobSet's pods). Both
controllers then run locally (:class:`TrainerController`, :class:`JobSetController`).

Rehearsed: the CRDs and webhooks at the pinned versions, the controllers' behaviour, the values efa-stack passes that
matter to a controller (the manager and JobSet installed, no bundled runtimes). Not rehearsed: the chart's templates
themselves (the chart's RBAC and webhook objects may differ in detail from the kustomize base), its Deployments
(so ``--wait`` is the local controllers answering ready), the images and node selectors of the values.

The NVIDIA DRA driver's release (ComputeDomains only) is stood in for by :mod:`efa_stack.rehearsal.nvidia_dra`, Node
Feature Discovery's by :mod:`efa_stack.rehearsal.compute_domains`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from efa_stack import contract
from efa_stack.rehearsal.binaries import Binary, module_dir
from efa_stack.rehearsal.compute_domains import nfd_objects
from efa_stack.rehearsal.controllers import Context, Launch, LocalController, deep_merge, flatten, http_ok
from efa_stack.rehearsal.karpenter import KarpenterKwok
from efa_stack.rehearsal.karpenter import release_objects as karpenter_objects
from efa_stack.rehearsal.nvidia_dra import ComputeDomainController, KubeletPluginStandIn
from efa_stack.rehearsal.nvidia_dra import release_objects as nvidia_dra_objects
from k8s.components import KUBEFLOW_TRAINER

LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(path.read_text(), Loader=LOADER) if d]


def json_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """``obj`` with the ``add`` and ``replace`` operations of a JSON patch (RFC 6902) applied, what kustomize does with
    the patches of these kustomizations."""
    out = copy.deepcopy(obj)
    for op in ops:
        if op["op"] not in ("add", "replace"):
            raise ValueError(f"JSON patch op {op['op']} is not supported here")
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = op["value"]
        else:
            node[last] = op["value"]
    return out


def _webhooks(files: list[Path], patches: dict[str, Path], namespace: str, service: str,
              prefix: str = "") -> list[dict[str, Any]]:
    """The webhook configurations of ``files``, each patched with ``patches[kind]``, named with ``prefix`` and pointed
    at ``namespace/service`` (the Service the release creates, which the rehearsal points at the local process)."""
    out = []
    for doc in (d for f in files for d in _load(f)):
        if doc["kind"] in patches:
            doc = json_patch(doc, _load_ops(patches[doc["kind"]]))
        doc["metadata"]["name"] = prefix + doc["metadata"]["name"]
        for w in doc["webhooks"]:
            w["clientConfig"]["service"].update(namespace=namespace, name=service)
        out.append(doc)
    return out


def _load_ops(path: Path) -> list[dict[str, Any]]:
    ops = yaml.load(path.read_text(), Loader=LOADER)
    assert isinstance(ops, list), path
    return ops


def _account(namespace: str, name: str, cluster_role: dict[str, Any], roles: tuple[dict[str, Any], ...] = ()
             ) -> list[dict[str, Any]]:
    """A ServiceAccount, ``cluster_role`` bound to it cluster-wide and each of ``roles`` in ``namespace``."""
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
        cluster_role,
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": cluster_role["metadata"]["name"]}, "subjects": subject,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": cluster_role["metadata"]["name"]}},
    ]
    for role in roles:
        role = {**role, "metadata": {**role["metadata"], "namespace": namespace}}
        out += [role, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                       "metadata": {"name": role["metadata"]["name"], "namespace": namespace}, "subjects": subject,
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                   "name": role["metadata"]["name"]}}]
    return out


TRAINER_SERVICE = contract.TRAINER_DEPLOYMENT
"""The chart's webhook Service: ``trainer.webhook.service.name`` is the manager's name (templates/webhook/_helpers.tpl,
templates/manager/_helpers.tpl), as the kustomize patches name it too."""
JOBSET_PREFIX = "jobset-"
"""JobSet's kustomize ``namePrefix`` (config/default/kustomization.yaml), which the subchart's names share."""


def trainer_objects(namespace: str = contract.TRAINER_NAMESPACE) -> list[dict[str, Any]]:
    """The Trainer's CRDs, RBAC and webhook configurations (module docstring)."""
    base = module_dir("trainer-controller-manager") / "manifests" / "base"
    crds = [d for f in sorted((base / "crds").glob("*.yaml")) for d in _load(f)
            if d["kind"] == "CustomResourceDefinition"]
    (role,) = _load(base / "rbac" / "role.yaml")
    webhooks = _webhooks([base / "webhook" / "manifests.yaml"],
                         {"MutatingWebhookConfiguration": base / "webhook" / "patch_mutating.yaml",
                          "ValidatingWebhookConfiguration": base / "webhook" / "patch_validating.yaml"},
                         namespace, TRAINER_SERVICE)
    return [*crds, *_account(namespace, contract.TRAINER_DEPLOYMENT, role), *webhooks]


def jobset_objects(namespace: str = contract.TRAINER_NAMESPACE) -> list[dict[str, Any]]:
    """JobSet's CRD, RBAC and webhook configurations, as the Trainer chart's subchart installs them in ``namespace``."""
    components = module_dir("jobset") / "config" / "components"
    crds = _load(components / "crd" / "bases" / "jobset.x-k8s.io_jobsets.yaml")
    (role,) = _load(components / "rbac" / "role.yaml")
    role["metadata"]["name"] = JOBSET_PREFIX + role["metadata"]["name"]
    (election,) = _load(components / "rbac" / "leader_election_role.yaml")
    election["metadata"]["name"] = JOBSET_PREFIX + election["metadata"]["name"]
    patches = components / "webhook" / "patches"
    webhooks = _webhooks([components / "webhook" / "manifests.yaml"],
                         {"MutatingWebhookConfiguration": patches / "mutating-patch.yaml",
                          "ValidatingWebhookConfiguration": patches / "validating-patch.yaml"},
                         namespace, JobSetController.services[0], JOBSET_PREFIX)
    return [*crds, *_account(namespace, JobSetController.service_account, role, (election,)), *webhooks]


@dataclass
class _ConfigFile:
    """A controller's Configuration file from upstream's base, patched (the patch listed for the report)."""

    source: Path
    patch: dict[str, Any]

    def write(self, folder: Path) -> tuple[Path, list[str]]:
        path = folder / "config.yaml"
        config = deep_merge(yaml.safe_load(self.source.read_text()), self.patch)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path, [f"Configuration {line}" for line in flatten(self.patch)]


class TrainerController(LocalController):
    """Kubeflow Trainer v2.3.0's controller manager with upstream's Configuration (manifests/base/manager/
    controller_manager_config.yaml, what the chart's ConfigMap renders with its defaults), patched: free ports of
    127.0.0.1 for health, metrics and webhooks; ``leaderElection.resourceNamespace`` (in a pod, controller-runtime
    reads it from the ServiceAccount mount); ``certManagement.enable: false``, because its certificate rotator watches
    the fixed ``/tmp/k8s-webhook-server/serving-certs`` (kubeflow/trainer@v2.3.0 pkg/util/cert/cert.go ``certDir``)
    while its webhook server reads controller-runtime's default under ``$TMPDIR``, where the rehearsal's certificate
    is."""

    name = KUBEFLOW_TRAINER
    binary: Binary = "trainer-controller-manager"
    namespace = contract.TRAINER_NAMESPACE
    service_account = contract.TRAINER_DEPLOYMENT
    release_deployment = contract.TRAINER_DEPLOYMENT
    services = (TRAINER_SERVICE,)

    def launch(self, ctx: Context) -> Launch:
        ctx.webhooks.write(ctx.folder / "tmp" / "k8s-webhook-server" / "serving-certs")
        source = module_dir(self.binary) / "manifests" / "base" / "manager" / "controller_manager_config.yaml"
        config, changes = _ConfigFile(source, {
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ctx.ports['health']}"},
            "metrics": {"bindAddress": f"127.0.0.1:{ctx.ports['metrics']}"},
            "webhook": {"port": ctx.ports["webhook"], "host": "127.0.0.1"},
            "leaderElection": {"resourceNamespace": self.namespace},
            "certManagement": {"enable": False},
        }).write(ctx.folder)
        return Launch([f"--config={config}"], {"TMPDIR": str(ctx.folder / "tmp")}, changes)

    def ready(self, ctx: Context) -> bool:
        return http_ok(f"http://127.0.0.1:{ctx.ports['health']}/readyz")


class JobSetController(LocalController):
    """JobSet v0.12.0's controller with upstream's Configuration (config/components/manager/
    controller_manager_config.yaml), patched: free ports of 127.0.0.1; ``leaderElection.resourceNamespace``;
    ``internalCertManagement.enable: false`` (its rotator watches the fixed ``/tmp/k8s-webhook-server/serving-certs``,
    pkg/util/cert/cert.go ``certDir``) with ``webhook.certDir`` and ``metrics.certDir`` set to the rehearsal's
    certificate."""

    name = "jobset"
    binary: Binary = "jobset"
    namespace = contract.TRAINER_NAMESPACE
    service_account = JOBSET_PREFIX + "controller-manager"
    release_deployment = JOBSET_PREFIX + "controller-manager"
    services = (JOBSET_PREFIX + "webhook-service",)

    def launch(self, ctx: Context) -> Launch:
        certs = ctx.webhooks.write(ctx.folder / "certs")
        source = module_dir(self.binary) / "config" / "components" / "manager" / "controller_manager_config.yaml"
        config, changes = _ConfigFile(source, {
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ctx.ports['health']}"},
            "metrics": {"bindAddress": f"127.0.0.1:{ctx.ports['metrics']}", "certDir": str(certs)},
            "webhook": {"port": ctx.ports["webhook"], "host": "127.0.0.1", "certDir": str(certs)},
            "leaderElection": {"resourceNamespace": self.namespace},
            "internalCertManagement": {"enable": False},
        }).write(ctx.folder)
        return Launch([f"--config={config}"], {"TMPDIR": str(ctx.folder / "tmp")}, changes)

    def ready(self, ctx: Context) -> bool:
        return http_ok(f"http://127.0.0.1:{ctx.ports['health']}/readyz")


RELEASES: dict[str, tuple[type[LocalController], ...]] = {
    contract.TRAINER_RELEASE: (JobSetController, TrainerController),
    contract.KARPENTER_RELEASE: (KarpenterKwok,),
    contract.NVIDIA_DRA_RELEASE: (ComputeDomainController, KubeletPluginStandIn),
    contract.NFD_RELEASE: (),
}
"""Helm release -> the local controllers that stand in for its Deployments (JobSet first: the Trainer's runtimes
need its CRD); none for a release whose Deployments are stand-in objects that kwok runs (NFD:
:mod:`efa_stack.rehearsal.compute_domains`)."""


def release_objects(release: str, namespace: str, values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The objects the rehearsal applies for ``release`` installed with ``values`` (Namespace first)."""
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    if release == contract.TRAINER_RELEASE:
        return [ns, *jobset_objects(namespace), *trainer_objects(namespace)]
    if release == contract.KARPENTER_RELEASE:
        return [ns, *karpenter_objects(module_dir(KarpenterKwok.binary))]
    if release == contract.NVIDIA_DRA_RELEASE:
        return nvidia_dra_objects(module_dir(ComputeDomainController.binary), values or {})
    if release == contract.NFD_RELEASE:
        return nfd_objects(namespace, values or {})
    raise KeyError(f"Helm release {release}: the rehearsal has no stand-in for it")
