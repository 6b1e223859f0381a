"""What ``k8s/dist.py`` writes for ``kubectl`` and ``helm``: the layout of ``dist/<cluster>/`` and the commands of
``apply.sh`` (that its order realises the rollout is tests/test_rollout.py; that the real API server takes it,
tests/test_apiserver.py).

kubectl maps every object's kind to an API resource before applying it: a kind served by a CRD that the same
invocation creates is unknown to it ("no matches for kind ... ensure CRDs are installed first"), so the first
directory may hold no object of a kind a CRD of the output, or of a Helm release, defines. ``kubectl apply -f DIR``
reads the .yaml/.yml/.json files directly in DIR.
"""

from __future__ import annotations

import functools
import json
import shlex

import pytest
import yaml

from efa_stack import contract
from k8s.dist import AFTER_CRDS_DIR, APPLY_SCRIPT, dist_dir, release_values_file, write_dist
from k8s.rollout import InstallRelease, group_kind
from k8s.training_operators import TrainerHelmProps
from tests.support import LOADER, built, built_text

SPECS = ("default", "tas-p5", "training-p5", "karpenter-p5", "trn2")


def _crd_kinds(b) -> set[tuple[str, str]]:
    """Every (group, kind) a CRD of the output or of a Helm release defines."""
    kinds = {(o["spec"]["group"], o["spec"]["names"]["kind"]) for _, o in b.objects() if o["kind"] == "CustomResourceDefinition"}
    if b.plan.training_operators.trainer:
        kinds |= {(contract.TRAINER_GROUP, k) for k in (contract.TRAINJOB_KIND, contract.CLUSTER_TRAINING_RUNTIME_KIND,
                                                           contract.TRAINING_RUNTIME_KIND)}
    return kinds


@pytest.mark.parametrize("stem", SPECS)
def test_documented_first_command_alone_never_fails(stem, tmp_path):
    # GIVEN dist/ of a shipped spec WHEN `kubectl apply -f dist/<cluster>/` runs on a fresh cluster by hand
    b = built(stem)
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts, b.rollout)
    kinds = _crd_kinds(b)
    first = [o for f in sorted(out.glob("*.yaml")) for o in yaml.load_all(f.read_text(), Loader=LOADER) if o]
    # THEN it holds no object of a kind a CRD of the same output (or a Helm release) defines
    assert first and not [group_kind(o) for o in first if group_kind(o) in kinds]
    # AND every object of the output is in exactly one file
    later = [o for f in sorted((out / AFTER_CRDS_DIR).glob("*.yaml")) if (out / AFTER_CRDS_DIR).is_dir()
             for o in yaml.load_all(f.read_text(), Loader=LOADER) if o]
    canonical = functools.partial(json.dumps, sort_keys=True)
    assert sorted(map(canonical, first + later)) == sorted(canonical(o) for _, o in b.objects())


def test_trainium_cluster_has_a_single_step(tmp_path):
    b = built("trn2")
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts)
    assert not (out / AFTER_CRDS_DIR).exists()
    commands = [ln for ln in (out / APPLY_SCRIPT).read_text().splitlines() if ln.startswith("kubectl")]
    assert commands == ["kubectl apply -f ."]


def test_the_trainer_release_is_installed_with_the_stacks_chart_and_values(tmp_path):
    # GIVEN a spec with a TrainJob (Kubeflow Trainer v2 comes from its Helm chart, not from a chart here)
    b = built("training-p5")
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts, b.rollout)
    lines = (out / APPLY_SCRIPT).read_text().splitlines()
    (helm,) = [shlex.split(ln) for ln in lines if ln.startswith("helm ")]
    props = TrainerHelmProps()
    # THEN helm installs the pinned chart with the values the cluster stack passes, waiting for the controller
    assert helm[3:7] == [contract.TRAINER_RELEASE, props.repository, "--version", props.version]
    assert helm[helm.index("--namespace") + 1] == contract.TRAINER_NAMESPACE and "--wait" in helm
    (release,) = b.rollout.of_type(InstallRelease)
    values = helm[helm.index("--values") + 1]
    assert values == release_values_file(release.release)
    assert yaml.safe_load((out / values).read_text()) == props.values()
    # AND the runtimes and jobs are in the second step, the TrainJobs applied last and again while refused
    assert (out / AFTER_CRDS_DIR / "45-training-runtimes.yaml").is_file()
    assert lines[-1] == f"apply_until_admitted {AFTER_CRDS_DIR}/50-training-jobs.yaml"
    assert lines.index(f"kubectl apply -f {AFTER_CRDS_DIR}/45-training-runtimes.yaml") < len(lines) - 1


def test_no_helm_without_a_release(tmp_path):
    b = built("default")
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts)
    assert "helm" not in (out / APPLY_SCRIPT).read_text() and not (out / "helm").exists()


def test_pytorchjobs_wait_for_the_v1_operator_and_its_webhook_ca(tmp_path):
    # GIVEN a PyTorchJob (Training Operator v1's webhook fails closed until its controller has written its CA)
    from tests.test_k8s_training import job_spec

    b = built_text(job_spec(kind="pytorchjob"))
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts)
    lines = (out / APPLY_SCRIPT).read_text().splitlines()
    rollout = lines.index(f"kubectl rollout status deployment/{contract.TRAINING_OPERATOR_NAME} "
                          f"-n {contract.TRAINING_OPERATOR_NAMESPACE} --timeout=300s")
    ca = next(i for i, ln in enumerate(lines) if ln.startswith("wait_for_value validatingwebhookconfiguration "))
    # THEN the jobs come after the controller rolled out and wrote its CA
    assert rollout < ca < lines.index(f"kubectl apply -f {AFTER_CRDS_DIR}/")
    assert "'{.webhooks[0].clientConfig.caBundle}'" in lines[ca]
