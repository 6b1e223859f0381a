"""Acknowledged security findings, each on the narrowest construct with its reason.

cdk-nag v3 reports through CDK's policy validation; ``Validations.of(construct).acknowledge`` records
that a finding was reviewed. Every acknowledgement in the project goes through :func:`acknowledge`
so that a reviewer can find them all in one place (``grep acknowledge(``).
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

PACK = "AwsSolutions"


def acknowledge(construct: IConstruct, rule: str, reason: str, finding: str | None = None, *, pack: str = PACK) -> None:
    """Acknowledge ``rule`` (e.g. ``AwsSolutions-IAM4``) on ``construct`` only.

    ``finding`` narrows it to one finding of the rule, e.g. ``Policy::arn:<AWS::Partition>:iam::aws:policy/X``.
    ``pack`` is the cdk-nag pack that reports the rule: CDK matches an acknowledgement to a violation by
    ``<plugin name>::<rule id>`` (``EfaStack`` for the project's own rules, efa_stack/checks/nag_pack.py).
    """
    if len(reason) < 20:
        raise ValueError(f"acknowledging {rule} needs a reason a reviewer can check, got {reason!r}")
    rule_id = f"{rule}[{finding}]" if finding else rule
    Validations.of(construct).acknowledge(Acknowledgment(id=f"{pack}::{rule_id}", reason=reason))


def managed_policy(name: str) -> str:
    """The finding id cdk-nag uses for an AWS managed policy attached to a role."""
    return f"Policy::arn:<AWS::Partition>:iam::aws:policy/{name}"
