"""An FSx for Lustre file system for training data, its security group and its S3 link.

Encrypted, retained on delete and on replacement (with its security group), logical ids pinned, Lustre
traffic only with itself and the client groups, and the S3 link the deployment type supports (see
:mod:`efa_stack.planning.storage`). Optionally EFA-enabled, in the EFA security group of the EFA nodes
(:mod:`efa_stack.planning.lustre_efa`). Each default and its source: docs/design/storage.md, docs/design/fsx-efa.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import RemovalPolicy, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from constructs import Construct

from aws_constructs.network import EfaSecurityGroup
from efa_stack.planning import lustre_efa
from efa_stack.planning.storage import (
    CAPACITY_STEP_GIB,
    DEPLOYMENT_TYPES,
    LUSTRE_VERSION,
    THROUGHPUTS,
    MetadataPlan,
    S3LinkPlan,
    capacity_allowed,
)

LUSTRE_PORTS: tuple[tuple[int, int], ...] = ((988, 988), (1018, 1023))
"""TCP port ranges of Lustre (LNet) traffic between clients and the file system."""

FILE_SYSTEM_LOGICAL_ID = "LustreFileSystem"
SECURITY_GROUP_LOGICAL_ID = "LustreSecurityGroup"
ASSOCIATION_LOGICAL_ID = "LustreS3Association"
SECURITY_GROUP_DESCRIPTION = "FSx for Lustre: TCP 988 and 1018-1023 with itself and the cluster nodes only"
"""Pinned: a new description replaces the group, and a new group replaces the file system."""


def _port(low: int, high: int) -> ec2.Port:
    return ec2.Port.tcp(low) if low == high else ec2.Port.tcp_range(low, high)


def _ports_text(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}-{high}"


class LustreSecurityGroup(Construct):
    """Lustre traffic between the file system's interfaces and the clients' groups, and nothing else.

    Created with ``allow_all_outbound=False``; every egress rule is explicit (Lustre ports to itself
    and to the clients). A client group is given as an id (it usually lives in another stack).
    """

    def __init__(
        self, scope: Construct, id: str, *, vpc: ec2.IVpc, client_security_group_ids: Sequence[str]
    ) -> None:
        super().__init__(scope, id)
        if not client_security_group_ids:
            raise ValueError("LustreSecurityGroup needs at least one client security group id (the nodes' group)")
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description=SECURITY_GROUP_DESCRIPTION,
        )
        sg = self.security_group
        for low, high in LUSTRE_PORTS:
            ports = _ports_text(low, high)
            sg.add_ingress_rule(sg, _port(low, high), f"Lustre {ports} between file system interfaces")
            sg.add_egress_rule(sg, _port(low, high), f"Lustre {ports} between file system interfaces")
        # The clients' rules are resources of their own, not inline in the group: the group, and so the file
        # system, then need nothing from the clients' side, and the file system is created alongside the EKS
        # cluster whose security group is the client; these rules follow the cluster. At creation FSx checks
        # that the groups permit Lustre LNET traffic on port 988 (FSx for Lustre User Guide, "Creating an FSx
        # for Lustre file system fails"), which the rules among the file system's own interfaces above do. Not retained with the group: a retained rule naming the
        # cluster's security group would keep EKS from deleting that group.
        self.client_rules: list[ec2.CfnSecurityGroupIngress | ec2.CfnSecurityGroupEgress] = []
        for i, client in enumerate(client_security_group_ids):
            for low, high in LUSTRE_PORTS:
                ports = _ports_text(low, high)
                self.client_rules.append(ec2.CfnSecurityGroupIngress(
                    self, f"FromClient{i}Port{low}", group_id=sg.security_group_id, source_security_group_id=client,
                    ip_protocol="tcp", from_port=low, to_port=high, description=f"Lustre {ports} from cluster nodes",
                ))
                self.client_rules.append(ec2.CfnSecurityGroupEgress(
                    self, f"ToClient{i}Port{low}", group_id=sg.security_group_id,
                    destination_security_group_id=client, ip_protocol="tcp", from_port=low, to_port=high,
                    description=f"Lustre {ports} to cluster nodes",
                ))
                # The client's group must admit the file system's servers too.
                ec2.CfnSecurityGroupIngress(
                    self,
                    f"Client{i}From{low}",
                    group_id=client,
                    source_security_group_id=sg.security_group_id,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    description=f"Lustre {ports} from the FSx for Lustre file system",
                )
        cfn = sg.node.default_child
        assert isinstance(cfn, ec2.CfnSecurityGroup)
        cfn.override_logical_id(SECURITY_GROUP_LOGICAL_ID)
        # The retained file system's interfaces keep using this group: deleting it would fail (and
        # with it the stack's deletion), so it is retained with the file system, and so are the
        # self-referencing rules (standalone resources) that the file system's servers talk over.
        cfn.apply_removal_policy(RemovalPolicy.RETAIN)
        for child in sg.node.children:
            if isinstance(child, (ec2.CfnSecurityGroupIngress, ec2.CfnSecurityGroupEgress)):
                child.apply_removal_policy(RemovalPolicy.RETAIN)

    @property
    def security_group_id(self) -> str:
        return self.security_group.security_group_id

    @property
    def rules(self) -> list[ec2.CfnSecurityGroupIngress | ec2.CfnSecurityGroupEgress]:
        """The standalone rule resources on this group (the self-referencing ones CDK renders apart)."""
        return [
            c for c in self.security_group.node.children
            if isinstance(c, (ec2.CfnSecurityGroupIngress, ec2.CfnSecurityGroupEgress))
        ]


@dataclass(frozen=True)
class LustreFileSystemProps:
    """Props of :class:`LustreFileSystem`, validated by the construct when they are not tokens (the messages name
    the value, what is allowed and the fix); every default is what happens when the prop is left out."""

    deployment_type: str
    """SCRATCH_1, SCRATCH_2, PERSISTENT_1 or PERSISTENT_2."""
    storage_capacity_gib: int
    """1200, 2400, then multiples of 2400 (SCRATCH_1: of 3600)."""
    per_unit_storage_throughput: int | None = None
    """MB/s/TiB, persistent types only (P1: 50/100/200, P2: 125/250/500/1000); FSx requires it for them."""
    data_compression: str = "NONE"
    """``NONE`` or ``LZ4``."""
    s3: S3LinkPlan | None = None
    """The bucket link (:class:`efa_stack.planning.storage.S3LinkPlan`); none when None."""
    lustre_version: str = LUSTRE_VERSION
    """The Lustre version of the file system."""
    metadata: MetadataPlan | None = None
    """PERSISTENT_2's ``MetadataConfiguration`` (:class:`efa_stack.planning.storage.MetadataPlan`); FSx's default
    when None."""
    efa_enabled: bool = False
    """An EFA-enabled file system (``LustreConfiguration.EfaEnabled``; set at creation only): needs PERSISTENT_2,
    ``metadata``, capacity in the tier's EFA steps and the constructor's ``efa_security_group``."""


class LustreFileSystem(Construct):
    """An FSx for Lustre file system in ``subnet`` (one availability zone), retained on stack deletion and
    replacement; ``client_security_group_ids`` are the groups of the instances that mount it (the EKS cluster
    security group is on every node interface). An EFA-enabled one is in ``efa_security_group`` too (the EFA nodes'
    group, all traffic with its own members: FSx for Lustre User Guide, "EFA-enabled security groups"), is created
    after that group's rules and retains the group with itself."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        props: LustreFileSystemProps,
        *,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        client_security_group_ids: Sequence[str],
        efa_security_group: EfaSecurityGroup | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.props = props
        deployment_type, storage_capacity_gib = props.deployment_type, props.storage_capacity_gib
        per_unit_storage_throughput, data_compression = props.per_unit_storage_throughput, props.data_compression
        s3, lustre_version = props.s3, props.lustre_version
        self._validate(deployment_type, storage_capacity_gib, per_unit_storage_throughput, data_compression, s3)
        self._validate_efa(props, efa_security_group)
        self.deployment_type = deployment_type
        self.security_group = LustreSecurityGroup(
            self, "SecurityGroup", vpc=vpc, client_security_group_ids=client_security_group_ids
        )
        groups = [self.security_group.security_group_id]
        efa = efa_security_group if props.efa_enabled else None
        if efa is not None:
            groups.append(efa.security_group_id)
        legacy = s3 if s3 is not None and s3.kind == "import-path" else None
        md = props.metadata
        self.file_system = fsx.CfnFileSystem(
            self,
            "Resource",
            file_system_type="LUSTRE",
            file_system_type_version=lustre_version,
            storage_type="SSD",
            storage_capacity=storage_capacity_gib,
            subnet_ids=[subnet.subnet_id],
            security_group_ids=groups,
            lustre_configuration=fsx.CfnFileSystem.LustreConfigurationProperty(
                deployment_type=deployment_type,
                per_unit_storage_throughput=per_unit_storage_throughput,
                data_compression_type=data_compression,
                import_path=legacy.data_repository_path if legacy is not None else None,
                auto_import_policy=legacy.auto_import_policy if legacy is not None else None,
                metadata_configuration=fsx.CfnFileSystem.MetadataConfigurationProperty(mode=md.mode, iops=md.iops)
                if md is not None else None,
                efa_enabled=True if props.efa_enabled else None,
            ),
        )
        # FSx checks at creation that the file system's groups let it reach itself on 988 and 1018-1023
        # (InvalidNetworkSettings otherwise), and an EFA-enabled one that they allow all traffic with themselves
        # ("Insufficient security group permissions to create an EFA-enabled file system": FSx for Lustre User Guide,
        # "Creating an FSx for Lustre file system fails"). CloudFormation creates resources in parallel, so the file
        # system waits for every rule of its groups, standalone or not (aws/aws-parallelcluster#6181).
        for rule in (*self.security_group.rules, *(efa.rules if efa is not None else ())):
            self.file_system.node.add_dependency(rule)
        if efa is not None:
            # The retained file system's interfaces keep the EFA group: EC2 would refuse to delete it.
            efa.retain()
        # Retain on delete and on replacement: the file system holds the training data.
        self.file_system.apply_removal_policy(RemovalPolicy.RETAIN)
        self.file_system.override_logical_id(FILE_SYSTEM_LOGICAL_ID)
        self.association: fsx.CfnDataRepositoryAssociation | None = None
        if s3 is not None and s3.kind == "association":
            self.association = fsx.CfnDataRepositoryAssociation(
                self,
                "S3Association",
                file_system_id=self.file_system.ref,
                file_system_path=s3.file_system_path,
                data_repository_path=s3.data_repository_path,
                batch_import_meta_data_on_create=s3.import_on_create,
                s3=fsx.CfnDataRepositoryAssociation.S3Property(
                    auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(
                        events=list(s3.auto_import)
                    ) if s3.auto_import else None,
                    auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(
                        events=list(s3.auto_export)
                    ) if s3.auto_export else None,
                ) if (s3.auto_import or s3.auto_export) else None,
            )
            self.association.apply_removal_policy(RemovalPolicy.RETAIN)
            self.association.override_logical_id(ASSOCIATION_LOGICAL_ID)

    @staticmethod
    def _validate(
        deployment_type: str, gib: int, throughput: int | None, compression: str, s3: S3LinkPlan | None
    ) -> None:
        if deployment_type not in DEPLOYMENT_TYPES:
            raise ValueError(
                f"LustreFileSystem: deployment_type {deployment_type!r} is not an FSx for Lustre deployment "
                f"type; use one of {', '.join(DEPLOYMENT_TYPES)}"
            )
        if not Token.is_unresolved(gib) and not capacity_allowed(deployment_type, gib):
            raise ValueError(
                f"LustreFileSystem: storage_capacity_gib {gib} is not allowed for {deployment_type}; use "
                f"1200, 2400 or a multiple of {CAPACITY_STEP_GIB[deployment_type]}"
            )
        allowed = THROUGHPUTS.get(deployment_type)
        if throughput is not None and not Token.is_unresolved(throughput):
            if allowed is None:
                raise ValueError(
                    f"LustreFileSystem: per_unit_storage_throughput {throughput} given for {deployment_type}, "
                    f"which has none; leave it unset"
                )
            if throughput not in allowed:
                raise ValueError(
                    f"LustreFileSystem: per_unit_storage_throughput {throughput} is not allowed for "
                    f"{deployment_type}; use one of {', '.join(map(str, allowed))}"
                )
        if allowed is not None and throughput is None:
            raise ValueError(
                f"LustreFileSystem: {deployment_type} needs per_unit_storage_throughput; use one of "
                f"{', '.join(map(str, allowed))}"
            )
        if compression not in ("NONE", "LZ4"):
            raise ValueError(f"LustreFileSystem: data_compression {compression!r}; use NONE or LZ4")
        if s3 is not None:
            wanted = "association" if deployment_type == "PERSISTENT_2" else "import-path"
            if s3.kind != wanted:
                raise ValueError(
                    f"LustreFileSystem: {deployment_type} links S3 through "
                    f"{'a DataRepositoryAssociation' if wanted == 'association' else 'ImportPath'}, got {s3.kind!r}"
                )
            if wanted == "import-path" and s3.auto_export:
                raise ValueError(
                    f"LustreFileSystem: automatic export needs a data repository association; {deployment_type} "
                    f"links through ImportPath (remove auto_export)"
                )

    @staticmethod
    def _validate_efa(props: LustreFileSystemProps, efa_security_group: EfaSecurityGroup | None) -> None:
        md = props.metadata
        if md is not None:
            if props.deployment_type != lustre_efa.EFA_DEPLOYMENT_TYPE:
                raise ValueError(f"LustreFileSystem: metadata is for PERSISTENT_2 only, not {props.deployment_type}")
            if md.mode not in lustre_efa.METADATA_MODES:
                raise ValueError(f"LustreFileSystem: metadata mode {md.mode!r}; use AUTOMATIC or USER_PROVISIONED")
            if (md.mode == "USER_PROVISIONED") != (md.iops is not None):
                raise ValueError("LustreFileSystem: metadata iops are given with USER_PROVISIONED mode, and only then")
            if md.iops is not None and not Token.is_unresolved(md.iops) and not lustre_efa.metadata_iops_allowed(md.iops):
                raise ValueError(f"LustreFileSystem: metadata iops {md.iops}; use 1500, 3000, 6000, 12000 or a "
                                 "multiple of 12000 up to 192000")
        if not props.efa_enabled:
            return
        if props.deployment_type != lustre_efa.EFA_DEPLOYMENT_TYPE or md is None:
            raise ValueError("LustreFileSystem: an EFA-enabled file system is PERSISTENT_2 with metadata (a metadata "
                             f"configuration), got {props.deployment_type} and metadata={md}")
        if efa_security_group is None:
            raise ValueError("LustreFileSystem: an EFA-enabled file system needs efa_security_group (all traffic "
                             "with its members, the EFA nodes)")
        gib, tier = props.storage_capacity_gib, props.per_unit_storage_throughput
        step = lustre_efa.capacity_steps().get(tier) if tier is not None and not Token.is_unresolved(tier) else None
        if step is not None and not Token.is_unresolved(gib) and gib % step:
            raise ValueError(f"LustreFileSystem: storage_capacity_gib {gib} is not allowed for an EFA-enabled file "
                             f"system at {tier} MB/s/TiB; use a multiple of {step}")

    # --- attributes (CloudFormation tokens) -----------------------------------------------------

    @property
    def file_system_id(self) -> str:
        return self.file_system.ref

    @property
    def dns_name(self) -> str:
        return self.file_system.attr_dns_name

    @property
    def mount_name(self) -> str:
        return self.file_system.attr_lustre_mount_name

    @property
    def security_group_id(self) -> str:
        return self.security_group.security_group_id
