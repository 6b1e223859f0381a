"""eksctl ``iam.serviceAccounts`` (IAM roles for service accounts, IRSA) told as what efa-stack builds instead: one
``iam.podIdentityAssociations`` entry per service account (EKS Pod Identity, whose agent efa-stack installs).

eksctl-io/eksctl@v0.230.0 pkg/apis/eksctl.io/v1alpha5/iam.go ``ClusterIAMServiceAccount`` (``metadata.name`` and
``namespace``, ``attachPolicyARNs``, ``wellKnownPolicies``, ``attachPolicy``, ``attachRoleARN``, ``roleName``,
``tags``, ...), defaults.go (namespace ``default`` when none is given), pkg/cfn/builder/iam_helper.go
``createWellKnownPolicies`` (``imageBuilder`` and ``ebsCSIController`` are AWS managed policies, the others inline
statements). eksctl's own move from IRSA to Pod Identity (pkg/actions/podidentityassociation/migrator.go) keeps each
role and makes it trust ``pods.eks.amazonaws.com``; a new role efa-stack creates trusts it already.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from pydantic import ValidationError

from efa_stack.spec.errors import Problem
from efa_stack.spec.models import ClusterPodIdentityAssociationSpec

# pkg/cfn/builder/iam.go: the AWS managed policies of these well-known policies.
WELL_KNOWN_MANAGED: dict[str, str] = {
    "imageBuilder": "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPowerUser",
    "ebsCSIController": "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy",
}
WELL_KNOWN_INLINE = ("autoScaler", "awsLoadBalancerController", "externalDNS", "certManager", "efsCSIController")
"""Well-known policies eksctl writes as inline statements: no managed policy to name."""

MESSAGE = ("efa-stack gives workloads their IAM roles through EKS Pod Identity (it installs the agent), not through "
           "IRSA service accounts")
_EXPECTED = {
    "roleARN": "an IAM role ARN, arn:aws:iam::<12-digit account>:role/<name>",
    "permissionPolicyARNs": "IAM policy ARNs, arn:aws:iam::aws:policy/<name> or arn:aws:iam::<account>:policy/<name>",
    "namespace": "a Kubernetes namespace name (lowercase letters, digits and '-', at most 63 characters)",
    "serviceAccountName": "a Kubernetes name (lowercase letters, digits and '-', at most 253 characters)",
    "roleName": "an IAM role name (at most 64 of letters, digits and +=,.@_-)",
    "tags": "tags of string keys and values",
}
TRUST = "pods.eks.amazonaws.com (sts:AssumeRole and sts:TagSession)"
AFTER = ("; create the service account with your workload, without the eks.amazonaws.com/role-arn annotation")


def flow(entry: dict[str, Any]) -> str:
    """``entry`` as one line of YAML flow style (what the fix tells the user to write)."""
    return yaml.safe_dump(entry, default_flow_style=True, sort_keys=False, width=math.inf).strip()


def service_account_problems(value: Any) -> list[Problem]:
    """One problem per ``iam.serviceAccounts`` entry, each naming the ``iam.podIdentityAssociations`` entry to
    write instead; a proposal is offered only once it passes the association's own checks."""
    if not isinstance(value, list):
        return [Problem("iam.serviceAccounts", value, MESSAGE,
                        "list the service accounts under iam.podIdentityAssociations (namespace, serviceAccountName, "
                        "permissionPolicyARNs or roleARN)")]
    return [_entry_problem(f"iam.serviceAccounts[{i}]", sa) for i, sa in enumerate(value)]


def _entry_problem(where: str, sa: Any) -> Problem:
    meta = sa.get("metadata") if isinstance(sa, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(sa, dict) or not isinstance(meta, dict) or not isinstance(name, str) or not name:
        return Problem(where, sa, MESSAGE + "; this entry names no service account (metadata.name)",
                       "write an iam.podIdentityAssociations entry: {namespace: <namespace>, serviceAccountName: "
                       "<name>, permissionPolicyARNs: [<policy ARNs>]}")
    namespace = meta.get("namespace") or "default"  # eksctl defaults.go
    entry: dict[str, Any] = {"namespace": namespace, "serviceAccountName": name}
    notes: list[str] = []
    policies = [a for a in sa.get("attachPolicyARNs") or [] if isinstance(a, str)]
    wanted = [k for k, on in (sa.get("wellKnownPolicies") or {}).items() if on] \
        if isinstance(sa.get("wellKnownPolicies"), dict) else []
    policies += [WELL_KNOWN_MANAGED[k] for k in wanted if k in WELL_KNOWN_MANAGED]
    inline = [f"wellKnownPolicies.{k}" for k in wanted if k in WELL_KNOWN_INLINE]
    if sa.get("attachPolicy"):
        inline.append("attachPolicy")
    role = sa.get("attachRoleARN")
    if role:
        entry["roleARN"] = role
        notes.append(f"the role must trust {TRUST}, as eksctl's migrate-to-pod-identity makes it")
        if policies or inline:
            notes.append("attach the entry's other policies to that role yourself")
    else:
        if policies:
            entry["permissionPolicyARNs"] = list(dict.fromkeys(policies))
        if isinstance(sa.get("roleName"), str):
            entry["roleName"] = sa["roleName"]
        if inline:
            notes.append(f"create a managed policy from eksctl's statements for {', '.join(inline)} and add its ARN "
                         "to permissionPolicyARNs")
    if isinstance(sa.get("tags"), dict) and sa["tags"]:
        entry["tags"] = sa["tags"]
    if sa.get("permissionsBoundary"):
        notes.append("efa-stack sets no permissions boundary on the roles it creates")
    shown = sa
    if "roleARN" not in entry and "permissionPolicyARNs" not in entry:
        fix = (f"write an iam.podIdentityAssociations entry {flow({**entry, 'permissionPolicyARNs': ['<its ARN>']})}: "
               + "; ".join(notes) + AFTER)
        return Problem(where, shown, MESSAGE, fix)
    try:
        ClusterPodIdentityAssociationSpec.model_validate(entry)
    except ValidationError as exc:
        bad = str(exc.errors()[0]["loc"][0])
        return Problem(where, shown, f"{MESSAGE}; its {bad} would not be valid there",
                       f"write an iam.podIdentityAssociations entry like {flow(entry)} with {bad} "
                       f"{_EXPECTED.get(bad, 'corrected')}" + "".join(f"; {n}" for n in notes) + AFTER)
    return Problem(where, shown, MESSAGE, f"write this iam.podIdentityAssociations entry instead: {flow(entry)}"
                   + "".join(f"; {n}" for n in notes) + AFTER)
