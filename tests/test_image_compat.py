"""The table of EFA software (efa_software.json): its data, the image checker and the image recipe's build args."""

from __future__ import annotations

import json
import re
import subprocess
import sys
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


def test_recipe_takes_the_five_versions_as_build_args_without_defaults():
    # GIVEN the image recipe WHEN its ARGs are read THEN it declares every version build arg and types none of them:
    # the versions are typed once, in the table
    text = RECIPE.read_text()
    pins = image_compat.dockerfile_pins(text)
    for arg in image_compat.DOCKERFILE_ARGS.values():
        assert re.search(rf"^ARG {arg}$", text, re.MULTILINE), arg
        assert arg not in pins, f"{arg} has a default in the recipe; the table holds the version"


def test_table_recipe_is_the_newest_known_good_set_and_gives_the_build_args():
    data = image_compat.load()
    recipe = Combination(pytorch=data.recipe.pytorch, efa_installer=data.recipe.efa_installer)
    # GIVEN the table's recipe row THEN it is a tested-together set, the newest one the table knows
    assert check(recipe) == []
    newest = max(data.known_good, key=lambda g: (image_compat.version_key(g.pytorch),
                                                 image_compat.version_key(g.efa_installer)))
    assert (recipe.pytorch, recipe.efa_installer) == (newest.pytorch, newest.efa_installer)
    # AND its build args are the resolved stack: the framework's CUDA and NCCL, the installer's plugin
    resolved = image_compat.resolve(recipe)
    assert image_compat.recipe_build_args() == {
        "PYTORCH_VERSION": recipe.pytorch, "CUDA_VERSION": resolved.cuda, "NCCL_VERSION": resolved.nccl,
        "EFA_INSTALLER_VERSION": recipe.efa_installer, "AWS_OFI_NCCL_VERSION": resolved.aws_ofi_nccl,
    }
    # AND the plugin it ships is tested upstream with exactly the NCCL PyTorch loads
    assert resolved.nccl in data.aws_ofi_nccl[resolved.aws_ofi_nccl].tested_nccl


def test_recipe_build_args_print_as_docker_flags():
    out = subprocess.run([sys.executable, "-m", "efa_stack.planning.image_compat"], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=60).stdout.split()
    assert set(out[::2]) == {"--build-arg"}
    assert dict(v.split("=", 1) for v in out[1::2]) == image_compat.recipe_build_args()


def test_fails_data_file_whose_recipe_is_not_known_good():
    bad = raw()
    bad["recipe"] = {"pytorch": "2.9.1", "efaInstaller": "1.49.0", "source": "a source long enough"}
    with pytest.raises(ValidationError, match="recipe 2.9.1 \\+ EFA 1.49.0 is not a knownGood set"):
        CompatData.model_validate(bad)


def test_recipe_stops_a_build_without_its_version_args(tmp_path):
    # GIVEN the recipe's first RUN, which checks the version build args WHEN run by bash with one left out
    text = RECIPE.read_text().replace("\\\n", " ")
    run = next(line for line in text.splitlines() if line.startswith("RUN for arg in"))
    loop = run[len("RUN "):].split(" && apt-get", 1)[0]
    env = {"PATH": "/usr/bin:/bin", **{a: "1.0" for a in image_compat.DOCKERFILE_ARGS.values()}}
    env.pop("NCCL_VERSION")
    result = subprocess.run(["bash", "-c", loop], env=env, capture_output=True, text=True, timeout=30, check=False)
    # THEN the build stops, naming the arg and how to pass the table's values
    assert result.returncode == 1
    assert "NCCL_VERSION is not set" in result.stderr and "efa_stack.planning.image_compat" in result.stderr
    env["NCCL_VERSION"] = "2.29.7"
    assert subprocess.run(["bash", "-c", loop], env=env, timeout=30, check=False).returncode == 0


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


def test_fails_known_bad_build_with_a_fix_that_names_only_accepted_sets():
    # GIVEN PyTorch 2.14.1 (NCCL 2.30.7) on EFA installer 1.47.0, whose aws-ofi-nccl 1.18.0 hangs broadcasts
    problems = check(Combination(pytorch="2.14.1", efa_installer="1.47.0"))
    assert problems and all("broadcast" in p.message or "deadlock" in p.message for p in problems)
    # THEN the fix does not send the user to 1.49.0 alone (PyTorch 2.14.1 on 1.49.0 is refused next: no source
    # tested it) but to the sets the table accepts, each of which passes
    for p in problems:
        assert "PyTorch 2.14.1 has no known-good EFA installer" in p.fix
        named = re.findall(r"PyTorch (\d+\.\d+\.\d+) \+ EFA installer (\d+\.\d+\.\d+)", p.fix)
        assert named
        assert all(check(Combination(pytorch=t, efa_installer=e)) == [] for t, e in named)


def test_known_bad_fix_names_the_known_good_installer_for_the_same_pytorch():
    (p,) = check(Combination(pytorch="2.12.1", efa_installer="1.47.0"))
    assert "with PyTorch 2.12.1 a known-good set is EFA installer 1.49.0" in p.fix
    assert check(Combination(pytorch="2.12.1", efa_installer="1.49.0")) == []


def test_fails_known_bad_libfabric_of_the_installer():
    # GIVEN a (synthetic) known-bad row on the libfabric that EFA installer 1.49.0 ships
    data = raw()
    data["knownBad"].append({
        "id": "synthetic-libfabric", "when": {"libfabric": {"min": "2.4.0", "below": "2.5.0"}},
        "problem": "a synthetic libfabric defect", "fix": "use an installer with another libfabric",
        "source": "synthetic row for a unit test",
    })
    compat = CompatData.model_validate(data)
    # WHEN the recipe's set is checked against it THEN the installer is named, with the row's source
    (p,) = check(Combination(pytorch="2.13.0", efa_installer="1.49.0"), data=compat)
    assert p.field == "efaInstallerVersion" and "libfabric 2.4.0amzn5.0" in p.message
    assert "synthetic row for a unit test" in p.message


def test_row_with_instance_types_matches_only_those_types():
    (row,) = [b for b in image_compat.load().known_bad if b.id == "nvidia-r595-p6e-efa"]
    assert row.matches({"nvidiaDriver": "595.91.07"}, "p6e-gb200.36xlarge")
    assert row.matches({"nvidiaDriver": "595.58.03"}, "p6e-gb300r.36xlarge")
    assert not row.matches({"nvidiaDriver": "580.173.02"}, "p6e-gb200.36xlarge")
    assert not row.matches({"nvidiaDriver": "595.91.07"}, "p5.48xlarge")
    # no instance type, or no driver version: the row cannot say
    assert not row.matches({"nvidiaDriver": "595.91.07"})
    assert not row.matches({"nvidiaDriver": None}, "p6e-gb200.36xlarge")


def test_every_efa_installer_row_names_what_it_ships():
    data = image_compat.load()
    for version in ("1.50.0", "1.51.0"):
        release = data.efa_installer[version]
        assert release.libfabric and release.efa_driver and release.rdma_core and release.released
    # 1.50.0 dropped Amazon Linux 2; 1.51.0 ships aws-ofi-nccl 1.22.0 and libfabric 2.7.0amzn2.0
    assert "Amazon Linux 2" in (data.efa_installer["1.50.0"].notes or "")
    assert (data.efa_installer["1.51.0"].aws_ofi_nccl, data.efa_installer["1.51.0"].libfabric) == ("1.22.0", "2.7.0amzn2.0")


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
    # GIVEN a custom build context whose Dockerfile pins EFA installer 1.47.0 (and its plugin) under PyTorch 2.11.0
    pins = {"PYTORCH_VERSION": "2.11.0", "CUDA_VERSION": "13.0", "NCCL_VERSION": "2.28.9",
            "EFA_INSTALLER_VERSION": "1.47.0", "AWS_OFI_NCCL_VERSION": "1.18.0"}
    (tmp_path / "Dockerfile").write_text("".join(f"ARG {k}={v}\n" for k, v in pins.items()) + "FROM scratch\n")
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
