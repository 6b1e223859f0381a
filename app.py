"""CDK entry point: load the spec, build the stacks, write dist/<cluster>/, print what the spec became.

    npx cdk synth                               # clusters/default.yaml
    npx cdk synth -c spec=clusters/p5en.yaml    # another spec
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import cdk8s
from aws_cdk import App

from efa_stack.planning.plan import plan_from_file
from efa_stack.spec.errors import SpecError
from k8s.charts import build_charts
from k8s.dist import APPLY_SCRIPT, dist_dir, write_dist
from stacks.compose import build

DEFAULT_SPEC = "clusters/default.yaml"


def main(app: App | None = None) -> None:
    """Synthesize ``app`` (a new :class:`aws_cdk.App` reading ``CDK_OUTDIR``/``CDK_CONTEXT_JSON`` by default)."""
    app = app or App()
    spec_path = app.node.try_get_context("spec") or DEFAULT_SPEC
    try:
        plan = plan_from_file(spec_path)
    except SpecError as exc:
        print(exc.render(), file=sys.stderr)
        sys.exit(1)
    # The cdk8s charts are built once: the cluster stack applies them and dist/ gets the same objects.
    charts = build_charts(plan, cdk8s.App())
    build(app, plan, account=os.environ.get("CDK_DEFAULT_ACCOUNT"), charts=charts)
    assembly = app.synth()
    out = dist_dir(plan, Path(app.node.try_get_context("dist") or "dist"))
    written = write_dist(plan, out, charts)
    print(plan.summary(), file=sys.stderr)
    print(f"templates: {assembly.directory}", file=sys.stderr)
    print(f"manifests: {out}/ ({len(written)} files; apply with {out / APPLY_SCRIPT})", file=sys.stderr)


if __name__ == "__main__":
    main()
