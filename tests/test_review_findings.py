"""Findings of the review of Karpenter, Kueue and the one-stack layout against their upstream sources, one group of
tests per finding, each written to fail before its fix. The upstream facts are cited beside the code they test
(aws_constructs/karpenter.py, k8s/karpenter.py) and in docs/design/karpenter.md."""

from __future__ import annotations

from functools import cache
from typing import Any

from efa_stack import contract
from tests.support import synth_spec


@cache
def _template() -> dict[str, Any]:
    (template,) = synth_spec("clusters/karpenter-p5.yaml").templates.values()
    resources: dict[str, Any] = template["Resources"]
    return resources


def _logical_ids(type_: str, prefix: str) -> list[str]:
    return [k for k, v in _template().items() if v["Type"] == type_ and k.startswith(prefix)]


def _karpenter_release() -> tuple[str, dict[str, Any]]:
    (item,) = [(k, v) for k, v in _template().items()
               if v["Type"] == "Custom::AWSCDK-EKS-HelmChart" and v["Properties"]["Release"] == contract.KARPENTER_RELEASE]
    return item


# --- the controller outlives its permissions, its queue and its nodes' access -------------------------------------


def test_the_karpenter_release_follows_its_policy_queue_rules_and_node_access():
    """The release must be created after, and so deleted before, everything the running controller uses: its IAM
    policy (without it the controller can neither launch nor terminate nodes nor remove its instance profiles), the
    interruption queue with its policy and rules, and the nodes' access entry. Without these DependsOn,
    CloudFormation deletes the policy in the first wave of a stack deletion, while the controller still has to
    terminate its nodes and clear its finalizers."""
    _, release = _karpenter_release()
    depends = set(release.get("DependsOn", []))
    wanted = {
        *_logical_ids("AWS::IAM::Policy", "KarpenterControllerPolicy"),
        *_logical_ids("AWS::SQS::Queue", "KarpenterInterruptionQueue"),
        *_logical_ids("AWS::SQS::QueuePolicy", "KarpenterInterruptionQueue"),
        *_logical_ids("AWS::EKS::AccessEntry", "KarpenterNodeAccessEntry"),
        *_logical_ids("AWS::Events::Rule", "Karpenter"),
    }
    assert len(wanted) == 9  # policy, queue, queue policy, access entry, five rules
    assert wanted <= depends, sorted(wanted - depends)
