"""The Kubeflow training controllers (k8s/training_operators.py): Training Operator v1 by manifest,
Trainer v2 by Helm, both selected by the spec's ``trainingOperators`` through the plan."""

from __future__ import annotations

import json
import re
import textwrap

import kubernetes_validate
import pytest
import yaml
from cdk8s import Testing as K8sTesting

from efa_stack import contract
from efa_stack.planning.plan import TrainingOperatorsPlan, build_plan
from efa_stack.spec.errors import SpecError
from efa_stack.spec.loader import parse_spec
from k8s import images
from k8s.components import (
    CHART_ORDER,
    HELM_ORDER,
    KUBEFLOW_TRAINER,
    MPI_OPERATOR,
    MPI_OPERATOR_CRD,
    TRAINING_OPERATOR,
    TRAINING_OPERATOR_CRD,
    chart_file_name,
)
from k8s.dist import render_chart
from k8s.training_operators import (
    CRD_FILE,
    ENABLED_SCHEME,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_SECRET,
    TrainerHelmProps,
    TrainingOperator,
    TrainingOperatorProps,
    pytorchjob_crd_document,
)
from k8s.vendored import read_header
from stacks.kubernetes import ROLLED_OUT_JSONPATH
from tests.support import (
    GOLDEN,
    KUBECTL_HANDLER_LIMIT,
    Synthesized,
    built,
    built_text,
    golden_check,
    spec_text,
    synth_text,
    upstream_file,
)

SYSTEM = {contract.LABEL_ROLE: contract.SYSTEM_NODE_GROUP}


def operators_spec(trainer: bool, pytorch: bool) -> str:
    extra = f"trainingOperators: {{trainer: {str(trainer).lower()}, pytorchJobV1: {str(pytorch).lower()}}}\n"
    return spec_text(extra=extra)


def v1_objects() -> list[dict]:
    chart = K8sTesting.chart()
    TrainingOperator(chart, "T", TrainingOperatorProps())
    return K8sTesting.synth(chart)


def one(objs: list[dict], kind: str) -> dict:
    (hit,) = [o for o in objs if o["kind"] == kind]
    return hit


# --- spec -> plan ----------------------------------------------------------------------------------

def test_operators_are_off_by_default():
    # GIVEN a spec without trainingOperators WHEN planned THEN nothing is installed
    b = built("default")
    assert b.plan.training_operators == TrainingOperatorsPlan(trainer=False, pytorch_job_v1=False)
    assert TRAINING_OPERATOR not in b.chart_ids and TRAINING_OPERATOR_CRD not in b.chart_ids


@pytest.mark.parametrize(("trainer", "pytorch"), [(True, False), (False, True), (True, True)])
def test_spec_field_flows_to_the_plan(trainer, pytorch):
    plan = build_plan(parse_spec(operators_spec(trainer, pytorch)))
    assert plan.training_operators == TrainingOperatorsPlan(trainer=trainer, pytorch_job_v1=pytorch)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("trainingOperators: {trainer: yes-please}", "trainingOperators.trainer"),
        ("trainingOperators: {pytorchJobV1: 1}", "trainingOperators.pytorchJobV1"),
        ("trainingOperators: {pytorchJob: true}", "trainingOperators.pytorchJob"),
    ],
)
def test_fails_bad_training_operators_setting(body, field):
    with pytest.raises(SpecError) as info:
        build_plan(parse_spec(spec_text(extra=body + "\n"), source="t.yaml"), source="t.yaml")
    fields = [p.field for p in info.value.problems]
    assert any(f.endswith(field) for f in fields), [p.render() for p in info.value.problems]


# --- Training Operator v1: charts -----------------------------------------------------------------

def test_pytorch_v1_charts_in_apply_order_after_their_crd():
    b = built_text(operators_spec(False, True))
    ids = b.chart_ids
    assert ids.index(MPI_OPERATOR_CRD) < ids.index(TRAINING_OPERATOR_CRD) < ids.index(MPI_OPERATOR) < ids.index(
        TRAINING_OPERATOR
    )
    assert (CHART_ORDER[TRAINING_OPERATOR_CRD], CHART_ORDER[TRAINING_OPERATOR]) == (22, 32)
    assert chart_file_name(TRAINING_OPERATOR) == "32-training-operator.yaml"
    charts = {c.node.id: c for c in b.charts}
    assert {d.node.id for d in charts[TRAINING_OPERATOR].node.dependencies} == {TRAINING_OPERATOR_CRD}


def test_trainer_only_renders_no_v1_charts():
    b = built_text(operators_spec(True, False))
    assert TRAINING_OPERATOR not in b.chart_ids and TRAINING_OPERATOR_CRD not in b.chart_ids


def test_v1_never_touches_the_mpijob_crd():
    # The v1 kustomize base also ships mpijobs.kubeflow.org (served v1 only), which would replace the MPI
    # operator's v2beta1 CRD: only the PyTorchJob CRD is rendered and the MPIJob scheme stays disabled.
    b = built_text(operators_spec(False, True))
    crds = [o for o in b.manifests[TRAINING_OPERATOR_CRD] if o["kind"] == "CustomResourceDefinition"]
    assert [c["metadata"]["name"] for c in crds] == [contract.PYTORCHJOB_CRD_NAME]
    assert all(o["kind"] != "CustomResourceDefinition" for o in b.manifests[TRAINING_OPERATOR])
    (mpi_crd,) = b.manifests[MPI_OPERATOR_CRD]
    assert [v["name"] for v in mpi_crd["spec"]["versions"]] == [contract.MPIJOB_VERSION]
    container = one(b.manifests[TRAINING_OPERATOR], "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["--enable-scheme=pytorchjob"]


def test_pytorchjob_crd_is_the_pinned_upstream_crd_without_descriptions():
    # the file is upstream's (the pin, and the vendoring test in tests/test_k8s_vendored.py); only documentation
    # went, which brought it under the kubectl handler's limit (293,028 bytes as compact JSON with it)
    assert read_header(CRD_FILE.read_text()).upstream.startswith("kubeflow/trainer@v1.9.4 (commit ")
    doc = pytorchjob_crd_document()
    assert len(json.dumps(doc)) < KUBECTL_HANDLER_LIMIT
    assert doc["metadata"]["name"] == contract.PYTORCHJOB_CRD_NAME
    assert doc["spec"]["group"] == contract.PYTORCHJOB_GROUP
    assert doc["spec"]["names"]["kind"] == contract.PYTORCHJOB_KIND
    assert [v["name"] for v in doc["spec"]["versions"]] == [contract.PYTORCHJOB_VERSION]
    text = json.dumps(doc)
    assert '"description": "' not in text
    # the schema still types what PyTorchJobs use (upstream's validation kept)
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "pytorchReplicaSpecs" in spec["properties"] and "elasticPolicy" in spec["properties"]


def test_pytorch_v1_manifests_fit_the_kubectl_handler_and_validate():
    b = built_text(operators_spec(False, True))
    for chart_id in (TRAINING_OPERATOR_CRD, TRAINING_OPERATOR):
        objects = b.manifests[chart_id]
        assert len(json.dumps(objects)) < KUBECTL_HANDLER_LIMIT, chart_id
        for obj in objects:
            kubernetes_validate.validate(obj, b.plan.kubernetes_version, strict=True)


# --- Training Operator v1: objects ----------------------------------------------------------------

def test_v1_cluster_role_is_upstreams_exactly():
    # kubeflow/training-operator@v1.9.4 manifests/base/rbac/role.yaml, generated from the +kubebuilder:rbac markers
    role_file = upstream_file("training-operator", "manifests/base/rbac/role.yaml")
    (upstream,) = [d for d in yaml.safe_load_all(role_file.read_text()) if d]
    role = one(v1_objects(), "ClusterRole")
    assert role["rules"] == upstream["rules"]


def test_v1_controller_runs_on_system_nodes_with_pinned_image():
    dep = one(v1_objects(), "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == SYSTEM
    (c,) = pod["containers"]
    assert c["image"] == images.TRAINING_OPERATOR_IMAGE == "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"
    assert c["args"] == [f"--enable-scheme={ENABLED_SCHEME}"]
    assert c["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert {e["name"] for e in c["env"]} == {"MY_POD_NAMESPACE", "MY_POD_NAME"}
    assert pod["serviceAccountName"] == contract.TRAINING_OPERATOR_NAME
    assert dep["metadata"]["namespace"] == contract.TRAINING_OPERATOR_NAMESPACE


def test_v1_webhook_serves_pytorchjob_only_through_the_service_with_rotated_certs():
    objs = v1_objects()
    hook = one(objs, "ValidatingWebhookConfiguration")
    assert hook["metadata"]["name"] == WEBHOOK_CONFIGURATION
    (w,) = hook["webhooks"]
    assert w["rules"][0]["resources"] == [contract.PYTORCHJOB_PLURAL]
    assert w["clientConfig"]["service"] == {
        "name": contract.TRAINING_OPERATOR_NAME, "namespace": contract.TRAINING_OPERATOR_NAMESPACE,
        "path": "/validate-kubeflow-org-v1-pytorchjob",
    }
    assert "caBundle" not in w["clientConfig"]  # written by the controller's cert rotator, kept by apply
    secret = one(objs, "Secret")
    assert secret["metadata"]["name"] == WEBHOOK_SECRET and "data" not in secret
    svc = one(objs, "Service")
    assert {p["port"]: p["targetPort"] for p in svc["spec"]["ports"]} == {8080: 8080, 443: 9443}
    dep = one(objs, "Deployment")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    (vol,) = dep["spec"]["template"]["spec"]["volumes"]
    assert vol["secret"]["secretName"] == WEBHOOK_SECRET


def test_fails_v1_props_with_zero_requests():
    with pytest.raises(ValueError, match="cpu_millicores=0"):
        TrainingOperatorProps(cpu_millicores=0)


def test_v1_chart_golden():
    b = built_text(operators_spec(False, True))
    (chart,) = [c for c in b.charts if c.node.id == TRAINING_OPERATOR]
    golden_check(GOLDEN / "training" / "pytorchjob-v1" / chart_file_name(TRAINING_OPERATOR), render_chart(b.plan, chart))


# --- Trainer v2: Helm values -------------------------------------------------------------------------

def test_trainer_helm_values_pin_images_and_schedule_on_system_nodes():
    values = TrainerHelmProps().values()
    assert values["image"] == {
        "registry": "ghcr.io", "repository": "kubeflow/trainer/trainer-controller-manager", "tag": "v2.3.0",
    }
    assert values["manager"]["nodeSelector"] == SYSTEM
    assert values["jobset"]["controller"]["nodeSelector"] == SYSTEM
    assert values["jobset"]["image"] == {"repository": "registry.k8s.io/jobset/jobset", "tag": "v0.12.0"}
    assert values["jobset"]["install"] is True and values["crds"]["enabled"] is True
    assert values["runtimes"]["defaultEnabled"] is False


# --- cluster stack ---------------------------------------------------------------------------------

BOTH = operators_spec(True, True)


@pytest.fixture(scope="module")
def both_synth() -> Synthesized:
    """Both operators, synthesized once for the module (one xdist worker runs its tests, see conftest)."""
    return synth_text(BOTH)


@pytest.fixture(scope="module")
def v1_only_synth() -> Synthesized:
    return synth_text(operators_spec(False, True))


def _helm_charts(synth) -> dict[str, dict]:
    return synth.resources("cluster", "Custom::AWSCDK-EKS-HelmChart")


def test_stack_installs_the_trainer_chart_pinned_with_plan_values(both_synth):
    s = both_synth
    (props,) = [r["Properties"] for r in _helm_charts(s).values()]
    assert props["Chart"] == "kubeflow-trainer"
    assert props["Repository"] == "oci://ghcr.io/kubeflow/charts/kubeflow-trainer"
    assert props["Version"] == images.TRAINER_CHART_VERSION == "2.3.0"
    assert props["Release"] == contract.TRAINER_RELEASE
    assert props["Namespace"] == contract.TRAINER_NAMESPACE
    assert props["CreateNamespace"] is True and props.get("Wait") is not True  # applied alongside the nodes
    assert json.loads(props["Values"]) == TrainerHelmProps().values()


def test_stack_orders_crds_operators_and_waits(both_synth):
    # GIVEN both operators WHEN synthesized THEN: each CRD -> its Established wait -> the operator of its kind;
    # the Trainer Helm chart as soon as the API server takes it (no helm --wait, no node group), then the TrainJob
    # Established wait and, after the system node group too, the wait for the manager's available replica;
    # no manifest waits for a node group (kubectl apply needs the API server).
    s = both_synth
    res = s.template("cluster")["Resources"]
    helm_id = next(iter(_helm_charts(s)))

    def deps(logical: str) -> set[str]:
        d = res[logical].get("DependsOn", [])
        return set([d] if isinstance(d, str) else d)

    waits = {k: v for k, v in res.items() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesObjectValue"}
    by_crd = {v["Properties"]["ObjectName"]: k for k, v in waits.items()
              if v["Properties"]["ObjectType"] == "customresourcedefinition"}
    assert set(by_crd) == {contract.MPIJOB_CRD_NAME, contract.PYTORCHJOB_CRD_NAME, contract.TRAINJOB_CRD_NAME}
    trainjob_wait = by_crd[contract.TRAINJOB_CRD_NAME]
    assert helm_id in deps(trainjob_wait)
    node_groups = {k for k, v in res.items() if v["Type"] == "AWS::EKS::Nodegroup"}
    system = {k for k in node_groups if k.startswith("NodeGroupsystem")}
    assert system and not deps(helm_id) & node_groups
    (available,) = [k for k, v in waits.items() if v["Properties"]["ObjectName"] == contract.TRAINER_DEPLOYMENT]
    assert waits[available]["Properties"]["ObjectType"] == "deployment"
    assert waits[available]["Properties"]["ObjectNamespace"] == contract.TRAINER_NAMESPACE
    assert waits[available]["Properties"]["JsonPath"] == ROLLED_OUT_JSONPATH
    assert deps(available) >= {helm_id} | system

    def manifest(chart_id: str) -> str:
        # cluster.add_cdk8s_chart(chart_id, ...) is a child of the cluster: logical id Cluster<id>HASH
        pattern = re.compile("Cluster" + chart_id.replace("-", "") + "[0-9A-F]{8}$")
        (logical,) = [k for k in res if pattern.match(k)]
        return logical

    pytorch_wait = by_crd[contract.PYTORCHJOB_CRD_NAME]
    assert deps(pytorch_wait) >= {manifest(TRAINING_OPERATOR_CRD)}
    # an operator follows its CRD's manifest, and the wait for its replica the CRD Established
    assert manifest(TRAINING_OPERATOR_CRD) in deps(manifest(TRAINING_OPERATOR))
    (operator_wait,) = [k for k, v in waits.items() if v["Properties"]["ObjectName"] == contract.TRAINING_OPERATOR_NAME]
    assert pytorch_wait in deps(operator_wait)
    assert manifest(MPI_OPERATOR_CRD) in deps(manifest(MPI_OPERATOR))
    manifests = [k for k, v in res.items() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"]
    assert manifests and not any(deps(k) & node_groups for k in manifests)


def test_charts_after_the_v1_operator_wait_until_its_webhook_admits(both_synth):
    # GIVEN Training Operator v1, whose PyTorchJob webhook fails closed WHEN synthesized
    res = both_synth.template("cluster")["Resources"]
    waits = {v["Properties"]["ObjectType"]: (k, v["Properties"]) for k, v in res.items()
             if v["Type"] == "Custom::AWSCDK-EKS-KubernetesObjectValue"}
    available, deployment = waits["deployment"]
    ca, webhook = waits["validatingwebhookconfiguration"]
    # THEN the stack waits for an available controller replica, then for the CA the controller injects
    assert (deployment["ObjectName"], deployment["ObjectNamespace"], deployment["JsonPath"]) == (
        contract.TRAINING_OPERATOR_NAME, contract.TRAINING_OPERATOR_NAMESPACE, ROLLED_OUT_JSONPATH)
    assert (webhook["ObjectName"], webhook["JsonPath"]) == (
        "validator.training-operator.kubeflow.org", ".webhooks[0].clientConfig.caBundle")

    def deps(logical: str) -> set[str]:
        d = res[logical].get("DependsOn", [])
        return set([d] if isinstance(d, str) else d)

    operator = next(k for k in res if re.match("Cluster" + TRAINING_OPERATOR.replace("-", "") + "[0-9A-F]{8}$", k))
    assert operator in deps(available) and available in deps(ca)
    # AND a replica is available only on a node: the wait comes after the system node group it runs on
    assert any(d.startswith("NodeGroupsystem") for d in deps(available))
    # AND the webhook admits PyTorchJobs only: the NCCL-tests MPIJob does not wait for it
    later = [k for k in res if re.match("Clusternccltests[0-9A-F]{8}$", k)]
    assert later and not any({available, ca} & deps(k) for k in later)


def test_no_helm_chart_without_the_trainer(v1_only_synth):
    s = v1_only_synth
    assert _helm_charts(s) == {}
    assert HELM_ORDER[KUBEFLOW_TRAINER] == 31


def test_trainer_without_later_charts_still_installs():
    # GIVEN a cluster whose last chart comes before the Helm position (no nccl job, no v1 operator)
    text = textwrap.dedent(spec_text(instance_type="trn2.48xlarge", extra="trainingOperators: {trainer: true}\n"))
    s = synth_text(text)
    assert len(_helm_charts(s)) == 1


def test_stack_with_both_operators_passes_our_rules(both_synth):
    # GIVEN both operators WHEN the cluster stack is synthesized THEN the efa-stack rules (K8S1 size, K8S2 host
    # access) find nothing: the operators need no host access.
    from efa_stack.checks.rules import check_templates
    from k8s.charts import HOST_ACCESS_WORKLOADS

    assert check_templates(both_synth.templates, HOST_ACCESS_WORKLOADS) == []


@pytest.mark.integration
def test_stack_with_both_operators_passes_cfn_lint(both_synth):
    from tests.test_cfn_lint import lint

    s = both_synth
    errors = [m for m in lint(s.template("cluster"), s.plan.region) if m.rule.id.startswith("E")]
    assert errors == []
