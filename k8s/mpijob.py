"""A typed ``kubeflow.org/v2beta1`` MPIJob, rendered to a cdk8s ApiObject.

Frozen dataclasses mirror mpi-operator's v2beta1 types and pod templates are cdk8s-plus classes, so a
misspelt field fails in Python; a test validates every rendered MPIJob against ``k8s/crds/mpijob.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import cdk8s
from cdk8s_plus_33 import k8s as k8s_l1
from constructs import Construct

from efa_stack import contract

# What the operator accepts, from kubeflow/mpi-operator@v0.8.2 (branch release-0.8):
# pkg/apis/kubeflow/validation/validation.go allows only Never and OnFailure as a replica's
# restartPolicy (validRestartPolicies, checked for the Launcher and the Worker alike; the v2beta1 types
# also name Always and ExitCode, which the controller rejects) and None, Running, All as
# cleanPodPolicy (validCleanPolicies). k8s/crds/mpijob.yaml enums the same values (tested).
CleanPodPolicy = Literal["None", "Running", "All"]
RestartPolicy = Literal["OnFailure", "Never"]
LauncherCreationPolicy = Literal["AtStartup", "WaitForWorkersReady"]
MpiImplementation = Literal["OpenMPI", "Intel", "MPICH"]
CLEAN_POD_POLICIES: tuple[str, ...] = get_args(CleanPodPolicy)
RESTART_POLICIES: tuple[str, ...] = get_args(RestartPolicy)
LAUNCHER_CREATION_POLICIES: tuple[str, ...] = get_args(LauncherCreationPolicy)
MPI_IMPLEMENTATIONS: tuple[str, ...] = get_args(MpiImplementation)


@dataclass(frozen=True)
class RunPolicy:
    """``spec.runPolicy``. Unset (None) fields are left to the operator's defaults."""

    clean_pod_policy: CleanPodPolicy | None = None
    suspend: bool | None = None
    backoff_limit: int | None = None
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.clean_pod_policy is not None:
            out["cleanPodPolicy"] = self.clean_pod_policy
        if self.ttl_seconds_after_finished is not None:
            out["ttlSecondsAfterFinished"] = self.ttl_seconds_after_finished
        if self.active_deadline_seconds is not None:
            out["activeDeadlineSeconds"] = self.active_deadline_seconds
        if self.backoff_limit is not None:
            out["backoffLimit"] = self.backoff_limit
        if self.suspend is not None:
            out["suspend"] = self.suspend
        return out


@dataclass(frozen=True)
class ReplicaSpec:
    """``spec.mpiReplicaSpecs.<Launcher|Worker>``: how many pods, their restart policy and template."""

    replicas: int
    template: k8s_l1.PodTemplateSpec
    restart_policy: RestartPolicy | None = None

    def __post_init__(self) -> None:
        if self.restart_policy is not None and self.restart_policy not in RESTART_POLICIES:
            raise ValueError(
                f"restartPolicy {self.restart_policy!r} is rejected by the MPI operator; use one of {RESTART_POLICIES}"
            )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"replicas": self.replicas}
        if self.restart_policy is not None:
            out["restartPolicy"] = self.restart_policy
        out["template"] = pod_template_json(self.template)
        return out


@dataclass(frozen=True)
class MpiJobSpec:
    """``spec`` of an MPIJob. Defaults are the operator's (mpi-operator ``SetDefaults_MPIJob``)."""

    launcher: ReplicaSpec
    worker: ReplicaSpec | None = None
    slots_per_worker: int = 1
    run_policy: RunPolicy = RunPolicy()
    launcher_creation_policy: LauncherCreationPolicy = "AtStartup"
    mpi_implementation: MpiImplementation = "OpenMPI"
    ssh_auth_mount_path: str = "/root/.ssh"
    run_launcher_as_worker: bool = False

    def __post_init__(self) -> None:
        if self.launcher.replicas != 1:
            raise ValueError(f"an MPIJob has exactly one launcher (got replicas={self.launcher.replicas})")
        if self.slots_per_worker < 1:
            raise ValueError(f"slotsPerWorker must be at least 1 (got {self.slots_per_worker})")
        if self.worker is not None and self.worker.replicas < 1:
            # the operator rejects Worker replicas <= 0 (validation.go, validateWorkerReplicaSpec)
            raise ValueError(f"worker replicas must be at least 1 (got {self.worker.replicas}); omit the Worker instead")

    def to_json(self) -> dict[str, Any]:
        replicas = {"Launcher": self.launcher.to_json()}
        if self.worker is not None:
            replicas["Worker"] = self.worker.to_json()
        out: dict[str, Any] = {
            "slotsPerWorker": self.slots_per_worker,
            "runLauncherAsWorker": self.run_launcher_as_worker,
            "launcherCreationPolicy": self.launcher_creation_policy,
            "mpiImplementation": self.mpi_implementation,
            "sshAuthMountPath": self.ssh_auth_mount_path,
            "runPolicy": self.run_policy.to_json(),
            "mpiReplicaSpecs": replicas,
        }
        return out


def pod_template_json(template: k8s_l1.PodTemplateSpec) -> dict[str, Any]:
    """Render a typed PodTemplateSpec to its Kubernetes JSON (camelCase, quantities resolved).

    Uses the generated ``KubePodTemplate`` class in a throwaway chart that is never synthesized.
    """
    scratch = cdk8s.Chart(cdk8s.App(), "pod-template")
    return k8s_l1.KubePodTemplate(scratch, "t", template=template).to_json()["template"]


@dataclass(frozen=True)
class MpiJobProps:
    """Props of :class:`MpiJob`; every default is what happens when the prop is left out."""

    name: str
    namespace: str
    spec: MpiJobSpec
    labels: dict[str, str] | None = None
    """Labels on the MPIJob (none by default)."""
    annotations: dict[str, str] | None = None
    """Annotations on the MPIJob (none by default)."""


class MpiJob(Construct):
    """An MPIJob object. ``self.api_object`` is the cdk8s ApiObject (add dependencies to it)."""

    def __init__(self, scope: Construct, id: str, props: MpiJobProps) -> None:
        super().__init__(scope, id)
        self.props = props
        name, namespace, spec, labels, annotations = props.name, props.namespace, props.spec, props.labels, props.annotations
        self.spec = spec
        self.api_object = cdk8s.ApiObject(
            self,
            "Resource",
            api_version=contract.MPIJOB_API_VERSION,
            kind=contract.MPIJOB_KIND,
            metadata=cdk8s.ApiObjectMetadata(
                name=name, namespace=namespace, labels=labels or None, annotations=annotations or None
            ),
        )
        self.api_object.add_json_patch(cdk8s.JsonPatch.add("/spec", spec.to_json()))
