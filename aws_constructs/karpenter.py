"""Karpenter's controller on an EKS cluster: its IAM role through EKS Pod Identity, the interruption queue and its
EventBridge rules, the nodes' role with an EKS access entry, and the Helm release.

The controller is aws/karpenter-provider-aws v1.15.1 (:data:`efa_stack.planning.karpenter.KARPENTER_VERSION`); its
AWS side follows the v1.14 documentation (main@1d927085dd81a9df9301e613f371dac5b4d16bfe,
website/content/en/v1.14/getting-started/getting-started-with-karpenter/), since the website is not part of the
v1.15.1 module zip the controller was read from and v1.15's ``cloudformation.yaml`` could not be read. What the
controller calls did not change but for one call: the AWS API inputs the code at v1.15.1 builds (pkg/, cmd/;
``ec2.*Input``, ``iam.*Input``, ``ssm.*Input``, ``pricing.*Input``, ``sqs.*Input``, ``eks.*Input`` and their
paginators) are v1.14.1's plus ``ec2.RebootInstancesInput`` (pkg/providers/instance/instance.go ``Reboot``, node
repair's reboot, only with ``settings.awsFeatureGates.rebootForRepair``, which efa-stack keeps off: values.yaml
"Requires the ec2:RebootInstances permission"), so no statement changes. The controller's permissions are the
statements of v1.14's ``cloudformation.yaml`` (NodeLifecyclePolicy, IAMIntegrationPolicy, EKSIntegrationPolicy,
InterruptionPolicy, ResourceDiscoveryPolicy; the ZonalShiftPolicy is left out since ``settings.enableZonalShift``
stays false), the queue and rules are its ``KarpenterInterruptionQueue`` and the five ``AWS::Events::Rule``s,
the service account gets its role through an EKS Pod Identity association (``step02-create-cluster.sh``:
``iam.podIdentityAssociations``, namespace and service account ``karpenter``), and the chart is installed as
``step08-apply-helm-chart.sh`` does. The design: docs/design/karpenter.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_cdk import Duration, RemovalPolicy, Stack, Token
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from aws_cdk import custom_resources as cr
from constructs import Construct

from aws_constructs.pod_identity import pod_identity_role
from aws_constructs.security import acknowledge, managed_policy
from efa_stack import contract

INTERRUPTION_EVENTS: tuple[tuple[str, str, str], ...] = (
    ("ScheduledChangeRule", "aws.health", "AWS Health Event"),
    ("SpotInterruptionRule", "aws.ec2", "EC2 Spot Instance Interruption Warning"),
    ("RebalanceRule", "aws.ec2", "EC2 Instance Rebalance Recommendation"),
    ("InstanceStateChangeRule", "aws.ec2", "EC2 Instance State-change Notification"),
    ("CapacityReservationInterruptionRule", "aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
)
"""(construct id, source, detail-type) of the EventBridge rules upstream's cloudformation.yaml sends to the queue."""
QUEUE_RETENTION_SECONDS = 300
"""``KarpenterInterruptionQueue.MessageRetentionPeriod`` upstream: an interruption message is useless after minutes."""
CHART_NAME = "karpenter"
"""The chart name, the last part of its OCI reference."""


@dataclass(frozen=True)
class KarpenterControllerProps:
    """Props of :class:`KarpenterController`; every default is what happens when the prop is left out."""

    cluster_name: str
    """The EKS cluster name (a plain string: the IAM conditions name it in their keys)."""
    version: str
    """The chart version (``1.15.1``)."""
    chart_repository: str
    """The OCI chart (``oci://public.ecr.aws/karpenter/karpenter``)."""
    node_role_name: str
    """The nodes' role name, as the EC2NodeClasses name it (``spec.role``)."""
    interruption_queue_name: str
    namespace: str = contract.KARPENTER_NAMESPACE
    service_account: str = contract.KARPENTER_SERVICE_ACCOUNT
    release: str = contract.KARPENTER_RELEASE
    node_policies: Sequence[str] = ()
    """AWS managed policies of the nodes' role (the cluster's node policies)."""
    chart_values: Mapping[str, Any] = field(default_factory=dict)
    """The chart's values (:meth:`efa_stack.planning.karpenter.KarpenterPlan.values`, the document ``apply.sh``
    passes too); the chart's defaults when empty."""
    placement_groups: Sequence[str] = ()
    """Names of the cluster placement groups to create for the pools (the EC2NodeClasses select them by name);
    none by default."""


def controller_statements(cluster: str, partition: str, region: str, account: str, node_role_arn: str,
                          queue_arn: str) -> list[iam.PolicyStatement]:
    """The controller's permissions: the statements of upstream's cloudformation.yaml (Sid for Sid) with this
    cluster's name, the nodes' role and the queue."""
    ec2 = f"arn:{partition}:ec2:{region}"
    owned = f"aws:ResourceTag/kubernetes.io/cluster/{cluster}"
    request_owned = f"aws:RequestTag/kubernetes.io/cluster/{cluster}"
    tagged = [f"{ec2}:*:{kind}/*" for kind in
              ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")]
    profile = f"arn:{partition}:iam::{account}:instance-profile/*"

    def allow(sid: str, actions: list[str], resources: list[str], conditions: dict[str, Any] | None = None,
              ) -> iam.PolicyStatement:
        return iam.PolicyStatement(sid=sid, actions=actions, resources=resources, conditions=conditions)

    return [
        allow("AllowScopedEC2InstanceAccessActions", ["ec2:RunInstances", "ec2:CreateFleet"], [
            f"{ec2}::image/*", f"{ec2}::snapshot/*", f"{ec2}:*:security-group/*", f"{ec2}:*:subnet/*",
            f"{ec2}:*:capacity-reservation/*", f"{ec2}:*:placement-group/*",
        ]),
        allow("AllowScopedEC2LaunchTemplateAccessActions", ["ec2:RunInstances", "ec2:CreateFleet"],
              [f"{ec2}:*:launch-template/*"],
              {"StringEquals": {owned: "owned"}, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}),
        allow("AllowScopedEC2InstanceActionsWithTags", ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
              tagged, {
                  "StringEquals": {request_owned: "owned", "aws:RequestTag/eks:eks-cluster-name": cluster},
                  "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
              }),
        allow("AllowScopedResourceCreationTagging", ["ec2:CreateTags"], tagged, {
            "StringEquals": {
                request_owned: "owned", "aws:RequestTag/eks:eks-cluster-name": cluster,
                "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
            },
            "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
        }),
        allow("AllowScopedResourceTagging", ["ec2:CreateTags"], [f"{ec2}:*:instance/*"], {
            "StringEquals": {owned: "owned"},
            "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
            "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster},
            "ForAllValues:StringEquals": {"aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]},
        }),
        allow("AllowScopedDeletion", ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
              [f"{ec2}:*:instance/*", f"{ec2}:*:launch-template/*"],
              {"StringEquals": {owned: "owned"}, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}),
        allow("AllowPassingInstanceRole", ["iam:PassRole"], [node_role_arn],
              {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}}),
        allow("AllowScopedInstanceProfileCreationActions", ["iam:CreateInstanceProfile"], [profile], {
            "StringEquals": {
                request_owned: "owned", "aws:RequestTag/eks:eks-cluster-name": cluster,
                "aws:RequestTag/topology.kubernetes.io/region": region,
            },
            "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
        }),
        allow("AllowScopedInstanceProfileTagActions", ["iam:TagInstanceProfile"], [profile], {
            "StringEquals": {
                owned: "owned", "aws:ResourceTag/topology.kubernetes.io/region": region,
                request_owned: "owned", "aws:RequestTag/eks:eks-cluster-name": cluster,
                "aws:RequestTag/topology.kubernetes.io/region": region,
            },
            "StringLike": {
                "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
            },
        }),
        allow("AllowScopedInstanceProfileActions",
              ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
              [profile], {
                  "StringEquals": {owned: "owned", "aws:ResourceTag/topology.kubernetes.io/region": region},
                  "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
              }),
        allow("AllowAPIServerEndpointDiscovery", ["eks:DescribeCluster"],
              [f"arn:{partition}:eks:{region}:{account}:cluster/{cluster}"]),
        allow("AllowInterruptionQueueActions", ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
              [queue_arn]),
        allow("AllowRegionalReadActions", [
            "ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances",
            "ec2:DescribeInstanceStatus", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
            "ec2:DescribeLaunchTemplates", "ec2:DescribePlacementGroups", "ec2:DescribeSecurityGroups",
            "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets",
        ], ["*"], {"StringEquals": {"aws:RequestedRegion": region}}),
        allow("AllowSSMReadActions", ["ssm:GetParameter"], [f"arn:{partition}:ssm:{region}::parameter/aws/service/*"]),
        allow("AllowPricingReadActions", ["pricing:GetProducts"], ["*"]),
        allow("AllowUnscopedInstanceProfileListAction", ["iam:ListInstanceProfiles"], ["*"]),
        allow("AllowInstanceProfileReadActions", ["iam:GetInstanceProfile"], [profile]),
    ]


PLACEMENT_GROUP_EXISTS = "InvalidPlacementGroup.Duplicate"
"""The EC2 error code of a placement group name already in use (EC2 API Reference, "Error codes for the Amazon EC2
API": "The specified placement group already exists")."""
PLACEMENT_GROUP_NOT_FOUND = "InvalidPlacementGroup.Unknown"
"""The EC2 error code of a placement group that does not exist (EC2 API Reference, "Error codes for the Amazon EC2
API"): a group deleted by hand is gone already when the stack deletes it."""


def placement_group_statements(partition: str, region: str, account: str, name: str) -> list[iam.PolicyStatement]:
    """What creating, tagging and deleting the named cluster placement group needs: ``ec2:CreatePlacementGroup``,
    ``ec2:CreateTags`` (tags given at creation; Service Authorization Reference, Amazon EC2, resource type
    ``placement-group``) and ``ec2:DeletePlacementGroup``, on that group only."""
    arn = f"arn:{partition}:ec2:{region}:{account}:placement-group/{name}"
    return [iam.PolicyStatement(
        actions=["ec2:CreatePlacementGroup", "ec2:CreateTags", "ec2:DeletePlacementGroup"], resources=[arn],
    )]


class PoolPlacementGroup(Construct):
    """A cluster placement group with a fixed name (``resource``: a custom resource that calls EC2
    CreatePlacementGroup on create and DeletePlacementGroup on delete).

    Not ``AWS::EC2::PlacementGroup``: that resource takes no name (its properties are PartitionCount, SpreadLevel,
    Strategy and Tags; the group gets a generated name, CloudFormation User Guide, AWS::EC2::PlacementGroup), and an
    EC2NodeClass selects a group only by name or id (``placementGroupSelector``, aws/karpenter-provider-aws@v1.15.1
    pkg/apis/v1/ec2nodeclass.go), which dist/ must hold before any stack exists."""

    def __init__(self, scope: Construct, id: str, *, name: str, cluster_name: str) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.name = name
        self.resource = cr.AwsCustomResource(
            self, "Resource",
            on_create=cr.AwsSdkCall(
                service="EC2", action="createPlacementGroup",
                parameters={
                    "GroupName": name, "Strategy": "cluster",
                    "TagSpecifications": [{"ResourceType": "placement-group", "Tags": [
                        {"Key": contract.TAG_CLUSTER, "Value": cluster_name},
                    ]}],
                },
                physical_resource_id=cr.PhysicalResourceId.of(name),
                # A group of this name left by an earlier stack (its delete refused while instances still ran in it)
                # is taken over rather than failing the deploy: the name is the cluster's and the pool's own.
                ignore_error_codes_matching=PLACEMENT_GROUP_EXISTS,
            ),
            on_delete=cr.AwsSdkCall(
                service="EC2", action="deletePlacementGroup", parameters={"GroupName": name},
                ignore_error_codes_matching=PLACEMENT_GROUP_NOT_FOUND,
            ),
            policy=cr.AwsCustomResourcePolicy.from_statements(
                placement_group_statements(stack.partition, stack.region, stack.account, name),
            ),
            install_latest_aws_sdk=False,
        )


class KarpenterController(Construct):
    """Karpenter on ``cluster``: ``node_role``, ``queue``, ``role`` (the controller's), ``association``,
    ``placement_groups`` (the pools' new cluster placement groups) and ``chart`` (the Helm release, installed
    without the chart's CRDs: :mod:`k8s.karpenter` applies them)."""

    def __init__(self, scope: Construct, id: str, props: KarpenterControllerProps, *, cluster: eks.ICluster) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.props = props
        # The nodes' role: a fixed name (the EC2NodeClass names it); Karpenter makes the instance profile.
        self.node_role = iam.Role(
            self, "NodeRole", role_name=props.node_role_name, assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in props.node_policies] or None,
            description=f"EKS nodes Karpenter launches for {props.cluster_name}",
        )
        for name in props.node_policies:
            acknowledge(self.node_role, "AwsSolutions-IAM4",
                        f"{name}: an EKS node policy, as on the cluster's node groups.", managed_policy(name))
        # EKS API Reference, CreateAccessEntry ``type``: EC2_LINUX for "an IAM role that's used for self-managed
        # Amazon EC2 nodes" (EKS grants the node permissions itself; no access policies, no groups).
        self.access_entry = eks.AccessEntry(
            self, "NodeAccessEntry", cluster=cluster, principal=self.node_role.role_arn,
            access_entry_type=eks.AccessEntryType.EC2_LINUX, access_policies=[],
        )
        self.queue = sqs.Queue(
            self, "InterruptionQueue", queue_name=props.interruption_queue_name,
            retention_period=Duration.seconds(QUEUE_RETENTION_SECONDS),
            encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
        )
        acknowledge(self.queue, "AwsSolutions-SQS3",
                    "Interruption events expire within minutes (5-minute retention, as upstream's queue); a "
                    "dead-letter queue would hold only stale events.")
        self.queue.add_to_resource_policy(iam.PolicyStatement(
            actions=["sqs:SendMessage"], resources=[self.queue.queue_arn],
            principals=[iam.ServicePrincipal("events.amazonaws.com"), iam.ServicePrincipal("sqs.amazonaws.com")],
        ))
        self.rules = []
        for rule_id, source, detail_type in INTERRUPTION_EVENTS:
            rule = events.Rule(self, rule_id, event_pattern=events.EventPattern(source=[source], detail_type=[detail_type]))
            rule.add_target(targets.SqsQueue(self.queue))
            self.rules.append(rule)
        self.role = pod_identity_role(
            self, "ControllerRole", description=f"Karpenter controller of {props.cluster_name} through EKS Pod Identity",
        )
        policy = iam.Policy(self, "ControllerPolicy", statements=controller_statements(
            props.cluster_name, stack.partition, stack.region, stack.account, self.node_role.role_arn,
            self.queue.queue_arn,
        ))
        policy.attach_to_role(self.role)
        # cdk-nag names each wildcard resource, with CloudFormation's pseudo parameters as <AWS::...>.
        region = stack.region if not Token.is_unresolved(stack.region) else "<AWS::Region>"
        shown = controller_statements(props.cluster_name, "<AWS::Partition>", region, "<AWS::AccountId>", "", "")
        for resource in dict.fromkeys(r for st in shown for r in st.resources if "*" in r):
            acknowledge(policy, "AwsSolutions-IAM5",
                        "Upstream Karpenter's controller policy (cloudformation.yaml at v1.14.1): instance, fleet, "
                        "launch-template and instance-profile ARNs are wildcards scoped by the cluster's ownership "
                        "and Karpenter's tags in the statements' conditions; Describe and pricing calls take none.",
                        f"Resource::{resource}")
        self.association = eks.CfnPodIdentityAssociation(
            self, "PodIdentityAssociation", cluster_name=cluster.cluster_name, namespace=props.namespace,
            service_account=props.service_account, role_arn=self.role.role_arn,
        )
        self.chart = cluster.add_helm_chart(
            "Karpenter", chart=CHART_NAME, repository=props.chart_repository, version=props.version,
            release=props.release, namespace=props.namespace, values=dict(props.chart_values) or None,
            # The CRDs are applied by the cluster stack's karpenter-crd manifest (also in dist/), kept when the
            # release goes: deleting them would delete every NodePool and NodeClaim. aws-cdk-lib 2.275's handler
            # does not pass skip_crds on to helm, so the release follows that manifest's CRD waits (Helm leaves
            # existing CRDs alone; stacks/cluster_stack.py _manifests). No helm --wait: the release is
            # applied while the nodes launch, and the cluster stack waits for the controller's replica after them.
            skip_crds=True, wait=False, timeout=Duration.minutes(10), removal_policy=RemovalPolicy.DESTROY,
        )
        self.chart.node.add_dependency(self.association)
        self.placement_groups = [
            PoolPlacementGroup(self, f"PlacementGroup-{name}", name=name, cluster_name=props.cluster_name)
            for name in props.placement_groups
        ]
        if self.placement_groups:
            _acknowledge_sdk_handler(stack)
        # The pools' placement groups exist before, and are deleted after, the release: deleting the pools (which
        # depend on the release) terminates the instances launched into the groups first, and EC2 deletes no group
        # that still holds instances (EC2 API Reference, DeletePlacementGroup: its instances must be terminated
        # first).
        self.chart.node.add_dependency(*self.placement_groups)
        # The release is created after, and deleted before, everything the running controller uses: its policy
        # (the association names only the role, so nothing else orders the policy, and CloudFormation would
        # delete it in the first wave of a stack deletion), the queue with its policy and rules, and the nodes'
        # access entry. Deleting an EC2NodeClass or a NodeClaim waits for the controller's finalizers, which
        # terminate the instances (ec2:TerminateInstances) and remove the instance profile it made
        # (iam:RemoveRoleFromInstanceProfile, iam:DeleteInstanceProfile): cloudformation.yaml at v1.14.1,
        # AllowScopedDeletion and AllowScopedInstanceProfileActions; concepts/disruption.md "Termination
        # Controller" (the karpenter.sh/termination finalizer of nodes and NodeClaims); pkg/controllers/nodeclass/
        # controller.go ``finalize`` (the karpenter.k8s.aws/termination finalizer of an EC2NodeClass, which waits
        # for its NodeClaims, then deletes its instance profiles). Without the policy the finalizers never finish,
        # the instances keep running in the VPC, and the node role cannot be deleted while an instance profile
        # holds it.
        self.chart.node.add_dependency(policy, self.queue, *self.rules, self.access_entry)


def _acknowledge_sdk_handler(stack: Stack) -> None:
    """cdk-nag findings on the stack's one AwsCustomResource Lambda (a CDK singleton): its basic execution role and
    its runtime, chosen by aws-cdk-lib."""
    handler = stack.node.try_find_child(AWS_SDK_HANDLER_ID)
    if handler is None:
        return
    acknowledge(handler.node.find_child("ServiceRole"), "AwsSolutions-IAM4",
                "CDK's AwsCustomResource Lambda logs through AWSLambdaBasicExecutionRole; it makes the pools' "
                "placement groups.", managed_policy("service-role/AWSLambdaBasicExecutionRole"))
    acknowledge(handler, "AwsSolutions-L1", "The AwsCustomResource handler's runtime is chosen by aws-cdk-lib.")


AWS_SDK_HANDLER_ID = "AWS679f53fac002430cb0da5b7982bd2287"
"""The construct id of aws-cdk-lib's AwsCustomResource singleton Lambda (custom-resources/lib/aws-custom-resource,
``AwsCustomResource.PROVIDER_FUNCTION_UUID``, with its dashes removed)."""
