"""Every shipped spec keeps the logical ids of what holds state, and a synth is deterministic (docs/development.md,
"Reliability"); the replacement check itself: tests/checks/test_replacement.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import CLI_CONTEXT, CLUSTERS, NO_ASSET_STAGING, _synth_app, normalise_assets, scratch_dir, synth_spec

# Logical ids of resources whose replacement destroys state. Changing one is a breaking change:
# see docs/development.md, "Changing a pinned resource".
PINNED = {"Vpc": "AWS::EC2::VPC", "EksCluster": "AWS::EKS::Cluster", "ClusterSecretsKey": "AWS::KMS::Key"}


PINNED_STORAGE = {"LustreFileSystem": "AWS::FSx::FileSystem"}


PINNED_S3_LINK = {"LustreS3Association": "AWS::FSx::DataRepositoryAssociation"}


@pytest.mark.parametrize("spec", sorted(p.name for p in CLUSTERS.glob("*.yaml")))
def test_pinned_logical_ids(spec):
    s = synth_spec(str(CLUSTERS / spec))
    resources = s.template("cluster")["Resources"]
    pinned = dict(PINNED) if s.plan.existing_vpc is None else {k: v for k, v in PINNED.items() if k != "Vpc"}
    if s.plan.storage is not None:
        pinned |= PINNED_STORAGE
        if any(r["Type"] == "AWS::FSx::DataRepositoryAssociation" for r in resources.values()):
            pinned |= PINNED_S3_LINK
    for lid, type_ in pinned.items():
        assert resources.get(lid, {}).get("Type") == type_, f"{spec}: {lid} moved"


def synth_files(spec: Path) -> dict[str, str]:
    """The template files of a fresh synth of ``spec``, in the context of the session's synths."""
    from efa_stack.planning.plan import plan_from_file

    out = scratch_dir("efa-stack-det-")
    _synth_app(out, plan_from_file(spec), {**NO_ASSET_STAGING, **CLI_CONTEXT})
    return {p.name: normalise_assets(p.read_text()) for p in sorted(out.glob("*.template.json"))}


def test_synth_is_deterministic(default_synth):
    """A fresh synth of the default spec writes the same templates as the session's earlier one (that they are what
    ``python app.py`` writes, without the CDK CLI's context: tests/test_app.py)."""
    spec = CLUSTERS / "default.yaml"
    earlier = default_synth.outdir
    first = {p.name: normalise_assets(p.read_text()) for p in sorted(earlier.glob("*.template.json"))}
    second = synth_files(spec)
    assert first.keys() == second.keys() and len(first) == 1
    for name, text in first.items():
        assert text == second[name], name
    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:", "".join(first.values())), "timestamps in templates"


def test_synth_warnings_are_read_from_the_stacks_metadata_files(tmp_path):
    """aws-cdk-lib 2.275 writes a stack's annotations to its own metadata file (the manifest's
    additionalMetadataFile), where the suite's warnings-are-errors check must find them."""
    from aws_cdk import Annotations, App, Stack

    from tests.support import synth_warnings

    # CDK's built-in template validation is not what is tested (and costs seconds): off, as in the other test synths
    app = App(outdir=str(tmp_path), builtin_cloud_formation_validation=False)
    Annotations.of(Stack(app, "S")).add_warning_v2("efa-stack:test", "a warning the suite must see")
    app.synth()
    assert any("a warning the suite must see" in w for w in synth_warnings(tmp_path))
