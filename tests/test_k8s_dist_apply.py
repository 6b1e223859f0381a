"""``kubectl apply`` of what ``k8s/dist.py`` writes works on a fresh cluster, first time.

kubectl maps every object's kind to an API resource before applying it; a kind served by a CRD that
the same invocation creates is unknown to it and fails with "resource mapping not found for name
... no matches for kind ... ensure CRDs are installed first" (the error kubectl prints; e.g.
servicebinding/runtime issue #159, fixed there by two apply invocations). ``kubectl apply -f DIR``
reads the .yaml/.yml/.json files directly in DIR; ``-R`` would recurse. The simulator below keeps
exactly that model: a fresh cluster knows the built-in kinds, learns a CRD's kind only once a
``wait_established NAME`` (apply.sh's poll for Established "True") of an earlier step returned. It also
keeps the Trainer's TrainJob webhook: a TrainJob is refused unless its ClusterTrainingRuntime was applied
by an earlier invocation (kubeflow/trainer@v2.3.0 pkg/runtime/core/clustertrainingruntime.go
``ValidateObjects`` gets the runtime through the manager's cache).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from efa_stack import contract
from k8s.dist import (
    AFTER_CRDS_DIR,
    APPLY_SCRIPT,
    TRAINER_VALUES,
    crd_kinds,
    dist_dir,
    helm_crd_kinds,
    render_dist,
    write_dist,
)
from k8s.training_operators import TrainerHelmProps
from tests.support import LOADER
from tests.test_k8s_support import GOLDEN_SPECS, built


class KubectlError(Exception):
    pass


def _group_kind(obj: dict) -> tuple[str, str]:
    api = obj["apiVersion"]
    return (api.rsplit("/", 1)[0] if "/" in api else "", obj["kind"])


def _files(directory: Path) -> list[Path]:
    if directory.is_file():
        return [directory]
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in {".yaml", ".yml", ".json"})


"""libyaml's safe loader where PyYAML has it (the Kueue and Karpenter charts are large), else PyYAML's own."""


class FreshCluster:
    """What matters of a fresh API server and of kubectl for ordering: known kinds and CRDs."""

    def __init__(self, crd_defined: dict[tuple[str, str], str]):
        self.crd_defined = crd_defined
        self.crds: set[str] = set()
        self.established: set[str] = set()
        self.applied: list[tuple[str, str]] = []
        self.rolled_out: list[str] = []

    def apply(self, directory: Path) -> None:
        objs = [o for f in _files(directory) for o in yaml.load_all(f.read_text(), Loader=LOADER) if o]
        for obj in objs:  # kubectl maps every object of the invocation
            gk = _group_kind(obj)
            if gk in self.crd_defined and self.crd_defined[gk] not in self.established:
                raise KubectlError(
                    f'resource mapping not found for name: "{obj["metadata"]["name"]}": no matches for kind '
                    f'"{gk[1]}" in version "{obj["apiVersion"]}"; ensure CRDs are installed first'
                )
        earlier = set(self.applied)
        for obj in objs:
            if obj["kind"] == contract.TRAINJOB_KIND:
                runtime = obj["spec"]["runtimeRef"]["name"]
                if (contract.CLUSTER_TRAINING_RUNTIME_KIND, runtime) not in earlier:
                    raise KubectlError(
                        f'admission webhook "validate.trainjob.trainer.kubeflow.org" denied the request: '
                        f'spec.RuntimeRef: clustertrainingruntimes "{runtime}" not found: specified '
                        "clusterTrainingRuntime must be created before the TrainJob is created"
                    )
        for obj in objs:
            self.applied.append((obj["kind"], obj["metadata"]["name"]))
            if obj["kind"] == "CustomResourceDefinition":
                self.crds.add(obj["metadata"]["name"])

    def wait_established(self, name: str) -> None:
        if name not in self.crds:
            raise KubectlError(f'customresourcedefinitions.apiextensions.k8s.io "{name}" not found')
        self.established.add(name)


# What `helm upgrade --install` of the Kubeflow Trainer chart creates (kubeflow/trainer@v2.3.0
# charts/kubeflow-trainer/crds/: the TrainJob, TrainingRuntime and ClusterTrainingRuntime CRDs).
HELM_CRDS = {
    contract.TRAINER_RELEASE: {
        contract.TRAINJOB_CRD_NAME, contract.TRAINING_RUNTIME_CRD_NAME, contract.CLUSTER_TRAINING_RUNTIME_CRD_NAME,
    },
    # installed with --skip-crds: its CRDs are the karpenter-crd manifest's, applied and waited for before it
    contract.KARPENTER_RELEASE: set(),
}


def run_script(script: Path, cluster: FreshCluster, helm_releases: list[list[str]] | None = None) -> None:
    """Run the kubectl and helm lines of ``apply.sh`` (relative to its directory) against ``cluster``;
    the script's own functions (``wait_established``, ``apply_until_admitted``) are modelled, not read."""
    in_function = False
    for line in script.read_text().splitlines():
        if re.fullmatch(r"[a-z_]+\(\) \{", line):
            in_function = True
        if in_function:
            in_function = line != "}"
            continue
        words = shlex.split(line, comments=True)
        if words[:1] == ["wait_established"]:
            (name,) = words[1:]
            cluster.wait_established(name)
            continue
        if words[:1] == ["apply_until_admitted"]:
            (path,) = words[1:]
            cluster.apply(script.parent / path)  # retries do not help a TrainJob whose runtime was never applied
            continue
        if words[:1] == ["helm"]:
            assert words[1:3] == ["upgrade", "--install"], line
            values = words[words.index("--values") + 1]
            assert (script.parent / values).is_file(), line
            cluster.crds |= HELM_CRDS[words[3]]
            if helm_releases is not None:
                helm_releases.append(words)
            continue
        if not words or words[0] != "kubectl":
            continue
        if words[1] == "apply":
            assert words[2] == "-f" and "-R" not in words and "--recursive" not in words, line
            cluster.apply(script.parent / words[3])
        elif words[1:3] == ["rollout", "status"]:
            kind, name = words[3].split("/")
            assert kind == "deployment" and ("Deployment", name) in cluster.applied, line
            cluster.rolled_out.append(name)
        else:
            raise AssertionError(f"unexpected kubectl command in {script.name}: {line}")


def _objects(texts: dict[str, str]) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for t in texts.values() for o in yaml.load_all(t, Loader=LOADER) if o]


@pytest.mark.parametrize("stem", GOLDEN_SPECS)
def test_apply_script_applies_everything_first_time_on_a_fresh_cluster(stem, tmp_path):
    # GIVEN the files dist writes WHEN apply.sh's steps run against a fresh cluster
    b = built(stem)
    plan = b.plan
    out = dist_dir(plan, tmp_path)
    write_dist(plan, out, b.charts)
    charts = render_dist(plan, b.charts)
    cluster = FreshCluster(crd_kinds(charts))
    run_script(out / APPLY_SCRIPT, cluster)
    # THEN every object of every chart was applied, exactly once
    assert sorted(cluster.applied) == sorted(_objects(charts))


@pytest.mark.parametrize("stem", GOLDEN_SPECS)
def test_documented_first_command_alone_never_fails(stem, tmp_path):
    # `kubectl apply -f dist/<cluster>/` by hand: it must not hold an object of a CRD it creates
    b = built(stem)
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts)
    FreshCluster(crd_kinds(render_dist(b.plan, b.charts))).apply(out)


def test_mpijob_waits_for_its_crd():
    b = built("default")
    files = render_dist(b.plan, b.charts)
    assert crd_kinds(files) == {("kubeflow.org", "MPIJob"): "mpijobs.kubeflow.org"}


def test_fails_one_invocation_with_the_crd_and_its_mpijob(tmp_path):
    # the simulator is not vacuous: the flat layout (all charts in one directory) fails
    b = built("default")
    charts = render_dist(b.plan, b.charts)
    for name, text in charts.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(KubectlError, match='no matches for kind "MPIJob"'):
        FreshCluster(crd_kinds(charts)).apply(tmp_path)


def test_trainium_cluster_has_a_single_step(tmp_path):
    b = built("trn2")
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts)
    assert not (out / AFTER_CRDS_DIR).exists()
    commands = [ln for ln in (out / APPLY_SCRIPT).read_text().splitlines() if ln.startswith("kubectl")]
    assert commands == ["kubectl apply -f ."]


def test_training_jobs_wait_for_the_crds_the_trainer_helm_release_installs(tmp_path):
    # GIVEN a spec with a TrainJob (Kubeflow Trainer v2 comes from its Helm chart, not from a chart here)
    b = built("training-p5")
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts)
    charts = render_dist(b.plan, b.charts)
    kinds = {**crd_kinds(charts), **helm_crd_kinds(b.plan)}
    # WHEN apply.sh runs against a fresh cluster
    releases: list[list[str]] = []
    cluster = FreshCluster(kinds)
    run_script(out / APPLY_SCRIPT, cluster, releases)
    # THEN the runtimes and jobs were applied after helm installed their CRDs, and every object once
    assert sorted(cluster.applied) == sorted(_objects(charts))
    assert (out / AFTER_CRDS_DIR / "45-training-runtimes.yaml").is_file()
    assert (out / AFTER_CRDS_DIR / "50-training-jobs.yaml").is_file()
    # AND helm installed the pinned chart with the values the cluster stack passes
    (words,) = releases
    props = TrainerHelmProps()
    assert words[3:7] == [contract.TRAINER_RELEASE, props.repository, "--version", props.version]
    assert words[words.index("--namespace") + 1] == contract.TRAINER_NAMESPACE and "--wait" in words
    assert yaml.safe_load((out / TRAINER_VALUES).read_text()) == props.values()


def test_fails_training_jobs_without_the_trainer_release(tmp_path):
    # the simulator is not vacuous: without the helm step the TrainJob's kind is unknown
    b = built("training-p5")
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts)
    cluster = FreshCluster(helm_crd_kinds(b.plan))
    cluster.apply(out)
    with pytest.raises(KubectlError, match='no matches for kind "ClusterTrainingRuntime"'):
        cluster.apply(out / AFTER_CRDS_DIR)


def test_no_helm_without_the_trainer(tmp_path):
    b = built("default")
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts)
    assert "helm" not in (out / APPLY_SCRIPT).read_text() and not (out / "helm").exists()


def test_pytorchjobs_wait_for_the_v1_operator_to_roll_out(tmp_path):
    # GIVEN a PyTorchJob (Training Operator v1's webhook fails closed until its controller serves)
    from tests.test_k8s_support import built_text
    from tests.test_k8s_training import job_spec

    b = built_text(job_spec(kind="pytorchjob"))
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts)
    charts = render_dist(b.plan, b.charts)
    cluster = FreshCluster(crd_kinds(charts))
    run_script(out / APPLY_SCRIPT, cluster)
    # THEN the controller rolled out before the second step, and every object was applied once
    assert cluster.rolled_out == [contract.TRAINING_OPERATOR_NAME]
    assert sorted(cluster.applied) == sorted(_objects(charts))
    lines = (out / APPLY_SCRIPT).read_text().splitlines()
    assert lines.index(f"kubectl apply -f {AFTER_CRDS_DIR}/") > next(
        i for i, ln in enumerate(lines) if ln.startswith("kubectl rollout")
    )


def test_fails_trainjobs_applied_with_their_runtimes_in_one_invocation(tmp_path):
    # the webhook model is not vacuous: the runtimes and TrainJobs of after-crds/ in one apply are refused
    b = built("training-p5")
    out = dist_dir(b.plan, tmp_path)
    write_dist(b.plan, out, b.charts)
    cluster = FreshCluster({})
    with pytest.raises(KubectlError, match="must be created before the TrainJob"):
        cluster.apply(out / AFTER_CRDS_DIR)
