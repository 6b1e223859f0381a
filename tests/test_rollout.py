"""The rollout graph (k8s/rollout.py): its rules on the charts of the shipped specs, and, for every shipped spec,
that ``apply.sh`` and the synthesized template both realise it (the API server test and the rehearsal run it)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from efa_stack import contract
from k8s.components import (
    BY_ID,
    KARPENTER,
    KARPENTER_POOLS,
    KUBEFLOW_TRAINER,
    KUEUE,
    KUEUE_QUEUES,
    MPI_OPERATOR,
    MPI_OPERATOR_CRD,
    NCCL_TESTS,
    TRAINING_JOBS,
    TRAINING_RUNTIMES,
)
from k8s.dist import AFTER_CRDS_DIR, APPLY_SCRIPT, dist_files, first_step
from k8s.rollout import (
    NODES,
    ApplyChart,
    InstallRelease,
    Nodes,
    Rollout,
    WaitAvailable,
    WaitEstablished,
    WaitValue,
    apply_id,
    available_id,
    established_id,
    group_kind,
    release_id,
)
from tests.support import CLUSTERS, built, built_text, synth_spec

SHIPPED = sorted(p.stem for p in CLUSTERS.glob("*.yaml"))


# --- the rules, on the charts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stem", SHIPPED)
def test_every_object_of_a_crd_kind_follows_the_wait_for_its_crd(stem):
    # GIVEN a shipped spec's rollout WHEN a chart applies objects of a kind a CRD of the rollout defines
    b = built(stem)
    r = b.rollout
    waits = {s.crd: s.id for s in r.of_type(WaitEstablished)}
    kinds = {(o["spec"]["group"], o["spec"]["names"]["kind"]): o["metadata"]["name"]
             for _, o in b.objects() if o["kind"] == "CustomResourceDefinition"}
    for step in r.of_type(ApplyChart):
        used = {kinds[gk] for o in b.manifests[step.chart] if (gk := group_kind(o)) in kinds}
        # THEN the chart follows the wait until that CRD is Established, which follows the chart that creates it
        for crd in used:
            assert waits[crd] in step.after, (step.id, crd)
            (creator,) = r[waits[crd]].after
            assert crd in {o["metadata"]["name"] for o in b.manifests[r.apply_step(creator.split("/", 1)[1]).chart]}


@pytest.mark.parametrize("stem", SHIPPED)
def test_a_controllers_wait_follows_its_nodes_and_what_it_serves_follows_the_wait(stem):
    r = built(stem).rollout
    for wait in r.of_type(WaitAvailable):
        controller = BY_ID[wait.component].controller
        assert controller is not None and wait.construct_id == controller.wait_id
        assert (wait.deployment, wait.namespace) == (controller.deployment, controller.namespace)
        made_by = release_id(wait.component) if BY_ID[wait.component].helm else apply_id(wait.component)
        assert {made_by, NODES} <= set(wait.after)
        assert {established_id(c) for c in controller.crds} <= set(wait.after)
        last = next((s.id for s in r.of_type(WaitValue) if wait.id in s.after), wait.id)
        for served in controller.serves:
            if apply_id(served) in r:
                assert last in r[apply_id(served)].after, (served, last)


def test_the_default_spec_rollout():
    # GIVEN clusters/default.yaml (device plugins, the MPI operator, the NCCL test) WHEN its rollout is made
    r = built("default").rollout
    # THEN no controller wait, no Helm release: the charts in order, the MPIJob after its CRD is Established
    assert [s.id for s in r.steps] == [
        apply_id("efa-device-plugin"), apply_id("nvidia-device-plugin"), apply_id(MPI_OPERATOR_CRD),
        established_id(contract.MPIJOB_CRD_NAME), apply_id(MPI_OPERATOR), apply_id(NCCL_TESTS),
    ]
    assert r[apply_id(MPI_OPERATOR)].after == (apply_id(MPI_OPERATOR_CRD),)
    assert set(r[apply_id(NCCL_TESTS)].after) == {
        apply_id(MPI_OPERATOR), apply_id("nvidia-device-plugin"), apply_id("efa-device-plugin"),
        established_id(contract.MPIJOB_CRD_NAME),
    }
    assert r[established_id(contract.MPIJOB_CRD_NAME)].construct_id == "CrdEstablished"


def test_kueue_waits_for_its_workload_crd_and_the_queues_for_kueue():
    r = built("tas-p5").rollout
    kueue = r[available_id(KUEUE)]
    assert established_id(f"workloads.{contract.KUEUE_GROUP}") in kueue.after
    assert available_id(KUEUE) in r[apply_id(KUEUE_QUEUES)].after
    # the queued jobs name a LocalQueue: they follow the queues, so the controller that admits them
    for chart in (NCCL_TESTS, TRAINING_JOBS):
        assert available_id(KUEUE) in r.ancestors(apply_id(chart))


def test_the_trainer_release_precedes_the_waits_for_its_crds_and_the_runtimes_and_jobs():
    # GIVEN a TrainJob: Kubeflow Trainer v2 is a Helm release with its CRDs
    r = built("training-p5").rollout
    (release,) = r.of_type(InstallRelease)
    assert release.component == KUBEFLOW_TRAINER and release.release is not None and release.release.retain
    from k8s.training_operators import TrainerHelmProps

    assert dict(release.release.values) == TrainerHelmProps().values()
    runtimes, jobs = r[apply_id(TRAINING_RUNTIMES)], r[apply_id(TRAINING_JOBS)]
    assert established_id(contract.CLUSTER_TRAINING_RUNTIME_CRD_NAME) in runtimes.after
    assert established_id(contract.TRAINJOB_CRD_NAME) in jobs.after
    assert r[established_id(contract.TRAINJOB_CRD_NAME)].after == (release.id,)
    assert {available_id(KUBEFLOW_TRAINER), apply_id(TRAINING_RUNTIMES)} <= set(jobs.after)
    # THEN the TrainJobs are applied again while the Trainer's webhook has not yet seen their runtime
    assert jobs.retry_admission and not runtimes.retry_admission


def test_karpenter_release_follows_the_pool_crds_and_the_pools_follow_the_controller():
    r = built("karpenter-p5").rollout
    release = r[release_id(KARPENTER)]
    assert isinstance(release, InstallRelease) and release.release is not None and release.release.skip_crds
    from k8s.karpenter import POOL_KIND_CRDS

    assert set(release.after) == {established_id(c) for c in POOL_KIND_CRDS}
    assert {release.id, available_id(KARPENTER)} <= set(r[apply_id(KARPENTER_POOLS)].after)
    assert r.apply_step("karpenter-crd").retain


def test_pytorchjobs_follow_the_training_operators_webhook_ca():
    from tests.test_k8s_training import job_spec

    r = built_text(job_spec(kind="pytorchjob")).rollout
    (ca,) = r.of_type(WaitValue)
    assert ca.after == (available_id("training-operator"),)
    assert ca.id in r[apply_id(TRAINING_JOBS)].after
    assert established_id(contract.PYTORCHJOB_CRD_NAME) in r[available_id("training-operator")].after


def test_fails_a_step_that_follows_a_later_step():
    a = ApplyChart("apply/a", "a", ("apply/b",), chart="a")
    b = ApplyChart("apply/b", "b", chart="b")
    with pytest.raises(ValueError, match="apply/a follows"):
        Rollout((a, b))
    assert Rollout((b, a)).violations(["apply/a", "apply/b"]) == ["apply/a is performed before apply/b, which it follows"]
    assert Rollout((b, a)).violations(["apply/b"]) == ["apply/a is never performed"]


def test_describe_lists_every_step_with_what_it_follows():
    r = built("tas-p5").rollout
    text = r.describe().splitlines()
    assert len(text) == len(r.steps)
    assert "apply/kueue-queues: apply chart kueue-queues  (after " in next(t for t in text if "kueue-queues" in t)


# --- apply.sh realises it ---------------------------------------------------------------------------------------


def script_steps(rollout: Rollout, script: str) -> list[str]:
    """The step ids ``apply.sh`` performs, in its order (its own function definitions skipped)."""
    first = first_step(rollout)
    later = [s.chart for s in rollout.of_type(ApplyChart) if s.chart not in first]
    by_deployment = {(s.namespace, s.deployment): s.id for s in rollout.of_type(WaitAvailable)}
    by_release = {s.release.name: s for s in rollout.of_type(InstallRelease) if s.release}
    done = [s.id for s in rollout.of_type(Nodes)]  # the script runs against a cluster with nodes
    body = script.split("\nkubectl apply -f .\n", 1)[1].splitlines()
    done += [apply_id(c) for c in first]
    confirmed: list[str] = []  # controllers helm --wait saw available, counted once what they follow is done too
    for line in body:
        words = shlex.split(line)
        if words[:3] == ["helm", "upgrade", "--install"]:
            step = by_release[words[3]]
            assert "--wait" in words  # returns once the release's controller is available (if it has one)
            done.append(step.id)
            if available_id(step.component) in rollout:
                confirmed.append(available_id(step.component))
        elif words[0] == "wait_established":
            done.append(established_id(words[1]))
        elif words[:3] == ["kubectl", "rollout", "status"]:
            done.append(by_deployment[(words[words.index("-n") + 1], words[3].split("/", 1)[1])])
        elif words[0] == "wait_for_value":
            done.append(next(s.id for s in rollout.of_type(WaitValue) if s.name == words[2]))
        elif words[:3] == ["kubectl", "apply", "-f"] and words[3] == f"{AFTER_CRDS_DIR}/":
            done += [apply_id(c) for c in later]  # kubectl applies a directory's files in name order
        elif words[:3] == ["kubectl", "apply", "-f"] or words[0] == "apply_until_admitted":
            done.append(apply_id(Path(words[-1]).stem.split("-", 1)[1]))
        else:
            raise AssertionError(f"apply.sh line the test does not know: {line}")
        for wait in [w for w in confirmed if all(a in done for a in rollout[w].after)]:
            done.append(wait)
            confirmed.remove(wait)
    return done


@pytest.mark.parametrize("stem", SHIPPED)
def test_apply_script_realises_the_rollout(stem):
    # GIVEN a shipped spec's rollout and the apply.sh dist writes for it
    b = built(stem)
    files = dist_files(b.plan, b.charts, b.rollout)
    # WHEN its commands are read as steps THEN every step is performed, each after every step it follows
    assert b.rollout.violations(script_steps(b.rollout, files[APPLY_SCRIPT])) == []
    # AND the first command (kubectl apply -f .) holds exactly the charts that follow no wait and no release
    first = first_step(b.rollout)
    assert sorted(k for k in files if k.endswith(".yaml") and "/" not in k) == sorted(
        f"{BY_ID[c].order:02d}-{c}.yaml" for c in first)


def test_fails_a_script_that_applies_the_queues_before_kueue_is_available():
    b = built("tas-p5")
    script = dist_files(b.plan, b.charts, b.rollout)[APPLY_SCRIPT]
    lines = script.splitlines()
    rollout_line = next(i for i, ln in enumerate(lines) if ln.startswith("kubectl rollout status"))
    queues_line = next(i for i, ln in enumerate(lines) if "38-kueue-queues" in ln)
    lines[rollout_line], lines[queues_line] = lines[queues_line], lines[rollout_line]
    problems = b.rollout.violations(script_steps(b.rollout, "\n".join(lines)))
    assert "apply/kueue-queues is performed before available/kueue, which it follows" in problems


# --- the template realises it -------------------------------------------------------------------------------------


def _logical_ids(stack, constructs) -> set[str]:
    from aws_cdk import CfnElement

    out = set()
    for c in constructs:
        child = getattr(c, "nodegroup", c)
        while not isinstance(child, CfnElement):
            child = child.node.default_child
        out.add(stack.get_logical_id(child))
    return out


@pytest.mark.parametrize("spec", [f"{s}.yaml" for s in SHIPPED])
def test_template_realises_the_rollout(spec):
    # GIVEN a shipped spec synthesized
    s = synth_spec(str(CLUSTERS / spec))
    stack = s.stacks.cluster
    k = stack.kubernetes
    resources = s.template("cluster")["Resources"]
    # WHEN each step's resource is found THEN it depends on the resources of every step it follows
    for step in k.rollout.steps:
        if isinstance(step, Nodes):
            continue
        (own,) = _logical_ids(stack, k.constructs[step.id])
        depends = resources[own].get("DependsOn", [])
        for before in step.after:
            missing = _logical_ids(stack, k.constructs[before]) - set(depends)
            assert not missing, (step.id, before, missing)
    # AND a controller's wait follows the system node group its pods run on
    system = {lid for lid, r in resources.items() if r["Type"] == "AWS::EKS::Nodegroup"
              and r["Properties"]["Labels"].get(contract.LABEL_NODE_GROUP) == contract.SYSTEM_NODE_GROUP}
    for wait in k.rollout.of_type(WaitAvailable):
        (own,) = _logical_ids(stack, k.constructs[wait.id])
        assert system <= set(resources[own]["DependsOn"])
