"""Images at scale: when a job starts on more nodes than a public registry serves in time, its images come through
an ECR pull through cache of the cluster's own account (:func:`image_cache_plan`).

The numbers behind the threshold:

- Amazon ECR Public User Guide, "Amazon ECR Public service quotas": *Rate of image pulls to AWS resources*, 10 per
  second, not adjustable ("image pulls per second to resources running on Amazon ECS, Fargate, or Amazon EC2").
  The kubelet's credential provider authenticates to private ECR registries only, so nodes pull from ECR Public
  without a token, as an AWS resource.
- Kubernetes pkg/kubelet/kubelet.go ``imageBackOffPeriod = time.Second * 10``: the initial period of the kubelet's
  exponential back-off for image pulls. A node whose pull is refused waits 10 s, then longer.

So a job whose workers all start one ECR Public image at once on more than 10 x 10 = 100 nodes
(:data:`CACHE_THRESHOLD_NODES`) has nodes in image pull back-off before the first second of pulls has drained: at
1,000 nodes the pulls alone take 100 s and, with back-off, minutes. Through the cache the nodes pull from the
cluster's private registry (Amazon ECR User Guide, "Amazon ECR service quotas": *Rate of BatchGetImage requests*
2,000 per second, adjustable), over the VPC's ECR interface endpoints, with the layers from S3 through the VPC's
gateway endpoint, so that neither the pulls nor the bytes cross the NAT gateway (Amazon VPC User Guide, "NAT
gateway basics": 5 Gbps, scaling up to 100 Gbps). ECR pulls each image once from the upstream (AWS IP addresses,
not the cluster's NAT; Amazon ECR User Guide, "Sync an upstream registry with an Amazon ECR private registry").

Only upstreams that need no credentials are cached: Amazon ECR Public, the Kubernetes registry and Quay (same
guide; each an ``AWS::ECR::PullThroughCacheRule`` ``UpstreamRegistry`` value). Pull through cache rules cannot be
created in the China and AWS GovCloud (US) Regions (same guide, "Considerations").

The stack rewrites the images it applies (``<account>.dkr.ecr.<region>.<suffix>/<prefix>/<repository>``, the account
from CloudFormation's ``AWS::AccountId``); ``dist/`` keeps the public references, since no account is known at
synth and the rule exists only where ``cdk deploy`` made it (docs/design/scale.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from efa_stack import names
from efa_stack.planning.nccl import NcclJobPlan
from efa_stack.planning.training import TrainingJobPlan

ECR_PUBLIC_PULLS_PER_SECOND = 10
"""ECR Public: rate of image pulls to AWS resources, per second (not adjustable)."""
KUBELET_IMAGE_BACKOFF_S = 10
"""The kubelet's first image pull back-off, seconds."""
CACHE_THRESHOLD_NODES = ECR_PUBLIC_PULLS_PER_SECOND * KUBELET_IMAGE_BACKOFF_S
"""A job on more nodes than this pulls through the cache: the pulls ECR Public serves before the first refused node
would retry."""
ECR_PRIVATE_BATCH_GET_IMAGE_PER_SECOND = 2000
"""Amazon ECR: rate of BatchGetImage requests per second (one per image pull; adjustable)."""
NAT_GATEWAY_MAX_GBPS = 100
"""One NAT gateway scales up to 100 Gbps."""

UPSTREAMS: dict[str, str] = {
    "public.ecr.aws": "ecr-public",
    "registry.k8s.io": "k8s",
    "quay.io": "quay",
}
"""Registry host -> ``UpstreamRegistry`` of the pull through cache rule (the ones that need no credentials)."""
UNSUPPORTED_REGION_PREFIXES = ("cn-", "us-gov-")


@dataclass(frozen=True)
class CacheRule:
    """One pull through cache rule: images of ``upstream`` (a registry host) under ECR repository ``prefix``."""

    upstream: str
    registry: str
    """``AWS::ECR::PullThroughCacheRule`` ``UpstreamRegistry`` (``ecr-public``)."""
    prefix: str
    """``EcrRepositoryPrefix`` (:func:`efa_stack.names.ecr_cache_prefix`)."""


@dataclass(frozen=True)
class ScaledImage:
    """A job image that ``nodes`` nodes of ``node_group`` start at once."""

    image: str
    nodes: int
    node_group: str


@dataclass(frozen=True)
class ImageCachePlan:
    """The cluster's pull through cache: the rules, and the job images at scale that made it."""

    region: str
    rules: tuple[CacheRule, ...]
    images: tuple[ScaledImage, ...]
    """The job images of a cached upstream on more than :data:`CACHE_THRESHOLD_NODES` nodes."""
    interface_endpoints: bool | None
    """Whether the VPC has the ECR interface endpoints; None: an existing VPC (its routes are the user's)."""
    nat_gateways: int = 1

    @property
    def enabled(self) -> bool:
        return bool(self.rules)

    def rule_for(self, image: str) -> CacheRule | None:
        """The rule ``image`` is pulled through, or None (another registry)."""
        host = image.split("/", 1)[0] if "/" in image else ""
        return next((r for r in self.rules if r.upstream == host), None)

    def registry_host(self, account: str) -> str:
        """The private registry of ``account`` in the cluster's region."""
        return f"{account}.dkr.ecr.{self.region}.amazonaws.com"

    def cached(self, image: str, account: str) -> str:
        """``image`` through its rule (``account`` may be a CloudFormation token); unchanged without one."""
        rule = self.rule_for(image)
        if rule is None:
            return image
        return f"{self.registry_host(account)}/{rule.prefix}/{image.split('/', 1)[1]}"

    def summary_lines(self) -> list[str]:
        lines = []
        for s in self.images:
            seconds = -(-s.nodes // ECR_PUBLIC_PULLS_PER_SECOND)
            lines.append(
                f"  images at scale: {s.nodes} nodes of {s.node_group} start {s.image} at once; ECR Public serves "
                f"{ECR_PUBLIC_PULLS_PER_SECOND} pulls/s to AWS resources (not adjustable): {seconds} s of pulls, nodes "
                f"past the {CACHE_THRESHOLD_NODES}th wait out the kubelet's {KUBELET_IMAGE_BACKOFF_S} s back-off and more"
            )
        if not self.enabled:
            lines.append(f"    no pull through cache in {self.region} (ECR offers none in the China and GovCloud "
                         "Regions): copy the image into a private ECR repository and name it in the spec")
            return lines
        for r in self.rules:
            lines.append(f"    pulled through ECR pull through cache {r.prefix} ({r.upstream}): the cluster's private "
                         f"registry serves {ECR_PRIVATE_BATCH_GET_IMAGE_PER_SECOND:,} pulls/s")
        if self.interface_endpoints is None:
            path = "over the existing VPC's routes"
        elif self.interface_endpoints:
            path = "over the ECR interface endpoints and the S3 gateway endpoint (layers), not the NAT gateway"
        else:
            path = ("with the layers over the S3 gateway endpoint, the ECR API over the NAT gateway "
                    "(vpc.interfaceEndpoints is false)")
        nodes = max(s.nodes for s in self.images)
        lines.append(f"    {path}; from ECR Public every node's layers would cross the NAT gateway "
                     f"(at most {NAT_GATEWAY_MAX_GBPS} Gbps: {nodes * 8 // NAT_GATEWAY_MAX_GBPS} s per GB of image "
                     f"for {nodes} nodes)")
        lines.append("    dist/ keeps the public image references (no account at synth; the rule is the stack's)")
        return lines


def upstream_of(image: str) -> str | None:
    """The cached upstream host of ``image``, or None (another registry, or a Docker Hub name without a host)."""
    if "/" not in image:
        return None
    host = image.split("/", 1)[0]
    return host if host in UPSTREAMS else None


def image_cache_plan(
    cluster: str, region: str, jobs: Sequence[ScaledImage], *, interface_endpoints: bool | None, nat_gateways: int = 1,
) -> ImageCachePlan | None:
    """The pull through cache for ``jobs`` (each job's image and the nodes that start it at once), or None when no
    job starts an image of a cached upstream on more than :data:`CACHE_THRESHOLD_NODES` nodes."""
    scaled = tuple(j for j in jobs if j.nodes > CACHE_THRESHOLD_NODES and upstream_of(j.image) is not None)
    if not scaled:
        return None
    supported = not region.startswith(UNSUPPORTED_REGION_PREFIXES)
    hosts = sorted({h for j in scaled if (h := upstream_of(j.image)) is not None})
    rules = tuple(CacheRule(h, UPSTREAMS[h], names.ecr_cache_prefix(cluster, UPSTREAMS[h])) for h in hosts) \
        if supported else ()
    return ImageCachePlan(region=region, rules=rules, images=scaled, interface_endpoints=interface_endpoints,
                          nat_gateways=nat_gateways)


def job_images(nccl_job: NcclJobPlan | None, training_jobs: Sequence[TrainingJobPlan]) -> list[ScaledImage]:
    """The image of every job with the nodes its workers start it on: the NCCL test's workers, each training job's
    ``nnodes``."""
    out = [ScaledImage(nccl_job.image, nccl_job.workers, nccl_job.node_group)] if nccl_job is not None else []
    return out + [ScaledImage(j.image, j.nnodes, j.node_group) for j in training_jobs]
