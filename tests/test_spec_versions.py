"""Kubernetes versions: what EKS offers on a date (efa_stack/planning/data/kubernetes_versions.json) against what
efa-stack builds; a version in extended support, or one the data does not list, plans with a warning."""

from __future__ import annotations

import datetime
import json

import pytest

from efa_stack.errors import UserError
from efa_stack.planning import versions
from efa_stack.spec.errors import SpecError
from efa_stack.spec.models import DEFAULT_KUBERNETES_VERSION, KUBERNETES_VERSIONS, Metadata
from stacks.cluster_stack import kubectl_layer_module

DAY = datetime.date(2026, 11, 25)


def test_data_file_has_its_source_and_dates_in_order():
    data = json.loads(versions.DATA_FILE.read_text())
    assert "kubernetes-versions.html" in data["_source"]
    for entry in data["versions"].values():
        released, standard, extended = (versions._day(entry[k]) for k in (
            "released", "end_of_standard_support", "end_of_extended_support"))
        assert released < standard < extended


def test_every_built_version_has_a_kubectl_layer_and_a_cni_pin():
    import importlib

    from efa_stack.planning.addons import pinned_version

    for version in KUBERNETES_VERSIONS:
        module, cls = kubectl_layer_module(version)  # installed from the lock, one per version
        assert hasattr(importlib.import_module(module), cls), version
        assert pinned_version("vpc-cni", version) is not None, version


def test_the_default_version_is_built_and_stays_in_standard_support_for_a_release_cycle():
    # EKS releases a Kubernetes minor version about every four months (kubernetes_versions.json: 1.34 on 2025-10-06,
    # 1.35 on 2026-01-28): a spec that names no version gets one without extended support's cost until the next
    # default can take over
    assert Metadata(name="t", region="us-west-2").version == DEFAULT_KUBERNETES_VERSION
    assert DEFAULT_KUBERNETES_VERSION in KUBERNETES_VERSIONS
    assert versions.version_problems(DEFAULT_KUBERNETES_VERSION, DAY) == []
    assert versions.version_warnings(DEFAULT_KUBERNETES_VERSION, DAY) == []
    assert versions.support(DEFAULT_KUBERNETES_VERSION, DAY + datetime.timedelta(days=120)) == "standard"


@pytest.mark.parametrize(("version", "state"), [
    ("1.30", "ended"), ("1.31", "extended"), ("1.32", "extended"), ("1.33", "extended"), ("1.34", "standard"),
    ("1.35", "standard"), ("1.36", "standard"), ("1.37", "unknown"), ("1.99", "unknown"),
])
def test_support_on_a_date(version, state):
    assert versions.support(version, DAY) == state


@pytest.mark.parametrize(("day", "state"), [
    # the last day of standard support is already billed as extended; on the end of extended support date EKS
    # no longer creates clusters of the version (kubernetes-versions.html, release calendar and FAQ)
    (datetime.date(2025, 11, 25), "standard"), (datetime.date(2025, 11, 26), "extended"),
    (datetime.date(2026, 11, 25), "extended"), (datetime.date(2026, 11, 26), "ended"),
    (datetime.date(2024, 9, 25), "not yet"),
])
def test_support_edges_of_1_31(day, state):
    assert versions.support("1.31", day) == state


def test_every_version_eks_offers_today_is_built():
    assert versions.offered(DAY) == ("1.31", "1.32", "1.33", "1.34", "1.35", "1.36")
    for version in versions.offered(DAY):
        assert versions.version_problems(version, DAY) == []


def test_version_ended_since_is_refused_even_though_built():
    (p,) = versions.version_problems("1.31", datetime.date(2026, 11, 26))
    assert p.message == "EKS no longer offers Kubernetes 1.31 for new clusters (extended support ended 2026-11-26)"
    assert p.fix == 'use one of 1.32, 1.33, 1.34, 1.35, 1.36, quoted (version: "1.36")'


def test_version_before_its_release_is_refused():
    (p,) = versions.version_problems("1.36", datetime.date(2026, 3, 1))
    assert p.message == "EKS releases Kubernetes 1.36 in about 2026-06, after 2026-03-01"
    assert "1.36" not in p.fix and "1.35" in p.fix


@pytest.mark.parametrize("version", ["1.27", "1.30"])
def test_version_eks_no_longer_offers(version):
    (p,) = versions.version_problems(version, DAY)
    assert p.message.startswith(f"EKS no longer offers Kubernetes {version}")
    assert p.fix == 'use one of 1.31, 1.32, 1.33, 1.34, 1.35, 1.36, quoted (version: "1.36")'


def test_unknown_version_is_refused():
    (p,) = versions.version_problems("1.99", DAY)
    assert p.message == "Kubernetes version not supported"


def test_extended_support_warns_of_cost_and_end():
    (w,) = versions.version_warnings("1.32", DAY)
    assert "extended support since 2026-03-23 (until 2027-03-23, when EKS upgrades the control plane)" in w
    assert "costs more" in w
    assert versions.version_warnings("1.35", DAY) == []


def test_approximate_dates_say_so():
    (w,) = versions.version_warnings("1.36", datetime.date(2027, 9, 1))
    assert "since about 2027-08 (until about 2028-08" in w


def test_built_version_the_data_does_not_list_warns_to_run_preflight():
    (w,) = versions.version_warnings("1.37", DAY)
    assert "lists no EKS release of it" in w and "efa-stack preflight" in w and "DescribeClusterVersions" in w


def test_today_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(versions.TODAY_VARIABLE, "2027-04-01")
    assert versions.today() == datetime.date(2027, 4, 1)
    monkeypatch.delenv(versions.TODAY_VARIABLE)
    assert versions.today() == datetime.date.today()
    monkeypatch.setenv(versions.TODAY_VARIABLE, "April 1st")
    with pytest.raises(UserError) as info:
        versions.today()
    assert "EFA_STACK_TODAY='April 1st' is not a date" in info.value.message
    assert "YYYY-MM-DD" in info.value.fix


def test_plan_is_judged_on_the_day_of_the_environment(monkeypatch):
    from tests.support import BASE, plan_of

    spec = BASE.replace('version: "1.34"', 'version: "1.32"')
    plan = plan_of(spec)
    assert plan.warnings == tuple(versions.version_warnings("1.32", DAY))
    for warning in plan.warnings:
        assert f"warning: {warning}" in plan.summary()
    monkeypatch.setenv(versions.TODAY_VARIABLE, "2027-03-23")
    with pytest.raises(SpecError) as info:
        plan_of(spec)
    assert [p.field for p in info.value.problems] == ["metadata.version"]
