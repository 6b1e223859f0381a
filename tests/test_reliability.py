"""No accidental replacement of long-lived resources, and deterministic synth."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from efa_stack.policies.replacement import replaced_resources
from tests.conftest import CLUSTERS, normalise_assets, synth_spec, synth_text
from tests.test_spec_validation import BASE

# Logical ids of resources whose replacement destroys state. Changing one is a breaking change:
# see README "Changing a pinned resource on purpose".
PINNED = {
    "network": {"Vpc": "AWS::EC2::VPC"},
    "cluster": {"EksCluster": "AWS::EKS::Cluster", "ClusterSecretsKey": "AWS::KMS::Key"},
    "storage": {"LustreFileSystem": "AWS::FSx::FileSystem", "LustreS3Association": "AWS::FSx::DataRepositoryAssociation"},
}


@pytest.mark.parametrize("spec", sorted(p.name for p in CLUSTERS.glob("*.yaml")))
def test_pinned_logical_ids(spec):
    s = synth_spec(str(CLUSTERS / spec))
    for stack, ids in PINNED.items():
        if stack == "storage" and s.plan.storage is None:
            continue
        resources = s.template(stack)["Resources"]
        for lid, type_ in ids.items():
            assert resources.get(lid, {}).get("Type") == type_, f"{spec}: {stack}/{lid} moved"


def both(before: str, after: str, stack: str) -> list:
    return replaced_resources(synth_text(before).template(stack), synth_text(after).template(stack))


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda t: t.replace("desiredCapacity: 2\n    maxSize: 3", "desiredCapacity: 3\n    maxSize: 8"), id="node-counts"),
        pytest.param(lambda t: t + BASE.split("managedNodeGroups:\n", 1)[1].replace("name: gpu", "name: gpu2").replace("p5.48xlarge", "p5en.48xlarge"), id="add-node-group"),
        pytest.param(lambda t: t.replace("p5.48xlarge", "p4d.24xlarge"), id="instance-type"),
        pytest.param(lambda t: t + "ncclTest: {binary: all_gather_perf, maxBytes: 1G}\n", id="nccl-sweep"),
    ],
)
def test_frequent_changes_never_replace_the_cluster_or_network(change):
    for stack in ("network", "cluster"):
        assert both(BASE, change(BASE), stack) == [], stack


def test_a_replacing_change_is_detected():
    changed = BASE + "vpc: {cidr: 10.1.0.0/16}\n"
    found = both(BASE, changed, "network")
    assert ("Vpc", "CidrBlock changed") in {(r.logical_id, r.why) for r in found}
    subnets = [r for r in found if r.type == "AWS::EC2::Subnet"]
    assert subnets and all(r.why == "CidrBlock changed" for r in subnets)


def test_a_renamed_cluster_is_detected():
    found = both(BASE, BASE.replace("name: t,", "name: t2,"), "cluster")
    assert ("EksCluster", "Name changed") in {(r.logical_id, r.why) for r in found}


def synth_files(spec: Path) -> dict[str, str]:
    from aws_cdk import App

    from efa_stack.spec.plan import plan_from_file
    from stacks.app import build

    out = Path(tempfile.mkdtemp(prefix="efa-stack-det-"))
    app = App(outdir=str(out))
    build(app, plan_from_file(spec))
    app.synth()
    return {p.name: normalise_assets(p.read_text()) for p in sorted(out.glob("*.template.json"))}


def test_synth_is_deterministic():
    spec = CLUSTERS / "default.yaml"
    first, second = synth_files(spec), synth_files(spec)
    assert first.keys() == second.keys() and len(first) == 2
    for name in first:
        assert first[name] == second[name], name
    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:", "".join(first.values())), "timestamps in templates"
