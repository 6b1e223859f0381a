"""The template byte budget (efa_stack/planning/template_budget.py): every template a spec synthesizes fits
CloudFormation's 1,000,000 bytes; at the documented envelope the largest parts move into nested stacks; a spec no
layout fits is refused with the numbers and the fix.

Templates are measured as ``cdk deploy`` synthesizes them: with the context the CDK CLI gives the app
(tests.support.CLI_CONTEXT: path and asset metadata, version reporting), which adds bytes to every resource; the tests'
one synth of each spec is that synth (:attr:`tests.support.Synthesized.template_bytes`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from efa_stack.planning.limits import CFN_MAX_RESOURCES
from efa_stack.spec.errors import SpecError
from tests.support import CLUSTERS, ROOT, Built, built, built_text, synth_spec, synth_text

CFN_TEMPLATE_LIMIT = 1_000_000
"""AWS CloudFormation User Guide, "Understand CloudFormation quotas": template body size in an S3 object, 1 MB."""
SHIPPED = sorted(p.name for p in CLUSTERS.glob("*.yaml"))

HEAD = """apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata: {name: envelope, region: us-west-2, version: "1.35"}
availabilityZones: [us-west-2a, us-west-2b]
"""
KUEUE = "scheduling:\n  kueue: {enabled: true}\n"
OWN_ROLE = ", iam: {attachPolicyARNs: [arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess]}"
JOBS = """trainingJobs:
  - {name: tj, nodeGroup: g0, image: public.ecr.aws/deep-learning-containers/pytorch:2.11.0-cu130-amzn2023, kind: trainjob,
     fabric: efa, command: [python, -c, pass]}
  - {name: pj, nodeGroup: g1, image: public.ecr.aws/deep-learning-containers/pytorch:2.11.0-cu130-amzn2023,
     kind: pytorchjob, fabric: efa, command: [python, -c, pass]}
"""
STORAGE = "storage: {deploymentType: PERSISTENT_2, storageCapacityGiB: 4800, perUnitStorageThroughput: 250, nodeGroup: g0}\n"


def groups(n: int, extra: str = "") -> str:
    return "managedNodeGroups:\n" + "".join(
        f"  - {{name: g{i}, instanceType: p5.48xlarge, minSize: 1, desiredCapacity: 1, maxSize: 1, "
        f"availabilityZones: [us-west-2a], efaEnabled: true{extra}}}\n" for i in range(n))


def pools(n: int) -> str:
    return "karpenterNodePools:\n" + "".join(
        f"  - {{name: pool{i}, instanceType: p5.48xlarge, maxNodes: 4, capacity: on-demand, "
        f"availabilityZone: us-west-2a}}\n" for i in range(n))


ISSUE_ENVELOPE = HEAD + groups(28) + KUEUE + pools(1)
"""28 EFA node groups of p5.48xlarge, Kueue and one pool: 1,131,590 bytes in one template before the budget."""
MOST_GROUPS = HEAD + groups(29, OWN_ROLE) + KUEUE + pools(1) + JOBS + STORAGE
"""The most EKS node groups a spec can make (29, each with its own role and placement group) with Kueue, a pool,
both training operators and FSx."""
ENVELOPES = {"issue-envelope": ISSUE_ENVELOPE, "most-groups": MOST_GROUPS}
ENVELOPE_SYNTHS = pytest.mark.xdist_group("template-budget-envelopes")
"""The tests that synthesize an envelope, on one worker: each envelope is synthesized once in the run."""


def layout_of(spec: str | Built):
    """The template layout of the spec text ``spec`` (or of a shipped spec's charts)."""
    from stacks.compose import template_layout

    b = built_text(spec) if isinstance(spec, str) else spec
    return template_layout(b.plan, b.rollout)


def modelled(layout, name: str) -> int:
    """The layout's modelled bytes of the template file ``name``."""
    from efa_stack.planning.template_budget import CHARTS, CLUSTER, NODE_GROUPS
    from stacks.nesting import CHARTS_STACK_ID, NODE_GROUPS_STACK_ID

    if not name.endswith(".nested.template.json"):
        return layout.bytes[CLUSTER]
    return layout.bytes[NODE_GROUPS if NODE_GROUPS_STACK_ID in name and CHARTS_STACK_ID not in name else CHARTS]


# --- the envelope ----------------------------------------------------------------------------------------------


@ENVELOPE_SYNTHS
@pytest.mark.parametrize("envelope", sorted(ENVELOPES))
def test_every_template_at_the_envelope_fits_cloudformation(envelope):
    # GIVEN a spec at the documented envelope WHEN synthesized as cdk deploy synthesizes it
    s = synth_text(ENVELOPES[envelope])
    sizes, templates = s.template_bytes, s.templates
    # THEN no template reaches CloudFormation's limit, nor the budget under it (cdk-nag passed, no CDK warning)
    assert sizes and max(sizes.values()) <= 800_000 < CFN_TEMPLATE_LIMIT, sizes
    # AND the parts moved into nested stacks, each a template of its own under the same limits
    assert any(name.endswith(".nested.template.json") for name in sizes), sizes
    assert all(len(t["Resources"]) < CFN_MAX_RESOURCES for t in templates.values())


@ENVELOPE_SYNTHS
def test_the_most_eks_node_groups_a_spec_can_make_keep_every_template_under_500_resources():
    """29 EFA node groups (the quota of 30 with the system group), each with its own placement group and its own
    node role, synthesize with every stack under CloudFormation's 500 resources per stack (AWS CloudFormation
    User Guide, "Understand CloudFormation quotas"): EKS's quota, not CloudFormation's, bounds the node groups."""
    from efa_stack.spec.models import MAX_MANAGED_NODE_GROUPS, MAX_USER_NODE_GROUPS

    s = synth_text(MOST_GROUPS)
    types = [r["Type"] for t in s.templates.values() for r in t["Resources"].values()]
    assert types.count("AWS::EKS::Nodegroup") == MAX_MANAGED_NODE_GROUPS
    assert types.count("AWS::EC2::PlacementGroup") == MAX_USER_NODE_GROUPS
    sizes = {name: len(t["Resources"]) for name, t in s.templates.items()}
    assert all(n < CFN_MAX_RESOURCES for n in sizes.values()), sizes


def test_the_envelope_moves_node_groups_from_the_end_and_karpenter_s_kept_crds():
    layout = layout_of(ISSUE_ENVELOPE)
    assert layout.nested_charts == ("karpenter-crd",)
    moved = layout.nested_node_groups
    assert moved and moved == tuple(f"g{i}" for i in range(28 - len(moved), 28))


@pytest.mark.integration
@ENVELOPE_SYNTHS
@pytest.mark.parametrize("envelope", sorted(ENVELOPES))
def test_the_envelope_templates_pass_cfn_lint(envelope):
    from tests.test_cfn_lint import lint

    for name, template in synth_text(ENVELOPES[envelope]).templates.items():
        errors = [f"{m.rule.id} {m.message}" for m in lint(template, "us-west-2") if m.rule.id.startswith("E")]
        assert not errors, f"{name}: {errors}"


@ENVELOPE_SYNTHS
def test_nested_node_groups_keep_their_names_and_wait_for_what_they_waited_for():
    templates = synth_text(ISSUE_ENVELOPE).templates
    parent = templates["envelope-cluster"]
    nested = next(t for n, t in templates.items() if "NodeGroups" in n and "KeptCharts" not in n)
    names = sorted(r["Properties"]["NodegroupName"] for r in nested["Resources"].values()
                   if r["Type"] == "AWS::EKS::Nodegroup")
    assert names == sorted(layout_of(ISSUE_ENVELOPE).nested_node_groups)
    (stack,) = [r for lid, r in parent["Resources"].items()
                if r["Type"] == "AWS::CloudFormation::Stack" and lid.startswith("NodeGroups")]
    # the VPC CNI and the Pod Identity agent before the nodes join, the network before they bootstrap
    depends = stack["DependsOn"]
    assert any(d.startswith("VpcCni") for d in depends) and "Vpc" in depends
    assert any(d.startswith("ClusterEksPodIdentityAgentAddon") for d in depends)
    # every EFA interface still carries the EFA group (EfaStack-EFA1 resolves it through the stack's parameters)
    from efa_stack.checks.rules import App, efa_interfaces_carry_efa_group

    app = App(templates)
    launch_templates = [(n, t) for n, _, t in app.resources("AWS::EC2::LaunchTemplate") if n.endswith(".nested")]
    assert launch_templates and all(efa_interfaces_carry_efa_group(t, n, app).value == "compliant"
                                    for n, t in launch_templates)


@ENVELOPE_SYNTHS
def test_the_deploy_model_finds_nested_templates_by_their_asset_hash(tmp_path):
    from efa_stack.tools.deploy_model import model_assembly

    s = synth_text(ISSUE_ENVELOPE)
    outdir = shutil.copytree(s.outdir, tmp_path / "assembly")
    for name, template in s.templates.items():  # as app.py and make bench synthesize: no asset metadata
        (outdir / f"{name}.template.json").write_text(json.dumps(template))
    result = model_assembly(outdir)
    nested = [s for s in result.stacks["envelope-cluster"].chain if s.type == "AWS::CloudFormation::Stack"]
    assert all(s.minutes > 1 for s in nested)  # the nested template's own path, not the default figure


# --- the model --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SHIPPED)
def test_the_model_never_under_counts_a_shipped_spec(spec):
    layout = layout_of(built(spec.removesuffix(".yaml")))
    assert not layout.nested, f"{spec} fits one template and moves nothing"
    for name, actual in synth_spec(str(CLUSTERS / spec)).template_bytes.items():
        assert modelled(layout, name) >= actual, (name, modelled(layout, name), actual)


@ENVELOPE_SYNTHS
@pytest.mark.parametrize("envelope", sorted(ENVELOPES))
def test_the_model_never_under_counts_the_envelope_and_stays_close(envelope):
    from efa_stack.planning.template_budget import MODEL_MARGIN

    layout = layout_of(ENVELOPES[envelope])
    for name, actual in synth_text(ENVELOPES[envelope]).template_bytes.items():
        model = modelled(layout, name)
        assert actual <= model <= actual * (1 + MODEL_MARGIN), (name, model, actual)


def test_a_manifest_counts_its_escaped_objects():
    from efa_stack.planning.template_budget import RenderedChart, escaped_bytes, manifest_template_bytes

    plain = RenderedChart("c", [{"kind": "ConfigMap", "data": {"a": ""}}])
    quoted = RenderedChart("c", [{"kind": "ConfigMap", "data": {"a": 'say "hi"\n' * 100}}])
    # each quote and newline is escaped once in the manifest string and again in the template
    assert escaped_bytes('say "hi"\n') == len('"say \\"hi\\"\\n"')
    grown = manifest_template_bytes(quoted, "t", 0) - manifest_template_bytes(plain, "t", 0)
    assert grown == 100 * len('say \\\\\\"hi\\\\\\"\\\\n')


# --- where parts go -------------------------------------------------------------------------------------------


def test_appending_a_node_group_moves_no_other():
    # GIVEN a spec whose node groups already fill the cluster stack (the envelope's 28: from 16 groups on, every count moves
    # the groups from g14 on) WHEN one more is appended
    before = layout_of(ISSUE_ENVELOPE)
    after = layout_of(HEAD + groups(29) + KUEUE + pools(1))
    # THEN only the new group goes into the nested stack: every other stays where it was
    assert before.nested_node_groups
    assert after.nested_node_groups == (*before.nested_node_groups, "g28")


def test_only_charts_whose_objects_outlive_them_move():
    layout = layout_of(MOST_GROUPS)
    assert set(layout.nested_charts) == {"karpenter-crd", "training-operator-crd"}
    assert not any(c.startswith("kueue") for c in layout.nested_charts)


def padded(text: str, extra: int):
    """The plan of ``text`` and what its cluster stack applies, with one more chart that cannot move (as the
    training-jobs chart), ``extra`` bytes past what takes the cluster stack to the budget: what a spec holding
    more than the cluster stack fits would render."""
    from efa_stack.planning.template_budget import BUDGET_BYTES, RenderedChart, stack_layout
    from k8s.template_parts import rendered

    b = built_text(text)
    plan = b.plan
    kubernetes = rendered(plan, b.rollout)
    fits = stack_layout(plan, kubernetes).bytes["cluster"]
    pad = RenderedChart("padding", [{"kind": "ConfigMap", "data": {"x": "x" * (BUDGET_BYTES - fits + extra)}}],
                        field="trainingJobs")
    return plan, dataclasses.replace(kubernetes, charts=(*kubernetes.charts, pad))


def refusal(text: str, extra: int):
    from efa_stack.planning.template_budget import stack_layout

    with pytest.raises(SpecError) as exc:
        stack_layout(*padded(text, extra))
    (p,) = exc.value.problems
    return p


def test_fails_a_spec_no_layout_fits_with_the_numbers_and_the_fix():
    # GIVEN charts that cannot move and pass the budget on their own
    p = refusal(HEAD + groups(1), 1_000_000)
    # THEN the spec is refused naming the field that brings them, the bytes and the limits
    assert p.field == "trainingJobs" and p.value.endswith(" bytes")
    assert "the cluster stack's template would be about" in p.message and "trainingJobs 1," in p.message
    assert "800,000 bytes" in p.message and "1,000,000 bytes" in p.message
    assert "make what trainingJobs renders" in p.fix and "split the nodes over several clusters" in p.fix


def test_the_fix_for_too_many_pools_fits():
    from efa_stack.planning.template_budget import stack_layout

    # GIVEN 29 pools and a cluster stack that does not fit even with Karpenter's CRDs and the group moved
    p = refusal(HEAD + groups(1) + pools(29), 150_000)
    # WHEN the fix names a number of pools THEN that many fit, with everything else the same
    most = int(p.fix.split("use at most ")[1].split()[0])
    assert 0 < most < 29
    plan, kubernetes = padded(HEAD + groups(1) + pools(most), 0)
    _, over = padded(HEAD + groups(1) + pools(29), 150_000)
    assert stack_layout(plan, dataclasses.replace(kubernetes, charts=(*kubernetes.charts[:-1], over.charts[-1])))


def test_the_fix_to_turn_kueue_off_fits():
    from efa_stack.planning.template_budget import stack_layout

    p = refusal(HEAD + groups(1) + KUEUE, 30_000)
    assert "set scheduling.kueue.enabled: false" in p.fix
    plan, kubernetes = padded(HEAD + groups(1), 0)
    _, over = padded(HEAD + groups(1) + KUEUE, 30_000)
    assert stack_layout(plan, dataclasses.replace(kubernetes, charts=(*kubernetes.charts[:-1], over.charts[-1])))


def test_app_refuses_to_leave_a_template_cloudformation_refuses(tmp_path):
    from efa_stack.planning.template_budget import templates_over_limit

    (tmp_path / "a-cluster.template.json").write_text(" " * CFN_TEMPLATE_LIMIT)
    (tmp_path / "ab12.nested.template.json").write_text(" " * (CFN_TEMPLATE_LIMIT + 1))
    (found,) = templates_over_limit(tmp_path)
    assert found.startswith("ab12.nested.template.json: 1,000,001 bytes")


def test_synth_refuses_a_spec_no_layout_fits_before_any_template(tmp_path, capsys, monkeypatch):
    from aws_cdk import App

    import app as entry
    from efa_stack.planning import template_budget

    # GIVEN a budget the default spec does not fit, however its parts move
    monkeypatch.setattr(template_budget, "BUDGET_BYTES", 100_000)
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as exc:
        entry.main(App(outdir=str(tmp_path / "out"), context={"spec": "clusters/default.yaml",
                                                              "dist": str(tmp_path / "dist")}))
    # THEN synth stops with the problem of the spec file, and leaves no template behind
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "clusters/default.yaml: 1 problem in the cluster spec" in err and "the cluster stack's template" in err
    assert "Traceback" not in err and not list((tmp_path / "out").glob("*.template.json"))
