"""The version compatibility data (efa_image_compat.json), its checker and the image recipe's pins."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from efa_stack.planning import image_compat
from efa_stack.planning.image_compat import COMPAT_FILE, Combination, CompatData, Range, check, check_dockerfile

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "images" / "efa-pytorch" / "Dockerfile"


def raw() -> dict:
    return json.loads(COMPAT_FILE.read_text())


def test_data_file_is_valid_and_every_fact_has_a_source():
    data = image_compat.load()
    entries = [*data.pytorch.values(), *data.efa_installer.values(), *data.aws_ofi_nccl.values(),
               *data.known_bad, *data.known_good]
    assert entries and all(e.source.strip() for e in entries)


def test_fails_data_file_with_unknown_component():
    # GIVEN a known-bad rule on a component the checker does not know
    bad = raw()
    bad["knownBad"][0]["when"] = {"driver": {"min": "1.0"}}
    # WHEN it is validated THEN pydantic names the component
    with pytest.raises(ValidationError, match="unknown components"):
        CompatData.model_validate(bad)


def test_fails_data_file_whose_known_good_names_an_unlisted_release():
    bad = raw()
    bad["knownGood"].append({"pytorch": "9.9.9", "efaInstaller": "1.49.0", "source": "a source long enough"})
    with pytest.raises(ValidationError, match="names a release the data does not list"):
        CompatData.model_validate(bad)


def test_fails_data_file_with_unbounded_range():
    bad = raw()
    bad["knownBad"][0]["when"] = {"nccl": {}}
    with pytest.raises(ValidationError, match="min, below or both"):
        CompatData.model_validate(bad)


@pytest.mark.parametrize(("version", "inside"), [("2.28.8", False), ("2.28.9", True), ("2.29.0", False)])
def test_range_is_inclusive_below_and_exclusive_above(version, inside):
    assert Range(min="2.28.9", below="2.29.0").contains(version) is inside


def test_version_key_ignores_amzn_suffix_and_pads():
    assert image_compat.version_key("2.4.0amzn5.0") == image_compat.version_key("2.4")


def test_recipe_pins_a_known_good_combination():
    # GIVEN the image recipe WHEN its ARG pins are checked THEN no problem: a known-good combination whose
    # CUDA, NCCL and aws-ofi-nccl are the ones PyTorch and the EFA installer ship
    assert check_dockerfile(RECIPE) == []
    combo, _ = image_compat.dockerfile_combination(RECIPE.read_text())
    assert combo is not None
    resolved = image_compat.resolve(combo)
    assert (resolved.cuda, resolved.nccl, resolved.aws_ofi_nccl) == (combo.cuda, combo.nccl, combo.aws_ofi_nccl)
    assert image_compat.build_args(resolved) == {
        arg: image_compat.dockerfile_pins(RECIPE.read_text())[arg] for arg in image_compat.DOCKERFILE_ARGS.values()
    }


def test_fails_known_bad_nccl_2_28_9_with_plugin_before_1_20():
    # GIVEN PyTorch 2.11.0 (NCCL 2.28.9) with EFA installer 1.45.1 (aws-ofi-nccl 1.17.2)
    problems = check(Combination(pytorch="2.11.0", efa_installer="1.45.1"))
    # THEN one problem, on the installer, citing the deadlock and naming the fixing installer
    assert len(problems) == 1
    (p,) = problems
    assert p.field == "efaInstallerVersion" and p.value == "1.45.1"
    assert "deadlock" in p.message and "aws-ofi-nccl#1055" in p.message
    assert "1.49.0" in p.fix


def test_fails_known_bad_broadcast_hang_of_plugin_1_18():
    problems = check(Combination(pytorch="2.11.0", efa_installer="1.47.0"))
    assert any("broadcast" in p.message for p in problems)
    assert all(p.field == "efaInstallerVersion" for p in problems)


def test_fails_nccl_that_is_not_the_frameworks():
    (p,) = check(Combination(pytorch="2.11.0", efa_installer="1.49.0", nccl="2.27.7"))
    assert p.field == "ncclVersion" and "ships NCCL 2.28.9" in p.message


def test_fails_plugin_that_is_not_the_installers():
    (p,) = check(Combination(pytorch="2.11.0", efa_installer="1.49.0", aws_ofi_nccl="1.22.0"))
    assert p.field == "awsOfiNcclVersion" and "ships aws-ofi-nccl 1.20.0" in p.message


def test_fails_unknown_releases_all_at_once():
    problems = check(Combination(pytorch="9.9.9", efa_installer="0.1.0"))
    assert [p.field for p in problems] == ["pytorchVersion", "efaInstallerVersion"]


def test_fails_combination_no_source_vouches_for():
    (p,) = check(Combination(pytorch="2.9.1", efa_installer="1.49.0"))
    assert "not a known-good combination" in p.message and "2.11.0" in p.fix


def test_fails_dockerfile_pinning_a_known_bad_combination(tmp_path):
    # GIVEN the recipe with the EFA installer moved back to 1.47.0 (and its plugin)
    text = RECIPE.read_text().replace("EFA_INSTALLER_VERSION=1.49.0", "EFA_INSTALLER_VERSION=1.47.0")
    text = text.replace("AWS_OFI_NCCL_VERSION=1.20.0", "AWS_OFI_NCCL_VERSION=1.18.0")
    assert text != RECIPE.read_text()
    (tmp_path / "Dockerfile").write_text(text)
    problems = check_dockerfile(tmp_path / "Dockerfile")
    assert problems and all(p.field == "ARG EFA_INSTALLER_VERSION" for p in problems)


def test_fails_dockerfile_without_pins(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime\n")
    problems = check_dockerfile(tmp_path / "Dockerfile")
    assert {p.field for p in problems} == {f"ARG {a}" for a in image_compat.DOCKERFILE_ARGS.values()}


# --- what the recipe does beyond its version pins --------------------------------------------------------------

def recipe_env(name: str) -> list[str]:
    """The ``:``-separated entries the recipe's ``ENV`` gives ``name``."""
    text = RECIPE.read_text().replace("\\\n", " ")
    values = re.findall(rf"^ENV .*?\b{name}=(\S+)", text, re.MULTILINE)
    assert len(values) == 1, values
    return values[0].split(":")


def test_recipe_puts_the_plugin_directory_on_ld_library_path_and_keeps_the_bases():
    # GIVEN the Debian/Ubuntu libnccl-ofi package, built with --libdir=/opt/amazon/ofi-nccl/lib on every
    # architecture (aws/aws-ofi-nccl@v1.20.0 contrib/debian-template/rules)
    path = recipe_env("LD_LIBRARY_PATH")
    # THEN that directory comes first, no per-architecture directory of older installers is listed, and the
    # base image's own LD_LIBRARY_PATH is kept rather than replaced
    assert path[0] == "/opt/amazon/ofi-nccl/lib"
    assert not [d for d in path if "linux-gnu" in d]
    assert path[-1] == "${LD_LIBRARY_PATH}"


def test_recipe_checks_the_library_nccl_dlopens():
    # NCCL 2.28.9 with NCCL_NET_PLUGIN unset dlopens libnccl-net.so (NVIDIA/nccl@v2.28.9-1 src/plugin/net.cc)
    text = RECIPE.read_text()
    assert "test -e /opt/amazon/ofi-nccl/lib/libnccl-net.so " in text
    assert re.search(r"ldconfig -p \| grep '[^']*libnccl-net\\\.so '", text)
    # the installer runs ldconfig's cache refresh after installing the plugin's ld.so.conf.d entry
    install = text.index("./efa_installer.sh")
    assert text.index("&& ldconfig", install) > install


def test_recipe_verifies_the_installer_signature_before_unpacking_it():
    # GIVEN the fingerprint the Amazon EC2 User Guide prints for the EFA installer signing key
    text = RECIPE.read_text()
    assert image_compat.dockerfile_pins(text)["EFA_INSTALLER_KEY_FINGERPRINT"] == (
        "4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC"
    )
    # THEN gpg checks the tarball's .sig against that key before tar unpacks it
    verify = text.index('gpg --batch --status-fd 1 --verify "${tarball}.sig" "${tarball}"')
    assert "VALIDSIG (.* )?${EFA_INSTALLER_KEY_FINGERPRINT}" in text[verify:verify + 300]
    assert verify < text.index('tar -xf "${tarball}"') < text.index("./efa_installer.sh")
    assert "--disable-ngc" in text


DLC_EC2_PYTORCH = re.compile(r"^public\.ecr\.aws/deep-learning-containers/pytorch:\d+\.\d+(\.\d+)?-cu\d{3}-amzn2023$")
"""AWS Deep Learning Containers, PyTorch training for EC2/EKS: ``<version>-cu<cuda>-amzn2023`` with no suffix
(SageMaker tags end in ``-sagemaker``): aws/deep-learning-containers docs/src/data/pytorch/2.11-cuda-ec2.yml."""


def test_example_training_job_names_a_published_dlc_tag():
    spec = yaml.safe_load((ROOT / "clusters" / "training-p5.yaml").read_text())
    (job,) = spec["trainingJobs"]
    assert DLC_EC2_PYTORCH.match(job["image"]), job["image"]
    # the tag's PyTorch is one the compatibility data knows, with the tag's CUDA major (cu130 -> 13)
    match = re.match(r".*:(\d+\.\d+\.\d+)-cu(\d+)\d-amzn2023$", job["image"])
    assert match is not None
    version, cuda_major = match.groups()
    assert image_compat.load().pytorch[version].cuda.split(".")[0] == cuda_major


def test_fails_the_suffixed_tag_the_example_used_to_name():
    # GIVEN the tag with an -ec2 suffix that no DLC release publishes THEN the pattern rejects it
    assert not DLC_EC2_PYTORCH.match("public.ecr.aws/deep-learning-containers/pytorch:2.11-cu130-amzn2023-ec2")
