"""User data for EFA nodes, as the MIME multi-part document EKS managed node groups merge.

EKS managed node groups with an AL2023 AMI type accept user data only as MIME multi-part; EKS adds
its own part (the nodeadm ``NodeConfig``). Ours is a shell script that cloud-init runs before
``nodeadm-run`` starts the kubelet, so the kubelet sees the 2 MiB hugepages that pods request as
``hugepages-2Mi`` (libfabric's bounce buffers), and, when the cluster has FSx for Lustre storage, the
Lustre client is installed before any volume is mounted. Rendered user data is kept as golden files in
``tests/golden/user_data/``.
"""

from __future__ import annotations

BOUNDARY = "==EFASTACK=="
SYSCTL_FILE = "/etc/sysctl.d/90-efa-stack-hugepages.conf"
HUGEPAGE_MIB = 2


def hugepages(mib: int) -> int:
    """Number of 2 MiB pages that hold ``mib`` MiB."""
    if mib < 0:
        raise ValueError(f"hugepages must be >= 0 MiB, got {mib}")
    return -(-mib // HUGEPAGE_MIB)


def node_user_data(hugepages_mib: int = 0, lustre_client: bool = False) -> str | None:
    """The MIME document for a node, or None when nothing needs to run.

    ``lustre_client`` installs the Lustre client from the Amazon Linux repository (the EKS AL2023 AMIs
    do not ship it; the FSx CSI driver's mounts need it).
    """
    if hugepages_mib <= 0 and not lustre_client:
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
    script = "\n".join(lines)
    return "\n".join([
        "MIME-Version: 1.0",
        f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"',
        "",
        f"--{BOUNDARY}",
        'Content-Type: text/x-shellscript; charset="us-ascii"',
        "",
        script,
        "",
        f"--{BOUNDARY}--",
        "",
    ])
