"""The planner in stages (efa_stack/planning/plan.py): every stage runs whatever an earlier one found, a stage that
cannot run says what it could not check, and the job plans carry what their charts only read."""

from __future__ import annotations

import ast
import inspect

import pytest

from efa_stack.console import spec_error_document
from efa_stack.planning import plan as planner
from efa_stack.planning.nccl import WORKER_WAIT_SECONDS
from efa_stack.planning.plan import plan_from_text
from efa_stack.planning.scheduling import KARPENTER_REGISTRATION_SECONDS, NODE_START_SECONDS
from efa_stack.spec.errors import SpecError
from tests.support import ROOT, plan_of, problems_of, spec_text

KUEUE = "scheduling:\n  kueue:\n    enabled: true\n"
POOL = """
karpenterNodePools:
  - name: elastic
    instanceType: p5.48xlarge
    maxNodes: 2
    availabilityZone: us-west-2a
"""
TRAINING = """
trainingJobs:
  - name: llm
    nodeGroup: elastic
    image: nvcr.io/nvidia/pytorch:25.01-py3
    command: [torchrun, /workspace/train.py]
    nnodes: 2
"""


def test_a_kueue_problem_and_another_problem_come_in_one_run():
    # GIVEN a Kueue timeout shorter than the image pull AND a node group label only efa-stack may set
    text = spec_text(extra=KUEUE + "    waitForPodsReady:\n      timeoutSeconds: 600\n      imageSizeGB: 30\n").replace(
        "    efaEnabled: true\n", "    efaEnabled: true\n    labels: {efa-stack.io/x: y}\n")
    # WHEN planned THEN both are reported in the same run
    fields = [p.field for p in problems_of(text)]
    assert "scheduling.kueue.waitForPodsReady.timeoutSeconds" in fields
    assert "managedNodeGroups[0].labels" in fields


def test_a_stage_without_its_input_says_what_it_could_not_check():
    # GIVEN Kueue on AND a system node group of an unknown type (Kueue's launcher flavor is that group)
    text = spec_text(extra=KUEUE + "systemNodeGroup:\n  instanceType: m7i.nonesuch\n")
    with pytest.raises(SpecError) as info:
        plan_of(text)
    # THEN the type's problem is reported, and that Kueue and the address plan were not checked
    assert [p.field for p in info.value.problems] == ["systemNodeGroup.instanceType"]
    assert [u.split(":")[0] for u in info.value.unchecked] == ["scheduling.kueue", "vpc.cidr"]
    assert "not checked until those are fixed: scheduling.kueue" in info.value.render()
    # AND the same when the file also has a badly formed field (its planning runs on the rest of the file)
    with pytest.raises(SpecError) as info:
        plan_from_text(text + "vpc:\n  podCIDR: not-a-cidr-at-all-x\n")
    assert "vpc.podCIDR" in [p.field for p in info.value.problems]
    assert [u.split(":")[0] for u in info.value.unchecked] == ["scheduling.kueue", "vpc.cidr"]
    assert spec_error_document(info.value)["unchecked"] == list(info.value.unchecked)


def test_job_plans_carry_their_queue_binding_do_not_disrupt_and_worker_wait():
    # GIVEN Kueue, a Karpenter pool and the NCCL-tests and a training job on it
    plan = plan_of(spec_text(extra=KUEUE + POOL + "ncclTest:\n  nodeGroup: elastic\n" + TRAINING))
    job, (training,) = plan.nccl_job, plan.training_jobs
    # THEN each job plan holds Kueue's binding of the pool, do-not-disrupt, and (NCCL) the launcher's wait
    assert job.queue == plan.kueue.binding("elastic") and training.queue == job.queue
    assert job.do_not_disrupt and training.do_not_disrupt
    assert job.worker_wait_seconds == max(
        WORKER_WAIT_SECONDS + KARPENTER_REGISTRATION_SECONDS + NODE_START_SECONDS, plan.kueue.wait.timeout_seconds,
    )
    # AND on a managed node group without Kueue: no queue, no do-not-disrupt, the image-pull allowance
    plain = plan_of(spec_text()).nccl_job
    assert (plain.queue, plain.do_not_disrupt, plain.worker_wait_seconds) == (None, False, WORKER_WAIT_SECONDS)


def test_the_planner_is_a_short_sequence_of_stages():
    # build_plan runs the stages and assembles; no planning function is a funnel again
    source = inspect.getsource(planner.build_plan)
    assert len(source.splitlines()) <= 60
    long = []
    for path in sorted((ROOT / "efa_stack" / "planning").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 120:
                long.append(f"{path.name}:{node.name}")
    assert long == []
    assert [s.__name__ for s in planner.STAGES][:3] == ["_cluster_stage", "_network_stage", "_node_stage"]
