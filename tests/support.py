"""Every helper the tests share (no tests, no fixtures here: tests/conftest.py holds the fixtures and hooks).

- paths, golden files and snapshots: :data:`ROOT`, :data:`CLUSTERS`, :data:`GOLDEN`, :func:`golden_check`,
  :func:`normalise_assets`; scratch space under :data:`SCRATCH`;
- CDK: :func:`synth_spec` / :func:`synth_text` synthesize a spec once per test process (memoised);
- spec texts and plans: :func:`cluster_spec` writes the small spec most tests start from (one EFA node group
  ``gpu`` of p5.48xlarge in us-west-2a, a cluster spanning us-west-2a/b on Kubernetes 1.34; tests append to it,
  node group fields indented by four spaces), :func:`plan_of` plans a spec text, :func:`problems_of` returns the
  problems of one that is refused;
- cdk8s: :func:`built` / :func:`built_text` build a spec's charts once per test process (memoised), with
  accessors for the MPIJob they render;
- AWS: :func:`fake_aws_credentials`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:  # imported where used: conftest.py imports this module in every test process, the xdist controller too
    from efa_stack.planning.plan import ClusterPlan
    from efa_stack.spec.errors import Problem

LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML has it (the same objects as PyYAML's own, many times faster on large CRDs)."""
ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = ROOT / "clusters"
GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE_GOLDEN = os.environ.get("EFA_STACK_UPDATE_GOLDEN") == "1"

SCRATCH = Path(tempfile.mkdtemp(prefix="efa-stack-tests-"))
"""Where the tests' synth outputs and spec files go (a cloud assembly holds ~57 MB of assets), one
directory per test process, removed when its session ends so that runs do not fill the disk."""


def scratch_dir(prefix: str) -> Path:
    """A new directory under :data:`SCRATCH` (removed with it)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=SCRATCH))


# --- CDK -------------------------------------------------------------------------------------------------


@dataclass
class Synthesized:
    plan: Any
    stacks: Any
    templates: dict[str, dict]  # stack name -> template
    outdir: Path

    def template(self, which: str) -> dict:
        """The template of stack ``which`` (``cluster``), or of the ``network`` or ``storage`` part of the cluster
        stack: the resources and outputs of that construct (stacks.compose.ClusterStacks), as a template."""
        if which in ("network", "storage"):
            part = self.stacks.network if which == "network" else self.stacks.storage
            if part is None:
                raise KeyError(f"{self.plan.name} has no {which}")
            return construct_template(part, self.templates[f"{self.plan.name}-cluster"])
        return self.templates[f"{self.plan.name}-{which}"]

    def assertions(self, which: str):
        from aws_cdk.assertions import Template

        return Template.from_json(self.template(which))

    def resources(self, which: str, type_: str) -> dict[str, dict]:
        return {k: v for k, v in self.template(which)["Resources"].items() if v["Type"] == type_}


def construct_template(construct: Any, template: dict) -> dict:
    """The resources and outputs of ``template`` that ``construct`` (a part of its stack) made."""
    from aws_cdk import CfnElement, Stack

    stack = Stack.of(construct)
    ids = {stack.resolve(c.logical_id) for c in construct.node.find_all() if isinstance(c, CfnElement)}
    return {
        key: {k: v for k, v in template.get(key, {}).items() if k in ids}
        for key in ("Resources", "Outputs") if key in template
    }


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
        metadata = dict(artifact.get("metadata", {}))
        # aws-cdk-lib 2.275 writes a stack's metadata to a file of its own (the artifact's additionalMetadataFile)
        if artifact.get("additionalMetadataFile"):
            metadata.update(json.loads((outdir / artifact["additionalMetadataFile"]).read_text()))
        for path, entries in metadata.items():
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
def synth_spec(path: str, subnet_zones: tuple[tuple[str, str], ...] = ()) -> Synthesized:
    """Synthesize the spec at ``path`` (with ``subnet_zones``: the zones ``efa-stack lookup`` would record)."""
    from aws_cdk import App

    from efa_stack.planning.plan import plan_from_file
    from stacks.compose import build

    plan = plan_from_file(path, subnet_zones=dict(subnet_zones))
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


# --- spec texts and plans -------------------------------------------------------------------------------

SOURCE = "t.yaml"
"""The file name the spec's problems are reported against."""


def cluster_spec(name: str = "t", *, instance_type: str = "p5.48xlarge", min_size: int = 1,
                 desired: int | None = None, max_size: int | None = None, private: bool = False) -> str:
    """A spec with one EFA node group ``gpu`` (``instance_type``, ``minSize`` ``min_size``, ``desiredCapacity``
    and ``maxSize`` only when given, ``privateNetworking: true`` when ``private``); starts with a blank line."""
    group = [f"    instanceType: {instance_type}", f"    minSize: {min_size}"]
    if desired is not None:
        group.append(f"    desiredCapacity: {desired}")
    if max_size is not None:
        group.append(f"    maxSize: {max_size}")
    group.append("    availabilityZones: [us-west-2a]")
    if private:
        group.append("    privateNetworking: true")
    group.append("    efaEnabled: true")
    return cluster_header(name) + "\n".join(["  - name: gpu", *group, ""])


def cluster_header(name: str = "t") -> str:
    """A blank line, then the spec up to ``managedNodeGroups:`` (cluster ``name`` in us-west-2a/b, Kubernetes 1.34)."""
    return "\n".join([
        "",
        "apiVersion: eksctl.io/v1alpha5",
        "kind: ClusterConfig",
        f'metadata: {{name: {name}, region: us-west-2, version: "1.34"}}',
        "availabilityZones: [us-west-2a, us-west-2b]",
        "managedNodeGroups:",
        "",
    ])


def cpu_group(instance_type: str) -> str:
    """A second node group ``cpu`` (one ``instance_type`` node) to append to :func:`cluster_spec`."""
    return f"\n  - name: cpu\n    instanceType: {instance_type}\n    minSize: 1\n"


BASE = cluster_spec(desired=2, max_size=3, private=True)
"""The spec of the validation tests: 1 to 3 p5.48xlarge nodes (2 desired) on private subnets."""


def plan_of(text: str) -> ClusterPlan:
    """The plan of the spec ``text`` (dedented); raises :class:`SpecError` if it is refused."""
    from efa_stack.planning.plan import build_plan
    from efa_stack.spec.loader import parse_spec

    return build_plan(parse_spec(textwrap.dedent(text), source=SOURCE), source=SOURCE)


def problems_of(text: str) -> list[Problem]:
    """Every problem with the spec ``text``; fails the test if the spec is accepted."""
    from efa_stack.spec.errors import SpecError

    with pytest.raises(SpecError) as info:
        plan_of(text)
    return info.value.problems


def one_problem(text: str) -> Problem:
    """The one problem with the spec ``text``; fails the test if there are none or several."""
    problems = problems_of(text)
    assert len(problems) == 1, [p.render() for p in problems]
    return problems[0]


def structural_problems(text: str) -> list[Problem]:
    """The problems parsing finds in the spec ``text`` (its shape and types), before any planning."""
    from efa_stack.spec.errors import SpecError
    from efa_stack.spec.loader import parse_spec

    with pytest.raises(SpecError) as info:
        parse_spec(textwrap.dedent(text), source=SOURCE)
    return info.value.problems


# --- cdk8s charts -------------------------------------------------------------------------------------------

GOLDEN_K8S = GOLDEN / "k8s"
CRD_FILE = ROOT / "k8s" / "crds" / "mpijob.yaml"

GOLDEN_SPECS = ("default", "dra-p5", "eksctl-efa-cluster", "karpenter-p5", "p4d", "p5en", "p6-b200", "tas-p5", "trn2")
"""Specs whose rendered manifests are kept as golden files (tests/golden/k8s/<cluster name>/)."""

KUBECTL_HANDLER_LIMIT = 262_144
"""CDK's kubectl handler keeps the applied manifest in an annotation capped at this many bytes."""


@dataclass
class Built:
    plan: Any
    charts: list[Any]
    manifests: dict[str, list[dict[str, Any]]]  # chart id -> objects, in order
    _rollout: Any = None

    @property
    def chart_ids(self) -> list[str]:
        return [c.node.id for c in self.charts]

    def objects(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for chart_id, objs in self.manifests.items():
            for obj in objs:
                yield chart_id, obj

    def find(self, kind: str, name: str | None = None) -> dict[str, Any]:
        hits = [o for _, o in self.objects() if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
        assert len(hits) == 1, f"expected one {kind} {name or ''}, found {len(hits)}"
        return hits[0]

    def mpijob(self) -> dict[str, Any]:
        return self.find("MPIJob")

    @property
    def rollout(self) -> Any:
        """The charts' rollout (:func:`k8s.rollout.plan_rollout`), made once."""
        if self._rollout is None:
            from k8s.rollout import plan_rollout

            self._rollout = plan_rollout(self.plan, self.charts)
        return self._rollout


def _build(plan: Any) -> Built:
    import cdk8s

    from k8s.charts import build_charts

    charts = build_charts(plan, cdk8s.App())
    manifests = {c.node.id: json.loads(json.dumps(c.to_json())) for c in charts}
    return Built(plan=plan, charts=charts, manifests=manifests)


@cache
def built(spec_stem: str) -> Built:
    """Charts of ``clusters/<spec_stem>.yaml``."""
    from efa_stack.planning.plan import plan_from_file

    return _build(plan_from_file(CLUSTERS / f"{spec_stem}.yaml"))


@cache
def built_text(text: str) -> Built:
    """Charts of a spec given as YAML text."""
    from efa_stack.planning.plan import build_plan
    from efa_stack.spec.loader import parse_spec

    return _build(build_plan(parse_spec(text)))


def spec_text(instance_type: str = "p5.48xlarge", nodes: int = 2, *, efa: bool = True,
              region: str = "us-west-2", extra: str = "") -> str:
    """A minimal valid spec with one node group (``gpu``) of ``nodes`` x ``instance_type``."""
    return f"""
apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata:
  name: k8s-test
  region: {region}
  version: "1.34"
availabilityZones: ["{region}a", "{region}b"]
managedNodeGroups:
  - name: gpu
    instanceType: {instance_type}
    minSize: {nodes}
    desiredCapacity: {nodes}
    maxSize: {nodes}
    availabilityZones: ["{region}a"]
    privateNetworking: true
    efaEnabled: {str(efa).lower()}
{extra}"""


@lru_cache(maxsize=1)
def crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_FILE.read_text())


def crd_schema() -> dict[str, Any]:
    (version,) = crd()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def launcher_command(mpijob: dict[str, Any]) -> list[str]:
    return mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]


def mpirun_args(mpijob: dict[str, Any]) -> list[str]:
    """The mpirun command line inside the launcher's command (after the wait-for-workers gate)."""
    command = launcher_command(mpijob)
    return command[command.index("/opt/amazon/openmpi/bin/mpirun"):]


def arg_after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def worker(mpijob: dict[str, Any]) -> dict[str, Any]:
    return mpijob["spec"]["mpiReplicaSpecs"]["Worker"]


def worker_container(mpijob: dict[str, Any]) -> dict[str, Any]:
    return worker(mpijob)["template"]["spec"]["containers"][0]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}
