"""Write the cluster's Kubernetes objects as plain YAML, one file per chart, for GitOps and kubectl.

:func:`write_dist` writes ``dist/<cluster>/<NN>-<chart id>.yaml`` (objects of a kind whose CRD is in the
same output go into ``after-crds/``) and ``apply.sh``; output is deterministic. Why the two steps:
docs/design/kubernetes-side.md; how to apply: docs/deploy-and-apply.md.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cdk8s
import yaml

from efa_stack import contract
from efa_stack.planning.plan import ClusterPlan
from k8s.charts import build_charts
from k8s.components import (
    AWS_DRANET,
    KARPENTER,
    KUBEFLOW_TRAINER,
    NEURON_DRA,
    NODE_FEATURE_DISCOVERY,
    NVIDIA_DRA_DRIVER,
    chart_file_name,
)
from k8s.rollout import (
    ApplyChart,
    HelmRelease,
    InstallRelease,
    Rollout,
    Step,
    WaitAvailable,
    WaitEstablished,
    WaitValue,
    default_rank,
    plan_rollout,
)

DIST_ROOT = Path("dist")
AFTER_CRDS_DIR = "after-crds"
"""Sub-directory for charts whose kinds are defined by a CRD of the same output (applied second)."""
APPLY_SCRIPT = "apply.sh"
HELM_DIR = "helm"
"""Sub-directory for the values of Helm releases ``apply.sh`` installs (not manifests: kubectl never reads it)."""
TRAINER_VALUES = f"{HELM_DIR}/{contract.TRAINER_RELEASE}-values.yaml"
KARPENTER_VALUES = f"{HELM_DIR}/{contract.KARPENTER_RELEASE}-values.yaml"
HELM_TIMEOUT = "10m"
ROLLOUT_TIMEOUT = "300s"
CRD_WAIT_TRIES = 60
CRD_WAIT_INTERVAL_S = 2
"""``wait_established`` polls a CRD up to 60 times, 2 s apart (120 s; ``EFA_STACK_CRD_WAIT_TRIES`` overrides)."""
ADMIT_TRIES = 30
ADMIT_INTERVAL_S = 5
"""``apply_until_admitted`` tries ``kubectl apply`` up to 30 times, 5 s apart (``EFA_STACK_ADMIT_TRIES`` overrides)."""
CRD_ESTABLISHED_JSONPATH = '{.status.conditions[?(@.type=="Established")].status}'

WAIT_ESTABLISHED = f"""\
# wait_established CRD: poll until the CRD's Established condition is "True". Not `kubectl wait
# --for=condition=established`: it fails at once for a CRD that has no status yet, and a condition that
# is present but "False" is not established. Gives up after EFA_STACK_CRD_WAIT_TRIES polls.
wait_established() {{
  tries="${{EFA_STACK_CRD_WAIT_TRIES:-{CRD_WAIT_TRIES}}}"
  while :; do
    status=$(kubectl get crd "$1" -o 'jsonpath={CRD_ESTABLISHED_JSONPATH}' 2>/dev/null || true)
    [ "$status" = True ] && return 0
    tries=$((tries - 1))
    if [ "$tries" -le 0 ]; then
      echo "efa-stack: CRD $1 is not Established (status: ${{status:-none}}); nothing after it was applied" >&2
      exit 1
    fi
    sleep {CRD_WAIT_INTERVAL_S}
  done
}}"""

WAIT_FOR_VALUE_TRIES = 60
WAIT_FOR_VALUE = f"""\
# wait_for_value TYPE NAME JSONPATH: poll until the JSONPath of the object yields a value (a webhook's CA once its
# controller has written it). Gives up after EFA_STACK_VALUE_WAIT_TRIES polls, 5 s apart.
wait_for_value() {{
  tries="${{EFA_STACK_VALUE_WAIT_TRIES:-{WAIT_FOR_VALUE_TRIES}}}"
  until [ -n "$(kubectl get "$1" "$2" -o "jsonpath=$3" 2>/dev/null || true)" ]; do
    tries=$((tries - 1))
    if [ "$tries" -le 0 ]; then
      echo "efa-stack: $1 $2 has no $3 yet; nothing after it was applied" >&2
      exit 1
    fi
    sleep 5
  done
}}"""

APPLY_UNTIL_ADMITTED = f"""\
# apply_until_admitted FILE: kubectl apply, tried again while admission refuses it. The Trainer's TrainJob
# webhook looks the ClusterTrainingRuntime up through its manager's cache, which may not yet hold the
# runtime applied a moment before. Gives up after EFA_STACK_ADMIT_TRIES tries.
apply_until_admitted() {{
  tries="${{EFA_STACK_ADMIT_TRIES:-{ADMIT_TRIES}}}"
  until kubectl apply -f "$1"; do
    tries=$((tries - 1))
    if [ "$tries" -le 0 ]; then
      echo "efa-stack: $1 is still refused (kubectl's error above)" >&2
      exit 1
    fi
    sleep {ADMIT_INTERVAL_S}
  done
}}"""
_OURS = re.compile(r"^\d\d-[a-z0-9-]+\.yaml$")


def dist_dir(plan: ClusterPlan, root: Path = DIST_ROOT) -> Path:
    """``dist/<cluster name>``."""
    return root / plan.name


class _Dumper(yaml.SafeDumper):
    """Block-style YAML with indented lists, long lines kept whole. PyYAML's own emitter: libyaml's ignores the
    indentation of lists below."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
        return super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        """No anchors: the text depends on the objects' content alone, not on which of them are one object."""
        return True


def render_chart(plan: ClusterPlan, chart: cdk8s.Chart) -> str:
    """A chart's objects as a multi-document YAML string with a short header."""
    return render_objects(plan, chart.node.id, chart.to_json())


def render_objects(plan: ClusterPlan, chart_id: str, objects: list[Any]) -> str:
    """The YAML text of :func:`render_chart` for the objects of chart ``chart_id``."""
    header = (
        f"# efa-stack: chart {chart_id} of cluster {plan.name} ({plan.region}, Kubernetes {plan.kubernetes_version}).\n"
        "# Generated from the cluster spec by k8s/charts.py; do not edit. Regenerate with `make synth`.\n"
    )
    return header + _documents_text(objects)


_RENDERED: OrderedDict[bytes, str] = OrderedDict()
_RENDERED_MAX = 64
"""How many distinct charts' YAML :func:`_documents_text` keeps (the least recently used goes first)."""


def _documents_text(objects: list[Any]) -> str:
    """``objects`` as block-style YAML documents. PyYAML's pure-Python emitter is slow on the vendored CRDs (hundreds
    of KB), and a process that renders the same chart again (the tests, ``write_dist`` after ``render_dist``)
    gets the text it made before: the key is a digest of the objects' ``repr``, which fixes their content, order and
    types (JSON would give the key ``1`` and the key ``"1"``, which YAML renders apart, one text)."""
    key = hashlib.sha256(repr(objects).encode()).digest()
    text = _RENDERED.get(key)
    if text is None:
        text = yaml.dump_all(
            objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, explicit_start=True, width=4096
        )
        _RENDERED[key] = text
        if len(_RENDERED) > _RENDERED_MAX:
            _RENDERED.popitem(last=False)
    else:
        _RENDERED.move_to_end(key)
    return text


def render_dist(plan: ClusterPlan, charts: Sequence[cdk8s.Chart] | None = None) -> dict[str, str]:
    """File name -> YAML text for every chart of ``plan``, in apply order.

    ``charts`` are the ones :func:`k8s.charts.build_charts` made for ``plan`` (the same objects the
    cluster stack applies); without them they are built here.
    """
    rollout = _rollout(plan, charts, None)
    return {chart_file_name(chart_id): render_objects(plan, chart_id, list(objects))
            for chart_id, objects in rollout.objects.items()}


def _rollout(plan: ClusterPlan, charts: Sequence[cdk8s.Chart] | None, rollout: Rollout | None) -> Rollout:
    if rollout is not None:
        return rollout
    return plan_rollout(plan, charts if charts is not None else build_charts(plan, cdk8s.App()))


def release_values_file(release: HelmRelease) -> str:
    """``helm/<release>-values.yaml``: the values ``apply.sh`` passes to a release."""
    return f"{HELM_DIR}/{release.name}-values.yaml"


def helm_command(release: HelmRelease) -> str:
    """``apply.sh``'s line for a release: ``helm upgrade --install`` with the chart, version, release, namespace and
    values ``cdk deploy`` uses, and ``--wait``: it returns once the release's controller is available, which the
    steps after the release's availability wait need. The charts are ``oci://`` references, which Helm reads without
    extra settings from v3.8.0 (helm.sh, "Use OCI-based registries": "Beginning in Helm v3.8.0, OCI support is enabled
    by default"), hence the version the script asks for. ``--skip-crds`` where the release's CRDs are a chart of the
    rollout (kept when the release goes). A chart in an HTTP repository (aws-dranet's, https://aws.github.io/eks-charts)
    is named with ``--repo``."""
    chart = (release.repository if release.repository.startswith("oci://")
             else f"{release.chart} --repo {release.repository}")
    return (f"helm upgrade --install {release.name} {chart} --version {release.version} "
            f"--namespace {release.namespace} --create-namespace" + (" --skip-crds" if release.skip_crds else "")
            + f" --wait --timeout {HELM_TIMEOUT} --values {release_values_file(release)}")


def helm_files(rollout: Rollout) -> dict[str, str]:
    """Relative path -> text of the Helm values files ``apply.sh`` passes."""
    out: dict[str, str] = {}
    for step in rollout.of_type(InstallRelease):
        release = step.release
        assert release is not None
        header = f"# efa-stack: values of Helm release {release.name} ({_RELEASE_TITLES[step.component]}); do not edit.\n"
        out[release_values_file(release)] = header + yaml.dump(dict(release.values), Dumper=_Dumper, sort_keys=False)
    return out


_RELEASE_TITLES = {KUBEFLOW_TRAINER: "Kubeflow Trainer v2", KARPENTER: "Karpenter",
                   NODE_FEATURE_DISCOVERY: "Node Feature Discovery", NVIDIA_DRA_DRIVER: "NVIDIA DRA driver",
                   AWS_DRANET: "the EFA DRA driver", NEURON_DRA: "the Neuron DRA driver"}


def first_step(rollout: Rollout) -> list[str]:
    """The charts ``kubectl apply -f .`` applies at once: those that follow only other charts' applies (no wait,
    no release); the others go into ``after-crds/``."""
    return [s.chart for s in rollout.of_type(ApplyChart)
            if all(isinstance(rollout[a], ApplyChart) for a in rollout.ancestors(s.id))]


def chart_path(chart_id: str, first: Sequence[str]) -> str:
    """Where chart ``chart_id`` goes in ``dist/<cluster>/``."""
    name = chart_file_name(chart_id)
    return name if chart_id in first else f"{AFTER_CRDS_DIR}/{name}"


def script_order(rollout: Rollout) -> list[Step]:
    """The order ``apply.sh`` takes the steps in: the first step's charts, then :meth:`Rollout.order`."""
    first = set(first_step(rollout))
    return rollout.order(key=lambda s: (-1, "") if isinstance(s, ApplyChart) and s.chart in first else default_rank(s))


def apply_script(plan: ClusterPlan, rollout: Rollout) -> str:
    """``apply.sh``: the rollout's steps as shell commands, in :func:`script_order` (which realises every edge).

    The first step's charts are one ``kubectl apply -f .``; a release is ``helm upgrade --install --wait`` (which
    also realises the wait for its controller); a CRD wait is ``wait_established`` (see :data:`WAIT_ESTABLISHED`); a
    controller's wait ``kubectl rollout status``; a webhook's CA ``wait_for_value``; the other charts one
    ``kubectl apply -f after-crds/`` when nothing comes between them, else one ``kubectl apply`` each, those whose
    objects a webhook may refuse for a while (TrainJobs: kubeflow/trainer@v2.3.0
    pkg/runtime/core/clustertrainingruntime.go ``ValidateObjects`` refuses a TrainJob whose runtime its cached client
    cannot get, "specified clusterTrainingRuntime must be created before the TrainJob is created") through
    ``apply_until_admitted``."""
    first = first_step(rollout)
    order = [s for s in script_order(rollout) if not (isinstance(s, ApplyChart) and s.chart in first)]
    released = {s.component for s in rollout.of_type(InstallRelease)}
    commands: list[str] = []
    rest = [s for s in order if isinstance(s, ApplyChart)]
    tail_only_applies = all(isinstance(s, ApplyChart) for s in order[len(order) - len(rest):])
    if rest and tail_only_applies and not any(s.retry_admission for s in rest):
        order = order[: len(order) - len(rest)]
        last = [f"kubectl apply -f {AFTER_CRDS_DIR}/"]
    else:
        last = []
    for step in order:
        if isinstance(step, InstallRelease):
            assert step.release is not None
            commands.append(helm_command(step.release))
        elif isinstance(step, WaitEstablished):
            commands.append(f"wait_established {step.crd}")
        elif isinstance(step, WaitAvailable) and step.component not in released:
            commands.append(f"kubectl rollout status deployment/{step.deployment} -n {step.namespace} "
                            f"--timeout={ROLLOUT_TIMEOUT}")
        elif isinstance(step, WaitValue):
            commands.append(f"wait_for_value {step.object_type} {step.name} '{{{step.json_path}}}'")
        elif isinstance(step, ApplyChart):
            verb = "apply_until_admitted" if step.retry_admission else "kubectl apply -f"
            commands.append(f"{verb} {chart_path(step.chart, first)}")
    commands += last
    return _script(plan, rollout, commands)


def _script(plan: ClusterPlan, rollout: Rollout, commands: list[str]) -> str:
    """The script around ``commands``: header, the functions they call, ``kubectl apply -f .``."""
    releases = [s.component for s in rollout.of_type(InstallRelease)]
    lines = [
        "#!/bin/sh",
        f"# efa-stack: apply the Kubernetes objects of cluster {plan.name}; generated by k8s/dist.py, do not edit.",
        "# Objects whose kind a CRD here defines are in after-crds/, applied once the CRD is established:",
        "# kubectl cannot map a kind whose CRD the same invocation creates.",
    ]
    if KUBEFLOW_TRAINER in releases:
        lines.append("# Kubeflow Trainer's CRDs come with its Helm release; the objects of those kinds wait for them too.")
    lines += ["set -eu", 'cd "$(dirname "$0")"']
    if releases:
        charts = [_HELM_NAMES[c] for c in releases]
        oci = all(s.release is not None and s.release.repository.startswith("oci://")
                  for s in rollout.of_type(InstallRelease))
        what = (", ".join(charts[:-1]) + " and " if len(charts) > 1 else "") + charts[-1] + (
            "" if not oci else " (an oci:// chart)" if len(charts) == 1 else " (oci:// charts)")
        lines.append(
            'command -v helm >/dev/null 2>&1 || { echo "efa-stack: helm 3.8 or later is needed to install '
            f'{what}; nothing was applied" >&2; exit 1; }}'
        )
    if any(c.startswith("wait_established ") for c in commands):
        lines.append(WAIT_ESTABLISHED)
    if any(c.startswith("wait_for_value ") for c in commands):
        lines.append(WAIT_FOR_VALUE)
    if any(c.startswith("apply_until_admitted ") for c in commands):
        lines.append(APPLY_UNTIL_ADMITTED)
    lines.append("kubectl apply -f .")
    return "\n".join(lines + commands) + "\n"


_HELM_NAMES = {KUBEFLOW_TRAINER: "Kubeflow Trainer", KARPENTER: "Karpenter",
               NODE_FEATURE_DISCOVERY: "Node Feature Discovery", NVIDIA_DRA_DRIVER: "the NVIDIA DRA driver",
               AWS_DRANET: "the EFA DRA driver", NEURON_DRA: "the Neuron DRA driver"}


def dist_files(plan: ClusterPlan, charts: Sequence[cdk8s.Chart] | None = None,
               rollout: Rollout | None = None) -> dict[str, str]:
    """Relative path -> text of everything :func:`write_dist` writes: the manifests in apply order (the first step's
    at the top, the others under ``after-crds/``: :func:`first_step`), then the Helm values and ``apply.sh``.
    ``charts`` as for :func:`render_dist`; ``rollout`` their rollout (made here when absent)."""
    rollout = _rollout(plan, charts, rollout)
    first = first_step(rollout)
    manifests = {chart_path(chart_id, first): render_objects(plan, chart_id, list(objects))
                 for chart_id, objects in rollout.objects.items()}
    ordered = {k: v for k, v in manifests.items() if "/" not in k} | {k: v for k, v in manifests.items() if "/" in k}
    return {**ordered, **helm_files(rollout), APPLY_SCRIPT: apply_script(plan, rollout)}


def write_dist(plan: ClusterPlan, outdir: Path, charts: Sequence[cdk8s.Chart] | None = None,
               rollout: Rollout | None = None) -> list[Path]:
    """Write the manifests (and ``apply.sh``) into ``outdir``; return the manifest paths in apply order.
    ``charts`` and ``rollout`` as for :func:`dist_files` (app.py passes the ones the cluster stack applies).

    Chart files from an earlier run that this plan no longer produces (``NN-name.yaml`` in
    ``outdir`` or ``outdir/after-crds``, Helm values in ``outdir/helm``) are removed, so a dropped or moved
    chart does not linger;
    other files are left alone.
    """
    outdir = Path(outdir)
    files = dist_files(plan, charts, rollout)
    for folder in (outdir, outdir / AFTER_CRDS_DIR, outdir / HELM_DIR):
        if not folder.is_dir():
            continue
        for stale in folder.iterdir():
            rel = stale.relative_to(outdir).as_posix()
            ours = _OURS.match(stale.name) or (folder.name == HELM_DIR and stale.name.endswith("-values.yaml"))
            if stale.is_file() and ours and rel not in files:
                stale.unlink()
    written: list[Path] = []
    for rel, text in files.items():
        path = outdir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if rel == APPLY_SCRIPT:
            path.chmod(0o755)
        elif not rel.startswith(f"{HELM_DIR}/"):
            written.append(path)
    later = outdir / AFTER_CRDS_DIR
    if later.is_dir() and not any(later.iterdir()):
        later.rmdir()
    return written
