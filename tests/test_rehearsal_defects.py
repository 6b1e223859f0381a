"""The defects a deploy review found in what efa-stack renders for Kueue, each shown by a scenario on the rehearsal's
control plane (efa_stack/rehearsal/) that failed before its fix; the failure seen then is in each docstring ("before
the fix"), run on this tree with the fix's source changes reverted.

Two more are scenarios of tests/test_rehearsal.py, run for every spec they apply to:

- a changed Kueue configuration is used (``test_a_spec_change_reapplied_keeps_the_rest_and_takes_effect_in_the_
  controller``): before the fix the Deployment's pod template did not change with the ConfigMap, so no new pod started
  and Kueue kept its old configuration ("AssertionError: Kueue still runs its old configuration");
- a quarantined node is replaced where the docs say (``test_a_quarantined_node_is_avoided_or_replaced_in_the_domain_
  the_docs_say``): with ``topology: preferred`` Kueue took a node of another domain while two waited in the job's own,
  and before the fix the quarantine note did not say so ("AssertionError: Kueue replaces each quarantined node in the
  topology assignment of the workloads it holds once their pods there have ended ...").
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from efa_stack import contract
from efa_stack.planning.plan import plan_from_text
from efa_stack.rehearsal.nodes import NodeOptions
from efa_stack.rehearsal.rehearsal import Rehearsal, rehearse
from efa_stack.rehearsal.update import update
from efa_stack.spec.errors import SpecError
from tests.rehearsal_support import JOB_TIMEOUT, log
from tests.support import CLUSTERS

pytestmark = [pytest.mark.rehearsal, pytest.mark.xdist_group("rehearsal")]

TAS_P5 = (CLUSTERS / "tas-p5.yaml").read_text()


def _variant(topology: str, *, level: str = "bottom", training: bool = True) -> str:
    """``clusters/tas-p5.yaml`` with ``topology`` and ``level`` (and without its training job)."""
    assert "topology: preferred" in TAS_P5 and "level: bottom" in TAS_P5 and "\ntrainingJobs:" in TAS_P5
    text = TAS_P5.replace("topology: preferred", f"topology: {topology}").replace("level: bottom", f"level: {level}")
    return text if training else text[: text.index("\ntrainingJobs:") + 1]


@pytest.fixture(scope="module")
def quota_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    """``tas-p5`` with ``topology: none`` and no training job: Kueue admits for quota only, and no Trainer runs."""
    started = time.monotonic()
    with rehearse(plan_from_text(_variant("none", training=False)), tmp_path_factory.mktemp("quota-only"),
                  nodes=NodeOptions()) as r:
        r.name = "tas-p5 with topology: none, no training job"
        log(f"{r.name}: rolled out in {time.monotonic() - started:.1f}s")
        yield r


def test_topology_none_admits_the_queued_job(quota_only):
    """Before the fix the node group's flavor kept its topology while the workers asked for none, and Kueue never
    admitted the job: "AssertionError: couldn't assign flavors to pod set worker: Flavor "p5" supports only
    TopologyAwareScheduling"."""
    r = quota_only
    (job,) = [j for j in r.objects if j["kind"] == contract.MPIJOB_KIND]
    # GIVEN topology: none ("quota only") WHEN the NCCL job is started by its start command
    outcome = r.jobs.land(job, timeout=JOB_TIMEOUT, settle=JOB_TIMEOUT)
    # THEN Kueue admits it with the group's flavor and the system flavor, no topology asked, and it runs
    assert outcome.landed, outcome.reason
    assert outcome.flavors == {"launcher": ("system",), "worker": ("p5",)}, outcome.flavors
    assert r.jobs.finish(outcome, job, JOB_TIMEOUT).completed


def test_the_first_trainjob_added_to_a_running_kueue_is_admitted_at_the_first_apply(quota_only):
    """Before the fix Kueue enabled the TrainJob integration at its start, before the Trainer's CRDs existed, and
    nothing restarted it when they came: its webhook refused the TrainJob that the update applied once, as
    ``cdk deploy`` does ("RolloutError: apply/training-jobs: the server refused: ... kueue-webhook-service ...")."""
    r = quota_only
    # GIVEN Kueue running on a cluster without the Trainer WHEN the spec gets its first TrainJob and is re-applied
    # with one apply per chart (cdk deploy)
    _, removed = update(r, plan_from_text(_variant("none")), admit_tries=1)
    assert removed == []
    (job,) = [j for j in r.objects if j["kind"] == contract.TRAINJOB_KIND]
    # THEN the TrainJob was admitted by the webhooks at once, and started by its start command it runs
    outcome = r.jobs.land(job, timeout=JOB_TIMEOUT, settle=JOB_TIMEOUT)
    assert outcome.landed, outcome.reason
    assert outcome.flavors == {"node": ("p5",)}, outcome.flavors


def test_required_topology_at_hostname_is_refused_for_jobs_of_several_workers():
    """Before the fix the spec planned and its jobs waited for ever: ``efa-stack rehearse`` on it reported "Kueue
    says: couldn't assign flavors to pod set worker: topology "network-3-layers" doesn't allow to fit any of 2 pod(s)"
    (the required level is the host, and one node holds one worker's GPUs and EFA devices); the test failed with
    "Failed: DID NOT RAISE <class 'efa_stack.spec.errors.SpecError'>"."""
    with pytest.raises(SpecError) as raised:
        plan_from_text(_variant("required", level="hostname"))
    problems = [p for p in raised.value.problems if p.field == "scheduling.kueue.level"]
    # one per job of several workers: the NCCL test and the TrainJob, 2 nodes each
    assert len(problems) == 2, raised.value.problems
    assert all("never admit" in p.message and "level: bottom" in p.fix for p in problems), problems
