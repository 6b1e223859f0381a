"""The shipped example specs show what they say they show (each synthesized once, with the spec's group)."""

from __future__ import annotations

import pytest

from tests.support import CLUSTERS, synth_spec


def _resources(template: dict, kind: str) -> list[dict]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


@pytest.mark.parametrize("spec", ["p4d.yaml"])
def test_p4d_example_lists_an_addon_and_limits_node_repair(spec):
    # GIVEN clusters/p4d.yaml (eksctl's addons and nodeRepairConfig) WHEN synthesized with both cdk-nag packs
    s = synth_spec(str(CLUSTERS / spec))
    cluster = s.template("cluster")
    # THEN the listed community add-on stands beside efa-stack's own
    names = {a["AddonName"] for a in _resources(cluster, "AWS::EKS::Addon")}
    assert {"metrics-server", "vpc-cni", "eks-pod-identity-agent", "eks-node-monitoring-agent",
            "amazon-cloudwatch-observability"} <= names
    # AND the GPU node group repairs with the spec's limits, the system group does not repair
    repair = {g["NodegroupName"]: g.get("NodeRepairConfig") for g in _resources(cluster, "AWS::EKS::Nodegroup")}
    gpu = next(v for k, v in repair.items() if k.endswith("p4d"))
    assert gpu == {"Enabled": True, "MaxUnhealthyNodeThresholdCount": 2, "MaxParallelNodesRepairedCount": 1}
    assert [v for k, v in repair.items() if k.endswith("system")] == [None]
