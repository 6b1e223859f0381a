"""The DRA device layer on the cluster: the drivers' Helm values, the jobs' ResourceClaimTemplates, and the claims in
the worker pods (docs/design/dra.md).

One mechanism per node, by label: a ``devices: dra`` group's nodes carry ``efa-stack.io/devices: dra``; every device
plugin DaemonSet efa-stack renders requires ``NotIn [dra]`` (:data:`k8s.scheduling.NOT_ON_DRA_NODES`), every DRA driver
runs only ``In [dra]`` (its chart's ``nodeSelector`` here), and every worker on such a group selects it
(:func:`pod_node_selector`), the pattern of aws/karpenter-provider-aws@974b272
website/content/en/preview/tasks/dra.md, "Running DRA drivers alongside device plugins".

- :func:`aws_dranet_values`: the EFA DRA driver, aws/eks-charts@5239609 stable/aws-dranet 1.0.0: the image from the
  cluster region's EKS registry, the groups' taints tolerated (the DaemonSet tolerates only ``CriticalAddonsOnly``,
  values.yaml ``tolerations: []``, templates/daemonset.yaml), the chart's own positive ``filter`` and DeviceClass
  kept (a negative filter published ``pod-id-link0`` and broke the class's CEL: aws/aws-k8s-tester#791);
- :func:`neuron_dra_values`: the Neuron DRA driver, ``oci://public.ecr.aws/neuron/neuron-helm-chart`` with
  ``draDriver.enabled`` and the chart's device plugin, scheduler extension and problem detector off (the chart refuses
  the DRA driver beside its device plugin or scheduler: templates/_helpers.tpl ``neuron-helm-chart.validateConfig``);
- :class:`ResourceClaimTemplates`: the ``resource.k8s.io/v1`` templates the workers claim, in every namespace that
  runs them; :func:`pod_claims` / :func:`container_claims`: the pod's ``resourceClaims`` and a container's
  ``resources.claims``;
- :func:`device_classes`: the DeviceClasses the pinned charts create, as the rehearsal and the API server test apply
  them in place of the charts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import cdk8s
from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract
from efa_stack.planning.dra import ClaimTemplatePlan, DeviceKind, WorkerClaims
from efa_stack.planning.node_groups import NodeGroupPlan, Taint, taints_of
from k8s.images import eks_registry
from k8s.scheduling import CRITICAL_ADDONS_ONLY, ON_DRA_NODES, LabelRequirement, dra_node_selector

# --- the releases -------------------------------------------------------------------------------------------------
AWS_DRANET_REPOSITORY = "https://aws.github.io/eks-charts"
"""aws/eks-charts@5239609 stable/aws-dranet/README.md, Installation: ``helm repo add eks
https://aws.github.io/eks-charts`` then ``helm install aws-dranet eks/aws-dranet --namespace kube-system``."""
AWS_DRANET_CHART = contract.AWS_DRANET_RELEASE
"""The chart's name, which is also the release's (the chart README installs ``aws-dranet eks/aws-dranet``)."""
AWS_DRANET_VERSION = "1.0.0"
AWS_DRANET_IMAGE_REPOSITORY = "eks/dranet"
"""values.yaml ``image.repository`` is ``602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/dranet`` (tag
``v1.2.0-eksbuild.2``, kept): the repository of the EKS add-on registry, which efa-stack points at the cluster's
region (:func:`k8s.images.eks_registry`)."""
NEURON_CHART_REPOSITORY = "oci://public.ecr.aws/neuron/neuron-helm-chart"
NEURON_CHART = "neuron-helm-chart"
NEURON_CHART_VERSION = "1.10.0"
"""The Neuron chart release k8s/images.py pins the Neuron device plugin from; its ``draDriver`` values are those of
aws-neuron/neuron-helm-charts@97e1b7d templates/dra-driver/dra-driver-daemonset.yaml (``enabled``, ``nodeSelector``,
``tolerations``); the option exists since chart 1.9.0 (its release notes: ``--set draDriver.enabled=true``)."""


def _tolerations(taints: Sequence[Taint]) -> list[dict[str, str]]:
    return [{"key": t.key, "operator": "Exists", "effect": t.effect} for t in taints]


def dra_groups(groups: Iterable[NodeGroupPlan], kind: DeviceKind | None = None) -> list[NodeGroupPlan]:
    """The ``devices: dra`` groups of ``groups`` (with ``kind``: those whose nodes have that device kind)."""
    out = [g for g in groups if g.devices == contract.DEVICES_DRA]
    if kind == "efa":
        return [g for g in out if g.efa_devices_per_node]
    if kind == "gpu":
        return [g for g in out if g.gpus_per_node]
    if kind == "neuron":
        return [g for g in out if g.neuron_devices_per_node]
    return out


def aws_dranet_values(groups: Sequence[NodeGroupPlan], region: str) -> dict[str, Any]:
    """aws-dranet 1.0.0's values for the EFA ``devices: dra`` ``groups`` (see the module docstring). The chart's own
    node affinity (its instance types, never an Auto Mode node) stays; ``nodeSelector`` adds ``In [dra]``."""
    return {
        "image": {"repository": f"{eks_registry(region)}/{AWS_DRANET_IMAGE_REPOSITORY}"},
        "nodeSelector": dra_node_selector(),
        "tolerations": _tolerations(taints_of(groups)),
    }


def neuron_dra_values(groups: Sequence[NodeGroupPlan]) -> dict[str, Any]:
    """The Neuron chart's values for the Neuron ``devices: dra`` ``groups``: only the DRA driver, on their nodes,
    tolerating their taints (and ``CriticalAddonsOnly``, as the chart's default list does)."""
    return {
        "devicePlugin": {"enabled": False},
        "scheduler": {"enabled": False},
        "npd": {"enabled": False},
        "draDriver": {
            "enabled": True,
            "nodeSelector": dra_node_selector(),
            "tolerations": [{"key": CRITICAL_ADDONS_ONLY, "operator": "Exists"}, *_tolerations(taints_of(groups))],
        },
    }


def nvidia_gpu_values(groups: Sequence[NodeGroupPlan]) -> dict[str, Any]:
    """The NVIDIA DRA driver's values (chart ``dra-driver-nvidia-gpu`` 0.4.1, values.yaml) for the NVIDIA ``devices: dra``
    ``groups``: GPUs on, ComputeDomains off (no UltraServer group beside them: efa_stack/planning/dra.py
    ``mix_problems``), ``gpuResourcesEnabledOverride: true`` (the chart refuses GPU allocation without it:
    templates/validation.yaml, "this DRA driver cannot be deployed alongside the standard GPU device plugin on the same
    node", a promise efa-stack keeps with ``NOT_ON_DRA_NODES``), the kubelet plugin's required node affinity on the DRA
    nodes with NVIDIA GPUs instead of the chart's NFD or GPU Operator labels (a list in values replaces the chart's),
    tolerating the groups' taints; the webhook off, as the chart's default."""
    return {
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
        "gpuResourcesEnabledOverride": True,
        "kubeletPlugin": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [
                    {"key": r.key, "operator": r.operator, "values": list(r.values)}
                    for r in (ON_DRA_NODES, LabelRequirement(contract.LABEL_ACCELERATOR, "In", ("nvidia",)))
                ]},
            ]}}},
            "tolerations": _tolerations(taints_of(groups)),
        },
        "webhook": {"enabled": False},
    }


def nvidia_gpu_placement(values: Mapping[str, Any]) -> dict[str, Any]:
    """The NVIDIA DRA driver's kubelet plugin DaemonSet's placement fields from its values (templates/kubeletplugin.yaml:
    ``kubeletPlugin.nodeSelector``, ``.affinity``, ``.tolerations``, each rendered as given)."""
    plugin = values.get("kubeletPlugin") or {}
    return {"nodeSelector": dict(plugin.get("nodeSelector") or {}), "affinity": plugin.get("affinity") or {},
            "tolerations": list(plugin.get("tolerations") or [])}


# --- the DeviceClasses the charts create ----------------------------------------------------------------------------


def device_classes(kinds: Iterable[DeviceKind]) -> list[dict[str, Any]]:
    """The DeviceClass each pinned chart creates for ``kinds``, as the chart renders it on ``resource.k8s.io/v1``:
    aws-dranet 1.0.0 templates/deviceclass.yaml; dra-driver-nvidia-gpu 0.4.1 templates/deviceclass-gpu.yaml (with
    ``extendedResourceName: nvidia.com/gpu`` on v1, a field of the ``DRAExtendedResource`` gate, off on
    Kubernetes 1.35); neuron-helm-chart templates/dra-driver/dra-driver-deviceclass.yaml at 97e1b7d."""
    cel = {
        "efa": f'device.driver == "{contract.EFA_DRA_DRIVER}" &&\n'
               f"device.attributes[\"{contract.EFA_DRA_DRIVER}\"].pciDevice == 'Elastic Fabric Adapter (EFA)'\n",
        "gpu": f"device.driver == '{contract.GPU_DRA_DRIVER}' && "
               f"device.attributes['{contract.GPU_DRA_DRIVER}'].type == 'gpu'",
        "neuron": f'device.driver == "{contract.NEURON_DRA_DRIVER}"',
    }
    names = {"efa": contract.EFA_DEVICE_CLASS, "gpu": contract.GPU_DEVICE_CLASS, "neuron": contract.NEURON_DEVICE_CLASS}
    out = []
    for kind in dict.fromkeys(kinds):
        spec: dict[str, Any] = {"selectors": [{"cel": {"expression": cel[kind]}}]}
        if kind == "gpu":
            spec["extendedResourceName"] = contract.GPU_RESOURCE
        out.append({"apiVersion": contract.RESOURCE_API_VERSION, "kind": contract.DEVICE_CLASS_KIND,
                    "metadata": {"name": names[kind]}, "spec": spec})
    return out


# --- claims -----------------------------------------------------------------------------------------------------------


def claim_template_json(template: ClaimTemplatePlan, namespace: str) -> dict[str, Any]:
    """A ``resource.k8s.io/v1`` ResourceClaimTemplate: one ``exactly`` request (ExactCount) per device request and,
    for an aligned claim, a ``matchAttribute: resource.kubernetes.io/pcieRoot`` constraint per GPU and its EFA
    requests (k8s.io/api@v0.35.4 resource/v1 ``DeviceRequest.Exactly``, ``DeviceConstraint``)."""
    devices: dict[str, Any] = {"requests": [
        {"name": r.name, "exactly": {"deviceClassName": r.device_class, "allocationMode": "ExactCount",
                                     "count": r.count}}
        for r in template.requests
    ]}
    if template.aligned:
        devices["constraints"] = [{"requests": list(pair), "matchAttribute": contract.PCIE_ROOT_ATTRIBUTE}
                                  for pair in template.aligned]
    return {"apiVersion": contract.RESOURCE_API_VERSION, "kind": contract.RESOURCE_CLAIM_TEMPLATE_KIND,
            "metadata": {"name": template.name, "namespace": namespace, "labels": dict(contract.COMMON_LABELS)},
            "spec": {"spec": {"devices": devices}}}


class ResourceClaimTemplates(Construct):
    """The ResourceClaimTemplates of the plan's workers, each in every namespace whose jobs claim it."""

    def __init__(self, scope: Construct, id: str, templates: Sequence[tuple[str, ClaimTemplatePlan]]) -> None:
        super().__init__(scope, id)
        self.objects: list[cdk8s.ApiObject] = []
        for namespace, t in templates:
            doc = claim_template_json(t, namespace)
            obj = cdk8s.ApiObject(self, f"{namespace}-{t.name}", api_version=doc["apiVersion"], kind=doc["kind"],
                                  metadata=cdk8s.ApiObjectMetadata(name=t.name, namespace=namespace))
            obj.add_json_patch(cdk8s.JsonPatch.add("/spec", doc["spec"]))
            self.objects.append(obj)


def pod_claims(claims: WorkerClaims | None) -> list[k8s_l1.PodResourceClaim]:
    """The worker pod's ``resourceClaims``: one per template, each made from its template per pod."""
    if claims is None:
        return []
    return [k8s_l1.PodResourceClaim(name=t.claim, resource_claim_template_name=t.name) for t in claims.templates]


def container_claims(claims: WorkerClaims | None, *kinds: DeviceKind) -> list[k8s_l1.ResourceClaim]:
    """A container's ``resources.claims``: every claim of the pod, or those holding devices of ``kinds``."""
    if claims is None:
        return []
    names = claims.claims_of(*kinds) if kinds else tuple(t.claim for t in claims.templates)
    return [k8s_l1.ResourceClaim(name=n) for n in names]


def pod_node_selector(claims: WorkerClaims | None) -> dict[str, str]:
    """What a worker adds to its node group's ``nodeSelector``: ``efa-stack.io/devices: dra`` when it claims DRA
    devices (nothing otherwise)."""
    return dra_node_selector() if claims is not None else {}


# --- where each driver runs -----------------------------------------------------------------------------------------

AWS_DRANET_CRITICAL_TOLERATION = {"key": CRITICAL_ADDONS_ONLY, "operator": "Exists"}
"""aws-dranet 1.0.0 templates/daemonset.yaml: the one toleration the DaemonSet always has, before ``tolerations``."""
AUTO_MODE_LABEL = "eks.amazonaws.com/compute-type"


def dranet_placement(values: Mapping[str, Any], instance_types: Iterable[str]) -> dict[str, Any]:
    """The placement fields of the aws-dranet 1.0.0 DaemonSet's pod as its template renders them with ``values``
    (templates/daemonset.yaml): ``CriticalAddonsOnly`` then the values' tolerations, the values' ``nodeSelector``, and a
    required node affinity per ``supportedInstanceLabels`` key: the instance type ``In`` the chart's list (``instance_
    types``) and ``eks.amazonaws.com/compute-type NotIn [auto]``."""
    return {
        "nodeSelector": dict(values.get("nodeSelector") or {}),
        "tolerations": [AWS_DRANET_CRITICAL_TOLERATION, *(values.get("tolerations") or [])],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": contract.INSTANCE_TYPE_LABEL, "operator": "In", "values": sorted(instance_types)},
                {"key": AUTO_MODE_LABEL, "operator": "NotIn", "values": ["auto"]},
            ]},
        ]}}},
    }


def neuron_dra_placement(values: Mapping[str, Any]) -> dict[str, Any]:
    """The Neuron DRA driver DaemonSet's placement fields from its ``draDriver`` values
    (templates/dra-driver/dra-driver-daemonset.yaml at 97e1b7d: ``tolerations``, ``nodeSelector``; efa-stack leaves
    ``affinity`` to the chart, whose instance-type list is a superset of the Trainium types efa-stack accepts)."""
    dra = values.get("draDriver") or {}
    return {"nodeSelector": dict(dra.get("nodeSelector") or {}), "tolerations": list(dra.get("tolerations") or [])}


def _requirement_holds(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = req["key"], req["operator"], req.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"node selector operator {op} is not modelled")


def _tolerated(taint: Taint, tolerations: Iterable[Mapping[str, Any]]) -> bool:
    for t in tolerations:
        if t.get("key") not in (None, taint.key) or t.get("effect") not in (None, "", taint.effect):
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == taint.value:
            return True
    return False


def runs_on(placement: Mapping[str, Any], labels: Mapping[str, str], taints: Iterable[Taint]) -> bool:
    """Whether a pod with ``placement`` (its ``nodeSelector``, required node affinity and ``tolerations``) may run on a
    node with ``labels`` and ``taints``, by the rules of the scheduler's NodeAffinity and TaintToleration plugins (a
    DaemonSet pod tolerates the not-ready and unreachable taints, which a healthy node has none of)."""
    if any(labels.get(k) != v for k, v in (placement.get("nodeSelector") or {}).items()):
        return False
    required = (((placement.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(all(_requirement_holds(r, labels) for r in term.get("matchExpressions") or [])
                         for term in terms):
        return False
    return all(_tolerated(t, placement.get("tolerations") or []) for t in taints if t.effect != "PreferNoSchedule")
