"""Proof: every object validates against the Kubernetes schema of the cluster's version, every MPIJob
against our structural CRD, every Kueue, Karpenter and Trainer object against its upstream CRD, and every chart fits
CDK's kubectl-handler manifest limit."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from kubernetes_validate.utils import all_versions, major_minor

from efa_stack.spec.models import DEFAULT_KUBERNETES_VERSION, KUBERNETES_VERSIONS
from k8s.mpijob import CLEAN_POD_POLICIES, LAUNCHER_CREATION_POLICIES, MPI_IMPLEMENTATIONS, RESTART_POLICIES
from tests.support import (
    GOLDEN_SPECS,
    KUBECTL_HANDLER_LIMIT,
    built,
    built_text,
    crd,
    crd_schema,
    crd_schemas,
    schema_validate,
    spec_text,
)

FABRICS = ("efa", "tcp", "infiniband")
# kubeflow/mpi-operator@v0.8.2 pkg/apis/kubeflow/validation/validation.go (validRestartPolicies,
# validCleanPolicies), typed here from the source rather than imported from the code under test
OPERATOR_RESTART_POLICIES = ("Never", "OnFailure")
OPERATOR_CLEAN_POD_POLICIES = ("None", "Running", "All")


def _validate_k8s(obj: dict[str, Any], version: str) -> None:
    vendored = crd_schemas().get((obj["apiVersion"], obj["kind"]))
    if vendored is not None:  # a Kueue, Karpenter or Kubeflow object: its CRD's schema (the real server: test_apiserver.py)
        schema_validate(obj, vendored)
    elif obj["kind"] == "MPIJob":
        schema_validate(obj, crd_schema())
        # the pod templates the CRD keeps as-is are validated as what they are: PodTemplates
        for role, replica in obj["spec"]["mpiReplicaSpecs"].items():
            pod_template = {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": f"{obj['metadata']['name']}-{role.lower()}", "namespace": "default"},
                "template": replica["template"],
            }
            kubernetes_validate.validate(pod_template, version, strict=True)
    else:
        kubernetes_validate.validate(obj, version, strict=True)


def test_kubernetes_validate_ships_our_versions():
    shipped = {major_minor(v) for v in all_versions()}
    for v in KUBERNETES_VERSIONS:
        assert major_minor(v) in shipped, f"kubernetes-validate has no schemas for {v}"


@pytest.mark.parametrize("stem", GOLDEN_SPECS)
def test_every_object_validates_for_the_cluster_version(stem):
    b = built(stem)
    for chart_id, obj in b.objects():
        try:
            _validate_k8s(obj, b.plan.kubernetes_version)
        except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as exc:
            pytest.fail(f"{stem}/{chart_id}: {obj['kind']} {obj['metadata']['name']}: {exc}")


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_default_cluster_validates_for_every_supported_version(version):
    for _, obj in built("default").objects():
        _validate_k8s(obj, version)


@pytest.mark.parametrize("fabric", FABRICS)
def test_every_fabric_validates(fabric):
    b = built_text(spec_text(extra=f"ncclTest:\n  fabric: {fabric}\n"))
    for _, obj in b.objects():
        _validate_k8s(obj, b.plan.kubernetes_version)


def test_crd_itself_validates_and_is_structural():
    kubernetes_validate.validate(crd(), DEFAULT_KUBERNETES_VERSION, strict=True)

    def walk(node: dict[str, Any], path: str) -> None:
        preserved = node.get("x-kubernetes-preserve-unknown-fields") is True
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        assert "type" in node or int_or_string, f"{path}: structural schemas need a type"
        assert not ("properties" in node and "additionalProperties" in node), f"{path}: both properties and additionalProperties"
        for name, child in node.get("properties", {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}[*]")
        if "items" in node:
            walk(node["items"], f"{path}[]")
        if preserved:
            assert node["type"] == "object"

    walk(crd_schema(), "openAPIV3Schema")


def test_crd_types_the_fields_we_use():
    spec = crd_schema()["properties"]["spec"]["properties"]
    assert spec["launcherCreationPolicy"]["enum"] == ["AtStartup", "WaitForWorkersReady"]
    assert spec["mpiImplementation"]["enum"] == ["OpenMPI", "Intel", "MPICH"]
    assert set(spec["runPolicy"]["properties"]) >= {"cleanPodPolicy", "suspend", "backoffLimit", "ttlSecondsAfterFinished"}
    for role in ("Launcher", "Worker"):
        replica = spec["mpiReplicaSpecs"]["properties"][role]["properties"]
        assert replica["template"]["x-kubernetes-preserve-unknown-fields"] is True
        assert set(replica) == {"replicas", "restartPolicy", "template"}
    (version,) = crd()["spec"]["versions"]
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda s: s.__setitem__("slotsPerWorker", 0), "minimum"),
        (lambda s: s.__setitem__("launcherCreationPolicy", "Eventually"), "enum"),
        (lambda s: s.__setitem__("mpiImplementation", "LAM"), "enum"),
        (lambda s: s["mpiReplicaSpecs"]["Launcher"].__setitem__("replicas", 2), "maximum"),
        (lambda s: s["runPolicy"].__setitem__("suspend", "yes"), "type"),
        (lambda s: s["runPolicy"].__setitem__("cleanPodPolicy", "Sometimes"), "enum"),
        (lambda s: s["mpiReplicaSpecs"].pop("Launcher"), "required"),
    ],
)
def test_fails_broken_mpijob_against_the_crd(mutate, why):
    job = copy.deepcopy(built("default").mpijob())
    mutate(job["spec"])
    with pytest.raises(jsonschema.ValidationError) as exc:
        schema_validate(job, crd_schema())
    assert exc.value.validator == why


@pytest.mark.parametrize("stem", GOLDEN_SPECS)
def test_every_manifest_fits_the_kubectl_handler_limit(stem):
    # the handler receives each chart's manifest as json.dumps of its list of objects
    for chart_id, objs in built(stem).manifests.items():
        size = len(json.dumps(objs).encode())
        assert size < KUBECTL_HANDLER_LIMIT, f"{stem}/{chart_id}: {size} bytes"
        for obj in objs:  # and every object's last-applied annotation holds the object itself
            assert len(json.dumps(obj).encode()) < KUBECTL_HANDLER_LIMIT


def test_crd_is_far_below_the_limit():
    # the upstream CRD is ~292 KB; ours keeps a wide margin for labels the deploy adds
    size = len(json.dumps([crd()]).encode())
    assert size < KUBECTL_HANDLER_LIMIT // 10, size


def test_fails_the_validator_is_not_vacuous():
    ds = copy.deepcopy(built("default").find("DaemonSet", "aws-efa-k8s-device-plugin"))
    ds["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"  # misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate_k8s(ds, DEFAULT_KUBERNETES_VERSION)
    job = copy.deepcopy(built("default").mpijob())
    del job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate_k8s(job, DEFAULT_KUBERNETES_VERSION)


# --- what the operator accepts ------------------------------------------------------------------------
# kubeflow/mpi-operator@v0.8.2 (branch release-0.8, "Prepare v0.8.2"):
# pkg/apis/kubeflow/validation/validation.go: validRestartPolicies = {Never, OnFailure} for the
# Launcher and the Worker replica spec alike (validateReplicaSpec), validCleanPolicies = {None,
# Running, All}, Worker replicas "must be greater than or equal to 1". The controller drops a job
# that fails these checks with only an event (syncHandler: "Found validation errors ... Do not
# requeue"), so the CRD must refuse it at `kubectl apply` time.


def _with(mutate: Any) -> dict[str, Any]:
    job = copy.deepcopy(built("default").mpijob())
    mutate(job["spec"])
    return job


@pytest.mark.parametrize("role", ["Launcher", "Worker"])
@pytest.mark.parametrize("policy", OPERATOR_RESTART_POLICIES)
def test_crd_accepts_every_restart_policy_the_operator_accepts(role, policy):
    # GIVEN the rendered job WHEN a replica uses an allowed restart policy THEN the CRD accepts it
    schema_validate(_with(lambda s: s["mpiReplicaSpecs"][role].__setitem__("restartPolicy", policy)), crd_schema())


@pytest.mark.parametrize("policy", OPERATOR_CLEAN_POD_POLICIES)
def test_crd_accepts_every_clean_pod_policy_the_operator_accepts(policy):
    schema_validate(_with(lambda s: s["runPolicy"].__setitem__("cleanPodPolicy", policy)), crd_schema())


@pytest.mark.parametrize("role", ["Launcher", "Worker"])
@pytest.mark.parametrize("policy", ["Always", "ExitCode", "never"])
def test_fails_restart_policy_the_operator_rejects(role, policy):
    with pytest.raises(jsonschema.ValidationError) as exc:
        schema_validate(_with(lambda s: s["mpiReplicaSpecs"][role].__setitem__("restartPolicy", policy)), crd_schema())
    assert exc.value.validator == "enum"


def test_fails_zero_workers_the_operator_rejects():
    with pytest.raises(jsonschema.ValidationError) as exc:
        schema_validate(_with(lambda s: s["mpiReplicaSpecs"]["Worker"].__setitem__("replicas", 0)), crd_schema())
    assert exc.value.validator == "minimum"


def test_crd_enums_are_the_typed_models_enums():
    # class check: the CRD, the typed MPIJob model and the operator's sets say the same thing
    spec = crd_schema()["properties"]["spec"]["properties"]
    for role in ("Launcher", "Worker"):
        assert spec["mpiReplicaSpecs"]["properties"][role]["properties"]["restartPolicy"]["enum"] == list(RESTART_POLICIES)
    assert spec["runPolicy"]["properties"]["cleanPodPolicy"]["enum"] == list(CLEAN_POD_POLICIES)
    assert spec["launcherCreationPolicy"]["enum"] == list(LAUNCHER_CREATION_POLICIES)
    assert spec["mpiImplementation"]["enum"] == list(MPI_IMPLEMENTATIONS)
    assert set(RESTART_POLICIES) == set(OPERATOR_RESTART_POLICIES)
    assert set(CLEAN_POD_POLICIES) == set(OPERATOR_CLEAN_POD_POLICIES)


def test_fails_typed_model_refuses_a_restart_policy_the_operator_rejects() -> None:
    from cdk8s_plus_33 import k8s as k8s_l1

    from k8s.mpijob import ReplicaSpec

    with pytest.raises(ValueError, match="restartPolicy"):
        ReplicaSpec(replicas=1, restart_policy="Always", template=k8s_l1.PodTemplateSpec())  # type: ignore[arg-type]  # the wrong value is the test
