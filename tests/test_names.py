"""Every name efa-stack derives from the spec is valid for the system it lands in.

Rules and their sources are in efa_stack/names.py; each rule here has a failing case and its boundary.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from efa_stack import contract, names
from efa_stack.planning.plan import build_plan
from efa_stack.spec.errors import SpecError
from efa_stack.spec.models import NAME_PATTERN, ClusterSpec


def spec_dict(cluster: str = "t", group: str = "gpu", desired: int = 2, **extra: object) -> dict:
    ng = {
        "name": group, "instanceType": "p5.48xlarge", "minSize": 1, "desiredCapacity": desired,
        "maxSize": max(desired, 1), "availabilityZones": ["us-west-2a"], "efaEnabled": True, **extra,
    }
    return {
        "metadata": {"name": cluster, "region": "us-west-2", "version": "1.34"},
        "availabilityZones": ["us-west-2a", "us-west-2b"],
        "managedNodeGroups": [ng],
    }


def problems(d: dict) -> list:
    with pytest.raises(SpecError) as info:
        build_plan(ClusterSpec.model_validate(d))
    return info.value.problems


# --- the rules themselves, at their boundaries --------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "ok", "bad"),
    [
        (names.DNS1123_LABEL, "a" * 63, "a" * 64),
        (names.DNS1123_LABEL, "0abc", "Abc"),
        (names.DNS1123_SUBDOMAIN, ".".join(["a" * 63] * 3) + ".a" * 30, ".".join(["a" * 63] * 4) + "a"),
        (names.DNS1035_LABEL, "a-1", "1-a"),
        (names.LABEL_VALUE, "", "-a"),
        (names.LABEL_VALUE, "A_b.c" + "x" * 58, "x" * 64),
        (names.CFN_STACK_NAME, "a" * 128, "a" * 129),
        (names.CFN_STACK_NAME, "a-1", "1-a"),
        (names.EKS_CLUSTER_NAME, "a" * 100, "a" * 101),
        (names.EKS_CLUSTER_NAME, "1_a-b", "_a"),
        (names.EKS_NODEGROUP_NAME, "a" * 63, "a" * 64),
        (names.IAM_ROLE_NAME, "a" * 64, "a" * 65),
        (names.IAM_ROLE_NAME, "a+=,.@_-", "a b"),
        (names.LAUNCH_TEMPLATE_NAME, "abc", "ab"),
        (names.LAUNCH_TEMPLATE_NAME, "a" * 128, "a" * 129),
        (names.PLACEMENT_GROUP_NAME, "a" * 255, "a" * 256),
    ],
)
def test_rule_accepts_the_boundary_and_fails_past_it(rule, ok, bad):
    assert rule.ok(ok), rule.violation(ok)
    assert not rule.ok(bad)
    assert rule.target in (rule.violation(bad) or "")


def test_label_key_syntax():
    assert names.label_key_violation("example.com/team") is None
    assert names.label_key_violation("a" * 63) is None
    assert "63" in (names.label_key_violation("a" * 64) or "")
    assert names.label_key_violation("team lead") is not None
    assert names.label_key_violation("équipe") is not None
    assert names.label_key_violation("a/b/c") is not None
    assert names.label_key_violation("/b") is not None
    assert "prefix" in (names.label_key_violation("Example.com/b") or "")
    # Kubernetes allows a 253-character prefix; EKS caps the whole key at 63
    assert names.label_key_violation("e" * 50 + ".com/" + "n" * 8) is None  # 63 characters
    assert names.label_key_violation("e" * 51 + ".com/" + "n" * 8, eks=False) is None
    assert "EKS" in (names.label_key_violation("e" * 51 + ".com/" + "n" * 8) or "")


def test_tag_rules():
    assert names.tag_violation("team", "ml research") is None
    assert names.tag_violation("k" * 128, "v" * 256) is None
    assert names.tag_violation("k" * 129, "v") is not None
    assert names.tag_violation("k", "v" * 257) is not None
    assert "reserves" in (names.tag_violation("AWS:team", "x") or "")
    assert "reserves" in (names.tag_violation("team", "aws:x") or "")
    assert names.tag_violation("team", "a#b") is not None
    assert names.tag_violation("team", "", stack_tag=True) is not None
    assert names.tag_violation("team", "") is None


# --- derived names -----------------------------------------------------------------------------------


def test_derivations():
    assert [names.stack_name("c", p) for p in names.STACK_SUFFIXES] == ["c-cluster"]
    assert names.nccl_job_name("P5") == "nccl-tests-p5"
    assert names.mpi_worker_pod_name("j", 3) == "j-worker-3"
    assert names.mpi_launcher_job_name("j") == "j-launcher"


def test_uppercase_node_group_gets_a_lowercase_mpijob():
    plan = build_plan(ClusterSpec.model_validate(spec_dict(group="GpuP5")))
    job = plan.nccl_job
    assert job is not None and job.name == "nccl-tests-gpup5"
    assert names.DNS1123_SUBDOMAIN.ok(job.name)
    assert plan.node_group("GpuP5").labels[contract.LABEL_NODE_GROUP] == "GpuP5"


def test_longest_node_group_name_whose_workers_fit_is_accepted():
    # nccl-tests-<name>-worker-1 with 2 workers: 11 + len + 9 <= 63
    build_plan(ClusterSpec.model_validate(spec_dict(group="g" * 43, desired=2)))


@pytest.mark.parametrize("length", [42, 45, 63])
def test_long_node_group_name_gets_a_valid_nccl_job_name(length):
    # node group names of up to 63 characters are valid for eksctl and EKS; the job name is derived to fit
    group = "g" * length
    plan = build_plan(ClusterSpec.model_validate(spec_dict(group=group, desired=2)))
    job = plan.nccl_job
    assert job is not None
    assert len(names.mpi_worker_pod_name(job.name, 449)) <= 63
    assert len(names.mpi_launcher_job_name(job.name)) <= 63
    assert names.DNS1035_LABEL.violation(names.mpi_worker_pod_name(job.name, 449)) is None


def test_nccl_job_name_is_kept_when_it_fits_and_digested_when_cut():
    assert names.nccl_job_name("g" * 41) == "nccl-tests-" + "g" * 41
    a, b = names.nccl_job_name("g" * 50 + "a"), names.nccl_job_name("g" * 50 + "b")
    assert a != b and a.startswith("nccl-tests-ggg")


def test_fails_node_label_value_too_long():
    (p,) = problems(spec_dict(labels={"team": "x" * 64}))
    assert p.field == "managedNodeGroups[0].labels['team']" and "63" in p.message


def test_label_value_at_63_is_accepted():
    build_plan(ClusterSpec.model_validate(spec_dict(labels={"team": "x" * 63})))


@pytest.mark.parametrize("key", ["team lead", "équipe", "k" * 70, "a/b/c", "-team"])
def test_fails_label_key_syntax(key):
    (p,) = problems(spec_dict(labels={key: "x"}))
    assert p.field == "managedNodeGroups[0].labels" and p.value == key and "label key" in p.message


def test_fails_empty_label_value_eks_rejects():
    (p,) = problems(spec_dict(labels={"team": ""}))
    assert "EKS" in p.message


@pytest.mark.parametrize(
    ("taint", "field"),
    [
        ({"key": "k" * 64, "effect": "NoSchedule"}, "key"),
        ({"key": "dedicated", "value": "a b", "effect": "NoSchedule"}, "value"),
        ({"key": "dedicated", "value": "v" * 64, "effect": "NoExecute"}, "value"),
    ],
)
def test_fails_taint_syntax(taint, field):
    (p,) = problems(spec_dict(taints=[taint]))
    assert p.field == f"managedNodeGroups[0].taints[0].{field}"


def test_taint_at_boundaries_is_accepted():
    taint = {"key": "k" * 63, "value": "v" * 63, "effect": "PreferNoSchedule"}
    plan = build_plan(ClusterSpec.model_validate(spec_dict(taints=[taint])))
    assert any(t.key == "k" * 63 for t in plan.node_groups[0].taints)


@pytest.mark.parametrize(
    ("tags", "word"),
    [({"aws:team": "x"}, "reserves"), ({"team": "aws:x"}, "reserves"), ({"k" * 129: "x"}, "128"),
     ({"team": "v" * 257}, "256"), ({"team": "a;b"}, "letters")],
)
def test_fails_node_group_tags(tags, word):
    (p,) = problems(spec_dict(tags=tags))
    assert p.field == "managedNodeGroups[0].tags" and word in p.message


def test_fails_empty_cluster_tag_value():
    d = spec_dict()
    d["metadata"]["tags"] = {"owner": ""}
    (p,) = problems(d)
    assert p.field == "metadata.tags" and "value" in p.message


def test_all_problems_at_once():
    d = spec_dict(group="g" * 60)
    d["metadata"]["tags"] = {"owner": ""}
    d["managedNodeGroups"].append({"name": "cpu", "instanceType": "m5.large", "labels": {"bad key": "x"},
                                   "tags": {"aws:x": "y"}})
    assert {p.field for p in problems(d)} == {
        "metadata.tags", "managedNodeGroups[1].labels", "managedNodeGroups[1].tags",
    }


# --- property: every name for any accepted spec satisfies its target -------------------------------------

_name = st.from_regex(re.compile(NAME_PATTERN.rstrip("$") + r"\Z"), fullmatch=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cluster=_name.filter(lambda s: len(s) <= 100),
    group=_name.filter(lambda s: len(s) <= 63 and s != contract.SYSTEM_NODE_GROUP),
    desired=st.integers(min_value=1, max_value=64),
)
def test_every_derived_name_of_an_accepted_spec_is_valid(cluster, group, desired):
    try:
        spec = ClusterSpec.model_validate(spec_dict(cluster=cluster, group=group, desired=desired))
        plan = build_plan(spec)
    except SpecError as exc:
        assert all(p.field in ("metadata.name", "ncclTest.nodeGroup", "managedNodeGroups[0].name")
                   for p in exc.problems), exc.render()
        return
    job = plan.nccl_job
    target = (job.node_group, job.workers) if job is not None else None
    for rule, value in names.all_names(spec.metadata.name, [ng.name for ng in spec.managed_node_groups], target):
        assert rule.ok(value), (rule.target, value, rule.violation(value))
    for ng in plan.all_node_groups:
        for key, value in ng.labels.items():
            assert names.label_key_violation(key) is None and names.label_value_violation(value) is None


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(group=st.from_regex(r"\A[a-zA-Z][-a-zA-Z0-9]{0,62}\Z"), round_no=st.integers(1, 2), index=st.integers(0, 999))
def test_acceptance_pair_jobs_make_valid_launcher_and_worker_names(group, round_no, index):
    # every node group name the spec accepts gives pair jobs whose derived pods the MPI operator accepts
    job = names.acceptance_pair_job_name(group, round_no, index)
    assert names.DNS1123_SUBDOMAIN.violation(job) is None
    for derived in (names.mpi_launcher_job_name(job), names.mpi_worker_pod_name(job, 1)):
        assert names.DNS1035_LABEL.violation(derived) is None, derived


def test_acceptance_pair_job_names_of_long_node_groups_stay_apart():
    a, b = "G" * 60 + "a", "G" * 60 + "b"
    assert names.acceptance_pair_job_name("P5", 1, 0) == "accept-p5-r1-0"
    assert names.acceptance_pair_job_name(a, 1, 0) != names.acceptance_pair_job_name(b, 1, 0)
