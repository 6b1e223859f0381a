"""Container Insights (the amazon-cloudwatch-observability add-on) and the accelerator dashboard.

Sources of the facts asserted here are cited in docs/design/addons.md.
"""

from __future__ import annotations

import json
import re

import pytest

from aws_constructs.dashboard import EFA_WIDGETS, GPU_WIDGETS, NVLINK_NOTE
from efa_stack import names
from efa_stack.planning.addons import (
    CLOUDWATCH_AGENT_POLICIES,
    CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
    CLOUDWATCH_OBSERVABILITY,
)
from tests.support import cluster_header, cluster_spec, plan_of, problems_of, synth_text

BASE = cluster_spec("obs")
CPU_ONLY = cluster_header("obs") + "  - {name: cpu, instanceType: m7i.xlarge, minSize: 1}\n"


# --- plan ----------------------------------------------------------------------------------------------


def test_gpu_cluster_gets_container_insights_and_a_dashboard_by_default():
    # GIVEN a spec with a GPU node group and no observability section WHEN planned
    plan = plan_of(BASE)
    # THEN the add-on is efa-stack's own, with cloudwatch-agent's role through Pod Identity, and a dashboard
    addon = plan.addon(CLOUDWATCH_OBSERVABILITY)
    assert addon is not None and addon.managed and addon.created_by == "cluster"
    [identity] = addon.pod_identities
    assert (identity.namespace, identity.service_account) == ("amazon-cloudwatch", CLOUDWATCH_AGENT_SERVICE_ACCOUNT)
    assert identity.aws_managed_policies == CLOUDWATCH_AGENT_POLICIES
    assert "CloudWatchAgentServerPolicy" in identity.aws_managed_policies
    assert plan.observability.container_insights
    assert plan.observability.dashboard_name == "obs-us-west-2-accelerators"


def test_cpu_only_cluster_has_no_container_insights_by_default():
    plan = plan_of(CPU_ONLY)
    assert plan.addon(CLOUDWATCH_OBSERVABILITY) is None
    assert not plan.observability.container_insights and plan.observability.dashboard_name is None


def test_switch_off_removes_addon_and_dashboard():
    plan = plan_of(BASE + "observability: {containerInsights: false}\n")
    assert plan.addon(CLOUDWATCH_OBSERVABILITY) is None
    assert plan.observability.dashboard_name is None


def test_dashboard_off_keeps_the_addon():
    plan = plan_of(BASE + "observability: {dashboard: false}\n")
    assert plan.addon(CLOUDWATCH_OBSERVABILITY) is not None
    assert plan.observability.dashboard_name is None


def test_listed_addon_merges_with_efa_stacks_own():
    # GIVEN the add-on listed with a version and configuration on a CPU-only cluster
    plan = plan_of(CPU_ONLY + "addons:\n  - name: amazon-cloudwatch-observability\n    version: v4.0.0-eksbuild.1\n"
                   "    configurationValues: '{\"containerLogs\": {\"enabled\": false}}'\n")
    # THEN Container Insights is on, the entry is merged once and efa-stack keeps the Pod Identity wiring
    addon = plan.addon(CLOUDWATCH_OBSERVABILITY)
    assert addon is not None and addon.managed and addon.version == "v4.0.0-eksbuild.1"
    assert json.loads(addon.configuration_values or "") == {"containerLogs": {"enabled": False}}
    assert [a.service_account for a in addon.pod_identities] == [CLOUDWATCH_AGENT_SERVICE_ACCOUNT]
    assert [a.name for a in plan.addons].count(CLOUDWATCH_OBSERVABILITY) == 1
    assert plan.observability.container_insights


def test_fails_dashboard_without_container_insights():
    [problem] = problems_of(BASE + "observability: {containerInsights: false, dashboard: true}\n")
    assert problem.field == "observability.dashboard"
    assert "containerInsights: true" in problem.fix and "dashboard: false" in problem.fix


def test_fails_dashboard_on_a_cluster_without_accelerators():
    [problem] = problems_of(CPU_ONLY + "observability: {dashboard: true}\n")
    assert problem.field == "observability.dashboard"
    assert "containerInsights: true" in problem.fix


def test_fails_unknown_observability_field():
    problems = problems_of(BASE + "observability: {grafana: true}\n")
    assert [p.field for p in problems] == ["observability.grafana"]


def test_fails_listed_addon_with_container_insights_off():
    problems = problems_of(BASE + "observability: {containerInsights: false}\naddons:\n"
                           "  - {name: amazon-cloudwatch-observability}\n")
    assert [p.field for p in problems] == ["observability.containerInsights"]


def test_fails_addon_version_before_pod_identity_support():
    # EFA metrics need v1.5.2, Pod Identity v3.1.0: a v2 build would deploy without permissions
    [problem] = problems_of(BASE + "addons:\n  - {name: amazon-cloudwatch-observability, version: v2.6.0-eksbuild.1}\n")
    assert problem.field == "addons[0].version" and "v3.1.0-eksbuild.1" in problem.fix


def test_fails_addon_with_its_own_pod_identity():
    [problem] = problems_of(BASE + "addons:\n  - name: amazon-cloudwatch-observability\n    podIdentityAssociations:\n"
                            "      - {namespace: amazon-cloudwatch, serviceAccountName: cloudwatch-agent, "
                            "roleARN: 'arn:aws:iam::123456789012:role/cw'}\n")
    assert problem.field == "addons[0].podIdentityAssociations" and problem.fix == "remove podIdentityAssociations"


def test_dashboard_name_is_valid_for_the_longest_cluster_name():
    name = names.cloudwatch_dashboard_name("a" * 100, "ap-southeast-5")
    assert names.CLOUDWATCH_DASHBOARD_NAME.ok(name)
    assert not names.CLOUDWATCH_DASHBOARD_NAME.ok("a.b") and not names.CLOUDWATCH_DASHBOARD_NAME.ok("x" * 256)


# --- templates -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synth():
    return synth_text(BASE)


def dashboard_body(resource: dict) -> dict:
    parts = resource["Properties"]["DashboardBody"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else "us-west-2" for p in parts))


def test_template_has_the_addon_with_its_pod_identity_role(synth):
    [addon] = [
        r for r in synth.resources("cluster", "AWS::EKS::Addon").values()
        if r["Properties"]["AddonName"] == CLOUDWATCH_OBSERVABILITY
    ]
    [association] = addon["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == CLOUDWATCH_AGENT_SERVICE_ACCOUNT
    role = synth.template("cluster")["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]
    policies = json.dumps(role["Properties"]["ManagedPolicyArns"])
    assert all(f":iam::aws:policy/{p}" in policies for p in CLOUDWATCH_AGENT_POLICIES)
    assert "pods.eks.amazonaws.com" in json.dumps(role["Properties"]["AssumeRolePolicyDocument"])
    # installed once the node groups exist
    groups = set(synth.resources("cluster", "AWS::EKS::Nodegroup"))
    assert groups and groups <= set(addon["DependsOn"])


def test_template_dashboard_shows_gpu_and_efa_metrics_per_node(synth):
    [dashboard] = synth.resources("cluster", "AWS::CloudWatch::Dashboard").values()
    name = dashboard["Properties"]["DashboardName"]
    assert name == "obs-us-west-2-accelerators" and names.CLOUDWATCH_DASHBOARD_NAME.ok(name)
    body = dashboard_body(dashboard)
    graphs = {w["properties"]["title"]: w["properties"] for w in body["widgets"] if w["type"] == "metric"}
    for title, stat, metrics in (*GPU_WIDGETS, *EFA_WIDGETS):
        expressions = [m[0]["expression"] for m in graphs[f"{title} per node"]["metrics"]]
        assert len(expressions) == len(metrics)
        for metric, expression in zip(metrics, expressions, strict=True):
            assert expression == (
                "SEARCH('{ContainerInsights,ClusterName,InstanceId,NodeName} "
                f'MetricName="{metric}" ClusterName="obs"\', \'{stat}\', 60)'
            )
    for metric in ("node_efa_rdma_read_bytes", "node_efa_rdma_write_bytes", "node_efa_rx_dropped",
                   "node_efa_retrans_pkts", "node_gpu_memory_used"):
        assert metric in json.dumps(body)
    # the per-instance-type rows filter on the dimension set that carries InstanceType
    per_gpu = graphs["p5.48xlarge (gpu): GPU utilization per GPU (%)"]["metrics"][0][0]["expression"]
    assert 'InstanceType="p5.48xlarge"' in per_gpu and "GpuDevice" in per_gpu
    # no Neuron widgets on a GPU-only cluster; the NVLink gap is stated
    assert not any("Neuron" in t for t in graphs)
    assert NVLINK_NOTE in json.dumps(body, ensure_ascii=False).replace("\\n", "\n")


def test_template_outputs_the_dashboard_url(synth):
    url = synth.template("cluster")["Outputs"]["DashboardUrl"]["Value"]
    assert re.fullmatch(
        r"https://us-west-2\.console\.aws\.amazon\.com/cloudwatch/home\?region=us-west-2"
        r"#dashboards/dashboard/obs-us-west-2-accelerators", url,
    )


def test_template_without_container_insights_has_neither_addon_nor_dashboard():
    # GIVEN the GPU spec with the switch off WHEN synthesized THEN no add-on, dashboard, role or output
    off = synth_text(BASE + "observability: {containerInsights: false}\n")
    template = off.template("cluster")
    assert not off.resources("cluster", "AWS::CloudWatch::Dashboard")
    assert CLOUDWATCH_OBSERVABILITY not in json.dumps(template)
    assert "CloudWatchAgentServerPolicy" not in json.dumps(template)
    assert "DashboardUrl" not in template.get("Outputs", {})
