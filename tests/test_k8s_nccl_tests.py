"""The nccl-tests MPIJob: every number derived from the spec, per instance type and fabric."""

from __future__ import annotations

import pytest

from efa_stack import contract
from efa_stack.planning import catalog
from efa_stack.planning.nccl import node_allocatable_memory_mib, size_bytes, validate_nccl, worker_memory
from efa_stack.planning.plan import build_plan
from efa_stack.spec.errors import SpecError
from efa_stack.spec.loader import load_spec, parse_spec
from efa_stack.spec.models import NcclTest
from k8s.components import NCCL_TESTS
from k8s.nccl_tests import LOGS_COMMAND, START_COMMAND, logs_command, start_command
from tests.support import (
    CLUSTERS,
    arg_after,
    built,
    built_text,
    env_of,
    mpirun_args,
    spec_text,
    worker,
    worker_container,
)

# (spec, instance type, nodes): the numbers below are what the catalog says about each type.
CASES = [
    ("p4d", "p4d.24xlarge", 4),
    ("default", "p5.48xlarge", 2),
    ("p5en", "p5en.48xlarge", 2),
    ("p6-b200", "p6-b200.48xlarge", 2),
]
KNOWN = {  # the published figures, to check the catalog-derived ones against once
    "p4d.24xlarge": {"gpus": 8, "efa": 4},
    "p5.48xlarge": {"gpus": 8, "efa": 32},
    "p5en.48xlarge": {"gpus": 8, "efa": 16},
    "p6-b200.48xlarge": {"gpus": 8, "efa": 8},
}


@pytest.mark.parametrize(("stem", "instance_type", "nodes"), CASES)
def test_derived_numbers_per_instance_type(stem, instance_type, nodes):
    # GIVEN a spec of <nodes> x <instance type> WHEN its charts are built
    b = built(stem)
    job = b.mpijob()
    ng = b.plan.node_groups[0]
    gpus, efa = KNOWN[instance_type]["gpus"], KNOWN[instance_type]["efa"]
    assert (ng.instance_type, ng.gpus_per_node, ng.efa_devices_per_node) == (instance_type, gpus, efa)
    # THEN one rank per GPU, one worker per node, every EFA device of the node
    args = mpirun_args(job)
    assert job["spec"]["slotsPerWorker"] == gpus
    assert arg_after(args, "-np") == str(nodes * gpus)
    assert arg_after(args, "-N") == str(gpus)
    assert worker(job)["replicas"] == nodes
    res = worker_container(job)["resources"]
    assert res["limits"] == res["requests"]
    assert res["limits"]["nvidia.com/gpu"] == gpus
    assert res["limits"]["vpc.amazonaws.com/efa"] == efa
    # sized per GPU: 4000 MiB working memory + 1024 MiB /dev/shm per rank (see spec.nccl.worker_memory)
    assert res["limits"]["hugepages-2Mi"] == "5120Mi" and res["limits"]["memory"] == f"{gpus * (4000 + 1024)}Mi"
    assert env_of(worker_container(job))["FI_EFA_USE_DEVICE_RDMA"] == "1"  # A100/H100/H200/B200


def test_p5_example_from_the_issue():
    job = built("default").mpijob()
    assert arg_after(mpirun_args(job), "-np") == "16"
    assert job["spec"]["slotsPerWorker"] == 8
    assert worker_container(job)["resources"]["limits"]["vpc.amazonaws.com/efa"] == 32


def test_a_spec_change_alone_changes_every_number():
    # GIVEN the same spec with only the instance type and node count changed
    p5 = built_text(spec_text("p5.48xlarge", 2)).mpijob()
    p4d = built_text(spec_text("p4d.24xlarge", 4)).mpijob()
    for job, it, nodes in ((p5, "p5.48xlarge", 2), (p4d, "p4d.24xlarge", 4)):
        inst = catalog.get(it)
        plan_ng = build_plan(parse_spec(spec_text(it, nodes))).node_groups[0]
        # THEN -np, slots, GPUs and EFA devices all follow the catalog, nothing typed twice
        assert job["spec"]["slotsPerWorker"] == inst.gpus
        assert arg_after(mpirun_args(job), "-np") == str(nodes * inst.gpus)
        assert worker(job)["replicas"] == nodes
        limits = worker_container(job)["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == inst.gpus
        assert limits["vpc.amazonaws.com/efa"] == plan_ng.efa_devices_per_node == inst.max_efa_interfaces
    assert arg_after(mpirun_args(p5), "-np") == "16" and arg_after(mpirun_args(p4d), "-np") == "32"
    assert worker_container(p5)["resources"]["limits"]["vpc.amazonaws.com/efa"] == 32
    assert worker_container(p4d)["resources"]["limits"]["vpc.amazonaws.com/efa"] == 4


def test_default_sweep_and_efa_environment():
    b = built("default")
    job = b.mpijob()
    args = mpirun_args(job)
    binary = args.index("/opt/nccl-tests/build/all_reduce_perf")
    assert args[binary + 1:] == ["-b", "8", "-e", "16G", "-f", "2", "-g", "1", "-c", "1", "-n", "100"]
    env = env_of(job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0])
    assert env["FI_PROVIDER"] == "efa"
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_TUNER_PLUGIN"] == "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-ofi-tuner.so"
    assert env["LD_LIBRARY_PATH"].split(":")[:4] == [
        "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu", "/opt/nccl/build/lib", "/opt/amazon/efa/lib", "/opt/amazon/openmpi/lib",
    ]
    # every variable reaches the ranks on the workers (ssh sessions only see what -x exports)
    exported = {args[i + 1] for i, a in enumerate(args) if a == "-x"}
    assert exported == set(env)


def test_job_shape_launcher_workers_and_suspension():
    b = built("default")
    job = b.mpijob()
    assert job["metadata"]["name"] == "nccl-tests-p5" and job["metadata"]["namespace"] == "default"
    spec = job["spec"]
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert spec["runPolicy"]["suspend"] is True
    launcher = spec["mpiReplicaSpecs"]["Launcher"]
    assert launcher["replicas"] == 1
    assert launcher["template"]["spec"]["nodeSelector"] == {contract.LABEL_ROLE: "system"}
    assert "nvidia.com/gpu" not in str(launcher)
    wspec = worker(job)["template"]["spec"]
    assert wspec["nodeSelector"] == {contract.LABEL_NODE_GROUP: "p5"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in wspec["tolerations"]
    (term,) = wspec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == worker(job)["template"]["metadata"]["labels"]
    (shm,) = wspec["volumes"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8192Mi"}  # 1 GiB for each of 8 ranks
    assert worker_container(job)["volumeMounts"] == [{"mountPath": "/dev/shm", "name": "dshm"}]
    # no command: the operator runs sshd in workers
    assert "command" not in worker_container(job) and "args" not in worker_container(job)


def test_start_and_logs_commands():
    job = built("default").plan.nccl_job
    assert start_command(job) == (
        "kubectl patch mpijob nccl-tests-p5 -n default --type merge "
        "-p '{\"spec\":{\"runPolicy\":{\"suspend\":false}}}'"
    )
    assert logs_command(job) == "kubectl logs -n default -f job/nccl-tests-p5-launcher"
    assert "{name}" in START_COMMAND and "{name}" in LOGS_COMMAND
    annotations = built("default").mpijob()["metadata"]["annotations"]
    assert annotations["efa-stack.io/start"] == start_command(job)


def test_tcp_fabric_renders_the_same_job_without_efa():
    efa = built_text(spec_text()).mpijob()
    tcp = built_text(spec_text(extra="ncclTest:\n  fabric: tcp\n")).mpijob()
    limits = worker_container(tcp)["resources"]["limits"]
    assert "vpc.amazonaws.com/efa" not in limits and "hugepages-2Mi" not in limits
    env = env_of(worker_container(tcp))
    assert env["NCCL_NET"] == "Socket" and env["FI_PROVIDER"] != "efa"
    assert "FI_EFA_USE_DEVICE_RDMA" not in env and "NCCL_TUNER_PLUGIN" not in env
    # same shape otherwise: the A/B differs only in the fabric
    assert arg_after(mpirun_args(tcp), "-np") == arg_after(mpirun_args(efa), "-np")
    assert worker(tcp)["replicas"] == worker(efa)["replicas"]


def test_tcp_fabric_can_target_a_group_without_efa():
    job = built_text(spec_text(efa=False, extra="ncclTest:\n  fabric: tcp\n")).mpijob()
    assert arg_after(mpirun_args(job), "-np") == "16"


def test_infiniband_fabric_uses_rdma_hca_and_ipc_lock():
    job = built_text(spec_text(extra="ncclTest:\n  fabric: infiniband\n")).mpijob()
    c = worker_container(job)
    assert c["resources"]["limits"]["rdma/hca"] == 1
    assert "vpc.amazonaws.com/efa" not in c["resources"]["limits"]
    assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    env = env_of(c)
    assert env["NCCL_IB_DISABLE"] == "0" and env["NCCL_NET"] == "IB"
    assert {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME"} <= set(env)
    assert "FI_PROVIDER" not in env


def test_other_binaries_and_sweeps_are_selectable():
    extra = (
        "ncclTest:\n  binary: alltoall_perf\n  minBytes: 1M\n  maxBytes: 4G\n  stepFactor: 4\n"
        "  iterations: 20\n  check: 0\n  suspend: false\n"
    )
    job = built_text(spec_text(extra=extra)).mpijob()
    args = mpirun_args(job)
    binary = args.index("/opt/nccl-tests/build/alltoall_perf")
    assert args[binary + 1:] == ["-b", "1M", "-e", "4G", "-f", "4", "-g", "1", "-c", "0", "-n", "20"]
    assert job["spec"]["runPolicy"]["suspend"] is False


def test_node_group_choice_and_trainium():
    extra = """  - name: second
    instanceType: p5en.48xlarge
    minSize: 3
    desiredCapacity: 3
    maxSize: 3
    availabilityZones: ["us-west-2a"]
    privateNetworking: true
    efaEnabled: true
ncclTest:
  nodeGroup: second
"""
    job = built_text(spec_text(extra=extra)).mpijob()
    assert job["metadata"]["name"] == "nccl-tests-second"
    assert arg_after(mpirun_args(job), "-np") == "24"
    assert worker_container(job)["resources"]["limits"]["vpc.amazonaws.com/efa"] == 16
    trn = built("trn2")
    assert trn.plan.nccl_job is None and NCCL_TESTS not in trn.manifests


def test_size_bytes():
    assert size_bytes("8") == 8 and size_bytes("1K") == 1024 and size_bytes("16G") == 16 * 1024**3


# --- validation: problems name the field, the value and the fix ------------------------------------

def problems(text: str) -> list:
    """The problems build_plan reports (it runs validate_nccl with the other checks)."""
    try:
        build_plan(parse_spec(text))
    except SpecError as exc:
        return exc.problems
    return []


def test_default_specs_have_no_nccl_problems():
    for stem in ("default", "p4d", "p5en", "p6-b200", "trn2", "eksctl-efa-cluster"):
        b, spec = built(stem), load_spec(CLUSTERS / f"{stem}.yaml")
        groups = b.plan.node_groups
        explicit = "nccl_test" in spec.model_fields_set
        assert validate_nccl(spec.nccl_test, groups, [g.name for g in groups], explicit=explicit) == []


def test_fails_sweep_that_starts_above_its_end():
    (p,) = problems(spec_text(extra="ncclTest:\n  minBytes: 1G\n  maxBytes: 1M\n"))
    assert p.field == "ncclTest.minBytes/maxBytes" and "minBytes" in p.fix


def test_fails_unknown_node_group():
    (p,) = problems(spec_text(extra="ncclTest:\n  nodeGroup: nope\n"))
    assert p.field == "ncclTest.nodeGroup" and p.value == "nope" and "gpu" in p.fix


def test_fails_neuron_node_group():
    (p,) = problems(spec_text("trn2.48xlarge", extra="ncclTest:\n  nodeGroup: gpu\n"))
    assert "CUDA" in p.message and "Neuron" in p.message


def test_fails_efa_fabric_on_a_group_without_efa():
    (p,) = problems(spec_text(efa=False, extra="ncclTest:\n  nodeGroup: gpu\n"))
    assert "efaEnabled" in p.message and "fabric: tcp" in p.fix


def test_fails_shm_larger_than_memory():
    (p,) = problems(spec_text(extra="ncclTest:\n  memoryMiB: 4096\n  shmSizeMiB: 4096\n"))
    assert p.field == "ncclTest.shmSizeMiB"


def test_fails_worker_that_does_not_fit_the_node():
    (p,) = problems(spec_text("p4d.24xlarge", extra="ncclTest:\n  memoryMiB: 2000000\n  shmSizeMiB: 1024\n"))
    assert p.field == "ncclTest.memoryMiB" and "p4d.24xlarge" in p.message
    assert p.value == {"memoryMiB": 2000000, "hugepagesMiB": 5120}


# --- worker memory sized from the node ----------------------------------------------------------------

def _allocatable_from_the_source(memory_mib: int, enis: int, ipv4_per_eni: int) -> int:
    # awslabs/amazon-eks-ami nodeadm internal/kubelet: kubeReserved memory 11 * maxPods + 255,
    # maxPods = ENIs * (IPv4 per ENI - 1) + 2, evictionHard memory.available 100Mi
    max_pods = enis * (ipv4_per_eni - 1) + 2
    return memory_mib - (11 * max_pods + 255) - 100


def test_node_allocatable_follows_nodeadm_with_the_largest_ipv4_per_eni():
    p5 = catalog.get("p5.48xlarge")
    # p5.48xlarge: 2 ENIs on the default card (catalog), nodeadm's largest IPv4-per-ENI figure 64
    assert node_allocatable_memory_mib(p5) == _allocatable_from_the_source(p5.memory_mib, 2, 64)
    # an upper bound on the reservation: never more allocatable than with p5's real 50 addresses per ENI
    assert node_allocatable_memory_mib(p5) <= _allocatable_from_the_source(p5.memory_mib, 2, 50)


def test_defaults_are_sized_from_the_gpus():
    # GIVEN no memory fields WHEN planned for 8 GPUs THEN 8 x 1 GiB /dev/shm and 8 x 4000 MiB + shm memory
    job = build_plan(parse_spec(spec_text())).nccl_job
    assert (job.worker.memory.shm_mib, job.worker.memory.memory_mib, job.worker.memory.hugepages_mib) == (8192, 8 * 4000 + 8192, 5120)


def test_explicit_values_are_kept():
    job = build_plan(parse_spec(spec_text(extra="ncclTest:\n  memoryMiB: 64000\n  shmSizeMiB: 4096\n"))).nccl_job
    assert (job.worker.memory.memory_mib, job.worker.memory.shm_mib) == (64000, 4096)


def test_explicit_memory_keeps_the_sized_shm():
    job = build_plan(parse_spec(spec_text(extra="ncclTest:\n  memoryMiB: 64000\n"))).nccl_job
    assert (job.worker.memory.memory_mib, job.worker.memory.shm_mib) == (64000, 8192)


def test_fails_explicit_memory_with_no_room_for_the_sized_shm():
    (p,) = problems(spec_text(extra="ncclTest:\n  memoryMiB: 8000\n"))
    assert p.field == "ncclTest.memoryMiB" and "8192 MiB, sized for 8 GPUs" in p.message


def test_fails_hugepages_that_do_not_fit_the_node():
    (p,) = problems(spec_text(extra="ncclTest:\n  hugepagesMiB: 1048576\n  memoryMiB: 1048576\n"))
    assert p.field == "ncclTest.hugepagesMiB/memoryMiB" and "p5.48xlarge" in p.message
    assert "keep memoryMiB + hugepagesMiB at or below" in p.fix


def test_sized_defaults_fit_every_efa_nvidia_instance_type_of_the_catalog():
    # class check: for every EFA NVIDIA type the catalog knows, the default EFA worker fits its node;
    # a smaller non-EFA GPU type (tcp fabric) either fits or gets one clear problem naming it
    cfg = NcclTest()
    checked = 0
    for inst in (catalog.get(n) for n in catalog.names()):
        if inst.accelerator != "nvidia" or inst.gpus < 1:
            continue
        checked += 1
        if inst.efa_supported:
            assert worker_memory(inst, cfg.hugepages_mib).problems("ncclTest", inst.name, inst.gpus) == [], inst.name
        else:
            found = worker_memory(inst, 0).problems("ncclTest", inst.name, inst.gpus)
            assert found == [] or (len(found) == 1 and inst.name in found[0].message and found[0].field == "ncclTest")
    assert checked > 10
