"""Objects a CDK stack applies beside the rollout's charts, which the rehearsal applies in their place.

The storage stack applies the FSx for Lustre volume and its claim (``fsx-pv``, ``fsx-claim``: k8s/storage.py
:func:`~k8s.storage.storage_manifests`) with the file system's id, DNS name and mount name, which exist only once
CloudFormation made the file system; jobs that mount the claim wait for it. The rehearsal renders the same objects with
stand-in values for those three (no CSI driver runs: kwok runs a pod whose claim is bound, and mounts nothing), so the
claim binds to the volume as on EKS (kube-controller-manager's volume binder) and the jobs' pods schedule.
"""

from __future__ import annotations

from typing import Any

from efa_stack.planning.plan import ClusterPlan

STAND_IN_FILE_SYSTEM = "fs-0rehearsal00000000"
"""A file system id of the form FSx gives (``fs-`` and 17 hexadecimal digits)."""


def stack_objects(plan: ClusterPlan) -> list[dict[str, Any]]:
    """The objects the stacks apply for ``plan`` outside its charts: the FSx volume and claim (none without storage)."""
    if plan.storage is None:
        return []
    from k8s.storage import StaticVolumeProps, storage_manifests

    storage = plan.storage
    volume = StaticVolumeProps(
        file_system_id=STAND_IN_FILE_SYSTEM, dns_name=f"{STAND_IN_FILE_SYSTEM}.fsx.{plan.region}.amazonaws.com",
        mount_name="rehearsal", capacity=storage.capacity_quantity, volume_name=storage.volume_name,
        claim_name=storage.claim_name, claim_namespace=storage.claim_namespace,
    )
    return [dict(o) for o in storage_manifests(volume)]
