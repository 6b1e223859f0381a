"""What efa-stack installs on a cluster, one entry per chart or Helm release: its id, its place in the apply order,
and what the rollout must wait for around it (:mod:`k8s.rollout` turns the entries into one step graph that
``cdk deploy``, ``apply.sh`` and ``efa-stack rehearse`` translate).

Adding an operator is its chart (or Helm release) plus one :class:`Component` here: the controller's Deployment
whose available replica the rollout waits for, the CRDs it needs served before it can become available, the charts
whose objects it admits or finalizes (applied after that wait, deleted before it), and whether its objects outlive
the chart. Ids are a contract: a chart id names its ``dist/`` file and its manifest's construct id, so renaming one
replaces the manifest. The table and the ordering rules: docs/design/kubernetes-side.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from efa_stack import contract
from k8s.karpenter import POOL_KIND_CRDS

EFA_DEVICE_PLUGIN = "efa-device-plugin"
NVIDIA_DEVICE_PLUGIN = "nvidia-device-plugin"
NEURON_DEVICE_PLUGIN = "neuron-device-plugin"
GPU_FEATURE_DISCOVERY = contract.GPU_FEATURE_DISCOVERY_NAME
NODE_FEATURE_DISCOVERY = contract.NFD_RELEASE
NVIDIA_DRA_DRIVER = "nvidia-dra-driver"
COMPUTE_DOMAINS = "compute-domains"
MPI_OPERATOR_CRD = "mpi-operator-crd"
MPI_OPERATOR = "mpi-operator"
NCCL_TESTS = "nccl-tests"
TRAINING_OPERATOR_CRD = "training-operator-crd"
TRAINING_OPERATOR = "training-operator"
KUBEFLOW_TRAINER = "kubeflow-trainer"
TRAINING_RUNTIMES = "training-runtimes"
TRAINING_JOBS = "training-jobs"
KUEUE_CRD = "kueue-crd"
KUEUE_WORKLOAD_CRD = "kueue-workload-crd"
KUEUE = "kueue"
KUEUE_QUEUES = "kueue-queues"
KARPENTER_CRD = "karpenter-crd"
KARPENTER = "karpenter"
KARPENTER_POOLS = "karpenter-pools"
AWS_DRANET = contract.AWS_DRANET_RELEASE
NEURON_DRA = contract.NEURON_DRA_RELEASE
RESOURCE_CLAIMS = "resource-claims"


@dataclass(frozen=True)
class ControllerWait:
    """The wait for a controller: its Deployment has an available replica, on the nodes it runs on.

    wait_id: the construct id of the wait in the cluster stack (a contract, as chart ids are).
    crds: the CRDs of the kinds the controller reconciles, each waited for until Established before its availability
      (its informers cannot sync before the API server serves their kinds).
    serves: ids of the charts whose objects it admits through its webhooks or whose finalizers it clears: they are
      applied after the wait (and so deleted before the controller goes).
    webhook_ca: (construct id, webhook configuration, JSONPath) of a further wait until the controller has written
      its CA into a webhook configuration, for a controller whose availability does not imply it; None otherwise.
    """

    wait_id: str
    deployment: str
    namespace: str
    crds: tuple[str, ...] = ()
    serves: tuple[str, ...] = ()
    webhook_ca: tuple[str, str, str] | None = None


@dataclass(frozen=True)
class Component:
    """One chart or Helm release of the rollout.

    id: the chart id (or the Helm release's id). order: its place in the apply order (the ``NN-`` of its ``dist/``
    file; Helm releases take positions between the charts). helm: a Helm release rather than a chart. retain: its
    objects outlive it (a CRD whose deletion would delete every object of its kind). after: ids of further
    components whose own step (the chart applied, the release installed) it follows, besides the charts it declares
    as needs when it is built (:mod:`k8s.charts`). after_established: CRDs that must be Established before it, where
    the rollout installs them.
    controller: the wait for its controller, or None.
    """

    id: str
    order: int
    helm: bool = False
    retain: bool = False
    after: tuple[str, ...] = ()
    after_established: tuple[str, ...] = ()
    controller: ControllerWait | None = None


COMPONENTS: tuple[Component, ...] = (
    Component(EFA_DEVICE_PLUGIN, 10),
    Component(NVIDIA_DEVICE_PLUGIN, 11),
    Component(NEURON_DEVICE_PLUGIN, 12),
    # UltraServer node groups (k8s/compute_domains.py): GFD labels the NVLink domain, NFD's release turns its features
    # into node labels.
    Component(GPU_FEATURE_DISCOVERY, 13),
    Component(NODE_FEATURE_DISCOVERY, 14, helm=True, controller=ControllerWait(
        "NodeFeatureDiscoveryAvailable", contract.NFD_MASTER, contract.NFD_NAMESPACE,
    )),
    # The DRA drivers of ``devices: dra`` node groups (k8s/dra.py): node agents like the device plugins, as Helm
    # releases of their upstream charts; each chart creates its DeviceClass. No controller to wait for.
    Component(AWS_DRANET, 15, helm=True),
    Component(NEURON_DRA, 16, helm=True),
    Component(MPI_OPERATOR_CRD, 20),
    # The PyTorchJob and Karpenter CRDs outlive their last objects: deleting a CRD deletes every object of its kind,
    # NodePools and NodeClaims with the nodes they hold.
    Component(TRAINING_OPERATOR_CRD, 22, retain=True),
    Component(KUEUE_CRD, 24),
    Component(KUEUE_WORKLOAD_CRD, 25),
    Component(KARPENTER_CRD, 26, retain=True),
    Component(MPI_OPERATOR, 30),
    # Kubeflow Trainer v2: the upstream Helm chart, with its CRDs; its webhooks admit the runtimes and the TrainJobs.
    # An available replica implies they are served: the manager's readiness check passes only once its certificate
    # rotator is ready and its webhook server has started (kubeflow/trainer@v2.3.0 cmd/trainer-controller-manager/
    # main.go ``setupProbeEndpoints``), and the rotator is ready only once it has written the CA into every webhook
    # configuration it manages (open-policy-agent/cert-controller v0.16.0, pinned by trainer v2.3.0's go.mod,
    # pkg/rotator/rotator.go ``ensureReady``: ``IsReady`` is closed after ``wasCAInjected``).
    Component(KUBEFLOW_TRAINER, 31, helm=True, controller=ControllerWait(
        "TrainerAvailable", contract.TRAINER_DEPLOYMENT, contract.TRAINER_NAMESPACE,
        crds=(contract.TRAINJOB_CRD_NAME,), serves=(TRAINING_RUNTIMES, TRAINING_JOBS),
    )),
    # Training Operator v1: its PyTorchJob webhook fails closed (upstream's ``failurePolicy: Fail``), and its
    # availability does not imply the CA: a further wait until the controller's cert-controller has written it into
    # the webhook configuration (open-policy-agent/cert-controller@0320677 pkg/rotator/rotator.go
    # ``injectCertToWebhook``; k8s/training_operators.py).
    Component(TRAINING_OPERATOR, 32, controller=ControllerWait(
        "TrainingOperatorAvailable", contract.TRAINING_OPERATOR_NAME, contract.TRAINING_OPERATOR_NAMESPACE,
        crds=(contract.PYTORCHJOB_CRD_NAME,), serves=(TRAINING_JOBS,),
        webhook_ca=("TrainingOperatorWebhookCa", "validator.training-operator.kubeflow.org",
                    ".webhooks[0].clientConfig.caBundle"),
    )),
    # Karpenter: the release after the CRDs of the pools' kinds. aws-cdk-lib 2.275's kubectl handler reads SkipCrds
    # but never passes --skip-crds to helm (custom-resource-handlers aws-eks-v2/kubectl-handler/helm/__init__.py,
    # helm_handler), so Helm installs the chart's crds/ unless they exist, and skips those that do (helm.sh, "Custom
    # Resource Definitions"). Its finalizers guard the pools, which follow its wait and the release: an EC2NodeClass
    # and its NodeClaims carry finalizers only the controller clears, terminating the nodes
    # (karpenter-provider-aws@v1.15.1 pkg/controllers/nodeclass/controller.go; website v1.14 concepts/disruption.md,
    # "Termination Controller"), so on deletion the pools go while the controller still runs.
    Component(KARPENTER, 33, helm=True, after_established=POOL_KIND_CRDS, controller=ControllerWait(
        "KarpenterAvailable", contract.KARPENTER_DEPLOYMENT, contract.KARPENTER_NAMESPACE,
        serves=(KARPENTER_POOLS,),
    )),
    # Kueue starts after the CRDs of its integrations are served, so that it enables each at once: an integration
    # whose API is missing at start is enabled only once Kueue's poll finds it, up to minutes later, and meanwhile its
    # webhook refuses every object of the kind (kubernetes-sigs/kueue@v0.19.2 pkg/controller/jobframework/setup.go;
    # the TrainJob integration also needs the JobSet CRD). Only the CRDs the rollout installs are waited for: the plan
    # enables only their integrations (efa_stack.planning.scheduling.integrations_of).
    # Kueue reconciles the Workloads it writes for queued jobs; its webhooks fail closed (``failurePolicy: Fail`` in
    # the v0.19.2 release build, k8s/crds/kueue/controller.yaml) for its queues, and for the queued jobs, which name a
    # LocalQueue and so follow the queues. An available replica implies they are served: kubernetes-sigs/kueue@c3785e5
    # (v0.19.2) cmd/kueue/main.go ``setupProbeEndpoints`` and pkg/util/cert/cert.go ``ManageCerts``, with the
    # cert-controller behaviour above.
    Component(KUEUE, 34, after_established=(
        contract.MPIJOB_CRD_NAME, contract.PYTORCHJOB_CRD_NAME, contract.TRAINJOB_CRD_NAME,
        contract.CLUSTER_TRAINING_RUNTIME_CRD_NAME, contract.TRAINING_RUNTIME_CRD_NAME, contract.JOBSET_CRD_NAME,
    ), controller=ControllerWait(
        "KueueAvailable", contract.KUEUE_CONTROLLER, contract.KUEUE_NAMESPACE,
        crds=(f"workloads.{contract.KUEUE_GROUP}",), serves=(KUEUE_QUEUES,),
    )),
    # The NVIDIA DRA driver for ComputeDomains (CRDs in the chart's crds/, which Helm installs and never deletes). Its
    # controller clears the finalizer it puts on every ComputeDomain (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1
    # cmd/compute-domain-controller/computedomain.go ``RemoveFinalizer``) and creates each one's channel
    # ResourceClaimTemplate, so the ComputeDomains follow its availability and are deleted while it still runs.
    Component(NVIDIA_DRA_DRIVER, 35, helm=True, controller=ControllerWait(
        "NvidiaDraAvailable", contract.NVIDIA_DRA_CONTROLLER, contract.NVIDIA_DRA_NAMESPACE,
        crds=(contract.COMPUTE_DOMAIN_CRD_NAME,), serves=(COMPUTE_DOMAINS,),
    )),
    Component(KARPENTER_POOLS, 36, after=(KARPENTER,)),
    # The jobs' ResourceClaimTemplates, after the drivers whose DeviceClasses they name.
    Component(RESOURCE_CLAIMS, 37, after=(AWS_DRANET, NEURON_DRA, NVIDIA_DRA_DRIVER)),
    Component(KUEUE_QUEUES, 38),
    Component(COMPUTE_DOMAINS, 39),
    Component(NCCL_TESTS, 40),
    Component(TRAINING_RUNTIMES, 45),
    Component(TRAINING_JOBS, 50),
)
"""Every chart and Helm release efa-stack can install, in apply order."""

BY_ID: dict[str, Component] = {c.id: c for c in COMPONENTS}
CHART_ORDER: dict[str, int] = {c.id: c.order for c in COMPONENTS if not c.helm}
"""Every chart id with its position; the order is the apply order."""
HELM_ORDER: dict[str, int] = {c.id: c.order for c in COMPONENTS if c.helm}
"""Helm releases, by the same positions (not in ``dist/`` as manifests: ``apply.sh`` installs them)."""


def chart_file_name(chart_id: str) -> str:
    """``40-nccl-tests.yaml``: the apply-order prefix keeps ``kubectl apply -f dir/`` in order."""
    return f"{CHART_ORDER[chart_id]:02d}-{chart_id}.yaml"
