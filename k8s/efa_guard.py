"""The EFA guard: make an EFA job fail, loudly, instead of training over TCP sockets.

NCCL falls back to its socket transport without an error when the OFI net plugin (aws-ofi-nccl)
cannot load or finds no EFA device: the job runs, many times slower. Two things close that door.

**Fail-closed environment** (:func:`fail_closed_env`). What decides it, read in the sources:

* NCCL picks its network in ``ncclNetInit`` (NVIDIA/nccl@v2.27.7-1 src/plugin/net.cc:254-280; the same
  at v2.30.7-1 src/plugin/net.cc:321-351): it walks the external plugin(s), then the internal ``IB``
  and ``Socket`` nets, and takes the first that loads, initialises with at least one device
  (net.cc:144 ``ndev <= 0`` disables a plugin) and whose name matches ``comm->config.netName``
  (net.cc:166 ``strcasecmp``; v2.30.7-1 net.cc:331). ``netName`` is ``NCCL_NET``
  (src/init.cc:1544-1553 at v2.27.7-1). With ``NCCL_NET`` unset every net matches, so a plugin that
  fails to load or init is skipped and ``Socket`` wins: the silent fallback. With ``NCCL_NET`` set to
  the plugin's name, ``IB`` and ``Socket`` never match; if the plugin did not come up, NCCL prints
  ``Failed to initialize any NET plugin`` and returns ``ncclInvalidUsage`` (net.cc:278-279;
  v2.30.7-1 net.cc:349-350): the job fails. ``NCCL_NET`` naming a net that is not loaded is an
  error, not a fallback.
* The plugin's name. aws-ofi-nccl up to v1.12.x registers ``"AWS Libfabric"``
  (aws/aws-ofi-nccl@v1.11.0-aws src/nccl_ofi_interface_nvidia.c:182); from v1.13.0-aws it registers
  ``"Libfabric"`` (v1.13.0-aws src/nccl_ofi_interface_nvidia.c:182; v1.16.3
  src/nccl_ofi_interface_nvidia.cpp:343; v1.21.1 src/nccl_ofi_interface_nvidia.cpp:662) and a
  constructor renames it to ``"AWS Libfabric"`` or ``"OFI"`` when ``NCCL_NET`` says so
  (``nvidia_plugin_name_fixup``: v1.16.3 src/nccl_ofi_interface_nvidia.cpp:532-560, v1.21.1
  src/nccl_ofi_interface_nvidia.cpp:830-858, "Customers do have NCCL_NET="AWS Libfabric" in their
  various scripts, so still support that"). ``"AWS Libfabric"`` is therefore the one value every
  plugin version answers to; ``"Libfabric"`` and ``"OFI"`` fail closed on a pre-1.13 plugin even
  when EFA works. The value has a space: it travels as a Kubernetes env value and through
  ``mpirun -x NAME`` (which forwards the value, not a shell word), never through a shell.
* ``NCCL_NET_PLUGIN`` is left unset. Unset, NCCL dlopens ``libnccl-net.so`` (net.cc:208); set to a
  bare name ``X`` it tries ``X`` and then ``libnccl-net-X.so`` (src/plugin/plugin_open.cc:59-87 at
  v2.27.7-1). aws-ofi-nccl always installs ``libnccl-net-ofi.so`` from v1.15.0 (RELEASENOTES.md
  "Changed default plugin library name to libnccl-net-ofi.so ... symlink ... libnccl-net.so";
  v1.21.1 src/Makefile.am:162-174 builds ``libnccl-net.so`` too unless configured with
  ``--disable-nccl-net-library``), ``libnccl-net-aws-ofi.so`` only for NGC builds (Makefile.am:176-186),
  and only ``libnccl-net.so`` before v1.15. Forcing ``ofi`` would break pre-1.15 images; a plugin
  that does not load is caught by ``NCCL_NET`` anyway, and the guard below names the missing file.
* ``FI_PROVIDER=efa`` alone does not fail closed: libfabric then returns no provider, the plugin's
  init fails and NCCL moves on to ``Socket``. On AWS the plugin already filters for ``efa`` when
  ``FI_PROVIDER`` is unset ("for platforms without EFA, this will cause a fallback to NCCL's internal
  TCP": v1.16.3 src/platform-aws.cpp:559-572). It stays set (k8s/nccl_tests.py) so libfabric never
  picks its own tcp provider.
* ``OFI_NCCL_PROTOCOL`` (RDMA/SENDRECV) makes the plugin's init fail when that protocol cannot start
  (v1.16.3 src/nccl_ofi_net.cpp:203-222) but a failed plugin init is again a fallback without
  ``NCCL_NET``; it is not set, so the plugin keeps choosing the protocol per platform.

**The guard init container** (:func:`guard_init_container`). ``NCCL_NET`` makes NCCL fail, with a
message that does not say why. The guard runs ``k8s/scripts/efa_guard.sh`` in the job's own image
before the worker starts: it checks for ``fi_info``, the net plugin library NCCL will load, the
number of EFA devices libfabric sees and the ``/dev/infiniband/uverbs*`` files, against the plan's
EFA count, and fails the pod with one line naming the node, the pod, what was expected, what was
found and the fix (``terminationMessagePolicy: FallbackToLogsOnError``; ``efa-stack verify`` prints it).

The init container requests the same ``vpc.amazonaws.com/efa`` count as the worker. Device plugin
devices are allocated per container (the EFA device plugin mounts ``/dev/infiniband/uverbs*`` only
into a container that requests the resource), so an init container without the request would see
no device and always fail. Requesting them costs nothing: the pod's effective request of a resource
is the larger of the highest init container request and the sum of the app containers' requests
(kubernetes.io "Init Containers", "Resource sharing within containers"), and the kubelet allocates
init containers first and hands a finished init container's devices to the app containers
(kubernetes/kubernetes pkg/kubelet/cm/devicemanager/manager.go ``Allocate``: init container
allocations go to ``devicesToReuse``, which ``allocateContainerResources`` draws from for the app
containers). The guard does not request GPUs (``fi_info`` does not use them).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

from cdk8s_plus_33 import k8s as k8s_l1

from efa_stack import contract
from k8s.scheduling import count, mebibytes, millicores

SCRIPT_PATH = Path(__file__).resolve().parent / "scripts" / "efa_guard.sh"
SCRIPT_NAME = contract.EFA_GUARD_CONTAINER
"""``$0`` of the script (``sh -c SCRIPT <container name>``)."""

# The aws-ofi-nccl network name every plugin version answers to (see the module docstring).
OFI_NET_NAME = "AWS Libfabric"
FABRICS = ("efa", "tcp", "infiniband")

# The guard's own footprint: a shell, fi_info and a directory listing.
GUARD_CPU_MILLICORES = 100
GUARD_MEMORY_MIB = 64


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
) -> k8s_l1.Container:
    """The ``efa-guard`` init container for a pod that should use ``expected_efa`` EFA devices.

    ``image``: the workload's image (the guard checks what the workload will run with).
    ``expected_efa`` / ``expected_gpus``: from the plan (``NcclJobPlan.efa_per_worker`` /
    ``gpus_per_worker``, i.e. ``NodeGroupPlan``), never typed. ``env``: the workload's environment
    (PATH, LD_LIBRARY_PATH, NCCL_NET_PLUGIN), so the guard looks where NCCL will look.
    Only ``fabric="efa"`` has a guard; other fabrics raise ``ValueError``.
    """
    if fabric != "efa":
        raise ValueError(f"the EFA guard is for fabric 'efa' only (got {fabric!r}); render no init container")
    if expected_efa < 1:
        raise ValueError(f"expected_efa must be at least 1 (got {expected_efa}); an EFA pod requests its devices")
    if expected_gpus < 0:
        raise ValueError(f"expected_gpus must be >= 0 (got {expected_gpus})")
    resources: dict[str, k8s_l1.Quantity] = {
        contract.EFA_RESOURCE: count(expected_efa),
        "cpu": millicores(GUARD_CPU_MILLICORES),
        "memory": mebibytes(GUARD_MEMORY_MIB),
    }
    variables = [
        k8s_l1.EnvVar(name="EFA_GUARD_EXPECTED_EFA", value=str(expected_efa)),
        k8s_l1.EnvVar(name="EFA_GUARD_EXPECTED_GPUS", value=str(expected_gpus)),
        _field_env("NODE_NAME", "spec.nodeName"),
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
    ]
    taken = {v.name for v in variables}
    variables += [k8s_l1.EnvVar(name=k, value=v) for k, v in env if k not in taken]
    return k8s_l1.Container(
        name=contract.EFA_GUARD_CONTAINER,
        image=image,
        image_pull_policy="IfNotPresent",
        command=["/bin/sh", "-c", guard_script(), SCRIPT_NAME],
        env=variables,
        # requests = limits: extended resources must match, and equal cpu/memory keep the pod's QoS class
        resources=k8s_l1.ResourceRequirements(limits=resources, requests=dict(resources)),
        termination_message_policy="FallbackToLogsOnError",
    )
