"""efa-stack's own rules: a compliant and a non-compliant case each, then the whole app."""

from __future__ import annotations

import copy
import json

import pytest

from efa_stack.policies.rules import (
    HOST_ACCESS_REASON,
    Compliance,
    check_template,
    efa_group_all_traffic_only_to_itself,
    efa_interfaces_carry_efa_group,
    efa_launch_template_placed_or_reserved,
    efa_nodes_get_no_public_ip,
    host_access_is_justified,
    manifest_fits_kubectl_handler,
)
from tests.conftest import CLUSTERS, synth_spec

C, N, NA = Compliance.COMPLIANT, Compliance.NON_COMPLIANT, Compliance.NOT_APPLICABLE


def lt(nics=None, **data):
    body = dict(data)
    if nics is not None:
        body["NetworkInterfaces"] = nics
    return {"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": body}}


EFA_NIC = {"InterfaceType": "efa-only", "Groups": ["sg-cluster", {"Fn::ImportValue": "net:EfaSecurityGroupX"}]}


def test_efa1():
    assert efa_interfaces_carry_efa_group(lt([EFA_NIC]), "EfaSecurityGroup") is C
    assert efa_interfaces_carry_efa_group(lt([{**EFA_NIC, "Groups": ["sg-cluster"]}]), "EfaSecurityGroup") is N
    assert efa_interfaces_carry_efa_group(lt([{"InterfaceType": "interface"}]), "EfaSecurityGroup") is NA


def sg_template(extra_rule=None, inline_egress=True):
    ref = {"Fn::GetAtt": ["EfaSecurityGroupAB", "GroupId"]}
    group = {"GroupDescription": "x"}
    if inline_egress:
        group["SecurityGroupEgress"] = [{"CidrIp": "255.255.255.255", "Description": "Disallow all traffic", "IpProtocol": "icmp"}]
    res = {
        "EfaSecurityGroupAB": {"Type": "AWS::EC2::SecurityGroup", "Properties": group},
        "In": {"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {"GroupId": ref, "IpProtocol": "-1", "SourceSecurityGroupId": ref}},
        "Out": {"Type": "AWS::EC2::SecurityGroupEgress", "Properties": {"GroupId": ref, "IpProtocol": "-1", "DestinationSecurityGroupId": ref}},
    }
    if extra_rule:
        res["Extra"] = {"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {"GroupId": ref, **extra_rule}}
    return {"Resources": res}


def test_efa2():
    assert efa_group_all_traffic_only_to_itself("EfaSecurityGroupAB", sg_template()) is C
    assert efa_group_all_traffic_only_to_itself("EfaSecurityGroupAB", sg_template({"IpProtocol": "-1", "CidrIp": "0.0.0.0/0"})) is N
    # without an inline egress list EC2 keeps its default allow-all egress rule
    assert efa_group_all_traffic_only_to_itself("EfaSecurityGroupAB", sg_template(inline_egress=False)) is N


def test_efa3():
    assert efa_launch_template_placed_or_reserved(lt([EFA_NIC], Placement={"GroupName": "pg"})) is C
    reserved = lt([EFA_NIC], CapacityReservationSpecification={"CapacityReservationTarget": {"CapacityReservationId": "cr-1"}})
    assert efa_launch_template_placed_or_reserved(reserved) is C
    assert efa_launch_template_placed_or_reserved(lt([EFA_NIC])) is N
    assert efa_launch_template_placed_or_reserved(lt(None)) is NA


def test_efa4():
    assert efa_nodes_get_no_public_ip(lt([EFA_NIC])) is C
    assert efa_nodes_get_no_public_ip(lt([{**EFA_NIC, "AssociatePublicIpAddress": True}])) is N
    assert efa_nodes_get_no_public_ip(lt([{"InterfaceType": "interface", "AssociatePublicIpAddress": True}])) is NA


def test_k8s1():
    assert manifest_fits_kubectl_handler([{"kind": "ConfigMap", "data": {"a": "b"}}]) is C
    assert manifest_fits_kubectl_handler([{"kind": "ConfigMap", "data": {"a": "x" * 262_144}}]) is N
    assert manifest_fits_kubectl_handler([]) is NA


def daemonset(name, reason=None, host=True):
    pod = {"containers": [{"name": "c"}]}
    if host:
        pod["volumes"] = [{"name": "d", "hostPath": {"path": "/dev/infiniband"}}]
    meta = {"name": name}
    if reason:
        meta["annotations"] = {HOST_ACCESS_REASON: reason}
    return {"kind": "DaemonSet", "metadata": meta, "spec": {"template": {"spec": pod}}}


def test_k8s2():
    why = "advertises EFA devices to the kubelet"
    assert host_access_is_justified(daemonset("efa-device-plugin", why), ["efa-device-plugin"]) is C
    assert host_access_is_justified(daemonset("efa-device-plugin"), ["efa-device-plugin"]) is N
    assert host_access_is_justified(daemonset("sneaky", why), ["efa-device-plugin"]) is N
    assert host_access_is_justified(daemonset("plain", host=False), []) is NA
    mpijob = {"kind": "MPIJob", "metadata": {"name": "j"}, "spec": {"mpiReplicaSpecs": {"Worker": {"template": {"spec": {"hostNetwork": True}}}}}}
    assert host_access_is_justified(mpijob, []) is N


@pytest.mark.parametrize("spec", sorted(p.name for p in CLUSTERS.glob("*.yaml")))
def test_every_shipped_spec_passes_the_project_rules(spec):
    s = synth_spec(str(CLUSTERS / spec))
    for name, template in s.templates.items():
        assert check_template(template, name) == []


def test_project_rules_catch_a_missing_efa_group(default_synth):
    template = copy.deepcopy(default_synth.template("cluster"))
    lt_id = next(k for k in template["Resources"] if k.startswith("NodeGroupp5LaunchTemplate"))
    nics = template["Resources"][lt_id]["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]
    nics[3]["Groups"] = nics[3]["Groups"][:1]
    del template["Resources"][lt_id]["Properties"]["LaunchTemplateData"]["Placement"]
    rules = sorted(f.rule for f in check_template(template))
    assert rules == ["EFA1", "EFA3"]
    assert json.dumps(template)  # still a template


def test_project_rules_catch_an_open_efa_group(default_synth):
    template = copy.deepcopy(default_synth.template("network"))
    sg = next(k for k in template["Resources"] if k.startswith("EfaSecurityGroup") and template["Resources"][k]["Type"] == "AWS::EC2::SecurityGroup")
    template["Resources"][sg]["Properties"]["SecurityGroupIngress"] = [{"CidrIp": "0.0.0.0/0", "IpProtocol": "-1"}]
    assert [f.rule for f in check_template(template)] == ["EFA2"]


def test_cdk_nag_runs_on_every_synth_and_fails_on_a_finding():
    from aws_cdk import App, Stack, Validations, aws_ec2 as ec2
    from cdk_nag import AwsSolutionsChecks

    app = App()
    stack = Stack(app, "Open")
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=0)
    sg = ec2.SecurityGroup(stack, "Sg", vpc=vpc)
    sg.add_ingress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(22))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    with pytest.raises(Exception, match="AwsSolutions-EC23"):
        app.synth()


@pytest.mark.parametrize("spec", ["default.yaml", "trn2.yaml", "p4d.yaml"])
def test_shipped_manifests_pass_the_kubernetes_rules(spec):
    import yaml

    from k8s.charts import HOST_ACCESS_WORKLOADS
    from k8s.dist import render_dist
    from efa_stack.policies.rules import check_manifests
    from efa_stack.spec.plan import plan_from_file

    plan = plan_from_file(CLUSTERS / spec)
    charts = {name: [o for o in yaml.safe_load_all(text) if o] for name, text in render_dist(plan).items()}
    assert check_manifests(charts, HOST_ACCESS_WORKLOADS) == []
    host = [o["metadata"]["name"] for objs in charts.values() for o in objs if host_access_is_justified(o, HOST_ACCESS_WORKLOADS) is C]
    assert host and set(host) <= set(HOST_ACCESS_WORKLOADS)
