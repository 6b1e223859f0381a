"""The EFA guard in the rendered manifests: fail-closed NCCL env and the efa-guard init container.

Facts (sources in k8s/efa_guard.py): NCCL takes ``NCCL_NET`` as the only network it may use and fails
with "Failed to initialize any NET plugin" when that network did not come up (NVIDIA/nccl
src/plugin/net.cc ncclNetInit); aws-ofi-nccl answers to "AWS Libfabric" at every version; device
plugin devices are allocated per container, so the guard requests the worker's EFA count.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from efa_stack import contract
from efa_stack.planning.plan import build_plan
from efa_stack.spec.loader import parse_spec
from k8s import efa_guard
from k8s.mpijob import pod_template_json
from tests.support import built, built_text, mpirun_args, spec_text, worker, worker_container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _init_containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    return worker(job)["template"]["spec"].get("initContainers", [])


def _launcher_env(job: dict[str, Any]) -> dict[str, Any]:
    return _env(job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0])


# --- fail_closed_env ------------------------------------------------------------------------------


def test_efa_names_the_aws_ofi_nccl_network_every_plugin_version_answers_to():
    assert efa_guard.fail_closed_env("efa") == {"NCCL_NET": "AWS Libfabric", "FI_PROVIDER": "efa"}


def test_tcp_and_infiniband_pin_their_own_network():
    assert efa_guard.fail_closed_env("tcp") == {"NCCL_NET": "Socket"}
    assert efa_guard.fail_closed_env("infiniband") == {"NCCL_NET": "IB"}


def test_fails_unknown_fabric_naming_the_value():
    with pytest.raises(ValueError, match="'roce'"):
        efa_guard.fail_closed_env("roce")


# --- guard_init_container -------------------------------------------------------------------------


def _guard(**kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"image": "repo/img:1", "expected_efa": 32, "expected_gpus": 8, "fabric": "efa"}
    args.update(kw)
    import cdk8s_plus_33.k8s as k8s_l1

    c = efa_guard.guard_init_container(**args)
    tpl = k8s_l1.PodTemplateSpec(spec=k8s_l1.PodSpec(containers=[c]))
    return pod_template_json(tpl)["spec"]["containers"][0]


def test_guard_requests_the_expected_efa_devices_and_passes_them_to_the_script():
    # GIVEN 32 EFA devices and 8 GPUs WHEN the guard is rendered
    c = _guard()
    # THEN it requests the 32 devices (so the device plugin mounts them) with requests == limits
    assert c["resources"]["limits"][contract.EFA_RESOURCE] == 32
    assert c["resources"]["requests"] == c["resources"]["limits"]
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    env = _env(c)
    assert env["EFA_GUARD_EXPECTED_EFA"] == "32" and env["EFA_GUARD_EXPECTED_GPUS"] == "8"
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert c["name"] == contract.EFA_GUARD_CONTAINER and c["image"] == "repo/img:1"
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["command"][:2] == ["/bin/sh", "-c"] and c["command"][2] == efa_guard.SCRIPT_PATH.read_text()


def test_guard_passes_the_workload_environment_through():
    c = _guard(env=[("LD_LIBRARY_PATH", "/a:/b"), ("EFA_GUARD_EXPECTED_EFA", "1")])
    env = _env(c)
    assert env["LD_LIBRARY_PATH"] == "/a:/b"
    assert env["EFA_GUARD_EXPECTED_EFA"] == "32"  # the plan's count wins over a passed-through value


@pytest.mark.parametrize("fabric", ["tcp", "infiniband"])
def test_fails_guard_for_a_fabric_without_efa(fabric):
    with pytest.raises(ValueError, match=f"'{fabric}'"):
        efa_guard.guard_init_container(image="i:1", expected_efa=1, expected_gpus=8, fabric=fabric)


def test_fails_guard_without_efa_devices():
    with pytest.raises(ValueError, match="expected_efa must be at least 1"):
        efa_guard.guard_init_container(image="i:1", expected_efa=0, expected_gpus=8, fabric="efa")


def test_the_script_prints_the_prefix_verify_looks_for():
    assert "efa-stack guard: $1" in efa_guard.guard_script()
    assert contract.EFA_GUARD_FAIL_PREFIX == "efa-stack guard: FAIL"


# --- the NCCL-tests MPIJob ------------------------------------------------------------------------


def test_efa_workers_get_the_guard_with_the_plans_counts_by_default():
    # GIVEN the default spec (2 x p5.48xlarge, fabric efa) WHEN its charts are built
    b = built("default")
    job, ng = b.mpijob(), b.plan.node_groups[0]
    # THEN each worker runs the guard first, expecting every EFA device and GPU the plan gives the node
    (guard,) = _init_containers(job)
    assert guard["name"] == contract.EFA_GUARD_CONTAINER
    assert guard["resources"]["limits"][contract.EFA_RESOURCE] == ng.efa_devices_per_node == 32
    assert guard["resources"]["limits"][contract.EFA_RESOURCE] == worker_container(job)["resources"]["limits"][
        contract.EFA_RESOURCE
    ]
    assert _env(guard)["EFA_GUARD_EXPECTED_GPUS"] == str(ng.gpus_per_node)
    assert guard["image"] == worker_container(job)["image"]
    # the guard looks where the ranks' NCCL looks
    assert _env(guard)["LD_LIBRARY_PATH"] == _env(worker_container(job))["LD_LIBRARY_PATH"]
    # AND NCCL may use the aws-ofi-nccl network only, in the launcher, the workers and every rank
    assert _launcher_env(job)["NCCL_NET"] == "AWS Libfabric"
    assert _env(worker_container(job))["NCCL_NET"] == "AWS Libfabric"
    args = mpirun_args(job)
    assert any(a == "-x" and b_ == "NCCL_NET" for a, b_ in itertools.pairwise(args))


def test_the_default_images_own_aws_ofi_nccl_directory_is_on_the_library_path():
    # nccl-tests.Dockerfile builds aws-ofi-nccl with --prefix=/opt/aws-ofi-nccl/install
    job = built("default").mpijob()
    assert "/opt/aws-ofi-nccl/install/lib" in _env(worker_container(job))["LD_LIBRARY_PATH"].split(":")


def test_tcp_job_has_no_guard_and_pins_sockets():
    job = built_text(spec_text("p5.48xlarge", 2, extra="ncclTest:\n  fabric: tcp\n")).mpijob()
    assert _init_containers(job) == []
    assert _launcher_env(job)["NCCL_NET"] == "Socket"


def test_switching_the_guard_off_drops_the_init_container_and_nccl_net():
    # GIVEN ncclTest.efaGuard: false WHEN the job is planned and rendered
    text = spec_text("p5.48xlarge", 2, extra="ncclTest:\n  efaGuard: false\n")
    assert build_plan(parse_spec(text)).nccl_job.efa_guard is False
    job = built_text(text).mpijob()
    # THEN no init container and no NCCL_NET: the job is rendered as before the guard existed
    assert _init_containers(job) == []
    assert "NCCL_NET" not in _launcher_env(job)
    assert "NCCL_NET" not in mpirun_args(job)


def test_the_guard_is_on_by_default_in_the_spec():
    plan = build_plan(parse_spec(spec_text("p5.48xlarge", 2)))
    assert plan.nccl_job.efa_guard is True
