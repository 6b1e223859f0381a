"""The cluster's storage: FSx for Lustre for training data, the FSx CSI driver and the volume for jobs.

Part of the cluster stack, so that the file system (which needs only the network) is created alongside the EKS
cluster rather than after it (docs/design/deploy-model.md). Holds data, so the file system and its S3 link are
retained when the stack is deleted or a change would replace them (:mod:`aws_constructs.fsx`). It also installs
the ``aws-fsx-csi-driver`` add-on with its Pod Identity role and applies the volume, claim and optional
StorageClass (docs/design/storage.md).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from aws_constructs.fsx import LustreFileSystem, LustreFileSystemProps
from aws_constructs.pod_identity import associate_with_addon, pod_identity_role
from aws_constructs.security import acknowledge
from efa_stack.planning.plan import ClusterPlan
from efa_stack.planning.storage import StoragePlan
from k8s.storage import StaticVolumeProps, StorageClassProps, storage_manifests
from stacks.addons import apply_addon_settings
from stacks.cluster_stack import ClusterStack
from stacks.network_stack import ClusterNetwork

FSX_CSI_ADDON = "aws-fsx-csi-driver"
FSX_CSI_CONTROLLER_SA = "fsx-csi-controller-sa"
"""The controller's service account in the add-on and the driver's Helm chart (``controller.serviceAccount.name``)."""
FSX_CSI_VOLUME_TAG = "CSIVolumeName"
"""Tag the driver puts on every file system it creates (``pkg/cloud/cloud.go`` ``VolumeNameTagKey``)."""
FSX_SERVICE_LINKED_ROLE = "aws-service-role/fsx.amazonaws.com/AWSServiceRoleForAmazonFSx"


# No configurationValues: EKS validates them against the add-on's own configuration schema
# (`aws eks describe-addon-configuration --addon-name aws-fsx-csi-driver`), which is not published
# with the driver. The add-on is built from the driver's Helm chart, whose node DaemonSet tolerates
# every taint by default (kubernetes-sigs/aws-fsx-csi-driver@05bcb51 charts/aws-fsx-csi-driver/
# values.yaml: `node.tolerateAllTaints: true`), so it runs on the tainted GPU/Neuron nodes as it is.
FSX_CSI_CONFIGURATION: dict[str, Any] | None = None


class ClusterStorage(Construct):
    """The plan's FSx for Lustre file system in its zone's private subnet, the FSx CSI driver add-on with its Pod
    Identity role, and the static volume, claim and optional StorageClass the jobs mount (module docstring)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        plan: ClusterPlan,
        network: ClusterNetwork,
        cluster: ClusterStack,
        storage: StoragePlan,
    ) -> None:
        super().__init__(scope, id)
        self.plan = plan
        self.storage = storage
        cluster_sg = cluster.cluster.cluster_security_group_id
        subnet = network.private_subnet(storage.availability_zone)
        self.lustre = LustreFileSystem(
            self,
            "Lustre",
            LustreFileSystemProps(
                deployment_type=storage.deployment_type,
                storage_capacity_gib=storage.capacity_gib,
                per_unit_storage_throughput=storage.per_unit_storage_throughput,
                data_compression=storage.data_compression,
                s3=storage.s3,
                lustre_version=storage.lustre_version,
                metadata=storage.metadata,
                efa_enabled=storage.efa,
            ),
            vpc=network.vpc,
            subnet=subnet,
            client_security_group_ids=[cluster_sg],
            efa_security_group=network.efa if storage.efa else None,
        )
        self.csi_role = self._csi_role()
        self.csi_driver = eks.Addon(
            self,
            "FsxCsiDriver",
            cluster=cluster.cluster,
            addon_name=FSX_CSI_ADDON,
            configuration_values=FSX_CSI_CONFIGURATION,
            preserve_on_delete=False,
        )
        settings = plan.addon(FSX_CSI_ADDON)
        if settings is not None:  # the spec's addons entry for the driver (version, configurationValues, tags)
            apply_addon_settings(self.csi_driver, settings)
        associate_with_addon(self.csi_driver, self.csi_role, FSX_CSI_CONTROLLER_SA)
        storage_class = None
        if storage.dynamic_provisioning:
            storage_class = StorageClassProps(
                subnet_id=subnet.subnet_id,
                security_group_ids=(self.lustre.security_group_id,),
                deployment_type=storage.deployment_type,
                per_unit_storage_throughput=storage.per_unit_storage_throughput,
                data_compression=storage.data_compression,
                lustre_version=storage.lustre_version,
                name=storage.storage_class_name,
            )
        self.volume_manifest = eks.KubernetesManifest(
            self,
            "FsxVolume",
            cluster=cluster.cluster,
            manifest=storage_manifests(
                StaticVolumeProps(
                    file_system_id=self.lustre.file_system_id,
                    dns_name=self.lustre.dns_name,
                    mount_name=self.lustre.mount_name,
                    capacity=storage.capacity_quantity,
                    volume_name=storage.volume_name,
                    claim_name=storage.claim_name,
                    claim_namespace=storage.claim_namespace,
                ),
                storage_class,
            ),
        )
        self.volume_manifest.node.add_dependency(self.csi_driver)
        if self.lustre.association is not None:
            # Jobs that start right after the deploy see the imported listing.
            self.volume_manifest.node.add_dependency(self.lustre.association)
        # Pods mount the volume once the deploy is done: the nodes' Lustre rules are in place by then.
        for rule in self.lustre.security_group.client_rules:
            self.volume_manifest.node.add_dependency(rule)
        for output_id, value, description in (
            ("FileSystemId", self.lustre.file_system_id, "FSx for Lustre file system id"),
            ("MountName", self.lustre.mount_name, "Lustre mount name"),
            ("DnsName", self.lustre.dns_name, "File system DNS name"),
        ):
            CfnOutput(self, output_id, value=value, description=description).override_logical_id(output_id)

    @property
    def mount_path(self) -> str:
        """Where jobs mount the claim (``storage.mountPath``, default ``/fsx``)."""
        return self.storage.mount_path

    @property
    def claim_name(self) -> str:
        """The PersistentVolumeClaim jobs mount (``efa_stack.contract.FSX_CLAIM_NAME``)."""
        return self.storage.claim_name

    def _nag_arn(self, arn: str) -> str:
        """``arn`` as cdk-nag names it in a finding (pseudo parameters as ``<AWS::...>``)."""
        resolved = Stack.of(self).resolve(arn)
        if isinstance(resolved, str):
            return resolved
        parts = resolved["Fn::Join"][1]
        return "".join(p if isinstance(p, str) else f"<{p['Ref']}>" for p in parts)

    def _csi_role(self) -> iam.Role:
        """The CSI controller's role, trusted by EKS Pod Identity and scoped to what the driver does.

        Static provisioning only reads (``DescribeFileSystems``). Dynamic provisioning adds the
        driver's documented permissions (kubernetes-sigs/aws-fsx-csi-driver ``docs/install.md``),
        scoped: create and tag file systems only with the driver's ``CSIVolumeName`` tag, delete and
        resize only file systems that carry it (so never the retained static file system), and the
        FSx service-linked role only. The S3 and ``s3.data-source.lustre.fsx`` permissions of that
        policy are left out: the StorageClass does not link buckets.
        """
        role = pod_identity_role(
            self,
            "FsxCsiControllerRole",
            description=f"FSx for Lustre CSI controller ({FSX_CSI_CONTROLLER_SA}) through EKS Pod Identity",
        )
        role.add_to_policy(iam.PolicyStatement(
            sid="DescribeFileSystems", actions=["fsx:DescribeFileSystems"], resources=["*"],
        ))
        file_systems = Stack.of(self).format_arn(service="fsx", resource="file-system", resource_name="*")
        if self.storage.dynamic_provisioning:
            role.add_to_policy(iam.PolicyStatement(
                sid="CreateDriverFileSystems",
                actions=["fsx:CreateFileSystem", "fsx:TagResource"],
                resources=[file_systems],
                conditions={"Null": {f"aws:RequestTag/{FSX_CSI_VOLUME_TAG}": "false"}},
            ))
            role.add_to_policy(iam.PolicyStatement(
                sid="ManageDriverFileSystems",
                actions=["fsx:DeleteFileSystem", "fsx:UpdateFileSystem"],
                resources=[file_systems],
                conditions={"Null": {f"aws:ResourceTag/{FSX_CSI_VOLUME_TAG}": "false"}},
            ))
            role.add_to_policy(iam.PolicyStatement(
                sid="FsxServiceLinkedRole",
                actions=["iam:CreateServiceLinkedRole"],
                resources=[Stack.of(self).format_arn(service="iam", region="", resource="role", resource_name=FSX_SERVICE_LINKED_ROLE)],
                conditions={"StringLike": {"iam:AWSServiceName": "fsx.amazonaws.com"}},
            ))
        policy = role.node.find_child("DefaultPolicy")
        acknowledge(
            policy, "AwsSolutions-IAM5",
            "fsx:DescribeFileSystems is a list/read action; the driver calls it with ids it learns at run "
            "time and it grants no access to data.",
            "Resource::*",
        )
        if self.storage.dynamic_provisioning:
            acknowledge(
                policy, "AwsSolutions-IAM5",
                "Dynamically provisioned file systems get ids only when a claim is made; create/tag need "
                "the driver's CSIVolumeName request tag and delete/update need it on the resource.",
                f"Resource::{self._nag_arn(file_systems)}",
            )
        return role
