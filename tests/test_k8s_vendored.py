"""k8s/vendored.py: every upstream file efa-stack keeps names its pin, the digest of its original and the command
that made it, and is exactly what that command writes; the command itself, on a small original."""

from __future__ import annotations

import hashlib
import re
import textwrap

import pytest
import yaml

from k8s.objects import SAFE_LOADER
from k8s.vendored import dump_documents, header, main, read_header, selected, stored_text, without_descriptions
from tests.support import ROOT

EFA_STACKS_OWN = {"k8s/crds/mpijob.yaml"}
"""Files under k8s/crds/ that efa-stack wrote itself (the MPIJob CRD: its header says why)."""

VENDORED = sorted(
    p.relative_to(ROOT).as_posix()
    for p in [*(ROOT / "k8s" / "crds").rglob("*.yaml"), *(ROOT / "tests" / "fixtures" / "upstream").glob("*.yaml")]
    if p.relative_to(ROOT).as_posix() not in EFA_STACKS_OWN
)

PIN = re.compile(r"^[\w.-]+/[\w.-]+@v\d+\.\d+\.\d+ \((commit [0-9a-f]{40}|Go module zip h1:[A-Za-z0-9+/]{43}=)\): \S.*$")
"""The pin: a tag with its commit, or, for a release read from the Go module proxy's zip of the tag (which carries
no commit), the zip's go.sum hash, which sum.golang.org vouches for."""


def test_the_vendored_files_are_these():
    # a new upstream file gets a header too (this list is what the two tests below read)
    assert VENDORED == [
        "k8s/crds/karpenter/autoscaling.x-k8s.io_capacitybuffers.yaml",
        "k8s/crds/karpenter/karpenter.k8s.aws_ec2nodeclasses.yaml",
        "k8s/crds/karpenter/karpenter.sh_nodeclaims.yaml",
        "k8s/crds/karpenter/karpenter.sh_nodeoverlays.yaml",
        "k8s/crds/karpenter/karpenter.sh_nodepools.yaml",
        "k8s/crds/kubeflow.org_pytorchjobs.yaml",
        "k8s/crds/kueue/controller.yaml",
        "k8s/crds/kueue/crds.yaml",
        "tests/fixtures/upstream/crd.k8s.amazonaws.com_eniconfigs.yaml",
        "tests/fixtures/upstream/resource.nvidia.com_computedomains.yaml",
    ]


@pytest.mark.parametrize("rel", VENDORED)
def test_a_vendored_file_names_its_pin_the_originals_digest_and_the_command(rel):
    h = read_header((ROOT / rel).read_text())
    assert PIN.match(h.upstream), f"{rel}: Upstream line {h.upstream!r} is not `owner/repo@vX.Y.Z (commit SHA): what` or `(Go module zip h1:...)`"
    assert re.fullmatch(r"[0-9a-f]{64}", h.digest), rel
    assert h.stored == rel  # the command writes this very file


@pytest.mark.parametrize("rel", VENDORED)
def test_a_vendored_file_is_what_its_command_writes(rel):
    # The original is not here (offline); what the command makes of it depends only on the objects it keeps, so
    # the stored file must be the command's output for its own objects: selected again (no description left, the
    # same documents kept), written again (the same text) under the same header.
    text = (ROOT / rel).read_text()
    h = read_header(text)
    docs = [d for d in yaml.load_all(text, Loader=SAFE_LOADER) if d]
    again = selected(docs, h.select)
    assert again == docs, f"{rel} holds what `{h.select}` drops (a description, another document)"
    assert text == header(h.upstream, h.digest, h.select, rel, again, h.notes) + dump_documents(again), (
        f"{rel} is not the command's output: make it again with its Made by line"
    )


def test_without_descriptions_drops_documentation_only():
    # a property *named* description is a schema object and stays
    assert without_descriptions({"description": "doc", "properties": {"description": {"type": "string"}}}) == {
        "properties": {"description": {"type": "string"}}
    }
    assert without_descriptions([{"description": "x", "type": "integer"}, 3]) == [{"type": "integer"}, 3]


SAMPLE = textwrap.dedent("""\
    # Copyright The Sample Authors.
    # SPDX-License-Identifier: Apache-2.0
    ---
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata: {name: widgets.example.com}
    spec:
      group: example.com
      versions: [{name: v1, schema: {openAPIV3Schema: {
        description: A Widget is a sample.,
        properties: {
          description: {description: "What the widget is for, a field named description.", type: string},
          size: {description: "How big.\\nIn units.", maximum: 9, type: integer}},
        type: object}}}]
    ---
    {apiVersion: v1, kind: ConfigMap, metadata: {name: widget-config}, data: {description: "kept, not a schema"}}
    """)

UPSTREAM = "example/widgets@v1.2.3 (commit " + "a" * 40 + "): config/crd/widgets.yaml"


def test_the_command_writes_the_pin_digest_command_licence_and_the_objects_without_descriptions(tmp_path,
                                                                                                monkeypatch):
    # GIVEN an original with a licence notice, a CRD with descriptions and another object
    (tmp_path / "original.yaml").write_text(SAMPLE)
    (tmp_path / "crds").mkdir()
    monkeypatch.chdir(tmp_path)
    # WHEN the command makes the stored file
    assert main(["--upstream", UPSTREAM, "original.yaml", "crds/widgets.yaml"]) == 0
    # THEN it has the header, upstream's comments, and the objects with only the CRD's description strings gone
    digest = hashlib.sha256(SAMPLE.encode()).hexdigest()
    assert (tmp_path / "crds" / "widgets.yaml").read_text() == textwrap.dedent(f"""\
        # Upstream: {UPSTREAM}
        # Original sha256: {digest}
        # Made by: python -m k8s.vendored ORIGINAL crds/widgets.yaml
        # Kept: every document; CRD schemas without their description strings, nothing else changed
        # Copyright The Sample Authors.
        # SPDX-License-Identifier: Apache-2.0
        ---
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata:
          name: widgets.example.com
        spec:
          group: example.com
          versions:
          - name: v1
            schema:
              openAPIV3Schema:
                properties:
                  description:
                    type: string
                  size:
                    maximum: 9
                    type: integer
                type: object
        ---
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: widget-config
        data:
          description: kept, not a schema
        """)
    # AND made again without --upstream, it reads the pin from the file's own header
    assert main(["--select", "others", "original.yaml", "crds/widgets.yaml"]) == 0
    h = read_header((tmp_path / "crds" / "widgets.yaml").read_text())
    assert (h.upstream, h.digest, h.select, h.stored) == (UPSTREAM, digest, "others", "crds/widgets.yaml")
    assert [d["kind"] for d in yaml.safe_load_all((tmp_path / "crds" / "widgets.yaml").read_text())] == ["ConfigMap"]
    assert "# Kept: every document but the CustomResourceDefinitions, unchanged\n" in (
        tmp_path / "crds" / "widgets.yaml").read_text()


def test_the_command_selects_the_crds_of_a_build():
    text = stored_text(SAMPLE, upstream=UPSTREAM, select="crds", stored="crds.yaml")
    assert [d["kind"] for d in yaml.safe_load_all(text)] == ["CustomResourceDefinition"]
    assert "# Made by: python -m k8s.vendored --select crds ORIGINAL crds.yaml\n" in text
    assert read_header(text).notes == ["# Copyright The Sample Authors.", "# SPDX-License-Identifier: Apache-2.0"]


@pytest.mark.parametrize(("args", "original", "message"), [
    (["--upstream", UPSTREAM, "--select", "crds"], "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
     "no document that --select crds keeps"),
    (["--upstream", UPSTREAM], "key: [unclosed\n", "the original is not YAML (ParserError)"),
    (["--upstream", UPSTREAM], "- a list\n", "a document that is not a Kubernetes object"),
    ([], SAMPLE, "new.yaml does not exist yet: name its origin with --upstream"),
])
def test_fails_an_original_the_command_cannot_use(tmp_path, monkeypatch, capsys, args, original, message):
    (tmp_path / "original.yaml").write_text(original)
    monkeypatch.chdir(tmp_path)
    assert main([*args, "original.yaml", "new.yaml"]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "new.yaml").exists()


@pytest.mark.parametrize(("stored", "message"), [
    ("# hand-copied\n" + SAMPLE, "no vendoring header"),
    (f"# Upstream: {UPSTREAM}\n# Original sha256: 0\n# Made by: cp ORIGINAL old.yaml\n# Kept: all\n",
     "is not a `python -m k8s.vendored` command"),
])
def test_fails_a_stored_file_without_a_header_the_command_wrote(tmp_path, monkeypatch, capsys, stored, message):
    (tmp_path / "original.yaml").write_text(SAMPLE)
    (tmp_path / "old.yaml").write_text(stored)
    monkeypatch.chdir(tmp_path)
    assert main(["original.yaml", "old.yaml"]) == 2
    assert message in capsys.readouterr().err
    assert (tmp_path / "old.yaml").read_text() == stored
