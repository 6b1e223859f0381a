"""cfn-lint reports zero errors on every template of every shipped spec."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CLUSTERS, synth_spec

SPECS = sorted(p.name for p in CLUSTERS.glob("*.yaml"))


def lint(template: dict, region: str) -> list:
    from cfnlint.api import ManualArgs, lint as cfn_lint

    return cfn_lint(json.dumps(template), config=ManualArgs(regions=[region]))


@pytest.mark.parametrize("spec", SPECS)
def test_templates_have_no_cfn_lint_errors(spec):
    s = synth_spec(str(CLUSTERS / spec))
    for name, template in s.templates.items():
        matches = lint(template, s.plan.region)
        errors = [f"{m.rule.id} {m.message} ({'/'.join(map(str, m.path))})" for m in matches if m.rule.id.startswith("E")]
        assert not errors, f"{name}:\n" + "\n".join(errors)


def test_cfn_lint_catches_a_broken_launch_template(default_synth):
    """The linter is really reading our templates: a bad volume type is an error."""
    template = json.loads(json.dumps(default_synth.template("cluster")))
    lt = next(v for k, v in template["Resources"].items() if k.startswith("NodeGroupp5LaunchTemplate"))
    lt["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"][0]["Ebs"]["VolumeType"] = "gp9"
    assert any(m.rule.id.startswith("E") for m in lint(template, "us-west-2"))
