"""Which PyTorch / CUDA / NCCL / aws-ofi-nccl / EFA installer versions work together, as data.

The facts live in ``data/efa_software.json``, the one table of EFA software, each row with its source: the releases
and what each ships, the tested-together sets (``knownGood``), the set the image recipe builds (``recipe``) and the
known-bad combinations (``knownBad``, image and node components alike; :mod:`efa_stack.planning.node_software` judges
the node side). :func:`check` names every problem of an image's combination (a version the data does not know, a NCCL
or plugin that is not the one the framework or installer ships, a known-bad pairing, a pairing no source vouches for)
with its fix. :func:`dockerfile_pins` reads the ``ARG`` defaults of a Dockerfile (a custom build context may pin its
own; images/efa-pytorch pins none: its versions are :func:`recipe_build_args`).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from efa_stack.spec.errors import Problem
from efa_stack.spec.models import DEFAULT_IMAGE_DIRECTORY, VERSION_PATTERN, TrainingImage

COMPAT_FILE = Path(__file__).resolve().parent / "data" / "efa_software.json"


def version_key(version: str) -> tuple[int, ...]:
    """``"2.28.9"`` -> ``(2, 28, 9)``; shorter numbers compare as if padded with zeros."""
    parts = tuple(int(p) for p in re.findall(r"\d+", version.split("amzn")[0])[:4])
    return parts + (0,) * (4 - len(parts))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class PytorchRelease(_Model):
    cuda: str = Field(pattern=r"^\d+\.\d+$")
    """The CUDA the release's default Linux wheel is built for."""
    nccl: str = Field(pattern=VERSION_PATTERN)
    """The NCCL that wheel installs (the ``nvidia-nccl-cu*`` pin), which PyTorch loads at run time."""
    source: str = Field(min_length=10)


LIBFABRIC_PATTERN = r"^\d+\.\d+\.\d+(amzn\d+\.\d+)?$"


class EfaInstallerRelease(_Model):
    aws_ofi_nccl: str = Field(alias="awsOfiNccl", pattern=VERSION_PATTERN)
    """The aws-ofi-nccl plugin (``libnccl-ofi``) the installer ships."""
    libfabric: str | None = Field(None, pattern=LIBFABRIC_PATTERN)
    efa_driver: str | None = Field(None, alias="efaDriver", pattern=VERSION_PATTERN)
    """The EFA kernel driver it installs on a host (a container build skips it: ``--skip-kmod``)."""
    rdma_core: str | None = Field(None, alias="rdmaCore", pattern=VERSION_PATTERN)
    released: str | None = Field(None, pattern=r"^\d{4}-\d{2}-\d{2}$")
    notes: str | None = None
    """What else the release changes that a user must know (a dropped distribution)."""
    source: str = Field(min_length=10)


class PluginRelease(_Model):
    tested_nccl: list[str] = Field(alias="testedNccl", min_length=1)
    tested_libfabric: str | None = Field(None, alias="testedLibfabric", pattern=LIBFABRIC_PATTERN)
    source: str = Field(min_length=10)


class Range(_Model):
    min: str | None = Field(None, pattern=VERSION_PATTERN)
    """Inclusive lower bound."""
    below: str | None = Field(None, pattern=VERSION_PATTERN)
    """Exclusive upper bound."""

    def contains(self, version: str) -> bool:
        key = version_key(version)
        return (self.min is None or key >= version_key(self.min)) and (
            self.below is None or key < version_key(self.below)
        )

    @model_validator(mode="after")
    def _bounded(self) -> Range:
        if self.min is None and self.below is None:
            raise ValueError("a range needs min, below or both")
        return self


IMAGE_COMPONENTS = ("pytorch", "cuda", "nccl", "awsOfiNccl", "efaInstaller", "libfabric")
"""What an image holds (libfabric: the one its EFA installer ships, which the job loads)."""
NODE_COMPONENTS = ("nvidiaDriver", "efaDriver", "libfabric")
"""What ``efa-stack verify --acceptance`` reads on a node (libfabric: the check image's, the one a job loads)."""
COMPONENTS = tuple(dict.fromkeys((*IMAGE_COMPONENTS, *NODE_COMPONENTS)))


class KnownBad(_Model):
    id: str = Field(pattern=r"^[a-z0-9.-]+$")
    when: dict[str, Range] = Field(min_length=1)
    """Every listed component in its range: the combination is bad."""
    instance_types: list[str] = Field(default_factory=list, alias="instanceTypes")
    """Only on these instance types (``fnmatch`` patterns such as ``p6e-gb200.*``); empty: on every one."""
    problem: str = Field(min_length=10)
    fix: str = Field(min_length=10)
    source: str = Field(min_length=10)

    @model_validator(mode="after")
    def _components(self) -> KnownBad:
        unknown = sorted(set(self.when) - set(COMPONENTS))
        if unknown:
            raise ValueError(f"unknown components {unknown}; use {', '.join(COMPONENTS)}")
        return self

    def matches(self, versions: Mapping[str, str | None], instance_type: str | None = None) -> bool:
        """Every component of ``when`` is known in ``versions`` and in its range, and (when the row names instance
        types) ``instance_type`` is one of them. A component that is not known does not match: the row cannot say."""
        if self.instance_types and (
            instance_type is None or not any(fnmatch.fnmatchcase(instance_type, p) for p in self.instance_types)
        ):
            return False
        return all(versions.get(c) is not None and rng.contains(str(versions[c])) for c, rng in self.when.items())

    def shown(self, versions: Mapping[str, str | None]) -> str:
        """``nccl 2.28.9, awsOfiNccl 1.17.2``: the versions the row was matched on."""
        return ", ".join(f"{c} {versions[c]}" for c in self.when)


class KnownGood(_Model):
    pytorch: str
    efa_installer: str = Field(alias="efaInstaller")
    source: str = Field(min_length=10)


class Recipe(KnownGood):
    """The set images/efa-pytorch builds when the spec names no version: one of the ``knownGood`` sets."""


class ImageBuild(_Model):
    before: str | None = Field(None, pattern=r"^\d{8}$")
    """Builds dated before this day (YYYYMMDD, exclusive); None: every later build."""
    efa_installer: str = Field(alias="efaInstaller", pattern=VERSION_PATTERN)
    source: str = Field(min_length=10)


class TagHistory(_Model):
    builds: list[ImageBuild] = Field(min_length=1)
    """Oldest first; every build but the last has ``before``."""

    @model_validator(mode="after")
    def _ordered(self) -> TagHistory:
        days = [b.before for b in self.builds[:-1]]
        if None in days or days != sorted(days, key=lambda d: d or ""):
            raise ValueError("every build but the last needs `before`, in increasing order")
        return self

    def build_of(self, day: str) -> ImageBuild:
        """The build a tag dated ``day`` (YYYYMMDD) pins."""
        return next((b for b in self.builds if b.before is None or day < b.before), self.builds[-1])


class PrebuiltImage(_Model):
    dated_tag_source: str = Field(alias="datedTagSource", min_length=10)
    """Where the image's publisher says ``<tag>-<YYYYMMDD>`` never changes and ``<tag>`` moves."""
    tags: dict[str, TagHistory] = Field(min_length=1)


class CompatData(_Model):
    source: str = Field(alias="_source", min_length=10)
    pytorch: dict[str, PytorchRelease] = Field(min_length=1)
    efa_installer: dict[str, EfaInstallerRelease] = Field(alias="efaInstaller", min_length=1)
    aws_ofi_nccl: dict[str, PluginRelease] = Field(alias="awsOfiNccl")
    known_bad: list[KnownBad] = Field(alias="knownBad")
    known_good: list[KnownGood] = Field(alias="knownGood", min_length=1)
    recipe: Recipe
    prebuilt_images: dict[str, PrebuiltImage] = Field(default_factory=dict, alias="prebuiltImages")
    """Public images whose moving tags had known-bad builds: repository -> tag -> the EFA installer per build."""

    @model_validator(mode="after")
    def _consistent(self) -> CompatData:
        keys = [*self.pytorch, *self.efa_installer, *self.aws_ofi_nccl]
        bad_keys = [k for k in keys if not re.match(VERSION_PATTERN, k)]
        if bad_keys:
            raise ValueError(f"release keys must be dotted versions: {bad_keys}")
        for repo, image in self.prebuilt_images.items():
            for tag, history in image.tags.items():
                unknown = [b.efa_installer for b in history.builds if b.efa_installer not in self.efa_installer]
                if unknown:
                    raise ValueError(f"prebuiltImages {repo}:{tag} names EFA installers the data does not list: {unknown}")
        for good in self.known_good:
            if good.pytorch not in self.pytorch or good.efa_installer not in self.efa_installer:
                raise ValueError(
                    f"knownGood {good.pytorch} + EFA {good.efa_installer} names a release the data does not list"
                )
        if not self.is_known_good(self.recipe.pytorch, self.recipe.efa_installer):
            raise ValueError(f"recipe {self.recipe.pytorch} + EFA {self.recipe.efa_installer} is not a knownGood set")
        return self

    def is_known_good(self, pytorch: str, efa_installer: str) -> bool:
        return any(g.pytorch == pytorch and g.efa_installer == efa_installer for g in self.known_good)


@cache
def load(path: Path = COMPAT_FILE) -> CompatData:
    """The compatibility data file, validated (a malformed file raises pydantic's ``ValidationError``)."""
    return CompatData.model_validate(json.loads(path.read_text()))


@dataclass(frozen=True)
class Combination:
    """One image's stack. ``cuda``, ``nccl`` and ``aws_ofi_nccl`` default to what the framework and the EFA
    installer ship; give them to check that a recipe's pins agree with that."""

    pytorch: str
    efa_installer: str
    cuda: str | None = None
    nccl: str | None = None
    aws_ofi_nccl: str | None = None


@dataclass(frozen=True)
class Resolved:
    """A combination with every component known: what the image will contain."""

    pytorch: str
    cuda: str
    nccl: str
    efa_installer: str
    aws_ofi_nccl: str
    libfabric: str | None

    def components(self) -> dict[str, str | None]:
        return {
            "pytorch": self.pytorch, "cuda": self.cuda, "nccl": self.nccl,
            "awsOfiNccl": self.aws_ofi_nccl, "efaInstaller": self.efa_installer, "libfabric": self.libfabric,
        }


FIELDS = {
    "pytorch": "pytorchVersion", "efa_installer": "efaInstallerVersion", "cuda": "cudaVersion",
    "nccl": "ncclVersion", "aws_ofi_nccl": "awsOfiNcclVersion",
}
"""Default names of the fields a problem points at (the spec's ``trainingImage`` keys)."""


def known_good_list(data: CompatData) -> str:
    return "; ".join(f"PyTorch {g.pytorch} + EFA installer {g.efa_installer}" for g in data.known_good)


def known_good_advice(pytorch: str, data: CompatData) -> str:
    """What to write instead, as a set :func:`check` accepts: the known-good EFA installers for ``pytorch``, or every
    known-good set when it has none."""
    installers = [g.efa_installer for g in data.known_good if g.pytorch == pytorch]
    if installers:
        return f"with PyTorch {pytorch} a known-good set is EFA installer {' or '.join(installers)}"
    return f"PyTorch {pytorch} has no known-good EFA installer; use a known-good set ({known_good_list(data)})"


def _release_problems(combo: Combination, names: dict[str, str], data: CompatData) -> list[Problem]:
    """Releases the data does not know, and pins that are not what PyTorch or the installer ship."""
    problems: list[Problem] = []
    torch = data.pytorch.get(combo.pytorch)
    if torch is None:
        problems.append(Problem(
            names["pytorch"], combo.pytorch, "PyTorch release not in the compatibility data",
            f"use one of {', '.join(data.pytorch)}, or add it with its CUDA, NCCL and source to {COMPAT_FILE.name}",
        ))
    efa = data.efa_installer.get(combo.efa_installer)
    if efa is None:
        problems.append(Problem(
            names["efa_installer"], combo.efa_installer, "EFA installer release not in the compatibility data",
            f"use one of {', '.join(data.efa_installer)}, or add it with its aws-ofi-nccl and source to "
            f"{COMPAT_FILE.name}",
        ))
    if torch is not None:
        for attr, shipped, what in (("cuda", torch.cuda, "CUDA"), ("nccl", torch.nccl, "NCCL")):
            pinned = getattr(combo, attr)
            if pinned is not None and pinned != shipped:
                problems.append(Problem(
                    names[attr], pinned, f"PyTorch {combo.pytorch} ships {what} {shipped}, not {pinned}",
                    f"pin {what} {shipped} (the framework's own; a second {what} is not what PyTorch loads)",
                ))
    if efa is not None and combo.aws_ofi_nccl is not None and combo.aws_ofi_nccl != efa.aws_ofi_nccl:
        problems.append(Problem(
            names["aws_ofi_nccl"], combo.aws_ofi_nccl,
            f"EFA installer {combo.efa_installer} ships aws-ofi-nccl {efa.aws_ofi_nccl}, not {combo.aws_ofi_nccl}",
            f"pin aws-ofi-nccl {efa.aws_ofi_nccl}, or pick the EFA installer that ships the plugin you want",
        ))
    return problems


def check(combo: Combination, *, fields: dict[str, str] | None = None, data: CompatData | None = None) -> list[Problem]:
    """Every problem of ``combo`` (empty: a known-good combination). ``fields`` renames the field each
    problem names (for example to a Dockerfile's ``ARG`` names). A fix names a set this function accepts."""
    data = data or load()
    names = {**FIELDS, **(fields or {})}
    problems = _release_problems(combo, names, data)
    if problems:
        return problems
    resolved = resolve(combo, data)
    versions = resolved.components()
    advice = known_good_advice(combo.pytorch, data)
    for bad in data.known_bad:
        if bad.matches(versions):
            # The installer is what a fix changes when the rule involves it (the plugin comes with it).
            attr = "efa_installer" if {"awsOfiNccl", "efaInstaller", "libfabric"} & set(bad.when) else "pytorch"
            problems.append(Problem(
                names[attr], getattr(combo, attr),
                f"known-bad combination ({bad.shown(versions)}): {bad.problem} [{bad.source}]", f"{bad.fix}; {advice}",
            ))
    if not problems and not data.is_known_good(combo.pytorch, combo.efa_installer):
        problems.append(Problem(
            names["pytorch"], combo.pytorch,
            f"PyTorch {combo.pytorch} (NCCL {resolved.nccl}) with EFA installer {combo.efa_installer} "
            f"(aws-ofi-nccl {resolved.aws_ofi_nccl}) is not a known-good combination: no source says they work together",
            f"{advice}, or add this one to {COMPAT_FILE.name} with the source that tested it",
        ))
    return problems


def bad_builds(efa_installer: str, data: CompatData) -> list[KnownBad]:
    """The known-bad rules a build with ``efa_installer`` matches, judged on what the installer fixes (its own
    version, its aws-ofi-nccl and libfabric); rules that also need the image's other versions or an instance type are
    not judged here."""
    efa = data.efa_installer[efa_installer]
    versions = {"efaInstaller": efa_installer, "awsOfiNccl": efa.aws_ofi_nccl, "libfabric": efa.libfabric}
    return [bad for bad in data.known_bad if not bad.instance_types and bad.matches(versions)]


_IMAGE_REF = re.compile(r"^(?P<repo>[^@]+?)(?::(?P<tag>[\w][\w.-]*))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")


def image_problems(field: str, ref: str, data: CompatData | None = None) -> list[Problem]:
    """Problems of a prebuilt training image ``ref`` that can be a known-bad build (data ``prebuiltImages``).

    A digest pins what the user tested: accepted. A dated tag (``<tag>-YYYYMMDD``, which the publisher never
    moves) is judged by the build it names. A moving tag is refused when any build it ever pointed at is
    known-bad: nodes keep the build they pulled (the workers' ``imagePullPolicy: IfNotPresent``), so an old
    bad build can run under the tag long after the publisher fixed it. Images the data does not list pass.
    """
    data = data or load()
    m = _IMAGE_REF.match(ref)
    if m is None or m["digest"] or m["tag"] is None or m["repo"] not in data.prebuilt_images:
        return []
    repo, tag = m["repo"], m["tag"]
    image = data.prebuilt_images[repo]
    dated = re.fullmatch(r"(?P<tag>.+)-(?P<day>\d{8})", tag)
    fix = (f"pin the build you tested by digest, {repo}:<tag>@sha256:<digest> (`docker buildx imagetools inspect "
           f"{repo}:<tag>` prints it), or by a dated tag <tag>-YYYYMMDD, which never moves ({image.dated_tag_source})")
    if dated and dated["tag"] in image.tags:
        build = image.tags[dated["tag"]].build_of(dated["day"])
        bads = bad_builds(build.efa_installer, data)
        if not bads:
            return []
        rules = "; ".join(f"{b.id}: {b.problem}" for b in bads)
        return [Problem(
            field, ref, f"the build of {dated['day']} carries EFA installer {build.efa_installer} "
            f"({build.source}), a known-bad build ({rules})", fix.replace("or by a dated tag", "or by a later dated tag"),
        )]
    history = image.tags.get(tag)
    if history is None:
        return []
    judged = [(b, bad_builds(b.efa_installer, data)) for b in history.builds]
    bad = [(b, found) for b, found in judged if found]
    if not bad:
        return []
    build, found = bad[0]
    when = f"builds before {build.before}" if build.before else "its builds"
    return [Problem(
        field, ref,
        f"the tag moves, and {when} carry EFA installer {build.efa_installer} ({build.source}), a known-bad build "
        f"({'; '.join(f'{r.id}: {r.problem}' for r in found)}); a node that pulled one keeps it",
        fix,
    )]


def resolve(combo: Combination, data: CompatData | None = None) -> Resolved:
    """The full stack of a combination :func:`check` accepts (``KeyError`` for an unknown release)."""
    data = data or load()
    torch, efa = data.pytorch[combo.pytorch], data.efa_installer[combo.efa_installer]
    return Resolved(
        pytorch=combo.pytorch, cuda=torch.cuda, nccl=torch.nccl, efa_installer=combo.efa_installer,
        aws_ofi_nccl=efa.aws_ofi_nccl, libfabric=efa.libfabric,
    )


def build_args(resolved: Resolved) -> dict[str, str]:
    """The ``--build-arg`` values of images/efa-pytorch/Dockerfile for a resolved stack."""
    return {
        DOCKERFILE_ARGS["pytorch"]: resolved.pytorch,
        DOCKERFILE_ARGS["cuda"]: resolved.cuda,
        DOCKERFILE_ARGS["nccl"]: resolved.nccl,
        DOCKERFILE_ARGS["efa_installer"]: resolved.efa_installer,
        DOCKERFILE_ARGS["aws_ofi_nccl"]: resolved.aws_ofi_nccl,
    }


def recipe_build_args(data: CompatData | None = None) -> dict[str, str]:
    """The ``--build-arg`` values of the table's ``recipe`` set: what images/efa-pytorch builds by default."""
    data = data or load()
    return build_args(resolve(Combination(pytorch=data.recipe.pytorch, efa_installer=data.recipe.efa_installer), data))


DOCKERFILE_ARGS = {
    "pytorch": "PYTORCH_VERSION", "cuda": "CUDA_VERSION", "nccl": "NCCL_VERSION",
    "efa_installer": "EFA_INSTALLER_VERSION", "aws_ofi_nccl": "AWS_OFI_NCCL_VERSION",
}
"""The ``ARG`` names the image recipe takes each component as (images/efa-pytorch declares them without defaults)."""

_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)=(\"[^\"]*\"|\S+)\s*$", re.MULTILINE)


def dockerfile_pins(text: str) -> dict[str, str]:
    """The ``ARG NAME=default`` values of a Dockerfile (the first default of each name)."""
    pins: dict[str, str] = {}
    for name, value in _ARG.findall(text):
        pins.setdefault(name, value.strip('"'))
    return pins


def dockerfile_combination(text: str) -> tuple[Combination | None, list[Problem]]:
    """The combination a Dockerfile pins, or the problems of its missing ``ARG`` defaults."""
    pins = dockerfile_pins(text)
    missing = [arg for arg in DOCKERFILE_ARGS.values() if arg not in pins]
    if missing:
        return None, [
            Problem(f"ARG {arg}", None, "the Dockerfile does not pin this version", f"add `ARG {arg}=<version>`")
            for arg in missing
        ]
    values: dict[str, Any] = {attr: pins[arg] for attr, arg in DOCKERFILE_ARGS.items()}
    return Combination(**values), []


def check_dockerfile(path: Path, data: CompatData | None = None) -> list[Problem]:
    """Every problem of the versions the Dockerfile at ``path`` pins."""
    combo, problems = dockerfile_combination(path.read_text())
    if combo is None:
        return problems
    return check(combo, fields={attr: f"ARG {arg}" for attr, arg in DOCKERFILE_ARGS.items()}, data=data)


# --- the spec's trainingImage section and its plan ---------------------------------------------------------

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The folder of ``cdk.json``; a relative ``trainingImage.directory`` is read from here."""


@dataclass(frozen=True)
class TrainingImagePlan:
    """The training image ``cdk deploy`` builds (``ClusterPlan.training_image``).

    Its URI exists only once the asset is published: the cluster stack's output ``TrainingImageUri``
    (``ClusterStack.training_image.image_uri`` inside the CDK app). Training jobs run this image on the
    GPU node groups; the versions here are what it contains.
    """

    directory: Path
    """Absolute path of the build context."""
    platform: str
    """``linux/amd64`` or ``linux/arm64``: the architecture of the NVIDIA GPU node groups."""
    stack: Resolved
    """PyTorch, CUDA, NCCL, EFA installer, aws-ofi-nccl and libfabric versions in the image."""
    build_args: dict[str, str]
    """``--build-arg`` values (the Dockerfile's ``ARG`` names), from the compatibility data."""


def training_image_plan(spec: TrainingImage | None, gpu_ami_types: list[str]) -> tuple[
    TrainingImagePlan | None, list[Problem]
]:
    """The plan of a ``trainingImage`` section (None unless ``build: true``) or its problems.

    ``gpu_ami_types`` are the AMI types of the node groups with NVIDIA GPUs (``AL2023_X86_64_NVIDIA``,
    ``AL2023_ARM_64_NVIDIA``): the image is built for their one architecture. Each version is the spec's, else the
    Dockerfile's ``ARG`` default (a custom build context may pin its own), else the table's ``recipe`` set; every
    build arg follows from those two through the table.
    """
    if spec is None or not spec.build:
        return None, []
    problems: list[Problem] = []
    directory = Path(spec.directory)
    directory = directory if directory.is_absolute() else PROJECT_ROOT / directory
    dockerfile = directory / "Dockerfile"
    pins: dict[str, str] = {}
    if not dockerfile.is_file():
        problems.append(Problem(
            "trainingImage.directory", spec.directory, f"no Dockerfile at {dockerfile}",
            f"point it at a Docker build context with a Dockerfile (default {DEFAULT_IMAGE_DIRECTORY})",
        ))
    else:
        pins = dockerfile_pins(dockerfile.read_text())
    archs = sorted({"arm64" if "ARM_64" in t else "amd64" for t in gpu_ami_types})
    if not archs:
        problems.append(Problem(
            "trainingImage.build", True, "no node group has NVIDIA GPUs to run the CUDA training image",
            "remove trainingImage or add a GPU node group",
        ))
    elif len(archs) > 1:
        problems.append(Problem(
            "trainingImage.build", True, "the GPU node groups mix x86_64 and arm64; one image serves one of them",
            "build the image for one architecture: keep GPU node groups of one architecture",
        ))
    recipe = load().recipe
    pytorch = spec.pytorch_version or pins.get(DOCKERFILE_ARGS["pytorch"]) or recipe.pytorch
    efa = spec.efa_installer_version or pins.get(DOCKERFILE_ARGS["efa_installer"]) or recipe.efa_installer
    combo = Combination(pytorch=pytorch, efa_installer=efa)
    problems.extend(check(combo, fields={k: f"trainingImage.{v}" for k, v in FIELDS.items()}))
    if problems:
        return None, problems
    stack = resolve(combo)
    return TrainingImagePlan(
        directory=directory, platform=f"linux/{archs[0]}", stack=stack, build_args=build_args(stack)
    ), []


if __name__ == "__main__":  # `python -m efa_stack.planning.image_compat`: the recipe's build args, for a build by hand
    print(" ".join(f"--build-arg {k}={v}" for k, v in recipe_build_args().items()))
