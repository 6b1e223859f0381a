"""Images at scale (efa_stack/planning/image_cache.py): a job that starts an ECR Public image on more nodes than ECR
Public serves in the kubelet's first back-off pulls it through an ECR pull through cache of the cluster's account;
the stack rewrites the image, dist/ keeps the public reference."""

from __future__ import annotations

import json

import pytest

from efa_stack import names
from efa_stack.planning.image_cache import CACHE_THRESHOLD_NODES, ScaledImage, image_cache_plan
from efa_stack.planning.plan import plan_from_file, plan_from_text
from tests.support import CLUSTERS, built, synth_spec, synth_text

SCALE = "scale-1000-p5.yaml"
NCCL_IMAGE = "public.ecr.aws/hpc-cloud/nccl-tests"


def nodes_spec(nodes: int, image: str | None = None, region: str = "us-west-2", extra: str = "") -> str:
    zones = {"us-west-2": "us-west-2a, us-west-2b", "us-gov-west-1": "us-gov-west-1a, us-gov-west-1b"}[region]
    first = zones.split(",")[0]
    return (f"apiVersion: eksctl.io/v1alpha5\nkind: ClusterConfig\n"
            f'metadata: {{name: big, region: {region}, version: "1.35"}}\navailabilityZones: [{zones}]\n'
            f"managedNodeGroups:\n  - {{name: p5, instanceType: p5.48xlarge, minSize: {nodes}, desiredCapacity: {nodes},"
            f" maxSize: {nodes}, availabilityZones: [{first}], efaEnabled: true}}\n"
            + (f"ncclTest: {{image: '{image}'}}\n" if image else "") + extra)


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
    without = plan_from_text(nodes_spec(1000, extra="vpc: {interfaceEndpoints: false}\n")).summary()
    assert "the ECR API over the NAT gateway (vpc.interfaceEndpoints is false)" in without


@pytest.mark.parametrize("cluster", ["efa-scale-p5", "x", "Upper-Case-9", "a" * 100, "b" * 60 + "-" + "c" * 39])
def test_cache_prefixes_are_valid_ecr_prefixes_and_distinct_per_cluster(cluster):
    prefix = names.ecr_cache_prefix(cluster, "ecr-public")
    assert names.ECR_CACHE_PREFIX.violation(prefix) is None, prefix
    assert prefix.endswith("/ecr-public")
    other = names.ecr_cache_prefix(cluster + "x", "ecr-public")
    assert other != prefix


# --- the stack ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [SCALE])
def test_the_stack_makes_the_rule_and_lets_every_node_role_import(spec):
    s = synth_spec(str(CLUSTERS / spec))
    (rule,) = s.resources("cluster", "AWS::ECR::PullThroughCacheRule").values()
    assert rule["Properties"] == {"EcrRepositoryPrefix": "efa-scale-p5/ecr-public", "UpstreamRegistry": "ecr-public",
                                  "UpstreamRegistryUrl": "public.ecr.aws"}
    (policy_id, policy), = s.resources("cluster", "AWS::IAM::ManagedPolicy").items()
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"]
    assert json.dumps(statement["Resource"]).endswith(':repository/efa-scale-p5/ecr-public/*"]]}')
    node_roles = [r for lid, r in s.resources("cluster", "AWS::IAM::Role").items() if lid.startswith("NodeRole")]
    assert node_roles and all({"Ref": policy_id} in r["Properties"]["ManagedPolicyArns"] for r in node_roles)


@pytest.mark.parametrize("spec", [SCALE])
def test_the_stack_applies_the_job_through_the_cache_of_its_account(spec):
    s = synth_spec(str(CLUSTERS / spec))
    (rule_id,) = s.resources("cluster", "AWS::ECR::PullThroughCacheRule")
    (job,) = [r for lid, r in s.resources("cluster", "Custom::AWSCDK-EKS-KubernetesResource").items()
              if lid.startswith("Clusternccltests")]
    sep, parts = job["Properties"]["Manifest"]["Fn::Join"]
    accounts = [i for i, p in enumerate(parts) if p == {"Ref": "AWS::AccountId"}]
    assert sep == "" and accounts  # the launcher and the workers
    assert all(parts[i + 1].startswith(".dkr.ecr.us-west-2.amazonaws.com/efa-scale-p5/ecr-public/hpc-cloud/nccl-tests:")
               and parts[i - 1].endswith('"image":"') for i in accounts)
    assert not any(NCCL_IMAGE in p for p in parts if isinstance(p, str))
    assert rule_id in job["DependsOn"]  # the rule exists before a pod pulls through it
    # AND dist/ keeps the public reference: no account is known at synth, and the rule is the stack's
    worker = built("scale-1000-p5").mpijob()["spec"]["mpiReplicaSpecs"]["Worker"]
    (container,) = worker["template"]["spec"]["containers"]
    assert container["image"].startswith(NCCL_IMAGE + ":")


def test_a_pool_at_scale_gives_karpenter_s_node_role_the_import_too():
    text = (CLUSTERS / "karpenter-p5.yaml").read_text().replace("maxNodes: 4 ", "maxNodes: 200 ")
    s = synth_text(text)
    (policy_id,) = s.resources("cluster", "AWS::IAM::ManagedPolicy")
    (role,) = [r for lid, r in s.resources("cluster", "AWS::IAM::Role").items() if lid.startswith("KarpenterNodeRole")]
    assert {"Ref": policy_id} in role["Properties"]["ManagedPolicyArns"]

