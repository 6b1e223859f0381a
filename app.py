"""CDK entry point: load the spec, build the stacks, write dist/<cluster>/, print what the spec became.

    npx cdk synth                               # clusters/default.yaml
    npx cdk synth -c spec=clusters/p5en.yaml    # another spec
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from efa_stack.errors import UserError
from efa_stack.planning.plan import plan_from_file
from efa_stack.spec.errors import SpecError

if TYPE_CHECKING:
    from aws_cdk import App

DEFAULT_SPEC = "clusters/default.yaml"


def _cli_context(key: str) -> object:
    """A context value the CDK CLI passed in ``CDK_CONTEXT_JSON`` (cdk.json, cdk.context.json and ``-c``), read
    without starting CDK (a bad spec is reported before aws-cdk-lib loads); None when the CLI passed none."""
    try:
        return json.loads(os.environ.get("CDK_CONTEXT_JSON") or "{}").get(key)
    except (ValueError, AttributeError):
        return None


def _subnet_zones(value: object) -> dict[str, str]:
    """The subnet zones ``efa-stack lookup`` recorded (context ``efa-stack:subnet-zones``); anything else: none."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def main(app: App | None = None) -> None:
    """Synthesize ``app`` (a new :class:`aws_cdk.App` reading ``CDK_OUTDIR``/``CDK_CONTEXT_JSON`` by default)."""
    from efa_stack import contract

    context = app.node.try_get_context if app is not None else _cli_context
    spec_path = context("spec")
    spec_path = spec_path if isinstance(spec_path, str) else None
    zones = _subnet_zones(context(contract.SUBNET_ZONES_CONTEXT))
    try:
        plan = plan_from_file(spec_path or DEFAULT_SPEC, subnet_zones=zones)
    except (SpecError, UserError) as exc:  # UserError: a bad EFA_STACK_TODAY
        from rich.console import Console

        from efa_stack.console import print_error

        sys.exit(print_error(exc, json_out=False, console=Console(stderr=True)))  # as every command does: exit 2
    import cdk8s
    from aws_cdk import App

    from efa_stack.planning.template_budget import templates_over_limit
    from k8s.charts import build_charts
    from k8s.dist import APPLY_SCRIPT, dist_dir, write_dist
    from k8s.rollout import plan_rollout
    from stacks.compose import build, template_layout

    app = app or App()
    if app.node.try_get_context("spec") not in (None, spec_path):  # context the CLI kept elsewhere
        return main(app)
    # The cdk8s charts and their rollout are made once: the cluster stack applies them, dist/ gets the same objects
    # and apply.sh the same order.
    charts = build_charts(plan, cdk8s.App())
    rollout = plan_rollout(plan, charts)
    try:  # the template byte budget: nested stacks, or a spec no layout fits, before any CloudFormation exists
        layout = template_layout(plan, rollout)
    except SpecError as exc:
        print(SpecError(spec_path or DEFAULT_SPEC, exc.problems).render(), file=sys.stderr)
        sys.exit(1)
    build(app, plan, account=os.environ.get("CDK_DEFAULT_ACCOUNT"), charts=charts, rollout=rollout, layout=layout)
    assembly = app.synth()
    oversized = templates_over_limit(Path(assembly.directory))
    if oversized:  # the model under-counted: never hand CloudFormation a template it refuses
        print("error: " + "; ".join(oversized), file=sys.stderr)
        sys.exit(1)
    out = dist_dir(plan, Path(app.node.try_get_context("dist") or "dist"))
    written = write_dist(plan, out, charts, rollout)
    print(plan.summary(), file=sys.stderr)
    print("\n".join(layout.summary_lines()), file=sys.stderr)
    print(f"templates: {assembly.directory}", file=sys.stderr)
    print(f"manifests: {out}/ ({len(written)} files; apply with {out / APPLY_SCRIPT})", file=sys.stderr)


if __name__ == "__main__":
    main()
