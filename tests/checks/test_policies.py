"""efa-stack's own rules: a compliant and a non-compliant case each (as pure functions, then through the
EfaStack cdk-nag pack on small constructed stacks), both packs wired into the app, then the shipped specs."""

from __future__ import annotations

import copy
import json

import pytest

from efa_stack import contract
from efa_stack.checks.rules import (
    KUBERNETES_MANIFEST,
    App,
    Compliance,
    check_templates,
    efa_group_all_traffic_only_to_itself,
    efa_interfaces_carry_efa_group,
    efa_launch_template_placed_or_reserved,
    efa_nodes_get_no_public_ip,
    host_access_is_justified,
    manifest_fits_kubectl_handler,
    manifest_objects,
)
from k8s.charts import HOST_ACCESS_WORKLOADS
from tests.support import CLUSTERS, LOADER, NO_ASSET_STAGING, scratch_dir, synth_spec

C, N, NA = Compliance.COMPLIANT, Compliance.NON_COMPLIANT, Compliance.NOT_APPLICABLE

# --- pure functions over hand-written templates ----------------------------------------------------

SG = {"Fn::GetAtt": ["Efa", "GroupId"]}
DISALLOW = {"CidrIp": "255.255.255.255", "Description": "Disallow all traffic", "IpProtocol": "icmp"}


def network(extra_rule=None, inline_egress=True, inline_self_rules=False):
    """A network stack with an EFA group; its self rules separate (as CDK renders them) or inline."""
    group: dict = {"GroupDescription": "x"}
    res: dict = {"Efa": {"Type": "AWS::EC2::SecurityGroup", "Properties": group}}
    if inline_self_rules:
        group["SecurityGroupIngress"] = [{"IpProtocol": "-1", "SourceSecurityGroupId": SG}]
        group["SecurityGroupEgress"] = [{"IpProtocol": "-1", "DestinationSecurityGroupId": SG}]
    else:
        res["In"] = {"Type": "AWS::EC2::SecurityGroupIngress",
                     "Properties": {"GroupId": SG, "IpProtocol": "-1", "SourceSecurityGroupId": SG}}
        res["Out"] = {"Type": "AWS::EC2::SecurityGroupEgress",
                      "Properties": {"GroupId": SG, "IpProtocol": "-1", "DestinationSecurityGroupId": SG}}
        if inline_egress:
            group["SecurityGroupEgress"] = [DISALLOW]
    if extra_rule:
        res["Extra"] = {"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {"GroupId": SG, **extra_rule}}
    outputs = {"EfaId": {"Value": SG, "Export": {"Name": "net:EfaId"}}}
    return {"Resources": res, "Outputs": outputs}


def lt(nics=None, **data):
    body = dict(data)
    if nics is not None:
        body["NetworkInterfaces"] = nics
    return {"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": body}}


EFA_NIC = {"InterfaceType": "efa-only", "Groups": ["sg-cluster", {"Fn::ImportValue": "net:EfaId"}]}


def app_with(launch_template=None, **net):
    cluster = {"Resources": {"Lt": launch_template or lt([EFA_NIC])}}
    return App({"net": network(**net), "cluster": cluster})


def test_efa1_follows_the_import_to_a_group_open_to_itself():
    # GIVEN an EFA interface naming the network stack's EFA group through an export
    assert efa_interfaces_carry_efa_group(lt([EFA_NIC]), "cluster", app_with()) is C
    # inline self rules count as well as separate Ingress/Egress resources
    assert efa_interfaces_carry_efa_group(lt([EFA_NIC]), "cluster", app_with(inline_self_rules=True)) is C
    assert efa_interfaces_carry_efa_group(lt([{"InterfaceType": "interface"}]), "cluster", app_with()) is NA


def test_fails_efa1_when_an_efa_interface_lacks_the_group():
    # only the cluster's own group (not one of the app's, not open to itself)
    assert efa_interfaces_carry_efa_group(lt([{**EFA_NIC, "Groups": ["sg-cluster"]}]), "cluster", app_with()) is N
    # a group named whatever, but without its self-referencing egress rule, is not an EFA group
    app = app_with()
    del app.templates["net"]["Resources"]["Out"]
    assert efa_interfaces_carry_efa_group(lt([EFA_NIC]), "cluster", app) is N


def test_efa2():
    assert efa_group_all_traffic_only_to_itself(("net", "Efa"), app_with()) is C
    assert efa_group_all_traffic_only_to_itself(("net", "Efa"), app_with(inline_self_rules=True)) is C
    plain = App({"net": {"Resources": {"Web": {"Type": "AWS::EC2::SecurityGroup", "Properties": {
        "SecurityGroupEgress": [{"CidrIp": "0.0.0.0/0", "IpProtocol": "-1"}]}}}}})
    assert efa_group_all_traffic_only_to_itself(("net", "Web"), plain) is NA


def test_fails_efa2_when_the_group_is_open_to_others_or_keeps_default_egress():
    open_rule = {"IpProtocol": "-1", "CidrIp": "0.0.0.0/0"}
    assert efa_group_all_traffic_only_to_itself(("net", "Efa"), app_with(extra_rule=open_rule)) is N
    # without an inline egress list EC2 keeps its default allow-all egress rule
    assert efa_group_all_traffic_only_to_itself(("net", "Efa"), app_with(inline_egress=False)) is N


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


def test_manifest_objects_reads_a_joined_manifest_with_deploy_time_values():
    ref = {"Ref": "LustreFileSystem"}
    joined = {"Fn::Join": ["", ['[{"kind":"PersistentVolume","spec":{"volumeHandle":"', ref, '"}}]']]}
    (pv,) = manifest_objects(joined)
    assert pv["spec"]["volumeHandle"] == "?" * len(json.dumps(ref))
    with pytest.raises(TypeError):
        manifest_objects({"Fn::GetAtt": ["X", "Manifest"]})


def daemonset(name, reason=None, host=True):
    pod = {"containers": [{"name": "c"}]}
    if host:
        pod["volumes"] = [{"name": "d", "hostPath": {"path": "/dev/infiniband"}}]
    meta = {"name": name}
    if reason:
        meta["annotations"] = {contract.ANNOTATION_HOST_ACCESS_REASON: reason}
    return {"kind": "DaemonSet", "metadata": meta, "spec": {"template": {"spec": pod}}}


def test_k8s2():
    why = "advertises EFA devices to the kubelet"
    assert host_access_is_justified(daemonset("efa-device-plugin", why), ["efa-device-plugin"]) is C
    assert host_access_is_justified(daemonset("efa-device-plugin"), ["efa-device-plugin"]) is N
    assert host_access_is_justified(daemonset("sneaky", why), ["efa-device-plugin"]) is N
    assert host_access_is_justified(daemonset("plain", host=False), []) is NA
    mpijob = {"kind": "MPIJob", "metadata": {"name": "j"}, "spec": {"mpiReplicaSpecs": {"Worker": {"template": {"spec": {"hostNetwork": True}}}}}}
    assert host_access_is_justified(mpijob, []) is N


# --- the EfaStack pack on small constructed stacks -----------------------------------------------

WHY = "advertises EFA devices to the kubelet"


def _manifest(stack, id_, objects):
    from aws_cdk import CfnResource

    return CfnResource(stack, id_, type=KUBERNETES_MANIFEST,
                       properties={"ClusterName": "c", "Manifest": json.dumps(objects)})


def _launch_template(stack, id_, groups, **data):
    from aws_cdk import aws_ec2 as ec2

    nic = ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
        device_index=0, network_card_index=0, interface_type="efa", groups=groups,
        associate_public_ip_address=data.pop("public_ip", None),
    )
    return ec2.CfnLaunchTemplate(stack, id_, launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
        network_interfaces=[nic], **data))


def synth_with_pack(build) -> dict[str, list[str]]:
    """Synthesize a small app (with violations) checked by EfaStackChecks only: {rule id: [construct paths]}."""
    from aws_cdk import App as CdkApp
    from aws_cdk import Validations

    from efa_stack.checks.nag_pack import EfaStackChecks

    outdir = scratch_dir("efa-stack-nag-")
    app = CdkApp(outdir=str(outdir), context=NO_ASSET_STAGING, builtin_cloud_formation_validation=False)
    build(app)
    Validations.of(app).add_plugins(EfaStackChecks(app, host_access_workloads=["efa-device-plugin"]))
    with pytest.raises(Exception, match="ValidationFailed"):  # the report is written before the synth fails
        app.synth()
    report = json.loads((outdir / "validation-report.json").read_text())
    return {
        v["ruleName"]: sorted(c["constructPath"] for c in v["violatingConstructs"])
        for p in report["pluginReports"] if p["pluginName"] == "EfaStack" for v in p["violations"]
    }


@pytest.fixture(scope="module")
def pack_findings():
    """One app with a compliant and a non-compliant resource for every rule; the EFA group is imported
    from another stack, as the cluster stack imports it from the network stack."""

    def build(app):
        from aws_cdk import Stack
        from aws_cdk import aws_ec2 as ec2

        from aws_constructs.network import EfaSecurityGroup
        from aws_constructs.security import acknowledge

        net = Stack(app, "net")
        vpc = ec2.Vpc(net, "Vpc", availability_zones=["us-west-2a"], nat_gateways=0, subnet_configuration=[
            ec2.SubnetConfiguration(name="p", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)])
        efa = EfaSecurityGroup(net, "Efa", vpc=vpc).security_group
        opened = EfaSecurityGroup(net, "Opened", vpc=vpc).security_group
        opened.add_ingress_rule(ec2.Peer.ipv4("10.0.0.0/8"), ec2.Port.all_traffic())
        cluster = Stack(app, "cluster")
        placed = {"placement": ec2.CfnLaunchTemplate.PlacementProperty(group_name="pg")}
        _launch_template(cluster, "Good", [efa.security_group_id], **placed)
        _launch_template(cluster, "NoEfaGroup", ["sg-0123456789abcdef0"], **placed)
        _launch_template(cluster, "NotPlaced", [efa.security_group_id])
        waived = _launch_template(cluster, "NotPlacedOnPurpose", [efa.security_group_id])
        acknowledge(waived, "EfaStack-EFA3", "placementGroup: false in the spec, on purpose", pack=contract.NAG_PACK_NAME)
        _launch_template(cluster, "Public", [efa.security_group_id], public_ip=True, **placed)
        _manifest(cluster, "Plugin", [daemonset("efa-device-plugin", WHY)])
        _manifest(cluster, "Sneaky", [daemonset("sneaky", WHY), daemonset("plain", host=False)])
        _manifest(cluster, "Huge", [{"kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"a": "x" * 262_144}}])
        opted_out = _placement_opt_out(cluster, efa.security_group_id)
        built["opt-out"] = cluster.resolve(opted_out.launch_template.launch_template.launch_template_data)

    built: dict = {}
    return synth_with_pack(build), built


def _placement_opt_out(stack, efa_group: str):
    """The node group of an on-demand EFA group with ``placementGroup: false`` (the fix the spec validation itself
    suggests for instance types without cluster placement support), from its plan as the cluster stack builds it."""
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_eks_v2 as eks

    from aws_constructs.node_group import ManagedNodeGroup
    from stacks.node_groups import node_group_props
    from tests.builders import BASE

    (ng,) = BASE.with_group(placementGroup=False).plan().node_groups
    vpc = ec2.Vpc.from_vpc_attributes(stack, "ImportedVpc", vpc_id="vpc-0abc", availability_zones=["us-west-2a"])
    imported = eks.Cluster.from_cluster_attributes(stack, "Imported", cluster_name="c", vpc=vpc)
    subnet = ec2.Subnet.from_subnet_attributes(stack, "Subnet", subnet_id="subnet-0abc", availability_zone="us-west-2a")
    return ManagedNodeGroup(stack, "PlacementOptOut", node_group_props(ng), cluster=imported, subnets=[subnet],
                            security_group_ids=["sg-cluster", efa_group])


def test_pack_reports_each_rule_on_the_non_compliant_resource_only(pack_findings):
    findings, _ = pack_findings
    assert findings == {
        "EfaStack-EFA1": ["cluster/NoEfaGroup"],
        "EfaStack-EFA2": ["net/Opened/SecurityGroup/Resource"],
        "EfaStack-EFA3": ["cluster/NotPlaced"],
        "EfaStack-EFA4": ["cluster/Public"],
        "EfaStack-K8S1": ["cluster/Huge"],
        "EfaStack-K8S2[DaemonSet/sneaky]": ["cluster/Sneaky"],
    }


def test_cdk_nag_runs_on_every_synth_and_fails_on_a_finding():
    from aws_cdk import App as CdkApp
    from aws_cdk import Stack, Validations
    from aws_cdk import aws_ec2 as ec2
    from cdk_nag import AwsSolutionsChecks

    app = CdkApp(builtin_cloud_formation_validation=False)
    stack = Stack(app, "Open")
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=0)
    sg = ec2.SecurityGroup(stack, "Sg", vpc=vpc)
    sg.add_ingress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(22))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    with pytest.raises(Exception, match="AwsSolutions-EC23"):
        app.synth()


# --- both packs are wired into the app stacks/compose.py builds -----------------------------------------

def _tiny_stacks(monkeypatch):
    """Replace the cluster stack with a tiny one that breaks an AwsSolutions rule (EC23: SSH from anywhere) and a
    project rule (EFA1), so build() is exercised without a full synth."""
    from aws_cdk import Stack
    from aws_cdk import aws_ec2 as ec2

    import stacks.compose as app_module

    def cluster(scope, id_, *, plan, env, charts=None, rollout=None, layout=None, description=None):
        stack = Stack(scope, id_, env=env)
        vpc = ec2.Vpc(stack, "Vpc", availability_zones=list(plan.availability_zones), nat_gateways=0,
                      subnet_configuration=[ec2.SubnetConfiguration(name="p", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)])
        ec2.SecurityGroup(stack, "Ssh", vpc=vpc).add_ingress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(22))
        _launch_template(stack, "Lt", ["sg-0123456789abcdef0"], placement=ec2.CfnLaunchTemplate.PlacementProperty(group_name="pg"))
        return stack

    monkeypatch.setattr(app_module, "ClusterStack", cluster)


@pytest.mark.parametrize("nag", [True, False])
def test_build_checks_every_synth_with_both_packs(monkeypatch, nag):
    from aws_cdk import App as CdkApp

    from efa_stack.planning.plan import plan_from_file
    from stacks.compose import build

    _tiny_stacks(monkeypatch)
    app = CdkApp(outdir=str(scratch_dir("efa-stack-build-")), context=NO_ASSET_STAGING,
                 builtin_cloud_formation_validation=False)
    build(app, plan_from_file(CLUSTERS / "default.yaml"), nag=nag)
    if not nag:
        app.synth()  # the switch turns both packs off
        return
    with pytest.raises(Exception) as info:
        app.synth()
    assert "AwsSolutions-EC23" in str(info.value)
    assert "EfaStack-EFA1" in str(info.value)


# --- the shipped specs -----------------------------------------------------------------------------

@pytest.mark.parametrize("spec", sorted(p.name for p in CLUSTERS.glob("*.yaml")))
def test_every_shipped_spec_passes_the_project_rules(spec):
    s = synth_spec(str(CLUSTERS / spec))
    assert check_templates(s.templates, HOST_ACCESS_WORKLOADS) == []


@pytest.mark.integration
@pytest.mark.parametrize("spec", sorted(p.name for p in CLUSTERS.glob("*.yaml")))
def test_every_shipped_spec_passes_both_cdk_nag_packs(spec):
    # GIVEN the whole synth with the AwsSolutions and EfaStack packs (stacks.compose.build's nag; that a finding of
    # either fails the synth: test_build_checks_every_synth_with_both_packs) THEN it passes, and AwsSolutions' report
    # has no violation
    s = synth_spec(str(CLUSTERS / spec), nag=True)
    report = json.loads((s.outdir / "validation-report.json").read_text())
    assert [(p["conclusion"], p["violations"]) for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"] == [
        ("success", [])]


def test_project_rules_catch_a_missing_efa_group(default_synth):
    templates = copy.deepcopy(default_synth.templates)
    template = templates[f"{default_synth.plan.name}-cluster"]
    lt_id = next(k for k, v in template["Resources"].items()
                 if v["Type"] == "AWS::EC2::LaunchTemplate" and v["Properties"]["LaunchTemplateData"].get("NetworkInterfaces"))
    data = template["Resources"][lt_id]["Properties"]["LaunchTemplateData"]
    data["NetworkInterfaces"][3]["Groups"] = data["NetworkInterfaces"][3]["Groups"][:1]
    del data["Placement"]
    assert sorted(f.rule for f in check_templates(templates, HOST_ACCESS_WORKLOADS)) == ["EFA1", "EFA3"]


def test_project_rules_catch_an_open_efa_group(default_synth):
    templates = copy.deepcopy(default_synth.templates)
    resources = templates[f"{default_synth.plan.name}-cluster"]["Resources"]
    sg = next(k for k, v in resources.items() if v["Type"] == "AWS::EC2::SecurityGroup"
              and v["Properties"].get("GroupDescription", "").startswith("EFA"))
    resources[sg]["Properties"]["SecurityGroupIngress"] = [{"CidrIp": "0.0.0.0/0", "IpProtocol": "-1"}]
    assert [f.rule for f in check_templates(templates, HOST_ACCESS_WORKLOADS)] == ["EFA2"]


@pytest.mark.parametrize("spec", ["default.yaml", "trn2.yaml", "p4d.yaml"])
def test_shipped_manifests_pass_the_kubernetes_rules(spec):
    import yaml

    from efa_stack.checks.rules import check_manifests
    from efa_stack.planning.plan import plan_from_file
    from k8s.dist import render_dist

    plan = plan_from_file(CLUSTERS / spec)
    charts = {name: [o for o in yaml.load_all(text, Loader=LOADER) if o] for name, text in render_dist(plan).items()}
    assert check_manifests(charts, HOST_ACCESS_WORKLOADS) == []
    host = [o["metadata"]["name"] for objs in charts.values() for o in objs if host_access_is_justified(o, HOST_ACCESS_WORKLOADS) is C]
    assert host and set(host) <= set(HOST_ACCESS_WORKLOADS)


def test_an_efa_node_group_may_opt_out_of_its_placement_group(pack_findings):
    # GIVEN an on-demand EFA node group with placementGroup: false, built as the cluster stack builds it
    findings, built = pack_findings
    # WHEN EfaStackChecks runs THEN its launch template has no placement and the opt-out is acknowledged, not an error
    data = built["opt-out"]
    assert data["networkInterfaces"] and "placement" not in data
    assert not any("PlacementOptOut" in path for paths in findings.values() for path in paths)
