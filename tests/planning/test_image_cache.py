"""Images at scale (efa_stack/planning/image_cache.py): a job that starts an ECR Public image on more nodes than ECR
Public serves in the kubelet's first back-off pulls it through an ECR pull through cache of the cluster's account;
the stack rewrites the image (tests/stacks/test_image_cache.py), dist/ keeps the public reference."""

from __future__ import annotations

from typing import Any

import pytest

from efa_stack import names
from efa_stack.planning.image_cache import CACHE_THRESHOLD_NODES, ScaledImage, image_cache_plan
from efa_stack.planning.plan import plan_from_file, plan_from_text
from tests.builders import cluster, node_group
from tests.support import CLUSTERS

SCALE = "scale-1000-p5.yaml"
NCCL_IMAGE = "public.ecr.aws/hpc-cloud/nccl-tests"


def nodes_spec(nodes: int, image: str | None = None, region: str = "us-west-2", **sections: Any) -> str:
    zones = (f"{region}a", f"{region}b")
    spec = cluster(node_group("p5", min_size=nodes, desired=nodes, max_size=nodes, zones=zones[:1]),
                   name="big", region=region, version="1.35", zones=zones)
    return spec.with_(**({"ncclTest": {"image": image}} if image else {}), **sections).text


# --- the plan ---------------------------------------------------------------------------------------------------


def test_the_1000_node_spec_pulls_its_nccl_image_through_a_cache_of_its_own():
    cache = plan_from_file(CLUSTERS / SCALE).image_cache
    assert cache is not None and cache.enabled
    (rule,) = cache.rules
    assert (rule.upstream, rule.registry, rule.prefix) == ("public.ecr.aws", "ecr-public", "efa-scale-p5/ecr-public")
    (image,) = cache.images
    assert (image.nodes, image.node_group) == (1000, "p5") and image.image.startswith(NCCL_IMAGE + ":")
    assert cache.cached(image.image, "111122223333") == (
        "111122223333.dkr.ecr.us-west-2.amazonaws.com/efa-scale-p5/ecr-public/hpc-cloud/nccl-tests:"
        + image.image.split(":", 1)[1])


@pytest.mark.parametrize(("nodes", "cached"), [(CACHE_THRESHOLD_NODES, False), (CACHE_THRESHOLD_NODES + 1, True)])
def test_the_cache_starts_past_what_ecr_public_serves_in_the_first_back_off(nodes, cached):
    assert CACHE_THRESHOLD_NODES == 10 * 10  # 10 pulls/s to AWS resources x the kubelet's 10 s first back-off
    assert (plan_from_text(nodes_spec(nodes)).image_cache is not None) is cached


def test_small_specs_and_other_registries_pull_as_they_are():
    assert all(plan_from_file(p).image_cache is None for p in CLUSTERS.glob("*.yaml") if p.name != SCALE)
    # nvcr.io is no upstream ECR caches (and a Docker Hub name has no host)
    assert plan_from_text(nodes_spec(1000, "nvcr.io/nvidia/pytorch:25.01-py3")).image_cache is None
    assert image_cache_plan("c", "us-west-2", [ScaledImage("library/ubuntu:24.04", 1000, "p5")],
                            interface_endpoints=True) is None


def test_a_region_without_pull_through_cache_says_so_and_makes_no_rule():
    cache = plan_from_text(nodes_spec(1000, region="us-gov-west-1")).image_cache
    assert cache is not None and not cache.enabled and cache.rules == ()
    assert "no pull through cache in us-gov-west-1" in "\n".join(cache.summary_lines())


def test_the_summary_gives_the_numbers():
    text = plan_from_file(CLUSTERS / SCALE).summary()
    assert "images at scale: 1000 nodes of p5 start public.ecr.aws/hpc-cloud/nccl-tests:" in text
    assert "ECR Public serves 10 pulls/s to AWS resources (not adjustable): 100 s of pulls" in text
    assert "kubelet's 10 s back-off" in text
    assert "pull through cache efa-scale-p5/ecr-public (public.ecr.aws)" in text and "2,000 pulls/s" in text
    assert "ECR interface endpoints and the S3 gateway endpoint (layers), not the NAT gateway" in text
    assert "80 s per GB of image for 1000 nodes" in text
    assert "dist/ keeps the public image references" in text
    without = plan_from_text(nodes_spec(1000, vpc={"interfaceEndpoints": False})).summary()
    assert "the ECR API over the NAT gateway (vpc.interfaceEndpoints is false)" in without


@pytest.mark.parametrize("cluster", ["efa-scale-p5", "x", "Upper-Case-9", "a" * 100, "b" * 60 + "-" + "c" * 39])
def test_cache_prefixes_are_valid_ecr_prefixes_and_distinct_per_cluster(cluster):
    prefix = names.ecr_cache_prefix(cluster, "ecr-public")
    assert names.ECR_CACHE_PREFIX.violation(prefix) is None, prefix
    assert prefix.endswith("/ecr-public")
    other = names.ecr_cache_prefix(cluster + "x", "ecr-public")
    assert other != prefix
