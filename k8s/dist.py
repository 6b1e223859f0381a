"""Write the cluster's Kubernetes objects as plain YAML, one file per chart, for GitOps and kubectl.

:func:`write_dist` writes ``dist/<cluster>/<NN>-<chart id>.yaml`` (objects of a kind whose CRD is in the
same output go into ``after-crds/``) and ``apply.sh``; output is deterministic. Why the two steps:
docs/design/kubernetes-side.md; how to apply: docs/deploy-and-apply.md.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import cdk8s
import yaml

from efa_stack import contract
from efa_stack.planning.plan import ClusterPlan
from k8s.charts import build_charts, chart_file_name
from k8s.objects import SAFE_LOADER

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
    return {name: text for name, (_, text) in _rendered(plan, charts).items()}


def _rendered(plan: ClusterPlan, charts: Sequence[cdk8s.Chart] | None) -> dict[str, tuple[list[Any], str]]:
    """File name -> (objects, YAML text) per chart: each chart's objects cross from jsii once."""
    if charts is None:
        charts = build_charts(plan, cdk8s.App())
    out: dict[str, tuple[list[Any], str]] = {}
    for chart in charts:
        chart_id = chart.node.id
        objects = chart.to_json()
        out[chart_file_name(chart_id)] = (objects, render_objects(plan, chart_id, objects))
    return out


def _group_kind(obj: dict[str, Any]) -> tuple[str, str]:
    api_version = str(obj.get("apiVersion", ""))
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    return group, str(obj.get("kind", ""))


def crd_kinds(texts: dict[str, str]) -> dict[tuple[str, str], str]:
    """(API group, kind) -> CRD name, for every CustomResourceDefinition in ``texts``."""
    return _crd_kinds(obj for text in texts.values() for obj in yaml.load_all(text, Loader=SAFE_LOADER))


def _crd_kinds(objects: Iterable[Any]) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for obj in objects:
        if obj and obj.get("kind") == "CustomResourceDefinition":
            out[(obj["spec"]["group"], obj["spec"]["names"]["kind"])] = obj["metadata"]["name"]
    return out


def needs_crds(text: str, kinds: dict[tuple[str, str], str]) -> list[str]:
    """Names of the CRDs (from ``kinds``) whose kinds the objects in ``text`` use."""
    return _needs_crds(yaml.load_all(text, Loader=SAFE_LOADER), kinds)


def _needs_crds(objects: Iterable[Any], kinds: dict[tuple[str, str], str]) -> list[str]:
    names = {kinds[gk] for obj in objects if obj and (gk := _group_kind(obj)) in kinds}
    return sorted(names)


def helm_crd_kinds(plan: ClusterPlan) -> dict[tuple[str, str], str]:
    """(API group, kind) -> CRD name for the kinds whose CRDs a Helm release of ``apply.sh`` installs."""
    if not plan.training_operators.trainer:
        return {}
    return {
        (contract.TRAINER_GROUP, contract.TRAINJOB_KIND): contract.TRAINJOB_CRD_NAME,
        (contract.TRAINER_GROUP, contract.CLUSTER_TRAINING_RUNTIME_KIND): contract.CLUSTER_TRAINING_RUNTIME_CRD_NAME,
        (contract.TRAINER_GROUP, contract.TRAINING_RUNTIME_KIND): contract.TRAINING_RUNTIME_CRD_NAME,
    }


def karpenter_helm_commands(plan: ClusterPlan) -> list[str]:
    """The ``helm`` command line of ``apply.sh`` that installs Karpenter's controller when the plan has pools: the
    chart, version, release and namespace of the cluster stack's release, ``--skip-crds`` (the CRDs are
    ``26-karpenter-crd.yaml`` of the first step, kept when the release goes) and :data:`KARPENTER_VALUES`. It runs
    once the CRDs are Established and before ``after-crds/`` applies the EC2NodeClasses and NodePools: the
    controller's finalizers guard every pool object it sees (docs/design/karpenter.md). The AWS side it needs (the
    controller's role and its Pod Identity association, the interruption queue, the nodes' role) is the cluster
    stack's; the names the values hold are the plan's."""
    k = plan.karpenter
    if k is None:
        return []
    return [
        (f"helm upgrade --install {contract.KARPENTER_RELEASE} {k.chart} --version {k.version} "
         f"--namespace {k.namespace} --create-namespace --skip-crds --wait --timeout {HELM_TIMEOUT} "
         f"--values {KARPENTER_VALUES}")
    ]


def karpenter_values(plan: ClusterPlan) -> dict[str, Any]:
    """The Karpenter release's values: what the cluster stack passes (:meth:`KarpenterPlan.values
    <efa_stack.planning.karpenter.KarpenterPlan.values>` with the system node group's selector and replicas)."""
    from efa_stack.planning.karpenter import controller_replicas
    from k8s.scheduling import system_node_selector

    assert plan.karpenter is not None
    return plan.karpenter.values(
        replicas=controller_replicas(plan.system.min_size), node_selector=system_node_selector(),
    )


def helm_commands(plan: ClusterPlan) -> list[str]:
    """The ``helm`` command lines of ``apply.sh`` before its CRD waits: Kubeflow Trainer v2 when the plan installs
    it, with the chart, version, release, namespace and values the cluster stack uses (``--wait``: its webhooks
    answer before the runtimes and jobs are applied). The chart is an ``oci://`` reference, which Helm reads
    without extra settings from v3.8.0 (helm.sh, "Use OCI-based registries": "Beginning in Helm v3.8.0,
    OCI support is enabled by default"), hence the version the script asks for. Karpenter's release comes after
    the waits (:func:`karpenter_helm_commands`)."""
    if not plan.training_operators.trainer:
        return []
    from k8s.training_operators import TrainerHelmProps

    props = TrainerHelmProps()
    return [
        (f"helm upgrade --install {contract.TRAINER_RELEASE} {props.repository} --version {props.version} "
        f"--namespace {contract.TRAINER_NAMESPACE} --create-namespace --wait --timeout {HELM_TIMEOUT} "
        f"--values {TRAINER_VALUES}")
    ]


def helm_files(plan: ClusterPlan) -> dict[str, str]:
    """Relative path -> text of the Helm values files ``apply.sh`` passes."""
    out: dict[str, str] = {}
    if plan.training_operators.trainer:
        from k8s.training_operators import TrainerHelmProps

        header = f"# efa-stack: values of Helm release {contract.TRAINER_RELEASE} (Kubeflow Trainer v2); do not edit.\n"
        out[TRAINER_VALUES] = header + yaml.dump(TrainerHelmProps().values(), Dumper=_Dumper, sort_keys=False)
    if plan.karpenter is not None:
        header = f"# efa-stack: values of Helm release {contract.KARPENTER_RELEASE} (Karpenter); do not edit.\n"
        out[KARPENTER_VALUES] = header + yaml.dump(karpenter_values(plan), Dumper=_Dumper, sort_keys=False)
    return out


def needs_runtimes(objects: Iterable[Any]) -> bool:
    """Whether ``objects`` hold a TrainJob: the Trainer admits one only once its runtime exists."""
    return any(obj and _group_kind(obj) == (contract.TRAINER_GROUP, contract.TRAINJOB_KIND) for obj in objects)


def apply_script(plan: ClusterPlan, waits: list[str], second_step: bool | Sequence[str],
                 admitted_last: Sequence[str] = ()) -> str:
    """``apply.sh``: the first step, Helm, the CRD waits, then the objects of CRD kinds.

    ``second_step``: the ``after-crds/`` files (or just whether there are any). ``admitted_last``: those
    of them that hold TrainJobs: when there are any, the second step applies its files one by one, the
    runtimes first and the TrainJobs last through ``apply_until_admitted`` (kubeflow/trainer@v2.3.0
    pkg/runtime/core/clustertrainingruntime.go ``ValidateObjects`` refuses a TrainJob whose runtime its
    cached client cannot get: "specified clusterTrainingRuntime must be created before the TrainJob is
    created"). CRDs are waited for with ``wait_established`` (see :data:`WAIT_ESTABLISHED`)."""
    helm = helm_commands(plan)
    karpenter = karpenter_helm_commands(plan)
    lines = [
        "#!/bin/sh",
        f"# efa-stack: apply the Kubernetes objects of cluster {plan.name}; generated by k8s/dist.py, do not edit.",
        "# Objects whose kind a CRD here defines are in after-crds/, applied once the CRD is established:",
        "# kubectl cannot map a kind whose CRD the same invocation creates.",
    ]
    if helm:
        lines.append("# Kubeflow Trainer's CRDs come with its Helm release; the objects of those kinds wait for them too.")
    lines += [
        "set -eu",
        'cd "$(dirname "$0")"',
    ]
    if helm or karpenter:
        charts = [n for n, on in (("Kubeflow Trainer", helm), ("Karpenter", karpenter)) if on]
        what = f"{charts[0]} (an oci:// chart)" if len(charts) == 1 else f"{' and '.join(charts)} (oci:// charts)"
        lines.append(
            'command -v helm >/dev/null 2>&1 || { echo "efa-stack: helm 3.8 or later is needed to install '
            f'{what}; nothing was applied" >&2; exit 1; }}'
        )
    if waits:
        lines.append(WAIT_ESTABLISHED)
    if admitted_last:
        lines.append(APPLY_UNTIL_ADMITTED)
    lines.append("kubectl apply -f .")
    lines += helm
    lines += [f"wait_established {name}" for name in waits]
    lines += karpenter
    if second_step and plan.training_operators.pytorch_job_v1:
        # Training Operator v1's PyTorchJob webhook fails closed: PyTorchJobs wait for a serving controller.
        lines.append(
            f"kubectl rollout status deployment/{contract.TRAINING_OPERATOR_NAME} "
            f"-n {contract.TRAINING_OPERATOR_NAMESPACE} --timeout={ROLLOUT_TIMEOUT}"
        )
    if second_step and plan.kueue is not None:
        # Kueue's webhooks (its queues, MPIJobs, Jobs, TrainJobs) fail closed: wait for a serving controller.
        lines.append(
            f"kubectl rollout status deployment/{contract.KUEUE_CONTROLLER} "
            f"-n {contract.KUEUE_NAMESPACE} --timeout={ROLLOUT_TIMEOUT}"
        )
    if second_step and admitted_last:
        assert not isinstance(second_step, bool), "admitted_last needs the after-crds/ file names"
        lines += [f"kubectl apply -f {f}" for f in second_step if f not in admitted_last]
        lines += [f"apply_until_admitted {f}" for f in second_step if f in admitted_last]
    elif second_step:
        lines.append(f"kubectl apply -f {AFTER_CRDS_DIR}/")
    return "\n".join(lines) + "\n"


def dist_files(plan: ClusterPlan, charts: Sequence[cdk8s.Chart] | None = None) -> dict[str, str]:
    """Relative path -> text of everything :func:`write_dist` writes, manifests in apply order, then
    Helm values and ``apply.sh``. Charts that use a kind defined by a CRD of the output (or of a Helm
    release ``apply.sh`` installs) go under ``after-crds/``. ``charts`` as for :func:`render_dist`."""
    rendered = _rendered(plan, charts)  # the objects as rendered: no need to parse the YAML back
    kinds = {**_crd_kinds(obj for objects, _ in rendered.values() for obj in objects), **helm_crd_kinds(plan)}
    first: dict[str, str] = {}
    second: dict[str, str] = {}
    admitted_last: list[str] = []
    waits: set[str] = set()
    for name, (objects, text) in rendered.items():
        needed = _needs_crds(objects, kinds)
        if needed:
            second[f"{AFTER_CRDS_DIR}/{name}"] = text
            waits.update(needed)
            if needs_runtimes(objects):
                admitted_last.append(f"{AFTER_CRDS_DIR}/{name}")
        else:
            first[name] = text
    script = apply_script(plan, sorted(waits), list(second), admitted_last)
    return {**first, **second, **helm_files(plan), APPLY_SCRIPT: script}


def write_dist(plan: ClusterPlan, outdir: Path, charts: Sequence[cdk8s.Chart] | None = None) -> list[Path]:
    """Write the manifests (and ``apply.sh``) into ``outdir``; return the manifest paths in apply order.
    ``charts`` as for :func:`render_dist` (app.py passes the charts the cluster stack applies).

    Chart files from an earlier run that this plan no longer produces (``NN-name.yaml`` in
    ``outdir`` or ``outdir/after-crds``, Helm values in ``outdir/helm``) are removed, so a dropped or moved
    chart does not linger;
    other files are left alone.
    """
    outdir = Path(outdir)
    files = dist_files(plan, charts)
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
