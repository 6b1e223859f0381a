"""Karpenter EFA pools: the plan of ``karpenterNodePools``, the EC2NodeClass, NodePool and NodeOverlay objects, the
jobs on pools, Kueue's flavors for pools, the controller's AWS resources, and offline validation of every object
against the vendored v1.14.1 CRDs (the real API server: tests/test_apiserver.py)."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from efa_stack import contract, names
from efa_stack.planning import catalog
from efa_stack.planning.karpenter import (
    BUDGETS,
    EXPIRE_AFTER,
    INSTANCE_TERMINATION_SECONDS,
    KARPENTER_CHART,
    KARPENTER_KUBERNETES_VERSIONS,
    KARPENTER_VERSION,
    TEARDOWN_SECONDS,
    TERMINATION_GRACE_PERIOD_SECONDS,
    ami_first_release,
    ami_problems,
    karpenter_supports,
    placement_group_name,
)
from efa_stack.planning.layout import interface_layout
from efa_stack.planning.plan import plan_from_text
from efa_stack.planning.scheduling import node_figures
from efa_stack.planning.user_data import node_user_data
from efa_stack.spec.errors import SpecError
from efa_stack.spec.models import DEFAULT_KUBERNETES_VERSION, DEFAULT_POOL_AMI_VERSION, KUBERNETES_VERSIONS
from k8s.karpenter import POOL_KIND_CRDS, ZONE_LABEL, crd_documents
from tests.support import (
    KUBECTL_HANDLER_LIMIT,
    _build,
    built,
    crd_validate,
    plan_of,
    problems_of,
    synth_spec,
    synth_text,
)

HEADER = """
apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata: {name: t, region: us-west-2, version: "1.34"}
availabilityZones: [us-west-2a, us-west-2b]
managedNodeGroups:
  - name: cpu
    instanceType: m7i.2xlarge
    minSize: 1
"""


def _spec(pool: str, extra: str = "") -> str:
    """HEADER with one pool (``pool``: its YAML fields, indented under ``- ``) and ``extra`` top-level YAML."""
    lines = [line for line in pool.strip().splitlines()]
    body = "\n".join(["karpenterNodePools:", "  - " + lines[0].strip(), *("    " + ln.strip() for ln in lines[1:])])
    return HEADER + body + "\n" + extra


P5_POOL = """
name: p5-pool
instanceType: p5.48xlarge
maxNodes: 3
availabilityZone: us-west-2a
"""


def _objects(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    b = _build(plan_of(text))
    return {(o["kind"], o["metadata"]["name"]): o for _, o in b.objects()}


# --- the plan --------------------------------------------------------------------------------------------------


def test_a_pool_is_planned_as_an_efa_node_group_from_the_catalog():
    # GIVEN a p5 pool WHEN planned THEN its twin has the catalog's current per-card layout and figures
    plan = plan_of(_spec(P5_POOL))
    (pool,) = plan.karpenter.pools
    g = pool.group
    p5 = catalog.get("p5.48xlarge")
    assert g.interfaces == interface_layout(p5, "current")
    assert g.efa_devices_per_node == p5.max_efa_interfaces == 32
    assert g.gpus_per_node == p5.gpus == 8
    assert (g.min_size, g.desired_size, g.max_size) == (0, 3, 3)
    assert g.availability_zone == "us-west-2a"
    assert g.labels[contract.LABEL_NODE_GROUP] == "p5-pool" and g.labels[contract.LABEL_EFA] == "true"
    assert [(t.key, t.effect) for t in g.taints] == [(contract.GPU_TAINT_KEY, "NoSchedule")]
    assert g.node_repair is None
    # AND, on demand, it gets a new cluster placement group of its own, named for the EC2NodeClass
    assert g.placement_group is True and g.placement_group_name is None
    assert pool.new_placement_group == pool.placement_group_name == "t-karpenter-p5-pool"
    assert plan.karpenter.new_placement_groups == ("t-karpenter-p5-pool",)
    # AND it is no managed node group, yet jobs find it by name
    assert "p5-pool" not in [n.name for n in plan.all_node_groups]
    assert plan.node_group("p5-pool") is g
    assert pool.ami_alias == f"al2023@{DEFAULT_POOL_AMI_VERSION}"


def test_limits_are_max_nodes_times_the_catalogs_figures():
    plan = plan_of(_spec(P5_POOL))
    (pool,) = plan.karpenter.pools
    p5 = catalog.get("p5.48xlarge")
    assert pool.limits == {
        "nodes": "3", "cpu": str(3 * p5.vcpus), "memory": f"{3 * p5.memory_mib}Mi",
        contract.GPU_RESOURCE: str(3 * p5.gpus),
    }


def test_a_static_reserved_pool_limits_nodes_only():
    plan = plan_of(_spec("""
        name: blocks
        instanceType: p5en.48xlarge
        maxNodes: 4
        replicas: 2
        capacity: capacity-block
        capacityReservationIds: [cr-0a1b2c3d4e5f60718, cr-0b2c3d4e5f6071829]
        availabilityZone: us-west-2a
    """))
    (pool,) = plan.karpenter.pools
    assert pool.limits == {"nodes": "4"}
    assert pool.capacity_type == "reserved"
    assert pool.reservation_ids == ("cr-0a1b2c3d4e5f60718", "cr-0b2c3d4e5f6071829")
    assert pool.group.desired_size == 2  # the jobs on it run on the static replicas
    assert plan.karpenter.feature_gates == {"reservedCapacity": True, "staticCapacity": True, "nodeOverlay": True,
                                            "nodeRepair": False}


def test_feature_gates_follow_the_pools():
    assert plan_of(_spec(P5_POOL)).karpenter.feature_gates["staticCapacity"] is False
    # a CPU EFA type reserves no hugepages: no NodeOverlay, no gate
    plan = plan_of(_spec("name: hpc\ninstanceType: hpc7a.96xlarge\nmaxNodes: 2"))
    assert plan.karpenter.pools[0].overlay_capacity == {}
    assert plan.karpenter.feature_gates["nodeOverlay"] is False
    # node repair would terminate a node on a condition the acceptance quarantine does not set: off, said outright
    assert plan.karpenter.feature_gates["nodeRepair"] is False


def test_names_for_aws_are_fixed_and_valid():
    k = plan_of(_spec(P5_POOL)).karpenter
    assert k.node_role_name == "t-us-west-2-karpenter-node"
    assert k.interruption_queue_name == "t-karpenter"
    long = plan_of(_spec(P5_POOL).replace("name: t,", f"name: {'c' * 90},")).karpenter
    assert len(long.node_role_name) == 64 and len(long.interruption_queue_name) <= 80


# --- refusals ---------------------------------------------------------------------------------------------------


def _problem(text: str, field: str) -> Any:
    found = [p for p in problems_of(text) if p.field == field]
    assert len(found) == 1, [p.render() for p in problems_of(text)]
    return found[0]


def test_fails_the_legacy_layout_with_karpenters_reason():
    p = _problem(_spec(P5_POOL + "interfaceLayout: legacy"), "karpenterNodePools[0].interfaceLayout")
    assert "'efa-only'" in p.message and "combined 'efa'" in p.message
    assert "interfaceLayout: current" in p.fix and "managedNodeGroups" in p.fix


def test_fails_a_type_whose_current_layout_needs_a_combined_efa_interface():
    # hpc6id.32xlarge: card 0 takes one interface, which must be EFA and ENA in one
    p = _problem(_spec("name: hpc\ninstanceType: hpc6id.32xlarge\nmaxNodes: 2"), "karpenterNodePools[0].instanceType")
    assert p.value == "hpc6id.32xlarge" and "network card 0" in p.message
    assert "managedNodeGroups" in p.fix


@pytest.mark.parametrize(("pool", "field", "words"), [
    ("capacity: reservation", "capacityReservationIds", "needs the reservations"),
    ("capacityReservationIds: [cr-0a1b2c3d4e5f60718]", "capacityReservationIds", "only used with"),
    ("capacity: reservation\ncapacityReservationIds: [cr-0a1b2c3d4e5f60718, cr-0a1b2c3d4e5f60718]",
     "capacityReservationIds", "listed twice"),
    ("replicas: 2", "replicas", "static pool holds reserved capacity"),
    ("capacity: reservation\ncapacityReservationIds: [cr-0a1b2c3d4e5f60718]\nreplicas: 9", "replicas",
     "more replicas than maxNodes"),
    ("capacity: reservation\ncapacityReservationIds: [cr-0a1b2c3d4e5f60718]\nplacementGroup: true",
     "placementGroup", "only if the reservation was created in it"),
    ("capacity: capacity-block\ncapacityReservationIds: [cr-0a1b2c3d4e5f60718]\nplacementGroup: true",
     "placementGroup", "Capacity Blocks"),
    ("capacity: capacity-block\ncapacityReservationIds: [cr-0a1b2c3d4e5f60718]\nplacementGroup: my-group",
     "placementGroup", "Capacity Blocks"),
    ("availabilityZone: us-west-2c", "availabilityZone", "not one of the cluster's"),
    ("labels: {efa-stack.io/x: y}", "labels", "set by efa-stack"),
])
def test_fails_a_pool_that_cannot_work(pool, field, words):
    base = P5_POOL.replace("availabilityZone: us-west-2a\n", "") if pool.startswith("availabilityZone") else P5_POOL
    p = _problem(_spec(base + pool), f"karpenterNodePools[0].{field}")
    assert words in p.message, p.render()


FIVE_BROKEN_POOLS = """
karpenterNodePools:
  - {name: odcr, instanceType: p5.48xlarge, maxNodes: 2, capacity: reservation, capacityReservationIds: [cr-bad]}
  - {name: P5Pool, instanceType: p5.48xlarge, maxNodes: 2}
  - {name: noids, instanceType: p5.48xlarge, maxNodes: 2, capacity: reservation}
  - {name: noefa, instanceType: m5.large, maxNodes: 2}
  - {name: legacy, instanceType: p5.48xlarge, maxNodes: 2, interfaceLayout: legacy}
"""


def test_five_broken_pools_get_every_problem_in_one_run():
    # GIVEN two pools with badly formed values (a reservation id, a name) beside three that cannot work
    with pytest.raises(SpecError) as info:
        plan_from_text(HEADER + FIVE_BROKEN_POOLS)
    # THEN the planning problems of the other three come in the same run as the two pattern errors
    got = [(p.field, p.value) for p in info.value.problems]
    assert got == [
        ("karpenterNodePools[0].capacityReservationIds[0]", "cr-bad"),
        ("karpenterNodePools[1].name", "P5Pool"),
        ("karpenterNodePools[2].capacityReservationIds", []),
        ("karpenterNodePools[3].instanceType", "m5.large"),
        ("karpenterNodePools[4].interfaceLayout", "legacy"),
    ], [p.render() for p in info.value.problems]
    # AND the pool on a type without EFA is told what a pool can do (a pool has no efaEnabled to turn off)
    no_efa = info.value.problems[3]
    assert "Karpenter pool" in no_efa.message and "efaEnabled: false" not in no_efa.fix
    assert "managedNodeGroups" in no_efa.fix


def test_an_io1_pool_root_volume_takes_its_iops_into_the_ec2nodeclass():
    # GIVEN an io1 root volume with its IOPS on a pool, as on a managed node group (the fields they share)
    objects = _objects(_spec(P5_POOL + "volumeType: io1\nvolumeSize: 500\nvolumeIOPS: 3000"))
    node_class = objects[("EC2NodeClass", "p5-pool")]
    # THEN the EC2NodeClass's root volume carries them (BlockDevice ``iops``, aws/karpenter-provider-aws@v1.14.1)
    (root,) = node_class["spec"]["blockDeviceMappings"]
    assert root["ebs"]["volumeType"] == "io1" and root["ebs"]["iops"] == 3000 and root["ebs"]["volumeSize"] == "500Gi"
    crd_validate(node_class)


def test_fails_an_io1_pool_without_iops_with_advice_that_plans():
    p = _problem(_spec(P5_POOL + "volumeType: io1"), "karpenterNodePools[0].volumeIOPS")
    advice = p.fix.split("add ")[1].split(" or more")[0]  # "volumeIOPS: 100"
    (pool,) = plan_of(_spec(P5_POOL + "volumeType: io1\n" + advice)).karpenter.pools
    assert pool.group.volume_iops == 100


def test_fails_a_pool_root_volume_its_ec2nodeclass_cannot_declare():
    p = _problem(_spec(P5_POOL + "volumeType: io2\nvolumeSize: 60000\nvolumeIOPS: 64000"),
                 "karpenterNodePools[0].volumeSize")
    assert "59000" in p.message and "managedNodeGroups" in p.fix
    # the largest it takes is one the CRD's volumeSize pattern accepts
    objects = _objects(_spec(P5_POOL + "volumeType: io2\nvolumeSize: 59000\nvolumeIOPS: 64000"))
    node_class = objects[("EC2NodeClass", "p5-pool")]
    crd_validate(node_class)


def test_a_jobs_problem_with_a_pools_kubelet_setting_names_the_pools_field():
    text = _spec(P5_POOL + "kubeletExtraConfig: {topologyManagerPolicy: single-numa-node}",
                 "ncclTest:\n  nodeGroup: p5-pool\n")
    p = _problem(text, "karpenterNodePools[0].kubeletExtraConfig.topologyManagerPolicy")
    assert "single-numa-node" in p.message


@pytest.mark.parametrize(("pool", "placed", "existing"), [
    ("placementGroup: false", False, None),
    ("placementGroup: my-pg", False, "my-pg"),
    ("capacity: reservation\ncapacityReservationIds: [cr-0a1b2c3d4e5f60718]", False, None),
    ("capacity: reservation\ncapacityReservationIds: [cr-0a1b2c3d4e5f60718]\nplacementGroup: odcr-pg", False, "odcr-pg"),
    ("capacity: capacity-block\ncapacityReservationIds: [cr-0a1b2c3d4e5f60718]", False, None),
    ("placementGroup: true", True, None),
])
def test_a_new_placement_group_only_for_an_on_demand_pool_without_a_named_one(pool, placed, existing):
    # GIVEN a pool's capacity and placementGroup WHEN planned THEN the stack creates a group only for on-demand pools
    # that name none (an ODCR is in a group only if created in it; a Capacity Block is already co-located)
    (p,) = plan_of(_spec(P5_POOL + pool)).karpenter.pools
    assert (p.new_placement_group is not None) is placed
    assert p.placement_group_name == (p.new_placement_group if placed else existing)


def test_the_new_placement_groups_name_is_fixed_and_valid():
    assert placement_group_name("efa-elastic", "p5-elastic") == "efa-elastic-karpenter-p5-elastic"
    longest = placement_group_name("c" * 100, "p" * 63)
    assert names.PLACEMENT_GROUP_NAME.ok(longest) and longest.startswith("c" * 100)
    # two clusters' pools of one name, or two pools of one cluster, never share a group
    assert len({placement_group_name(c, p) for c in ("a", "b") for p in ("x", "y")}) == 4


def test_fails_a_pool_named_as_a_node_group():
    p = _problem(_spec(P5_POOL.replace("p5-pool", "cpu")), "karpenterNodePools[0].name")
    assert "already has this name" in p.message


def test_fails_an_unknown_instance_type_under_the_pools_field():
    assert any(p.field == "karpenterNodePools[0].instanceType" for p in problems_of(_spec(
        P5_POOL.replace("p5.48xlarge", "p5.49xlarge"))))


def test_the_eksctl_karpenter_section_points_to_pools():
    problems = problems_of(HEADER + "karpenter:\n  version: 1.0.0\n")
    (p,) = [p for p in problems if p.field == "karpenter"]
    assert "karpenterNodePools" in p.fix


# --- EC2NodeClass, NodePool, NodeOverlay ------------------------------------------------------------------------


BOTH = HEADER + """  - name: p5
    instanceType: p5.48xlarge
    minSize: 1
    availabilityZones: [us-west-2a]
    efaEnabled: true
""" + "karpenterNodePools:\n  - name: p5-pool\n    instanceType: p5.48xlarge\n    maxNodes: 3\n" \
      "    availabilityZone: us-west-2a\n    placementGroup: my-cluster-pg\n    volumeSize: 300\n"


def test_the_node_class_declares_what_the_node_groups_launch_template_does():
    # GIVEN a managed p5 node group and a p5 pool in one spec
    plan = plan_of(BOTH)
    ng = next(g for g in plan.node_groups if g.name == "p5")
    objects = _objects(BOTH)
    spec = objects[("EC2NodeClass", "p5-pool")]["spec"]
    # THEN the interfaces are the node group's, in Karpenter's spelling
    assert spec["networkInterfaces"] == [
        {"networkCardIndex": i.network_card_index, "deviceIndex": i.device_index, "interfaceType": i.interface_type}
        for i in ng.interfaces
    ]
    assert {n["interfaceType"] for n in spec["networkInterfaces"]} == {"interface", "efa-only"}
    # AND the kubelet's CPU and topology manager settings are the node group's, in the EC2NodeClass's kubelet block,
    # which v1.15 passes through to the node's NodeConfig (pkg/providers/amifamily/bootstrap/nodeadm.go
    # generateInlineKubeletConfiguration)
    assert spec["kubelet"] == ng.kubelet.as_kubelet_config() == {
        "cpuManagerPolicy": "static", "topologyManagerPolicy": "restricted", "topologyManagerScope": "pod"}
    # AND the user data is the node group's document without them (hugepages; no NodeConfig of efa-stack's)
    assert spec["userData"] == node_user_data(ng.hugepages_2mi_mib, ng.lustre_client)
    assert "vm.nr_hugepages" in spec["userData"] and "cpuManagerPolicy" not in spec["userData"]
    assert spec["metadataOptions"]["httpPutResponseHopLimit"] == 1 and spec["metadataOptions"]["httpTokens"] == "required"
    (root,) = spec["blockDeviceMappings"]
    assert root["rootVolume"] is True and root["ebs"]["volumeSize"] == "300Gi" and root["ebs"]["encrypted"] is True
    assert spec["amiSelectorTerms"] == [{"alias": f"al2023@{DEFAULT_POOL_AMI_VERSION}"}]
    assert spec["role"] == plan.karpenter.node_role_name
    assert spec["placementGroupSelector"] == {"name": "my-cluster-pg"}
    assert "capacityReservationSelectorTerms" not in spec
    assert spec["subnetSelectorTerms"] == [{"tags": {contract.KARPENTER_DISCOVERY_TAG: "t"}}]
    assert {"tags": {contract.KARPENTER_DISCOVERY_TAG: "t"}} in spec["securityGroupSelectorTerms"]


def test_the_node_pool_pins_type_zone_capacity_and_never_interrupts_a_job():
    plan = plan_of(_spec(P5_POOL + "consolidateAfter: 45m\ntaints: [{key: team, value: a, effect: NoSchedule}]"))
    pool = _objects(_spec(P5_POOL + "consolidateAfter: 45m\ntaints: [{key: team, value: a, effect: NoSchedule}]"))[
        ("NodePool", "p5-pool")]["spec"]
    reqs = {r["key"]: r["values"] for r in pool["template"]["spec"]["requirements"]}
    assert reqs == {contract.INSTANCE_TYPE_LABEL: ["p5.48xlarge"], contract.KARPENTER_CAPACITY_TYPE_LABEL: ["on-demand"],
                    ZONE_LABEL: ["us-west-2a"]}
    assert pool["template"]["metadata"]["labels"] == plan.karpenter.pools[0].group.labels
    assert {(t["key"], t.get("value"), t["effect"]) for t in pool["template"]["spec"]["taints"]} == {
        ("team", "a", "NoSchedule"), (contract.GPU_TAINT_KEY, "true", "NoSchedule")}
    assert pool["template"]["spec"]["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                        "name": "p5-pool"}
    assert pool["template"]["spec"]["expireAfter"] == EXPIRE_AFTER == "Never"
    assert pool["disruption"]["consolidationPolicy"] == "WhenEmpty"
    assert pool["disruption"]["consolidateAfter"] == "45m"
    assert pool["disruption"]["budgets"] == [b.manifest() for b in BUDGETS]
    assert {"nodes": "0", "reasons": ["Drifted", "Underutilized"]} in pool["disruption"]["budgets"]
    assert "replicas" not in pool


def test_the_capacity_block_pool_selects_every_block_and_is_static():
    b = built("karpenter-capacity-block")
    node_class = b.find("EC2NodeClass", "p5en-blocks")["spec"]
    assert node_class["capacityReservationSelectorTerms"] == [
        {"id": "cr-0a1b2c3d4e5f60718"}, {"id": "cr-0b2c3d4e5f6071829"}, {"id": "cr-0c3d4e5f607182930"}]
    assert "placementGroupSelector" not in node_class
    assert len([n for n in node_class["networkInterfaces"] if n["interfaceType"] == "efa-only"]) == 16
    pool = b.find("NodePool", "p5en-blocks")["spec"]
    assert pool["replicas"] == 4 and pool["limits"] == {"nodes": "4"}
    reqs = {r["key"]: r["values"] for r in pool["template"]["spec"]["requirements"]}
    assert reqs[contract.KARPENTER_CAPACITY_TYPE_LABEL] == ["reserved"] and reqs[ZONE_LABEL] == ["us-east-1a"]


def test_the_overlay_gives_karpenter_the_nodes_hugepages():
    plan = plan_of(_spec(P5_POOL))
    overlay = _objects(_spec(P5_POOL))[("NodeOverlay", "p5-pool-hugepages")]["spec"]
    assert overlay["requirements"] == [
        {"key": contract.KARPENTER_NODEPOOL_LABEL, "operator": "In", "values": ["p5-pool"]}]
    assert overlay["capacity"] == {contract.HUGEPAGES_2MI_RESOURCE: f"{plan.karpenter.pools[0].group.hugepages_2mi_mib}Mi"}
    assert plan.karpenter.pools[0].group.hugepages_2mi_mib > 0


def test_an_existing_vpc_selects_the_pools_subnet_by_id():
    vpc = ("vpc:\n  id: vpc-0123456789abcdef0\n  subnets:\n    private:\n"
           "      us-west-2a: {id: subnet-0aaaaaaaaaaaaaaa1}\n      b-side: {id: subnet-0aaaaaaaaaaaaaaa2, az: us-west-2b}\n")
    text = _spec(P5_POOL.replace("us-west-2a", "us-west-2b"), vpc).replace("availabilityZones: [us-west-2a, us-west-2b]\n", "")
    spec = _objects(text)[("EC2NodeClass", "p5-pool")]["spec"]
    assert spec["subnetSelectorTerms"] == [{"id": "subnet-0aaaaaaaaaaaaaaa2"}]


# --- jobs on pools and Kueue ---------------------------------------------------------------------------------------


def test_the_nccl_job_on_a_pool_requests_every_efa_device_and_is_not_disrupted():
    b = built("karpenter-p5")
    job = b.mpijob()
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 4  # the pool's maxNodes: Karpenter launches them when the job runs
    (container,) = worker["template"]["spec"]["containers"]
    for kind in ("requests", "limits"):
        assert container["resources"][kind][contract.EFA_RESOURCE] == 32
        assert container["resources"][kind][contract.GPU_RESOURCE] == 8
    assert worker["template"]["metadata"]["annotations"][contract.KARPENTER_DO_NOT_DISRUPT] == "true"
    assert worker["template"]["spec"]["nodeSelector"] == {contract.LABEL_NODE_GROUP: "p5-elastic"}


def test_a_job_on_a_managed_node_group_carries_no_karpenter_annotation():
    job = built("default").mpijob()
    annotations = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"].get("annotations") or {}
    assert contract.KARPENTER_DO_NOT_DISRUPT not in annotations


def test_a_training_job_on_a_pool_is_not_disrupted():
    text = _spec(P5_POOL, """trainingJobs:
  - name: ddp
    kind: pytorchjob
    nodeGroup: p5-pool
    nnodes: 2
    image: public.ecr.aws/hpc-cloud/nccl-tests:latest
    command: [python, train.py]
""")
    job = next(o for _, o in _build(plan_of(text)).objects() if o["kind"] == "PyTorchJob")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        assert replica["template"]["metadata"]["annotations"][contract.KARPENTER_DO_NOT_DISRUPT] == "true"
        (container,) = replica["template"]["spec"]["containers"]
        assert container["resources"]["limits"][contract.EFA_RESOURCE] == 32


def test_a_pool_is_a_kueue_flavor_without_topology_with_max_nodes_quota():
    plan = built("karpenter-p5").plan
    flavor = plan.kueue.flavor("p5-elastic")
    assert flavor.topology is None
    figures = node_figures(plan.node_group("p5-elastic"))
    quotas = dict(flavor.quotas)
    assert quotas[contract.EFA_RESOURCE] == str(4 * figures[contract.EFA_RESOURCE]) == "128"
    assert quotas[contract.GPU_RESOURCE] == "32"
    # AND the job on the pool gets no topology annotation, which TAS could not satisfy before the nodes exist
    annotations = built("karpenter-p5").mpijob()["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"][
        "annotations"]
    assert contract.KUEUE_PREFERRED_TOPOLOGY not in annotations and contract.KUEUE_REQUIRED_TOPOLOGY not in annotations
    assert not any("p5-elastic" in w for w in plan.warnings)


def test_device_plugins_tolerate_the_pools_taints():
    b = built("karpenter-p5")
    plugin = b.find("DaemonSet", contract.EFA_DEVICE_PLUGIN_NAME)
    keys = {t["key"] for t in plugin["spec"]["template"]["spec"].get("tolerations", [])}
    assert contract.GPU_TAINT_KEY in keys


# --- offline validation against the vendored CRDs -----------------------------------------------------------------


def _karpenter_objects(stem: str) -> list[dict[str, Any]]:
    groups = (contract.KARPENTER_GROUP, contract.KARPENTER_AWS_GROUP)
    return [o for _, o in built(stem).objects() if o["apiVersion"].split("/")[0] in groups]


@pytest.mark.parametrize("stem", ["karpenter-p5", "karpenter-capacity-block"])
def test_every_pool_object_validates_against_its_crd(stem):
    objects = _karpenter_objects(stem)
    assert {o["kind"] for o in objects} == {"EC2NodeClass", "NodePool", "NodeOverlay"}
    for obj in objects:
        crd_validate(obj)


@pytest.mark.parametrize(("kind", "fault"), [
    ("EC2NodeClass", lambda s: s["networkInterfaces"][1].update(interfaceType="efa")),
    ("EC2NodeClass", lambda s: s["metadataOptions"].update(httpPutResponseHopLimit=0)),
    ("NodePool", lambda s: s["disruption"].update(consolidationPolicy="WhenIdle")),
    ("NodePool", lambda s: s["disruption"].update(consolidateAfter="30 minutes")),
])
def test_fails_a_broken_pool_object_against_its_crd(kind, fault):
    obj = json.loads(json.dumps(next(o for o in _karpenter_objects("karpenter-p5") if o["kind"] == kind)))
    fault(obj["spec"])
    with pytest.raises(jsonschema.ValidationError):
        crd_validate(obj)


def test_the_vendored_crds_are_the_releases_and_fit_the_kubectl_handler():
    names = sorted(d["metadata"]["name"] for d in crd_documents())
    assert names == ["capacitybuffers.autoscaling.x-k8s.io", "ec2nodeclasses.karpenter.k8s.aws",
                     "nodeclaims.karpenter.sh", "nodeoverlays.karpenter.sh", "nodepools.karpenter.sh"]
    assert set(POOL_KIND_CRDS) <= set(names)
    for d in crd_documents():
        kubernetes_validate.validate(d, DEFAULT_KUBERNETES_VERSION, strict=True)
        assert len(json.dumps(d)) < KUBECTL_HANDLER_LIMIT
        # EC2NodeClass takes only these interface types at v1.14.1: no combined 'efa'
        if d["spec"]["names"]["kind"] == "EC2NodeClass":
            (version,) = d["spec"]["versions"]
            item = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["networkInterfaces"]["items"]
            assert item["properties"]["interfaceType"]["enum"] == ["interface", "efa-only"]


@pytest.mark.parametrize("stem", ["karpenter-p5", "karpenter-capacity-block"])
def test_every_manifest_of_a_pool_spec_fits_the_kubectl_handler_limit(stem):
    # the handler receives each chart as json.dumps of its objects; each object's last-applied annotation holds it
    manifests = built(stem).manifests
    assert {"karpenter-crd", "karpenter-pools"} <= set(manifests)
    for chart_id, objs in manifests.items():
        assert len(json.dumps(objs).encode()) < KUBECTL_HANDLER_LIMIT, chart_id


def test_the_chart_order_applies_crds_before_pools():
    b = built("karpenter-p5")
    ids = b.chart_ids
    assert ids.index("karpenter-crd") < ids.index("karpenter-pools")
    pools = b.rollout.apply_step("karpenter-pools")
    from k8s.karpenter import POOL_KIND_CRDS
    from k8s.rollout import established_id

    assert {established_id(c) for c in POOL_KIND_CRDS} <= set(pools.after)


# --- the controller's AWS resources ----------------------------------------------------------------------------------


@cache
def _synth() -> Any:
    return synth_spec("clusters/karpenter-p5.yaml")


def _resources(type_: str) -> dict[str, dict[str, Any]]:
    s = _synth()
    out: dict[str, dict[str, Any]] = {}
    for template in s.templates.values():
        out.update({k: v for k, v in template["Resources"].items() if v["Type"] == type_})
    return out


def test_the_interruption_queue_and_its_five_rules():
    (queue,) = _resources("AWS::SQS::Queue").values()
    assert queue["Properties"]["QueueName"] == "efa-elastic-karpenter"
    assert queue["Properties"]["MessageRetentionPeriod"] == 300 and queue["Properties"]["SqsManagedSseEnabled"] is True
    rules = [r["Properties"]["EventPattern"] for r in _resources("AWS::Events::Rule").values()]
    assert sorted(p["detail-type"][0] for p in rules) == sorted([
        "AWS Health Event", "EC2 Spot Instance Interruption Warning", "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification", "EC2 Capacity Reservation Instance Interruption Warning"])


def test_the_controller_gets_its_role_through_pod_identity():
    associations = [a["Properties"] for a in _resources("AWS::EKS::PodIdentityAssociation").values()
                    if a["Properties"]["ServiceAccount"] == contract.KARPENTER_SERVICE_ACCOUNT]
    assert len(associations) == 1 and associations[0]["Namespace"] == contract.KARPENTER_NAMESPACE
    (policy,) = [p for k, p in _resources("AWS::IAM::Policy").items() if k.startswith("KarpenterControllerPolicy")]
    sids = {s["Sid"] for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert {"AllowScopedEC2InstanceAccessActions", "AllowPassingInstanceRole", "AllowInterruptionQueueActions",
            "AllowRegionalReadActions", "AllowAPIServerEndpointDiscovery"} <= sids
    assert len(sids) == 17


def test_the_node_role_joins_through_an_ec2_linux_access_entry():
    roles = {v["Properties"].get("RoleName"): v for v in _resources("AWS::IAM::Role").values()}
    assert "efa-elastic-us-west-2-karpenter-node" in roles
    entries = [e["Properties"] for e in _resources("AWS::EKS::AccessEntry").values() if e["Properties"].get("Type") == "EC2_LINUX"]
    assert len(entries) == 1 and not entries[0].get("AccessPolicies")


def test_the_helm_release_is_pinned_and_configured():
    (chart,) = [c["Properties"] for c in _resources("Custom::AWSCDK-EKS-HelmChart").values()
                if c["Properties"]["Release"] == contract.KARPENTER_RELEASE]
    assert chart["Repository"] == KARPENTER_CHART and chart["Version"] == KARPENTER_VERSION == "1.15.1"
    assert chart["SkipCrds"] is True and chart["Namespace"] == contract.KARPENTER_NAMESPACE
    values = json.loads(chart["Values"]) if isinstance(chart["Values"], str) else chart["Values"]
    assert values["settings"]["clusterName"] == "efa-elastic"
    assert values["settings"]["interruptionQueue"] == "efa-elastic-karpenter"
    assert values["settings"]["featureGates"] == {"reservedCapacity": True, "staticCapacity": False, "nodeOverlay": True,
                                                  "nodeRepair": False}
    # v1.15's reboot repair and DRA provisioning stay off, said outright (charts/karpenter/values.yaml at v1.15.1)
    assert values["settings"]["awsFeatureGates"] == {"rebootForRepair": False}
    assert values["settings"]["enableDRA"] is False
    assert values["nodeSelector"][contract.LABEL_ROLE] == contract.SYSTEM_NODE_GROUP
    assert values["replicas"] == 2


def test_the_selectors_find_the_tagged_subnets_and_efa_security_group():
    tagged = [v for v in _resources("AWS::EC2::Subnet").values()
              if {"Key": contract.KARPENTER_DISCOVERY_TAG, "Value": "efa-elastic"} in v["Properties"].get("Tags", [])]
    assert len(tagged) == 2 and all(not v["Properties"].get("MapPublicIpOnLaunch") for v in tagged)
    groups = [v for v in _resources("AWS::EC2::SecurityGroup").values()
              if {"Key": contract.KARPENTER_DISCOVERY_TAG, "Value": "efa-elastic"} in v["Properties"].get("Tags", [])]
    assert len(groups) == 1


def test_no_eks_node_group_is_created_for_a_pool():
    names = [v["Properties"].get("NodegroupName") for v in _resources("AWS::EKS::Nodegroup").values()]
    assert "p5-elastic" not in names and len(names) == 2  # system and cpu


# --- the pools' placement groups and AMI release -------------------------------------------------------------------


def test_the_node_class_selects_the_stacks_new_placement_group_by_name():
    b = built("karpenter-p5")
    node_class = b.find("EC2NodeClass", "p5-elastic")["spec"]
    assert node_class["placementGroupSelector"] == {"name": b.plan.karpenter.pools[0].new_placement_group}
    assert node_class["placementGroupSelector"]["name"] == "efa-elastic-karpenter-p5-elastic"


def test_the_stack_creates_the_named_cluster_placement_group_before_the_release():
    # GIVEN karpenter-p5's on-demand pool WHEN synthesized THEN a custom resource creates a cluster placement group
    # of the EC2NodeClass's name, and deletes it, with a policy on that group only
    (group_id, group), = _resources("Custom::AWS").items()
    create, delete = json.loads(group["Properties"]["Create"]), json.loads(group["Properties"]["Delete"])
    assert (create["service"], create["action"]) == ("EC2", "createPlacementGroup")
    assert create["parameters"]["GroupName"] == "efa-elastic-karpenter-p5-elastic"
    assert create["parameters"]["Strategy"] == "cluster"
    assert create["physicalResourceId"] == {"id": "efa-elastic-karpenter-p5-elastic"}
    # a group of that name left by an earlier stack is taken over; one already gone is not an error on delete
    assert create["ignoreErrorCodesMatching"] == "InvalidPlacementGroup.Duplicate"
    assert json.loads(group["Properties"]["Delete"])["ignoreErrorCodesMatching"] == "InvalidPlacementGroup.Unknown"
    assert (delete["action"], delete["parameters"]) == ("deletePlacementGroup", {"GroupName": "efa-elastic-karpenter-p5-elastic"})
    (policy,) = [p for p in _resources("AWS::IAM::Policy").values()
                 if any("CreatePlacementGroup" in str(st["Action"]) for st in p["Properties"]["PolicyDocument"]["Statement"])]
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert json.dumps(statement["Resource"]).endswith(':placement-group/efa-elastic-karpenter-p5-elastic"]]}')
    # AND the release depends on it: created after it, deleted before it, and the pools (whose instances are in the
    # group) depend on the release, so EC2 deletes the group only once the instances are gone
    (release,) = [k for k, c in _resources("Custom::AWSCDK-EKS-HelmChart").items()
                  if c["Properties"]["Release"] == contract.KARPENTER_RELEASE]
    s = _synth()
    template = next(t for t in s.templates.values() if release in t["Resources"])
    assert group_id in template["Resources"][release]["DependsOn"]
    (pools,) = [k for k, v in template["Resources"].items() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
                and k.startswith("Clusterkarpenterpools")]  # the karpenter-pools chart's manifest
    assert release in template["Resources"][pools]["DependsOn"]


def test_no_placement_group_is_created_for_a_capacity_block_pool():
    s = synth_spec("clusters/karpenter-capacity-block.yaml")
    assert not [k for t in s.templates.values() for k, v in t["Resources"].items() if v["Type"] == "Custom::AWS"]


def test_the_controller_may_read_and_launch_into_placement_groups():
    # cloudformation.yaml at v1.14.1: AllowRegionalReadActions holds ec2:DescribePlacementGroups (the selector's
    # look-up), AllowScopedEC2InstanceAccessActions placement-group/* (RunInstances and CreateFleet into it)
    (policy,) = [p for k, p in _resources("AWS::IAM::Policy").items() if k.startswith("KarpenterControllerPolicy")]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert "ec2:DescribePlacementGroups" in statements["AllowRegionalReadActions"]["Action"]
    launch = statements["AllowScopedEC2InstanceAccessActions"]
    assert set(launch["Action"]) == {"ec2:RunInstances", "ec2:CreateFleet"}
    assert any(":placement-group/*" in json.dumps(r) for r in launch["Resource"])


def _on(version: str, text: str) -> str:
    return text.replace('version: "1.34"', f'version: "{version}"')


def test_every_version_with_amis_has_them_in_the_default_release():
    # every Kubernetes version efa-stack builds has, for every AMI type, a first release no newer than the default
    # pin, or none at all (then pools on it are refused)
    for version in KUBERNETES_VERSIONS:
        for ami_type in ("AL2023_X86_64_NVIDIA", "AL2023_X86_64_NEURON", "AL2023_X86_64_STANDARD"):
            first = ami_first_release(version, ami_type)
            assert first is None or first <= DEFAULT_POOL_AMI_VERSION, (version, ami_type, first)
    assert ami_first_release("1.36", "AL2023_X86_64_NVIDIA") == "v20260610"
    assert ami_first_release("1.37", "AL2023_X86_64_NVIDIA") is None


def test_fails_a_pool_on_a_version_without_al2023_amis_with_the_fix():
    # a version the AMI data has no release of (1.37: the pinned Karpenter supports it, the AMI data has no release)
    (p,) = ami_problems("karpenterNodePools[0]", "1.37", "AL2023_X86_64_NVIDIA", DEFAULT_POOL_AMI_VERSION)
    assert p.field == "karpenterNodePools[0].amiVersion"
    assert p.value == DEFAULT_POOL_AMI_VERSION and "Kubernetes 1.37" in p.message and "AL2023_X86_64_NVIDIA" in p.message
    assert "1.36" in p.fix and "amiVersion" in p.fix and "managedNodeGroups" in p.fix


def test_fails_an_ami_release_older_than_the_versions_first():
    p = _problem(_on("1.36", _spec(P5_POOL + "amiVersion: v20260505")), "karpenterNodePools[0].amiVersion")
    assert "v20260610" in p.message and "amiVersion: v20260610 or later" in p.fix


@pytest.mark.parametrize(("version", "ami"), [("1.36", "v20260610"), ("1.31", DEFAULT_POOL_AMI_VERSION),
                                              ("1.36", "v20261001")])
def test_an_ami_release_that_has_the_version_or_is_newer_than_the_data_is_accepted(version, ami):
    (pool,) = plan_of(_on(version, _spec(P5_POOL + f"amiVersion: {ami}"))).karpenter.pools
    assert pool.ami_alias == f"al2023@{ami}"


# --- the Kubernetes versions the pinned Karpenter supports ---------------------------------------------------------


def test_the_pinned_karpenter_supports_every_version_efa_stack_builds():
    # aws/karpenter-provider-aws@v1.15.1 pkg/providers/version/version.go: MinK8sVersion "1.26", MaxK8sVersion "1.37"
    assert KARPENTER_KUBERNETES_VERSIONS == ("1.26", "1.37")
    assert [v for v in KUBERNETES_VERSIONS if not karpenter_supports(v)] == []


def test_a_pool_on_1_37_synthesizes_against_the_pinned_karpenter():
    # GIVEN a pool on Kubernetes 1.37 whose AMI release is newer than the AMI data (so only Karpenter's bound judges)
    text = _on("1.37", _spec(P5_POOL + "amiVersion: v20261001"))
    # THEN it plans: no problem on metadata.version
    (pool,) = plan_of(text).karpenter.pools
    assert pool.ami_alias == "al2023@v20261001"
    # AND the cluster stack installs the pinned controller and applies the pool
    s = synth_text(text)
    cluster = s.template("cluster")
    (chart,) = [r["Properties"] for r in cluster["Resources"].values() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
                and r["Properties"]["Release"] == contract.KARPENTER_RELEASE]
    assert chart["Version"] == KARPENTER_VERSION
    assert "al2023@v20261001" in json.dumps(cluster)


def test_a_version_above_the_bound_is_refused_naming_the_bound_and_the_fix(monkeypatch):
    """When efa-stack builds a Kubernetes version newer than the pinned Karpenter's ``MaxK8sVersion`` (today none:
    1.37 is both), a pool on it is refused on ``metadata.version`` with the bound and a fix that plans."""
    from efa_stack.planning import karpenter as planning_karpenter

    monkeypatch.setattr(planning_karpenter, "KUBERNETES_VERSIONS", (*KUBERNETES_VERSIONS, "1.38"))
    (p,) = planning_karpenter.kubernetes_problems(
        "1.38", [("karpenterNodePools[0]", "AL2023_X86_64_NVIDIA", DEFAULT_POOL_AMI_VERSION)], KUBERNETES_VERSIONS)
    assert p.field == "metadata.version" and p.value == "1.38"
    assert p.message == ("karpenterNodePools run on the Karpenter efa-stack installs, v1.15.1, which supports "
                         "Kubernetes 1.26 to 1.37: on 1.38 its controller fails with \"karpenter is not compatible "
                         "with kubernetes version\"")
    # the newest version the pool's AMI release publishes (1.37 has none up to the data's last release)
    assert p.fix == ('set metadata.version: "1.36" (the pools work on 1.31, 1.32, 1.33, 1.34, 1.35, 1.36), or run '
                     "these nodes in managedNodeGroups entries instead of karpenterNodePools")
    assert plan_of(_on("1.36", _spec(P5_POOL))).karpenter.pools


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("ami", [DEFAULT_POOL_AMI_VERSION, "v20261001"])
def test_a_pool_on_every_offered_version_fits_the_pinned_karpenter_or_is_refused_naming_the_bound(version, ami):
    """A pool on a version the pinned controller does not support is refused whatever its amiVersion (one newer than
    the AMI data is not judged by the AMI check), with a fix that itself plans; on one it supports the pool plans, or
    is refused on its amiVersion alone when no AMI release up to the data's last publishes that version (1.37)."""
    text = _on(version, _spec(P5_POOL + f"amiVersion: {ami}"))
    low, high = KARPENTER_KUBERNETES_VERSIONS
    if karpenter_supports(version):
        expected = ami_problems("karpenterNodePools[0]", version, "AL2023_X86_64_NVIDIA", ami)
        if expected:
            assert [(p.field, p.message) for p in problems_of(text)] == [(p.field, p.message) for p in expected]
            return
        (pool,) = plan_of(text).karpenter.pools
        assert pool.ami_alias == f"al2023@{ami}"
        return
    p = _problem(text, "metadata.version")
    assert p.value == version
    assert f"v{KARPENTER_VERSION}" in p.message and f"{low} to {high}" in p.message
    assert "managedNodeGroups" in p.fix
    # no advice about amiVersion, which no release could satisfy on this version
    assert not [q for q in problems_of(text) if q.field.startswith("karpenterNodePools")]
    # the fix's version plans
    suggested = p.fix.split('version: "')[1].split('"')[0]
    assert karpenter_supports(suggested)
    assert plan_of(_on(suggested, _spec(P5_POOL))).karpenter.pools


def test_the_fix_for_an_unsupported_version_offers_only_versions_every_pools_ami_release_has(monkeypatch):
    from efa_stack.planning import karpenter as planning_karpenter

    # GIVEN a version above the pinned Karpenter's bound and a pool pinned to a release that publishes 1.35 but not
    # 1.36 (first: v20260610)
    monkeypatch.setattr(planning_karpenter, "KUBERNETES_VERSIONS", (*KUBERNETES_VERSIONS, "1.38"))
    (p,) = planning_karpenter.kubernetes_problems(
        "1.38", [("karpenterNodePools[0]", "AL2023_X86_64_NVIDIA", "v20260505")], KUBERNETES_VERSIONS)
    # THEN the fix suggests the newest version that release has, not 1.36
    assert 'version: "1.35"' in p.fix and "1.36" not in p.fix
    assert plan_of(_on("1.35", _spec(P5_POOL + "amiVersion: v20260505"))).karpenter.pools


@pytest.mark.parametrize("version", ["1.38", "abc", "2"])
def test_a_version_efa_stack_does_not_build_is_metadata_versions_own_problem(version):
    found = [p for p in problems_of(_on(version, _spec(P5_POOL))) if p.field == "metadata.version"]
    assert len(found) == 1 and "Karpenter" not in found[0].message


def test_a_spec_without_pools_is_not_held_to_karpenters_versions():
    assert plan_of(_on("1.37", HEADER)).karpenter is None


def test_the_pools_are_deleted_before_the_system_nodes_their_controller_runs_on():
    """CloudFormation deletes a resource only after everything that depends on it: the pools' manifest (whose
    EC2NodeClasses and NodeClaims only a running controller lets go) must reach the system node group the controller
    runs on, through the wait for its replica, or a stack deletion removes those nodes while the pools wait."""
    from efa_stack.tools.deploy_model import dependencies, transitive_dependencies

    template = _synth().template("cluster")
    resources = template["Resources"]
    graph = dependencies(template)
    system = {k for k, v in resources.items() if v["Type"] == "AWS::EKS::Nodegroup" and k.startswith("NodeGroupsystem")}
    (pools,) = [k for k, v in resources.items() if k.startswith("Clusterkarpenterpools")]
    (available,) = [k for k, v in resources.items() if v["Type"] == "Custom::AWSCDK-EKS-KubernetesObjectValue"
                    and v["Properties"]["ObjectName"] == contract.KARPENTER_DEPLOYMENT]
    assert system and available in graph[pools]
    assert system <= transitive_dependencies(graph, pools)


# --- deletions that finish ----------------------------------------------------------------------------------------


def _seconds(duration: str) -> int:
    """A NodePool duration (CRD pattern ``^([0-9]+(s|m|h))+$``) in seconds."""
    parts = re.findall(r"([0-9]+)([smh])", duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(int(n) * {"s": 1, "m": 60, "h": 3600}[u] for n, u in parts)


@pytest.mark.parametrize("stem", ["karpenter-p5", "karpenter-capacity-block"])
def test_every_pool_bounds_a_nodes_drain_and_still_never_disrupts_a_busy_node(stem):
    """Without ``terminationGracePeriod`` a node's drain waits for its ``do-not-disrupt`` workers for ever; with it,
    Karpenter's eventual disruption (drift) may take a node despite ``do-not-disrupt``, so the Drifted budget of 0
    must keep every busy node out of voluntary disruption."""
    pool = built(stem).find("NodePool", built(stem).plan.karpenter.pools[0].name)["spec"]
    assert _seconds(pool["template"]["spec"]["terminationGracePeriod"]) == TERMINATION_GRACE_PERIOD_SECONDS
    drifted = [b for b in pool["disruption"]["budgets"] if "Drifted" in b["reasons"]]
    assert drifted and all(b["nodes"] == "0" for b in drifted)
    assert pool["disruption"]["consolidationPolicy"] == "WhenEmpty"


@pytest.mark.parametrize("spec", ["karpenter-p5.yaml", "karpenter-capacity-block.yaml"])
def test_a_stack_deletion_cannot_leave_the_kubectl_handler_waiting_on_the_pools(spec):
    """The kubectl handler deletes the pools' manifest with ``kubectl delete``, which waits until the EC2NodeClasses'
    finalizers let go, i.e. until every NodeClaim is drained and its instance terminated. That must end within the
    handler Lambda's timeout, and the controller that clears the finalizers (its release, its permissions, the queue,
    the nodes' access entry, the system nodes it runs on) must outlive the pools."""
    from efa_stack.tools.deploy_model import dependencies, transitive_dependencies

    template = synth_spec(f"clusters/{spec}").template("cluster")
    resources = template["Resources"]
    (timeout,) = [v["Properties"]["Timeout"] for v in resources.values() if v["Type"] == "AWS::Lambda::Function"
                  and v["Properties"].get("Description", "").startswith("onEvent handler for EKS kubectl")]
    (pools,) = [k for k in resources if k.startswith("Clusterkarpenterpools")]
    node_pools = [o for o in json.loads(resources[pools]["Properties"]["Manifest"]) if o["kind"] == "NodePool"]
    assert node_pools
    for node_pool in node_pools:
        drain = _seconds(node_pool["spec"]["template"]["spec"]["terminationGracePeriod"])
        assert drain + INSTANCE_TERMINATION_SECONDS + TEARDOWN_SECONDS <= timeout
    kept = transitive_dependencies(dependencies(template), pools)
    release = {k for k, v in resources.items() if v["Type"] == "Custom::AWSCDK-EKS-HelmChart"
               and v["Properties"]["Release"] == contract.KARPENTER_RELEASE}
    controller = {k for k, v in resources.items() if k.startswith("Karpenter") and v["Type"] in (
        "AWS::IAM::Policy", "AWS::EKS::PodIdentityAssociation", "AWS::EKS::AccessEntry", "AWS::SQS::Queue")
        and "PlacementGroup" not in k}
    system = {k for k, v in resources.items() if v["Type"] == "AWS::EKS::Nodegroup" and k.startswith("NodeGroupsystem")}
    assert len(release) == 1 and len(controller) == 4 and system
    assert release | controller | system <= kept


def test_the_release_follows_the_karpenter_crds_it_would_otherwise_install():
    """aws-cdk-lib 2.275's Helm handler drops SkipCrds, so the release must find the CRDs of the karpenter-crd chart
    Established (Helm then leaves them as they are) rather than race that chart with its own copies."""
    ((key, release),) = [(k, v) for k, v in _resources("Custom::AWSCDK-EKS-HelmChart").items()
                         if v["Properties"]["Release"] == contract.KARPENTER_RELEASE]
    waits = {k for k in _resources("Custom::AWSCDK-EKS-KubernetesObjectValue") if k.startswith("KarpenterCrdEstablished")}
    assert len(waits) == 3 and waits <= set(release.get("DependsOn", [])), key
