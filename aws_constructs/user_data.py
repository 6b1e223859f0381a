"""User data for EFA nodes, as the MIME multi-part document EKS managed node groups merge.

EKS managed node groups with an AL2023 AMI type accept user data only as MIME multi-part; EKS adds
its own part (the nodeadm ``NodeConfig`` with the cluster's name, endpoint and CA). Ours has up to two parts:

- a shell script that cloud-init runs before ``nodeadm-run`` starts the kubelet, so the kubelet sees the
  2 MiB hugepages that pods request as ``hugepages-2Mi`` (libfabric's bounce buffers), and, when the
  cluster has FSx for Lustre storage, the Lustre client is installed before any volume is mounted;
- a nodeadm ``NodeConfig`` (``Content-Type: application/node.eks.aws``) whose ``spec.kubelet.config``
  carries the node group's kubelet CPU manager and Topology Manager settings (:mod:`efa_stack.planning.tuning`).
  nodeadm merges every ``NodeConfig`` of the user data in the order they appear, a later value winning
  (awslabs/amazon-eks-ami@v20260724 nodeadm/doc/examples.md, "Merging multiple configuration objects";
  nodeadm/internal/api/merge.go merges ``spec.kubelet.config`` key by key), and writes the user-provided
  kubelet config as a kubelet drop-in file (nodeadm/doc/api-concepts.md). The part sets only keys EKS's
  own part does not set, so the order of the two does not matter.

Nothing here touches GPU clocks or persistence mode: the EKS AL2023 NVIDIA AMI already turns persistence
mode on, disables auto boost and sets the application clocks to the highest supported memory and graphics
clocks at every boot (amazon-eks-ami@v20260724 templates/al2023/runtime/bin/set-nvidia-clocks, run by
``set-nvidia-clocks.service``, enabled in templates/al2023/provisioners/install-nvidia-driver.sh), which is
what the EC2 guide "Optimize GPU settings" asks for. Rendered user data is kept as golden files in
``tests/golden/user_data/``.
"""

from __future__ import annotations

from collections.abc import Mapping

BOUNDARY = "==EFASTACK=="
NODECONFIG_CONTENT_TYPE = "application/node.eks.aws"
NODECONFIG_API_VERSION = "node.eks.aws/v1alpha1"
SYSCTL_FILE = "/etc/sysctl.d/90-efa-stack-hugepages.conf"
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


def node_user_data(
    hugepages_mib: int = 0, lustre_client: bool = False, kubelet_config: Mapping[str, str] | None = None
) -> str | None:
    """The MIME document for a node, or None when nothing needs to run or be configured.

    ``lustre_client`` installs the Lustre client from the Amazon Linux repository (the EKS AL2023 AMIs
    do not ship it; the FSx CSI driver's mounts need it). ``kubelet_config`` (``KubeletConfiguration`` keys,
    e.g. ``{"cpuManagerPolicy": "static"}``) becomes a ``NodeConfig`` part; empty or None writes none.
    """
    parts: list[tuple[str, str]] = []
    script = _script(hugepages_mib, lustre_client)
    if script is not None:
        parts.append(('text/x-shellscript; charset="us-ascii"', script))
    if kubelet_config:
        parts.append((NODECONFIG_CONTENT_TYPE, node_config(kubelet_config)))
    if not parts:
        return None
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"', ""]
    for content_type, body in parts:
        lines += [f"--{BOUNDARY}", f"Content-Type: {content_type}", "", body, ""]
    lines += [f"--{BOUNDARY}--", ""]
    return "\n".join(lines)


def _script(hugepages_mib: int, lustre_client: bool) -> str | None:
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
    return "\n".join(lines)
