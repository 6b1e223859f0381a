"""Kubernetes versions: what EKS offers on a date (efa_stack/planning/data/kubernetes_versions.json) against what
efa-stack builds; a version in extended support plans with a warning."""

from __future__ import annotations

import datetime
import json

import pytest

from efa_stack.planning import versions
from efa_stack.spec.models import KUBERNETES_VERSIONS

DAY = datetime.date(2026, 11, 25)


def test_data_file_has_its_source_and_every_built_version():
    data = json.loads(versions.DATA_FILE.read_text())
    assert "kubernetes-versions.html" in data["_source"]
    assert set(KUBERNETES_VERSIONS) <= set(data["versions"])
    for entry in data["versions"].values():
        released, standard, extended = (datetime.date.fromisoformat(entry[k]) for k in (
            "released", "end_of_standard_support", "end_of_extended_support"))
        assert released < standard < extended


@pytest.mark.parametrize(("version", "state"), [
    ("1.30", "ended"), ("1.31", "extended"), ("1.32", "extended"), ("1.33", "extended"), ("1.34", "standard"),
    ("1.35", "standard"), ("1.99", "unknown"),
])
def test_support_on_a_date(version, state):
    assert versions.support(version, DAY) == state


def test_offered_version_efa_stack_does_not_build_says_why():
    (p,) = versions.version_problems("1.32", DAY)
    assert p.field == "metadata.version" and p.value == "1.32"
    assert "EKS offers Kubernetes 1.32 (extended support until 2027-03-23)" in p.message
    assert "aws-cdk.lambda-layer-kubectl-v32" in p.message
    assert "use one of 1.33, 1.34, 1.35" in p.fix


@pytest.mark.parametrize("version", ["1.27", "1.30"])
def test_version_eks_no_longer_offers(version):
    (p,) = versions.version_problems(version, DAY)
    assert p.message.startswith(f"EKS no longer offers Kubernetes {version}")


def test_extended_support_warns_of_cost():
    (w,) = versions.version_warnings("1.33", DAY)
    assert "extended support since 2026-07-29" in w and "costs more" in w
    assert versions.version_warnings("1.35", DAY) == []


def test_plan_carries_the_warning_of_its_version():
    from tests.support import BASE, plan_of

    plan = plan_of(BASE.replace('version: "1.34"', 'version: "1.33"'))
    assert plan.warnings == tuple(versions.version_warnings("1.33", datetime.date.today()))
    for warning in plan.warnings:
        assert f"warning: {warning}" in plan.summary()
