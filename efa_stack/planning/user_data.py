"""User data for EFA nodes, as the MIME multi-part document EKS managed node groups and Karpenter (EC2NodeClass
``userData``) merge.

Up to two parts: a script that reserves the 2 MiB hugepages (and installs the Lustre client with FSx),
and a nodeadm ``NodeConfig`` with the kubelet CPU/topology settings of :mod:`efa_stack.planning.tuning`.
GPU clocks are left to the AMI. How nodeadm merges the parts, with sources: docs/design/node-tuning.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
    hugepages_mib: int = 0,
    lustre_client: bool = False,
    kubelet_config: Mapping[str, str] | None = None,
    *,
    pre_bootstrap_commands: Sequence[str] = (),
    extra_node_config: str | None = None,
    cluster_node_config: str | None = None,
) -> str | None:
    """The MIME document for a node, or None when nothing needs to run or be configured.

    ``lustre_client`` installs the Lustre client from the Amazon Linux repository (the EKS AL2023 AMIs
    do not ship it; the FSx CSI driver's mounts need it). ``kubelet_config`` (``KubeletConfiguration`` keys,
    e.g. ``{"cpuManagerPolicy": "static"}``) becomes a ``NodeConfig`` part; empty or None writes none.
    ``pre_bootstrap_commands`` (eksctl ``preBootstrapCommands``) run in a script part after efa-stack's;
    ``extra_node_config`` (eksctl ``overrideBootstrapCommand``, a ``NodeConfig`` YAML document) is a further
    part that nodeadm merges after efa-stack's (the plan refuses kubelet settings on which the two disagree).
    ``cluster_node_config`` (:func:`cluster_node_config`, for a custom AMI, where EKS adds no bootstrap of its
    own) comes first among the ``NodeConfig`` parts.
    """
    parts: list[tuple[str, str]] = []
    script = _script(hugepages_mib, lustre_client)
    if script is not None:
        parts.append(('text/x-shellscript; charset="us-ascii"', script))
    if pre_bootstrap_commands:
        body = "\n".join(["#!/bin/bash", "set -euo pipefail", "# eksctl preBootstrapCommands", *pre_bootstrap_commands])
        parts.append(('text/x-shellscript; charset="us-ascii"', body))
    if cluster_node_config:
        parts.append((NODECONFIG_CONTENT_TYPE, cluster_node_config))
    if kubelet_config:
        parts.append((NODECONFIG_CONTENT_TYPE, node_config(kubelet_config)))
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
