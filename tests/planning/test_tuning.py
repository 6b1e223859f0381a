"""Node tuning: the kubelet's CPU manager and Topology Manager per node group, the whole CPUs a Guaranteed pod
gets, the nodeadm NodeConfig in the launch template's user data, and the NCCL-tests workers' Guaranteed QoS."""

from __future__ import annotations

import email
import email.message

import pytest
import yaml

from aws_constructs.user_data import NODECONFIG_API_VERSION, NODECONFIG_CONTENT_TYPE, node_config, node_user_data
from efa_stack.planning import catalog
from efa_stack.planning.tuning import ACCELERATOR_DEFAULTS, KubeletTuning, guaranteed_cpus, kube_reserved_cpu_milli
from k8s.nccl_tests import NcclTestsJobProps, mpirun_command, worker_resources
from tests.builders import Spec, cluster, cpu_group, node_group

BASE = cluster(node_group(desired=2, max_size=3))
CPU_GROUP = cpu_group("c5.2xlarge")


def with_kubelet(**config: object) -> Spec:
    return BASE.with_group(kubeletExtraConfig=config)


# --- the reservation and the whole CPUs a Guaranteed pod gets ------------------------------------

@pytest.mark.parametrize(("vcpus", "milli"), [
    (1, 60),  # 6% of the first core
    (2, 70),  # + 1% of the second
    (4, 80),  # + 0.5% of the third and fourth
    (96, 310),  # + 0.25% of 92 further cores = 230
    (192, 550),  # + 0.25% of 188 further cores = 470
])
def test_kube_reserved_cpu_follows_nodeadm(vcpus, milli):
    assert kube_reserved_cpu_milli(vcpus) == milli


def test_guaranteed_cpus_leave_the_reservation_and_the_daemonsets_margin():
    # GIVEN the catalog's vCPUs (p5 192, p4d 96) WHEN planned THEN allocatable less 1 CPU for DaemonSets, floored
    assert catalog.get("p5.48xlarge").vcpus == 192 and guaranteed_cpus(catalog.get("p5.48xlarge")) == 190
    assert catalog.get("p4d.24xlarge").vcpus == 96 and guaranteed_cpus(catalog.get("p4d.24xlarge")) == 94
    # never more than the static CPU manager's exclusive pool: vCPUs less ceil(kubeReserved)
    for name in ("p5.48xlarge", "p4d.24xlarge", "g5.xlarge", "trn2.48xlarge", "m7i.xlarge"):
        it = catalog.get(name)
        assert 0 < guaranteed_cpus(it) <= it.vcpus - -(-kube_reserved_cpu_milli(it.vcpus) // 1000)


# --- defaults and settings per node group ----------------------------------------------------------

def test_accelerator_groups_default_to_static_restricted_pod_and_cpu_groups_keep_the_kubelet_defaults():
    plan = BASE.add(CPU_GROUP).plan()
    gpu, cpu = plan.node_group("gpu"), plan.node_group("cpu")
    assert gpu.kubelet.as_kubelet_config() == ACCELERATOR_DEFAULTS == {
        "cpuManagerPolicy": "static", "topologyManagerPolicy": "restricted", "topologyManagerScope": "pod",
    }
    assert gpu.kubelet.exclusive_cpus
    assert cpu.kubelet == KubeletTuning() and cpu.kubelet.as_kubelet_config() == {}
    assert plan.system.kubelet.as_kubelet_config() == {}


def test_trainium_groups_get_the_accelerator_defaults():
    plan = BASE.with_group(instanceType="trn2.48xlarge").plan()
    assert plan.node_group("gpu").kubelet.as_kubelet_config() == ACCELERATOR_DEFAULTS


def test_spec_settings_override_the_defaults_key_by_key():
    plan = with_kubelet(topologyManagerPolicy="best-effort").plan()
    assert plan.node_group("gpu").kubelet.as_kubelet_config() == {**ACCELERATOR_DEFAULTS, "topologyManagerPolicy": "best-effort"}
    off = with_kubelet(cpuManagerPolicy="none", topologyManagerPolicy="none", topologyManagerScope="container").plan()
    assert off.node_group("gpu").kubelet.as_kubelet_config() == {}
    cpu = BASE.add(cpu_group("c5.2xlarge", kubeletExtraConfig={"cpuManagerPolicy": "static"})).plan()
    assert cpu.node_group("cpu").kubelet.as_kubelet_config() == {"cpuManagerPolicy": "static"}


def test_fails_unknown_policy_names_with_the_allowed_values():
    problems = with_kubelet(cpuManagerPolicy="Static", topologyManagerPolicy="numa", topologyManagerScope="node").problems()
    by_field = {p.field: p for p in problems}
    assert set(by_field) == {
        "managedNodeGroups[0].kubeletExtraConfig.cpuManagerPolicy",
        "managedNodeGroups[0].kubeletExtraConfig.topologyManagerPolicy",
        "managedNodeGroups[0].kubeletExtraConfig.topologyManagerScope",
    }
    assert "'static'" in by_field["managedNodeGroups[0].kubeletExtraConfig.cpuManagerPolicy"].fix
    assert "'single-numa-node'" in by_field["managedNodeGroups[0].kubeletExtraConfig.topologyManagerPolicy"].fix
    assert "'pod'" in by_field["managedNodeGroups[0].kubeletExtraConfig.topologyManagerScope"].fix


def test_fails_kubelet_keys_efa_stack_does_not_set():
    (p,) = with_kubelet(maxPods=50).problems()
    assert p.field == "managedNodeGroups[0].kubeletExtraConfig.maxPods" and "unknown field" in p.message


def test_fails_reserved_system_cpus_because_nodeadm_sets_the_reserved_cgroups():
    (p,) = with_kubelet(reservedSystemCPUs="0-1").problems()
    assert p.field == "managedNodeGroups[0].kubeletExtraConfig.reservedSystemCPUs" and p.value == "0-1"
    assert "kubeReservedCgroup" in p.message and "remove reservedSystemCPUs" in p.fix


def test_fails_reserved_system_cpus_outside_the_instance_and_says_so():
    (p,) = with_kubelet(reservedSystemCPUs="0,192").problems()
    assert "outside 0-191" in p.message


def test_fails_single_numa_node_on_the_group_the_nccl_job_takes_whole_nodes_of():
    # GIVEN the NCCL job's worker asks for all 8 GPUs, 32 EFA devices and 190 CPUs of a two-socket p5
    (p,) = with_kubelet(topologyManagerPolicy="single-numa-node").problems()
    # THEN single-numa-node (which admits a pod only when one NUMA node holds all of it) is refused
    assert p.field == "managedNodeGroups[0].kubeletExtraConfig.topologyManagerPolicy"
    assert p.value == "single-numa-node"
    assert "8 GPUs, 32 EFA devices and 190 CPUs" in p.message
    assert "restricted" in p.fix and "ncclTest.nodeGroup" in p.fix


def test_single_numa_node_is_allowed_on_a_group_the_nccl_job_does_not_run_on():
    plan = BASE.add(cpu_group("g5.xlarge", "small", kubeletExtraConfig={"topologyManagerPolicy": "single-numa-node"})).plan()
    assert plan.nccl_job.node_group == "gpu"
    assert plan.node_group("small").kubelet.topology_manager_policy == "single-numa-node"


# --- user data ---------------------------------------------------------------------------------------

def _parts(user_data: str) -> list[tuple[str, str]]:
    msg = email.message_from_string(user_data)
    assert msg.is_multipart()
    parts = msg.get_payload()
    assert isinstance(parts, list)
    return [(part.get_content_type(), str(part.get_payload())) for part in parts if isinstance(part, email.message.Message)]


def test_user_data_carries_a_nodeconfig_after_the_boot_script():
    data = node_user_data(5120, False, ACCELERATOR_DEFAULTS)
    assert data is not None
    (script_type, script), (config_type, config) = _parts(data)
    assert script_type == "text/x-shellscript" and "vm.nr_hugepages=2560" in script
    assert config_type == NODECONFIG_CONTENT_TYPE
    doc = yaml.safe_load(config)
    assert doc == {
        "apiVersion": NODECONFIG_API_VERSION, "kind": "NodeConfig",
        "spec": {"kubelet": {"config": ACCELERATOR_DEFAULTS}},
    }


def test_user_data_with_only_kubelet_settings_has_only_the_nodeconfig():
    data = node_user_data(0, False, {"cpuManagerPolicy": "static"})
    assert data is not None
    ((content_type, body),) = _parts(data)
    assert content_type == NODECONFIG_CONTENT_TYPE
    assert yaml.safe_load(body)["spec"]["kubelet"]["config"] == {"cpuManagerPolicy": "static"}
    assert node_user_data(0, False, {}) is None and node_user_data(0, False, None) is None


def test_fails_kubelet_values_that_would_break_the_yaml():
    with pytest.raises(ValueError, match="letters, digits"):
        node_config({"cpuManagerPolicy": "static\nmaxPods: 1"})


def test_user_data_never_sets_gpu_clocks():
    # the EKS AL2023 NVIDIA AMI's set-nvidia-clocks.service already does it at every boot
    data = node_user_data(5120, True, ACCELERATOR_DEFAULTS)
    assert data is not None and "nvidia-smi" not in data


def test_launch_templates_carry_each_groups_settings(default_synth):
    # GIVEN the default cluster WHEN synthesized THEN the GPU group's user data has the NodeConfig and the
    # system group's has none (kubelet defaults)
    groups = default_synth.stacks.cluster.node_groups
    gpu = groups["p5"].launch_template.user_data
    assert gpu is not None
    configs = [yaml.safe_load(body) for kind, body in _parts(gpu) if kind == NODECONFIG_CONTENT_TYPE]
    assert configs == [{
        "apiVersion": NODECONFIG_API_VERSION, "kind": "NodeConfig",
        "spec": {"kubelet": {"config": default_synth.plan.node_group("p5").kubelet.as_kubelet_config()}},
    }]
    system = groups["system"].launch_template.user_data
    assert system is None or NODECONFIG_CONTENT_TYPE not in system


# --- the NCCL-tests worker -----------------------------------------------------------------------------

def test_nccl_worker_is_guaranteed_with_the_plans_whole_cpus():
    plan = BASE.plan()
    job = plan.nccl_job
    assert job is not None and job.worker.cpus == plan.node_group("gpu").guaranteed_cpus == 190
    res = {k: v.value for k, v in worker_resources(NcclTestsJobProps(job=job)).items()}
    # requests = limits (one dict for both) with whole CPUs and memory: Guaranteed QoS
    assert res["cpu"] == 190 and res["memory"] == f"{job.worker.memory.memory_mib}Mi"


def test_mpirun_runs_one_rank_per_gpu_per_node_without_binding():
    job = BASE.plan().nccl_job
    assert job is not None
    cmd = mpirun_command(NcclTestsJobProps(job=job))
    assert cmd[cmd.index("-N") + 1] == "8" and cmd[cmd.index("-np") + 1] == "16"
    assert cmd[cmd.index("--bind-to") + 1] == "none" and "--map-by" not in cmd
