"""aws_constructs/training_image.py: the training image as a Docker image asset, synthesized without Docker (a CDK
Docker image asset runs Docker only when ``cdk deploy`` publishes it). The cluster stack's image:
tests/stacks/test_cluster_stack.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aws_constructs.training_image import OUTPUT_ID
from tests.support import ROOT, scratch_dir

RECIPE = ROOT / "images" / "efa-pytorch"
BUILD_ARGS = {"PYTORCH_VERSION": "2.11.0", "EFA_INSTALLER_VERSION": "1.49.0"}
SYNTH = """
import json, sys
from aws_cdk import App, Stack
from aws_constructs.training_image import EfaTrainingImage, TrainingImageProps
app = App(outdir=sys.argv[2], context={"aws:cdk:disable-asset-staging": True}, builtin_cloud_formation_validation=False)
EfaTrainingImage(Stack(app, "Image"), "TrainingImage", TrainingImageProps(
    directory=sys.argv[1], platform="linux/arm64", build_args=json.loads(sys.argv[3])))
app.synth()
"""


@pytest.fixture(scope="module")
def docker_free_synth() -> Path:
    """The construct alone, synthesized in a process whose PATH has node and no docker."""
    bin_dir = scratch_dir("efa-stack-bin-")
    node = shutil.which("node", path=str(Path(sys.executable).parent)) or shutil.which("node")
    assert node
    (bin_dir / "node").symlink_to(node)
    env = {**os.environ, "PATH": str(bin_dir)}
    assert shutil.which("docker", path=env["PATH"]) is None
    outdir = scratch_dir("efa-stack-image-out-")
    result = subprocess.run(
        [sys.executable, "-c", SYNTH, str(RECIPE), str(outdir), json.dumps(BUILD_ARGS)], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return outdir


def test_synth_without_docker_outputs_the_image_uri(docker_free_synth):
    template = json.loads((docker_free_synth / "Image.template.json").read_text())
    assert "dkr.ecr" in json.dumps(template["Outputs"][OUTPUT_ID]["Value"])


def test_asset_carries_the_build_args_and_platform(docker_free_synth):
    assets = json.loads((docker_free_synth / "Image.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    source = image["source"]
    assert source["dockerBuildArgs"] == BUILD_ARGS
    assert source["platform"] == "linux/arm64"
    assert Path(source["directory"]) == RECIPE


