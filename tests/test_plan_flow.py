"""Each derived number walked from the spec to the launch template and to the rendered manifests.

One number, one function: EFA devices (``spec.layout.efa_devices`` over the catalog's cards), GPUs
(``catalog.InstanceType.gpus``), slots and ``-np`` (``spec.nccl.NcclJobPlan``), hugepages
(``spec.nccl.node_hugepages_mib``), worker memory (``ncclTest.memoryMiB`` through ``NcclJobPlan``) and
the EFA line rate (``catalog.InstanceType.efa_line_rate_gbps``). The plan carries every one of them;
the CloudFormation and the Kubernetes objects must agree with it, for clusters/default.yaml
(2 x p5.48xlarge): 32 EFA interfaces, 8 GPUs, slots 8, ``-np`` 16, 5120 MiB of hugepages.
"""

from __future__ import annotations

import dataclasses
import re

from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Match, Template

from aws_constructs.launch_template import LaunchTemplateProps
from aws_constructs.node_group import ManagedNodeGroup, ManagedNodeGroupProps
from aws_constructs.user_data import HUGEPAGE_MIB
from efa_stack import contract
from efa_stack.planning import catalog
from efa_stack.planning.layout import interface_layout
from efa_stack.planning.plan import ClusterPlan
from efa_stack.spec.loader import load_spec
from k8s.components import EFA_DEVICE_PLUGIN, NCCL_TESTS
from tests.support import CLUSTERS, built, built_text, gpu_launch_template, gpu_nodegroup, spec_text


def _worker(manifests: dict) -> dict:
    (job,) = [o for o in manifests[NCCL_TESTS] if o["kind"] == "MPIJob"]
    return job


def _launcher_args(job: dict) -> list[str]:
    (c,) = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]
    return [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]


def _schedules_on(daemonset: dict, labels: dict[str, str]) -> bool:
    """Whether a node with ``labels`` satisfies the DaemonSet's required node affinity (In/NotIn/Exists)."""
    affinity = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]

    def ok(e: dict) -> bool:
        have = labels.get(e["key"])
        return {
            "In": lambda: have in e["values"], "NotIn": lambda: have not in e["values"],
            "Exists": lambda: have is not None, "DoesNotExist": lambda: have is None,
        }[e["operator"]]()

    return any(all(ok(e) for e in t["matchExpressions"]) for t in terms)


def test_plan_holds_everything_and_no_raw_spec():
    # GIVEN the default spec's plan
    plan = built("default").plan
    # THEN it carries the job and storage as fields, and nothing points back at the raw spec
    names = {f.name for f in dataclasses.fields(ClusterPlan)}
    assert {"nccl_job", "storage", "node_groups", "system"} <= names and "spec" not in names
    assert plan.nccl_job is not None and plan.storage is None


def test_efa_devices_gpus_slots_np_from_the_catalog_to_the_template_and_the_job(default_synth):
    # GIVEN p5.48xlarge x 2 and what the catalog says about the instance type
    instance = catalog.get("p5.48xlarge")
    expected_efa = len([i for i in interface_layout(instance, "current") if i.interface_type != "interface"])
    plan = default_synth.plan
    group, job = plan.node_group("p5"), plan.nccl_job
    # THEN the plan derived the numbers once
    assert (group.efa_devices_per_node, group.gpus_per_node) == (expected_efa, instance.gpus) == (32, 8)
    assert (job.worker.efa_devices, job.worker.gpus, job.slots_per_worker) == (32, 8, 8)
    assert (job.workers, job.np) == (group.desired_size, 16)
    # AND the launch template has one EFA interface per device
    nics = gpu_launch_template(default_synth)["NetworkInterfaces"]
    assert len([n for n in nics if n["InterfaceType"] in ("efa", "efa-only")]) == group.efa_devices_per_node
    # AND the rendered MPIJob asks for the same devices, slots and ranks
    mpijob = _worker(built("default").manifests)
    (worker,) = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    limits = worker["resources"]["limits"]
    assert limits[contract.EFA_RESOURCE] == group.efa_devices_per_node
    assert limits[contract.GPU_RESOURCE] == group.gpus_per_node
    assert mpijob["spec"]["slotsPerWorker"] == job.slots_per_worker
    assert mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == job.workers
    args = _launcher_args(mpijob)
    assert args[args.index("-np") + 1] == str(job.np)


def test_labels_on_the_nodes_are_what_the_pods_select(default_synth):
    # GIVEN the node group's labels in the template
    labels = gpu_nodegroup(default_synth)["Labels"]
    manifests = built("default").manifests
    # THEN the NCCL workers select those nodes, and the EFA device plugin runs on them
    worker = _worker(manifests)["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["nodeSelector"].items() <= labels.items()
    daemonsets = [o for o in manifests[EFA_DEVICE_PLUGIN] if o["kind"] == "DaemonSet"]
    assert any(_schedules_on(d, labels) for d in daemonsets)
    assert labels[contract.LABEL_EFA] == "true"


def test_hugepages_in_user_data_are_the_hugepages_request(default_synth):
    # GIVEN the one rule's answer for the p5 group
    group = default_synth.plan.node_group("p5")
    assert group.hugepages_2mi_mib == load_spec(CLUSTERS / "default.yaml").nccl_test.hugepages_mib == 5120
    # THEN the node reserves that many 2 MiB pages at boot
    user_data = default_synth.stacks.cluster.node_groups["p5"].launch_template.user_data
    pages = int(re.search(r"sysctl -w vm\.nr_hugepages=(\d+)", user_data).group(1))
    assert pages * HUGEPAGE_MIB == group.hugepages_2mi_mib
    # AND each worker requests exactly that, with the job's memory
    (worker,) = _worker(built("default").manifests)["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert worker["resources"]["limits"][contract.HUGEPAGES_2MI_RESOURCE] == f"{group.hugepages_2mi_mib}Mi"
    assert worker["resources"]["limits"]["memory"] == f"{default_synth.plan.nccl_job.worker.memory.memory_mib}Mi"


def test_line_rate_comes_from_the_catalog():
    # p5.48xlarge: 3200 Gbps of EFA networking (EC2 "Accelerated computing instance types", P5), which
    # nccl-report judges busbw against; the plan's EFA devices are the cards that carry it
    instance = catalog.get("p5.48xlarge")
    assert instance.efa_line_rate_gbps == 3200
    assert len(instance.efa_cards) == built("default").plan.node_group("p5").efa_devices_per_node


def test_trainium_nodes_reserve_no_hugepages():
    # GIVEN an EFA Trainium group (no NCCL job: nccl-tests are CUDA programs)
    plan = built("trn2").plan
    (group,) = [g for g in plan.node_groups if g.role == "neuron"]
    # THEN no pod efa-stack renders there asks for hugepages, so the nodes reserve none
    assert plan.nccl_job is None and group.efa_enabled
    assert group.hugepages_2mi_mib == 0


def test_tcp_fabric_job_requests_no_hugepages_but_the_efa_node_keeps_its_reservation():
    plan = built_text(spec_text(extra="ncclTest:\n  fabric: tcp\n")).plan
    assert plan.node_group("gpu").hugepages_2mi_mib == 5120 and plan.nccl_job.worker.memory.hugepages_mib == 0


def test_node_group_composes_without_a_plan():
    # GIVEN a plain CDK app with an imported cluster and subnet, and no efa-stack plan
    stack = Stack(App(builtin_cloud_formation_validation=False), "Mine")
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0abc", availability_zones=["us-west-2a"])
    cluster = eks.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="mine", vpc=vpc)
    subnet = ec2.Subnet.from_subnet_attributes(stack, "Subnet", subnet_id="subnet-0abc", availability_zone="us-west-2a")
    # WHEN a node group is made from its own props
    ManagedNodeGroup(
        stack, "Workers",
        ManagedNodeGroupProps(LaunchTemplateProps(instance_type="m7i.xlarge"), min_size=0, desired_size=1, max_size=2),
        cluster=cluster, subnets=[subnet], security_group_ids=["sg-0abc"],
    )
    # THEN it synthesizes with the documented defaults: no placement group, gp3 root, no user data
    t = Template.from_stack(stack)
    t.resource_count_is("AWS::EC2::PlacementGroup", 0)
    t.has_resource_properties("AWS::EC2::LaunchTemplate", {
        "LaunchTemplateData": Match.object_like({
            "InstanceType": "m7i.xlarge",
            "SecurityGroupIds": ["sg-0abc"],
            "UserData": Match.absent(),
        }),
    })
    t.has_resource_properties("AWS::EKS::Nodegroup", {
        "ClusterName": "mine",
        "ScalingConfig": {"MinSize": 0, "DesiredSize": 1, "MaxSize": 2},
        "AmiType": "AL2023_x86_64_STANDARD",
    })
