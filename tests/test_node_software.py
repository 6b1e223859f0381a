"""The NVIDIA driver each EKS AL2023 NVIDIA AMI release gives an instance type (eks_al2023_nvidia_drivers.json), and
the plan's refusal of a Karpenter pool pinned to a release that gives its instance type a known-bad driver.

The real data gives no instance type of efa-stack's catalog a known-bad driver (the R595 row is about P6e, which the
catalog does not hold); the refusals are shown with synthetic rows, built here from the real files and named so."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from efa_stack.planning import image_compat, node_software
from efa_stack.planning.node_software import AMI_DRIVERS_FILE, AmiDriverData, ami_driver, load_ami_drivers, release_of
from tests.support import plan_of, problems_of
from tests.test_karpenter import P5_POOL, _spec


def pool_spec(ami_version: str | None = None, instance_type: str = "p5.48xlarge") -> str:
    """test_karpenter's cluster (Kubernetes 1.34) with one pool of ``instance_type``, pinned to ``ami_version``."""
    pool = P5_POOL.replace("p5.48xlarge", instance_type)
    return _spec(pool + (f"amiVersion: {ami_version}\n" if ami_version else ""))


def _raw_drivers() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(AMI_DRIVERS_FILE.read_text())
    return data


def synthetic_r595_on_p5(monkeypatch: pytest.MonkeyPatch) -> None:
    """SYNTHETIC: the v20260917 AMI sends p5 to its production-branch (595) tree, and the table has a copy of the
    R595 row that names p5.48xlarge. Neither is true; together they make the refusal reachable with a catalog type."""
    drivers = _raw_drivers()
    drivers["pbInstanceTypes"]["patterns"] = ["g7.*", "p5.*"]
    table = json.loads(image_compat.COMPAT_FILE.read_text())
    (r595,) = [b for b in table["knownBad"] if b["id"] == "nvidia-r595-p6e-efa"]
    table["knownBad"].append({**r595, "id": "synthetic-r595-p5", "instanceTypes": ["p5.*"],
                              "source": "synthetic row of tests/test_node_software.py"})
    monkeypatch.setattr(node_software, "load_ami_drivers", lambda: AmiDriverData.model_validate(drivers))
    monkeypatch.setattr(image_compat, "load", lambda: image_compat.CompatData.model_validate(table))


# --- the data ---------------------------------------------------------------------------------------------


def test_every_release_row_names_its_source_and_the_file_validates():
    data = load_ami_drivers()
    assert data.releases and all("amazon-eks-ami" in r.source for r in data.releases)
    assert "#2768" in data.pb_instance_types.source


@pytest.mark.parametrize(("release", "k8s", "itype", "tree", "version"), [
    # CHANGELOG at v20260724: per-release kmod-nvidia-latest-dkms rows
    ("v20260714", "1.35", "p5.48xlarge", "lts", "580.159.03"),
    ("v20260505", "1.33", "p4d.24xlarge", "lts", "580.126.09"),
    ("v20250715", "1.33", "p5.48xlarge", "lts", "575.57.08"),
    # one release, two drivers: v20251023 gave Kubernetes 1.34 the 580 driver and the others 570
    ("v20251023", "1.34", "p5.48xlarge", "lts", "580.95.05"),
    ("v20251023", "1.33", "p5.48xlarge", "lts", "570.195.03"),
    # since v20260917 two trees: every EFA GPU type of the catalog but g7 gets the LTS (580) tree
    ("v20260917", "1.35", "p5.48xlarge", "lts", "580.0"),
    ("v20260917", "1.35", "p6-b300.48xlarge", "lts", "580.0"),
    ("v20260917", "1.35", "g7e.48xlarge", "lts", "580.0"),
    ("v20260917", "1.35", "g7.48xlarge", "pb", "595.0"),
])
def test_release_gives_the_recorded_driver(release, k8s, itype, tree, version):
    pick = ami_driver(release, k8s, itype)
    assert pick is not None and (pick.tree, pick.version) == (tree, version)


def test_release_the_data_does_not_list_is_unknown():
    assert ami_driver("v20260801", "1.35", "p5.48xlarge") is None  # between v20260724 and v20260917
    assert ami_driver("v20261120", "1.35", "p5.48xlarge") is None  # after the newest release checked


def test_driver_is_shown_with_its_branch_and_exact_version_when_known():
    assert ami_driver("v20260714", "1.35", "p5.48xlarge").shown() == "R580 (580.159.03)"
    assert ami_driver("v20260917", "1.35", "g7.48xlarge").shown() == "R595"


def test_fails_data_with_overlapping_release_rows():
    bad = _raw_drivers()
    bad["releases"].append({**bad["releases"][-2], "from": "v20260714", "through": "v20260724"})
    with pytest.raises(ValidationError, match="overlap"):
        AmiDriverData.model_validate(bad)


def test_fails_data_with_a_release_range_that_runs_backwards():
    bad = _raw_drivers()
    bad["releases"][0] = {**bad["releases"][0], "from": "v20250101", "through": "v20240101"}
    with pytest.raises(ValidationError, match="runs backwards"):
        AmiDriverData.model_validate(bad)


@pytest.mark.parametrize(("text", "release"), [
    ("1.35.4-20260917", "v20260917"), ("v20260917", "v20260917"), ("20260917", "v20260917"),
    ("1.35.4", None), ("latest", None),
])
def test_release_of_reads_a_release_version_or_a_tag(text, release):
    assert release_of(text) == release


# --- the plan: a pool pinned to a release ------------------------------------------------------------------


def test_example_pool_release_is_known_and_plans_without_a_driver_warning():
    plan = plan_of(pool_spec())
    assert not [w for w in plan.warnings if AMI_DRIVERS_FILE.name in w]


def test_pool_on_a_release_the_data_does_not_know_plans_with_a_warning():
    # GIVEN a pool pinned to a release newer than the data covers WHEN planned THEN it plans, with a warning that says
    # verify --acceptance reads the driver on the nodes
    plan = plan_of(pool_spec("v20261120"))
    (warning,) = [w for w in plan.warnings if AMI_DRIVERS_FILE.name in w]
    assert "p5-pool" in warning and "v20261120" in warning and "verify --acceptance" in warning


def test_fails_pool_whose_release_gives_a_known_bad_driver_with_a_release_that_passes(monkeypatch):
    synthetic_r595_on_p5(monkeypatch)
    # GIVEN (synthetic) v20260917 gives p5 the R595 driver, a known-bad row for p5
    problems = [p for p in problems_of(pool_spec("v20260917"))
                if p.field == "karpenterNodePools[0].amiVersion"]
    (p,) = problems
    # THEN the pool's amiVersion is refused, naming the driver, the row and its source
    assert p.value == "v20260917"
    assert "R595" in p.message and "synthetic-r595-p5" in p.message and "synthetic row of tests" in p.message
    # AND the fix names the newest release the data gives p5 a driver outside the row ...
    assert p.fix.startswith("set amiVersion: v20260724 (it gives p5.48xlarge the R580 driver)")
    # ... which the plan accepts (the advice satisfies every rule)
    plan = plan_of(pool_spec("v20260724"))
    assert plan.karpenter is not None and plan.karpenter.pools[0].ami_version == "v20260724"


def test_pool_release_with_a_good_driver_is_not_refused_when_another_type_is_bad(monkeypatch):
    synthetic_r595_on_p5(monkeypatch)
    assert plan_of(pool_spec("v20260917", "p5en.48xlarge")).karpenter is not None
