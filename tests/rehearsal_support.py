"""What the rehearsal scenarios share: the specs they rehearse (every shipped one and the variants the scenarios need),
the spec change each re-applies, and the cluster operations a user runs (cordon, quarantine, delete a job)."""

from __future__ import annotations

import time
from functools import cache
from typing import Any

import yaml

from efa_stack import contract
from efa_stack.planning.node_groups import ComputeDomainPlan, NodeGroupPlan
from efa_stack.planning.plan import ClusterPlan, plan_from_file, plan_from_text
from efa_stack.planning.scheduling import FlavorPlan
from efa_stack.rehearsal.client import poll
from efa_stack.rehearsal.jobs import jobs_of
from efa_stack.rehearsal.nodes import group_nodes, quarantine_patch
from efa_stack.rehearsal.rehearsal import Rehearsal
from tests.support import CLUSTERS

JOB_TIMEOUT = 180
"""Seconds for a started job's pods to run (on a loaded 2-core machine a few suffice; a pool launches nodes first)."""
SETTLE = 10
"""Seconds a job that must not land waits with its reason before the scenario reads it."""
PYTORCH_ENTRY = """  - name: ddp-pytorchjob
    nodeGroup: p5
    image: public.ecr.aws/deep-learning-containers/pytorch:2.11.0-cu130-amzn2023
    kind: pytorchjob
    fabric: efa
    command: [torchrun, /workspace/train.py]
"""


def _tas_required_pytorchjob() -> str:
    """``clusters/tas-p5.yaml`` with ``topology: required`` and, beside its TrainJob, a PyTorchJob (the Training
    Operator's job kind, which no shipped spec renders; the entry of tests/test_k8s_training.py ``job_spec``)."""
    text = (CLUSTERS / "tas-p5.yaml").read_text()
    assert "topology: preferred" in text and text.rstrip().endswith("dist.destroy_process_group()")
    return text.replace("topology: preferred", "topology: required") + PYTORCH_ENTRY


VARIANTS = {"tas-p5-required-pytorchjob": _tas_required_pytorchjob}
"""Specs the scenarios rehearse beside the shipped ones: name -> its text."""


def spec_text(name: str) -> str:
    return VARIANTS[name]() if name in VARIANTS else (CLUSTERS / f"{name}.yaml").read_text()


@cache
def spec_plan(name: str) -> ClusterPlan:
    return plan_from_text(VARIANTS[name]()) if name in VARIANTS else plan_from_file(CLUSTERS / f"{name}.yaml")


def shipped() -> list[str]:
    return sorted(p.stem for p in CLUSTERS.glob("*.yaml"))


def has_jobs(name: str) -> bool:
    plan = spec_plan(name)
    return bool(plan.nccl_jobs or plan.training_jobs)


def changed_spec(name: str) -> tuple[str, str]:
    """The spec change a scenario re-applies to ``name``: its last training job removed, and with Kueue the
    ``waitForPodsReady`` timeout raised by 600 s; with neither, the NCCL test's iterations changed. (text, what)."""
    data = yaml.safe_load(spec_text(name))
    plan = spec_plan(name)
    what = []
    if data.get("trainingJobs"):
        removed = data["trainingJobs"].pop()
        what.append(f"training job {removed['name']} removed")
        if not data["trainingJobs"]:
            del data["trainingJobs"]
    if plan.kueue is not None:
        wait = data["scheduling"]["kueue"].setdefault("waitForPodsReady", {})
        wait["timeoutSeconds"] = plan.kueue.wait.timeout_seconds + 600
        what.append(f"waitForPodsReady.timeoutSeconds {plan.kueue.wait.timeout_seconds} -> {wait['timeoutSeconds']}")
    if not what:
        data.setdefault("ncclTest", {})["iterations"] = 50
        what.append("ncclTest.iterations 100 -> 50")
    return yaml.safe_dump(data, sort_keys=False), ", ".join(what)


# --- the cluster as users change it -------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[rehearsal] {message}", flush=True)


def job_group(r: Rehearsal, job: dict[str, Any]) -> NodeGroupPlan:
    return r.plan.node_group(job["metadata"]["labels"][contract.LABEL_NODE_GROUP])


def job_flavor(r: Rehearsal, job: dict[str, Any]) -> FlavorPlan | None:
    return r.plan.kueue.flavor(job_group(r, job).name) if r.plan.kueue is not None else None


def compute_domain(r: Rehearsal, job: dict[str, Any]) -> ComputeDomainPlan | None:
    """The plan's ComputeDomain of ``job`` (a job on an UltraServer node group), or None."""
    name = job["metadata"]["name"]
    domains = {**{j.name: j.compute_domain for j in r.plan.nccl_jobs},
               **{j.name: j.worker.compute_domain for j in r.plan.training_jobs}}
    return domains.get(name)


def is_pool(r: Rehearsal, group: NodeGroupPlan) -> bool:
    return r.plan.karpenter is not None and r.plan.karpenter.pool(group.name) is not None


def live_nodes(r: Rehearsal, group: str | None = None) -> list[dict[str, Any]]:
    """The live nodes (of node group ``group``), by name; with apiVersion and kind for patches."""
    nodes = [{"apiVersion": "v1", "kind": "Node", **n} for n in r.api.list("v1", "Node")]
    return sorted((n for n in nodes if group is None
                   or n["metadata"]["labels"].get(contract.LABEL_NODE_GROUP) == group),
                  key=lambda n: n["metadata"]["name"])


def node_labels(r: Rehearsal, name: str) -> dict[str, str]:
    got = r.api.get({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    return dict(got.body["metadata"]["labels"])


def patch_node(r: Rehearsal, node: dict[str, Any], patch: dict[str, Any]) -> None:
    got = r.api.merge_patch(node, patch)
    assert got.ok, got.message()


def cordon(r: Rehearsal, nodes: list[dict[str, Any]], unschedulable: bool = True) -> None:
    for n in nodes:
        patch_node(r, n, {"spec": {"unschedulable": unschedulable}})


def quarantine(r: Rehearsal, name: str, reason: str = "dcgm-failed") -> None:
    """What ``efa-stack verify --acceptance --quarantine`` does to a node (efa_stack/rehearsal/nodes.py
    ``quarantine_patch``, the acceptance runner's patch)."""
    node = next(n for n in live_nodes(r) if n["metadata"]["name"] == name)
    patch_node(r, node, quarantine_patch(node, reason))


def release(r: Rehearsal, name: str) -> None:
    """The quarantine undone: the taint removed, the node uncordoned."""
    node = next(n for n in live_nodes(r) if n["metadata"]["name"] == name)
    taints = [t for t in node["spec"].get("taints") or [] if t["key"] != contract.QUARANTINE_TAINT_KEY]
    patch_node(r, node, {"spec": {"unschedulable": None, "taints": taints or None}})


def add_nodes(r: Rehearsal, group: NodeGroupPlan, indexes: range, nodes_per_domain: int | None) -> list[str]:
    """More nodes of ``group`` than the plan has (figures and labels from the plan), Ready; their names."""
    from efa_stack.rehearsal.nodes import NodeOptions

    made = group_nodes(r.plan, group, NodeOptions(nodes_per_domain=nodes_per_domain), indexes)
    if is_pool(r, group):
        for node in made:
            node["metadata"]["labels"][contract.KARPENTER_NODEPOOL_LABEL] = group.name
    r.add_nodes(made)
    return [n["metadata"]["name"] for n in made]


def delete_nodes(r: Rehearsal, names: list[str]) -> None:
    for name in names:
        r.api.delete({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    poll(f"nodes {names} deleted", lambda: True if not {n["metadata"]["name"] for n in live_nodes(r)} & set(names)
         else None, JOB_TIMEOUT)
    r.nodes = [n for n in r.nodes if n["metadata"]["name"] not in names]


def fresh(r: Rehearsal, job: dict[str, Any]) -> None:
    """``job`` deleted (with its pods) and applied again as rendered: suspended, ready to be started again."""
    r.jobs.remove(job, JOB_TIMEOUT)
    r.reapply(job)


def jobs(r: Rehearsal) -> list[dict[str, Any]]:
    return jobs_of(r.objects)


def wait_for(what: str, probe: Any, timeout: float = JOB_TIMEOUT) -> Any:
    started = time.monotonic()
    value = poll(what, probe, timeout)
    log(f"{what}: {time.monotonic() - started:.1f}s")
    return value


def quarantine_note(plan: ClusterPlan, group: str) -> str:
    """The note ``efa-stack verify --acceptance --quarantine`` prints when it quarantines a node of ``group`` whose
    jobs Kueue places by topology: the acceptance run of tests/test_acceptance.py (recorded node logs, one node
    failing DCGM) on ``plan``, its one note that starts with the replacement note."""
    from efa_stack.acceptance.run import KUEUE_REPLACEMENT_NOTE, AcceptanceOptions, run_acceptance
    from tests.test_acceptance import NODES, FakeCore, FakeCustom, _healthy, _text

    core = FakeCore(_healthy() | {NODES[2]: _text("node_dcgm_failed.log")})
    report = run_acceptance(plan, core, FakeCustom(core, set()), AcceptanceOptions(
        node_group=group, quarantine=True, clock=lambda: 0.0, sleep=lambda s: None))
    (note,) = [n for n in report.notes if n.startswith(KUEUE_REPLACEMENT_NOTE)]
    return note
