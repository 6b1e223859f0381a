"""efa-stack's own rules, in the cdk-nag style: each is a pure function of one resource (and the
template it sits in, or one manifest) returning COMPLIANT, NON_COMPLIANT or NOT_APPLICABLE.

They cover what the AwsSolutions pack cannot know about EFA clusters:

- ``EFA1`` every EFA interface of a launch template carries the EFA security group;
- ``EFA2`` an EFA security group's all-traffic rules point only at itself;
- ``EFA3`` an EFA node group has a cluster placement group unless it runs on a reservation;
- ``EFA4`` no EFA node gets a public IP;
- ``K8S1`` every manifest fits the kubectl handler's 262,144-byte limit;
- ``K8S2`` only the device plugins run with host access, and each says why.

:func:`check_template` and :func:`check_manifests` apply them and return the findings.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from efa_stack import contract

KUBECTL_MANIFEST_LIMIT = 262_144
EFA_TYPES = ("efa", "efa-only")
HOST_ACCESS_REASON = contract.ANNOTATION_HOST_ACCESS_REASON


class Compliance(enum.Enum):
    COMPLIANT = "compliant"
    NON_COMPLIANT = "non-compliant"
    NOT_APPLICABLE = "not applicable"


C, N, NA = Compliance.COMPLIANT, Compliance.NON_COMPLIANT, Compliance.NOT_APPLICABLE

Template = dict[str, Any]
Resource = dict[str, Any]


@dataclass(frozen=True)
class Finding:
    rule: str
    where: str
    message: str


# --- helpers ---------------------------------------------------------------------------------------

def _resources(template: Template, type_: str) -> dict[str, Resource]:
    return {k: v for k, v in template.get("Resources", {}).items() if v.get("Type") == type_}


def _refers_to(value: Any, logical_id_prefix: str) -> bool:
    return logical_id_prefix in json.dumps(value)


def efa_security_group_ids(template: Template) -> list[str]:
    """Logical ids (or import names) of EFA security groups: groups with a self-referencing rule."""
    ids = [
        json.dumps({"Fn::GetAtt": [k, "GroupId"]})
        for k in _resources(template, "AWS::EC2::SecurityGroup")
        if k.startswith("EfaSecurityGroup")
    ]
    for kind, peer_key in (("AWS::EC2::SecurityGroupIngress", "SourceSecurityGroupId"),
                           ("AWS::EC2::SecurityGroupEgress", "DestinationSecurityGroupId")):
        for res in _resources(template, kind).values():
            p = res["Properties"]
            if p.get(peer_key) is not None and p.get(peer_key) == p.get("GroupId"):
                ids.append(json.dumps(p["GroupId"]))
    return sorted(set(ids))


# --- EFA1 ------------------------------------------------------------------------------------------

def efa_interfaces_carry_efa_group(launch_template: Resource, efa_group_marker: str) -> Compliance:
    """Every efa/efa-only interface lists a group whose reference contains ``efa_group_marker``."""
    nics = launch_template.get("Properties", {}).get("LaunchTemplateData", {}).get("NetworkInterfaces") or []
    efa = [n for n in nics if n.get("InterfaceType") in EFA_TYPES]
    if not efa:
        return NA
    return C if all(_refers_to(n.get("Groups", []), efa_group_marker) for n in efa) else N


# --- EFA2 ------------------------------------------------------------------------------------------

def efa_group_all_traffic_only_to_itself(group_id: str, template: Template) -> Compliance:
    """All-protocol rules of the group have the group itself as the only peer."""
    rules = []
    for kind, peer_key in (("AWS::EC2::SecurityGroupIngress", "SourceSecurityGroupId"),
                           ("AWS::EC2::SecurityGroupEgress", "DestinationSecurityGroupId")):
        for res in _resources(template, kind).values():
            p = res["Properties"]
            if p.get("GroupId") == {"Fn::GetAtt": [group_id, "GroupId"]}:
                rules.append((p.get("IpProtocol"), p.get(peer_key), p.get("CidrIp") or p.get("CidrIpv6")))
    group = template["Resources"][group_id]["Properties"]
    for r in group.get("SecurityGroupIngress", []) + group.get("SecurityGroupEgress", []):
        if r.get("Description") == "Disallow all traffic":
            continue
        rules.append((str(r.get("IpProtocol")), r.get("SourceSecurityGroupId") or r.get("DestinationSecurityGroupId"),
                      r.get("CidrIp") or r.get("CidrIpv6")))
    all_traffic = [r for r in rules if str(r[0]) == "-1"]
    if not all_traffic:
        return NA
    self_ref = {"Fn::GetAtt": [group_id, "GroupId"]}
    if "SecurityGroupEgress" not in group:
        return N  # EC2 would add its default allow-all egress rule
    return C if all(peer == self_ref and cidr is None for _, peer, cidr in all_traffic) else N


# --- EFA3 ------------------------------------------------------------------------------------------

def efa_launch_template_placed_or_reserved(launch_template: Resource) -> Compliance:
    data = launch_template.get("Properties", {}).get("LaunchTemplateData", {})
    nics = data.get("NetworkInterfaces") or []
    if not any(n.get("InterfaceType") in EFA_TYPES for n in nics):
        return NA
    if data.get("Placement", {}).get("GroupName"):
        return C
    target = data.get("CapacityReservationSpecification", {}).get("CapacityReservationTarget", {})
    return C if target.get("CapacityReservationId") else N


# --- EFA4 ------------------------------------------------------------------------------------------

def efa_nodes_get_no_public_ip(launch_template: Resource) -> Compliance:
    data = launch_template.get("Properties", {}).get("LaunchTemplateData", {})
    nics = data.get("NetworkInterfaces") or []
    if not any(n.get("InterfaceType") in EFA_TYPES for n in nics):
        return NA
    return N if any(n.get("AssociatePublicIpAddress") for n in nics) else C


# --- K8S1 ------------------------------------------------------------------------------------------

def manifest_fits_kubectl_handler(objects: list[dict[str, Any]]) -> Compliance:
    """The kubectl handler keeps the applied manifest (a JSON list) in an annotation of at most 256 KiB."""
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
    reason = (obj.get("metadata", {}).get("annotations") or {}).get(HOST_ACCESS_REASON, "")
    return C if name in set(allowed_names) and len(reason) >= 20 else N


# --- runners ---------------------------------------------------------------------------------------

def check_template(template: Template, stack: str = "stack") -> list[Finding]:
    findings: list[Finding] = []
    groups = efa_security_group_ids(template)
    for gid_json in groups:
        gid = json.loads(gid_json)
        if isinstance(gid, dict) and "Fn::GetAtt" in gid:
            logical = gid["Fn::GetAtt"][0]
            if efa_group_all_traffic_only_to_itself(logical, template) is N:
                findings.append(Finding("EFA2", f"{stack}/{logical}", "all-traffic rules must point only at the group itself"))
    for lid, lt in _resources(template, "AWS::EC2::LaunchTemplate").items():
        checks: list[tuple[str, Callable[[], Compliance], str]] = [
            ("EFA1", lambda: efa_interfaces_carry_efa_group(lt, "EfaSecurityGroup"), "EFA interfaces must carry the EFA security group"),
            ("EFA3", lambda: efa_launch_template_placed_or_reserved(lt), "EFA nodes need a placement group or a reservation"),
            ("EFA4", lambda: efa_nodes_get_no_public_ip(lt), "EFA nodes must not get public IPs"),
        ]
        for rule, fn, message in checks:
            if fn() is N:
                findings.append(Finding(rule, f"{stack}/{lid}", message))
    return findings


def check_manifests(charts: dict[str, list[dict[str, Any]]], allowed_host_access: Iterable[str]) -> list[Finding]:
    findings: list[Finding] = []
    allowed = list(allowed_host_access)
    for chart, objects in charts.items():
        if manifest_fits_kubectl_handler(objects) is N:
            findings.append(Finding("K8S1", chart, f"manifest is {len(json.dumps(objects))} bytes, over {KUBECTL_MANIFEST_LIMIT}"))
        for obj in objects:
            if host_access_is_justified(obj, allowed) is N:
                name = obj.get("metadata", {}).get("name")
                findings.append(Finding("K8S2", f"{chart}/{obj.get('kind')}/{name}", "host access without an allowed reason"))
    return findings
