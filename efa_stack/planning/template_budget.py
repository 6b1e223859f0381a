"""The template byte budget: how many bytes of CloudFormation each stack's template takes, counted before any
CloudFormation exists, and which parts go into nested stacks so that every template fits.

CloudFormation refuses a template body over 1 MB from S3 (:data:`CFN_TEMPLATE_BODY_MAX_BYTES`), and a nested
stack's template has a limit of its own. aws-cdk-lib 2.275 only warns past it (core/lib/stack.ts
``_synthesizeTemplate``: ``TEMPLATE_BODY_MAXIMUM_SIZE = 1e6``, an ``@aws-cdk/core:Stack.templateSize`` warning
from 80 % of it) and ``cdk synth`` exits 0, so a large spec would synthesize a template the deploy then fails on.

The model (:func:`stack_layout`) counts each part from what the plan renders: a node group from its interfaces,
user data, labels, taints and tags; a chart from its rendered objects (the manifest string the kubectl handler
gets, escaped into the template); the rest of the cluster stack from the plan's features. The figures are upper
bounds calibrated on the synthesized templates of every shipped spec and of specs at the envelope
(tests/test_template_budget.py holds the model to never under-count them). When the cluster stack would pass
:data:`BUDGET_BYTES`, the largest parts move into nested stacks, the safe ones first:

1. charts whose objects outlive them (``retain``) and that follow no other step: the CRD charts of Karpenter and
   the Training Operator, into one nested stack (CloudFormation keeps the old manifest's objects, the new manifest
   applies over them);
2. user node groups, from the end of ``managedNodeGroups``, into one nested stack, until the cluster stack fits with
   room for what the further groups efa-stack allows would add to it (their Kueue flavors and queues, dashboard
   widgets), and with that nested stack's resource counted at its largest: appending a group then never moves
   another (moving a group that exists creates it anew: docs/design/scale.md).

A chart deleted with its manifest never moves: a manifest that leaves a template is deleted after the one that
replaces it is created, and the kubectl handler's ``kubectl delete`` would take the new one's objects with it. What
still does not fit is refused with the numbers and the fix.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from efa_stack import contract
from efa_stack.planning.addons import POD_IDENTITY_AGENT, VPC_CNI
from efa_stack.planning.limits import network_resource_count
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.planning.user_data import node_user_data
from efa_stack.spec.errors import Problem, SpecError
from efa_stack.spec.models import MAX_USER_NODE_GROUPS

if TYPE_CHECKING:
    from efa_stack.planning.plan import ClusterPlan

# --- limits -------------------------------------------------------------------------------------------------
# AWS CloudFormation User Guide, "Understand CloudFormation quotas": template body size in an Amazon S3 object,
# 1 MB (the CDK CLI uploads every template over 50 KB to the bootstrap bucket and passes its URL); 51,200 bytes
# for a body passed in the request. CloudFormation API Reference, CreateStack ``TemplateURL``: "max size: 1 MB".
# aws-cdk-lib 2.275 core/lib/stack.ts counts the same limit as 1e6 bytes (TEMPLATE_BODY_MAXIMUM_SIZE).
CFN_TEMPLATE_BODY_MAX_BYTES = 1_000_000
CDK_WARNING_FRACTION = 0.8
"""aws-cdk-lib warns from 80 % of the limit on (``templateData.length > TEMPLATE_BODY_MAXIMUM_SIZE * 0.8``)."""
BUDGET_BYTES = int(CFN_TEMPLATE_BODY_MAX_BYTES * CDK_WARNING_FRACTION)
"""efa-stack keeps every template at or under 800,000 bytes: below CloudFormation's limit with room for the
model's margin, and below aws-cdk-lib's warning, which efa-stack's tests treat as an error."""


@dataclass(frozen=True)
class RenderedChart:
    """A chart as the cluster stack applies it: its id, its objects as rendered, and whether it may move into a
    nested stack (its objects outlive it and it follows no other rollout step)."""

    id: str
    objects: Sequence[Mapping[str, Any]]
    movable: bool = False
    field: str = "metadata.name"
    """The spec field that brings the chart (named when the chart does not fit)."""
    edges: int = 0
    """The rollout steps it follows (each a ``DependsOn`` entry)."""
    tokens: int = 0
    """Values known only at deploy time in its objects (the account of a cached image): each splits the manifest
    into an ``Fn::Join``."""


@dataclass(frozen=True)
class RenderedKubernetes:
    """What the cluster stack applies on the cluster (:func:`k8s.template_parts.rendered`): the charts, the waits
    (``KubernetesObjectValue``) and the Helm releases' values."""

    charts: Sequence[RenderedChart] = ()
    waits: int = 0
    releases: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True)
class StackLayout:
    """Where the parts of the cluster stack go: the spec node groups and the charts in nested stacks, and the
    modelled bytes of every template."""

    nested_node_groups: tuple[str, ...] = ()
    """Spec node groups in the nested stack of node groups (all their EKS node groups), in spec order."""
    nested_charts: tuple[str, ...] = ()
    """Charts applied from the nested stack of kept charts."""
    bytes: Mapping[str, int] = field(default_factory=dict)
    """Modelled template bytes: ``cluster``, and ``node groups`` and ``charts`` for the nested stacks there are."""

    @property
    def nested(self) -> bool:
        return bool(self.nested_node_groups or self.nested_charts)

    def summary_lines(self) -> list[str]:
        """The modelled bytes of each template against the budget, and what moved."""
        line = f"  template bytes: cluster stack {self.bytes.get(CLUSTER, 0):,} (modelled; budget {BUDGET_BYTES:,})"
        if not self.nested:
            return [line]
        lines = [line]
        if self.nested_node_groups:
            lines.append(f"    nested stack of node groups, {self.bytes.get(NODE_GROUPS, 0):,} bytes: "
                         + ", ".join(self.nested_node_groups))
        if self.nested_charts:
            lines.append(f"    nested stack of kept charts, {self.bytes.get(CHARTS, 0):,} bytes: "
                         + ", ".join(self.nested_charts))
        return lines


CLUSTER = "cluster"
CHARTS = "charts"
NODE_GROUPS = "node groups"
POOLS_CHART = "karpenter-pools"
"""The chart of the Karpenter pools (k8s/components.py ``KARPENTER_POOLS``)."""


def manifest_json(objects: Sequence[Mapping[str, Any]]) -> str:
    """The ``Manifest`` string aws-cdk-lib writes for a chart's objects: ``JSON.stringify`` without spaces
    (core ``CloudFormationLang.toJSON``), non-ASCII characters as they are."""
    return json.dumps(list(objects), separators=(",", ":"), ensure_ascii=False)


def escaped_bytes(text: str) -> int:
    """Bytes of ``text`` as a JSON string inside the template (quotes, backslashes and control characters
    escaped, UTF-8)."""
    return len(json.dumps(text, ensure_ascii=False).encode())


# --- the model ----------------------------------------------------------------------------------------------
# Bytes as aws-cdk-lib 2.275 writes a template (JSON.stringify with an indent of 1) with the context the CDK CLI
# gives a deploy's synth (path and asset metadata, version reporting: aws-cdk CLI 2.1148.1 ``contextFromSettings``).
# Each figure is an upper bound over the synthesized templates of the shipped specs and of the envelope specs at a
# 12-character cluster name; :func:`_per_resource` adds what a longer name and the spec's tags add to every resource.
# tests/test_template_budget.py synthesizes them and holds the model to never under-count, and to stay within
# :data:`MODEL_MARGIN` of the truth.
MODEL_MARGIN = 0.12
"""The model may over-count a template by at most 12 % (a looser model would nest earlier than needed)."""
NAME_BASELINE = 12
"""The cluster name length the figures were measured at."""

CLUSTER_FIXED_BYTES = 32_000
"""The cluster stack without its network, node groups, charts, add-ons and options: the EKS cluster, its key and
roles, the kubectl provider, the VPC CNI, the Pod Identity agent, the node role, outputs and metadata."""
NETWORK_BYTES_PER_RESOURCE = 710
"""Each resource of the network (:func:`efa_stack.planning.limits.network_resource_count`)."""
ADDON_BYTES = 900
"""Each further EKS add-on, besides its configuration values and roles (each :data:`ADDON_ROLE_BYTES`)."""
ADDON_ROLE_BYTES = 1_500
OPTION_BYTES = {
    "oidc": 500, "access_entry": 900, "pod_identity": 1_800, "log_group": 500, "storage": 16_000,
    "karpenter": 28_000, "pool_placement_group": 2_500, "custom_resource_provider": 2_000, "eni_configs": 6_000,
    "image_cache": 1_800, "training_image": 600, "dashboard": 7_500,
}
"""What an option of the plan adds to the cluster stack."""

LAUNCH_TEMPLATE_BYTES = 1_150
"""A launch template without interfaces, user data and tags."""
INTERFACE_BYTES = 412
"""Each network interface in the cluster stack (two security group references)."""
NESTED_INTERFACE_BYTES = 352
"""Each network interface in a nested stack, besides the cluster stack's id in its two parameter references."""
NODE_GROUP_BYTES = 1_100
"""An EKS node group without its labels, taints, tags and ``DependsOn``."""
DEPENDS_ON_BYTES = 48
"""Each ``DependsOn`` entry (a logical id on a line of its own)."""
PLACEMENT_GROUP_BYTES = 380
NODE_ROLE_BYTES = 800
"""A node group's own role, besides its managed policies (each :data:`POLICY_BYTES`) and inline statements."""
POLICY_BYTES = 130
TAG_BYTES = 60
"""Each tag (``{"Key": ..., "Value": ...}``), besides its key and value."""

MANIFEST_BYTES = 700
"""A ``KubernetesManifest`` besides its manifest string and ``DependsOn``."""
PRUNE_LABEL_BYTES = 90
"""The prune label aws-cdk-lib puts on every object (``aws.cdk.eks/prune-<42-character address>``, escaped in the
manifest, in a ``labels`` map of its own where the object has none; aws-cdk-lib aws-eks-v2 k8s-manifest.ts
``injectPruneLabel``)."""
WAIT_BYTES = 860
"""A ``KubernetesObjectValue`` wait, with its ``DependsOn``."""
RELEASE_BYTES = 1_600
"""A Helm release besides its values."""
NESTED_STACK_BYTES = 2_000
"""The ``AWS::CloudFormation::Stack`` resource of a nested stack in the cluster stack, besides its parameters and
``DependsOn``; the nested template's own overhead (metadata, description) is :data:`NESTED_TEMPLATE_BYTES`."""
NESTED_TEMPLATE_BYTES = 1_000
PARAMETER_BYTES = 80
"""Each parameter of a nested stack, besides its name twice (declared in the nested template, set by the resource in
the cluster stack)."""
GROWTH_PER_NODE_GROUP = 1_500
"""What a node group adds to the cluster stack even when it sits in the nested stack: its Kueue flavor and queue,
its dashboard widgets, a subnet parameter."""
DASHBOARD_GROUP_BYTES = 100
"""What each node group adds to the dashboard."""
TOKEN_BYTES = 120
"""Each deploy-time value in a manifest (``{"Ref": "AWS::AccountId"}`` between two parts of an ``Fn::Join``)."""
USER_DATA_BYTES = 60
"""``{"Fn::Base64": ...}`` around the user data."""
RELEASE_VERSION_BYTES = 20
"""An EKS node group's ``ReleaseVersion`` key besides its value (UltraServer groups pin one)."""
CUSTOM_AMI_BYTES = 1_200
"""The cluster's details in the user data of a custom AMI (an ``Fn::Join`` of the cluster's attributes)."""
INLINE_POLICY_BYTES = 700
"""Each of eksctl's ``withAddonPolicies`` a node group's own role gets inline."""
NAME_REPEATS = 8
"""How often an EKS node group's name appears in its resources (paths, logical ids, references, tags), besides the
figures' two characters."""
FIXED_RESOURCES = 30
"""The resources of :data:`CLUSTER_FIXED_BYTES`."""
BUILT_IN_ADDONS = (VPC_CNI, POD_IDENTITY_AGENT)
"""Add-ons the fixed part holds."""


def _stack_id_length(cluster: str) -> int:
    """Characters of the cluster stack's unique id (its name without '-'), which starts every parameter name."""
    return len(cluster.replace("-", "")) + len("cluster")


def _reference_bytes(cluster: str) -> int:
    """A ``{"Ref": "<parameter>"}`` in a nested template: the parameter is ``referenceto<stack id><target><attr>``
    (aws-cdk-lib core/lib/private/refs.ts), the target and attribute at most 50 characters (efa-stack's own
    construct ids)."""
    return 20 + len("referenceto") + _stack_id_length(cluster) + 50


def _per_resource(cluster: str, tags: Mapping[str, str]) -> int:
    """What every resource carries beyond the figures: the cluster name, longer than :data:`NAME_BASELINE`, in its
    path metadata and its cluster tag, and the spec's tags."""
    longer = max(0, len(cluster) - NAME_BASELINE)
    return 2 * longer + sum(len(k) + len(v) + TAG_BYTES for k, v in tags.items())


def _json_bytes(value: Any, depth: int = 4) -> int:
    """Bytes of ``value`` as JSON indented by one space a level, at ``depth`` levels into a resource."""
    text = json.dumps(value, indent=1, ensure_ascii=False)
    return len(text.encode()) + depth * text.count("\n")


def manifest_template_bytes(chart: RenderedChart, cluster: str, per_resource: int, *, nested: bool = False) -> int:
    """A chart's ``KubernetesManifest`` in a template: its manifest string, escaped, with the prune label on every
    object, the ``DependsOn`` entries of its rollout edges (each edge may name two resources: a node group's launch
    template and node group), and in a nested stack its two parameter references (service token, cluster name)."""
    body = escaped_bytes(manifest_json(chart.objects)) + len(chart.objects) * PRUNE_LABEL_BYTES
    refs = 2 * (_reference_bytes(cluster) + PARAMETER_BYTES) if nested else 0
    return (body + chart.tokens * TOKEN_BYTES + MANIFEST_BYTES + 2 * chart.edges * DEPENDS_ON_BYTES + refs
            + per_resource)


def node_dependencies(plan: ClusterPlan) -> int:
    """The ``DependsOn`` entries of an EKS node group: every resource of the network, the VPC CNI, the Pod Identity
    agent, the add-ons nodes wait for, the ENIConfigs (stacks/cluster_stack.py ``_node_groups``)."""
    network = _network_resources(plan)
    addons = sum(1 for a in plan.addons if a.node_dependency)
    pods = 2 if plan.addresses is not None and plan.addresses.pods is not None else 0
    return network + addons + pods


def node_group_template_bytes(plan: ClusterPlan, ng: NodeGroupPlan, *, nested: bool = False) -> int:
    """Every EKS node group of spec group ``ng`` (each part's launch template and node group), its placement group
    and its own role, in the cluster stack or in a nested stack of its own (its references then parameters)."""
    cluster, per_resource = plan.name, _per_resource(plan.name, plan.tags)
    user_data = _user_data(plan, ng)
    ref = _reference_bytes(cluster)
    interface = NESTED_INTERFACE_BYTES + 2 * _stack_id_length(cluster) if nested else INTERFACE_BYTES
    node_tags = {contract.LABEL_NODE_GROUP: ng.name, **ng.tags}
    tag_bytes = sum(len(k) + len(v) + TAG_BYTES for k, v in node_tags.items())
    launch_template = (LAUNCH_TEMPLATE_BYTES + len(ng.interfaces) * interface + 3 * tag_bytes
                       + (escaped_bytes(user_data) + USER_DATA_BYTES if user_data else 0)
                       + (CUSTOM_AMI_BYTES + (3 * ref if nested else 0) if ng.ami_id else 0)
                       + (0 if ng.interfaces else 2 * (ref if nested else INTERFACE_BYTES // 4))
                       + len(ng.reservation_resource_group_arn or ""))
    repair = ng.node_repair_cfn()
    node_group = (NODE_GROUP_BYTES + _json_bytes(ng.labels) + _json_bytes([dataclasses.asdict(t) for t in ng.taints])
                  + tag_bytes + _json_bytes(list(ng.instance_types)) + (_json_bytes(repair) if repair else 0)
                  + (len(ng.release_version) + RELEASE_VERSION_BYTES if ng.release_version else 0)
                  + (ref * (2 + len(ng.availability_zones)) if nested else node_dependencies(plan) * DEPENDS_ON_BYTES))
    parts = ng.parts
    name_bytes = sum(NAME_REPEATS * len(p.name) for p in parts)
    total = len(parts) * (launch_template + node_group + 2 * per_resource) + name_bytes
    if ng.placement_group and not ng.placement_group_name:
        total += PLACEMENT_GROUP_BYTES + per_resource
    if ng.node_managed_policies or ng.node_inline_policies or ng.node_role_name:
        total += (NODE_ROLE_BYTES + POLICY_BYTES * (len(ng.node_managed_policies) + 4)
                  + INLINE_POLICY_BYTES * len(ng.node_inline_policies) + 2 * per_resource)
    return total


def _user_data(plan: ClusterPlan, ng: NodeGroupPlan) -> str | None:
    """The launch template's user data (stacks/node_groups.py ``node_group_props``), the cluster's details of a custom
    AMI counted by :data:`CUSTOM_AMI_BYTES` instead."""
    max_pods = plan.addresses.max_pods(ng.name) if plan.addresses is not None and ng.ami_id else None
    kubelet = {**ng.kubelet.as_kubelet_config(), **({"maxPods": str(max_pods)} if max_pods else {})}
    ultra = ng.ultraserver
    return node_user_data(ng.hugepages_2mi_mib, ng.lustre_client, kubelet,
                          pre_bootstrap_commands=ng.pre_bootstrap_commands, extra_node_config=ng.node_config,
                          module_options=ultra.module_options if ultra else (),
                          local_storage=ultra.local_storage if ultra else None)


def _network_resources(plan: ClusterPlan) -> int:
    zones = len(set(plan.availability_zones))
    pods = 0 if plan.addresses is None or plan.addresses.pods is None else 1 + 5 * zones
    return network_resource_count(zones, plan.nat_gateways, plan.interface_endpoints,
                                  existing_vpc=plan.existing_vpc is not None) + pods


def cluster_fixed_bytes(plan: ClusterPlan, kubernetes: RenderedKubernetes) -> int:
    """The cluster stack besides the user node groups and the charts: the fixed part, the network, the add-ons and
    options, the system node group, the waits and the Helm releases."""
    per_resource = _per_resource(plan.name, plan.tags)
    network = _network_resources(plan)
    addons = [a for a in plan.addons if a.name not in BUILT_IN_ADDONS]
    values = sum(2 * len(a.configuration_values or "") for a in plan.addons)
    options = {
        "oidc": plan.with_oidc, "log_group": plan.log_retention_days is not None and bool(plan.log_types),
        "storage": plan.storage is not None, "karpenter": plan.karpenter is not None,
        "eni_configs": plan.addresses is not None and plan.addresses.pods is not None,
        "image_cache": plan.image_cache is not None and plan.image_cache.enabled,
        "training_image": plan.training_image is not None,
        "dashboard": plan.observability.dashboard_name is not None,
    }
    pool_groups = len(plan.karpenter.new_placement_groups) if plan.karpenter is not None else 0
    total = (CLUSTER_FIXED_BYTES + network * (NETWORK_BYTES_PER_RESOURCE + per_resource)
             + values + sum(ADDON_BYTES + per_resource + len(a.pod_identities) * (ADDON_ROLE_BYTES + 2 * per_resource)
                            for a in addons)
             + sum(OPTION_BYTES[k] for k, on in options.items() if on)
             + (DASHBOARD_GROUP_BYTES * len(plan.node_groups) if plan.observability.dashboard_name else 0)
             + OPTION_BYTES["access_entry"] * len(plan.access_entries)
             + OPTION_BYTES["pod_identity"] * len(plan.pod_identities)
             + OPTION_BYTES["pool_placement_group"] * pool_groups
             + (OPTION_BYTES["custom_resource_provider"] if pool_groups else 0)
             + FIXED_RESOURCES * per_resource)
    total += node_group_template_bytes(plan, plan.system)
    total += kubernetes.waits * (WAIT_BYTES + per_resource)
    total += sum(RELEASE_BYTES + per_resource + escaped_bytes(json.dumps(v, separators=(",", ":")))
                 for v in kubernetes.releases)
    return total


def nested_stack_bytes(plan: ClusterPlan, parameters: int) -> int:
    """A nested stack's resource in the cluster stack, with its ``DependsOn`` (what the node groups wait for) and
    ``parameters`` parameters."""
    ref = _reference_bytes(plan.name)
    return (NESTED_STACK_BYTES + node_dependencies(plan) * DEPENDS_ON_BYTES + parameters * (ref + PARAMETER_BYTES)
            + _per_resource(plan.name, plan.tags))


def node_groups_parameters(plan: ClusterPlan) -> int:
    """The most values of the cluster stack the nested stack of node groups can take, whichever groups it holds: the
    cluster's name and security group, the EFA group, the node role, the image cache's policy, every subnet, a
    custom AMI's cluster details. Counting them all keeps the cluster stack's bytes independent of which groups
    moved, so that a group appended to the spec never moves another."""
    subnets = len(set(plan.availability_zones)) + sum(len(ng.subnet_ids) for ng in plan.node_groups)
    return 5 + subnets + (3 if any(ng.ami_id for ng in plan.node_groups) else 0)


def stack_layout(plan: ClusterPlan, kubernetes: RenderedKubernetes) -> StackLayout:
    """Where the parts go so that every template stays within :data:`BUDGET_BYTES` (see the module docstring), or a
    :class:`SpecError` with the numbers and the fix."""
    per_resource = _per_resource(plan.name, plan.tags)
    charts = {c.id: c for c in kubernetes.charts}
    chart_bytes = {c.id: manifest_template_bytes(c, plan.name, per_resource) for c in kubernetes.charts}
    groups = {ng.name: node_group_template_bytes(plan, ng) for ng in plan.node_groups}
    parent = cluster_fixed_bytes(plan, kubernetes) + sum(chart_bytes.values()) + sum(groups.values())
    nested_charts: list[str] = []
    nested_groups: list[str] = []
    sizes: dict[str, int] = {}
    if parent > BUDGET_BYTES:
        nested_charts = [c.id for c in kubernetes.charts if c.movable]
        if nested_charts:
            parent += nested_stack_bytes(plan, 2) - sum(chart_bytes[c] for c in nested_charts)
            sizes[CHARTS] = NESTED_TEMPLATE_BYTES + 2 * _reference_bytes(plan.name) + sum(
                manifest_template_bytes(charts[c], plan.name, per_resource, nested=True) for c in nested_charts)
    if parent > BUDGET_BYTES and plan.node_groups:
        parent += nested_stack_bytes(plan, node_groups_parameters(plan))
        # room for what the groups efa-stack still allows would add to the cluster stack: appending one moves no other
        room = BUDGET_BYTES - GROWTH_PER_NODE_GROUP * max(0, MAX_USER_NODE_GROUPS - len(plan.node_groups))
        for ng in reversed(plan.node_groups):  # from the end
            if parent <= room:
                break
            nested_groups.insert(0, ng.name)
            parent -= groups[ng.name]
        sizes[NODE_GROUPS] = (NESTED_TEMPLATE_BYTES + node_groups_parameters(plan) * _reference_bytes(plan.name)
                              + sum(node_group_template_bytes(plan, plan.node_group(g), nested=True)
                                    for g in nested_groups))
    layout = StackLayout(tuple(nested_groups), tuple(nested_charts), {CLUSTER: parent, **sizes})
    problems = _problems(plan, layout, chart_bytes, charts)
    if problems:
        raise SpecError(plan.name, problems)
    return layout


def _problems(plan: ClusterPlan, layout: StackLayout, chart_bytes: Mapping[str, int],
              charts: Mapping[str, RenderedChart]) -> list[Problem]:
    limits = (f"efa-stack keeps each template within {BUDGET_BYTES:,} bytes (CloudFormation refuses a template over "
              f"{CFN_TEMPLATE_BODY_MAX_BYTES:,} bytes)")
    problems: list[Problem] = []
    parent = layout.bytes[CLUSTER]
    if parent > BUDGET_BYTES:
        staying = {c: b for c, b in chart_bytes.items() if c not in layout.nested_charts}
        by_field: dict[str, int] = {}
        for c, b in staying.items():
            by_field[charts[c].field] = by_field.get(charts[c].field, 0) + b
        largest = sorted(by_field.items(), key=lambda kv: -kv[1])
        shown = ", ".join(f"{f} {b:,}" for f, b in largest[:4])
        problems.append(Problem(
            largest[0][0] if largest else "managedNodeGroups", f"{parent:,} bytes",
            f"the cluster stack's template would be about {parent:,} bytes with every node group and every kept chart "
            f"in nested stacks; the charts that cannot move take, by spec field: {shown}; {limits}",
            "; or ".join([*(_shrink_advice(plan, parent - BUDGET_BYTES, by_field, staying) or [
                f"make what {f} renders {parent - BUDGET_BYTES:,} bytes smaller (its charts take {b:,})"
                for f, b in largest[:1] if b > parent - BUDGET_BYTES]), "split the nodes over several clusters (specs)"]),
        ))
    moved = layout.bytes.get(NODE_GROUPS, 0)
    if moved > BUDGET_BYTES:
        problems.append(Problem(
            "managedNodeGroups", f"{moved:,} bytes",
            f"the node groups in the nested stack would take about {moved:,} bytes; {limits}",
            "use fewer EKS node groups (fewer managedNodeGroups, or maxSize in fewer multiples of 450), or split the "
            "nodes over several clusters (specs)",
        ))
    return problems


def _shrink_advice(plan: ClusterPlan, excess: int, by_field: Mapping[str, int], staying: Mapping[str, int]) -> list[str]:
    """Changes that each make the cluster stack fit (``excess`` bytes over the budget): Kueue off, or fewer pools,
    where the charts they bring are large enough."""
    advice = []
    if by_field.get("scheduling.kueue", 0) >= excess:
        advice.append(f"set scheduling.kueue.enabled: false (its charts take {by_field['scheduling.kueue']:,} bytes)")
    pools = len(plan.karpenter.pools) if plan.karpenter is not None else 0
    pool_chart = next((b for c, b in staying.items() if c == POOLS_CHART), 0)
    if pools > 1 and pool_chart:
        each = pool_chart // pools + OPTION_BYTES["pool_placement_group"]
        fewer = -(-excess // each)
        if fewer < pools:
            advice.append(f"use at most {pools - fewer} karpenterNodePools (each takes about {each:,} bytes)")
    return advice


def templates_over_limit(assembly: Path) -> list[str]:
    """Every template of the cloud assembly at ``assembly`` (nested ones included) over CloudFormation's limit, as
    ``<file>: <bytes> bytes`` with the limit: what app.py refuses to leave behind, should the model ever
    under-count."""
    return [f"{p.name}: {p.stat().st_size:,} bytes, over CloudFormation's {CFN_TEMPLATE_BODY_MAX_BYTES:,}-byte "
            "limit for a template; report it to efa-stack (the template byte budget under-counted)"
            for p in sorted(assembly.glob("*.template.json")) if p.stat().st_size > CFN_TEMPLATE_BODY_MAX_BYTES]
