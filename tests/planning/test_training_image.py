"""The spec's trainingImage section: its plan and its problems (efa_stack/planning/image_compat.py). The image asset
synthesized without Docker: tests/aws_constructs/test_training_image.py; in the cluster stack:
tests/stacks/test_cluster_stack.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from efa_stack.planning.image_compat import load, recipe_build_args
from efa_stack.planning.plan import plan_from_file
from efa_stack.spec.errors import SpecError
from tests.builders import shipped
from tests.support import CLUSTERS, ROOT, scratch_dir

RECIPE = ROOT / "images" / "efa-pytorch" / "Dockerfile"


def spec_with(base: str = "default", **image: object) -> Path:
    """clusters/<base>.yaml with the ``trainingImage`` fields ``image``, as a file (relative directories resolve from
    the spec's folder)."""
    f = scratch_dir("efa-stack-image-") / "spec.yaml"
    f.write_text(shipped(base, trainingImage=image))
    return f


def problems(base: str = "default", **image: object) -> list:
    with pytest.raises(SpecError) as err:
        plan_from_file(spec_with(base, **image))
    return [p for p in err.value.problems if p.field.startswith("trainingImage")]


def test_no_training_image_by_default():
    assert plan_from_file(CLUSTERS / "default.yaml").training_image is None
    assert plan_from_file(spec_with(build=False)).training_image is None


def test_build_args_are_the_tables_recipe_by_default():
    # GIVEN build: true and no versions WHEN planned THEN the build args are the table's recipe set, resolved
    plan = plan_from_file(spec_with(build=True))
    image = plan.training_image
    assert image is not None
    recipe = load().recipe
    assert image.build_args == recipe_build_args()
    assert (image.stack.pytorch, image.stack.efa_installer) == (recipe.pytorch, recipe.efa_installer)
    assert image.directory == RECIPE.parent
    assert image.platform == "linux/amd64"  # p5.48xlarge: AL2023_X86_64_NVIDIA
    assert image.stack.nccl == image.build_args["NCCL_VERSION"]


def test_a_custom_dockerfile_pinning_its_own_versions_is_built_with_them(tmp_path):
    # GIVEN a build context whose Dockerfile pins PyTorch 2.11.0 (a known-good set with EFA installer 1.49.0)
    (tmp_path / "Dockerfile").write_text("ARG PYTORCH_VERSION=2.11.0\nARG EFA_INSTALLER_VERSION=1.49.0\nFROM scratch\n")
    plan = plan_from_file(spec_with(build=True, directory=str(tmp_path)))
    # THEN its pins win over the table's recipe, and the rest follows from the table
    assert plan.training_image is not None
    args = plan.training_image.build_args
    assert (args["PYTORCH_VERSION"], args["NCCL_VERSION"], args["AWS_OFI_NCCL_VERSION"]) == ("2.11.0", "2.28.9", "1.20.0")


def test_versions_from_the_spec_override_the_recipe():
    plan = plan_from_file(spec_with(build=True, pytorchVersion="2.12.1"))
    assert plan.training_image is not None
    assert plan.training_image.build_args["PYTORCH_VERSION"] == "2.12.1"
    assert plan.training_image.build_args["NCCL_VERSION"] == "2.29.7"


def test_fails_known_bad_installer_with_the_fix():
    # GIVEN the recipe's PyTorch on EFA installer 1.47.0, whose aws-ofi-nccl 1.18.0 hangs large broadcasts
    (p,) = problems(build=True, efaInstallerVersion="1.47.0")
    assert p.field == "trainingImage.efaInstallerVersion" and p.value == "1.47.0"
    assert "broadcast" in p.message and "deep-learning-containers#6551" in p.message
    # THEN the fix names the installer that is known-good with that PyTorch
    assert f"with PyTorch {load().recipe.pytorch} a known-good set is EFA installer 1.49.0" in p.fix


def test_fails_known_deadlock_of_pytorch_2_11_with_an_old_plugin():
    (p,) = problems(build=True, pytorchVersion="2.11.0", efaInstallerVersion="1.45.1")
    assert p.field == "trainingImage.efaInstallerVersion" and "deadlock" in p.message and "1.49.0" in p.fix


def test_fails_unknown_pytorch_version():
    (p,) = problems(build=True, pytorchVersion="2.99.0")
    assert p.field == "trainingImage.pytorchVersion" and "2.11.0" in p.fix


def test_fails_missing_build_context():
    found = problems(build=True, directory="images/does-not-exist")
    assert [p.field for p in found] == ["trainingImage.directory"]


def test_fails_without_nvidia_gpu_node_groups():
    found = problems("trn2", build=True)
    assert [p.field for p in found] == ["trainingImage.build"]
