"""How long ``cdk deploy --all --concurrency N`` takes to create a synthesized cloud assembly, as a model.

The model reads what ``cdk synth`` wrote (``manifest.json`` and the ``*.template.json`` files, nested
stack templates included) and replays a first deploy the way CloudFormation and the CDK CLI run it:

- **Stacks** start once every stack they depend on is complete (the manifest's ``dependencies``), at most
  ``concurrency`` at a time (``cdk deploy --concurrency``: "Maximum number of simultaneous deployments
  (dependency permitting) to execute", default 1; aws-cdk CLI 2.1148.1 lib/cli/cli-type-registry.json).
- **Resources** inside a stack are created in parallel as far as their dependencies allow: a resource
  starts when every resource it depends on is complete, by ``DependsOn`` or by a ``Ref``, ``Fn::GetAtt``
  or ``Fn::Sub`` reference in its properties, wherever it is nested ("CloudFormation creates, updates,
  and deletes resources in parallel to the extent possible"; "implicit dependencies in the form of target
  properties !Ref, !GetAtt, and !Sub", CloudFormation Template Reference, "DependsOn attribute").
- Each resource takes the typical create minutes of its type, from ``efa_stack/planning/data/
  create_minutes.json`` (each figure with its source, or marked as an estimate with its basis); a type
  not listed takes the file's default. A nested stack (``AWS::CloudFormation::Stack`` whose template is
  in the assembly: named by its ``aws:asset:path`` metadata under the CDK CLI, or by the asset hash in its
  ``TemplateURL``, which the stack's asset manifest maps to the file) takes the modelled time of its own template.

The result is the critical path: minutes per stack and for the whole app, and the chain of resources that
sets them. It is a model for comparing layouts of the same app, not a prediction of a real deploy's
wall time (no API throttling, retries or per-account limits).
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIGURES_FILE = Path(__file__).resolve().parent.parent / "planning" / "data" / "create_minutes.json"

NESTED_STACK_TYPE = "AWS::CloudFormation::Stack"
ASSET_PATH_METADATA = "aws:asset:path"
"""The resource metadata key under which aws-cdk-lib records a nested stack's template file in the cloud
assembly (aws-cdk-lib cx-api ``ASSET_RESOURCE_METADATA_PATH_KEY``)."""
STACK_ARTIFACT = "aws:cloudformation:stack"
"""The manifest artifact type of a CloudFormation stack (cloud-assembly-schema ``ArtifactType``)."""

_TEMPLATE_ASSET = re.compile(r"/([0-9a-f]{64})\.json$")
"""The asset hash at the end of a nested stack's ``TemplateURL`` (aws-cdk-lib's DefaultStackSynthesizer names the
object ``<hash>.json``)."""

_SUB_VARIABLE = re.compile(r"\$\{([^}!][^}]*)\}")
"""``${Name}`` or ``${Name.Attribute}`` in an ``Fn::Sub`` string; ``${!Literal}`` is written out as is
(CloudFormation Template Reference, "Fn::Sub")."""


# --- figures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """Typical create minutes of one resource type, and where the figure comes from."""

    type: str
    minutes: float
    source: str
    estimate: bool
    """True when no document gives the figure: ``source`` then says what it is based on."""


@dataclass(frozen=True)
class Figures:
    by_type: Mapping[str, Figure]
    default: Figure
    """Every type not in ``by_type``."""
    stack: Figure
    """Per stack: the CLI's change set and CloudFormation's start and finish of the stack operation."""

    def of(self, type_: str) -> Figure:
        return self.by_type.get(type_, self.default)


def load_figures(path: Path = FIGURES_FILE) -> Figures:
    """The figures of ``path`` (``create_minutes.json``): ``types`` by resource type, ``default`` and ``stack``."""
    data = json.loads(path.read_text())

    def figure(type_: str, entry: Mapping[str, Any]) -> Figure:
        estimate = "estimate" in entry
        source = entry["estimate"] if estimate else entry["source"]
        return Figure(type=type_, minutes=float(entry["minutes"]), source=source, estimate=estimate)

    return Figures(
        by_type={t: figure(t, e) for t, e in data["types"].items()},
        default=figure("(default)", data["default"]),
        stack=figure("(stack)", data["stack"]),
    )


# --- the dependency graph of a template ---------------------------------------------------------


def references(value: Any) -> Iterator[str]:
    """Every logical id that ``value`` (a piece of a template) names by ``Ref``, ``Fn::GetAtt`` or ``Fn::Sub``,
    at any depth (inside ``Fn::Join``, ``Fn::If``, ``Fn::Select``, lists, maps, ...). Pseudo parameters
    (``AWS::Region``) and parameters are names too; the caller keeps the ones that are resources."""
    if isinstance(value, list):
        for item in value:
            yield from references(item)
        return
    if not isinstance(value, dict):
        return
    for key, arg in value.items():
        if key == "Ref" and isinstance(arg, str):
            yield arg
        elif key == "Fn::GetAtt":
            if isinstance(arg, str):  # "Resource.Attribute"
                yield arg.split(".", 1)[0]
            elif isinstance(arg, list) and arg and isinstance(arg[0], str):
                yield arg[0]
                yield from references(arg[1:])
            else:
                yield from references(arg)
        elif key == "Fn::Sub":
            if isinstance(arg, str):
                text, variables = arg, {}
            elif isinstance(arg, list) and len(arg) == 2 and isinstance(arg[0], str) and isinstance(arg[1], dict):
                text, variables = arg[0], arg[1]
            else:
                yield from references(arg)
                continue
            for name in _SUB_VARIABLE.findall(text):
                base = name.split(".", 1)[0].strip()
                if base not in variables:  # a variable of the map shadows a resource of the same name
                    yield base
            yield from references(variables)
        else:
            yield from references(arg)


def dependencies(template: Mapping[str, Any]) -> dict[str, set[str]]:
    """Each resource of ``template`` -> the resources it waits for (``DependsOn`` and references in its
    ``Properties``); names that are not resources of the template (parameters, pseudo parameters) are dropped."""
    resources: Mapping[str, Any] = template.get("Resources", {})
    graph: dict[str, set[str]] = {}
    for logical_id, resource in resources.items():
        depends_on = resource.get("DependsOn", [])
        needs = {depends_on} if isinstance(depends_on, str) else set(depends_on)
        needs.update(references(resource.get("Properties", {})))
        graph[logical_id] = {n for n in needs if n in resources and n != logical_id}
    return graph


# --- results -------------------------------------------------------------------------------------



TARGET_MINUTES = 24.0
"""The modelled first deploy every shipped spec is held to (``make bench``, tests/test_deploy_model.py,
docs/design/deploy-model.md)."""

def transitive_dependencies(graph: Mapping[str, set[str]], start: str) -> set[str]:
    """Every resource ``start`` waits for, directly or through others, in a :func:`dependencies` graph."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen

@dataclass(frozen=True)
class Step:
    """One resource on a critical path: when it starts and ends, in minutes from the start of its stack."""

    logical_id: str
    type: str
    minutes: float
    start: float
    end: float


@dataclass(frozen=True)
class StackResult:
    name: str
    minutes: float
    """The stack's own critical path (its resources, plus the per-stack figure)."""
    chain: tuple[Step, ...]
    """The resources on that path, first to last."""
    start: float = 0.0
    """When the stack starts in the app's deploy, in minutes."""
    waited_for: str | None = None
    """The stack whose end let this one start (a dependency, or with ``concurrency`` taken, the one whose slot it got)."""

    @property
    def end(self) -> float:
        return self.start + self.minutes


@dataclass(frozen=True)
class DeployResult:
    minutes: float
    """When the last stack is complete."""
    concurrency: int
    stacks: Mapping[str, StackResult]
    chain: tuple[str, ...]
    """The stacks on the app's critical path, first to last."""
    figures: Mapping[str, Figure] = field(default_factory=dict)
    """The figure of every resource type the app has (the default's for types the data file does not list)."""

    def top_chain(self, limit: int = 6) -> list[tuple[str, Step]]:
        """The slowest steps on the critical path, (stack, step), slowest first, at most ``limit``."""
        steps = [(name, step) for name in self.chain for step in self.stacks[name].chain]
        return sorted(steps, key=lambda s: -s[1].minutes)[:limit]


# --- the model -----------------------------------------------------------------------------------


class ModelError(ValueError):
    """A template or assembly the model cannot replay (a dependency cycle, a missing template)."""


def template_asset(resource: Mapping[str, Any]) -> str | None:
    """The asset hash of a nested stack's template, from the last part of its ``TemplateURL``; None for another
    resource or URL."""
    url = (resource.get("Properties") or {}).get("TemplateURL")
    parts = url.get("Fn::Join", [None, []])[1] if isinstance(url, dict) else [url]
    last = parts[-1] if parts else None
    match = _TEMPLATE_ASSET.search(last) if isinstance(last, str) else None
    return match.group(1) if match else None


def critical_path(
    template: Mapping[str, Any],
    figures: Figures,
    *,
    name: str = "stack",
    nested: Mapping[str, Mapping[str, Any]] | None = None,
) -> StackResult:
    """The critical path of one stack's ``template`` (``nested``: the assembly's other templates by file name,
    for ``AWS::CloudFormation::Stack`` resources whose ``aws:asset:path`` metadata names one)."""
    resources: Mapping[str, Any] = template.get("Resources", {})
    graph = dependencies(template)
    minutes: dict[str, float] = {}
    for logical_id, resource in resources.items():
        type_ = resource.get("Type", "")
        asset = resource.get("Metadata", {}).get(ASSET_PATH_METADATA) or template_asset(resource)
        if type_ == NESTED_STACK_TYPE and nested is not None and isinstance(asset, str) and asset in nested:
            minutes[logical_id] = critical_path(nested[asset], figures, name=asset, nested=nested).minutes
        else:
            minutes[logical_id] = figures.of(type_).minutes
    end: dict[str, float] = {}
    before: dict[str, str | None] = {}
    state: dict[str, int] = {}  # 1: visiting, 2: done

    def visit(logical_id: str, path: tuple[str, ...]) -> float:
        if state.get(logical_id) == 2:
            return end[logical_id]
        if state.get(logical_id) == 1:
            cycle = path[path.index(logical_id):] + (logical_id,)
            raise ModelError(f"{name}: dependency cycle {' -> '.join(cycle)}")
        state[logical_id] = 1
        start, last = 0.0, None
        for dep in sorted(graph[logical_id]):
            t = visit(dep, (*path, logical_id))
            if t > start or last is None and t == start:
                start, last = t, dep
        end[logical_id] = start + minutes[logical_id]
        before[logical_id] = last
        state[logical_id] = 2
        return end[logical_id]

    for logical_id in resources:
        visit(logical_id, ())
    chain: list[Step] = []
    node = max(resources, key=lambda r: (end[r], r)) if resources else None
    while node is not None:
        chain.append(Step(node, resources[node].get("Type", ""), minutes[node], end[node] - minutes[node], end[node]))
        node = before[node]
    total = (end[chain[0].logical_id] if chain else 0.0) + figures.stack.minutes
    return StackResult(name=name, minutes=total, chain=tuple(reversed(chain)))


def schedule(
    stacks: Mapping[str, StackResult], depends: Mapping[str, Sequence[str]], concurrency: int = 1,
) -> tuple[dict[str, StackResult], float, tuple[str, ...]]:
    """Place each stack in time: it starts when its dependencies are complete and one of ``concurrency``
    slots is free (ready stacks in the order given). Returns the placed stacks, the total and the
    stacks on the critical path."""
    if concurrency < 1:
        raise ModelError(f"concurrency {concurrency}: cdk deploy runs at least one stack at a time")
    order = list(stacks)
    deps = {s: [d for d in depends.get(s, ()) if d in stacks] for s in order}
    placed: dict[str, StackResult] = {}
    running: list[tuple[float, int, str]] = []  # (end, order, name)
    pending = list(order)
    now, last_done = 0.0, None
    while pending:
        ready = [s for s in pending if all(d in placed and placed[d].end <= now for d in deps[s])]
        while ready and len(running) < concurrency:
            s = ready.pop(0)
            pending.remove(s)
            last_dep = max(deps[s], key=lambda d: placed[d].end, default=None)
            waited = last_dep if last_dep is not None and placed[last_dep].end == now else last_done
            placed[s] = StackResult(stacks[s].name, stacks[s].minutes, stacks[s].chain, start=now, waited_for=waited)
            heapq.heappush(running, (placed[s].end, order.index(s), s))
        if not pending:
            break
        if not running:
            missing = {s: [d for d in deps[s] if d not in placed] for s in pending}
            raise ModelError(f"stacks that can never start (a dependency cycle or a missing stack): {missing}")
        now, _, last_done = heapq.heappop(running)
    total = max((p.end for p in placed.values()), default=0.0)
    chain: list[str] = []
    node = max(placed, key=lambda s: (placed[s].end, -order.index(s))) if placed else None
    while node is not None:
        chain.append(node)
        node = placed[node].waited_for
    return placed, total, tuple(reversed(chain))


def model_templates(
    templates: Mapping[str, Mapping[str, Any]],
    depends: Mapping[str, Sequence[str]] | None = None,
    *,
    concurrency: int = 1,
    figures: Figures | None = None,
    nested: Mapping[str, Mapping[str, Any]] | None = None,
) -> DeployResult:
    """The deploy of the stacks ``templates`` (name -> template, in deploy order) with the stack dependencies
    ``depends`` (name -> names)."""
    figures = figures or load_figures()
    results = {name: critical_path(t, figures, name=name, nested=nested) for name, t in templates.items()}
    placed, total, chain = schedule(results, depends or {}, concurrency)
    types = {r.get("Type", "") for t in (*templates.values(), *(nested or {}).values())
             for r in t.get("Resources", {}).values()}
    return DeployResult(
        minutes=total, concurrency=concurrency, stacks=placed, chain=chain,
        figures={t: figures.of(t) for t in sorted(types)},
    )


def model_assembly(outdir: Path | str, *, concurrency: int = 1, figures: Figures | None = None) -> DeployResult:
    """The deploy of every stack of the cloud assembly at ``outdir`` (``cdk.out``), as ``cdk deploy --all
    --concurrency N`` runs it: stack artifacts and their stack dependencies from ``manifest.json``
    (dependencies through other artifacts, e.g. asset manifests, count through them), templates from each
    stack's ``properties.templateFile``, nested stack templates from the assembly directory."""
    outdir = Path(outdir)
    manifest = json.loads((outdir / "manifest.json").read_text())
    artifacts: Mapping[str, Any] = manifest.get("artifacts", {})
    stacks = [name for name, a in artifacts.items() if a.get("type") == STACK_ARTIFACT]

    def stack_dependencies(name: str, seen: set[str]) -> set[str]:
        found: set[str] = set()
        for dep in artifacts.get(name, {}).get("dependencies", []):
            if dep in seen:
                continue
            seen.add(dep)
            found |= {dep} if dep in stacks else stack_dependencies(dep, seen)
        return found

    templates: dict[str, Any] = {}
    for name in stacks:
        path = outdir / artifacts[name]["properties"]["templateFile"]
        if not path.exists():
            raise ModelError(f"{name}: template {path} is missing from the assembly")
        templates[name] = json.loads(path.read_text())
    nested = {p.name: json.loads(p.read_text()) for p in outdir.glob("*.nested.template.json")}
    for assets in outdir.glob("*.assets.json"):  # nested templates by the asset hash their TemplateURL names
        for asset_hash, entry in json.loads(assets.read_text()).get("files", {}).items():
            source = entry.get("source", {}).get("path")
            if source in nested:
                nested[asset_hash] = nested[source]
    return model_templates(
        templates, {s: sorted(stack_dependencies(s, set())) for s in stacks},
        concurrency=concurrency, figures=figures, nested=nested,
    )


def render(result: DeployResult, *, steps: int = 6) -> list[str]:
    """Lines for people: the total, each stack's window and critical path, the slowest steps on the app's path."""
    lines = [(f"modelled deploy (cdk deploy --all --concurrency {result.concurrency}): {result.minutes:.1f} min; "
              f"critical path: {' -> '.join(result.chain)}")]
    for name, stack in result.stacks.items():
        lines.append(f"  {name}: {stack.minutes:.1f} min ({stack.start:.1f}-{stack.end:.1f})")
    lines.append("  slowest steps on the critical path:")
    for name, step in result.top_chain(steps):
        lines.append(f"    {step.minutes:5.1f} min  {name}/{step.logical_id} ({step.type})")
    return lines
