"""``efa-stack verify`` on ``devices: dra`` node groups: the devices a node's ResourceSlices publish against the catalog,
no device plugin resource on a DRA node, no DRA driver's devices on a device plugin node (fixtures:
tests/fixtures/resource_slices/README.md)."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from rich.console import Console

from efa_stack import contract
from efa_stack.tools import verify
from tests.support import plan_of
from tests.test_verify import FakeCore, FakeCustom

SLICES = Path(__file__).parent / "fixtures" / "resource_slices"
P4D_NODE = "ip-192-168-153-160.ec2.internal"
P5_NODE = "ip-10-0-1-23.us-west-2.compute.internal"


def slices(*names: str) -> list[dict[str, Any]]:
    return [item for n in names for item in yaml.safe_load((SLICES / n).read_text())["items"]]


def spec(itype: str, devices: str) -> str:
    return f"""
apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata: {{name: t, region: us-west-2, version: "1.35"}}
availabilityZones: [us-west-2a, us-west-2b]
managedNodeGroups:
  - {{name: gpu, instanceType: {itype}, minSize: 1, maxSize: 1, availabilityZones: [us-west-2a], efaEnabled: true,
      devices: {devices}}}
"""


def node(name: str, itype: str, alloc: dict[str, str] | None = None) -> client.V1Node:
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels={contract.LABEL_NODE_GROUP: "gpu",
                                                        contract.INSTANCE_TYPE_LABEL: itype}),
        status=client.V1NodeStatus(allocatable={"cpu": "95", **(alloc or {})},
                                   conditions=[client.V1NodeCondition(type="Ready", status="True")]),
    )


P4D_DRA = plan_of(spec("p4d.24xlarge", "dra"))
P5_DRA = plan_of(spec("p5.48xlarge", "dra"))
REAL_P4D = ("p4d.24xlarge-resourceslice-dranet.yaml", "p4d.24xlarge-resourceslice-gpu.yaml")


def test_a_recorded_p4d_node_publishes_the_catalogs_devices():
    # the recorded dra.net slice also lists 3 ENA interfaces: only the EFA devices count
    assert verify.slice_devices(slices(*REAL_P4D), P4D_NODE) == {"gpu": 8, "efa": 4, "neuron": 0}
    check = verify.check_node(node(P4D_NODE, "p4d.24xlarge"), P4D_DRA.node_group("gpu"), slices(*REAL_P4D))
    assert check.status == "pass" and check.devices == "dra", check.problems
    assert (check.gpus, check.efa, check.expected_gpus, check.expected_efa) == (8, 4, 8, 4)


def test_slices_of_other_nodes_and_of_an_old_generation_do_not_count():
    assert verify.slice_devices(slices(*REAL_P4D), P5_NODE) == {"gpu": 0, "efa": 0, "neuron": 0}
    assert verify.slice_devices(slices("p5.48xlarge-slices-republished.yaml"), P5_NODE)["efa"] == 32


def test_fails_a_dra_node_that_publishes_fewer_efa_devices():
    check = verify.check_node(node(P5_NODE, "p5.48xlarge"), P5_DRA.node_group("gpu"),
                              slices("p5.48xlarge-slices-31-efa.yaml"))
    assert check.status == "fail" and check.efa == 31
    assert "31 EFA devices in ResourceSlices, expected 32" in check.problems
    assert any("aws-dranet" in f and "spec.driver=dra.net" in f for f in check.fixes)


def test_fails_a_dra_node_without_slices_naming_each_driver():
    check = verify.check_node(node(P5_NODE, "p5.48xlarge"), P5_DRA.node_group("gpu"), [])
    assert check.status == "fail"
    assert check.problems == ("no GPUs in ResourceSlices (expected 8)", "no EFA devices in ResourceSlices (expected 32)")
    assert any("spec.driver=gpu.nvidia.com" in f for f in check.fixes)


def test_fails_a_dra_node_that_a_device_plugin_serves_too():
    alloc = {contract.EFA_RESOURCE: "32"}
    check = verify.check_node(node(P5_NODE, "p5.48xlarge", alloc), P5_DRA.node_group("gpu"),
                              slices("p5.48xlarge-slices.yaml"))
    assert check.status == "fail"
    assert check.problems == (f"32 {contract.EFA_RESOURCE} allocatable on a DRA node",)
    assert "hand a device out again" in check.fixes[0] and "NotIn [dra]" in check.fixes[0]


def test_fails_a_device_plugin_node_whose_devices_a_dra_driver_publishes():
    plugin = plan_of(spec("p4d.24xlarge", "plugin"))
    alloc = {contract.GPU_RESOURCE: "8", contract.EFA_RESOURCE: "4"}
    check = verify.check_node(node(P4D_NODE, "p4d.24xlarge", alloc), plugin.node_group("gpu"), slices(*REAL_P4D))
    assert check.status == "fail" and check.devices == "plugin"
    assert check.problems == ("the DRA driver gpu.nvidia.com publishes 8 devices of a device plugin node",
                              "the DRA driver dra.net publishes 4 devices of a device plugin node")
    assert "give the node group devices: dra" in check.fixes[0]
    assert verify.check_node(node(P4D_NODE, "p4d.24xlarge", alloc), plugin.node_group("gpu"), []).status == "pass"


def test_verify_reads_the_clusters_resource_slices():
    items = [node(P5_NODE, "p5.48xlarge"), *(node(f"sys-{i}", "m7i.xlarge") for i in (1, 2))]
    for n in items[1:]:
        n.metadata.labels[contract.LABEL_NODE_GROUP] = "system"
    custom = FakeCustom([], slices=copy.deepcopy(slices("p5.48xlarge-slices.yaml")))
    echoed: list[str] = []
    code = verify.run_verify(P5_DRA, FakeCore([client.V1NodeList(items=items)]), custom,
                             verify.VerifyOptions(timeout=0, json_out=True),
                             console=Console(file=io.StringIO()), echo=echoed.append)
    doc = json.loads(echoed[0])
    assert code == 0, doc
    (gpu,) = [n for n in doc["nodes"] if n["node_group"] == "gpu"]
    assert (gpu["devices"], gpu["gpus"], gpu["efa"]) == ("dra", 8, 32)


def test_acceptance_refuses_a_dra_node_group_and_says_what_checks_it():
    from efa_stack.acceptance import run
    from efa_stack.errors import UserError

    with pytest.raises(UserError) as named:
        run.select_group(P5_DRA, "gpu", no_efa=False, dcgm_level=2)
    assert "devices: dra" in named.value.message and "ResourceSlices" in named.value.fix
    with pytest.raises(UserError) as default:
        run.select_group(P5_DRA, None, no_efa=False, dcgm_level=2)
    assert "(on DRA: gpu)" in default.value.message


@pytest.mark.parametrize("itype", ["p5.48xlarge", "p4d.24xlarge", "trn2.48xlarge"])
def test_the_slices_the_rehearsal_publishes_pass_verify(itype):
    # the rehearsal's stand-in for the drivers (efa_stack/rehearsal/resource_slices.py) and verify agree on a node
    from efa_stack.planning.dra import device_kinds
    from efa_stack.rehearsal.resource_slices import node_slice

    plan = plan_of(spec(itype, "dra"))
    group = plan.node_group("gpu")
    published = [node_slice({"metadata": {"name": "n-0", "uid": "u-0"}}, kind, group) for kind in device_kinds(group)]
    check = verify.check_node(node("n-0", itype), group, published)
    assert check.status == "pass", check.problems


def test_a_sub_node_nccl_test_is_not_judged_against_the_nodes_line_rate():
    # ncclTest.gpusPerWorker: 1 drives 4 of the node's 32 EFA devices; the whole-node job of the same group is judged
    from efa_stack.planning.plan import plan_from_file
    from tests.support import CLUSTERS

    sub = plan_from_file(CLUSTERS / "dra-p5.yaml")
    assert verify._judged_instance_type(sub, sub.node_group("p5")) is None
    whole = plan_of(spec("p5.48xlarge", "dra"))
    assert verify._judged_instance_type(whole, whole.node_group("gpu")) == "p5.48xlarge"
