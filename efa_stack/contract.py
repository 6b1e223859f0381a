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
ANNOTATION_HOST_ACCESS_REASON: Final = LABEL_PREFIX + "host-access-reason"
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
# EC2's own value for Capacity Blocks, the spelling the spec's capacity type follows: LaunchTemplate
# InstanceMarketOptions.MarketType, DescribeInstances InstanceLifecycle, DescribeCapacityReservations
# ReservationType (EC2 API Reference).
EC2_CAPACITY_BLOCK: Final = CAPACITY_BLOCK

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
FSX_CLAIM_NAME: Final = "fsx-claim"
FSX_VOLUME_NAME: Final = "fsx-pv"
FSX_CLAIM_NAMESPACE: Final = "default"
FSX_STORAGE_CLASS_NAME: Final = "fsx-lustre"

# --- Checks of the command line (preflight, verify) ------------------------------------------------
CheckStatus = Literal["pass", "warn", "fail"]
"""The outcome of one preflight or verify check."""

# --- Judging NCCL results -------------------------------------------------------------------------
# A run passes when its large-message bus bandwidth reaches this fraction of the EFA line rate.
NCCL_PASS_THRESHOLD: Final = 0.7


def nccl_job_name(node_group: str) -> str:
    """The NCCL-tests MPIJob of ``node_group`` (the chart renders it, verify starts it); see efa_stack.names."""
    from efa_stack import names

    return names.nccl_job_name(node_group)
