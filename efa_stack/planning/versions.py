"""Kubernetes versions as EKS offers them (data/kubernetes_versions.json: standard and extended support dates),
and the ones efa-stack builds (:data:`efa_stack.spec.models.KUBERNETES_VERSIONS`: a kubectl layer and pinned
add-on builds for each).

Which versions EKS offers depends on the day: :func:`today` is the date the plan is judged on, the
``EFA_STACK_TODAY`` environment variable (``YYYY-MM-DD``) when set, so that a CI synth of a spec gives the same
answer on every day, otherwise the machine's date."""

from __future__ import annotations

import datetime
import json
import os
from functools import cache
from pathlib import Path
from typing import Any, Literal

from efa_stack.errors import UserError
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import KUBERNETES_VERSIONS

DATA_FILE = Path(__file__).parent / "data" / "kubernetes_versions.json"
TODAY_VARIABLE = "EFA_STACK_TODAY"
Support = Literal["standard", "extended", "ended", "not yet", "unknown"]


def today() -> datetime.date:
    """The day versions are judged on: ``EFA_STACK_TODAY`` when set, else the machine's date."""
    text = os.environ.get(TODAY_VARIABLE, "").strip()
    if not text:
        return datetime.date.today()
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise UserError(
            f"{TODAY_VARIABLE}={text!r} is not a date",
            f"set {TODAY_VARIABLE} to a day as YYYY-MM-DD (e.g. {datetime.date.today().isoformat()}) or unset it",
        ) from None


@cache
def version_data() -> dict[str, dict[str, Any]]:
    """Each version EKS has released: its release date and the ends of standard and extended support."""
    return dict(json.loads(DATA_FILE.read_text())["versions"])


def _day(text: str) -> datetime.date:
    """A calendar date; a month alone (an approximate entry) is its first day."""
    return datetime.date.fromisoformat(text if len(text) > 7 else f"{text}-01")


def _shown(entry: dict[str, Any], key: str) -> str:
    return f"about {entry[key]}" if entry.get("approximate") else entry[key]


def support(version: str, today: datetime.date) -> Support:
    """Where ``version`` is in EKS's lifecycle on ``today``: new clusters can be created in standard and
    extended support, and no longer on the day extended support ends."""
    entry = version_data().get(version)
    if entry is None:
        return "unknown"
    if today < _day(entry["released"]):
        return "not yet"
    if today < _day(entry["end_of_standard_support"]):
        return "standard"
    if today < _day(entry["end_of_extended_support"]):
        return "extended"
    return "ended"


def offered(today: datetime.date) -> tuple[str, ...]:
    """The versions efa-stack builds that EKS offers for new clusters on ``today``, oldest first."""
    return tuple(v for v in KUBERNETES_VERSIONS if support(v, today) in ("standard", "extended"))


def _fix(today: datetime.date) -> str:
    choices = offered(today)
    standard = [v for v in choices if support(v, today) == "standard"]
    example = (standard or list(choices) or list(KUBERNETES_VERSIONS))[-1]
    return f"use one of {', '.join(choices or KUBERNETES_VERSIONS)}, quoted (version: \"{example}\")"


def version_problems(version: str, today: datetime.date) -> list[Problem]:
    """``metadata.version`` against what EKS offers ``today`` and what efa-stack builds."""
    state = support(version, today)
    entry = version_data().get(version, {})
    if version in KUBERNETES_VERSIONS and state in ("standard", "extended", "unknown"):
        return []
    fix = _fix(today)
    if state in ("standard", "extended"):
        until = _shown(entry, "end_of_standard_support" if state == "standard" else "end_of_extended_support")
        return [Problem(
            "metadata.version", version,
            f"EKS offers Kubernetes {version} ({state} support until {until}), but efa-stack builds "
            f"{', '.join(KUBERNETES_VERSIONS)} only (each needs the kubectl Lambda layer "
            f"aws-cdk.lambda-layer-kubectl-v{version.split('.')[1]} and add-on builds pinned for it)", fix,
        )]
    if state == "ended":
        return [Problem(
            "metadata.version", version,
            f"EKS no longer offers Kubernetes {version} for new clusters (extended support ended "
            f"{_shown(entry, 'end_of_extended_support')})",
            fix,
        )]
    if state == "not yet":
        return [Problem(
            "metadata.version", version,
            f"EKS releases Kubernetes {version} in {_shown(entry, 'released')}, after {today.isoformat()}", fix,
        )]
    oldest = min(version_data(), key=_minor)
    if _minor(version) < _minor(oldest):
        return [Problem("metadata.version", version, f"EKS no longer offers Kubernetes {version}", fix)]
    return [Problem("metadata.version", version, "Kubernetes version not supported", fix)]


def _minor(version: str) -> tuple[int, ...]:
    parts = version.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else (10**6,)


def version_warnings(version: str, today: datetime.date) -> list[str]:
    """Warnings about a version efa-stack builds: extended support costs more and ends; a version the data
    does not list may not be offered yet."""
    state = support(version, today)
    if state == "unknown" and version in KUBERNETES_VERSIONS:
        return [(
            f"Kubernetes {version}: efa-stack's version data ({DATA_FILE.name}) lists no EKS release of it; run "
            "`efa-stack preflight` (it asks EKS DescribeClusterVersions whether the region offers it) before deploying"
        )]
    if state != "extended":
        return []
    entry = version_data()[version]
    return [(
        f"Kubernetes {version} is in EKS extended support since {_shown(entry, 'end_of_standard_support')} (until "
        f"{_shown(entry, 'end_of_extended_support')}, when EKS upgrades the control plane): the cluster costs more "
        "per hour than on a version in standard support"
    )]
