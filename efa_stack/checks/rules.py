"""efa-stack's own rules, in the cdk-nag style: pure functions of one resource or Kubernetes object.

``EFA1``-``EFA4`` cover EFA security groups, placement and public IPs, ``K8S1``-``K8S2`` manifest size and
host access; each returns COMPLIANT, NON_COMPLIANT or NOT_APPLICABLE from resolved properties.
:class:`efa_stack.checks.nag_pack.EfaStackChecks` runs them on every synth; :func:`check_templates` and
:func:`check_manifests` apply them to templates or ``dist/``. The rule table: docs/design/checks.md.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from efa_stack import contract

KUBECTL_MANIFEST_LIMIT = 262_144



class Compliance(enum.Enum):
    COMPLIANT = "compliant"
    NON_COMPLIANT = "non-compliant"
    NOT_APPLICABLE = "not applicable"


C, N, NA = Compliance.COMPLIANT, Compliance.NON_COMPLIANT, Compliance.NOT_APPLICABLE

Template = dict[str, Any]
Resource = dict[str, Any]


@dataclass(frozen=True)
class RuleFinding:
    rule: str
    where: str
    message: str


# --- the synthesized app: templates by stack, security groups and their rules ----------------------

EC2_SECURITY_GROUP = "AWS::EC2::SecurityGroup"
EC2_SECURITY_GROUP_INGRESS = "AWS::EC2::SecurityGroupIngress"
EC2_SECURITY_GROUP_EGRESS = "AWS::EC2::SecurityGroupEgress"
EC2_LAUNCH_TEMPLATE = "AWS::EC2::LaunchTemplate"
# aws-cdk-lib@2.275.0 aws-eks-v2/lib/k8s-manifest.js: KubernetesManifest.RESOURCE_TYPE; its ``Manifest``
# property is the JSON list of objects the kubectl handler applies.
KUBERNETES_MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"
NESTED_STACK = "AWS::CloudFormation::Stack"
# EC2 API reference, IpPermission.IpProtocol: "Use -1 to specify all protocols".
ALL_TRAFFIC = "-1"

GroupRef = tuple[str, str]
"""A security group of the app: (stack, logical id)."""


@dataclass(frozen=True)
class SecurityGroupRule:
    """One security-group rule, inline or a separate Ingress/Egress resource."""

    direction: str  # "ingress" | "egress"
    protocol: str
    peer: GroupRef | None  # the peer group when it is one of the app's groups
    peer_value: Any  # the peer as written (group reference, CIDR or prefix list)


@dataclass(frozen=True)
class App:
    """The synthesized templates of one app, by stack name: what CloudFormation receives.

    References between stacks (``Fn::ImportValue`` of an export, a nested stack's parameter) are followed, so a rule
    can ask which security group an interface of a launch template names, in the cluster stack or a nested one.
    """

    templates: Mapping[str, Template]

    def resources(self, type_: str) -> Iterable[tuple[str, str, Resource]]:
        for stack, template in sorted(self.templates.items()):
            for lid, res in (template.get("Resources") or {}).items():
                if res.get("Type") == type_:
                    yield stack, lid, res

    def resolve_group(self, value: Any, stack: str) -> GroupRef | None:
        """The app's security group ``value`` (as written in ``stack``) refers to, if any."""
        if isinstance(value, dict) and len(value) == 1:
            (fn, arg), = value.items()
            if fn == "Fn::ImportValue" and isinstance(arg, str):
                for other, template in self.templates.items():
                    for output in (template.get("Outputs") or {}).values():
                        if (output.get("Export") or {}).get("Name") == arg:
                            return self.resolve_group(output.get("Value"), other)
                return None
            if fn == "Ref" and isinstance(arg, str) and arg in (self.templates.get(stack, {}).get("Parameters") or {}):
                return self._passed_to(arg)
            lid = arg if fn == "Ref" else arg[0] if fn == "Fn::GetAtt" and arg[1:] == ["GroupId"] else None
            res = (self.templates.get(stack, {}).get("Resources") or {}).get(lid) if isinstance(lid, str) else None
            if res is not None and isinstance(lid, str) and res.get("Type") == EC2_SECURITY_GROUP:
                return stack, lid
        return None

    def _passed_to(self, parameter: str) -> GroupRef | None:
        """The group a nested stack's ``parameter`` receives: aws-cdk-lib passes a value of the parent stack to a
        nested stack as a parameter that the parent's ``AWS::CloudFormation::Stack`` resource sets (core/lib/
        nested-stack.ts; one parameter name per referenced value, the same in every nested stack that uses it)."""
        for other, _, res in self.resources(NESTED_STACK):
            value = (res.get("Properties") or {}).get("Parameters", {}).get(parameter)
            if value is not None:
                return self.resolve_group(value, other)
        return None

    def group(self, ref: GroupRef) -> Resource:
        return self.templates[ref[0]]["Resources"][ref[1]]

    def rules_of(self, ref: GroupRef) -> list[SecurityGroupRule]:
        """Every rule of the group: inline ones and separate Ingress/Egress resources anywhere in the app."""
        stack = ref[0]
        props = self.group(ref).get("Properties") or {}
        rules = [self._rule("ingress", r, "SourceSecurityGroupId", stack) for r in props.get("SecurityGroupIngress") or []]
        rules += [self._rule("egress", r, "DestinationSecurityGroupId", stack) for r in props.get("SecurityGroupEgress") or []]
        for type_, direction, peer_key in ((EC2_SECURITY_GROUP_INGRESS, "ingress", "SourceSecurityGroupId"),
                                           (EC2_SECURITY_GROUP_EGRESS, "egress", "DestinationSecurityGroupId")):
            for other, _, res in self.resources(type_):
                p = res.get("Properties") or {}
                if self.resolve_group(p.get("GroupId"), other) == ref:
                    rules.append(self._rule(direction, p, peer_key, other))
        return rules

    def _rule(self, direction: str, props: dict[str, Any], peer_key: str, stack: str) -> SecurityGroupRule:
        peer_value = next(
            (props[k] for k in (peer_key, "CidrIp", "CidrIpv6", "SourcePrefixListId", "DestinationPrefixListId")
             if props.get(k) is not None),
            None,
        )
        peer = self.resolve_group(props[peer_key], stack) if props.get(peer_key) is not None else None
        return SecurityGroupRule(direction, str(props.get("IpProtocol")), peer, peer_value)

    def is_efa_group(self, ref: GroupRef) -> bool:
        """EFA needs a group that allows all traffic from and to itself (EC2 user guide, "Get started with
        EFA and NCCL", step "Prepare an EFA-enabled security group": all inbound and all outbound traffic
        to and from the security group itself)."""
        self_rules = {r.direction for r in self.rules_of(ref) if r.protocol == ALL_TRAFFIC and r.peer == ref}
        return self_rules == {"ingress", "egress"}


def _efa_interfaces(launch_template: Resource) -> list[dict[str, Any]]:
    data = (launch_template.get("Properties") or {}).get("LaunchTemplateData") or {}
    return [n for n in data.get("NetworkInterfaces") or [] if n.get("InterfaceType") in contract.EFA_INTERFACE_TYPES]


# --- EFA1 ------------------------------------------------------------------------------------------

def efa_interfaces_carry_efa_group(launch_template: Resource, stack: str, app: App) -> Compliance:
    """Every efa/efa-only interface lists a security group that allows all traffic to and from itself."""
    efa = _efa_interfaces(launch_template)
    if not efa:
        return NA
    for nic in efa:
        groups = [app.resolve_group(g, stack) for g in nic.get("Groups") or []]
        if not any(ref is not None and app.is_efa_group(ref) for ref in groups):
            return N
    return C


# --- EFA2 ------------------------------------------------------------------------------------------

def efa_group_all_traffic_only_to_itself(group: GroupRef, app: App) -> Compliance:
    """A group with a self-referencing all-traffic rule (an EFA group) has no other all-traffic peer,
    and lists its egress rules (EC2 gives a group without any its default allow-all egress rule)."""
    all_traffic = [r for r in app.rules_of(group) if r.protocol == ALL_TRAFFIC]
    if not any(r.peer == group for r in all_traffic):
        return NA
    if "SecurityGroupEgress" not in (app.group(group).get("Properties") or {}):
        return N
    return C if all(r.peer == group for r in all_traffic) else N


# --- EFA3 ------------------------------------------------------------------------------------------

def efa_launch_template_placed_or_reserved(launch_template: Resource) -> Compliance:
    """EFA nodes sit in a cluster placement group, or in a capacity reservation (whose instances are
    placed as the reservation was made; a new placement group would lose its capacity)."""
    if not _efa_interfaces(launch_template):
        return NA
    data = launch_template["Properties"]["LaunchTemplateData"]
    if data.get("Placement", {}).get("GroupName"):
        return C
    target = data.get("CapacityReservationSpecification", {}).get("CapacityReservationTarget", {})
    return C if target.get("CapacityReservationId") or target.get("CapacityReservationResourceGroupArn") else N


# --- EFA4 ------------------------------------------------------------------------------------------

def efa_nodes_get_no_public_ip(launch_template: Resource) -> Compliance:
    """EFA nodes have several interfaces and must not ask for a public IPv4 address (EC2 API reference,
    InstanceNetworkInterfaceSpecification.AssociatePublicIpAddress: only for eth0, and "You cannot
    specify more than one network interface in the request")."""
    if not _efa_interfaces(launch_template):
        return NA
    nics = launch_template["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]
    return N if any(n.get("AssociatePublicIpAddress") is True for n in nics) else C


# --- K8S1 ------------------------------------------------------------------------------------------

def manifest_fits_kubectl_handler(objects: list[dict[str, Any]]) -> Compliance:
    """The kubectl handler applies client-side (aws-cdk-lib@2.275.0 custom-resource-handlers/dist/aws-eks-v2/
    kubectl-handler/apply/__init__.py: ``kubectl create --save-config`` / ``kubectl apply``), which keeps each
    object in its last-applied-configuration annotation; an object's annotations may total 262,144 bytes
    (k8s.io/apimachinery pkg/api/validation/objectmeta.go, TotalAnnotationSizeLimitB). The whole list must
    fit, a stricter bound than each object."""
    if not objects:
        return NA
    return C if len(json.dumps(objects)) < KUBECTL_MANIFEST_LIMIT else N


# --- K8S2 ------------------------------------------------------------------------------------------

def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {}) or {}
    if obj.get("kind") == "Pod":
        return [spec]
    if obj.get("kind") == "MPIJob":
        return [r.get("template", {}).get("spec", {}) for r in (spec.get("mpiReplicaSpecs") or {}).values()]
    template = (spec.get("template") or {}).get("spec")
    if template is None and obj.get("kind") == "CronJob":
        template = spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec")
    return [template] if template is not None else []


def _host_access(pod: dict[str, Any]) -> list[str]:
    found = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            found.append(key)
    for v in pod.get("volumes", []) or []:
        if "hostPath" in v:
            found.append(f"hostPath {v['hostPath'].get('path')}")
    for c in (pod.get("containers", []) or []) + (pod.get("initContainers", []) or []):
        sc = c.get("securityContext", {}) or {}
        if sc.get("privileged"):
            found.append(f"privileged container {c.get('name')}")
    return found


def host_access_is_justified(obj: dict[str, Any], allowed_names: Iterable[str]) -> Compliance:
    """Host access only for the listed workloads, each annotated with the reason."""
    if not any(_host_access(pod) for pod in _pod_specs(obj)):
        return NA
    name = obj.get("metadata", {}).get("name", "")
    reason = (obj.get("metadata", {}).get("annotations") or {}).get(contract.ANNOTATION_HOST_ACCESS_REASON, "")
    return C if name in set(allowed_names) and len(reason) >= 20 else N


# --- manifests the cluster's kubectl handler applies -------------------------------------------------

def manifest_objects(manifest: Any) -> list[dict[str, Any]]:
    """The objects of a kubectl-handler resource's ``Manifest`` property.

    The property is a JSON list, as a string, or as an ``Fn::Join`` when an object embeds a value known
    only at deploy time (a file system id). Such a value is replaced by a placeholder as long as its
    CloudFormation expression, so sizes stay comparable. Anything else raises an error.
    """
    if isinstance(manifest, dict) and set(manifest) == {"Fn::Join"}:
        sep, parts = manifest["Fn::Join"]
        manifest = sep.join(p if isinstance(p, str) else "?" * len(json.dumps(p)) for p in parts)
    if not isinstance(manifest, str):
        raise TypeError(f"Manifest is neither a JSON string nor an Fn::Join of one: {json.dumps(manifest)[:200]}")
    objects = json.loads(manifest)
    if not isinstance(objects, list) or not all(isinstance(o, dict) for o in objects):
        raise ValueError("Manifest is not a JSON list of Kubernetes objects")
    return objects


def object_name(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"


# --- runners ---------------------------------------------------------------------------------------

MESSAGES = {
    "EFA1": "EFA interfaces must carry the EFA security group (all traffic to and from itself)",
    "EFA2": "an EFA security group's all-traffic rules must point only at the group itself, with egress listed",
    "EFA3": "EFA nodes need a cluster placement group or a capacity reservation",
    "EFA4": "EFA nodes must not get public IPs",
    "K8S1": f"a manifest must fit the kubectl handler's {KUBECTL_MANIFEST_LIMIT}-byte annotation",
    "K8S2": "host access only for the allowed workloads, each with a reason",
}


def check_templates(templates: Mapping[str, Template], allowed_host_access: Iterable[str] = ()) -> list[RuleFinding]:
    """Every rule over the synthesized templates of one app (``stack name -> template``)."""
    app = App(dict(templates))
    findings: list[RuleFinding] = []
    for stack, lid, _ in app.resources(EC2_SECURITY_GROUP):
        if efa_group_all_traffic_only_to_itself((stack, lid), app) is N:
            findings.append(RuleFinding("EFA2", f"{stack}/{lid}", MESSAGES["EFA2"]))
    for stack, lid, lt in app.resources(EC2_LAUNCH_TEMPLATE):
        for rule, result in (("EFA1", efa_interfaces_carry_efa_group(lt, stack, app)),
                             ("EFA3", efa_launch_template_placed_or_reserved(lt)),
                             ("EFA4", efa_nodes_get_no_public_ip(lt))):
            if result is N:
                findings.append(RuleFinding(rule, f"{stack}/{lid}", MESSAGES[rule]))
    allowed = list(allowed_host_access)
    for stack, lid, res in app.resources(KUBERNETES_MANIFEST):
        objects = manifest_objects((res.get("Properties") or {}).get("Manifest"))
        findings += [RuleFinding(f.rule, f"{stack}/{lid}/{f.where}", f.message)
                     for f in check_manifests({"": objects}, allowed)]
    return findings


def check_manifests(charts: dict[str, list[dict[str, Any]]], allowed_host_access: Iterable[str]) -> list[RuleFinding]:
    findings: list[RuleFinding] = []
    allowed = list(allowed_host_access)
    for chart, objects in charts.items():
        if manifest_fits_kubectl_handler(objects) is N:
            findings.append(RuleFinding("K8S1", chart, f"manifest is {len(json.dumps(objects))} bytes, over {KUBECTL_MANIFEST_LIMIT}"))
        for obj in objects:
            if host_access_is_justified(obj, allowed) is N:
                where = f"{chart}/{object_name(obj)}" if chart else object_name(obj)
                findings.append(RuleFinding("K8S2", where, "host access without an allowed reason"))
    return findings
