"""The EFA guard: make an EFA job fail, loudly, instead of training over TCP sockets.

:func:`fail_closed_env` sets ``NCCL_NET=AWS Libfabric`` so NCCL cannot fall back to sockets;
:func:`guard_init_container` runs ``k8s/scripts/efa_guard.sh`` before the worker and fails the pod with
one line that says why. The NCCL and aws-ofi-nccl source facts behind both:
docs/design/kubernetes-side.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

from cdk8s_plus_33 import k8s as k8s_l1

from efa_stack import contract
from k8s.scheduling import count, mebibytes, millicores

SCRIPT_PATH = Path(__file__).resolve().parent / "scripts" / "efa_guard.sh"

# The aws-ofi-nccl network name every plugin version answers to (see the module docstring).
OFI_NET_NAME = "AWS Libfabric"
FABRICS = ("efa", "tcp", "infiniband")

# The guard's own footprint: a shell, fi_info and a directory listing.
GUARD_CPU_MILLICORES = 100
GUARD_MEMORY_MIB = 256
"""Room for fi_info with every provider loaded. An init container's request does not add to the pod's (the pod's
effective request is the larger of the biggest init container and the sum of the app containers: kubernetes.io,
"Init Containers", "Resource sharing within containers"), so the margin costs the worker nothing, while 64 MiB
could OOM-kill the guard on a healthy node."""

PROBE_ENV = {"FI_HMEM": "system"}
"""Keep CUDA out of the guard's ``fi_info`` probe: ofiwg/libfabric@v2.4.0 src/hmem.c ``ofi_hmem_init`` reads
``FI_HMEM``, the list of HMEM interfaces to initialise (``system`` is always on), and initialises only those;
otherwise its CUDA interface (src/hmem_cuda.c ``cuda_hmem_dl_init``) dlopens libcudart/libcuda/NVML and
calls ``cudaGetDeviceCount``, creating a CUDA context in a container that holds no GPU. The EFA provider
lists its devices without any HMEM interface. Set on the guard only: the workers keep CUDA HMEM (GPUDirect
RDMA)."""


@cache
def guard_script() -> str:
    """The guard's shell script (``k8s/scripts/efa_guard.sh``), read once per process."""
    return SCRIPT_PATH.read_text()


def fail_closed_env(fabric: str) -> dict[str, str]:
    """``NCCL_NET`` (and libfabric's provider) so that NCCL fails instead of falling back to sockets.

    ``efa``: ``NCCL_NET=AWS Libfabric`` (the aws-ofi-nccl plugin or nothing) and ``FI_PROVIDER=efa``.
    ``tcp``: ``NCCL_NET=Socket``: the A/B baseline runs over sockets on purpose, and NCCL must not pick
    an InfiniBand/RoCE device if the node happens to have one. ``infiniband``: ``NCCL_NET=IB`` (NCCL's
    built-in verbs transport or nothing).
    """
    if fabric == "efa":
        return {"NCCL_NET": OFI_NET_NAME, "FI_PROVIDER": "efa"}
    if fabric == "tcp":
        return {"NCCL_NET": "Socket"}
    if fabric == "infiniband":
        return {"NCCL_NET": "IB"}
    raise ValueError(f"fabric {fabric!r} is not one of {', '.join(FABRICS)}")


def _field_env(name: str, path: str) -> k8s_l1.EnvVar:
    return k8s_l1.EnvVar(
        name=name, value_from=k8s_l1.EnvVarSource(field_ref=k8s_l1.ObjectFieldSelector(field_path=path))
    )


def guard_init_container(
    *,
    image: str,
    expected_efa: int,
    expected_gpus: int,
    fabric: str,
    env: Sequence[tuple[str, str]] = (),
    claims: Sequence[k8s_l1.ResourceClaim] = (),
) -> k8s_l1.Container:
    """The ``efa-guard`` init container for a pod that should use ``expected_efa`` EFA devices.

    ``image``: the workload's image (the guard checks what the workload will run with).
    ``expected_efa`` / ``expected_gpus``: from the plan (``NcclJobPlan.efa_per_worker`` /
    ``gpus_per_worker``, i.e. ``NodeGroupPlan``), never typed. ``env``: the workload's environment
    (PATH, LD_LIBRARY_PATH, NCCL_NET_PLUGIN), so the guard looks where NCCL will look.
    ``claims``: on a ``devices: dra`` node group, the pod's claims that hold its EFA devices (k8s/dra.py): the guard
    takes them instead of requesting ``vpc.amazonaws.com/efa``, and its expected count is the claims' (the plan's
    worker claims), and its fixes point at the EFA DRA driver.
    Only ``fabric="efa"`` has a guard; other fabrics raise ``ValueError``.
    """
    if fabric != "efa":
        raise ValueError(f"the EFA guard is for fabric 'efa' only (got {fabric!r}); render no init container")
    if expected_efa < 1:
        raise ValueError(f"expected_efa must be at least 1 (got {expected_efa}); an EFA pod requests its devices")
    if expected_gpus < 0:
        raise ValueError(f"expected_gpus must be >= 0 (got {expected_gpus})")
    resources: dict[str, k8s_l1.Quantity] = {
        **({} if claims else {contract.EFA_RESOURCE: count(expected_efa)}),
        "cpu": millicores(GUARD_CPU_MILLICORES),
        "memory": mebibytes(GUARD_MEMORY_MIB),
    }
    variables = [
        k8s_l1.EnvVar(name="EFA_GUARD_EXPECTED_EFA", value=str(expected_efa)),
        k8s_l1.EnvVar(name="EFA_GUARD_EXPECTED_GPUS", value=str(expected_gpus)),
        *([k8s_l1.EnvVar(name="EFA_GUARD_DEVICES", value=contract.DEVICES_DRA)] if claims else []),
        _field_env("NODE_NAME", "spec.nodeName"),
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        *(k8s_l1.EnvVar(name=k, value=v) for k, v in PROBE_ENV.items()),
    ]
    taken = {v.name for v in variables}
    variables += [k8s_l1.EnvVar(name=k, value=v) for k, v in env if k not in taken]
    return k8s_l1.Container(
        name=contract.EFA_GUARD_CONTAINER,
        image=image,
        image_pull_policy="IfNotPresent",
        command=["/bin/sh", "-c", guard_script(), contract.EFA_GUARD_CONTAINER],
        env=variables,
        # requests = limits: extended resources must match, and equal cpu/memory keep the pod's QoS class
        resources=k8s_l1.ResourceRequirements(limits=resources, requests=dict(resources), claims=list(claims) or None),
        termination_message_policy="FallbackToLogsOnError",
    )
