"""Karpenter in the rehearsal: Karpenter core's kwok provider (``sigs.k8s.io/karpenter/kwok`` at the core version the
pinned aws/karpenter-provider-aws release requires) launches the pools' nodes when jobs need them, as the AWS provider
launches EC2 instances.

The provider creates a Node object for each NodeClaim, with the labels of the pool's template, the instance type's
and the offering's (zone, capacity type) and kwok's annotation, so the rehearsal's kwok makes it Ready and runs its
pods (kubernetes-sigs/karpenter@v1.14.1 kwok/cloudprovider/cloudprovider.go ``toNode``). Its instance types are
read from a file (``INSTANCE_TYPES_FILE_PATH``, kwok/cloudprovider/helpers.go ``ConstructInstanceTypes``): the
rehearsal writes one entry per pool from the plan, so a launched node has the allocatable a node group's node of the
same type has (:func:`efa_stack.rehearsal.nodes.allocatable`: GPUs, EFA devices, the reserved hugepages, CPU,
memory, max pods), plus the kwok provider's fixed overhead, which it subtracts (``KubeReserved`` 100m CPU, 10Mi).

What differs from EKS, each for a reason:

- the NodePools are applied with ``nodeClassRef`` naming a ``KWOKNodeClass`` of the pool's name (the only node class
  the kwok provider supports, ``GetSupportedNodeClasses``) instead of the ``EC2NodeClass``, which is applied as
  rendered and read by nobody: what it adds on AWS (AMI, subnets, EFA interfaces, placement group, reservations) is
  the API server test's and the templates' to check. The rehearsal marks each KWOKNodeClass Ready, as the AWS
  provider's node class controller marks a resolved EC2NodeClass;
- the release's objects are Karpenter core's kwok chart's RBAC at the same version (templates rendered for release
  ``karpenter`` in ``kube-system``) and the KWOKNodeClass CRD; the Karpenter CRDs are efa-stack's own chart's;
- a pool of reserved capacity (ODCRs, Capacity Blocks) cannot be launched: the kwok provider sets no reservation id
  label (``cloudprovider.ReservationIDLabel`` stays empty, which only the AWS provider sets), so its reserved
  offerings cannot be told apart. Such a pool's nodes are created up front from the plan, as for a node group
  (:func:`reserved_pool_nodes`), with the label Karpenter would give them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from efa_stack import contract
from efa_stack.planning.karpenter import KarpenterPoolPlan
from efa_stack.planning.plan import ClusterPlan
from efa_stack.rehearsal.binaries import Binary
from efa_stack.rehearsal.controllers import Context, Launch, LocalController, http_ok
from efa_stack.rehearsal.nodes import allocatable, group_nodes, topology_labels

KWOK_GROUP = "karpenter.kwok.sh"
KWOK_NODE_CLASS = "KWOKNodeClass"
OVERHEAD_CPU_MILLI = 100
OVERHEAD_MEMORY_MIB = 10
"""The kube-reserved the kwok provider subtracts from every instance type (helpers.go ``newInstanceType``)."""
CHART_TEMPLATES = ("clusterrole.yaml", "clusterrole-kwok.yaml", "role.yaml", "rolebinding.yaml")
"""The RBAC templates of kwok/charts/templates (the Deployment, Service and the rest are the local process's)."""
FEATURE_GATES = {"reservedCapacity": "ReservedCapacity", "staticCapacity": "StaticCapacity",
                 "nodeOverlay": "NodeOverlay", "nodeRepair": "NodeRepair",
                 "spotToSpotConsolidation": "SpotToSpotConsolidation"}
"""Chart value ``settings.featureGates.<key>`` -> the gate's name in ``FEATURE_GATES`` (charts/karpenter/templates/
deployment.yaml of the AWS provider's chart)."""
_SUBSTITUTIONS = {
    '{{ include "karpenter.fullname" . }}': contract.KARPENTER_RELEASE,
    '{{ template "karpenter.serviceAccountName" . }}': contract.KARPENTER_SERVICE_ACCOUNT,
    '{{ include "karpenter.serviceAccountName" . }}': contract.KARPENTER_SERVICE_ACCOUNT,
    "{{ .Release.Namespace }}": contract.KARPENTER_NAMESPACE,
}
_DIRECTIVE_LINE = re.compile(r"^\s*\{\{-?.*-?\}\}\s*$")


def render_template(text: str) -> list[dict[str, Any]]:
    """The documents of a Helm template of the kwok chart, for release ``karpenter`` in ``kube-system`` with the
    chart's default values: the lines that are only template actions (labels, annotations, optional rules, all empty by
    default) dropped, the names substituted. ValueError when an action is left."""
    lines = [line for line in text.splitlines() if not _DIRECTIVE_LINE.match(line)]
    out = "\n".join(lines)
    for action, value in _SUBSTITUTIONS.items():
        out = out.replace(action, value)
    if "{{" in out:
        raise ValueError(f"a template action the rehearsal does not render: {out[out.index('{{'):][:80]}")
    docs = [d for d in yaml.safe_load_all(out) if d]
    for d in docs:
        d["metadata"] = {k: v for k, v in d["metadata"].items() if v is not None}
    return docs


def release_objects(module: Path) -> list[dict[str, Any]]:
    """The Karpenter release's stand-in: its ServiceAccount, the kwok chart's RBAC and the KWOKNodeClass CRD."""
    account = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": contract.KARPENTER_SERVICE_ACCOUNT, "namespace": contract.KARPENTER_NAMESPACE}}
    templates = module / "kwok" / "charts" / "templates"
    rbac = [d for name in CHART_TEMPLATES for d in render_template((templates / name).read_text())]
    crd = yaml.safe_load((module / "kwok" / "apis" / "crds" / f"{KWOK_GROUP}_kwoknodeclasses.yaml").read_text())
    return [account, *rbac, crd]


def instance_types(plan: ClusterPlan) -> list[dict[str, Any]]:
    """The kwok provider's instance types file: one entry per pool that the provider launches (not the reserved ones:
    module docstring), its resources the plan's allocatable plus the provider's overhead."""
    out: dict[str, dict[str, Any]] = {}
    for pool in plan.karpenter.pools if plan.karpenter is not None else ():
        if pool.reserved:
            continue
        group = pool.group
        resources = dict(allocatable(plan, group))
        milli = int(resources["cpu"].removesuffix("m")) + OVERHEAD_CPU_MILLI
        resources["cpu"] = f"{milli}m"
        resources["memory"] = f"{int(resources['memory'].removesuffix('Mi')) + OVERHEAD_MEMORY_MIB}Mi"
        entry = out.setdefault(group.instance_type, {
            "name": group.instance_type, "architecture": "arm64" if group.instance.arm64 else "amd64",
            "operatingSystems": ["linux"], "resources": resources, "offerings": []})
        requirement = [{"key": contract.KARPENTER_CAPACITY_TYPE_LABEL, "operator": "In", "values": [pool.capacity_type]},
                       {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [group.availability_zone]},
                       # EKS labels a node of a type with EC2 instance topology with its network nodes: the offering's
                       # single values become the node's labels (toNode), one domain per layer for the pool's nodes
                       *({"key": k, "operator": "In", "values": [v]}
                         for k, v in topology_labels(group, group.availability_zone, 0, None).items())]
        entry["offerings"].append({"Price": 1.0, "Available": True, "Requirements": requirement})
    return list(out.values())


def reserved_pool_nodes(plan: ClusterPlan) -> list[dict[str, Any]]:
    """Nodes made up front for the pools of reserved capacity (module docstring): ``maxNodes`` each, as the plan's
    node groups' nodes are made, with ``karpenter.sh/nodepool``."""
    from efa_stack.rehearsal.nodes import NodeOptions

    out = []
    for pool in plan.karpenter.pools if plan.karpenter is not None else ():
        if pool.reserved:
            for node in group_nodes(plan, pool.group, NodeOptions(size="max")):
                node["metadata"]["labels"][contract.KARPENTER_NODEPOOL_LABEL] = pool.name
                out.append(node)
    return out


def _node_class(pool: str) -> dict[str, Any]:
    return {"apiVersion": f"{KWOK_GROUP}/v1alpha1", "kind": KWOK_NODE_CLASS, "metadata": {"name": pool}}


def rewrite_node_pool(obj: dict[str, Any]) -> dict[str, Any]:
    """A NodePool with its ``nodeClassRef`` naming the KWOKNodeClass of the same name (other objects unchanged)."""
    if obj.get("kind") != "NodePool" or obj.get("apiVersion") != contract.KARPENTER_API_VERSION:
        return obj
    out = json.loads(json.dumps(obj))
    ref = out["spec"]["template"]["spec"]["nodeClassRef"]
    out["spec"]["template"]["spec"]["nodeClassRef"] = {"group": KWOK_GROUP, "kind": KWOK_NODE_CLASS, "name": ref["name"]}
    return out


class KarpenterKwok(LocalController):
    """Karpenter core v1.14.1's kwok provider for the ``karpenter`` release, under the release's ServiceAccount: its
    settings from the release's values (``FEATURE_GATES`` from ``settings.featureGates``, the leader election in the
    release's namespace), free ports for metrics and health, the instance types of :func:`instance_types`; ready when
    it answers ``/readyz`` (pkg/operator/operator.go). Before it starts, a Ready KWOKNodeClass per rendered NodePool."""

    name = contract.KARPENTER_RELEASE
    binary: Binary = "karpenter-kwok"
    namespace = contract.KARPENTER_NAMESPACE
    service_account = contract.KARPENTER_SERVICE_ACCOUNT
    release_deployment = contract.KARPENTER_DEPLOYMENT
    port_names = ("health", "metrics")

    def transform(self, obj: dict[str, Any]) -> dict[str, Any]:
        return rewrite_node_pool(obj)

    def prepare(self, ctx: Context) -> None:
        for pool in (o["metadata"]["name"] for o in ctx.objects if o["kind"] == "NodePool"):
            node_class = _node_class(pool)
            got = ctx.api.apply(node_class)
            if got.ok:
                ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                         "lastTransitionTime": "2026-01-01T00:00:00Z"}
                got = ctx.api.merge_patch(node_class, {"status": {"conditions": [ready]}}, subresource="status")
            if not got.ok:
                raise RuntimeError(f"KWOKNodeClass {pool}: {got.message()}")

    def launch(self, ctx: Context) -> Launch:
        assert ctx.plan is not None
        types = ctx.folder / "instance-types.json"
        types.write_text(json.dumps(instance_types(ctx.plan), indent=1))
        gates = ((ctx.values.get("settings") or {}).get("featureGates") or {})
        flags = ",".join(f"{FEATURE_GATES[k]}={str(v).lower()}" for k, v in gates.items() if k in FEATURE_GATES)
        env = {"SYSTEM_NAMESPACE": self.namespace, "KARPENTER_SERVICE": contract.KARPENTER_RELEASE,
               "LEADER_ELECTION_NAMESPACE": self.namespace, "FEATURE_GATES": flags,
               "HEALTH_PROBE_PORT": str(ctx.ports["health"]), "METRICS_PORT": str(ctx.ports["metrics"]),
               "INSTANCE_TYPES_FILE_PATH": str(types), "LOG_LEVEL": "info"}
        return Launch([], env, [f"env {k}={v}" for k, v in env.items()]
                      + ["NodePools point at KWOKNodeClasses (Ready) instead of EC2NodeClasses"])

    def ready(self, ctx: Context) -> bool:
        return http_ok(f"http://127.0.0.1:{ctx.ports['health']}/readyz")


def pools_of(plan: ClusterPlan) -> tuple[KarpenterPoolPlan, ...]:
    return plan.karpenter.pools if plan.karpenter is not None else ()
