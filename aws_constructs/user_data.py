"""User data for EFA nodes, as the MIME multi-part document EKS managed node groups merge.

EKS managed node groups with an AL2023 AMI type accept user data only as MIME multi-part; EKS adds
its own part (the nodeadm ``NodeConfig``). Ours is a shell script that cloud-init runs before
``nodeadm-run`` starts the kubelet, so the kubelet sees the 2 MiB hugepages that pods request as
``hugepages-2Mi`` (libfabric's bounce buffers). Rendered user data is kept as golden files in
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


def efa_user_data(hugepages_mib: int) -> str | None:
    """The MIME document for an EFA node, or None when nothing needs to run."""
    if hugepages_mib <= 0:
        return None
    pages = hugepages(hugepages_mib)
    script = "\n".join([
        "#!/bin/bash",
        f"# efa-stack: reserve {hugepages_mib} MiB of 2 MiB hugepages ({pages} pages) before the kubelet starts",
        "set -euo pipefail",
        f'echo "vm.nr_hugepages = {pages}" > {SYSCTL_FILE}',
        f"sysctl -w vm.nr_hugepages={pages}",
    ])
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
