"""A launch template whose network interfaces expose every EFA device of the instance type.

The interfaces come from :func:`efa_stack.planning.layout.interface_layout`; the security groups sit on
every interface, there is no subnet, IMDSv2 hop limit 1, an encrypted root volume, user data from
:mod:`aws_constructs.user_data`, and the placement and capacity options. The rules:
docs/design/efa-interfaces.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aws_cdk import CfnTag, Fn
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from aws_constructs.user_data import node_user_data
from efa_stack import contract
from efa_stack.planning.layout import Interface
from efa_stack.planning.node_groups import LustreEfaClient

ROOT_DEVICE = "/dev/xvda"  # root device of the EKS-optimized AL2023 AMIs


@dataclass(frozen=True)
class LaunchTemplateProps:
    """Props of :class:`EfaLaunchTemplate`; every default is what happens when the prop is left out."""

    instance_type: str | None
    """EC2 instance type (e.g. ``p5.48xlarge``); None when the node group lists several (its ``InstanceTypes``)."""
    interfaces: Sequence[Interface] = ()
    """Network interfaces (:func:`efa_stack.planning.layout.interface_layout`); none: the instance's default ENA
    interface and template-level security groups."""
    volume_size_gib: int = 200
    """Root volume (encrypted) size in GiB."""
    volume_type: str = "gp3"
    volume_iops: int | None = None
    """Provisioned IOPS of the root volume (required for io1/io2; gp3 default 3000 when None)."""
    volume_throughput: int | None = None
    """gp3 throughput in MiB/s (125 when None)."""
    placement_group_name: str | None = None
    """The cluster placement group the instances launch in; none when None."""
    capacity: str = contract.ON_DEMAND
    """``on-demand``, ``reservation`` (a targeted capacity reservation) or ``capacity-block``."""
    reservation_id: str | None = None
    """The ``cr-...`` id; required unless ``capacity`` is on-demand or ``reservation_resource_group_arn`` is given."""
    reservation_resource_group_arn: str | None = None
    """A resource group of reservations to launch into (``CapacityReservationTarget.CapacityReservationResourceGroupArn``,
    CloudFormation ``AWS::EC2::LaunchTemplate CapacityReservationTarget``): an UltraServer's Capacity Block holds several
    reservations; none when None. Not together with ``reservation_id``."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Tags on the instances and volumes (none by default)."""
    hugepages_2mi_mib: int = 0
    """MiB of 2 MiB hugepages each node reserves at boot (user data); 0 reserves none."""
    lustre_client: bool = False
    """Install the Lustre client at boot (for FSx for Lustre volumes)."""
    lustre_efa: LustreEfaClient | None = None
    """With ``lustre_client``: run AWS's EFA client setup at boot, for an EFA-enabled file system; none when None."""
    kubelet_config: Mapping[str, str] = field(default_factory=dict)
    """``KubeletConfiguration`` keys for the nodes' nodeadm ``NodeConfig`` (e.g. ``cpuManagerPolicy: static``);
    empty: the AMI's kubelet defaults. Changing them changes the launch template and replaces the nodes."""
    instance_name: str | None = None
    """The instances' ``Name`` tag (eksctl ``instancePrefix``/``instanceName``); none when None."""
    key_name: str | None = None
    """An existing EC2 key pair for SSH (eksctl ``ssh.publicKeyName``); none when None."""
    pre_bootstrap_commands: Sequence[str] = ()
    """Shell commands the user data runs at boot (eksctl ``preBootstrapCommands``)."""
    node_config: str | None = None
    """A further nodeadm ``NodeConfig`` YAML document for the user data (eksctl ``overrideBootstrapCommand``)."""
    image_id: str | None = None
    """A custom AMI (eksctl ``ami``); None: the node group's AMI type picks the EKS-optimized AMI."""
    cluster_node_config: str | None = None
    """The cluster's details as a ``NodeConfig`` (:func:`aws_constructs.user_data.cluster_node_config`), needed
    with ``image_id``."""
    module_options: Sequence[tuple[str, str]] = ()
    """``NVreg_<name>=<value>`` options of the NVIDIA kernel module the user data sets before the kubelet starts
    (:func:`efa_stack.planning.user_data.module_option_script`; UltraServer nodes); none by default."""
    local_storage: str | None = None
    """nodeadm's instance store policy (``RAID0``, ``RAID10``, ``Mount``); None leaves the instance stores alone."""

    @property
    def efa_enabled(self) -> bool:
        """True when the template declares EFA interfaces."""
        return any(i.is_efa for i in self.interfaces)


class EfaLaunchTemplate(Construct):
    """A launch template from :class:`LaunchTemplateProps`; ``security_group_ids`` go on every interface."""

    def __init__(
        self, scope: Construct, id: str, props: LaunchTemplateProps, *, security_group_ids: Sequence[str],
    ) -> None:
        super().__init__(scope, id)
        self.props = props
        capacity, reservation_id, interfaces = props.capacity, props.reservation_id, props.interfaces
        volume_type, volume_iops, volume_throughput = props.volume_type, props.volume_iops, props.volume_throughput
        if capacity not in (contract.ON_DEMAND, *contract.RESERVED_CAPACITY):
            raise ValueError(f"capacity must be on-demand, reservation or capacity-block, got {capacity!r}")
        group_arn = props.reservation_resource_group_arn
        if capacity != contract.ON_DEMAND and not (reservation_id or group_arn):
            raise ValueError(f"capacity {capacity!r} needs reservation_id (cr-...) or reservation_resource_group_arn")
        if reservation_id and group_arn:
            raise ValueError("give reservation_id or reservation_resource_group_arn, not both")
        if group_arn and capacity == contract.ON_DEMAND:
            raise ValueError("reservation_resource_group_arn is for capacity reservation or capacity-block")
        # EC2 requires Iops for io1/io2 (CloudFormation "AWS::EC2::LaunchTemplate Ebs", Iops); a template
        # without it fails at launch, not at deploy. Ranges are checked in planning.limits.validate_volume.
        if volume_type in ("io1", "io2") and volume_iops is None:
            raise ValueError(f"volume_type {volume_type} needs volume_iops (EC2 requires Iops for io1/io2)")
        if volume_throughput is not None and volume_type != "gp3":
            raise ValueError(f"volume_throughput is for gp3 volumes only, got volume_type {volume_type}")
        if volume_iops is not None and volume_type not in ("gp3", "io1", "io2"):
            raise ValueError(f"volume_iops is for gp3, io1 and io2 volumes only, got volume_type {volume_type}")
        if not security_group_ids:
            raise ValueError("security_group_ids must list the cluster and EFA security groups")
        primaries = [i for i in interfaces if i.is_primary]
        if interfaces and (len(primaries) != 1 or primaries[0].interface_type == contract.EFA_ONLY):
            raise ValueError("exactly one primary interface (card 0, device 0) is needed and it cannot be efa-only")
        tags = props.tags
        placement_group_name = props.placement_group_name

        L = ec2.CfnLaunchTemplate
        nics = [
            L.NetworkInterfaceProperty(
                network_card_index=i.network_card_index,
                device_index=i.device_index,
                interface_type=i.interface_type,
                groups=list(security_group_ids),
                delete_on_termination=True,
            )
            for i in interfaces
        ]
        tag_specs = [
            L.TagSpecificationProperty(
                resource_type=kind,
                tags=[CfnTag(key=k, value=v) for k, v in sorted(kind_tags.items())],
            )
            for kind, kind_tags in (
                # eksctl nodegroup.go generateNodeName: the Name tag is on the instances
                ("instance", {**tags, **({"Name": props.instance_name} if props.instance_name else {})}),
                ("volume", dict(tags)),
            )
            if kind_tags
        ] or None
        self.user_data = node_user_data(
            props.hugepages_2mi_mib, props.lustre_client, props.kubelet_config,
            pre_bootstrap_commands=props.pre_bootstrap_commands, extra_node_config=props.node_config,
            cluster_node_config=props.cluster_node_config, lustre_efa=props.lustre_efa,
            module_options=props.module_options, local_storage=props.local_storage,
        )
        if props.image_id and not props.cluster_node_config:
            raise ValueError("a custom AMI (image_id) needs cluster_node_config: EKS adds no bootstrap for it")
        data = L.LaunchTemplateDataProperty(
            instance_type=props.instance_type,
            key_name=props.key_name,
            image_id=props.image_id,
            block_device_mappings=[
                L.BlockDeviceMappingProperty(
                    device_name=ROOT_DEVICE,
                    ebs=L.EbsProperty(
                        volume_size=props.volume_size_gib,
                        volume_type=volume_type,
                        iops=volume_iops,
                        throughput=volume_throughput,
                        encrypted=True,
                        delete_on_termination=True,
                    ),
                )
            ],
            metadata_options=L.MetadataOptionsProperty(
                http_tokens="required", http_endpoint="enabled", http_put_response_hop_limit=1
            ),
            network_interfaces=nics or None,
            security_group_ids=None if nics else list(security_group_ids),
            placement=L.PlacementProperty(group_name=placement_group_name) if placement_group_name else None,
            capacity_reservation_specification=L.CapacityReservationSpecificationProperty(
                capacity_reservation_target=L.CapacityReservationTargetProperty(
                    capacity_reservation_id=reservation_id, capacity_reservation_resource_group_arn=group_arn,
                )
            )
            if reservation_id or group_arn
            else None,
            instance_market_options=L.InstanceMarketOptionsProperty(market_type=contract.EC2_CAPACITY_BLOCK)
            if capacity == contract.CAPACITY_BLOCK
            else None,
            tag_specifications=tag_specs,
            user_data=Fn.base64(self.user_data) if self.user_data else None,
        )
        self.launch_template = L(self, "Resource", launch_template_data=data)

    @property
    def launch_template_id(self) -> str:
        return self.launch_template.ref

    @property
    def latest_version(self) -> str:
        return self.launch_template.attr_latest_version_number
