"""Fuzzed specs: every generated or mutated spec ends in a plan (and synth) or a clear SpecError,
never a traceback. The counts appear in pytest's warnings summary."""

from __future__ import annotations

import copy
import warnings

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from efa_stack.spec import catalog
from efa_stack.spec.errors import SpecError
from efa_stack.spec.loader import parse_spec
from efa_stack.spec.plan import build_plan

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
    ("systemNodeGroup",), ("vpc",), ("vpc", "cidr"), ("accessConfig",), ("iam",), ("kind",), ("apiVersion",),
]

NAMES = catalog.names()
values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70000) | st.floats(allow_nan=True)
    | st.text(max_size=12) | st.sampled_from(NAMES)
    | st.sampled_from(["us-west-2a", "us-west-2c", "eu-west-1a", "current", "legacy", "on-demand",
                       "capacity-block", "reservation", "cr-0123456789abcdef0", "10.0.0.0/16", "1.34"]),
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


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(EFA_TYPES),
    st.integers(0, 4),
    st.sampled_from(["current", "legacy"]),
    st.sampled_from([{"type": "on-demand"}, {"type": "reservation", "reservationId": "cr-0123456789abcdef0"},
                     {"type": "capacity-block", "reservationId": "cr-0123456789abcdef0"}]),
    st.booleans(),
)
def test_generated_specs_synthesize_or_fail_clearly(instance_type, nodes, layout, capacity, ena):
    from tests.conftest import synth_text

    doc = copy.deepcopy(BASE)
    ng = doc["managedNodeGroups"][0]
    ng.update({"instanceType": instance_type, "minSize": nodes, "desiredCapacity": nodes, "maxSize": max(nodes, 1),
               "interfaceLayout": layout, "capacity": capacity, "enaOnEfaCards": ena})
    try:
        s = synth_text(yaml.safe_dump(doc))
    except SpecError as exc:
        assert exc.problems
        return
    lts = s.resources("cluster", "AWS::EC2::LaunchTemplate")
    nics = [n for v in lts.values() for n in v["Properties"]["LaunchTemplateData"].get("NetworkInterfaces", [])]
    efa = [n for n in nics if n["InterfaceType"] in ("efa", "efa-only")]
    assert len(efa) == catalog.get(instance_type).max_efa_interfaces
