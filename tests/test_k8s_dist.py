"""k8s/dist.py: the dist/ YAML, kept as golden files so a reviewer sees every manifest change.

One golden file per distinct manifest: the reference cluster (``clusters/default.yaml``) keeps its whole
dist/ in tests/golden/k8s/<cluster name>/; another golden spec keeps only the files that differ from the
reference's by more than the cluster's name and region. The files meant to be the reference's (charts that
do not depend on the spec's node groups) are listed in :data:`SAME_AS_REFERENCE` and asserted identical; those
with the reference's objects and other figures (:data:`PATCHED`) are kept as a patch of the reference's.
Regenerate after an intended change with ``make snapshots`` (``EFA_STACK_UPDATE_GOLDEN=1``) and read the diff.
"""

from __future__ import annotations

import re

import pytest
import yaml

from k8s.components import CHART_ORDER, TRAINING_OPERATOR_CRD, chart_file_name
from k8s.dist import APPLY_SCRIPT, dist_dir, dist_files, render_dist, write_dist
from tests.golden_patch import apply_from, golden_text, patch_from
from tests.support import GOLDEN, GOLDEN_K8S, GOLDEN_SPECS, UPDATE_GOLDEN, built, golden_check

REFERENCE = "default"
"""The golden spec whose dist/ is kept whole."""

EFA, NVIDIA = chart_file_name("efa-device-plugin"), chart_file_name("nvidia-device-plugin")
MPI_CRD, MPI_OPERATOR = chart_file_name("mpi-operator-crd"), chart_file_name("mpi-operator")

SAME_AS_REFERENCE: dict[str, set[str]] = {
    "eksctl-efa-cluster": {EFA, NVIDIA, MPI_CRD, MPI_OPERATOR, APPLY_SCRIPT},
    "p4d": {EFA, NVIDIA, MPI_CRD, MPI_OPERATOR, APPLY_SCRIPT},
    "p5en": {EFA, NVIDIA, MPI_CRD, MPI_OPERATOR, APPLY_SCRIPT},
    "p6-b200": {EFA, NVIDIA, MPI_CRD, MPI_OPERATOR, APPLY_SCRIPT},
    "trn2": {MPI_CRD, MPI_OPERATOR},  # its EFA device plugin tolerates the Neuron taint instead of the GPU one
    "karpenter-p5": {EFA, NVIDIA, MPI_CRD, MPI_OPERATOR},  # its apply.sh installs Karpenter and waits for Kueue
    "tas-p5": {EFA, NVIDIA, MPI_CRD, MPI_OPERATOR},  # its apply.sh installs the Trainer and waits for Kueue
    "dra-p5": {MPI_CRD, MPI_OPERATOR},  # no device plugin: its devices come from the DRA drivers
}
"""Spec -> dist files that are the reference cluster's with only the cluster name and region replaced
(headers, the regional ECR registry of the EFA device plugin's image): the MPI operator and its CRD do not
depend on the spec, the device plugins only on the accelerator (NVIDIA here), ``apply.sh`` on which
steps there are. Everything else of a golden spec has its own golden file."""

NCCL, RUNTIMES = f"after-crds/{chart_file_name('nccl-tests')}", f"after-crds/{chart_file_name('training-runtimes')}"
PATCHED: dict[str, tuple[str, str, str]] = {
    NCCL: ("nccl-tests", REFERENCE, f"k8s/efa-training/{NCCL}"),
    RUNTIMES: ("training-runtimes", "training-p5", "training/p5-trainjob/45-training-runtimes.yaml"),
}
"""Dist files a golden spec keeps as a patch of another spec's (``<name>.patch.yaml``): dist file -> (chart, the
spec whose objects it patches, that spec's golden file under tests/golden/). The same objects with other figures
(instance type, node group, sizes, Kueue's annotations), so the patch is the list of what the spec changes."""

VENDORED_CRDS = "the vendored release CRDs as they are: test_vendored_crd_charts_are_the_vendored_files"
NOT_GOLDEN = {TRAINING_OPERATOR_CRD: "upstream's CRD less its descriptions, compared with upstream's file in "
                                     "tests/test_k8s_training_operators.py",
              "kueue-crd": VENDORED_CRDS, "kueue-workload-crd": VENDORED_CRDS, "karpenter-crd": VENDORED_CRDS,
              "kueue": "the release build k8s/crds/kueue/controller.yaml plus efa-stack's changes, kept as a patch "
                       "(tests/golden/kueue/controller.patch.yaml) in tests/test_kueue.py, with the one value in "
                       "which two specs' charts differ"}
"""Charts with no golden file, and where they are compared instead."""


def for_cluster(text: str, reference, plan) -> str:
    """The reference cluster's ``text`` with the cluster's name and region in place of the reference's."""
    return text.replace(reference.name, plan.name).replace(reference.region, plan.region)


def test_every_chart_has_one_golden_file():
    found = [p.name for p in GOLDEN.rglob("*.yaml") if re.match(r"^\d\d-", p.name)]
    charts = {re.sub(r"^\d\d-|(\.patch)?\.yaml$", "", n) for n in found}
    assert charts | set(NOT_GOLDEN) == set(CHART_ORDER)
    assert not charts & set(NOT_GOLDEN)


def _patched_golden(rel: str, b) -> str:
    """Check ``rel`` of ``b`` as its patch of another spec's (a golden); return the golden's path."""
    chart, base_stem, base_golden = PATCHED[rel]
    base = built(base_stem)
    patch_rel = rel.removesuffix(".yaml") + ".patch.yaml"
    patch = patch_from(base.manifests[chart], b.manifests[chart])
    golden = GOLDEN_K8S / b.plan.name / patch_rel
    golden_check(golden, golden_text([
        f"{rel} of cluster {b.plan.name}: the objects of cluster {base.plan.name}'s",
        f"(tests/golden/{base_golden}), one by one, each patched as its JSON Patch (RFC 6902) says.",
    ], patch))
    # re-derived from the other spec's objects and the golden alone, the chart is what the spec renders
    assert apply_from(base.manifests[chart], yaml.safe_load(golden.read_text())) == b.manifests[chart]
    return patch_rel


@pytest.mark.parametrize("stem", GOLDEN_SPECS)
def test_dist_matches_golden_files(stem, tmp_path):
    b = built(stem)
    plan = b.plan
    out = dist_dir(plan, tmp_path)
    written = write_dist(plan, out, b.charts)
    rels = [p.relative_to(out).as_posix() for p in written] + [APPLY_SCRIPT]
    rels = [r for r in rels if re.sub(r"^\d\d-|\.yaml$", "", r.rsplit("/", 1)[-1]) not in NOT_GOLDEN]  # elsewhere
    shared = SAME_AS_REFERENCE.get(stem, set())
    assert shared <= set(rels), f"{stem} no longer renders {sorted(shared - set(rels))}"
    ref = built(REFERENCE)
    ref_files = dist_files(ref.plan, ref.charts)  # rendered here, not read from its golden files (being rewritten)
    golden = GOLDEN_K8S / plan.name
    kept = set()
    for rel in rels:
        text = (out / rel).read_text()
        if rel in shared:
            assert text == for_cluster(ref_files[rel], ref.plan, plan), (
                f"{plan.name}'s {rel} is meant to be {ref.plan.name}'s for another cluster name and region; if it "
                f"no longer is on purpose, take it out of SAME_AS_REFERENCE and run `make snapshots`"
            )
        elif rel in PATCHED and stem != PATCHED[rel][1]:
            kept.add(_patched_golden(rel, b))
        else:
            golden_check(golden / rel, text)
            kept.add(rel)
    stale = {p.relative_to(golden).as_posix() for p in golden.rglob("*") if p.is_file()} - kept
    if UPDATE_GOLDEN:
        for rel in stale:
            (golden / rel).unlink()
    else:
        assert not stale, f"golden files for charts not rendered or shared: {sorted(stale)}; run `make snapshots`"


def test_no_two_golden_files_share_a_body():
    # below their header comments (cluster name, region): a file that would repeat another is asserted equal to it
    # instead (SAME_AS_REFERENCE, tests/test_catalog_layout.py's SAME_LAYOUT_AS) or kept as a patch of upstream's
    seen: dict[str, str] = {}
    for path in sorted(p for p in GOLDEN.rglob("*") if p.is_file()):
        lines = path.read_text().splitlines()
        body = "\n".join(lines[next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines)):])
        rel = path.relative_to(GOLDEN).as_posix()
        assert body not in seen, f"{rel} repeats {seen[body]}"
        seen[body] = rel


def test_dist_is_deterministic_and_ordered():
    plan = built("default").plan
    first, second = render_dist(plan), render_dist(plan)
    assert first == second
    assert list(first) == sorted(first)  # file-name order is apply order


def test_write_dist_removes_only_stale_chart_files(tmp_path):
    plan = built("default").plan
    (tmp_path / "12-neuron-device-plugin.yaml").write_text("old")
    (tmp_path / "README.md").write_text("keep")
    written = write_dist(plan, tmp_path)
    assert not (tmp_path / "12-neuron-device-plugin.yaml").exists()
    assert (tmp_path / "README.md").read_text() == "keep"
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.yaml")) == sorted(
        p.relative_to(tmp_path).as_posix() for p in written
    )


def test_write_dist_moves_a_chart_out_of_the_first_step(tmp_path):
    # GIVEN an earlier flat dist/ with the MPIJob next to its CRD WHEN written again THEN it moved
    plan = built("default").plan
    (tmp_path / "40-nccl-tests.yaml").write_text("old")
    write_dist(plan, tmp_path)
    assert not (tmp_path / "40-nccl-tests.yaml").exists()
    assert (tmp_path / "after-crds" / "40-nccl-tests.yaml").is_file()


@pytest.mark.parametrize(("stem", "charts", "module"), [
    ("tas-p5", ("kueue-crd", "kueue-workload-crd"), "k8s.kueue"),
    ("karpenter-p5", ("karpenter-crd",), "k8s.karpenter"),
])
def test_vendored_crd_charts_are_the_vendored_files(stem, charts, module):
    """The CRD charts of Kueue and Karpenter render the vendored release files (k8s/crds/), object for object."""
    import importlib

    vendored = importlib.import_module(module).crd_documents()
    manifests = built(stem).manifests
    rendered = [obj for chart in charts for obj in manifests[chart]]
    by_name = {d["metadata"]["name"]: d for d in rendered}
    assert sorted(by_name) == sorted(d["metadata"]["name"] for d in vendored)
    for want in vendored:  # efa-stack adds its own labels only
        got = by_name[want["metadata"]["name"]]
        assert got["spec"] == want["spec"] and (got["apiVersion"], got["kind"]) == (want["apiVersion"], want["kind"])
        assert got["metadata"].get("annotations") == want["metadata"].get("annotations")
        assert want["metadata"].get("labels", {}).items() <= got["metadata"]["labels"].items()


def test_a_charts_text_is_its_objects_content_alone():
    """The rendered text is cached per process by the objects it renders: objects alike in content render alike
    (no YAML anchors for a shared object), and objects that YAML renders apart are never given one text."""
    from k8s.dist import _documents_text

    shared = {"name": "shared-object"}
    aliased = _documents_text([{"a": shared, "b": shared}])
    assert "&id" not in aliased and "*id" not in aliased
    assert aliased == _documents_text([{"a": {"name": "shared-object"}, "b": {"name": "shared-object"}}])
    assert _documents_text([{"key-type": {1: "x"}}]) != _documents_text([{"key-type": {"1": "x"}}])
    assert _documents_text([{"value-type": True}]) != _documents_text([{"value-type": "true"}])
