"""What EFA and NVIDIA software the nodes run, judged against the one table of EFA software.

Two data files, each row with its source:

* ``data/efa_software.json`` (:func:`efa_stack.planning.image_compat.load`): its ``knownBad`` rows on the node
  components (``nvidiaDriver``, ``efaDriver``, ``libfabric``), some only on some instance types;
* ``data/eks_al2023_nvidia_drivers.json`` (:func:`load_ami_drivers`): the NVIDIA driver each EKS AL2023 NVIDIA AMI
  release gives an instance type (:func:`ami_driver`); since v20260917 the AMI carries an LTS and a production-branch
  driver and picks one per instance (awslabs/amazon-eks-ami#2768).

The plan refuses a Karpenter pool whose pinned AMI release gives its instance type a known-bad driver
(:func:`ami_driver_problems`) and warns about a release the data does not know (:func:`ami_driver_warnings`);
``efa-stack preflight`` judges the release EKS gives a managed node group (:func:`release_finding`);
``efa-stack verify --acceptance`` judges what a node runs (:func:`known_bad_for`).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from efa_stack import contract
from efa_stack.planning import image_compat
from efa_stack.planning.image_compat import KnownBad
from efa_stack.planning.karpenter import KarpenterPlan
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.spec.errors import Problem

AMI_DRIVERS_FILE = Path(__file__).resolve().parent / "data" / "eks_al2023_nvidia_drivers.json"
RELEASE_PATTERN = r"^v\d{8}$"
"""An amazon-eks-ami release tag (``v20260917``); their order is their text's."""

Tree = Literal["lts", "pb"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class DriverRelease(_Model):
    """The NVIDIA driver(s) of the releases ``from`` to ``through`` (inclusive), for every Kubernetes version or only
    for those ``kubernetes`` lists."""

    from_: str = Field(alias="from", pattern=RELEASE_PATTERN)
    through: str = Field(pattern=RELEASE_PATTERN)
    kubernetes: list[str] = Field(default_factory=list)
    drivers: dict[Tree, str]
    """``lts`` (every release) and, since the AMI carries two, ``pb``: the full version, or ``<major>.0`` where only
    the branch is known."""
    source: str = Field(min_length=10)

    @model_validator(mode="after")
    def _valid(self) -> DriverRelease:
        if self.through < self.from_:
            raise ValueError(f"release range {self.from_}..{self.through} runs backwards")
        if "lts" not in self.drivers:
            raise ValueError(f"releases {self.from_}..{self.through} name no lts driver")
        bad = [v for v in self.drivers.values() if not re.fullmatch(r"\d+\.\d+(\.\d+)?", v)]
        if bad:
            raise ValueError(f"driver versions must be <major>.<minor>[.<patch>]: {bad}")
        return self

    def holds(self, release: str, kubernetes_version: str) -> bool:
        return self.from_ <= release <= self.through and (not self.kubernetes or kubernetes_version in self.kubernetes)


class PbInstanceTypes(_Model):
    patterns: list[str] = Field(min_length=1)
    source: str = Field(min_length=10)


class AmiDriverData(_Model):
    source: str = Field(alias="_source", min_length=10)
    checked_through: str = Field(alias="checkedThrough", pattern=RELEASE_PATTERN)
    pb_instance_types: PbInstanceTypes = Field(alias="pbInstanceTypes")
    releases: list[DriverRelease] = Field(min_length=1)

    @model_validator(mode="after")
    def _no_overlap(self) -> AmiDriverData:
        for i, a in enumerate(self.releases):
            for b in self.releases[i + 1:]:
                ranges_meet = a.from_ <= b.through and b.from_ <= a.through
                versions_meet = not a.kubernetes or not b.kubernetes or set(a.kubernetes) & set(b.kubernetes)
                if ranges_meet and versions_meet:
                    raise ValueError(f"releases {a.from_}..{a.through} and {b.from_}..{b.through} overlap")
        return self


@cache
def load_ami_drivers(path: Path = AMI_DRIVERS_FILE) -> AmiDriverData:
    """The AMI release data, validated (a malformed file raises pydantic's ``ValidationError``)."""
    return AmiDriverData.model_validate(json.loads(path.read_text()))


@dataclass(frozen=True)
class AmiDriver:
    """The NVIDIA driver an AMI release gives one instance type."""

    release: str
    tree: Tree
    version: str
    source: str

    @property
    def branch(self) -> str:
        return self.version.split(".")[0]

    def shown(self) -> str:
        """``R580 (580.159.03)``, or ``R580`` where only the branch is known (a version ``580.0``)."""
        return f"R{self.branch}" if re.fullmatch(r"\d+\.0", self.version) else f"R{self.branch} ({self.version})"


def driver_tree(instance_type: str, trees: Mapping[Tree, str], data: AmiDriverData) -> Tree:
    """The tree the AMI boots ``instance_type`` with: the production branch for the types whose GPUs only it
    supports (``pbInstanceTypes``), when the release has one; the LTS tree otherwise."""
    pb = "pb" in trees and any(fnmatch.fnmatchcase(instance_type, p) for p in data.pb_instance_types.patterns)
    return "pb" if pb else "lts"


def ami_driver(release: str, kubernetes_version: str, instance_type: str,
               data: AmiDriverData | None = None) -> AmiDriver | None:
    """The NVIDIA driver EKS AL2023 NVIDIA AMI ``release`` gives ``instance_type`` on ``kubernetes_version``, or None
    when the data does not know the release."""
    data = data or load_ami_drivers()
    row = next((r for r in data.releases if r.holds(release, kubernetes_version)), None)
    if row is None:
        return None
    tree = driver_tree(instance_type, row.drivers, data)
    return AmiDriver(release, tree, row.drivers[tree], row.source)


def known_bad_for(versions: Mapping[str, str | None], instance_type: str,
                  table: image_compat.CompatData | None = None) -> list[KnownBad]:
    """The table's known-bad rows that node facts ``versions`` (``nvidiaDriver``, ``efaDriver``, ``libfabric``; a
    value None is not known) hit on ``instance_type``."""
    table = table or image_compat.load()
    return [bad for bad in table.known_bad if bad.matches(versions, instance_type)]


def release_of(release_version: str) -> str | None:
    """``v20260917`` from an EKS release version (``1.35.4-20260917``, what a node group's ``releaseVersion`` and the
    SSM parameter ``.../recommended/release_version`` hold) or from a tag; None when it is neither."""
    m = re.fullmatch(r"v?(?:\d+\.\d+\.\d+-)?(\d{8})", release_version.strip())
    return f"v{m.group(1)}" if m else None


# --- the plan: a Karpenter pool pins its AMI release ----------------------------------------------------------

def _is_nvidia(group: NodeGroupPlan) -> bool:
    return group.instance.accelerator == "nvidia" and group.ami_id is None


def _first_good_release(group: NodeGroupPlan, kubernetes_version: str, first: str | None,
                        data: AmiDriverData, table: image_compat.CompatData) -> AmiDriver | None:
    """The newest release in the data that has AMIs for the group and gives its instance type a driver no known-bad
    row flags (so that advice to use it passes this check and the pool's AMI check alike), with that driver."""
    for row in sorted(data.releases, key=lambda r: r.through, reverse=True):
        if first is None or row.through < first:
            continue
        pick = ami_driver(row.through, kubernetes_version, group.instance_type, data)
        if pick is not None and not known_bad_for({"nvidiaDriver": pick.version}, group.instance_type, table):
            return pick
    return None


def ami_driver_problems(prefix: str, group: NodeGroupPlan, kubernetes_version: str, ami_version: str, *,
                        first_release: str | None, data: AmiDriverData | None = None,
                        table: image_compat.CompatData | None = None) -> list[Problem]:
    """A pool pinned to ``al2023@<ami_version>`` whose release gives its instance type an NVIDIA driver a known-bad
    row of the table names, with the release to use instead. ``first_release`` is the oldest release with AMIs of
    the pool's type for the cluster's version (a fix never names an older one). A release the data does not know is
    not judged here (:func:`ami_driver_warnings`)."""
    if not _is_nvidia(group):
        return []
    data, table = data or load_ami_drivers(), table or image_compat.load()
    pick = ami_driver(ami_version, kubernetes_version, group.instance_type, data)
    if pick is None:
        return []
    bads = known_bad_for({"nvidiaDriver": pick.version}, group.instance_type, table)
    if not bads:
        return []
    good = _first_good_release(group, kubernetes_version, first_release, data, table)
    instead = (f"set amiVersion: {good.release} (it gives {group.instance_type} the {good.shown()} driver)"
               if good else
               f"no amazon-eks-ami release in {AMI_DRIVERS_FILE.name} gives {group.instance_type} a driver outside "
               "these rows: run the nodes in a managedNodeGroups entry with a custom AMI (ami: ami-...) whose driver "
               "is not in them")
    return [Problem(
        f"{prefix}.amiVersion", ami_version,
        f"al2023@{ami_version} gives {group.instance_type} the NVIDIA driver {pick.shown()} (its {pick.tree} tree; "
        f"{pick.source}), a known-bad combination ({bad.id}): {bad.problem} [{bad.source}]",
        f"{instead}; {bad.fix}",
    ) for bad in bads]


def ami_driver_warnings(karpenter: KarpenterPlan | None, kubernetes_version: str,
                        data: AmiDriverData | None = None) -> list[str]:
    """A warning per NVIDIA pool whose ``amiVersion`` the data does not know: whether it gives the instance type a
    known-bad driver cannot be said before the nodes run."""
    data = data or load_ami_drivers()
    return [
        f"karpenter pool {p.group.name}: amazon-eks-ami release {p.ami_version} is not in {AMI_DRIVERS_FILE.name} "
        f"(checked through {data.checked_through}), so whether it gives {p.group.instance_type} a known-bad NVIDIA "
        "driver is not known; `efa-stack verify --acceptance` reads the driver on the nodes"
        for p in (karpenter.pools if karpenter else ())
        if _is_nvidia(p.group) and ami_driver(p.ami_version, kubernetes_version, p.group.instance_type, data) is None
    ]


# --- preflight: the release EKS gives a managed node group -------------------------------------------------------

@dataclass(frozen=True)
class ReleaseVerdict:
    status: contract.CheckStatus
    message: str
    fix: str = ""


def release_finding(group: NodeGroupPlan, kubernetes_version: str, release: str, how: str,
                    data: AmiDriverData | None = None, table: image_compat.CompatData | None = None) -> ReleaseVerdict:
    """The NVIDIA driver AMI ``release`` (``how``: where the release comes from, for the message) gives ``group``'s
    instance type, judged against the table: fail on a known-bad row, warn when the data does not know the release."""
    data, table = data or load_ami_drivers(), table or image_compat.load()
    itype = group.instance_type
    pick = ami_driver(release, kubernetes_version, itype, data)
    if pick is None:
        return ReleaseVerdict(
            "warn",
            f"{how} is amazon-eks-ami {release}, which {AMI_DRIVERS_FILE.name} does not list (checked through "
            f"{data.checked_through}): its NVIDIA driver for {itype} is not known",
            "after the deploy, run `efa-stack verify --acceptance`: it reads the driver on the nodes and fails a "
            "known-bad one; to judge it now, add the release with its source to "
            f"efa_stack/planning/data/{AMI_DRIVERS_FILE.name}",
        )
    bads = known_bad_for({"nvidiaDriver": pick.version}, itype, table)
    if bads:
        return ReleaseVerdict(
            "fail",
            f"{how} is amazon-eks-ami {release}, which gives {itype} the NVIDIA driver {pick.shown()}: "
            + "; ".join(f"known-bad ({b.id}): {b.problem} [{b.source}]" for b in bads),
            "; ".join(dict.fromkeys(b.fix for b in bads)),
        )
    return ReleaseVerdict("pass", f"{how} is amazon-eks-ami {release}: {itype} gets the NVIDIA driver {pick.shown()}, "
                                  "in no known-bad row")


__all__ = [
    "AMI_DRIVERS_FILE", "AmiDriver", "AmiDriverData", "ReleaseVerdict", "ami_driver", "ami_driver_problems",
    "ami_driver_warnings", "known_bad_for", "load_ami_drivers", "release_finding", "release_of",
]
