"""The images at scale in the cluster stack (stacks/node_groups.py pull_through_cache and pulls_through): the ECR pull
through cache rule, the node roles' import permission, and the job applied through the cache; the plan:
tests/planning/test_image_cache.py."""

from __future__ import annotations

import json

import pytest

from tests.builders import cluster, cpu_group, pool
from tests.support import CLUSTERS, built, synth_spec

SCALE = "scale-1000-p5.yaml"
NCCL_IMAGE = "public.ecr.aws/hpc-cloud/nccl-tests"


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
    pools = pool("p5-elastic", "p5.48xlarge", max_nodes=200, zone="us-west-2a")
    s = cluster(cpu_group(), name="pool-at-scale").with_pools(pools).with_(ncclTest={"nodeGroup": "p5-elastic"}).synth()
    (policy_id,) = s.resources("cluster", "AWS::IAM::ManagedPolicy")
    (role,) = [r for lid, r in s.resources("cluster", "AWS::IAM::Role").items() if lid.startswith("KarpenterNodeRole")]
    assert {"Ref": policy_id} in role["Properties"]["ManagedPolicyArns"]
