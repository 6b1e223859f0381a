"""eksctl ``iam.serviceAccounts`` (IRSA): each entry is refused naming the ``iam.podIdentityAssociations`` entry to
write instead (efa_stack/spec/irsa.py), and that entry, written back into the file, is accepted."""

from __future__ import annotations

import re

import pytest
import yaml

from efa_stack.planning.plan import plan_from_file
from efa_stack.spec.errors import SpecError
from tests.support import BASE, ROOT, plan_of, problems_of

EKSCTL_13 = ROOT / "tests" / "fixtures" / "eksctl" / "eksctl-13-iamserviceaccounts.yaml"
ENTRY = re.compile(r"podIdentityAssociations entry instead: (\{.*?\})(?:;|$)")


def _proposed(fix: str) -> dict | None:
    m = ENTRY.search(fix)
    return yaml.safe_load(m.group(1)) if m else None


def _irsa_problems(text: str):
    return [p for p in problems_of(text) if p.field.startswith("iam.serviceAccounts")]


def test_service_account_with_policies_becomes_a_pod_identity_association():
    sa = ("iam:\n  withOIDC: true\n  serviceAccounts:\n"
          "    - metadata: {name: s3-reader, namespace: backend-apps, labels: {aws-usage: application}}\n"
          "      attachPolicyARNs: [arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess]\n"
          "      tags: {team: data}\n")
    (p,) = problems_of(BASE + sa)
    assert p.field == "iam.serviceAccounts[0]"
    assert "EKS Pod Identity" in p.message
    assert _proposed(p.fix) == {
        "namespace": "backend-apps", "serviceAccountName": "s3-reader",
        "permissionPolicyARNs": ["arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"], "tags": {"team": "data"},
    }
    assert "create the service account with your workload" in p.fix


def test_service_account_with_an_existing_role_keeps_it_and_says_what_it_must_trust():
    role = "arn:aws:iam::111122223333:role/app-role"
    (p,) = problems_of(BASE + f"iam:\n  serviceAccounts:\n    - metadata: {{name: app}}\n      attachRoleARN: {role}\n")
    assert _proposed(p.fix) == {"namespace": "default", "serviceAccountName": "app", "roleARN": role}
    assert "pods.eks.amazonaws.com" in p.fix


def test_inline_policies_are_named_not_invented():
    (p,) = problems_of(BASE + "iam:\n  serviceAccounts:\n    - metadata: {name: lbc, namespace: kube-system}\n"
                              "      wellKnownPolicies: {awsLoadBalancerController: true}\n")
    assert _proposed(p.fix) is None  # nothing complete to offer: the user makes the policy
    assert "wellKnownPolicies.awsLoadBalancerController" in p.fix and "<its ARN>" in p.fix


def test_a_proposal_that_would_be_refused_is_not_offered():
    # eksctl's example 13 names a role in account "123", which no IAM role ARN has
    (p,) = problems_of(BASE + "iam:\n  serviceAccounts:\n    - metadata: {name: some-app}\n"
                              "      attachRoleARN: arn:aws:iam::123:role/already-created-role-for-app\n")
    assert _proposed(p.fix) is None
    assert "its roleARN would not be valid" in p.message
    assert "with roleARN an IAM role ARN, arn:aws:iam::<12-digit account>:role/<name>" in p.fix


def test_eksctl_example_13_every_service_account_is_told_its_association():
    with pytest.raises(SpecError) as info:
        plan_from_file(EKSCTL_13)
    names = yaml.safe_load(EKSCTL_13.read_text())["iam"]["serviceAccounts"]
    told = [p for p in info.value.problems if p.field.startswith("iam.serviceAccounts")]
    assert [p.field for p in told] == [f"iam.serviceAccounts[{i}]" for i in range(len(names))]
    for p, sa in zip(told, names, strict=True):
        assert sa["metadata"]["name"] in p.fix


def test_every_proposed_association_is_accepted_when_written_back():
    # GIVEN every service account of eksctl's example 13 in an otherwise valid spec
    accounts = yaml.safe_load(EKSCTL_13.read_text())["iam"]["serviceAccounts"]
    text = BASE + "iam:\n  withOIDC: true\n  serviceAccounts: " + yaml.safe_dump(accounts, default_flow_style=True,
                                                                                    width=10**6)
    proposed = [e for e in (_proposed(p.fix) for p in _irsa_problems(text)) if e is not None]
    assert len(proposed) == 4  # s3-reader, ebs-csi-controller-sa, build-service, cache-access
    # WHEN the proposed entries replace them THEN the spec is accepted and plans those associations
    fixed = BASE + "iam:\n  withOIDC: true\n  podIdentityAssociations: " + yaml.safe_dump(
        proposed, default_flow_style=True, width=10**6)
    plan = plan_of(fixed)
    assert [(a.namespace, a.service_account) for a in plan.pod_identities] == [
        (e["namespace"], e["serviceAccountName"]) for e in proposed
    ]


@pytest.mark.parametrize("accounts", ["[{attachPolicyARNs: [arn:aws:iam::aws:policy/X]}]", "[s3-reader]", "s3-reader",
                                      "[{metadata: app}]"])
def test_fails_malformed_service_accounts_without_a_traceback(accounts):
    problems = _irsa_problems(BASE + f"iam:\n  serviceAccounts: {accounts}\n")
    assert problems and all("podIdentityAssociations" in p.fix for p in problems)
    assert all(_proposed(p.fix) is None for p in problems)
