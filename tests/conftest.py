"""Shared fixtures: each spec is synthesized once per test session (per xdist worker)."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = ROOT / "clusters"
GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE_GOLDEN = os.environ.get("EFA_STACK_UPDATE_GOLDEN") == "1"

os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

SCRATCH = Path(tempfile.mkdtemp(prefix="efa-stack-tests-"))
"""Where the tests' synth outputs and spec files go (a cloud assembly holds ~57 MB of assets), one
directory per test process, removed when its session ends so that runs do not fill the disk."""


def scratch_dir(prefix: str) -> Path:
    """A new directory under :data:`SCRATCH` (removed with it)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=SCRATCH))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(SCRATCH, ignore_errors=True)


@dataclass
class Synthesized:
    plan: Any
    stacks: Any
    templates: dict[str, dict]  # stack name -> template
    outdir: Path

    def template(self, which: str) -> dict:
        return self.templates[f"{self.plan.name}-{which}"]

    def assertions(self, which: str):
        from aws_cdk.assertions import Template

        return Template.from_json(self.template(which))

    def resources(self, which: str, type_: str) -> dict[str, dict]:
        return {k: v for k, v in self.template(which)["Resources"].items() if v["Type"] == type_}


ACKNOWLEDGED_WARNINGS: dict[str, str] = {}
"""CDK synth warnings accepted on purpose: a substring of the warning -> why it is harmless. Empty: no
warning is accepted today, every one fails the synth that printed it."""


def synth_warnings(outdir: Path) -> list[str]:
    """The ``aws:cdk:warning`` metadata of every stack in the cloud assembly at ``outdir``.

    These are what ``Annotations.from_stack(stack).find_warning("*", Match.any_value())`` reads
    (aws-cdk-lib assertions): the assembly's manifest records them per construct path.
    """
    manifest = json.loads((outdir / "manifest.json").read_text())
    found: list[str] = []
    for artifact in manifest.get("artifacts", {}).values():
        for path, entries in artifact.get("metadata", {}).items():
            for entry in entries:
                if entry.get("type") == "aws:cdk:warning":
                    found.append(f"{path}: {entry.get('data')}")
    return found


def fail_on_warnings(outdir: Path) -> None:
    """Synth warnings are errors (an io1 volume without IOPS is only a warning in CDK, then a failed launch)."""
    unexpected = [w for w in synth_warnings(outdir) if not any(k in w for k in ACKNOWLEDGED_WARNINGS)]
    if unexpected:
        raise AssertionError("CDK synth printed warnings (treated as errors):\n" + "\n".join(unexpected))


NO_ASSET_STAGING = {"aws:cdk:disable-asset-staging": True}
"""Context for test apps: assets are fingerprinted in place instead of copied into the cloud assembly
(the ``aws:cdk:disable-asset-staging`` context key of aws-cdk-lib's ``AssetStaging``). The templates
are byte-identical (asset hashes included); only the ~57 MB copy of the kubectl layer per synth is
saved. ``app.py`` and ``cdk synth`` stage assets as usual (tests/test_app.py runs them)."""


TEMPLATE_VALIDATION = False
"""Test synths skip aws-cdk-lib's built-in CloudFormation template validation (``AppProps.
builtinCloudFormationValidation``, on by default in 2.275): it costs about 3 s of CPU per synth, most
of the suite's time, and the tests validate templates with cfn-lint instead, zero errors on every
template of every shipped spec (tests/test_cfn_lint.py). ``make synth``, ``cdk synth`` and the app.py
tests (tests/test_app.py) keep it on."""


@cache
def synth_spec(path: str) -> Synthesized:
    from aws_cdk import App

    from efa_stack.planning.plan import plan_from_file
    from stacks.compose import build

    plan = plan_from_file(path)
    outdir = scratch_dir("efa-stack-test-")
    app = App(
        outdir=str(outdir), context=NO_ASSET_STAGING, builtin_cloud_formation_validation=TEMPLATE_VALIDATION
    )
    stacks = build(app, plan)
    app.synth()
    fail_on_warnings(outdir)
    templates = {
        p.name.removesuffix(".template.json"): json.loads(p.read_text()) for p in outdir.glob("*.template.json")
    }
    return Synthesized(plan=plan, stacks=stacks, templates=templates, outdir=outdir)


@cache
def synth_text(text: str) -> Synthesized:
    """Synthesize a spec given as YAML text (written to a temporary file)."""
    f = scratch_dir("efa-stack-spec-") / "spec.yaml"
    f.write_text(text)
    return synth_spec(str(f))


@pytest.fixture(scope="session")
def default_synth() -> Synthesized:
    return synth_spec(str(CLUSTERS / "default.yaml"))


def normalise_assets(text: str) -> str:
    """Asset hashes change with CDK internals, not with behaviour: replace them."""
    text = re.sub(r"[0-9a-f]{64}", "<asset-hash>", text)
    return text


def golden_check(path: Path, actual: str) -> None:
    """Compare ``actual`` with the golden file; rewrite it when EFA_STACK_UPDATE_GOLDEN=1."""
    if UPDATE_GOLDEN or not path.exists():
        if not UPDATE_GOLDEN:
            pytest.fail(f"golden file {path} is missing; run `make snapshots` to create it")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        return
    expected = path.read_text()
    assert actual == expected, f"{path.name} differs from the golden file; if intended run `make snapshots`"


def fake_aws_credentials(monkeypatch: pytest.MonkeyPatch, region: str | None = None) -> None:
    """Drop the caller's AWS settings and use moto's fake credentials (no IMDS, never a real account)."""
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key, raising=False)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    if region:
        monkeypatch.setenv("AWS_DEFAULT_REGION", region)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep shared work on one xdist worker (``--dist loadgroup``, set in pyproject.toml):

    - tests parametrized over a shipped spec (``spec="p4d.yaml"``) run on one worker per spec, so each
      spec is synthesized once in the whole run rather than once on every worker that draws one of its tests;
    - tests that use a module-scoped fixture of their module (a synth, a moto catalog refresh) run on one
      worker per fixture, so the fixture is built once; a module whose fixture is the synth of a shipped
      spec says so in ``FIXTURE_SPECS`` (fixture name -> spec file name) and joins that spec's group.
    Everything else is spread test by test."""
    for item in items:
        group = None
        spec = getattr(getattr(item, "callspec", None), "params", {}).get("spec")
        if isinstance(spec, str) and (CLUSTERS / spec).is_file():
            group = f"spec-{spec}"
        else:
            info = getattr(item, "_fixtureinfo", None)
            for name in getattr(item, "fixturenames", ()):
                defs = info.name2fixturedefs.get(name, ()) if info else ()
                if defs and defs[-1].scope == "module" and defs[-1].baseid.endswith(".py"):
                    shipped = getattr(getattr(item, "module", None), "FIXTURE_SPECS", {}).get(name)
                    # no "::" in a group name: syrupy derives snapshot names from the node id
                    group = f"spec-{shipped}" if shipped else f"fixture-{Path(defs[-1].baseid).stem}-{name}"
                    break
        if group is None:
            continue
        item.add_marker(pytest.mark.xdist_group(group))
        if getattr(config.option, "loadgroup", False) and hasattr(item, "_id") and "@" not in item.nodeid:
            # pytest-xdist 3.8 tags a grouped test by setting ``item._nodeid``, which pytest 9 no longer
            # reads (the node id lives in ``item._id``), so the scheduler never sees the group: tag it here
            # the same way (``<nodeid>@<group>``, the suffix xdist's LoadGroupScheduling splits on).
            from _pytest.nodeid import coerce_node_id

            item._id = coerce_node_id(f"{item.nodeid}@{group}")
