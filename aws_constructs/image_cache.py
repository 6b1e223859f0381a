"""An ECR pull through cache: a rule per upstream registry, and the policy the nodes need for a first pull.

A node pulls ``<account>.dkr.ecr.<region>.amazonaws.com/<prefix>/<repository>:<tag>``; ECR fetches the image from
the upstream once, into a repository ``<prefix>/<repository>`` it creates, and serves it from the private registry
after that. The identity that pulls first needs ``ecr:BatchImportUpstreamImage`` and, while the repository does not
exist, ``ecr:CreateRepository`` (Amazon ECR User Guide, "IAM permissions required to sync an upstream registry with
an Amazon ECR private registry"): ``node_policy`` grants both on the rules' repositories only,
for every node role to carry. The numbers and the threshold: :mod:`efa_stack.planning.image_cache`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Stack
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from constructs import Construct

from aws_constructs.security import acknowledge


@dataclass(frozen=True)
class CacheRuleProps:
    """One rule: images of ``upstream_url`` (``public.ecr.aws``) under the ECR repository prefix ``prefix``."""

    prefix: str
    upstream_registry: str
    """``AWS::ECR::PullThroughCacheRule`` ``UpstreamRegistry`` (``ecr-public``, ``k8s``, ``quay``)."""
    upstream_url: str


@dataclass(frozen=True)
class PullThroughCacheProps:
    """Props of :class:`PullThroughCache`."""

    rules: Sequence[CacheRuleProps]


class PullThroughCache(Construct):
    """The rules of :class:`PullThroughCacheProps` and ``node_policy``, the managed policy for the node roles."""

    def __init__(self, scope: Construct, id: str, props: PullThroughCacheProps) -> None:
        super().__init__(scope, id)
        self.props = props
        if not props.rules:
            raise ValueError("a pull through cache needs at least one rule")
        self.rules = [
            ecr.CfnPullThroughCacheRule(
                self, f"Rule-{r.upstream_registry}", ecr_repository_prefix=r.prefix,
                upstream_registry=r.upstream_registry, upstream_registry_url=r.upstream_url,
            )
            for r in props.rules
        ]
        stack = Stack.of(self)
        repositories = [stack.format_arn(service="ecr", resource="repository", resource_name=f"{r.prefix}/*")
                        for r in props.rules]
        self.node_policy = iam.ManagedPolicy(
            self, "NodePolicy", description="Nodes' first pulls through the cluster's ECR pull through cache",
            statements=[iam.PolicyStatement(
                actions=["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"], resources=repositories,
            )],
        )
        for r in props.rules:
            acknowledge(
                self.node_policy, "AwsSolutions-IAM5",
                "ECR creates one repository per upstream image under the rule's prefix; the nodes may import into "
                "those repositories only.",
                f"Resource::arn:<AWS::Partition>:ecr:{stack.region}:<AWS::AccountId>:repository/{r.prefix}/*",
            )
