"""The names that cross components, each defined once.

A string here is read by more than one of: the spec and plan (``efa_stack.spec``), the CDK stacks and
constructs, the cdk8s charts (``k8s``), and the command line (``efa_stack.tools``). Change it here and
every consumer follows; a test (tests/test_contract.py) fails if one of these strings is typed again
elsewhere in the package sources.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

# --- Extended resources advertised by the device plugins ------------------------------------------
# aws-efa-k8s-device-plugin advertises one `vpc.amazonaws.com/efa` per EFA device (EKS user guide,
# "Run machine learning training on Amazon EKS with Elastic Fabric Adapter").
EFA_RESOURCE: Final = "vpc.amazonaws.com/efa"
# NVIDIA k8s-device-plugin, README "Quick Start": `nvidia.com/gpu`.
GPU_RESOURCE: Final = "nvidia.com/gpu"
# aws-neuron device plugin: `aws.amazon.com/neuron` (Neuron docs, "Kubernetes environment setup").
NEURON_RESOURCE: Final = "aws.amazon.com/neuron"
# Kubernetes hugepages resource for 2 MiB pages ("Manage HugePages", kubernetes.io).
HUGEPAGES_2MI_RESOURCE: Final = "hugepages-2Mi"
# The RDMA shared device plugin's default resource name (for fabric: infiniband outside AWS).
RDMA_RESOURCE: Final = "rdma/hca"

# --- Labels, taints and annotations efa-stack puts on nodes and objects ----------------------------
LABEL_PREFIX: Final = "efa-stack.io/"
LABEL_NODE_GROUP: Final = LABEL_PREFIX + "node-group"
LABEL_ROLE: Final = LABEL_PREFIX + "role"
LABEL_EFA: Final = LABEL_PREFIX + "efa"
LABEL_ACCELERATOR: Final = LABEL_PREFIX + "accelerator"
LABEL_NCCL_JOB: Final = LABEL_PREFIX + "nccl-job"
LABEL_MPI_ROLE: Final = LABEL_PREFIX + "mpi-role"
TAG_CLUSTER: Final = LABEL_PREFIX + "cluster"
ANNOTATION_START: Final = LABEL_PREFIX + "start"
ANNOTATION_LOGS: Final = LABEL_PREFIX + "logs"
ANNOTATION_QUEUE: Final = LABEL_PREFIX + "kueue-queue"
"""On a suspended job that Kueue will run: the LocalQueue its start puts it in (the queue label is left off until
then, or Kueue would admit and start it at once)."""
ANNOTATION_HOST_ACCESS_REASON: Final = LABEL_PREFIX + "host-access-reason"
ANNOTATION_CONFIG_SHA256: Final = LABEL_PREFIX + "config-sha256"
"""On a controller's pod template: the SHA-256 of the configuration it reads at start, so that a changed
configuration rolls the Deployment."""
# Taints accelerator node groups get unless the spec sets their key itself.
GPU_TAINT_KEY: Final = GPU_RESOURCE
NEURON_TAINT_KEY: Final = NEURON_RESOURCE
# Kubernetes taint effects (k8s.io/api core/v1 TaintEffect): the spec accepts these and names.py checks them.
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
TAINT_EFFECTS: Final = get_args(TaintEffect)
# Well-known node label set by the kubelet (kubernetes.io/docs/reference/labels-annotations-taints).
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
COMMON_LABELS: Final = {"app.kubernetes.io/part-of": "efa-stack", "app.kubernetes.io/managed-by": "efa-stack"}

# --- Node groups and capacity ---------------------------------------------------------------------
SYSTEM_NODE_GROUP: Final = "system"
Role = Literal["gpu", "neuron", "cpu", "system"]
CapacityKind = Literal["on-demand", "reservation", "capacity-block"]
ON_DEMAND: Final = "on-demand"
RESERVATION: Final = "reservation"
CAPACITY_BLOCK: Final = "capacity-block"
RESERVED_CAPACITY: Final = (RESERVATION, CAPACITY_BLOCK)
# Network interface types of a launch template / EC2NodeClass (EC2 API Reference,
# LaunchTemplateInstanceNetworkInterfaceSpecificationRequest.InterfaceType): an ENA ``interface``, ``efa``
# (ENA + EFA) or ``efa-only`` (EFA without an IP address; never the primary interface).
InterfaceType = Literal["interface", "efa", "efa-only"]
ENA_INTERFACE: Final = "interface"
EFA_INTERFACE: Final = "efa"
EFA_ONLY: Final = "efa-only"
EfaInterfaceType = Literal["efa", "efa-only"]
EFA_INTERFACE_TYPES: Final = get_args(EfaInterfaceType)
# The spec's interfaceLayout: the EC2 guide's current per-card layout, or the older one (efa on card 0).
InterfaceLayout = Literal["current", "legacy"]
# What NCCL runs over, for the NCCL-tests job and the training jobs.
Fabric = Literal["efa", "tcp", "infiniband"]
FABRICS: Final = get_args(Fabric)
# Training job kinds: a Kubeflow Trainer v2 TrainJob or a Training Operator v1 PyTorchJob.
JobKind = Literal["trainjob", "pytorchjob"]
# EC2's own value for Capacity Blocks, the spelling the spec's capacity type follows: LaunchTemplate
# InstanceMarketOptions.MarketType, DescribeInstances InstanceLifecycle, DescribeCapacityReservations
# ReservationType (EC2 API Reference).
EC2_CAPACITY_BLOCK: Final = CAPACITY_BLOCK
# eksctl instanceMarketOptions.marketType: the one market type efa-stack reads (a Capacity Block).
MarketType = Literal["capacity-block"]

# --- Kubernetes objects the charts create and the tools look up -----------------------------------
KUBE_SYSTEM: Final = "kube-system"
EFA_DEVICE_PLUGIN_NAME: Final = "aws-efa-k8s-device-plugin"
NVIDIA_DEVICE_PLUGIN_NAME: Final = "nvidia-device-plugin-daemonset"
NEURON_DEVICE_PLUGIN_NAME: Final = "neuron-device-plugin"
# kubeflow/mpi-operator v2beta1 API (pkg/apis/kubeflow/v2beta1/register.go).
MPIJOB_GROUP: Final = "kubeflow.org"
MPIJOB_VERSION: Final = "v2beta1"
MPIJOB_PLURAL: Final = "mpijobs"
MPIJOB_KIND: Final = "MPIJob"
MPIJOB_API_VERSION: Final = f"{MPIJOB_GROUP}/{MPIJOB_VERSION}"
MPIJOB_CRD_NAME: Final = f"{MPIJOB_PLURAL}.{MPIJOB_GROUP}"
MPI_OPERATOR_NAMESPACE: Final = "mpi-operator"
MPI_OPERATOR_NAME: Final = "mpi-operator"
# Labels the operator puts on the pods it creates (pkg/controller/mpi_job_controller.go).
JOB_NAME_LABEL: Final = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL: Final = "training.kubeflow.org/job-role"
NCCL_JOB_NAMESPACE: Final = "default"
NCCL_JOB_PREFIX: Final = "nccl-tests-"
# The EFA guard init container of EFA worker pods (k8s/efa_guard.py) and the prefix of the one line it
# prints when a pod would fall back to TCP (k8s/scripts/efa_guard.sh; verify reads it back).
EFA_GUARD_CONTAINER: Final = "efa-guard"
EFA_GUARD_FAIL_PREFIX: Final = "efa-stack guard: FAIL"

# FSx for Lustre objects (the static volume and its claim).
FSX_CSI_DRIVER: Final = "fsx.csi.aws.com"
# Where job containers see the FSx for Lustre file system unless storage.mountPath says otherwise.
FSX_MOUNT_PATH: Final = "/fsx"
FSX_CLAIM_NAME: Final = "fsx-claim"
FSX_VOLUME_NAME: Final = "fsx-pv"
FSX_CLAIM_NAMESPACE: Final = "default"
FSX_STORAGE_CLASS_NAME: Final = "fsx-lustre"
# Kubeflow Training Operator v1 (the v1 line lives in kubeflow/trainer: tag v1.9.4,
# pkg/apis/kubeflow.org/v1/pytorch_types.go): PyTorchJob only, in the MPIJob's API group.
PYTORCHJOB_GROUP: Final = MPIJOB_GROUP
PYTORCHJOB_VERSION: Final = "v1"
PYTORCHJOB_PLURAL: Final = "pytorchjobs"
PYTORCHJOB_KIND: Final = "PyTorchJob"
PYTORCHJOB_API_VERSION: Final = f"{PYTORCHJOB_GROUP}/{PYTORCHJOB_VERSION}"
PYTORCHJOB_CRD_NAME: Final = f"{PYTORCHJOB_PLURAL}.{PYTORCHJOB_GROUP}"
TRAINING_OPERATOR_NAMESPACE: Final = "kubeflow"
TRAINING_OPERATOR_NAME: Final = "training-operator"
# Kubeflow Trainer v2 (kubeflow/trainer@v2.3.0, pkg/apis/trainer/v1alpha1: groupversion_info.go,
# trainjob_types.go, trainingruntime_types.go; CRDs in k8s/crds/; Helm chart namespace from
# docs/operator-guides/installation.md).
TRAINER_GROUP: Final = "trainer.kubeflow.org"
TRAINER_VERSION: Final = "v1alpha1"
TRAINER_API_VERSION: Final = f"{TRAINER_GROUP}/{TRAINER_VERSION}"
TRAINJOB_KIND: Final = "TrainJob"
CLUSTER_TRAINING_RUNTIME_KIND: Final = "ClusterTrainingRuntime"
TRAINING_RUNTIME_KIND: Final = "TrainingRuntime"
TRAINJOB_CRD_NAME: Final = f"trainjobs.{TRAINER_GROUP}"
CLUSTER_TRAINING_RUNTIME_CRD_NAME: Final = f"clustertrainingruntimes.{TRAINER_GROUP}"
TRAINING_RUNTIME_CRD_NAME: Final = f"trainingruntimes.{TRAINER_GROUP}"
JOBSET_CRD_NAME: Final = "jobsets.jobset.x-k8s.io"
"""The JobSet CRD Kubeflow Trainer's Helm release installs with its JobSet subchart (``jobset.install``)."""
TRAINER_NAMESPACE: Final = "kubeflow-system"
TRAINER_RELEASE: Final = "kubeflow-trainer"
"""The Helm release name of Kubeflow Trainer v2."""
TRAINER_DEPLOYMENT: Final = f"{TRAINER_RELEASE}-controller-manager"
"""The manager's Deployment: ``trainer.fullname`` is the release name when it contains the chart name
(kubeflow/trainer@v2.3.0 charts/kubeflow-trainer/templates/_helpers.tpl), plus ``-controller-manager``
(templates/manager/_helpers.tpl ``trainer.manager.name``)."""
# The training jobs efa-stack renders.
TRAINING_JOB_NAMESPACE: Final = "default"
LABEL_TRAINING_JOB: Final = LABEL_PREFIX + "training-job"

# --- Our cdk-nag rule pack: findings are EfaStack-<rule>, acknowledged with this pack name ---------------
NAG_PACK_NAME: Final = "EfaStack"

# --- Checks of the command line (preflight, verify) ------------------------------------------------
CheckStatus = Literal["pass", "warn", "fail"]
"""The outcome of one preflight or verify check."""

# --- Judging NCCL results -------------------------------------------------------------------------
# A run passes when its large-message bus bandwidth reaches this fraction of the EFA line rate.
NCCL_PASS_THRESHOLD: Final = 0.7


# --- Node acceptance (``efa-stack verify --acceptance``) ------------------------------------------
# The taint a failing or slow node gets with --quarantine (value: the reason, e.g. "dcgm-failed").
QUARANTINE_TAINT_KEY: Final = LABEL_PREFIX + "quarantine"
# Label on the pods and MPIJobs acceptance creates (value: the node group), so they can be listed and cleaned up.
LABEL_ACCEPTANCE: Final = LABEL_PREFIX + "acceptance"
# The checks, in the order they run; names in the verdict, the --json document and the taint reasons.
AcceptanceCheck = Literal[
    "gpu-count", "dcgm", "software", "nvreg", "efa-devices", "efa-pingpong", "lustre-efa", "nccl-single", "nccl-pair",
]
ACCEPTANCE_CHECKS: Final = get_args(AcceptanceCheck)

# Kueue (kubernetes-sigs/kueue@v0.19.2; k8s/kueue.py): API group and version of its objects, the job label that
# names a LocalQueue (pkg/controller/constants/constants.go QueueLabel) and the PodSet topology annotations
# (apis/kueue/v1beta2/topology_types.go PodSetRequiredTopologyAnnotation, PodSetPreferredTopologyAnnotation).
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"
KUEUE_API_VERSION: Final = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
KUEUE_NAMESPACE: Final = "kueue-system"
KUEUE_CONTROLLER: Final = "kueue-controller-manager"
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
KUEUE_REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_PODSET_GROUP: Final = "kueue.x-k8s.io/podset-group-name"
"""PodSets of one job with the same value share a flavor and one topology domain (topology_types.go
``PodSetGroupName``)."""
KUEUE_QUEUE_NAME: Final = "efa-stack-jobs"
"""The ClusterQueue and every LocalQueue efa-stack renders carry this name."""
NETWORK_LAYER_LABEL_PREFIX: Final = "topology.k8s.aws/network-node-layer-"
"""EKS labels a node of a supported instance type ``topology.k8s.aws/network-node-layer-1`` (top) .. -3 or -4."""

# Karpenter (aws/karpenter-provider-aws tag v1.15.1, Go module zip h1:6eH///KgWKDwD2R6wHRnKGN8Vu8OHueaXjNdx64TnuY=;
# k8s/karpenter.py, aws_constructs/karpenter.py): API groups and versions (pkg/apis/crds/karpenter.sh_nodepools.yaml,
# karpenter.k8s.aws_ec2nodeclasses.yaml, karpenter.sh_nodeoverlays.yaml), the pod annotation that keeps a node
# from voluntary disruption (website/content/en/v1.14/concepts/disruption.md "Pod-Level Controls"), the
# labels its nodes carry (concepts/scheduling.md "Well-Known Labels") and the tag key its docs select
# subnets and security groups by (getting-started step02-create-cluster.sh, ``karpenter.sh/discovery``).
KARPENTER_GROUP: Final = "karpenter.sh"
KARPENTER_API_VERSION: Final = f"{KARPENTER_GROUP}/v1"
KARPENTER_OVERLAY_API_VERSION: Final = f"{KARPENTER_GROUP}/v1alpha1"
KARPENTER_AWS_GROUP: Final = "karpenter.k8s.aws"
KARPENTER_AWS_API_VERSION: Final = f"{KARPENTER_AWS_GROUP}/v1"
KARPENTER_NAMESPACE: Final = KUBE_SYSTEM
KARPENTER_SERVICE_ACCOUNT: Final = "karpenter"
KARPENTER_RELEASE: Final = "karpenter"
KARPENTER_DEPLOYMENT: Final = KARPENTER_RELEASE
"""The controller's Deployment: ``karpenter.fullname``, the release name when it contains the chart name
(aws/karpenter-provider-aws@v1.15.1 charts/karpenter/templates/_helpers.tpl, templates/deployment.yaml)."""
KARPENTER_DO_NOT_DISRUPT: Final = "karpenter.sh/do-not-disrupt"
KARPENTER_NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"
KARPENTER_CAPACITY_TYPE_LABEL: Final = "karpenter.sh/capacity-type"
KARPENTER_DISCOVERY_TAG: Final = "karpenter.sh/discovery"

# --- UltraServers: ComputeDomains (efa_stack/planning/ultraserver.py, k8s/compute_domains.py) ----------------------
# The NVIDIA DRA driver, kubernetes-sigs/dra-driver-nvidia-gpu tag v0.4.1 (commit 764900e7833798a1528bd52a2af3e1b2d5f7a616):
# the ComputeDomain API (api/nvidia.com/resource/v1beta1/computedomain.go; the chart's
# crds/resource.nvidia.com_computedomains.yaml serves v1beta1 only), the chart (deployments/helm/dra-driver-nvidia-gpu,
# published as oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu: docs/install.md) and the
# controller's Deployment (templates/controller.yaml: ``<chart name>-controller``).
COMPUTE_DOMAIN_GROUP: Final = "resource.nvidia.com"
COMPUTE_DOMAIN_VERSION: Final = "v1beta1"
COMPUTE_DOMAIN_API_VERSION: Final = f"{COMPUTE_DOMAIN_GROUP}/{COMPUTE_DOMAIN_VERSION}"
COMPUTE_DOMAIN_KIND: Final = "ComputeDomain"
COMPUTE_DOMAIN_CRD_NAME: Final = f"computedomains.{COMPUTE_DOMAIN_GROUP}"
COMPUTE_DOMAIN_CLIQUE_CRD_NAME: Final = f"computedomaincliques.{COMPUTE_DOMAIN_GROUP}"
NVIDIA_DRA_RELEASE: Final = "dra-driver-nvidia-gpu"
NVIDIA_DRA_NAMESPACE: Final = "dra-driver-nvidia-gpu"
NVIDIA_DRA_CONTROLLER: Final = f"{NVIDIA_DRA_RELEASE}-controller"
COMPUTE_DOMAIN_CLAIM: Final = "compute-domain-channel"
"""The name of the workers' pod claim on their ComputeDomain's channel (a DNS label, the EKS GB200 page's name)."""
# GPU feature discovery (NVIDIA/k8s-device-plugin@v0.19.3 internal/lm/imex.go): the NVLink domain label,
# ``<cluster UUID>.<clique id>``; NFD (kubernetes-sigs/node-feature-discovery@v0.18.3) turns GFD's labels into node labels.
GPU_CLIQUE_LABEL: Final = "nvidia.com/gpu.clique"
GPU_FEATURE_DISCOVERY_NAME: Final = "gpu-feature-discovery"
NFD_RELEASE: Final = "node-feature-discovery"
NFD_NAMESPACE: Final = "node-feature-discovery"
NFD_MASTER: Final = f"{NFD_RELEASE}-master"
"""NFD's master Deployment: ``<fullname>-master``, the fullname being the release name when it contains the chart name
(kubernetes-sigs/node-feature-discovery@v0.18.3 deployment/helm/node-feature-discovery/templates/_helpers.tpl,
templates/master.yaml)."""

# --- The DRA device layer (``devices: dra``; efa_stack/planning/dra.py, k8s/dra.py, docs/design/dra.md) -----------
LABEL_DEVICES: Final = LABEL_PREFIX + "devices"
"""On the nodes of a ``devices: dra`` node group or pool (value ``dra``): the DRA drivers run only there, the device
plugins never there, and every job on the group selects it."""
DeviceMechanism = Literal["plugin", "dra"]
DEVICES_PLUGIN: Final = "plugin"
DEVICES_DRA: Final = "dra"
# kubernetes/kubernetes v1.35 (k8s.io/api v0.35.4 resource/v1): the API group and version of DeviceClass,
# ResourceSlice, ResourceClaim and ResourceClaimTemplate.
RESOURCE_GROUP: Final = "resource.k8s.io"
RESOURCE_API_VERSION: Final = f"{RESOURCE_GROUP}/v1"
RESOURCE_CLAIM_TEMPLATE_KIND: Final = "ResourceClaimTemplate"
DEVICE_CLASS_KIND: Final = "DeviceClass"
RESOURCE_SLICE_KIND: Final = "ResourceSlice"
PCIE_ROOT_ATTRIBUTE: Final = "resource.kubernetes.io/pcieRoot"
"""The attribute both the NVIDIA and the EFA DRA driver publish for a device's PCIe root (k8s.io/dynamic-resource-
allocation deviceattribute ``GetPCIeRootAttributeByPCIBusID``)."""
# The drivers and the DeviceClasses their pinned charts create: aws/eks-charts@5239609 stable/aws-dranet 1.0.0
# templates/deviceclass.yaml (kubernetes-sigs/dranet@v1.2.0 cmd/dranet/app.go ``driverName``);
# kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 templates/deviceclass-gpu.yaml (cmd/gpu-kubelet-plugin/main.go
# ``DriverName``); aws-neuron/neuron-helm-charts@97e1b7d templates/dra-driver/dra-driver-deviceclass.yaml.
EFA_DRA_DRIVER: Final = "dra.net"
EFA_DEVICE_CLASS: Final = "efa.networking.k8s.aws"
GPU_DRA_DRIVER: Final = "gpu.nvidia.com"
GPU_DEVICE_CLASS: Final = GPU_DRA_DRIVER
NEURON_DRA_DRIVER: Final = "neuron.aws.com"
NEURON_DEVICE_CLASS: Final = NEURON_DRA_DRIVER
AWS_DRANET_RELEASE: Final = "aws-dranet"
NEURON_DRA_RELEASE: Final = "neuron-dra-driver"

# --- existing VPCs -----------------------------------------------------------------------------------------------

CDK_CONTEXT_FILE: Final = "cdk.context.json"
"""The file the CDK CLI keeps context lookups in and passes to the app on every synth (next to cdk.json)."""
SUBNET_ZONES_CONTEXT: Final = "efa-stack:subnet-zones"
"""Context key of the zones ``efa-stack lookup`` recorded for an existing VPC's subnets: {subnet id: zone}."""

# --- VPC CNI custom networking (vpc.podCIDR) ----------------------------------------------------------------------
# aws/amazon-vpc-cni-k8s@v1.20.1 (d885b3b) charts/aws-vpc-cni/crds/customresourcedefinition.yaml: group
# crd.k8s.amazonaws.com, version v1alpha1, kind ENIConfig, cluster-scoped (one per zone, named after the zone).
ENICONFIG_API_VERSION: Final = "crd.k8s.amazonaws.com/v1alpha1"
ENICONFIG_KIND: Final = "ENIConfig"
ENICONFIG_CRD_NAME: Final = "eniconfigs.crd.k8s.amazonaws.com"
