"""Kubernetes objects for the FSx for Lustre file system: a static volume, its claim, a StorageClass.

:func:`storage_manifests` returns PersistentVolume ``fsx-pv``, claim ``fsx-claim`` and optionally
StorageClass ``fsx-lustre``; their values may be CloudFormation tokens, so they are applied by the storage
stack and never written to ``dist/``. Details and sources: docs/design/storage.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s
from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract

MOUNT_OPTIONS = ("flock",)
"""``flock``: POSIX locks coherent across clients (the driver's static-provisioning example)."""

COMMON_LABELS = {"app.kubernetes.io/part-of": "efa-stack", "app.kubernetes.io/component": "storage"}


@dataclass(frozen=True)
class StaticVolumeProps:
    """A PV for an existing file system and the claim bound to it."""

    file_system_id: str
    dns_name: str
    mount_name: str
    capacity: str
    """Kubernetes quantity, e.g. ``1200Gi`` (the file system's capacity)."""
    volume_name: str = contract.FSX_VOLUME_NAME
    claim_name: str = contract.FSX_CLAIM_NAME
    claim_namespace: str = contract.FSX_CLAIM_NAMESPACE


@dataclass(frozen=True)
class StorageClassProps:
    """Parameters of the driver's dynamic provisioning (keys as the driver reads them)."""

    subnet_id: str
    security_group_ids: tuple[str, ...]
    deployment_type: str
    per_unit_storage_throughput: int | None
    data_compression: str
    lustre_version: str
    name: str = contract.FSX_STORAGE_CLASS_NAME

    def parameters(self) -> dict[str, str]:
        out = {
            "subnetId": self.subnet_id,
            "securityGroupIds": ",".join(self.security_group_ids),
            "deploymentType": self.deployment_type,
            "dataCompressionType": self.data_compression,
            "fileSystemTypeVersion": self.lustre_version,
        }
        if self.per_unit_storage_throughput is not None:
            out["perUnitStorageThroughput"] = str(self.per_unit_storage_throughput)
        return out


class FsxStaticVolume(Construct):
    """``PersistentVolume`` + ``PersistentVolumeClaim`` (ReadWriteMany) for one FSx for Lustre file system."""

    def __init__(self, scope: Construct, id: str, props: StaticVolumeProps) -> None:
        super().__init__(scope, id)
        capacity = {"storage": k8s_l1.Quantity.from_string(props.capacity)}
        self.volume = k8s_l1.KubePersistentVolume(
            self,
            "Volume",
            metadata=k8s_l1.ObjectMeta(name=props.volume_name, labels=dict(COMMON_LABELS)),
            spec=k8s_l1.PersistentVolumeSpec(
                capacity=capacity,
                volume_mode="Filesystem",
                access_modes=["ReadWriteMany"],
                mount_options=list(MOUNT_OPTIONS),
                persistent_volume_reclaim_policy="Retain",
                storage_class_name="",
                csi=k8s_l1.CsiPersistentVolumeSource(
                    driver=contract.FSX_CSI_DRIVER,
                    volume_handle=props.file_system_id,
                    volume_attributes={"dnsname": props.dns_name, "mountname": props.mount_name},
                ),
            ),
        )
        self.claim = k8s_l1.KubePersistentVolumeClaim(
            self,
            "Claim",
            metadata=k8s_l1.ObjectMeta(
                name=props.claim_name, namespace=props.claim_namespace, labels=dict(COMMON_LABELS)
            ),
            spec=k8s_l1.PersistentVolumeClaimSpec(
                access_modes=["ReadWriteMany"],
                storage_class_name="",
                volume_name=props.volume_name,
                resources=k8s_l1.VolumeResourceRequirements(requests=capacity),
            ),
        )


class FsxStorageClass(Construct):
    """``StorageClass`` for dynamic provisioning: one new FSx for Lustre file system per claim."""

    def __init__(self, scope: Construct, id: str, props: StorageClassProps) -> None:
        super().__init__(scope, id)
        self.storage_class = k8s_l1.KubeStorageClass(
            self,
            "Resource",
            metadata=k8s_l1.ObjectMeta(name=props.name, labels=dict(COMMON_LABELS)),
            provisioner=contract.FSX_CSI_DRIVER,
            parameters=props.parameters(),
            mount_options=list(MOUNT_OPTIONS),
            reclaim_policy="Delete",
            volume_binding_mode="Immediate",
        )


def storage_chart(app: Construct, volume: StaticVolumeProps, storage_class: StorageClassProps | None = None) -> cdk8s.Chart:
    """The storage chart: the static volume and claim, and the StorageClass when asked for."""
    chart = cdk8s.Chart(app, "storage", disable_resource_name_hashes=True)
    FsxStaticVolume(chart, "Static", volume)
    if storage_class is not None:
        FsxStorageClass(chart, "Dynamic", storage_class)
    return chart


def storage_manifests(volume: StaticVolumeProps, storage_class: StorageClassProps | None = None) -> list[dict]:
    """The chart's objects as plain dicts (PV, PVC, then the StorageClass), tokens left in place."""
    return list(storage_chart(cdk8s.App(), volume, storage_class).to_json())
