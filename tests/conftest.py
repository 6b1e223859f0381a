"""Fixtures and hooks; the helpers are in tests/support.py. Each spec is synthesized once per test process
(per xdist worker), and the tests that share a synth run on one worker (:func:`pytest_collection_modifyitems`)."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
# Which Kubernetes versions EKS offers depends on the day (efa_stack/planning/versions.py): the suite judges every
# spec on one fixed day, so that its results do not change with the calendar. tests/test_spec_versions.py
# covers other days and the machine's date.
TEST_DAY = "2026-11-25"
os.environ["EFA_STACK_TODAY"] = TEST_DAY

if sys.dont_write_bytecode and sys.pycache_prefix is None and not os.environ.get("CI"):
    # `make` exports PYTHONDONTWRITEBYTECODE=1 to keep __pycache__ out of the tree; without any bytecode cache
    # every test process compiles the project and rewrites the asserts of every test module again (about 3 s
    # of CPU per xdist worker, half of collection). Cache both outside the tree instead: sys.pycache_prefix
    # (PYTHONPYCACHEPREFIX), which Python's import system and pytest's assertion rewriter both honour. The
    # first run fills it (~200 MB: the packages imported from here on are compiled into it once, ~6 s per
    # worker); a CI job (CI set) starts cold every time, so there it would only cost and is not used.
    sys.pycache_prefix = str(Path(tempfile.gettempdir()) / "efa-stack-pycache")
    sys.dont_write_bytecode = False

# Re-exported for the test modules that import these from here; new code imports tests.support.
from tests.support import (
    CLUSTERS,
    GOLDEN,
    NO_ASSET_STAGING,
    ROOT,
    SCRATCH,
    TEMPLATE_VALIDATION,
    UPDATE_GOLDEN,
    Synthesized,
    fail_on_warnings,
    fake_aws_credentials,
    golden_check,
    normalise_assets,
    scratch_dir,
    synth_spec,
    synth_text,
)

__all__ = [
    "CLUSTERS", "GOLDEN", "NO_ASSET_STAGING", "ROOT", "TEMPLATE_VALIDATION", "UPDATE_GOLDEN", "Synthesized",
    "fail_on_warnings", "fake_aws_credentials", "golden_check", "normalise_assets", "scratch_dir",
    "synth_spec", "synth_text",
]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(SCRATCH, ignore_errors=True)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # the worker exits as soon as it has reported (_exit_worker_now): pytest's last garbage collections (for
        # unraisable exceptions of finalizers) need not walk the session's million objects again, about 1 s each
        gc.freeze()


def _exit_worker_now() -> None:
    """Registered before jsii starts its Node.js kernel, so it runs after every other exit handler (LIFO):
    an xdist worker that has reported everything skips the interpreter's teardown of the session's objects
    (synthesized apps, templates, jsii proxies): about 3 s per worker at the end of every run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if os.environ.get("PYTEST_XDIST_WORKER"):
    atexit.register(_exit_worker_now)


@pytest.fixture(scope="session", autouse=True)
def _read_once() -> None:
    """Data files third-party libraries read again on every call are read once per test process: botocore's service
    models (a new boto3 session creates its own loader, which parses the EC2 model, several MB of JSON, again: one
    loader per data path serves every session) and kubernetes-validate's schemas (``validate`` reads the schema of
    the kind and the version's definitions from disk on every call). Neither library changes what it read."""
    import functools

    import botocore.loaders
    import botocore.session
    import kubernetes_validate.utils

    botocore.session.create_loader = functools.cache(botocore.loaders.create_loader)
    kubernetes_validate.utils.schema_contents = functools.cache(kubernetes_validate.utils.schema_contents)


@pytest.fixture(scope="session")
def default_synth() -> Synthesized:
    return synth_spec(str(CLUSTERS / "default.yaml"))


@pytest.fixture(scope="session")
def options_synth() -> Synthesized:
    """The whole synth of tests.builders.OPTIONS (cluster options only the whole template shows)."""
    from tests.builders import OPTIONS

    return OPTIONS.synth()


@pytest.fixture(scope="session")
def private_synth() -> Synthesized:
    """The whole synth of tests.builders.PRIVATE (private endpoint, scratch storage, a split reservation group)."""
    from tests.builders import PRIVATE

    return PRIVATE.synth()


SESSION_SYNTHS = {"default_synth": "spec-default.yaml", "options_synth": "synth-options", "private_synth": "synth-private"}
"""Session fixtures that are one synth -> the xdist group of the tests that use them."""


def _named_spec(item: pytest.Item, stems: set[str]) -> str | None:
    """The one shipped spec (by stem) that the test function's code names as a string constant, or the code of the
    module's functions it calls (three calls deep: ``_resources()`` -> ``_synth()`` -> ``synth_spec(...)``), if exactly
    one."""
    module = vars(getattr(item, "module", None) or object())
    named: set[str] = set()
    seen: set[int] = set()
    todo = [(getattr(item, "function", None), 0)]
    while todo:
        function, depth = todo.pop()
        code = getattr(getattr(function, "__wrapped__", function), "__code__", None)
        if code is None or id(code) in seen:
            continue
        seen.add(id(code))
        named |= {c.rpartition("/")[2].removesuffix(".yaml") for c in code.co_consts if isinstance(c, str)} & stems
        if depth < 3:
            todo += [(module[n], depth + 1) for n in code.co_names if callable(module.get(n))]
    return named.pop() if len(named) == 1 else None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep shared work on one xdist worker (``--dist loadgroup``, set in pyproject.toml):

    - tests parametrized over a shipped spec (``spec="p4d.yaml"``, or ``stem="p4d"`` in the k8s tests) run on
      one worker per spec, so each spec is synthesized (and its charts built) once in the whole run rather than
      once on every worker that draws one of its tests;
    - tests that use a module-scoped fixture of their module (a synth, a moto catalog refresh) run on one
      worker per fixture, so the fixture is built once; a module whose fixture is the synth of a shipped
      spec says so in ``FIXTURE_SPECS`` (fixture name -> spec file name) and joins that spec's group;
    - tests that use a session fixture of :data:`SESSION_SYNTHS` join its group (``default_synth``: the group of
      clusters/default.yaml);
    - tests marked ``pytest.mark.xdist_group(NAME)`` run in group NAME (tests/test_apiserver.py: one API server);
    - a test that names one shipped spec in its code (``built("tas-p5")``, ``CLUSTERS / "tas-p5.yaml"``: a string
      constant of its function, :func:`_named_spec`) joins that spec's group, where its charts and synth are made.
    Everything else is spread test by test."""
    stems = {p.stem for p in CLUSTERS.glob("*.yaml")} - {"default"}  # "default" is a namespace as often as a spec
    for item in items:
        group = None
        params = getattr(getattr(item, "callspec", None), "params", {})
        spec, stem = params.get("spec"), params.get("stem")
        if isinstance(stem, str) and not isinstance(spec, str) and item.get_closest_marker("xdist_group") is None:
            spec = f"{stem}.yaml"  # the k8s tests name a shipped spec by its stem: tests.support.built(stem)
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
        if group is None:  # a session fixture that is one synth (the one of clusters/default.yaml, ...)
            group = next((g for name, g in SESSION_SYNTHS.items() if name in getattr(item, "fixturenames", ())), None)
        if group is None and (mark := item.get_closest_marker("xdist_group")) is not None:
            group = str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))  # an explicit mark
        if group is None and (named := _named_spec(item, stems)) is not None:
            group = f"spec-{named}.yaml"
        if group is None:
            continue
        item.add_marker(pytest.mark.xdist_group(group))
        if getattr(config.option, "loadgroup", False) and hasattr(item, "_id") and "@" not in item.nodeid:
            # pytest-xdist 3.8 tags a grouped test by setting ``item._nodeid``, which pytest 9 no longer
            # reads (the node id lives in ``item._id``), so the scheduler never sees the group: tag it here
            # the same way (``<nodeid>@<group>``, the suffix xdist's LoadGroupScheduling splits on).
            from _pytest.nodeid import coerce_node_id

            item._id = coerce_node_id(f"{item.nodeid}@{group}")
