"""Container Insights (the amazon-cloudwatch-observability add-on) and the accelerator dashboard, planned
(efa_stack/planning/observability.py); their templates: tests/stacks/test_cluster_stack.py, tests/stacks/test_addons.py.

Sources of the facts asserted here are cited in docs/design/addons.md.
"""

from __future__ import annotations

import json

from efa_stack import names
from efa_stack.planning.addons import (
    CLOUDWATCH_AGENT_POLICIES,
    CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
    CLOUDWATCH_OBSERVABILITY,
)
from tests.builders import cluster, cpu_group, node_group

BASE = cluster(node_group(), name="obs")
CPU_ONLY = cluster(cpu_group(), name="obs")


# --- plan ----------------------------------------------------------------------------------------------


def test_gpu_cluster_gets_container_insights_and_a_dashboard_by_default():
    # GIVEN a spec with a GPU node group and no observability section WHEN planned
    plan = BASE.plan()
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
    plan = CPU_ONLY.plan()
    assert plan.addon(CLOUDWATCH_OBSERVABILITY) is None
    assert not plan.observability.container_insights and plan.observability.dashboard_name is None


def test_switch_off_removes_addon_and_dashboard():
    plan = BASE.with_(observability={"containerInsights": False}).plan()
    assert plan.addon(CLOUDWATCH_OBSERVABILITY) is None
    assert plan.observability.dashboard_name is None


def test_dashboard_off_keeps_the_addon():
    plan = BASE.with_(observability={"dashboard": False}).plan()
    assert plan.addon(CLOUDWATCH_OBSERVABILITY) is not None
    assert plan.observability.dashboard_name is None


def test_listed_addon_merges_with_efa_stacks_own():
    # GIVEN the add-on listed with a version and configuration on a CPU-only cluster
    plan = CPU_ONLY.with_(addons=[{"name": "amazon-cloudwatch-observability", "version": "v4.0.0-eksbuild.1",
                                   "configurationValues": '{"containerLogs": {"enabled": false}}'}]).plan()
    # THEN Container Insights is on, the entry is merged once and efa-stack keeps the Pod Identity wiring
    addon = plan.addon(CLOUDWATCH_OBSERVABILITY)
    assert addon is not None and addon.managed and addon.version == "v4.0.0-eksbuild.1"
    assert json.loads(addon.configuration_values or "") == {"containerLogs": {"enabled": False}}
    assert [a.service_account for a in addon.pod_identities] == [CLOUDWATCH_AGENT_SERVICE_ACCOUNT]
    assert [a.name for a in plan.addons].count(CLOUDWATCH_OBSERVABILITY) == 1
    assert plan.observability.container_insights


def test_fails_dashboard_without_container_insights():
    [problem] = BASE.with_(observability={"containerInsights": False, "dashboard": True}).problems()
    assert problem.field == "observability.dashboard"
    assert "containerInsights: true" in problem.fix and "dashboard: false" in problem.fix


def test_fails_dashboard_on_a_cluster_without_accelerators():
    [problem] = CPU_ONLY.with_(observability={"dashboard": True}).problems()
    assert problem.field == "observability.dashboard"
    assert "containerInsights: true" in problem.fix


def test_fails_unknown_observability_field():
    problems = BASE.with_(observability={"grafana": True}).problems()
    assert [p.field for p in problems] == ["observability.grafana"]


def test_fails_listed_addon_with_container_insights_off():
    problems = BASE.with_(observability={"containerInsights": False},
                          addons=[{"name": "amazon-cloudwatch-observability"}]).problems()
    assert [p.field for p in problems] == ["observability.containerInsights"]


def test_fails_addon_version_before_pod_identity_support():
    # EFA metrics need v1.5.2, Pod Identity v3.1.0: a v2 build would deploy without permissions
    [problem] = BASE.with_(addons=[{"name": "amazon-cloudwatch-observability", "version": "v2.6.0-eksbuild.1"}]).problems()
    assert problem.field == "addons[0].version" and "v3.1.0-eksbuild.1" in problem.fix


def test_fails_addon_with_its_own_pod_identity():
    [problem] = BASE.with_(addons=[{"name": "amazon-cloudwatch-observability", "podIdentityAssociations": [{
        "namespace": "amazon-cloudwatch", "serviceAccountName": "cloudwatch-agent",
        "roleARN": "arn:aws:iam::123456789012:role/cw"}]}]).problems()
    assert problem.field == "addons[0].podIdentityAssociations" and problem.fix == "remove podIdentityAssociations"


def test_dashboard_name_is_valid_for_the_longest_cluster_name():
    name = names.cloudwatch_dashboard_name("a" * 100, "ap-southeast-5")
    assert names.CLOUDWATCH_DASHBOARD_NAME.ok(name)
    assert not names.CLOUDWATCH_DASHBOARD_NAME.ok("a.b") and not names.CLOUDWATCH_DASHBOARD_NAME.ok("x" * 256)
