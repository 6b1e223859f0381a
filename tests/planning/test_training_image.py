"""The spec's trainingImage section: its plan, its problems, and a synth that needs no Docker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from efa_stack.planning.image_compat import load, recipe_build_args
from efa_stack.planning.plan import plan_from_file
from efa_stack.spec.errors import SpecError
from tests.support import CLUSTERS, ROOT, scratch_dir

RECIPE = ROOT / "images" / "efa-pytorch" / "Dockerfile"


def spec_with(section: str, base: str = "default.yaml") -> Path:
    f = scratch_dir("efa-stack-image-") / "spec.yaml"
    f.write_text((CLUSTERS / base).read_text() + "\n" + section)
    return f


def problems(section: str, base: str = "default.yaml") -> list:
    with pytest.raises(SpecError) as err:
        plan_from_file(spec_with(section, base))
    return [p for p in err.value.problems if p.field.startswith("trainingImage")]


def test_no_training_image_by_default():
    assert plan_from_file(CLUSTERS / "default.yaml").training_image is None
    assert plan_from_file(spec_with("trainingImage:\n  build: false\n")).training_image is None


def test_build_args_are_the_tables_recipe_by_default():
    # GIVEN build: true and no versions WHEN planned THEN the build args are the table's recipe set, resolved
    plan = plan_from_file(spec_with("trainingImage:\n  build: true\n"))
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
    plan = plan_from_file(spec_with(f"trainingImage:\n  build: true\n  directory: {tmp_path}\n"))
    # THEN its pins win over the table's recipe, and the rest follows from the table
    assert plan.training_image is not None
    args = plan.training_image.build_args
    assert (args["PYTORCH_VERSION"], args["NCCL_VERSION"], args["AWS_OFI_NCCL_VERSION"]) == ("2.11.0", "2.28.9", "1.20.0")


def test_versions_from_the_spec_override_the_recipe():
    plan = plan_from_file(spec_with('trainingImage:\n  build: true\n  pytorchVersion: "2.12.1"\n'))
    assert plan.training_image is not None
    assert plan.training_image.build_args["PYTORCH_VERSION"] == "2.12.1"
    assert plan.training_image.build_args["NCCL_VERSION"] == "2.29.7"


def test_fails_known_bad_installer_with_the_fix():
    # GIVEN the recipe's PyTorch on EFA installer 1.47.0, whose aws-ofi-nccl 1.18.0 hangs large broadcasts
    (p,) = problems('trainingImage:\n  build: true\n  efaInstallerVersion: "1.47.0"\n')
    assert p.field == "trainingImage.efaInstallerVersion" and p.value == "1.47.0"
    assert "broadcast" in p.message and "deep-learning-containers#6551" in p.message
    # THEN the fix names the installer that is known-good with that PyTorch
    assert f"with PyTorch {load().recipe.pytorch} a known-good set is EFA installer 1.49.0" in p.fix


def test_fails_known_deadlock_of_pytorch_2_11_with_an_old_plugin():
    (p,) = problems('trainingImage:\n  build: true\n  pytorchVersion: "2.11.0"\n  efaInstallerVersion: "1.45.1"\n')
    assert p.field == "trainingImage.efaInstallerVersion" and "deadlock" in p.message and "1.49.0" in p.fix


def test_fails_unknown_pytorch_version():
    (p,) = problems('trainingImage:\n  build: true\n  pytorchVersion: "2.99.0"\n')
    assert p.field == "trainingImage.pytorchVersion" and "2.11.0" in p.fix


def test_fails_missing_build_context():
    found = problems("trainingImage:\n  build: true\n  directory: images/does-not-exist\n")
    assert [p.field for p in found] == ["trainingImage.directory"]


def test_fails_without_nvidia_gpu_node_groups():
    found = problems("trainingImage:\n  build: true\n", base="trn2.yaml")
    assert [p.field for p in found] == ["trainingImage.build"]


# --- synth: no Docker needed ---------------------------------------------------------------------------------

SYNTH = """
import sys
from aws_cdk import App
from efa_stack.planning.plan import plan_from_file
from stacks.compose import build
app = App(outdir=sys.argv[2], context={"aws:cdk:disable-asset-staging": True},
          builtin_cloud_formation_validation=False)
build(app, plan_from_file(sys.argv[1]))
app.synth()
"""


@pytest.fixture(scope="module")
def docker_free_synth() -> tuple[Path, str]:
    """The default spec with ``trainingImage.build: true``, synthesized in a process whose PATH has node and
    no docker (DockerImageAsset runs Docker only when the asset is published)."""
    spec = spec_with("trainingImage:\n  build: true\n")
    bin_dir = scratch_dir("efa-stack-bin-")
    node = shutil.which("node", path=str(Path(sys.executable).parent)) or shutil.which("node")
    assert node
    (bin_dir / "node").symlink_to(node)
    env = {**os.environ, "PATH": str(bin_dir)}
    assert shutil.which("docker", path=env["PATH"]) is None
    outdir = scratch_dir("efa-stack-image-out-")
    result = subprocess.run(
        [sys.executable, "-c", SYNTH, str(spec), str(outdir)], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return outdir, plan_from_file(spec).name


def test_synth_without_docker_outputs_the_image_uri(docker_free_synth):
    outdir, name = docker_free_synth
    template = json.loads((outdir / f"{name}-cluster.template.json").read_text())
    uri = template["Outputs"]["TrainingImageUri"]["Value"]
    assert "dkr.ecr" in json.dumps(uri)


def test_asset_carries_the_build_args_and_platform(docker_free_synth):
    outdir, name = docker_free_synth
    assets = json.loads((outdir / f"{name}-cluster.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    source = image["source"]
    assert source["dockerBuildArgs"] == recipe_build_args()
    assert source["platform"] == "linux/amd64"
    assert Path(source["directory"]) == RECIPE.parent
