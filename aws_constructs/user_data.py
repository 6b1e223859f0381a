"""The nodes' user data: :mod:`efa_stack.planning.user_data` (launch templates here, Karpenter's EC2NodeClass in
:mod:`k8s.karpenter`: one document for both), re-exported for the constructs and their users."""

from __future__ import annotations

from efa_stack.planning.user_data import (
    BOUNDARY,
    HUGEPAGE_MIB,
    NODECONFIG_API_VERSION,
    NODECONFIG_CONTENT_TYPE,
    SYSCTL_FILE,
    cluster_node_config,
    hugepages,
    node_config,
    node_user_data,
)

__all__ = [
    "BOUNDARY",
    "HUGEPAGE_MIB",
    "NODECONFIG_API_VERSION",
    "NODECONFIG_CONTENT_TYPE",
    "SYSCTL_FILE",
    "cluster_node_config",
    "hugepages",
    "node_config",
    "node_user_data",
]
