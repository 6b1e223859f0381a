"""Kubernetes versions as EKS offers them (data/kubernetes_versions.json: standard and extended support dates),
and the ones efa-stack builds (:data:`efa_stack.spec.models.KUBERNETES_VERSIONS`: a kubectl layer and pinned
add-on builds for each)."""

from __future__ import annotations

import datetime
import json
from functools import cache
from pathlib import Path
from typing import Any, Literal

from efa_stack.spec.errors import Problem
from efa_stack.spec.models import KUBERNETES_VERSIONS

DATA_FILE = Path(__file__).parent / "data" / "kubernetes_versions.json"
Support = Literal["standard", "extended", "ended", "not yet", "unknown"]


@cache
def version_data() -> dict[str, dict[str, Any]]:
    """Each version EKS has released: its release date and the ends of standard and extended support."""
    return dict(json.loads(DATA_FILE.read_text())["versions"])


def support(version: str, today: datetime.date) -> Support:
    """Where ``version`` is in EKS's lifecycle on ``today``."""
    entry = version_data().get(version)
    if entry is None:
        return "unknown"
    day = datetime.date.fromisoformat
    if today < day(entry["released"]):
        return "not yet"
    if today <= day(entry["end_of_standard_support"]):
        return "standard"
    if today <= day(entry["end_of_extended_support"]):
        return "extended"
    return "ended"


def version_problems(version: str, today: datetime.date) -> list[Problem]:
    """``metadata.version`` against what EKS offers ``today`` and what efa-stack builds."""
    if version in KUBERNETES_VERSIONS:
        return []
    offered = ", ".join(KUBERNETES_VERSIONS)
    fix = f"use one of {offered}, quoted (version: \"{KUBERNETES_VERSIONS[-1]}\")"
    state = support(version, today)
    entry = version_data().get(version, {})
    if state in ("standard", "extended"):
        until = entry["end_of_standard_support" if state == "standard" else "end_of_extended_support"]
        return [Problem(
            "metadata.version", version,
            f"EKS offers Kubernetes {version} ({state} support until {until}), but efa-stack builds {offered} only "
            f"(each needs the kubectl Lambda layer aws-cdk.lambda-layer-kubectl-v{version.split('.')[1]} and add-on "
            "builds pinned for it)", fix,
        )]
    if state == "ended":
        return [Problem(
            "metadata.version", version,
            f"EKS no longer offers Kubernetes {version} (extended support ended {entry['end_of_extended_support']})",
            fix,
        )]
    oldest = min(version_data(), key=_minor)
    if _minor(version) < _minor(oldest):
        return [Problem("metadata.version", version, f"EKS no longer offers Kubernetes {version}", fix)]
    return [Problem("metadata.version", version, "Kubernetes version not supported", fix)]


def _minor(version: str) -> tuple[int, ...]:
    parts = version.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else (10**6,)


def version_warnings(version: str, today: datetime.date) -> list[str]:
    """Warnings about a version efa-stack builds: extended support costs more."""
    if support(version, today) != "extended":
        return []
    entry = version_data()[version]
    text = (
        f"Kubernetes {version} is in EKS extended support since {entry['end_of_standard_support']} (until "
        f"{entry['end_of_extended_support']}): the cluster costs more per hour than on a version in standard support"
    )
    return [text]
