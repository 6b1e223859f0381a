"""The UltraServer pieces of the rehearsal without a control plane (efa_stack/rehearsal/nvidia_dra.py,
efa_stack/rehearsal/compute_domains.py): the NVIDIA DRA driver's release objects from its chart at the pinned version,
the controller's environment, what the kubelet plugin's stand-in publishes and labels, GFD's cliques on the nodes made
from the plan, and NFD's stand-in. tests/test_rehearsal.py rehearses them with the real controllers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from efa_stack import contract
from efa_stack.planning.plan import plan_from_file
from efa_stack.rehearsal import compute_domains as cd
from efa_stack.rehearsal.binaries import module_dir
from efa_stack.rehearsal.nodes import NodeOptions, plan_nodes
from efa_stack.rehearsal.nvidia_dra import (
    ComputeDomainController,
    Known,
    Names,
    TemplateError,
    controller_env,
    release_objects,
    render_template,
)
from k8s.rollout import plan_rollout
from tests.support import CLUSTERS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gb200():
    return plan_from_file(CLUSTERS / "gb200-ultraserver.yaml")


@pytest.fixture(scope="module")
def releases(gb200):
    import cdk8s

    from k8s.charts import build_charts

    rollout = plan_rollout(gb200, build_charts(gb200, cdk8s.App()))
    return {s.release.name: s.release for s in rollout.steps if getattr(s, "release", None) is not None}


@pytest.fixture(scope="module")
def module() -> Path:
    return module_dir(ComputeDomainController.binary)


def _by(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


# --- the release's objects from the chart -------------------------------------------------------------------------


def test_the_driver_is_built_at_the_version_the_release_installs():
    # tools/dra-driver-nvidia-gpu/go.mod requires the module at the chart version the rollout installs
    from k8s.compute_domains import NVIDIA_DRA_VERSION

    go_mod = (ROOT / "tools" / "dra-driver-nvidia-gpu" / "go.mod").read_text()
    required = re.findall(r"^(?:require)?\s*sigs\.k8s\.io/dra-driver-nvidia-gpu (v\S+)", go_mod, re.MULTILINE)
    assert required == [f"v{NVIDIA_DRA_VERSION}"]


def test_the_release_brings_the_charts_crds_device_classes_and_rbac(module, releases):
    # GIVEN the NVIDIA DRA release of the UltraServer spec WHEN its stand-in objects are made from the chart
    release = releases[contract.NVIDIA_DRA_RELEASE]
    objects = release_objects(module, release.values)
    # THEN the Namespace first, the CRDs the rollout waits for, the two ComputeDomain DeviceClasses and no GPU one
    assert objects[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": release.namespace}}
    crds = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert crds == set(release.crds)
    classes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "DeviceClass"}
    assert set(classes) == {"compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com"}
    assert all(c["apiVersion"] == "resource.k8s.io/v1" for c in classes.values())
    channel = classes["compute-domain-default-channel.nvidia.com"]["spec"]["selectors"][0]["cel"]["expression"]
    assert f"device.driver == '{cd.DRIVER}'" in channel and ".type == 'channel'" in channel and ".id == 0" in channel
    # AND the controller's account may make the channel templates anywhere and the IMEX DaemonSets in its namespace
    controller = _by(objects, "ClusterRole", "dra-driver-nvidia-gpu-clusterrole-controller")
    assert {"resources": ["resourceclaimtemplates"], "verbs": ["get", "list", "watch", "create", "update", "delete"],
            "apiGroups": ["resource.k8s.io"]} in controller["rules"]
    role = _by(objects, "Role", "dra-driver-nvidia-gpu-role-controller")
    assert role["metadata"]["namespace"] == release.namespace
    binding = _by(objects, "RoleBinding", "dra-driver-nvidia-gpu-role-binding-controller")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": release.namespace,
                                    "name": ComputeDomainController.service_account}]
    # AND the IMEX daemons' ServiceAccount exists (their pods name it), and no OpenShift binding is rendered
    assert _by(objects, "ServiceAccount", "compute-domain-daemon-service-account")["metadata"]["namespace"] == (
        release.namespace)
    assert not [o for o in objects if "openshift" in o["metadata"]["name"]]
    # AND the kubelet plugin's Role has no MPS rule (GPUs are off)
    plugin_role = _by(objects, "Role", "dra-driver-nvidia-gpu-role-kubeletplugin")
    assert [r["resources"] for r in plugin_role["rules"]] == [["computedomaincliques"]]


def test_the_kubelet_plugins_daemonset_is_placed_by_the_values(module, releases):
    release = releases[contract.NVIDIA_DRA_RELEASE]
    ds = _by(release_objects(module, release.values), "DaemonSet", "dra-driver-nvidia-gpu-kubelet-plugin")
    spec = ds["spec"]["template"]["spec"]
    # THEN it runs where efa-stack's values say (the UltraServer groups, their GPU taint tolerated), not where the
    # chart's default affinity would (NFD's PCI labels, which the rehearsal's nodes do not carry)
    assert spec["affinity"] == release.values["kubeletPlugin"]["affinity"]
    assert spec["tolerations"] == release.values["kubeletPlugin"]["tolerations"]
    assert spec["serviceAccountName"] == "dra-driver-nvidia-gpu-service-account-kubeletplugin"
    assert [c["name"] for c in spec["containers"]] == ["compute-domains"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def test_the_controller_runs_with_the_charts_environment(module, releases):
    env = controller_env(module, Names(), releases[contract.NVIDIA_DRA_RELEASE].values)
    assert env["IMAGE_NAME"] == "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
    assert env["NAMESPACE"] == contract.NVIDIA_DRA_NAMESPACE
    assert env["LEADER_ELECTION_ENABLED"] == "false" and env["HTTP_ENDPOINT"] == ":8080"
    assert env["LOG_VERBOSITY_CD_DAEMON"] == env["LOG_VERBOSITY"] == "4"


def test_a_template_renders_conditions_ranges_and_includes():
    text = ('{{- $all := splitList "," (include "x.namespaces" .) -}}\n'
            "{{- if .Values.on }}\nkind: A\nname: {{ include \"x.name\" $ }}\n{{- else }}\nkind: B\n{{- end }}\n"
            "{{- range $ns := $all }}\n---\nkind: C\nnamespace: {{ $ns }}\nlabels:\n  {{- include \"x.labels\" . | nindent 2 }}\n"
            "{{- with $.Values.extra }}\nextra: {{ . }}\n{{- end }}\n{{- end }}\n")
    known = Known({'include "x.name" .': "n", 'splitList "," (include "x.namespaces" .)': ["a", "b"],
                   'include "x.labels" .': "k: v\nl: w"}, {"on": True, "extra": {}})
    assert render_template(text, known) == [
        {"kind": "A", "name": "n"},
        {"kind": "C", "namespace": "a", "labels": {"k": "v", "l": "w"}},
        {"kind": "C", "namespace": "b", "labels": {"k": "v", "l": "w"}}]
    assert render_template(text, Known(known.actions, {"on": False}))[0] == {"kind": "B"}


def test_fails_for_a_template_action_it_does_not_know():
    with pytest.raises(TemplateError, match=r"does not render: \{\{ lookup"):
        render_template('kind: {{ lookup "v1" "Pod" "" "" }}', Known({}, {}))
    with pytest.raises(TemplateError, match="with .Values.extra"):
        render_template("{{- with .Values.extra }}\nx: {{ . }}\n{{- end }}", Known({}, {"extra": {"a": 1}}))


# --- the kubelet plugin's stand-in ----------------------------------------------------------------------------------


def test_a_node_gets_the_slice_the_kubelet_plugin_publishes():
    node = {"metadata": {"name": "gb200-3", "uid": "u-3"}}
    got = cd.node_slice(node)
    # one pool named after the node, one slice, channel 0 and daemon 0 with their type and id, owned by the Node
    assert got["spec"] == {
        "driver": "compute-domain.nvidia.com", "nodeName": "gb200-3",
        "pool": {"name": "gb200-3", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
                    {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}}]}
    assert got["metadata"]["generateName"] == "0-compute-domain.nvidia.com-gb200-3-"
    assert got["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "gb200-3",
                                                   "uid": "u-3", "controller": True}]


def _claim(pool: str, device: str, domain: str, reserved: bool = True) -> dict[str, Any]:
    config = {"source": "FromClaim", "requests": ["channel"],
              "opaque": {"driver": cd.DRIVER, "parameters": {"kind": cd.CHANNEL_CONFIG, "domainID": domain}}}
    status: dict[str, Any] = {"allocation": {"devices": {
        "results": [{"request": "channel", "driver": cd.DRIVER, "pool": pool, "device": device}], "config": [config]}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "w", "uid": "p"}]
    return {"metadata": {"name": "c"}, "status": status}


def test_a_channel_claim_reserved_on_a_node_is_prepared_there():
    claims = [_claim("gb200-0", "channel-0", "cd-1"), _claim("gb200-1", "channel-0", "cd-1", reserved=False),
              _claim("gb200-2", "daemon-0", "cd-1"), {"metadata": {"name": "pending"}}]
    assert cd.prepared_channels(claims) == {"gb200-0": "cd-1"}


@pytest.mark.parametrize(("labels", "wanted", "after"), [
    ({"a": "1"}, "cd-1", {"a": "1", cd.COMPUTE_DOMAIN_LABEL: "cd-1"}),
    ({cd.COMPUTE_DOMAIN_LABEL: "cd-1"}, "cd-1", None),
    ({cd.COMPUTE_DOMAIN_LABEL: "cd-2"}, "cd-1", {cd.COMPUTE_DOMAIN_LABEL: "cd-1"}),  # cd-2's channel unprepared since
    ({"a": "1", cd.COMPUTE_DOMAIN_LABEL: "cd-1"}, None, {"a": "1"}),
    ({"a": "1"}, None, None),
])
def test_the_compute_domain_label_follows_the_prepared_channel(labels, wanted, after):
    assert cd.relabelled(labels, wanted) == after


# --- GFD's cliques and NFD ------------------------------------------------------------------------------------------


def test_nodes_of_one_ultraserver_share_a_clique(gb200):
    group = gb200.node_group("gb200")
    assert group.ultraserver is not None
    per_server = group.ultraserver.domain_nodes
    nodes = plan_nodes(gb200, NodeOptions())
    cliques = {n["metadata"]["name"]: n["metadata"]["labels"].get(contract.GPU_CLIQUE_LABEL) for n in nodes}
    # the 18 nodes of the u-p6e-gb200x72 are one clique <cluster UUID>.<clique id>; the system nodes have none
    ultra = [v for k, v in cliques.items() if k.startswith("gb200-")]
    assert len(ultra) == per_server == 18 and len(set(ultra)) == 1
    assert re.fullmatch(r"[0-9a-f-]{36}\.0", ultra[0])
    assert cliques["system-0"] is None
    # a node of a second UltraServer is in another clique
    assert cd.clique(gb200.name, group, per_server) not in (None, ultra[0])
    assert cd.clique(gb200.name, group, per_server - 1) == ultra[0]


def test_nfd_is_stood_in_for_by_its_workloads_placed_by_the_values(releases):
    release = releases[contract.NFD_RELEASE]
    objects = cd.nfd_objects(release.namespace, release.values)
    master = _by(objects, "Deployment", contract.NFD_MASTER)
    assert master["spec"]["template"]["spec"]["nodeSelector"] == release.values["master"]["nodeSelector"]
    worker = _by(objects, "DaemonSet", f"{contract.NFD_RELEASE}-worker")["spec"]["template"]["spec"]
    assert (worker["affinity"], worker["tolerations"]) == (release.values["worker"]["affinity"],
                                                           release.values["worker"]["tolerations"])
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    assert {o["spec"]["template"]["spec"]["serviceAccountName"] for o in objects
            if o["kind"] in ("Deployment", "DaemonSet")} == accounts
