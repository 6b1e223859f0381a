"""Every container image the Kubernetes side runs, pinned, with where the version comes from.

One place for versions: bump a tag here and the snapshot and golden tests show every manifest that
changes. The NCCL test image is the spec's (``ncclTest.image``, default in :mod:`efa_stack.spec.models`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# --- AWS EFA Kubernetes device plugin -------------------------------------------------------------
# aws/eks-charts, chart stable/aws-efa-k8s-device-plugin: PR #1366 "bump aws-efa-k8s-device-plugin
# to v0.5.21-eksbuild.13" (the latest bump; PR #1363 brought v0.5.21-eksbuild.9, PR #1338 v0.5.20).
# p6-b200 needs >= 0.5.10 (aws/sagemaker-hyperpod-cli PR #282: older plugins count NVLink ibp*
# devices as EFA).
EFA_DEVICE_PLUGIN_REPOSITORY = "eks/aws-efa-k8s-device-plugin"
EFA_DEVICE_PLUGIN_TAG = "v0.5.21-eksbuild.13"

# --- NVIDIA device plugin --------------------------------------------------------------------------
# NVIDIA/k8s-device-plugin: v0.19.0 turned MOFED on by default (PR #1550), which mounts every
# /dev/infiniband/uverbs* into GPU containers and conflicts with the EFA device plugin (issue #1692).
# v0.19.3 reverted that default (PR #1837/#1841; "v0.19.3 has been published with the fix").
# v0.19.0-0.19.2 are therefore never used; the DaemonSet also sets MOFED_ENABLED=false explicitly.
NVIDIA_DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
NVIDIA_DEVICE_PLUGIN_BROKEN = ("v0.19.0", "v0.19.1", "v0.19.2")

# --- AWS Neuron device plugin ----------------------------------------------------------------------
# aws-neuron/neuron-helm-charts: neuron-helm-chart 1.10.0 pins neuron-device-plugin 2.32.0.0 (the
# tag EKS Neuron AMIs also pre-pull). Image on Public ECR (Neuron docs, "Kubernetes environment setup").
NEURON_DEVICE_PLUGIN_IMAGE = "public.ecr.aws/neuron/neuron-device-plugin:2.32.0.0"

# --- NVIDIA DCGM (node acceptance: dcgmi diag) ------------------------------------------------------
# NVIDIA/gpu-operator@v26.7.0 deployments/gpu-operator/values.yaml: dcgm.repository nvcr.io/nvidia/cloud-native,
# image dcgm, version 4.6.0-1-ubuntu24.04 (the standalone DCGM the operator deploys). 4.6.0 is the newest
# NVIDIA/DCGM release tag (v4.6.0); its docker/Dockerfile.* install datacenter-gpu-manager-4 and set
# ENTRYPOINT nv-hostengine, so the image carries dcgmi and nv-hostengine.
DCGM_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"

# --- Kubeflow MPI operator -------------------------------------------------------------------------
# kubeflow/mpi-operator release v0.8.2 (issue #820 "Release v0.8.2 requirements", released
# 2026-07-03; fixes stability bugs of v0.8.0). Images are tagged without the "v".
MPI_OPERATOR_VERSION = "0.8.2"
MPI_OPERATOR_IMAGE = f"mpioperator/mpi-operator:{MPI_OPERATOR_VERSION}"

# --- Kubeflow Training Operator v1 (PyTorchJob) ----------------------------------------------------
# The v1 line lives in kubeflow/trainer (the renamed kubeflow/training-operator); its newest non-rc v1
# tag is v1.9.4 (commit 4445c12, "Release Training Operator Image for v1.9.4 (#3947)"), whose
# manifests/overlays/standalone/kustomization.yaml sets image ghcr.io/kubeflow/training-v1/training-operator
# with newTag v1-93c5489.
TRAINING_OPERATOR_VERSION = "v1.9.4"
TRAINING_OPERATOR_IMAGE = "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"

# --- Kubeflow Trainer v2 (Helm chart) -------------------------------------------------------------
# kubeflow/trainer tag v2.3.0 (newest non-rc v2 tag): charts/kubeflow-trainer/Chart.yaml version 2.3.0,
# pushed to oci://ghcr.io/kubeflow/charts by .github/workflows/publish-helm-charts.yaml and installed with
# `helm install kubeflow-trainer oci://ghcr.io/kubeflow/charts/kubeflow-trainer --version 2.3.0`
# (docs/operator-guides/installation.md). The manager image is ghcr.io/kubeflow/trainer/trainer-controller-manager
# (values.yaml image.registry/repository; the tag defaults to the chart version, pinned here explicitly).
TRAINER_CHART_REPOSITORY = "oci://ghcr.io/kubeflow/charts/kubeflow-trainer"
TRAINER_CHART_VERSION = "2.3.0"
TRAINER_IMAGE_REGISTRY = "ghcr.io"
TRAINER_IMAGE_REPOSITORY = "kubeflow/trainer/trainer-controller-manager"
TRAINER_IMAGE_TAG = f"v{TRAINER_CHART_VERSION}"
# The chart's JobSet dependency (Chart.yaml: jobset 0.12.0 from oci://registry.k8s.io/jobset/charts).
# kubernetes-sigs/jobset@v0.12.0 hack/helm-chart-package.sh packages released charts with image
# registry.k8s.io/jobset/jobset and tag v0.12.0; pinned here explicitly through the subchart's values.
JOBSET_IMAGE_REPOSITORY = "registry.k8s.io/jobset/jobset"
JOBSET_IMAGE_TAG = "v0.12.0"

# --- Amazon EKS add-on registries ------------------------------------------------------------------
# EKS user guide, "View Amazon container image registries for Amazon EKS add-ons" (add-ons-images):
# images are replicated to an ECR registry in every region; most commercial regions use account
# 602401143452, opt-in regions, China and GovCloud use their own accounts (listed below).
EKS_REGISTRY_ACCOUNT = "602401143452"
EKS_REGISTRY_ACCOUNTS: dict[str, str] = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-east-2": "533267051163",
    "ap-south-2": "900889452093",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
    "ca-west-1": "761377655185",
    "cn-north-1": "918309763551",
    "cn-northwest-1": "961992271922",
    "eu-central-2": "900612956339",
    "eu-south-1": "590381155156",
    "eu-south-2": "455263428931",
    "il-central-1": "066635153087",
    "me-central-1": "759879836304",
    "me-south-1": "558608220178",
    "mx-central-1": "730335286997",
    "us-gov-east-1": "151742754352",
    "us-gov-west-1": "013241004608",
}


def eks_registry(region: str) -> str:
    """The EKS add-on ECR registry host for ``region``.

    ``602401143452.dkr.ecr.<region>.amazonaws.com`` for most commercial regions; the account from
    :data:`EKS_REGISTRY_ACCOUNTS` for opt-in regions, China (``.amazonaws.com.cn``) and GovCloud.
    Nodes pull with their node role (AmazonEC2ContainerRegistryReadOnly), through the ECR interface
    endpoints when the VPC has them.
    """
    account = EKS_REGISTRY_ACCOUNTS.get(region, EKS_REGISTRY_ACCOUNT)
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{suffix}"


def efa_device_plugin_image(region: str, tag: str = EFA_DEVICE_PLUGIN_TAG) -> str:
    """The EFA device plugin image from the cluster region's EKS registry."""
    return f"{eks_registry(region)}/{EFA_DEVICE_PLUGIN_REPOSITORY}:{tag}"


def with_images(value: Any, replace: Callable[[str], str]) -> Any:
    """``value`` (rendered Kubernetes objects, or a part of them) with every ``image`` string replaced by
    ``replace(image)``: containers', init containers' and a TrainJob trainer's. The objects given are not changed."""
    if isinstance(value, list):
        return [with_images(v, replace) for v in value]
    if isinstance(value, dict):
        return {k: replace(v) if k == "image" and isinstance(v, str) else with_images(v, replace)
                for k, v in value.items()}
    return value


def images_of(value: Any) -> set[str]:
    """Every ``image`` string in ``value`` (rendered Kubernetes objects)."""
    found: set[str] = set()

    def keep(image: str) -> str:
        found.add(image)
        return image

    with_images(value, keep)
    return found
