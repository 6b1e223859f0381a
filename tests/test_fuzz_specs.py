"""Fuzzed specs: every generated or mutated spec ends in a plan (and synth) or a clear SpecError,
never a traceback. The counts appear in pytest's warnings summary."""

from __future__ import annotations

import copy
import warnings

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from efa_stack.planning import catalog
from efa_stack.planning.plan import build_plan
from efa_stack.spec.errors import SpecError
from efa_stack.spec.loader import parse_spec

BASE = {
    "apiVersion": "eksctl.io/v1alpha5",
    "kind": "ClusterConfig",
    "metadata": {"name": "fuzz", "region": "us-west-2", "version": "1.34"},
    "availabilityZones": ["us-west-2a", "us-west-2b"],
    "managedNodeGroups": [
        {
            "name": "gpu",
            "instanceType": "p5.48xlarge",
            "minSize": 1,
            "desiredCapacity": 2,
            "maxSize": 3,
            "availabilityZones": ["us-west-2a"],
            "privateNetworking": True,
            "efaEnabled": True,
        }
    ],
}

PATHS = [
    ("metadata", "name"), ("metadata", "region"), ("metadata", "version"), ("availabilityZones",),
    ("managedNodeGroups",), ("managedNodeGroups", 0, "instanceType"), ("managedNodeGroups", 0, "minSize"),
    ("managedNodeGroups", 0, "desiredCapacity"), ("managedNodeGroups", 0, "maxSize"),
    ("managedNodeGroups", 0, "availabilityZones"), ("managedNodeGroups", 0, "privateNetworking"),
    ("managedNodeGroups", 0, "efaEnabled"), ("managedNodeGroups", 0, "volumeSize"),
    ("managedNodeGroups", 0, "interfaceLayout"), ("managedNodeGroups", 0, "placementGroup"),
    ("managedNodeGroups", 0, "capacity"), ("managedNodeGroups", 0, "taints"), ("managedNodeGroups", 0, "labels"),
    ("managedNodeGroups", 0, "devices"), ("ncclTest", "gpusPerWorker"),
    ("systemNodeGroup",), ("vpc",), ("vpc", "cidr"), ("accessConfig",), ("iam",), ("kind",), ("apiVersion",),
]

NAMES = catalog.names()
values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70000) | st.floats(allow_nan=True)
    | st.text(max_size=12) | st.sampled_from(NAMES)
    | st.sampled_from(["us-west-2a", "us-west-2c", "eu-west-1a", "current", "legacy", "on-demand",
                       "capacity-block", "reservation", "cr-0123456789abcdef0", "10.0.0.0/16", "1.34", "1.35",
                       "dra", "plugin"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def set_path(doc, path, value, delete=False):
    cur = doc
    for key in path[:-1]:
        if isinstance(cur, dict):
            cur = cur.setdefault(key, {})
        elif isinstance(cur, list) and isinstance(key, int) and key < len(cur):
            cur = cur[key]
        else:
            return
    last = path[-1]
    if isinstance(cur, dict):
        if delete:
            cur.pop(last, None)
        else:
            cur[last] = value
    elif isinstance(cur, list) and isinstance(last, int) and last < len(cur):
        cur[last] = value


mutation = st.tuples(st.sampled_from(PATHS), values, st.booleans())
COUNTS = {"tried": 0, "valid": 0, "rejected": 0}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=4), st.booleans())
def fuzz_one(mutations, as_text_garbage):
    doc = copy.deepcopy(BASE)
    for path, value, delete in mutations:
        set_path(doc, path, value, delete)
    text = yaml.safe_dump(doc)
    if as_text_garbage:
        text = text.replace(":", ": [", 1) if len(mutations) == 4 else text
    COUNTS["tried"] += 1
    try:
        plan = build_plan(parse_spec(text, source="fuzz.yaml"), source="fuzz.yaml")
    except SpecError as exc:
        COUNTS["rejected"] += 1
        assert exc.problems, "a SpecError always names at least one problem"
        for p in exc.problems:
            assert p.field and p.message and p.fix
            assert "Traceback" not in p.render()
    else:
        COUNTS["valid"] += 1
        assert plan.node_groups


def test_mutated_specs_end_in_a_plan_or_a_clear_error():
    COUNTS.update(tried=0, valid=0, rejected=0)
    fuzz_one()
    assert COUNTS["tried"] >= 100
    warnings.warn(
        f"spec fuzzing: {COUNTS['tried']} mutated specs tried, {COUNTS['valid']} valid, "
        f"{COUNTS['rejected']} rejected with a SpecError",
        UserWarning,
        stacklevel=1,
    )


EFA_TYPES = [t.name for t in catalog.efa_capable() if t.accelerator]


@pytest.mark.integration
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(EFA_TYPES),
    st.integers(0, 4),
    st.sampled_from(["current", "legacy"]),
    st.sampled_from([{"type": "on-demand"}, {"type": "reservation", "reservationId": "cr-0123456789abcdef0"},
                     {"type": "capacity-block", "reservationId": "cr-0123456789abcdef0"}]),
    st.booleans(),
)
def test_generated_specs_synthesize_or_fail_clearly(instance_type, nodes, layout, capacity, ena):
    from tests.support import synth_text

    doc = copy.deepcopy(BASE)
    ng = doc["managedNodeGroups"][0]
    ng.update({"instanceType": instance_type, "minSize": nodes, "desiredCapacity": nodes, "maxSize": max(nodes, 1),
               "interfaceLayout": layout, "capacity": capacity, "enaOnEfaCards": ena})
    try:
        s = synth_text(yaml.safe_dump(doc), nag=True)
    except SpecError as exc:
        assert exc.problems
        return
    lts = s.resources("cluster", "AWS::EC2::LaunchTemplate")
    nics = [n for v in lts.values() for n in v["Properties"]["LaunchTemplateData"].get("NetworkInterfaces", [])]
    efa = [n for n in nics if n["InterfaceType"] in ("efa", "efa-only")]
    assert len(efa) == catalog.get(instance_type).max_efa_interfaces


# Plausible values per path: mutations that mostly keep the spec valid, so that the valid ones
# go on through synth (cdk-nag on) and a crash in a construct is found like a crash in the loader.
PLAUSIBLE = {
    ("managedNodeGroups", 0, "instanceType"): st.sampled_from(EFA_TYPES),
    ("managedNodeGroups", 0, "minSize"): st.integers(0, 2),
    ("managedNodeGroups", 0, "desiredCapacity"): st.integers(0, 3),
    ("managedNodeGroups", 0, "maxSize"): st.integers(1, 450),
    ("managedNodeGroups", 0, "volumeSize"): st.sampled_from([20, 200, 16384]),
    ("managedNodeGroups", 0, "volumeType"): st.sampled_from(["gp3", "gp2"]),
    ("managedNodeGroups", 0, "interfaceLayout"): st.sampled_from(["current", "legacy"]),
    ("managedNodeGroups", 0, "enaOnEfaCards"): st.booleans(),
    ("managedNodeGroups", 0, "placementGroup"): st.booleans(),
    ("managedNodeGroups", 0, "capacity"): st.sampled_from([
        {"type": "on-demand"}, {"type": "reservation", "reservationId": "cr-0123456789abcdef0"},
        {"type": "capacity-block", "reservationId": "cr-0123456789abcdef0"}]),
    ("managedNodeGroups", 0, "labels"): st.dictionaries(st.sampled_from(["team", "tier", "app"]),
                                                         st.sampled_from(["ml", "a-b", "x1"]), max_size=2),
    ("managedNodeGroups", 0, "taints"): st.lists(st.fixed_dictionaries({
        "key": st.sampled_from(["dedicated", "example.com/pool"]), "value": st.sampled_from(["", "ml"]),
        "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"])}), max_size=2),
    ("systemNodeGroup",): st.fixed_dictionaries({"minSize": st.integers(1, 3), "volumeSize": st.integers(20, 100)}),
    ("vpc",): st.fixed_dictionaries({"cidr": st.sampled_from(["10.0.0.0/16", "10.20.0.0/18"]),
                                     "interfaceEndpoints": st.booleans(),
                                     "nat": st.fixed_dictionaries({"gateway": st.sampled_from(["Single", "HighlyAvailable"])})}),
    ("ncclTest",): st.fixed_dictionaries({"fabric": st.sampled_from(["efa", "tcp"]), "iterations": st.integers(1, 50)}),
    ("metadata", "version"): st.sampled_from(["1.33", "1.34", "1.35"]),
}
plausible_mutation = st.sampled_from(sorted(PLAUSIBLE, key=str)).flatmap(
    lambda path: st.tuples(st.just(path), PLAUSIBLE[path])
)


@pytest.mark.integration
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(plausible_mutation, min_size=2, max_size=5))
def test_mutated_specs_that_plan_also_synthesize(mutations):
    # GIVEN a mutated spec; WHEN it is planned and, if valid, synthesized with cdk-nag on;
    # THEN the only exception is a SpecError before synth, and a valid spec gives templates
    from tests.support import synth_text

    doc = copy.deepcopy(BASE)
    for path, value in mutations:
        set_path(doc, path, value)
    text = yaml.safe_dump(doc)
    try:
        s = synth_text(text, nag=True)
    except SpecError as exc:
        assert exc.problems
        return
    groups = s.resources("cluster", "AWS::EKS::Nodegroup")
    assert len(groups) == 2, text  # the spec's group and the system group
    assert s.template("network")["Resources"], text
