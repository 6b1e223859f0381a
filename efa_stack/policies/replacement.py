"""Which long-lived resources a template change would replace.

CloudFormation replaces a resource when its logical id disappears or when a property marked
"Update requires: Replacement" changes. This module knows those properties for the resources whose
replacement destroys state (VPC and subnets, the EKS cluster, the secrets key, file systems) and
compares two synthesized templates. Node groups, launch templates and Kubernetes manifests are left
out on purpose: they are meant to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Properties whose change replaces the resource (CloudFormation resource reference, "Update requires").
REPLACING_PROPERTIES: dict[str, tuple[str, ...]] = {
    "AWS::EC2::VPC": ("CidrBlock", "InstanceTenancy", "Ipv4IpamPoolId"),
    "AWS::EC2::Subnet": ("AvailabilityZone", "CidrBlock", "VpcId", "AvailabilityZoneId"),
    "AWS::EKS::Cluster": ("Name", "RoleArn", "EncryptionConfig", "KubernetesNetworkConfig", "BootstrapSelfManagedAddons"),
    "AWS::KMS::Key": (),
    "AWS::FSx::FileSystem": (
        "FileSystemType", "StorageType", "SubnetIds", "SecurityGroupIds", "KmsKeyId", "FileSystemTypeVersion",
    ),
}
LUSTRE_REPLACING = ("DeploymentType", "ImportPath", "ExportPath", "ImportedFileChunkSize", "DriveCacheType")


@dataclass(frozen=True)
class Replacement:
    logical_id: str
    type: str
    why: str


def replaced_resources(before: dict[str, Any], after: dict[str, Any]) -> list[Replacement]:
    out: list[Replacement] = []
    res_after = after.get("Resources", {})
    for lid, res in before.get("Resources", {}).items():
        type_ = res.get("Type")
        if type_ not in REPLACING_PROPERTIES:
            continue
        new = res_after.get(lid)
        if new is None:
            out.append(Replacement(lid, type_, "logical id removed or renamed"))
            continue
        old_p, new_p = res.get("Properties", {}), new.get("Properties", {})
        for prop in REPLACING_PROPERTIES[type_]:
            if old_p.get(prop) != new_p.get(prop):
                out.append(Replacement(lid, type_, f"{prop} changed"))
        if type_ == "AWS::FSx::FileSystem":
            old_l, new_l = old_p.get("LustreConfiguration", {}), new_p.get("LustreConfiguration", {})
            for prop in LUSTRE_REPLACING:
                if old_l.get(prop) != new_l.get(prop):
                    out.append(Replacement(lid, type_, f"LustreConfiguration.{prop} changed"))
    return out
