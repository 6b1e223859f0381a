"""cfn-lint reports zero errors on every template of every shipped spec (the ``integration`` tier, with the other
cfn-lint tests that import :func:`lint`)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from tests.support import CLUSTERS, synth_spec

SPECS = sorted(p.name for p in CLUSTERS.glob("*.yaml"))


@cache
def _runner(region: str) -> Any:
    """One cfn-lint runner per region: loading its ~340 rules costs ~0.5 s, checking a template less.
    The cfn-lint CLI checks every file it is given with one runner in the same way."""
    from cfnlint.config import ConfigMixIn
    from cfnlint.runner import Runner

    return Runner(ConfigMixIn(regions=[region]))


def lint(template: dict, region: str) -> list:
    """cfn-lint's matches for ``template`` in ``region``, as ``cfnlint.api.lint`` returns them (a template already
    linted in this process is not linted again)."""
    return list(_lint_text(json.dumps(template), region))


@cache
def _lint_text(text: str, region: str) -> tuple:
    from cfnlint.decode.decode import decode_str

    decoded, errors = decode_str(text)
    if errors:
        return tuple(errors)
    return tuple(_runner(region).validate_template(decoded))


UNKNOWN_TO_CFN_LINT = ("p6e-gb200.36xlarge",)
"""Instance types the pinned cfn-lint's schemas lack: its AWS::EC2::LaunchTemplate ``InstanceType`` enum names no
p6e-gb200 type in any region (cfnlint/data/schemas/providers/*.json), while EC2 sells it as UltraServers through
Capacity Blocks (the EKS User Guide, "Use P6e-GB200 UltraServers with Amazon EKS"). Only that finding (E3628 on a
launch template's instance type) is set aside, for these types only."""


def _stale_schema(match: Any) -> bool:
    path = "/".join(map(str, match.path))
    return (match.rule.id == "E3628" and path.endswith("LaunchTemplateData/InstanceType")
            and any(f"'{t}'" in match.message for t in UNKNOWN_TO_CFN_LINT))


@pytest.mark.integration
@pytest.mark.parametrize("spec", SPECS)
def test_templates_have_no_cfn_lint_errors(spec):
    s = synth_spec(str(CLUSTERS / spec))
    for name, template in s.templates.items():
        matches = lint(template, s.plan.region)
        errors = [f"{m.rule.id} {m.message} ({'/'.join(map(str, m.path))})" for m in matches
                  if m.rule.id.startswith("E") and not _stale_schema(m)]
        assert not errors, f"{name}:\n" + "\n".join(errors)


@pytest.mark.integration
def test_cfn_lint_catches_a_broken_launch_template(default_synth):
    """The linter is really reading our templates: a bad volume type is an error."""
    template = json.loads(json.dumps(default_synth.template("cluster")))
    lt = next(v for k, v in template["Resources"].items() if k.startswith("NodeGroupp5LaunchTemplate"))
    lt["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"][0]["Ebs"]["VolumeType"] = "gp9"
    assert any(m.rule.id.startswith("E") for m in lint(template, "us-west-2"))


@pytest.mark.parametrize("spec", SPECS)
def test_cluster_stack_fits_the_resource_count_the_limit_check_assumes(spec):
    """planning.limits counts the cluster stack's resources from the plan before CloudFormation: its
    bound must hold for every shipped spec, exactly per node group, within the fixed part."""
    from efa_stack.planning.limits import CLUSTER_STACK_FIXED_RESOURCES, count_cluster_resources, network_resource_count

    s = synth_spec(str(CLUSTERS / spec))
    plan = s.plan
    actual = len(s.template("cluster")["Resources"])
    groups = [g.placement_group for g in plan.all_node_groups]
    parts = [len(g.parts) for g in plan.all_node_groups]
    network = network_resource_count(
        len(plan.availability_zones), plan.nat_gateways, plan.interface_endpoints, plan.existing_vpc is not None)
    pool_groups = len(plan.karpenter.new_placement_groups) if plan.karpenter is not None else 0
    bound = count_cluster_resources(groups, parts, network=network, storage=plan.storage is not None,
                                    karpenter=plan.karpenter is not None, pool_placement_groups=pool_groups,
                                    kueue=plan.kueue is not None,
                                    ultraservers=any(g.ultraserver for g in plan.node_groups))
    assert actual <= bound
    assert bound - actual <= CLUSTER_STACK_FIXED_RESOURCES  # the bound is near, not a blanket allowance
