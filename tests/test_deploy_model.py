"""The deploy model (efa_stack/tools/deploy_model.py) on small templates, and on the shipped specs' synths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from efa_stack import contract
from efa_stack.tools.deploy_model import (
    TARGET_MINUTES,
    Figure,
    Figures,
    ModelError,
    critical_path,
    dependencies,
    load_figures,
    model_assembly,
    model_templates,
    render,
    transitive_dependencies,
)
from tests.support import CLUSTERS, synth_spec

FIGURES = Figures(
    by_type={
        "Test::Slow": Figure("Test::Slow", 10.0, "test", True),
        "Test::Medium": Figure("Test::Medium", 4.0, "test", True),
        "Test::Fast": Figure("Test::Fast", 1.0, "test", True),
    },
    default=Figure("(default)", 0.5, "test", True),
    stack=Figure("(stack)", 0.0, "test", True),
)


def res(type_: str, props: dict[str, Any] | None = None, depends_on: list[str] | str | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"Type": type_, "Properties": props or {}}
    if depends_on is not None:
        r["DependsOn"] = depends_on
    return r


def template(**resources: dict[str, Any]) -> dict[str, Any]:
    return {"Resources": resources}


def test_parallel_branches_take_the_longer_one():
    t = template(Slow=res("Test::Slow"), Medium=res("Test::Medium"),
                 Join=res("Test::Fast", {"A": {"Ref": "Slow"}, "B": {"Ref": "Medium"}}))
    result = critical_path(t, FIGURES)
    assert result.minutes == 11.0
    assert [s.logical_id for s in result.chain] == ["Slow", "Join"]
    assert (result.chain[1].start, result.chain[1].end) == (10.0, 11.0)


def test_a_chain_adds_up():
    t = template(A=res("Test::Medium"), B=res("Test::Medium", depends_on="A"), C=res("Test::Fast", depends_on=["B"]))
    result = critical_path(t, FIGURES)
    assert result.minutes == 9.0
    assert [s.logical_id for s in result.chain] == ["A", "B", "C"]


def test_references_inside_nested_intrinsics_are_dependencies():
    t = template(
        Role=res("Test::Fast"), Key=res("Test::Fast"), Topic=res("Test::Fast"), Bucket=res("Test::Fast"),
        Shadowed=res("Test::Slow"), Unused=res("Test::Slow"),
        User=res("Test::Fast", {
            "Arn": {"Fn::Join": ["", [{"Fn::GetAtt": ["Role", "Arn"]}, "/x"]]},
            "Key": {"Fn::If": ["Cond", {"Fn::Select": [0, [{"Fn::GetAtt": "Key.Arn"}]]}, {"Ref": "AWS::NoValue"}]},
            "Text": {"Fn::Sub": "arn:${AWS::Partition}:sns:${Topic}:${Bucket.Arn}:${!Unused}"},
            "Mapped": {"Fn::Sub": ["${Shadowed}-${Role}", {"Shadowed": "literal"}]},
            "Param": {"Ref": "SomeParameter"},
        }),
    )
    assert dependencies(t)["User"] == {"Role", "Key", "Topic", "Bucket"}


def test_unknown_types_take_the_default():
    result = critical_path(template(A=res("Custom::Whatever"), B=res("AWS::Nothing::Here", depends_on="A")), FIGURES)
    assert result.minutes == 1.0
    assert [s.minutes for s in result.chain] == [0.5, 0.5]


def test_a_dependency_cycle_is_refused():
    with pytest.raises(ModelError, match="cycle"):
        critical_path(template(A=res("Test::Fast", depends_on="B"), B=res("Test::Fast", {"X": {"Ref": "A"}})), FIGURES)


def test_a_stack_starts_after_the_stacks_it_depends_on():
    first = template(Slow=res("Test::Slow"))
    second = template(Fast=res("Test::Fast"))
    result = model_templates({"first": first, "second": second}, {"second": ["first"]}, concurrency=4, figures=FIGURES)
    assert result.stacks["second"].start == 10.0
    assert result.minutes == 11.0
    assert result.chain == ("first", "second")


def test_concurrency_lets_independent_stacks_overlap():
    stacks = {"net": template(A=res("Test::Fast")), "x": template(S=res("Test::Slow")), "y": template(M=res("Test::Medium"))}
    depends = {"x": ["net"], "y": ["net"]}
    serial = model_templates(stacks, depends, concurrency=1, figures=FIGURES)
    parallel = model_templates(stacks, depends, concurrency=2, figures=FIGURES)
    assert serial.minutes == 15.0
    assert parallel.minutes == 11.0
    assert parallel.stacks["y"].start == parallel.stacks["x"].start == 1.0


def test_a_nested_stack_takes_its_template_time():
    inner = template(A=res("Test::Slow"), B=res("Test::Medium", depends_on="A"))
    outer = template(
        Nested=res("AWS::CloudFormation::Stack", {}) | {"Metadata": {"aws:asset:path": "inner.nested.template.json"}},
        After=res("Test::Fast", {"Out": {"Fn::GetAtt": ["Nested", "Outputs.X"]}}),
    )
    result = critical_path(outer, FIGURES, nested={"inner.nested.template.json": inner})
    assert result.minutes == 15.0


def test_every_figure_has_a_source_or_an_estimate():
    data = json.loads((Path(__file__).resolve().parent.parent / "efa_stack/planning/data/create_minutes.json").read_text())
    assert "_source" in data
    for type_, entry in data["types"].items():
        assert ("source" in entry) != ("estimate" in entry), type_
        assert (entry.get("source") or entry.get("estimate")).strip(), type_
        assert entry["minutes"] > 0, type_
    figures = load_figures()
    assert figures.of("AWS::EKS::Cluster").minutes == data["types"]["AWS::EKS::Cluster"]["minutes"]
    assert figures.of("Custom::NotListed") is figures.default


# --- the shipped specs ------------------------------------------------------------------------------

SPECS = sorted(p.stem for p in CLUSTERS.glob("*.yaml"))
KUBECTL_TYPES = ("Custom::AWSCDK-EKS-KubernetesResource",)


def reaches(graph: dict[str, set[str]], start: str, targets: set[str]) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        for dep in graph.get(node, ()):
            if dep in targets:
                return True
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return False


@pytest.mark.parametrize("stem", SPECS)
def test_charts_apply_without_waiting_for_nodes(stem: str):
    """A manifest of CRDs, device plugins or operators, and every Helm release, has no dependency path to a node
    group: ``kubectl apply`` and ``helm install`` without ``--wait`` need only the API server. Only the charts
    behind a controller that must run first (a wait for its available replica after the system nodes) may
    reach one."""
    synth = synth_spec(str(CLUSTERS / f"{stem}.yaml"))
    t = synth.template("cluster")
    graph = dependencies(t)
    node_groups = {k for k, v in t["Resources"].items() if v["Type"] == "AWS::EKS::Nodegroup"}
    for release in (k for k, v in t["Resources"].items() if v["Type"] == "Custom::AWSCDK-EKS-HelmChart"):
        assert t["Resources"][release]["Properties"].get("Wait") is not True, release
        assert not reaches(graph, release, node_groups), f"{stem}: {release} waits for a node group"
    helm = {k for k, v in t["Resources"].items()
            if v["Type"] == "Custom::AWSCDK-EKS-KubernetesObjectValue" and graph[k] & node_groups}
    manifests = {k: v for k, v in t["Resources"].items() if v["Type"] in KUBECTL_TYPES}
    crd_manifests = [k for k, v in manifests.items() if "CustomResourceDefinition" in json.dumps(v["Properties"])]
    assert crd_manifests, "every spec applies the MPIJob CRD"
    for logical_id in manifests:
        if reaches(graph, logical_id, helm):
            continue
        assert not reaches(graph, logical_id, node_groups), f"{stem}: {logical_id} waits for a node group"


@pytest.mark.parametrize("stem", SPECS)
def test_no_chart_is_on_the_critical_path_ahead_of_the_nodes(stem: str):
    """What sets each shipped spec's modelled deploy is the nodes (and what needs them), not a chart queued
    behind them: nothing applied by kubectl comes before the last node group on the critical path."""
    synth = synth_spec(str(CLUSTERS / f"{stem}.yaml"))
    result = model_assembly(synth.outdir)
    steps = [step for name in result.chain for step in result.stacks[name].chain]
    types = [s.type for s in steps]
    assert "AWS::EKS::Cluster" in types
    if "AWS::EKS::Nodegroup" in types:
        last_group = max(i for i, t in enumerate(types) if t == "AWS::EKS::Nodegroup")
        assert not [t for t in types[:last_group] if t.startswith("Custom::AWSCDK-EKS-")], types
    assert result.minutes == pytest.approx(result.stacks[result.chain[-1]].end)
    assert result.minutes == pytest.approx(sum(result.stacks[n].minutes for n in result.chain))


DEPLOY_TARGET_MIN = TARGET_MINUTES


@pytest.mark.parametrize("stem", SPECS)
def test_first_deploy_fits_the_target(stem: str):
    """Every shipped spec deploys in at most 24 modelled minutes: the file system and the network's NAT gateways
    and endpoints alongside the EKS cluster, charts and Helm releases as soon as the API server takes them, and
    after the system nodes only the waits for a controller that must serve its webhooks first (the Trainer's,
    Kueue's, Training Operator v1's) and the objects those webhooks admit."""
    synth = synth_spec(str(CLUSTERS / f"{stem}.yaml"))
    result = model_assembly(synth.outdir)
    assert result.minutes <= DEPLOY_TARGET_MIN, render(result)
    steps = [step for name in result.chain for step in result.stacks[name].chain]
    groups = [i for i, step in enumerate(steps) if step.type == "AWS::EKS::Nodegroup"]
    if groups:  # no Helm release waits for the nodes: releases are applied while the nodes launch
        after = steps[groups[-1] + 1:]
        assert "Custom::AWSCDK-EKS-HelmChart" not in {step.type for step in after}, render(result)


@pytest.mark.parametrize(("stem", "deployment", "first"), [
    ("training-p5", contract.TRAINER_DEPLOYMENT, "Clustertrainingruntimes"),
    ("tas-p5", contract.KUEUE_CONTROLLER, "Clusterkueuequeues"),
])
def test_objects_behind_a_webhook_wait_for_its_controller_on_the_system_nodes(stem: str, deployment: str, first: str):
    """The first objects a controller's fail-closed webhook admits (the Trainer's runtimes, Kueue's queues) wait for
    its Deployment's available replica, which waits for the release or manifest and for the system node group;
    the jobs come after them."""
    t = synth_spec(str(CLUSTERS / f"{stem}.yaml")).template("cluster")
    graph = dependencies(t)
    res = t["Resources"]
    (available,) = [k for k, v in res.items() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesObjectValue"
                    and v["Properties"]["ObjectName"] == deployment]
    props = res[available]["Properties"]
    from stacks.kubernetes import ROLLED_OUT_JSONPATH

    assert props["ObjectType"] == "deployment" and props["JsonPath"] == ROLLED_OUT_JSONPATH
    system = {k for k, v in res.items() if v["Type"] == "AWS::EKS::Nodegroup" and k.startswith("NodeGroupsystem")}
    assert system and system <= graph[available]
    (objects,) = [k for k in res if k.startswith(first)]
    (jobs,) = [k for k in res if k.startswith("Clustertrainingjobs")]
    assert available in graph[objects] and objects in transitive_dependencies(graph, jobs)
