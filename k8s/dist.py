"""Write the cluster's Kubernetes objects as plain YAML, one file per chart, for GitOps and kubectl.

``write_dist(plan, outdir, charts)`` renders the chart objects the cluster stack deploys (built once per
synth by :func:`k8s.charts.build_charts`; built here when not given) and writes
``outdir/<NN>-<chart id>.yaml``, e.g.::

    dist/efa-training/10-efa-device-plugin.yaml
    dist/efa-training/11-nvidia-device-plugin.yaml
    dist/efa-training/20-mpi-operator-crd.yaml
    dist/efa-training/30-mpi-operator.yaml
    dist/efa-training/40-nccl-tests.yaml

The prefix is the apply order, so ``kubectl apply -f dist/efa-training/`` (which reads a directory
in file-name order) creates the CRD before the MPIJob. The conventional ``outdir`` is
:func:`dist_dir` (``dist/<cluster name>``). Output is deterministic: objects in construct order,
keys as cdk8s emits them (sorted), no timestamps or paths, so the files can be committed and diffed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cdk8s
import yaml

from efa_stack.spec.plan import ClusterPlan
from k8s.charts import build_charts, chart_file_name

DIST_ROOT = Path("dist")
_OURS = re.compile(r"^\d\d-[a-z0-9-]+\.yaml$")


def dist_dir(plan: ClusterPlan, root: Path = DIST_ROOT) -> Path:
    """``dist/<cluster name>``."""
    return root / plan.name


class _Dumper(yaml.SafeDumper):
    """Block-style YAML with indented lists, long lines kept whole."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
        return super().increase_indent(flow, False)


def render_chart(plan: ClusterPlan, chart: cdk8s.Chart) -> str:
    """A chart's objects as a multi-document YAML string with a short header."""
    objects = chart.to_json()
    header = (
        f"# efa-stack: chart {chart.node.id} of cluster {plan.name} ({plan.region}, Kubernetes {plan.kubernetes_version}).\n"
        "# Generated from the cluster spec by k8s/charts.py; do not edit. Regenerate with `make synth`.\n"
    )
    body = yaml.dump_all(
        objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, explicit_start=True, width=4096
    )
    return header + body


def render_dist(plan: ClusterPlan, charts: Sequence[cdk8s.Chart] | None = None) -> dict[str, str]:
    """File name -> YAML text for every chart of ``plan``, in apply order.

    ``charts`` are the ones :func:`k8s.charts.build_charts` made for ``plan`` (the same objects the
    cluster stack applies); without them they are built here.
    """
    if charts is None:
        charts = build_charts(plan, cdk8s.App())
    return {chart_file_name(c.node.id): render_chart(plan, c) for c in charts}


def write_dist(plan: ClusterPlan, outdir: Path, charts: Sequence[cdk8s.Chart] | None = None) -> list[Path]:
    """Write one YAML file per chart into ``outdir`` and return the paths in apply order.

    Chart files from an earlier run that this plan no longer produces (``NN-name.yaml``) are
    removed, so a dropped chart does not linger; other files in ``outdir`` are left alone.
    """
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    files = render_dist(plan, charts)
    for stale in outdir.iterdir():
        if stale.is_file() and _OURS.match(stale.name) and stale.name not in files:
            stale.unlink()
    written: list[Path] = []
    for name, text in files.items():
        path = outdir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
