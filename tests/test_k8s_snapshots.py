"""One snapshot per chart, and the dist/ YAML kept as golden files so a reviewer sees manifest changes.

Regenerate both after an intended change with ``make snapshots``
(``EFA_STACK_UPDATE_GOLDEN=1 pytest --snapshot-update``) and read the diff.
"""

from __future__ import annotations

import pytest

from k8s.charts import CHART_ORDER
from k8s.dist import APPLY_SCRIPT, dist_dir, render_chart, render_dist, write_dist
from tests.conftest import golden_check
from tests.test_k8s_support import GOLDEN_K8S, GOLDEN_SPECS, built

SNAPSHOT_CHARTS = [
    ("default", "efa-device-plugin"),
    ("default", "nvidia-device-plugin"),
    ("default", "mpi-operator-crd"),
    ("default", "mpi-operator"),
    ("default", "nccl-tests"),
    ("trn2", "efa-device-plugin"),
    ("trn2", "neuron-device-plugin"),
    ("training-p5", "training-runtimes"),
    ("training-p5", "training-jobs"),
]


OTHER_SNAPSHOTS = {"training-operator-crd", "training-operator"}
"""Charts no shipped spec renders: tests/test_training_operators.py snapshots the operator (the CRD is an
upstream file, tested there)."""


def test_snapshot_list_covers_every_chart():
    assert {c for _, c in SNAPSHOT_CHARTS} | OTHER_SNAPSHOTS == set(CHART_ORDER)


@pytest.mark.parametrize(("stem", "chart_id"), SNAPSHOT_CHARTS)
def test_chart_snapshot(stem, chart_id, snapshot):
    b = built(stem)
    (chart,) = [c for c in b.charts if c.node.id == chart_id]
    assert render_chart(b.plan, chart) == snapshot


@pytest.mark.parametrize("stem", GOLDEN_SPECS)
def test_dist_matches_golden_files(stem, tmp_path):
    plan = built(stem).plan
    out = dist_dir(plan, tmp_path)
    written = write_dist(plan, out)
    golden = GOLDEN_K8S / plan.name
    rels = [p.relative_to(out).as_posix() for p in written] + [APPLY_SCRIPT]
    for rel in rels:
        golden_check(golden / rel, (out / rel).read_text())
    stale = {p.relative_to(golden).as_posix() for p in golden.rglob("*.yaml")} - set(rels)
    assert not stale, f"golden files for charts no longer rendered: {sorted(stale)}; run `make snapshots`"


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
