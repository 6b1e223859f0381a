"""The cluster stack: EKS control plane, add-ons, access entries and the managed node groups."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aws_cdk import Annotations, Aws, CfnOutput, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from aws_constructs.node_group import ManagedNodeGroup
from aws_constructs.pod_identity import associate_with_addon, pod_identity_role
from aws_constructs.security import acknowledge, managed_policy
from aws_constructs.training_image import EfaTrainingImage, TrainingImageProps
from efa_stack import contract, names
from efa_stack.planning.addons import CLOUDWATCH_OBSERVABILITY, POD_IDENTITY_AGENT, VPC_CNI
from efa_stack.planning.plan import ClusterPlan
from efa_stack.spec.models import KUBERNETES_VERSIONS
from stacks.addons import apply_addon_settings, pod_identities, user_addons
from stacks.kubernetes import CRD_ESTABLISHED_JSONPATH, RolloutConstructs, steps_of, wait_until_established
from stacks.nesting import NestedParts
from stacks.network_stack import ClusterNetwork
from stacks.node_groups import NODE_ROLE_POLICIES, node_group_props, node_role_of, pull_through_cache, pulls_through

if TYPE_CHECKING:
    import cdk8s

    from aws_constructs.karpenter import KarpenterController
    from efa_stack.planning.template_budget import StackLayout
    from k8s.rollout import Rollout

__all__ = ["CRD_ESTABLISHED_JSONPATH", "ClusterStack"]

def kubectl_layer_module(kubernetes_version: str) -> tuple[str, str]:
    """The module and class of the kubectl Lambda layer for ``kubernetes_version``: the kubectl in the provider's
    layer must match the cluster's minor version, and the aws-cdk.lambda-layer-kubectl-vNN packages
    (pyproject.toml, one per efa_stack.spec.models.KUBERNETES_VERSIONS) name them by the minor."""
    minor = kubernetes_version.split(".")[1]
    return f"aws_cdk.lambda_layer_kubectl_v{minor}", f"KubectlV{minor}Layer"


def kubectl_layer(scope: Construct, id: str, kubernetes_version: str) -> Any:
    """The kubectl Lambda layer construct for ``kubernetes_version``. Only the cluster's own layer is imported
    (each is a separate jsii assembly with a large asset, so loading all of them would cost every synth)."""
    import importlib

    module, cls = kubectl_layer_module(kubernetes_version)
    return getattr(importlib.import_module(module), cls)(scope, id)

# eksctl controlPlaneScalingConfig.tier -> aws-cdk-lib 2.275 aws_eks_v2.ControlPlaneScalingTier (which writes the
# tier into AWS::EKS::Cluster ControlPlaneScalingConfig.Tier).
CONTROL_PLANE_TIERS = {
    "standard": eks.ControlPlaneScalingTier.STANDARD,
    "tier-xl": eks.ControlPlaneScalingTier.TIER_XL,
    "tier-2xl": eks.ControlPlaneScalingTier.TIER_2_XL,
    "tier-4xl": eks.ControlPlaneScalingTier.TIER_4_XL,
    "tier-8xl": eks.ControlPlaneScalingTier.TIER_8_XL,
}

CONTROL_PLANE_LOGS = {
    "api": eks.ClusterLoggingTypes.API,
    "audit": eks.ClusterLoggingTypes.AUDIT,
    "authenticator": eks.ClusterLoggingTypes.AUTHENTICATOR,
    "controllerManager": eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    "scheduler": eks.ClusterLoggingTypes.SCHEDULER,
}


def endpoint_access(plan: ClusterPlan) -> eks.EndpointAccess:
    """eksctl's vpc.clusterEndpoints and vpc.publicAccessCIDRs as an EKS endpoint setting."""
    if not plan.endpoint_public:
        return eks.EndpointAccess.PRIVATE
    base = eks.EndpointAccess.PUBLIC_AND_PRIVATE if plan.endpoint_private else eks.EndpointAccess.PUBLIC
    return base.only_from(*plan.public_access_cidrs) if plan.public_access_cidrs else base


class ClusterStack(Stack):
    """One cluster's stack, ``<name>-cluster``: the network (:class:`stacks.network_stack.ClusterNetwork`), the EKS
    cluster with its add-ons, access entries and managed node groups, Karpenter's controller for the pools, the
    observability, the training image, and the Kubernetes rollout (:mod:`stacks.kubernetes`). The storage is a part
    of it too (:class:`stacks.storage_stack.ClusterStorage`, added by :func:`stacks.compose.build`).

    Attributes: ``network``, ``cluster``, ``vpc_cni``, ``node_role``, ``addons`` (by add-on name), ``node_groups``
    (by EKS node group name), ``karpenter`` (or None), ``kubernetes`` (the rollout's constructs by step id),
    ``manifests`` (the charts' manifests in apply order), ``training_image`` (or None)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        plan: ClusterPlan,
        charts: Sequence[cdk8s.Chart] | None = None,
        rollout: Rollout | None = None,
        layout: StackLayout | None = None,
        **kwargs: Any,
    ) -> None:
        """``charts`` and ``rollout``: the plan's charts (:func:`k8s.charts.build_charts`) and their rollout
        (:func:`k8s.rollout.plan_rollout`), which app.py also writes to ``dist/``; made here when absent.
        ``layout``: the parts in nested stacks (:func:`efa_stack.planning.template_budget.stack_layout`); none when
        None."""
        super().__init__(scope, id, **kwargs)
        self.plan = plan
        self.nesting = NestedParts(self, layout)
        self.network = ClusterNetwork(self, "Network", plan=plan)
        self.cluster = self._control_plane(plan)
        self.vpc_cni_role, self.vpc_cni = self._vpc_cni(plan)
        self.eni_configs = self._eni_configs(plan)
        self.node_role = iam.Role(
            self,
            "NodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in NODE_ROLE_POLICIES],
            description=f"EKS nodes of {plan.name}",
        )
        self._acknowledge_findings()
        self.image_cache = pull_through_cache(self, plan.image_cache)
        pulls_through(self.node_role, self.image_cache)
        # Add-on permissions go through EKS Pod Identity (the agent add-on, created by the cluster).
        self.pod_identity_agent = self.cluster.eks_pod_identity_agent
        agent = plan.addon(POD_IDENTITY_AGENT)
        if agent is not None:
            apply_addon_settings(self.pod_identity_agent, agent)
        self.addons = user_addons(self, self.cluster, plan)
        self.oidc_provider: eks.OidcProviderNative | None = None
        if plan.with_oidc:  # eksctl's iam.withOIDC: an IAM OIDC provider for IRSA
            self.oidc_provider = eks.OidcProviderNative(
                self, "OidcProvider", url=self.cluster.cluster_open_id_connect_issuer_url
            )
        pod_identities(self, self.cluster, self.pod_identity_agent, plan)
        self._access_entries(plan)
        self.node_groups = self._node_groups(plan)
        """Every EKS managed node group by its EKS name (the parts of a split spec group each under its own)."""
        self.kubernetes = self._rollout_constructs(charts, rollout)
        self.karpenter = self._karpenter(plan)
        self._observability(plan)
        # The nodes pull it with NODE_ROLE_POLICIES' AmazonEC2ContainerRegistryPullOnly.
        self.training_image: EfaTrainingImage | None = None
        if plan.training_image is not None:
            self.training_image = EfaTrainingImage(self, "TrainingImage", TrainingImageProps(
                directory=str(plan.training_image.directory), platform=plan.training_image.platform,
                build_args=plan.training_image.build_args,
            ))
        self.manifests = self._apply_rollout()

    def _control_plane(self, plan: ClusterPlan) -> eks.Cluster:
        """The EKS cluster (native CloudFormation, no Auto Mode) with its secrets key, kubectl provider and logs."""
        if plan.kubernetes_version not in KUBERNETES_VERSIONS:
            raise ValueError(
                f"no kubectl layer for Kubernetes {plan.kubernetes_version}; "
                f"supported: {', '.join(KUBERNETES_VERSIONS)}"
            )
        self.secrets_key = kms.Key(
            self, "SecretsKey", enable_key_rotation=True, description=f"EKS secrets envelope encryption for {plan.name}"
        )
        cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=names.eks_cluster_name(plan.name),
            version=eks.KubernetesVersion.of(plan.kubernetes_version),
            vpc=self._vpc_for_cluster(),
            vpc_subnets=[ec2.SubnetSelection(subnets=self.network.private_subnets)],
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer(self, "KubectlLayer", plan.kubernetes_version),
                # with a private-only endpoint the kubectl Lambda must run inside the VPC
                private_subnets=self.network.private_subnets if not plan.endpoint_public else None,
            ),
            secrets_encryption_key=self.secrets_key,
            cluster_logging=[CONTROL_PLANE_LOGS[t] for t in plan.log_types] or None,
            endpoint_access=endpoint_access(plan),
            bootstrap_cluster_creator_admin_permissions=plan.bootstrap_admin,
            control_plane_scaling_tier=CONTROL_PLANE_TIERS[plan.control_plane_tier] if plan.control_plane_tier
            else None,
            tags=dict(plan.tags) or None,
        )
        # Pinned logical ids: a new id would replace the cluster (and with it every workload on it).
        self.secrets_key.node.default_child.override_logical_id("ClusterSecretsKey")
        cluster.node.default_child.override_logical_id("EksCluster")
        if cluster.kubectl_provider is not None:  # its functions run in the VPC (see _vpc_for_cluster)
            cluster.kubectl_provider.node.add_dependency(self.network)
        # Given subnets it did not create (the VPC view, or an existing VPC's), aws-eks-v2 does not tag them for
        # internal load balancers and says so: the network construct tags its own private subnets itself
        # (aws_constructs/network.py); an existing VPC's subnets are the user's to tag, which only a Service of
        # type LoadBalancer needs (efa-stack runs none; docs/spec.md, existing VPC).
        Annotations.of(cluster).acknowledge_warning(
            "@aws-cdk/aws-eks:clusterMustManuallyTagSubnet",
            "EfaVpc tags its private subnets kubernetes.io/role/internal-elb=1; an existing VPC's are the user's",
        )
        if plan.log_retention_days is not None and plan.log_types:
            # EKS writes to /aws/eks/<cluster>/cluster and creates the group if it is missing; created first
            # here, it carries eksctl's cloudWatch.clusterLogging.logRetentionInDays.
            from aws_cdk import aws_logs as logs

            log_group = logs.CfnLogGroup(
                self, "ControlPlaneLogGroup", log_group_name=f"/aws/eks/{names.eks_cluster_name(plan.name)}/cluster",
                retention_in_days=plan.log_retention_days,
            )
            cluster.node.add_dependency(log_group)
        return cluster

    def _vpc_cni(self, plan: ClusterPlan) -> tuple[iam.Role, eks.Addon]:
        """The VPC CNI add-on at efa-stack's pinned build, with its role through EKS Pod Identity."""
        role = pod_identity_role(
            self,
            "VpcCniRole",
            description="VPC CNI (aws-node) through EKS Pod Identity",
            managed_policies=["AmazonEKS_CNI_Policy"],
        )
        cni = plan.addon(VPC_CNI)
        if cni is None or cni.version is None:  # the plan always pins efa-stack's own VPC CNI build
            raise ValueError(f"the plan of {plan.name} has no pinned {VPC_CNI} add-on")
        vpc_cni = eks.Addon(
            self, "VpcCni", cluster=self.cluster, addon_name=VPC_CNI,
            addon_version=cni.version, preserve_on_delete=False,
        )
        # EKS installs a self-managed aws-node with every cluster; the add-on takes it over (see the data file).
        vpc_cni_cfn = vpc_cni.node.default_child
        assert isinstance(vpc_cni_cfn, eks.CfnAddon)
        vpc_cni_cfn.resolve_conflicts = cni.resolve_conflicts
        apply_addon_settings(vpc_cni, cni, version=False)
        associate_with_addon(vpc_cni, role, "aws-node")
        return role, vpc_cni

    def _access_entries(self, plan: ClusterPlan) -> None:
        """eksctl's ``accessConfig``: the authentication mode and an access entry per principal."""
        if plan.authentication_mode != "API":  # aws_eks_v2 writes API; eksctl's API_AND_CONFIG_MAP, as written
            cluster_cfn = self.cluster.node.default_child
            assert isinstance(cluster_cfn, eks.CfnCluster)
            cluster_cfn.add_property_override("AccessConfig.AuthenticationMode", plan.authentication_mode)
        details = plan.access_entry_details or tuple(("STANDARD", (), None) for _ in plan.access_entries)
        for i, ((principal, policies), (entry_type, k8s_groups, username)) in enumerate(zip(plan.access_entries, details)):
            entry = eks.AccessEntry(
                self,
                f"AccessEntry{i}",
                cluster=self.cluster,
                principal=principal,
                access_entry_type=getattr(eks.AccessEntryType, entry_type),
                access_policies=[
                    eks.AccessPolicy.from_access_policy_name(
                        policy_arn.rsplit("/", 1)[-1],
                        access_scope_type=eks.AccessScopeType.CLUSTER
                        if scope_type == "cluster"
                        else eks.AccessScopeType.NAMESPACE,
                        namespaces=list(namespaces) or None,
                    )
                    for policy_arn, scope_type, namespaces in policies
                ],
            )
            entry_cfn = entry.node.default_child
            assert isinstance(entry_cfn, eks.CfnAccessEntry)
            if k8s_groups:  # CloudFormation AWS::EKS::AccessEntry KubernetesGroups (the L2 construct has no prop)
                entry_cfn.add_property_override("KubernetesGroups", list(k8s_groups))
            if username:
                entry_cfn.add_property_override("Username", username)

    def _node_groups(self, plan: ClusterPlan) -> dict[str, ManagedNodeGroup]:
        """A managed node group per part of every node group of the plan (:mod:`stacks.node_groups`), after what
        its nodes need when they join: the VPC CNI, the Pod Identity agent, the network, the ENIConfigs."""
        cluster_sg = self.cluster.cluster_security_group_id
        node_groups: dict[str, ManagedNodeGroup] = {}
        for ng in plan.all_node_groups:
            subnets = [self.network.subnet(i) for i in ng.subnet_ids] if ng.subnet_ids else (
                [self.network.private_subnet(ng.availability_zone)]
                if ng.efa_enabled
                else [self.network.private_subnet(az) for az in ng.availability_zones]
            )
            groups = [cluster_sg, self.network.efa_security_group.security_group_id] if ng.efa_enabled else [cluster_sg]
            # maxPods of custom networking only where nothing overrides it: on an EKS AMI the managed node group
            # appends its own NodeConfig after the launch template's and "Managed node groups automatically
            # calculates the maximum pods value" for custom networking (EKS User Guide, cni-custom-network-tutorial);
            # with a custom AMI EKS adds no user data, and the EKS guide asks for the figure in the NodeConfig.
            max_pods = plan.addresses.max_pods(ng.name) if plan.addresses is not None and ng.ami_id else None
            props = node_group_props(ng, self._cluster_node_config() if ng.ami_id else None, max_pods)
            scope = self.nesting.node_group_scope(ng.name)
            node_role = node_role_of(Stack.of(scope), ng, self.node_role, plan.name)
            if node_role is not self.node_role:
                pulls_through(node_role, self.image_cache)
            parts = ng.parts
            shared_group = None
            if len(parts) > 1 and ng.placement_group:
                # One cluster placement group for every part: the spec group's nodes share one network
                # neighbourhood, as one node group's would (the parts' launch templates name it).
                shared_group = ec2.PlacementGroup(
                    scope, f"PlacementGroup-{ng.name}", strategy=ec2.PlacementGroupStrategy.CLUSTER
                )
            for part in parts:
                part_props = props if len(parts) == 1 else dataclasses.replace(
                    props, nodegroup_name=part.name, min_size=part.min_size, desired_size=part.desired_size,
                    max_size=part.max_size, placement_group=False,
                    launch_template=dataclasses.replace(
                        props.launch_template,
                        placement_group_name=shared_group.placement_group_name if shared_group is not None
                        else props.launch_template.placement_group_name,
                    ),
                )
                node_group = ManagedNodeGroup(
                    scope,
                    f"NodeGroup-{part.name}",
                    part_props,
                    cluster=self.cluster,
                    subnets=subnets,
                    security_group_ids=groups,
                    node_role=node_role,
                )
                # The CNI must support efa-only interfaces before EFA nodes join, and aws-node gets its
                # role through EKS Pod Identity, so the agent must run before the nodes need it.
                node_group.nodegroup.node.add_dependency(self.vpc_cni)
                # Nodes bootstrap over the NAT gateways' routes and the VPC endpoints (see _vpc_for_cluster).
                node_group.nodegroup.node.add_dependency(self.network)
                node_group.nodegroup.node.add_dependency(self.pod_identity_agent)
                if self.eni_configs is not None:  # custom networking: pods' ENIs go where the ENIConfig says
                    node_group.nodegroup.node.add_dependency(self.eni_configs)
                for addon_plan in plan.addons:
                    if addon_plan.node_dependency and addon_plan.name in self.addons:
                        node_group.nodegroup.node.add_dependency(self.addons[addon_plan.name])
                node_groups[part.name] = node_group
        return node_groups

    def _vpc_for_cluster(self) -> ec2.IVpc:
        """The VPC the EKS cluster resource is given: for a VPC of the stack's own, a view of it by id.

        With private endpoint access aws-cdk-lib 2.275 aws-eks-v2 (lib/cluster.ts) makes the cluster resource
        depend on every resource of the VPC construct it is given, NAT gateways, routes and interface endpoints
        included, which only what runs in the VPC needs: the kubectl provider's functions and the nodes. Given
        a view of the same VPC (its id and private subnets), the cluster waits for its subnets and security
        groups only and is created alongside the NAT gateways and endpoints (docs/design/deploy-model.md); the
        kubectl provider and every node group depend on the whole network instead, which also keeps the
        network until they are deleted. An existing VPC is already such a view."""
        network = self.network
        if self.plan.existing_vpc is not None:
            return network.vpc
        subnets = network.private_subnets
        return ec2.Vpc.from_vpc_attributes(
            self, "ClusterVpcView", vpc_id=network.vpc.vpc_id, vpc_cidr_block=network.vpc.vpc_cidr_block,
            availability_zones=[s.availability_zone for s in subnets],
            private_subnet_ids=[s.subnet_id for s in subnets],
            private_subnet_route_table_ids=[s.route_table.route_table_id for s in subnets],
        )

    def _karpenter(self, plan: ClusterPlan) -> KarpenterController | None:
        """Karpenter's controller for the plan's pools (:mod:`aws_constructs.karpenter`), or None without pools. The
        EC2NodeClasses select the private subnets and the EFA security group by the discovery tag set here (with an
        existing VPC, the subnets by id), and the cluster security group by EKS's own tag."""
        karpenter = plan.karpenter
        if karpenter is None:
            return None
        from aws_constructs.karpenter import KarpenterController, KarpenterControllerProps
        from k8s.components import KARPENTER
        from k8s.rollout import InstallRelease, release_id

        Tags.of(self.network.efa_security_group).add(contract.KARPENTER_DISCOVERY_TAG, karpenter.cluster)
        if plan.existing_vpc is None:
            for subnet in self.network.private_subnets:
                Tags.of(subnet).add(contract.KARPENTER_DISCOVERY_TAG, karpenter.cluster)
        release = self.kubernetes.rollout[release_id(KARPENTER)]
        assert isinstance(release, InstallRelease) and release.release is not None
        controller = KarpenterController(self, "Karpenter", KarpenterControllerProps(
            cluster_name=karpenter.cluster, version=karpenter.version, chart_repository=karpenter.chart,
            node_role_name=karpenter.node_role_name, interruption_queue_name=karpenter.interruption_queue_name,
            namespace=karpenter.namespace, service_account=karpenter.service_account, release=contract.KARPENTER_RELEASE,
            node_policies=NODE_ROLE_POLICIES, chart_values=release.release.values,
            placement_groups=karpenter.new_placement_groups,
        ), cluster=self.cluster)
        controller.association.node.add_dependency(self.pod_identity_agent)
        pulls_through(controller.node_role, self.image_cache)
        # Its nodes join through the CNI.
        controller.chart.node.add_dependency(self.vpc_cni)
        # The release is applied alongside the nodes (no helm --wait: the chart at v1.15.1 has no webhook); the
        # deploy still fails when the controller cannot start on the system nodes. The pools follow the wait for its
        # replica (the rollout's KARPENTER entry): on deletion it keeps the system node group, where the controller
        # that clears the pools' finalizers runs, until the pools are gone.
        self.kubernetes.constructs[release.id] = [controller.chart]
        self.kubernetes.make(steps_of(self.kubernetes.rollout, KARPENTER))
        return controller

    def _eni_configs(self, plan: ClusterPlan) -> eks.KubernetesManifest | None:
        """VPC CNI custom networking (``vpc.podCIDR``): an ENIConfig per zone (:mod:`k8s.eniconfig`) with the zone's
        pod subnet and the cluster security group, applied once the vpc-cni add-on's ENIConfig CRD is Established
        (the add-on installs it: aws/amazon-vpc-cni-k8s@v1.20.1 config/master/aws-k8s-cni.yaml, the CNI's own
        manifest, holds eniconfigs.crd.k8s.amazonaws.com). Node groups wait for it: ipamd on a node that starts
        before its ENIConfig exists fails to attach pod ENIs (pkg/ipamd/ipamd.go: "Failed to attach any ENIs for
        custom networking"). None without a pod range."""
        subnets = self.network.pod_subnets
        if not subnets:
            return None
        import cdk8s

        from k8s.eniconfig import EniConfigChart, EniConfigProps

        chart = EniConfigChart(cdk8s.App(), "EniConfigs", EniConfigProps(
            subnets={zone: subnet.subnet_id for zone, subnet in subnets.items()},
            security_groups=[self.cluster.cluster_security_group_id],
        ))
        manifest = self.cluster.add_cdk8s_chart("EniConfigs", chart)
        established = wait_until_established(self, self.cluster, "EniConfigCrdEstablished", contract.ENICONFIG_CRD_NAME)
        established.node.add_dependency(self.vpc_cni)
        manifest.node.add_dependency(established)
        return manifest

    def _cluster_node_config(self) -> str:
        """The cluster's details for nodeadm on nodes of a custom AMI (tokens of the EKS cluster)."""
        from aws_cdk import Token

        from aws_constructs.user_data import cluster_node_config

        cfn = self.cluster.node.default_child
        assert isinstance(cfn, eks.CfnCluster)
        return cluster_node_config(
            self.cluster.cluster_name, self.cluster.cluster_endpoint, self.cluster.cluster_certificate_authority_data,
            Token.as_string(cfn.get_att("KubernetesNetworkConfig.ServiceIpv4Cidr")),
        )

    def _observability(self, plan: ClusterPlan) -> None:
        """Container Insights after the nodes (its operator and DaemonSets need a node to become active), and
        the accelerator dashboard with its URL as an output (efa_stack/spec/observability.py)."""
        from aws_constructs.dashboard import AcceleratorDashboard, AcceleratorDashboardProps, DashboardGroup

        insights = self.addons.get(CLOUDWATCH_OBSERVABILITY)
        if insights is not None:
            for group in self.node_groups.values():
                insights.node.add_dependency(group.nodegroup)
        name = plan.observability.dashboard_name
        if name is None:
            return
        groups = [
            DashboardGroup(ng.name, ng.instance_type, ng.role, ng.efa_enabled)
            for ng in plan.node_groups if ng.role in ("gpu", "neuron")
        ]
        AcceleratorDashboard(self, "AcceleratorDashboard", AcceleratorDashboardProps(
            dashboard_name=name, cluster=names.eks_cluster_name(plan.name), groups=groups,
        ))
        # CloudWatch console deep link to a dashboard: /cloudwatch/home?region=R#dashboards/dashboard/NAME
        CfnOutput(
            self, "DashboardUrl", description="CloudWatch dashboard of GPU/Neuron and EFA metrics per node",
            value=f"https://{plan.region}.console.aws.amazon.com/cloudwatch/home?region={plan.region}"
            f"#dashboards/dashboard/{name}",
        )

    def _rollout_constructs(self, charts: Sequence[cdk8s.Chart] | None, rollout: Rollout | None) -> RolloutConstructs:
        """The translation of the plan's rollout (:mod:`stacks.kubernetes`), its steps made by ``_apply_rollout``
        (Karpenter's by ``_karpenter``, which makes its release with the AWS side it needs)."""
        if charts is None:
            import cdk8s

            from k8s.charts import build_charts

            charts = build_charts(self.plan, cdk8s.App())
        if rollout is None:
            from k8s.rollout import plan_rollout

            rollout = plan_rollout(self.plan, charts)
        cache = self.plan.image_cache
        images = (lambda image: cache.cached(image, Aws.ACCOUNT_ID)) if self.image_cache and cache else None
        return RolloutConstructs(self, self.cluster, rollout, {c.node.id: c for c in charts},
                                 self._system_node_groups(), chart_scope=self.nesting.chart_scope, images=images)

    def _apply_rollout(self) -> list[eks.KubernetesManifest]:
        """Every step of the rollout as a construct and every edge as a dependency; returns the manifests.

        Releases (and the waits for their CRDs and controllers) are made before the charts' manifests, each chart's
        waits after its manifest. Nothing waits for a node group to be *applied* (``kubectl apply`` of a DaemonSet or a
        Deployment returns before any pod runs), except the waits for a controller's available replica, which follow
        the system node group: the CRDs, operators and device plugins are applied while the nodes launch
        (docs/design/deploy-model.md)."""
        from k8s.rollout import ApplyChart, InstallRelease

        k = self.kubernetes
        for release in k.rollout.of_type(InstallRelease):
            k.make(steps_of(k.rollout, release.component))
        k.make(k.rollout.steps)
        k.link()
        if self.image_cache is not None:
            for manifest in k.cached:  # its pods pull through the cache's rules
                manifest.node.add_dependency(self.image_cache)
        self._rollout_extras()
        return [m for s in k.rollout.of_type(ApplyChart) if isinstance(m := k[s.id], eks.KubernetesManifest)]

    def _rollout_extras(self) -> None:
        """What the rollout's steps need of the AWS side: the pools' EC2NodeClasses name the nodes' role, which must
        exist before Karpenter resolves them, and with custom networking a pool's node, like a node group's, must
        find its zone's ENIConfig when ipamd starts (see _eni_configs)."""
        from k8s.components import KARPENTER_POOLS
        from k8s.rollout import apply_id

        pools = apply_id(KARPENTER_POOLS)
        if pools not in self.kubernetes.rollout:
            return
        if self.karpenter is not None:
            self.kubernetes[pools].node.add_dependency(self.karpenter.node_role)
        if self.eni_configs is not None:
            self.kubernetes[pools].node.add_dependency(self.eni_configs)

    def _system_node_groups(self) -> list[Construct]:
        """The node groups the controllers run on (:func:`k8s.scheduling.system_node_selector`: the system node
        group), or every node group when the plan has none of that role."""
        system = [self.node_groups[ng.name].nodegroup for ng in self.plan.all_node_groups
                  if ng.role == contract.SYSTEM_NODE_GROUP and ng.name in self.node_groups]
        return system or [group.nodegroup for group in self.node_groups.values()]

    def _acknowledge_findings(self) -> None:
        for name in NODE_ROLE_POLICIES:
            acknowledge(
                self.node_role, "AwsSolutions-IAM4",
                f"{name} is the AWS-maintained policy EKS documents for nodes; a copy would drift.",
                managed_policy(name),
            )
        acknowledge(
            self.vpc_cni_role, "AwsSolutions-IAM4",
            "AmazonEKS_CNI_Policy is the AWS-maintained policy the VPC CNI documents for its role.",
            managed_policy("AmazonEKS_CNI_Policy"),
        )
        acknowledge(
            self.cluster.role, "AwsSolutions-IAM4",
            "AmazonEKSClusterPolicy is the service role policy EKS requires for the control plane.",
            managed_policy("AmazonEKSClusterPolicy"),
        )
        provider = self.cluster.node.find_child("KubectlProvider")
        handler = provider.node.find_child("Handler")
        framework = provider.node.find_child("Provider").node.find_child("framework-onEvent")
        for role_scope in (handler, framework):
            role = role_scope.node.find_child("ServiceRole")
            for policy in (
                "service-role/AWSLambdaBasicExecutionRole",
                "service-role/AWSLambdaVPCAccessExecutionRole",
                "AmazonEC2ContainerRegistryReadOnly",
            ):
                acknowledge(
                    role, "AwsSolutions-IAM4",
                    "CDK's kubectl provider Lambda needs logging, VPC access and image pulls; the "
                    "roles are CDK internals that apply the Kubernetes manifests.",
                    managed_policy(policy),
                )
        ecr_public_arn = {"Fn::Join": ["", [
            "arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly",
        ]]}
        ecr_public = "Policy::" + json.dumps(
            {"Fn::If": [self.get_logical_id(handler.node.find_child("HasEcrPublic")), ecr_public_arn,
                        {"Ref": "AWS::NoValue"}]},
            separators=(",", ":"),
        )
        acknowledge(
            handler.node.find_child("ServiceRole"), "AwsSolutions-IAM4",
            "Conditional ECR Public read access CDK's kubectl provider adds for public images.",
            ecr_public,
        )
        acknowledge(
            handler, "AwsSolutions-L1",
            "The kubectl handler's runtime is chosen by aws-cdk-lib and moves with its releases.",
        )
        acknowledge(
            framework.node.find_child("ServiceRole").node.find_child("DefaultPolicy"), "AwsSolutions-IAM5",
            "The custom-resource framework may invoke any version of the kubectl handler (ARN:*).",
            f"Resource::<{self.get_logical_id(handler.node.default_child)}.Arn>:*",
        )
