"""Every helper the tests share (no tests, no fixtures here: tests/conftest.py holds the fixtures and hooks).

- paths, golden files and snapshots: :data:`ROOT`, :data:`CLUSTERS`, :data:`GOLDEN`, :func:`golden_check`,
  :func:`normalise_assets`; scratch space under :data:`SCRATCH`;
- CDK: :func:`synth_spec` / :func:`synth_text` synthesize a spec once per test process (memoised), for what only a
  whole synth shows; :class:`StackFixture` builds one construct alone in one App and one Stack;
- spec texts and plans: new tests build specs with tests/builders.py (typed pieces with overrides);
  :func:`cluster_spec` writes the small spec most tests start from (one EFA node group
  ``gpu`` of p5.48xlarge in us-west-2a, a cluster spanning us-west-2a/b on Kubernetes 1.34; tests append to it,
  node group fields indented by four spaces), :func:`plan_of` plans a spec text, :func:`problems_of` returns the
  problems of one that is refused;
- cdk8s: :func:`built` / :func:`built_text` build a spec's charts once per test process (memoised), with
  accessors for the MPIJob they render;
- AWS: :func:`fake_aws_credentials`.
"""

from __future__ import annotations

import ast
import json
import os
import re
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:  # imported where used: conftest.py imports this module in every test process, the xdist controller too
    from efa_stack.planning.plan import ClusterPlan
    from efa_stack.rehearsal.binaries import Binary
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
    templates: dict[str, dict]  # stack name -> template, without what the CLI's context adds (:func:`without_cli_metadata`)
    outdir: Path  # the cloud assembly, as ``cdk deploy`` synthesizes it
    template_bytes: dict[str, int]  # template file name -> its size in the assembly

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


def gpu_launch_template(s: Synthesized, name: str = "p5") -> dict:
    """The ``LaunchTemplateData`` of node group ``name`` (its EKS name without hyphens) in the cluster stack."""
    lts = s.resources("cluster", "AWS::EC2::LaunchTemplate")
    (data,) = [v["Properties"]["LaunchTemplateData"] for k, v in lts.items() if k.startswith(f"NodeGroup{name}LaunchTemplate")]
    return data


def gpu_nodegroup(s: Synthesized, name: str = "p5") -> dict:
    """The properties of the ``AWS::EKS::Nodegroup`` of node group ``name`` (its EKS name without hyphens)."""
    ngs = s.resources("cluster", "AWS::EKS::Nodegroup")
    (props,) = [v["Properties"] for k, v in ngs.items() if k.startswith(f"NodeGroup{name}NodeGroup")]
    return props


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


CLI_CONTEXT = {
    "aws:cdk:enable-path-metadata": True,
    "aws:cdk:enable-asset-metadata": True,
    "aws:cdk:version-reporting": True,
}
"""What the CDK CLI puts in the context of the app it synthesizes for ``cdk deploy`` (aws-cdk CLI 2.1148.1
``contextFromSettings``): path and asset metadata on every resource, and version reporting (an ``AWS::CDK::Metadata``
resource). Test synths take it too, so that one synth per spec gives both the bytes ``cdk deploy`` uploads
(tests/test_template_budget.py) and, without what it adds (:func:`without_cli_metadata`), the templates
``python app.py`` writes."""


def without_cli_metadata(template: dict) -> dict:
    """``template`` without what :data:`CLI_CONTEXT` adds to it: the ``aws:cdk:path`` and ``aws:asset:*`` metadata of
    its resources and the ``AWS::CDK::Metadata`` resource (tests/shipped/test_reliability.py compares the rest with a
    synth without that context)."""
    out = dict(template)
    resources = {}
    for key, resource in template.get("Resources", {}).items():
        if resource["Type"] == "AWS::CDK::Metadata":
            continue
        metadata = {k: v for k, v in resource.get("Metadata", {}).items()
                    if k != "aws:cdk:path" and not k.startswith("aws:asset:")}
        resources[key] = {k: v for k, v in resource.items() if k != "Metadata"} | ({"Metadata": metadata} if metadata else {})
    if "Resources" in template:
        out["Resources"] = resources
    return out


def _synth_app(outdir: Path, plan: Any, context: dict[str, Any], nag: bool = False, charts: Built | None = None) -> Any:
    """``plan``'s stacks synthesized into ``outdir`` (with ``charts``, the plan's charts and rollout, as ``app.py``
    passes the ones it writes to ``dist/``), failing on a synth warning (with ``nag``, on a finding of the cdk-nag packs
    too); returns the stacks."""
    from aws_cdk import App

    from stacks.compose import build

    app = App(outdir=str(outdir), context=context, builtin_cloud_formation_validation=TEMPLATE_VALIDATION,
              tree_metadata=False)  # tree.json, the construct tree for the console: no test reads it
    shared = {"charts": charts.charts, "rollout": charts.rollout} if charts is not None else {}
    stacks = build(app, plan, nag=nag, **shared)
    app.synth()
    fail_on_warnings(outdir)
    return stacks


def synth_spec(path: str, subnet_zones: tuple[tuple[str, str], ...] = (), *, nag: bool = False) -> Synthesized:
    """Synthesize the spec at ``path`` (with ``subnet_zones``: the zones ``efa-stack lookup`` would record) as
    ``cdk deploy`` does (:data:`CLI_CONTEXT`), once per process for each file however its path is written.

    Without ``nag`` the cdk-nag packs do not run (the templates are the same; the packs cost a third of a synth):
    the project's rules are checked on the templates (tests/checks/test_policies.py), and both packs over whole
    synths in the integration tier (``nag=True``)."""
    return _synth_file(str((ROOT / path).resolve()), subnet_zones, nag)


@cache
def _synth_file(path: str, subnet_zones: tuple[tuple[str, str], ...], nag: bool) -> Synthesized:
    charts = _charts_of_file(path, subnet_zones)  # the charts its other tests read (:func:`built`)
    shipped = Path(path).parent == CLUSTERS.resolve() and not subnet_zones
    return _synth_charts(charts, nag, type_checks=nag or not shipped)


@contextmanager
def _jsii_type_checks(on: bool) -> Iterator[None]:
    """jsii's runtime check of every argument passed to the CDK (typeguard; about a third of a synth's CPU) on or off
    (jsii._type_checking: the generated code calls its ``check_type``, which calls the implementation it resolved)."""
    import jsii._type_checking as checking

    resolved = checking._resolve_check()
    if not on:
        checking._resolved_check = lambda argname, value, expected_type: value
    try:
        yield
    finally:
        checking._resolved_check = resolved


def _synth_charts(charts: Built, nag: bool, type_checks: bool = True) -> Synthesized:
    """The synth of ``charts``' plan; without ``type_checks`` only where the same stacks are synthesized with them in
    the integration tier: a shipped spec, whose synth with the cdk-nag packs (``nag``) checks every call again."""
    plan = charts.plan
    outdir = scratch_dir("efa-stack-test-")
    with _jsii_type_checks(type_checks):
        stacks = _synth_app(outdir, plan, {**NO_ASSET_STAGING, **CLI_CONTEXT}, nag, charts)
    files = sorted(outdir.glob("*.template.json"))
    templates = {p.name.removesuffix(".template.json"): without_cli_metadata(json.loads(p.read_text())) for p in files}
    return Synthesized(plan=plan, stacks=stacks, templates=templates, outdir=outdir,
                       template_bytes={p.name: p.stat().st_size for p in files})


@cache
def synth_text(text: str, *, nag: bool = False) -> Synthesized:
    """Synthesize a spec given as YAML text, with the charts :func:`built_text` builds for it (``nag``:
    :func:`synth_spec`)."""
    return _synth_charts(built_text(text), nag)


class StackFixture:
    """One App and one Stack to build constructs in alone (aws-cdk-lib aws-eks-v2's ``testFixture``), with an imported
    VPC, subnet and EKS cluster for the constructs that need one: a construct's props are tested on that construct,
    not through a whole synth. :meth:`template` synthesizes the stack once; build everything before calling it."""

    def __init__(self, region: str = "us-west-2", id: str = "Fixture") -> None:
        from aws_cdk import App, Environment, Stack

        self.app = App(builtin_cloud_formation_validation=TEMPLATE_VALIDATION)
        self.stack = Stack(self.app, id, env=Environment(region=region))
        self.region = region
        self._template: dict | None = None

    @cached_property
    def vpc(self) -> Any:
        from aws_cdk import aws_ec2 as ec2

        return ec2.Vpc.from_vpc_attributes(self.stack, "Vpc", vpc_id="vpc-0abc", availability_zones=[f"{self.region}a"])

    @cached_property
    def subnet(self) -> Any:
        from aws_cdk import aws_ec2 as ec2

        return ec2.Subnet.from_subnet_attributes(self.stack, "Subnet", subnet_id="subnet-0abc",
                                                 availability_zone=f"{self.region}a")

    @cached_property
    def cluster(self) -> Any:
        from aws_cdk import aws_eks_v2 as eks

        return eks.Cluster.from_cluster_attributes(self.stack, "Cluster", cluster_name="fixture", vpc=self.vpc)

    def template(self) -> dict:
        if self._template is None:
            from aws_cdk.assertions import Template

            self._template = Template.from_stack(self.stack).to_json()
        return self._template

    def assertions(self) -> Any:
        from aws_cdk.assertions import Template

        return Template.from_json(self.template())

    def resources(self, type_: str) -> dict[str, dict]:
        return {k: v for k, v in self.template()["Resources"].items() if v["Type"] == type_}

    def logical_id(self, construct: Any) -> str:
        """The logical id of ``construct`` (a CfnElement, or an L2 construct's default child)."""
        from aws_cdk import CfnElement

        element = construct if isinstance(construct, CfnElement) else construct.node.default_child
        return str(self.stack.resolve(element.logical_id))

    def props(self, construct: Any) -> dict:
        """The CloudFormation properties ``construct`` synthesized to."""
        return self.template()["Resources"][self.logical_id(construct)].get("Properties", {})


@dataclass
class NodeGroupsAlone:
    """Node groups of plans as the cluster stack builds them (``node_group_props``, ``node_role_of``), each alone in
    one :class:`StackFixture`: construct id -> the ManagedNodeGroup and its node role."""

    fixture: StackFixture
    groups: dict[str, Any]
    roles: dict[str, Any]
    shared_role: Any

    @classmethod
    def build(cls, entries: dict[str, tuple[ClusterPlan, str]]) -> NodeGroupsAlone:
        """``entries``: construct id -> (a plan, the name of one of its node groups)."""
        from aws_cdk import aws_iam as iam

        from aws_constructs.node_group import ManagedNodeGroup
        from stacks.node_groups import node_group_props, node_role_of

        f = StackFixture()
        shared = iam.Role(f.stack, "SharedNodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
        groups, roles = {}, {}
        for key, (plan, name) in entries.items():
            ng = plan.node_group(name)
            roles[key] = node_role_of(f.stack, ng, shared, plan.name)
            groups[key] = ManagedNodeGroup(
                f.stack, key, node_group_props(ng), cluster=f.cluster, subnets=[f.subnet],
                security_group_ids=["sg-cluster", "sg-efa"] if ng.efa_enabled else ["sg-cluster"], node_role=roles[key])
        f.template()
        return cls(f, groups, roles, shared)

    def nodegroup(self, key: str) -> dict:
        """The ``AWS::EKS::Nodegroup`` properties of node group ``key``."""
        return self.fixture.props(self.groups[key].nodegroup)

    def launch_data(self, key: str) -> dict:
        """The ``LaunchTemplateData`` of node group ``key``."""
        return self.fixture.props(self.groups[key].launch_template.launch_template)["LaunchTemplateData"]


@cache
def source_tree(path: Path) -> ast.Module:
    """The syntax tree of the Python file ``path``, parsed once per test process (the tests of the code's shape,
    layers, contract and docs read every module of the project)."""
    return ast.parse(path.read_text(), filename=str(path))


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


# --- upstream files ---------------------------------------------------------------------------------------


@cache
def moto_instance_types() -> dict[str, Any]:
    """moto's recording of EC2's DescribeInstanceTypes answers (getmoto/moto moto/ec2/resources/instance_types.json.gz,
    what ``moto.ec2.models.instance_types.INSTANCE_TYPES`` holds), read without importing moto's EC2 backend, whose
    import asks botocore for every region of every service (about 2 s of CPU)."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("moto")
    assert spec is not None and spec.submodule_search_locations
    data = Path(spec.submodule_search_locations[0]) / "ec2" / "resources" / "instance_types.json.gz"
    types: dict[str, Any] = json.loads(gzip.decompress(data.read_bytes()))
    return types


def upstream_file(binary: Binary, path: str) -> Path:
    """The file ``path`` of the Go module ``binary`` is built from (``tools/build.sh --module-dir``: the version that
    ``tools/<module>/go.mod`` requires, downloaded into Go's module cache when missing and checked against the
    ``go.sum`` beside it, so that the pin and the digest are those two files' lines). ``make test`` downloads these
    modules for the rehearsal; the tests read upstream's manifests there instead of keeping copies."""
    from efa_stack.rehearsal.releases import module_dir

    return module_dir(binary) / path


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


def chart_alone(plan: Any, build: Callable[[Any], Any], chart_id: str = "alone") -> Built:
    """One construct of the charts, built alone from ``plan`` in one cdk8s Chart (``build(chart)`` adds it; ``chart_id``:
    the chart's id, the component's for a rollout of that chart alone): its objects without every chart of the spec
    (Kueue's charts alone cost a third of a second of CPU)."""
    import cdk8s

    chart = cdk8s.Chart(cdk8s.App(), chart_id, disable_resource_name_hashes=True)
    build(chart)
    return Built(plan=plan, charts=[chart], manifests={chart_id: json.loads(json.dumps(chart.to_json()))})


@cache
def built(spec_stem: str) -> Built:
    """Charts of ``clusters/<spec_stem>.yaml`` (the ones its synth applies: :func:`synth_spec`)."""
    return _charts_of_file(str((CLUSTERS / f"{spec_stem}.yaml").resolve()), ())


@cache
def _charts_of_file(path: str, subnet_zones: tuple[tuple[str, str], ...]) -> Built:
    from efa_stack.planning.plan import plan_from_file

    return _build(plan_from_file(path, subnet_zones=dict(subnet_zones)))


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


@cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the ``openAPIV3Schema`` of each served version of the CRDs efa-stack installs from upstream:
    Kueue's and Karpenter's (k8s/crds/), the Training Operator's PyTorchJob (k8s/crds/), and the Kubeflow Trainer's
    that its Helm chart installs (kubeflow/trainer@v2.3.0 manifests/base/crds/, :func:`upstream_file`)."""
    from k8s import karpenter, kueue
    from k8s.training_operators import pytorchjob_crd_document

    trainer = [yaml.load(upstream_file("trainer-controller-manager", f"manifests/base/crds/trainer.kubeflow.org_{n}.yaml")
                         .read_text(), Loader=LOADER) for n in ("clustertrainingruntimes", "trainjobs")]
    schemas = {}
    for d in [*kueue.crd_documents(), *karpenter.crd_documents(), pytorchjob_crd_document(), *trainer]:
        group, kind = d["spec"]["group"], d["spec"]["names"]["kind"]
        for v in d["spec"]["versions"]:
            if v.get("served"):
                schemas[(f"{group}/{v['name']}", kind)] = v["schema"]["openAPIV3Schema"]
    return schemas


_VALIDATORS: dict[int, tuple[dict[str, Any], Any]] = {}


def schema_validate(instance: Any, schema: dict[str, Any]) -> None:
    """``jsonschema.validate(instance, schema)``, with each schema object checked against its meta-schema and its
    validator made once per process: checking a CRD's schema costs a hundred times more than validating an object
    with it. ``schema`` must not change after its first use (the schemas of :func:`crd_schemas` and :func:`crd_schema`
    do not)."""
    import jsonschema

    known = _VALIDATORS.get(id(schema))
    if known is None or known[0] is not schema:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        known = _VALIDATORS[id(schema)] = (schema, cls(schema))
    error = jsonschema.exceptions.best_match(known[1].iter_errors(instance))
    if error is not None:
        raise error


def crd_validate(obj: dict[str, Any]) -> None:
    """``obj`` against the schema of its CRD (:func:`crd_schemas`)."""
    schema_validate(obj, crd_schemas()[(obj["apiVersion"], obj["kind"])])


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
