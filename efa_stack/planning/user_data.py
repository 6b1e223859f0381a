"""User data for EFA nodes, as the MIME multi-part document EKS managed node groups and Karpenter (EC2NodeClass
``userData``) merge.

The parts: a script that reserves the 2 MiB hugepages (and installs the Lustre client with FSx, and with an
EFA-enabled file system runs AWS's EFA client setup), and a nodeadm ``NodeConfig`` with the kubelet CPU/topology
settings of :mod:`efa_stack.planning.tuning`; on UltraServer nodes also a script that sets NVIDIA kernel module options
(:func:`module_option_script`) and a ``NodeConfig`` that stripes the instance stores (:func:`instance_node_config`).
GPU clocks are left to the AMI. How nodeadm merges the parts, with sources: docs/design/node-tuning.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from efa_stack.planning import lustre_efa as efa_fsx
from efa_stack.planning.node_groups import LustreEfaClient

BOUNDARY = "==EFASTACK=="
NODECONFIG_CONTENT_TYPE = "application/node.eks.aws"
NODECONFIG_API_VERSION = "node.eks.aws/v1alpha1"
SYSCTL_FILE = "/etc/sysctl.d/90-efa-stack-hugepages.conf"
MODPROBE_FILE = "/etc/modprobe.d/90-efa-stack-nvidia.conf"
"""Where the NVIDIA module options go; the EKS AL2023 NVIDIA AMI writes its own to ``40-eks-nvidia-openrm.conf``
(awslabs/amazon-eks-ami@v20260724 templates/al2023/runtime/gpu/nvidia-kmod-load.sh)."""
LOCAL_STORAGE_STRATEGIES = ("RAID0", "RAID10", "Mount")
"""nodeadm's instance store policies (awslabs/amazon-eks-ami@v20260724 nodeadm/api/v1alpha1/nodeconfig_types.go
``LocalStorageStrategy``)."""
NVIDIA_MODULES = ("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem", "nvidia")
"""The NVIDIA kernel modules, users before the module they use (unloaded in this order, loaded back in reverse)."""
HUGEPAGE_MIB = 2


def hugepages(mib: int) -> int:
    """Number of 2 MiB pages that hold ``mib`` MiB."""
    if mib < 0:
        raise ValueError(f"hugepages must be >= 0 MiB, got {mib}")
    return -(-mib // HUGEPAGE_MIB)


_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")


def node_config(kubelet_config: Mapping[str, str]) -> str:
    """A nodeadm ``NodeConfig`` YAML document with ``spec.kubelet.config`` = ``kubelet_config``."""
    lines = [
        "---",
        f"apiVersion: {NODECONFIG_API_VERSION}",
        "kind: NodeConfig",
        "spec:",
        "  kubelet:",
        "    config:",
    ]
    for key, value in kubelet_config.items():
        if not key or not set(key) <= _PLAIN or not value or not set(value) <= _PLAIN:
            raise ValueError(f"kubelet config {key!r}: {value!r} must be letters, digits and '-'")
        lines.append(f"      {key}: {value}")
    return "\n".join(lines)


def instance_node_config(local_storage: str) -> str:
    """A nodeadm ``NodeConfig`` with ``spec.instance.localStorage.strategy``: nodeadm assembles the instance stores
    (``RAID0``: one striped volume) and puts the kubelet's and containerd's directories on it (the EKS GB200 page:
    "Setting to RAID0 stripes the instance stores and configures the container runtime and kubelet to make use of this
    ephemeral storage")."""
    if local_storage not in LOCAL_STORAGE_STRATEGIES:
        raise ValueError(f"local storage strategy {local_storage!r}: one of {', '.join(LOCAL_STORAGE_STRATEGIES)}")
    return "\n".join([
        "---",
        f"apiVersion: {NODECONFIG_API_VERSION}",
        "kind: NodeConfig",
        "spec:",
        "  instance:",
        "    localStorage:",
        f"      strategy: {local_storage}",
    ])


def module_option_script(options: Sequence[tuple[str, str]]) -> str:
    """A script that sets ``NVreg_<name>=<value>`` options of the ``nvidia`` kernel module before the kubelet starts.

    **Not proven on hardware** (no document read says how to set a module option on the EKS AL2023 NVIDIA AMI; the
    AMI sets none of these itself: awslabs/amazon-eks-ami@v20260724 templates/al2023/runtime/gpu/nvidia-kmod-load.sh
    writes only ``NVreg_CoherentGPUMemoryMode`` and, on g4dn/g5/g5g, ``NVreg_EnableGpuFirmware``). What it does:

    1. writes the options to :data:`MODPROBE_FILE`, which modprobe reads whenever it loads the module;
    2. waits for the AMI's ``nvidia-kmod-load.service`` (a oneshot that installs the driver kind the GPUs need and
       runs ``After=network-online.target``, as cloud-init's final stage does: ``systemctl start`` returns once it has
       run);
    3. when the module is loaded already without the options (``/proc/driver/nvidia/params``), stops the NVIDIA
       services that hold it, unloads the NVIDIA modules, loads them back and starts the services again.

    The script runs in cloud-init's final stage, which nodeadm waits for before it starts the kubelet
    (``nodeadm-run.service``: ``After=nodeadm-config.service cloud-final.service``, same tag,
    templates/al2023/runtime/rootfs/etc/systemd/system/nodeadm-run.service). It never fails the boot: a node where it
    could not reload the module joins, and ``efa-stack verify --acceptance`` fails it (its NVreg check)."""
    for name, value in options:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name) or not re.fullmatch(r"[0-9A-Za-z]+", value):
            raise ValueError(f"module option {name}={value}: letters and digits only")
    line = "options nvidia " + " ".join(f"NVreg_{k}={v}" for k, v in options)
    wanted = " && ".join(f"grep -qx '{k}: {v}' /proc/driver/nvidia/params" for k, v in options)
    loaded = " ".join(NVIDIA_MODULES)
    return "\n".join([
        "#!/bin/bash",
        "set -uo pipefail",
        "# efa-stack: NVIDIA kernel module options (EFA on NVIDIA Grace Blackwell needs NVreg_GrdmaPciTopoCheckOverride=1,",
        "# or NCCL falls back to sockets). Not proven on hardware: `efa-stack verify --acceptance` checks the result.",
        f'echo "{line}" > {MODPROBE_FILE}',
        "systemctl start nvidia-kmod-load.service || echo 'efa-stack: nvidia-kmod-load.service did not run' >&2",
        "if [ ! -r /proc/driver/nvidia/params ]; then exit 0; fi  # not loaded yet: modprobe will read the options",
        f"if {wanted}; then exit 0; fi",
        'echo "efa-stack: the nvidia module is loaded without its options: reloading it" >&2',
        "services=()",
        "for unit in nvidia-imex nvidia-fabricmanager nvidia-persistenced; do",
        '  if systemctl is-active --quiet "$unit"; then systemctl stop "$unit" && services+=("$unit"); fi',
        "done",
        "reload=()",
        f"for module in {loaded}; do",
        '  if [ -d "/sys/module/$module" ]; then',
        '    if modprobe -r "$module"; then reload=("$module" "${reload[@]}"); else',
        '      echo "efa-stack: cannot unload $module (in use): the options take effect at the next boot" >&2; break',
        "    fi",
        "  fi",
        "done",
        'for module in "${reload[@]}"; do modprobe "$module" || echo "efa-stack: cannot load $module" >&2; done',
        'for unit in "${services[@]}"; do systemctl start "$unit" || echo "efa-stack: cannot start $unit" >&2; done',
        "exit 0",
    ])


def node_user_data(
    hugepages_mib: int = 0,
    lustre_client: bool = False,
    kubelet_config: Mapping[str, str] | None = None,
    *,
    pre_bootstrap_commands: Sequence[str] = (),
    extra_node_config: str | None = None,
    cluster_node_config: str | None = None,
    lustre_efa: LustreEfaClient | None = None,
    module_options: Sequence[tuple[str, str]] = (),
    local_storage: str | None = None,
) -> str | None:
    """The MIME document for a node, or None when nothing needs to run or be configured.

    ``lustre_client`` installs the Lustre client from the Amazon Linux repository (the EKS AL2023 AMIs
    do not ship it; the FSx CSI driver's mounts need it). ``kubelet_config`` (``KubeletConfiguration`` keys,
    e.g. ``{"cpuManagerPolicy": "static"}``) becomes a ``NodeConfig`` part; empty or None writes none.
    ``pre_bootstrap_commands`` (eksctl ``preBootstrapCommands``) run in a script part after efa-stack's;
    ``extra_node_config`` (eksctl ``overrideBootstrapCommand``, a ``NodeConfig`` YAML document) is a further
    part that nodeadm merges after efa-stack's (the plan refuses kubelet settings on which the two disagree).
    ``cluster_node_config`` (:func:`cluster_node_config`, for a custom AMI, where EKS adds no bootstrap of its
    own) comes first among the ``NodeConfig`` parts. ``lustre_efa`` (with ``lustre_client``) runs AWS's EFA client
    setup for an EFA-enabled file system after the client is installed (:func:`lustre_efa_commands`).
    ``module_options`` (UltraServer nodes) set NVIDIA kernel module options before the kubelet starts
    (:func:`module_option_script`); ``local_storage`` adds a ``NodeConfig`` with nodeadm's instance store policy
    (:func:`instance_node_config`).
    """
    if lustre_efa is not None and not lustre_client:
        raise ValueError("lustre_efa configures the Lustre client for EFA: it needs lustre_client")
    parts: list[tuple[str, str]] = []
    script = _script(hugepages_mib, lustre_client, lustre_efa)
    if script is not None:
        parts.append(('text/x-shellscript; charset="us-ascii"', script))
    if module_options:
        parts.append(('text/x-shellscript; charset="us-ascii"', module_option_script(module_options)))
    if pre_bootstrap_commands:
        body = "\n".join(["#!/bin/bash", "set -euo pipefail", "# eksctl preBootstrapCommands", *pre_bootstrap_commands])
        parts.append(('text/x-shellscript; charset="us-ascii"', body))
    if cluster_node_config:
        parts.append((NODECONFIG_CONTENT_TYPE, cluster_node_config))
    if kubelet_config:
        parts.append((NODECONFIG_CONTENT_TYPE, node_config(kubelet_config)))
    if local_storage:
        parts.append((NODECONFIG_CONTENT_TYPE, instance_node_config(local_storage)))
    if extra_node_config:
        if BOUNDARY in extra_node_config:
            raise ValueError(f"the NodeConfig document must not contain the MIME boundary {BOUNDARY}")
        parts.append((NODECONFIG_CONTENT_TYPE, "---\n" + extra_node_config.strip()))
    if not parts:
        return None
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"', ""]
    for content_type, body in parts:
        lines += [f"--{BOUNDARY}", f"Content-Type: {content_type}", "", body, ""]
    lines += [f"--{BOUNDARY}--", ""]
    return "\n".join(lines)


def lustre_efa_commands(client: LustreEfaClient) -> list[str]:
    """AWS's EFA client setup for FSx for Lustre (FSx for Lustre User Guide, "Configuring EFA clients", Quick setup):
    download the package, unzip it, run ``setup.sh`` (``--optimized-for-gds`` with ``client.gds``). The script loads
    the Lustre EFA modules, adds the EFA devices to LNet and creates the systemd unit
    ``configure-efa-fsx-lustre-client.service``, which does it again on every boot; ``efa-stack verify --acceptance``
    checks the unit and LNet. The EKS AL2023 AMIs have no nodeadm gate for it yet
    (:data:`efa_stack.planning.lustre_efa.NODEADM_GATE`)."""
    flag = f" {efa_fsx.GDS_FLAG}" if client.gds else ""
    return [
        "# efa-stack: AWS's EFA client setup for FSx for Lustre: LNet over the EFA devices, again on every boot",
        "dnf install -y unzip",
        'efa_fsx=$(mktemp -d)',
        f'curl -fsSL --retry 5 --retry-connrefused -o "$efa_fsx/client.zip" {efa_fsx.CLIENT_PACKAGE_URL}',
        'unzip -q "$efa_fsx/client.zip" -d "$efa_fsx"',
        f'(cd "$efa_fsx/{efa_fsx.CLIENT_DIRECTORY}" && ./setup.sh{flag})',
        'rm -rf "$efa_fsx"',
    ]


def _script(hugepages_mib: int, lustre_client: bool, lustre_efa: LustreEfaClient | None = None) -> str | None:
    if hugepages_mib < 0:
        raise ValueError(f"hugepages must be >= 0 MiB, got {hugepages_mib}")
    if hugepages_mib == 0 and not lustre_client:
        return None
    lines = ["#!/bin/bash", "set -euo pipefail"]
    if hugepages_mib > 0:
        pages = hugepages(hugepages_mib)
        lines += [
            f"# efa-stack: reserve {hugepages_mib} MiB of 2 MiB hugepages ({pages} pages) before the kubelet starts",
            f'echo "vm.nr_hugepages = {pages}" > {SYSCTL_FILE}',
            f"sysctl -w vm.nr_hugepages={pages}",
        ]
    if lustre_client:
        lines += [
            "# efa-stack: the Lustre client for FSx for Lustre volumes",
            "dnf install -y lustre-client",
        ]
    if lustre_efa is not None:
        lines += lustre_efa_commands(lustre_efa)
    return "\n".join(lines)


def cluster_node_config(name: str, endpoint: str, certificate_authority: str, service_cidr: str) -> str:
    """A nodeadm ``NodeConfig`` with the cluster's details (``spec.cluster``), which nodes of a custom AMI need:
    for managed node groups with the EKS AMI types, EKS writes this part itself. The values may be CDK tokens."""
    return "\n".join([
        "---",
        f"apiVersion: {NODECONFIG_API_VERSION}",
        "kind: NodeConfig",
        "spec:",
        "  cluster:",
        f"    name: {name}",
        f"    apiServerEndpoint: {endpoint}",
        f"    certificateAuthority: {certificate_authority}",
        f"    cidr: {service_cidr}",
    ])
