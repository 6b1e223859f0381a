"""EFA-enabled FSx for Lustre (``storage.efa``): the spec's refusals with their fixes, the plan (which nodes run
AWS's EFA client setup, how many LNet EFA interfaces they bind), the file system construct, the replacement check,
the example spec's synth, and ``verify --acceptance``'s proof that Lustre rides EFA (judged from the recorded
``lnetctl net show`` outputs of tests/fixtures/lnet/, see the README there).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from aws_constructs.fsx import FILE_SYSTEM_LOGICAL_ID, LustreFileSystem, LustreFileSystemProps
from aws_constructs.network import EfaSecurityGroup
from efa_stack.acceptance import checks
from efa_stack.acceptance.run import AcceptanceOptions, lustre_probe, run_acceptance
from efa_stack.checks.replacement import replaced_resources
from efa_stack.errors import UserError
from efa_stack.planning import lustre_efa
from efa_stack.planning.node_groups import LustreEfaClient
from efa_stack.planning.plan import plan_from_file
from efa_stack.planning.storage import MetadataPlan, capacity_allowed
from efa_stack.planning.user_data import node_user_data
from k8s import acceptance as manifests
from tests.support import BASE, CLUSTERS, Synthesized, normalise_assets, one_problem, plan_of, problems_of, synth_spec
from tests.test_acceptance import NODES, FakeCore, FakeCustom
from tests.test_acceptance import _text as acceptance_text
from tests.test_cfn_lint import lint

LNET = Path(__file__).resolve().parent / "fixtures" / "lnet"
SPEC = CLUSTERS / "fsx-efa.yaml"
UNIT = lustre_efa.CLIENT_UNIT

EFA = BASE + textwrap.dedent("""\
    storage:
      perUnitStorageThroughput: 1000
      storageCapacityGiB: 4800
      metadataConfiguration: {mode: AUTOMATIC}
      efa: true
    """)
"""A valid EFA-enabled file system for the test spec's p5.48xlarge group ``gpu`` (us-west-2a)."""

SECOND_GROUP = """\
  - name: gpu2
    instanceType: {type}
    minSize: 1
    availabilityZones: [{zone}]
    privateNetworking: true
    efaEnabled: true
"""

FIXTURE_SPECS = {"fsx_efa": "fsx-efa.yaml"}


def efa_spec(storage: str = "", *, groups: str = "") -> str:
    """:data:`EFA` with ``storage`` lines replacing or adding to its storage section, and ``groups`` appended to
    managedNodeGroups."""
    base = BASE + groups
    lines = dict(line.split(":", 1) for line in textwrap.dedent("""\
        perUnitStorageThroughput: 1000
        storageCapacityGiB: 4800
        metadataConfiguration: {mode: AUTOMATIC}
        efa: true
        """).splitlines())
    for line in textwrap.dedent(storage).splitlines():
        key, _, value = line.partition(":")
        if value.strip() == "DROP":
            lines.pop(key, None)
        else:
            lines[key] = value
    return base + "storage:\n" + "".join(f"  {k}:{v}\n" for k, v in lines.items())


@pytest.fixture(scope="module")
def fsx_efa() -> Synthesized:
    return synth_spec(str(SPEC))


# --- the spec: refusals, each with its fix ---------------------------------------------------------------


def test_a_valid_efa_file_system_is_accepted():
    assert plan_of(EFA).storage.efa


def test_fails_efa_on_a_deployment_type_other_than_persistent_2():
    # a PERSISTENT_1 file system cannot have the metadata configuration EFA needs either: both are said
    problems = problems_of(efa_spec("deploymentType: PERSISTENT_1\nperUnitStorageThroughput: 200\n"
                                    "metadataConfiguration: DROP"))
    assert [p.field for p in problems] == ["storage.deploymentType", "storage.metadataConfiguration"]
    p = problems[0]
    assert p.value == "PERSISTENT_1" and "PERSISTENT_2" in p.message
    assert p.fix == "use deploymentType: PERSISTENT_2, or set efa: false"


def test_fails_efa_without_a_metadata_configuration():
    p = one_problem(efa_spec("metadataConfiguration: DROP"))
    assert p.field == "storage.metadataConfiguration"
    assert p.fix.startswith("add metadataConfiguration: {mode: AUTOMATIC}")


@pytest.mark.parametrize(("tier", "gib", "step", "near"), [
    (1000, 2400, 4800, "4800"),
    (500, 4800, 9600, "9600"),
    (250, 9600, 19200, "19200"),
    (125, 19200, 38400, "38400"),
    (1000, 7200, 4800, "4800 or 9600"),
])
def test_fails_efa_capacity_below_or_between_the_tiers_steps(tier, gib, step, near):
    p = one_problem(efa_spec(f"perUnitStorageThroughput: {tier}\nstorageCapacityGiB: {gib}"))
    assert (p.field, p.value) == ("storage.storageCapacityGiB", gib)
    assert f"multiples of {step} GiB" in p.message
    assert p.fix.startswith(f"use storageCapacityGiB: {near};")


def test_the_capacity_floor_at_250_is_16_times_the_smallest_file_system():
    p = one_problem(efa_spec("perUnitStorageThroughput: 250\nstorageCapacityGiB: 1200"))
    assert "16 times the 1200 GiB" in p.message


def test_efa_capacity_advice_keeps_every_rule():
    # GIVEN the advice for an undersized EFA-enabled file system at the default tier (125 MB/s/TiB)
    p = one_problem(efa_spec("perUnitStorageThroughput: DROP\nstorageCapacityGiB: 3000"))
    advised = [int(v) for v in re.findall(r"\d+", p.fix.split(";")[0])]
    assert advised == [38400]
    # THEN the advised capacity is one FSx accepts with and without EFA, and the spec with it is accepted
    assert all(capacity_allowed("PERSISTENT_2", v) for v in advised)
    assert plan_of(efa_spec("perUnitStorageThroughput: DROP\nstorageCapacityGiB: 38400")).storage.capacity_gib == 38400


def test_fails_an_efa_node_group_in_another_zone_than_the_file_system():
    p = one_problem(efa_spec(groups=SECOND_GROUP.format(type="p5.48xlarge", zone="us-west-2b")))
    assert (p.field, p.value) == ("storage.efa", True)
    assert "gpu2 (us-west-2b)" in p.message and "would use TCP" in p.message
    assert p.fix == "put those node groups in us-west-2a (availabilityZones: [us-west-2a]), or set efa: false"
    # AND the advice is accepted
    assert plan_of(efa_spec(groups=SECOND_GROUP.format(type="p5.48xlarge", zone="us-west-2a"))).storage.efa


def test_fails_efa_without_an_efa_node_group():
    text = efa_spec().replace("    efaEnabled: true\n", "")
    p = next(p for p in problems_of(text) if p.field.startswith("storage"))
    assert (p.field, p.fix) == ("storage.efa", "set efaEnabled: true on a GPU node group, or set efa: false")


def test_fails_gds_on_an_instance_type_off_the_scripts_allowlist():
    p = one_problem(efa_spec("gpuDirectStorage: true", groups=SECOND_GROUP.format(type="p4d.24xlarge", zone="us-west-2a")))
    assert (p.field, p.value) == ("managedNodeGroups[1].instanceType", "p4d.24xlarge")
    assert "--optimized-for-gds" in p.message
    assert p.fix.startswith("use one of p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p6-b200.48xlarge for node group gpu2")


def test_fails_gds_without_efa():
    p = one_problem(BASE + "storage:\n  gpuDirectStorage: true\n")
    assert (p.field, p.value) == ("storage.gpuDirectStorage", True)
    assert p.fix.startswith("remove gpuDirectStorage")


@pytest.mark.parametrize(("storage", "field", "fix"), [
    ("metadataConfiguration: {mode: AUTOMATIC, iops: 3000}", "storage.metadataConfiguration.iops",
     "remove iops, or set mode: USER_PROVISIONED"),
    ("metadataConfiguration: {mode: USER_PROVISIONED}", "storage.metadataConfiguration.iops",
     "set iops: 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000, or use mode: AUTOMATIC"),
    ("metadataConfiguration: {mode: USER_PROVISIONED, iops: 9000}", "storage.metadataConfiguration.iops",
     "use 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000"),
])
def test_fails_metadata_configurations_fsx_refuses(storage, field, fix):
    p = one_problem(efa_spec(storage))
    assert (p.field, p.fix) == (field, fix)


def test_fails_metadata_configuration_on_a_scratch_file_system():
    p = one_problem(BASE + "storage:\n  deploymentType: SCRATCH_2\n  metadataConfiguration: {mode: AUTOMATIC}\n")
    assert p.field == "storage.metadataConfiguration"
    assert p.fix == "remove metadataConfiguration, or use deploymentType: PERSISTENT_2"


def test_user_provisioned_metadata_iops_are_planned():
    plan = plan_of(efa_spec("metadataConfiguration: {mode: USER_PROVISIONED, iops: 24000}"))
    assert plan.storage.metadata == MetadataPlan("USER_PROVISIONED", 24000)


# --- the plan: who runs the EFA client, with how many LNet interfaces -------------------------------------


def test_efa_groups_run_the_client_with_the_catalogs_interface_count_and_cpu_groups_do_not():
    text = efa_spec().replace("storage:", "  - {name: cpu, instanceType: m7i.xlarge, availabilityZones: [us-west-2a]}\nstorage:")
    groups = {g.name: g for g in plan_of(text).node_groups}
    assert groups["gpu"].lustre_efa == LustreEfaClient(gds=False, lnet_interfaces=8)
    assert groups["cpu"].lustre_efa is None and groups["cpu"].lustre_client


def test_an_instance_type_without_a_figure_expects_at_least_one_interface():
    plan = plan_of(efa_spec(groups=SECOND_GROUP.format(type="p4d.24xlarge", zone="us-west-2a")))
    assert plan.node_group("gpu2").lustre_efa == LustreEfaClient(gds=False, lnet_interfaces=None)


def test_without_efa_no_node_runs_the_client():
    assert not any(g.lustre_efa for g in plan_from_file(CLUSTERS / "fsx.yaml").all_node_groups)


def test_the_interface_counts_are_the_sources_agreement():
    # FSx guide's table and aws-parallelcluster-cookbook's EFA_EXPECTED_BOUND_DEVICES (data/fsx_lustre_efa.json)
    assert {t: lustre_efa.lnet_interfaces(t) for t in ("p5.48xlarge", "p5en.48xlarge", "p6-b300.48xlarge")} == {
        "p5.48xlarge": 8, "p5en.48xlarge": 8, "p6-b300.48xlarge": 16}
    assert lustre_efa.lnet_interfaces("p6e-gb200.36xlarge") is None


def test_user_data_runs_awss_setup_after_the_lustre_client():
    client = LustreEfaClient(gds=False, lnet_interfaces=8)
    text = node_user_data(0, True, lustre_efa=client)
    assert text is not None
    lines = text.splitlines()
    setup = lines.index('(cd "$efa_fsx/configure-efa-fsx-lustre-client" && ./setup.sh)')
    assert lines.index("dnf install -y lustre-client") < setup
    assert any(lustre_efa.CLIENT_PACKAGE_URL in ln and ln.startswith("curl -fsSL") for ln in lines[:setup])
    gds = node_user_data(0, True, lustre_efa=LustreEfaClient(gds=True))
    assert gds is not None and "./setup.sh --optimized-for-gds)" in gds


def test_fails_the_efa_client_without_the_lustre_client():
    with pytest.raises(ValueError, match="needs lustre_client"):
        node_user_data(0, False, lustre_efa=LustreEfaClient())


def test_karpenter_pools_in_the_zone_run_the_client_too():
    from k8s.karpenter import node_class_spec

    text = (CLUSTERS / "karpenter-p5.yaml").read_text() + textwrap.dedent("""\
        storage:
          perUnitStorageThroughput: 1000
          storageCapacityGiB: 4800
          metadataConfiguration: {mode: AUTOMATIC}
          efa: true
        """)
    plan = plan_of(text)
    (pool,) = plan.karpenter.pools
    assert pool.group.lustre_efa == LustreEfaClient(gds=False, lnet_interfaces=8)
    assert "./setup.sh)" in node_class_spec(pool, plan.karpenter, "node-role")["userData"]
    assert plan.storage.availability_zone == pool.group.availability_zone


# --- the file system construct ----------------------------------------------------------------------------


def _efa_stack(**props: Any) -> tuple[Stack, EfaSecurityGroup]:
    stack = Stack(App(builtin_cloud_formation_validation=False), "Bare", env=Environment(region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=0)
    efa = EfaSecurityGroup(stack, "Efa", vpc=vpc)
    args: dict[str, Any] = {"deployment_type": "PERSISTENT_2", "storage_capacity_gib": 4800,
                            "per_unit_storage_throughput": 1000, "metadata": MetadataPlan("AUTOMATIC"),
                            "efa_enabled": True}
    group = props.pop("efa_security_group", efa)
    args.update(props)
    LustreFileSystem(stack, "Lustre", LustreFileSystemProps(**args), vpc=vpc, subnet=vpc.public_subnets[0],
                     client_security_group_ids=["sg-0123456789abcdef0"], efa_security_group=group)
    return stack, efa


def test_efa_file_system_is_efa_enabled_in_the_efa_group_after_its_rules_and_keeps_the_group():
    stack, efa = _efa_stack()
    resources = Template.from_stack(stack).to_json()["Resources"]
    lustre = resources[FILE_SYSTEM_LOGICAL_ID]
    lc = lustre["Properties"]["LustreConfiguration"]
    assert (lc["EfaEnabled"], lc["MetadataConfiguration"], lc["DeploymentType"]) == (True, {"Mode": "AUTOMATIC"}, "PERSISTENT_2")
    efa_id = stack.resolve(efa.security_group_id)
    assert efa_id in lustre["Properties"]["SecurityGroupIds"]
    rules = {stack.resolve(r.logical_id) for r in efa.rules}
    assert len(rules) == 2 and rules <= set(lustre["DependsOn"])
    for lid in (efa_id["Fn::GetAtt"][0], *rules):
        assert (resources[lid]["DeletionPolicy"], resources[lid]["UpdateReplacePolicy"]) == ("Retain", "Retain")


def test_a_file_system_without_efa_leaves_the_efa_group_alone():
    stack, efa = _efa_stack(efa_enabled=False, storage_capacity_gib=2400)
    resources = Template.from_stack(stack).to_json()["Resources"]
    props = resources[FILE_SYSTEM_LOGICAL_ID]["Properties"]
    assert "EfaEnabled" not in props["LustreConfiguration"]
    assert stack.resolve(efa.security_group_id) not in props["SecurityGroupIds"]
    assert "DeletionPolicy" not in resources[stack.resolve(efa.security_group_id)["Fn::GetAtt"][0]]


@pytest.mark.parametrize(("props", "match"), [
    ({"metadata": None}, "PERSISTENT_2 with metadata"),
    ({"efa_security_group": None}, "needs efa_security_group"),
    ({"storage_capacity_gib": 2400}, "not allowed for an EFA-enabled file system at 1000 MB/s/TiB; use a multiple of 4800"),
    ({"metadata": MetadataPlan("USER_PROVISIONED")}, "iops are given with USER_PROVISIONED mode"),
    ({"metadata": MetadataPlan("USER_PROVISIONED", 1000)}, "metadata iops 1000"),
])
def test_fails_construct_props_an_efa_file_system_cannot_have(props, match):
    with pytest.raises(ValueError, match=match):
        _efa_stack(**props)


# --- the replacement check --------------------------------------------------------------------------------


def test_turning_efa_on_or_off_replaces_the_retained_file_system():
    # GIVEN one file system, its EFA setting the only difference
    lustre = {"Type": "AWS::FSx::FileSystem", "Properties": {
        "FileSystemType": "LUSTRE", "StorageCapacity": 4800,
        "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 1000,
                                "MetadataConfiguration": {"Mode": "AUTOMATIC"}},
    }}
    efa = json.loads(json.dumps(lustre))
    efa["Properties"]["LustreConfiguration"]["EfaEnabled"] = True
    # THEN either way is a replacement (the FSx guide: EFA cannot be enabled or disabled on an existing file system)
    for before, after in ((lustre, efa), (efa, lustre)):
        found = replaced_resources({"Resources": {"Fs": before}}, {"Resources": {"Fs": after}})
        assert [(r.logical_id, r.why) for r in found] == [("Fs", "LustreConfiguration.EfaEnabled changed")]


# --- the example spec ------------------------------------------------------------------------------------------


def test_example_spec_synthesizes_an_efa_file_system_with_clean_cfn_lint(fsx_efa):
    cluster = fsx_efa.template("cluster")
    (fs,) = [r for r in cluster["Resources"].values() if r["Type"] == "AWS::FSx::FileSystem"]
    assert fs["Properties"]["LustreConfiguration"]["EfaEnabled"] is True
    errors = [f"{m.rule.id} {m.message}" for m in lint(cluster, fsx_efa.plan.region) if m.rule.id.startswith("E")]
    assert not errors, "\n".join(errors)


def test_example_spec_runs_the_efa_client_setup_on_the_efa_nodes_only(fsx_efa):
    templates = [r for r in fsx_efa.template("cluster")["Resources"].values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    with_setup = [r for r in templates if "./setup.sh)" in json.dumps(r)]
    assert len(with_setup) == 1 and len(templates) > 1
    (efa_template,) = with_setup
    nics = efa_template["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]
    assert sum(n["InterfaceType"] == "efa-only" for n in nics) == 32


def test_example_spec_storage_snapshot(fsx_efa, snapshot):
    text = normalise_assets(json.dumps(fsx_efa.template("storage"), indent=1, sort_keys=True))
    assert json.loads(text) == snapshot


# --- verify --acceptance: does Lustre ride EFA? -----------------------------------------------------------------


def _lnet(name: str) -> str:
    return (LNET / name).read_text()


def _sections(before: str, after: str, *, unit: str = "active", write_rc: int = 0) -> dict[str, checks.Section]:
    return {
        "lnet-before": checks.Section("lnet-before", _lnet(before), 0),
        "lnet-unit": checks.Section("lnet-unit", unit, 0 if unit == "active" else 3),
        "lustre-write": checks.Section("lustre-write", "1024+0 records out" if write_rc == 0 else "dd: Input/output error",
                                       write_rc),
        "lnet-after": checks.Section("lnet-after", _lnet(after), 0),
    }


def _judge(sections: dict[str, checks.Section], expected: int | None = 8, mib: int = 1024) -> Any:
    return checks.judge_lustre_efa(sections, expected, mib, UNIT)


def test_every_lnet_fixture_is_in_the_readme_as_real_derived_or_constructed():
    readme = (LNET / "README.md").read_text()
    for path in LNET.glob("*.yaml"):
        row = next((ln for ln in readme.splitlines() if f"`{path.name}`" in ln), "")
        assert re.search(r"\*\*(real|derived|constructed)\*\*", row), path.name


def test_the_real_recording_reads_as_one_efa_interface_without_statistics():
    interfaces = checks.parse_lnet(_lnet("g6e.24xlarge-net-show.yaml"))
    assert interfaces is not None
    assert [(i.net, i.nid, i.status, i.send_count) for i in interfaces] == [
        ("lo", "0@lo", "up", None), ("tcp", "10.1.1.61@tcp", "up", None), ("efa", "1.61.92.0@efa", "up", None)]


def test_the_real_measurement_passes():
    # a 1000 MiB direct write on a g6e.24xlarge with one @efa interface: efa +1000 sends, tcp +10
    e = _judge(_sections("g6e.24xlarge-1000MiB-before.yaml", "g6e.24xlarge-1000MiB-after.yaml"), None, 1000)
    assert e.status == "pass", e.line()
    assert e.measured == ("1 @efa interfaces up, configure-efa-fsx-lustre-client active, efa send_count +1000, "
                          "tcp +10 after 1000 MiB")


def test_lustre_riding_all_eight_interfaces_passes_while_metadata_rides_tcp():
    e = _judge(_sections("p5.48xlarge-before.yaml", "p5.48xlarge-after-efa.yaml"))
    assert e.status == "pass", e.line()
    assert "efa send_count +1024, tcp +12" in e.measured


def test_fails_a_node_whose_data_rides_tcp():
    e = _judge(_sections("p5.48xlarge-before.yaml", "p5.48xlarge-after-tcp.yaml"))
    assert e.status == "failed"
    assert "efa send_count +0, tcp +2060 for 1024 bulk RPCs: Lustre's data is not riding EFA" in e.detail


def test_fails_efa_growth_below_half_the_bulk_rpcs():
    e = _judge(_sections("p5.48xlarge-before.yaml", "p5.48xlarge-after-mixed.yaml"))
    assert e.status == "failed" and "efa send_count +160, tcp +790" in e.detail


def test_fails_a_node_with_2_of_8_interfaces_even_when_traffic_rides_them():
    e = _judge(_sections("p5.48xlarge-2-of-8.yaml", "p5.48xlarge-2-of-8-after.yaml"))
    assert e.status == "failed"
    assert e.detail == (f"only 2 of the 8 @efa interfaces AWS's setup binds on this instance type: Lustre does not "
                        f"use every EFA device; on the node: journalctl -u {UNIT}")


def test_fails_lnet_without_an_efa_net_and_a_failed_unit():
    e = _judge(_sections("p5.48xlarge-tcp-only.yaml", "p5.48xlarge-tcp-only-after.yaml", unit="failed"))
    assert e.status == "failed"
    assert "no @efa interface is up (nets: lo, tcp)" in e.detail and f"{UNIT} is failed" in e.detail


def test_fails_a_failed_write():
    e = _judge(_sections("p5.48xlarge-before.yaml", "p5.48xlarge-before.yaml", write_rc=1))
    assert e.status == "failed" and e.detail.startswith("the direct write to the file system failed (exit 1)")


def test_fails_output_without_send_counts():
    e = _judge(_sections("g6e.24xlarge-net-show.yaml", "g6e.24xlarge-net-show.yaml"), None)
    assert e.status == "failed" and "printed no send_count" in e.detail


@pytest.mark.parametrize("missing", ["lnet-before", "lnet-after"])
def test_fails_when_the_lnet_check_did_not_run_or_was_skipped(missing):
    sections = _sections("p5.48xlarge-before.yaml", "p5.48xlarge-after-efa.yaml")
    del sections[missing]
    assert _judge(sections).status == "failed"
    sections[missing] = checks.Section(missing, "no LNet result", None, skipped=True)
    assert _judge(sections).status == "failed"


def _fake(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_the_check_script_writes_directly_between_two_readings_of_the_hosts_lnet(tmp_path):
    # GIVEN fakes: nsenter running its command, lnetctl answering before then after, the unit active, dd recording
    bin_dir, mount = tmp_path / "bin", tmp_path / "fsx"
    bin_dir.mkdir()
    mount.mkdir()
    calls = tmp_path / "calls"
    _fake(bin_dir, "nsenter", f'echo "nsenter $*" >> {calls}\nwhile [ "$1" != "--" ]; do shift; done; shift; exec "$@"\n')
    _fake(bin_dir, "lnetctl", f'if [ -e {tmp_path}/read ]; then cat {LNET}/p5.48xlarge-after-efa.yaml; '
                              f'else touch {tmp_path}/read; cat {LNET}/p5.48xlarge-before.yaml; fi\n')
    _fake(bin_dir, "systemctl", 'echo active\n')
    _fake(bin_dir, "dd", f'echo "dd $*" >> {calls}\n')
    out_file = tmp_path / "lustre.txt"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    # WHEN the lustre mode runs as the check pod's init container does
    out = subprocess.run(["bash", str(manifests.CHECK_SCRIPT), "lustre", str(mount), "1024", UNIT, "600", str(out_file)],
                         env=env, check=True, capture_output=True, text=True, timeout=60).stdout
    # THEN lnetctl and systemctl ran in the host's namespaces, the write was direct and bounded, and the sections pass
    lines = calls.read_text().splitlines()
    assert lines[0] == "nsenter -t 1 -m -n -- lnetctl net show -v"
    assert lines[1] == f"nsenter -t 1 -m -n -- systemctl is-active {UNIT}"
    assert re.fullmatch(rf"dd if=/dev/zero of={mount}/\.efa-stack-lnet-probe-\S+ bs=1M count=1024 oflag=direct conv=fsync",
                        lines[2])
    assert lines[3] == "nsenter -t 1 -m -n -- lnetctl net show -v"
    assert out_file.read_text() == out
    assert _judge(checks.parse_sections(out)).status == "pass"


# --- the check pod and the run --------------------------------------------------------------------------------


def _efa_plan():
    return plan_from_file(SPEC)


def test_check_pod_mounts_the_claim_in_a_privileged_lnet_container_in_the_hosts_pid_namespace():
    plan = _efa_plan()
    group = plan.node_group("p5")
    probe = lustre_probe(plan, group, "default", efa=True)
    assert probe == manifests.LustreProbe("fsx-claim", "/fsx")
    job = next(j for j in plan.nccl_jobs if j.node_group == "p5")
    pod = manifests.check_pod(group, NODES[0], namespace="default", image=job.image, job=job, dcgm_level=2, efa=True,
                              dcgm_image="dcgm:x", lustre=probe)
    spec = pod["spec"]
    dcgm, lnet = spec["initContainers"]
    (check,) = spec["containers"]
    assert spec["hostPID"] is True
    assert (dcgm["name"], lnet["name"]) == (manifests.DCGM_CONTAINER, manifests.LUSTRE_CONTAINER)
    assert lnet["securityContext"] == {"privileged": True, "runAsUser": 0} and "resources" not in lnet
    assert lnet["command"][4:] == ["lustre", "/fsx", "1024", UNIT, "600", manifests.LUSTRE_RESULT]
    assert {"name": "fsx", "mountPath": "/fsx"} in lnet["volumeMounts"]
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in spec["volumes"]
    assert check["command"][-1] == manifests.LUSTRE_RESULT


def test_check_pods_without_an_efa_file_system_stay_out_of_the_hosts_namespaces():
    plan = plan_from_file(CLUSTERS / "fsx.yaml")
    assert lustre_probe(plan, plan.node_group("p5"), "default", efa=True) is None
    efa_plan = _efa_plan()
    assert lustre_probe(efa_plan, efa_plan.node_group("p5"), "default", efa=False) is None


def test_fails_acceptance_in_a_namespace_without_the_claim():
    plan = _efa_plan()
    with pytest.raises(UserError) as info:
        lustre_probe(plan, plan.node_group("p5"), "training", efa=True)
    assert info.value.fix.startswith("run acceptance in default (drop --namespace)")


def _lustre_log(before: str, after: str) -> str:
    sections = [("lnet-before", _lnet(before), 0), ("lnet-unit", "active", 0),
                ("lustre-write", "1024+0 records out", 0), ("lnet-after", _lnet(after), 0)]
    return "".join(f"=== efa-stack-check BEGIN {n} ===\n{t.rstrip()}\n=== efa-stack-check END {n} rc={rc} ===\n"
                   for n, t, rc in sections)


def test_acceptance_names_the_node_whose_lustre_rides_tcp():
    # GIVEN four p5 nodes of the EFA-enabled file system's group, one of them moving its data over tcp
    logs = {n: acceptance_text("node_pass.log") + _lustre_log("p5.48xlarge-before.yaml", "p5.48xlarge-after-efa.yaml")
            for n in NODES}
    logs[NODES[2]] = acceptance_text("node_pass.log") + _lustre_log("p5.48xlarge-before.yaml", "p5.48xlarge-after-tcp.yaml")
    core = FakeCore(logs)
    report = run_acceptance(_efa_plan(), core, FakeCustom(core, set()),
                            AcceptanceOptions(node_group="p5", clock=lambda: 0.0, sleep=lambda s: None))
    # THEN the check pods carry the LNet check and only that node fails it
    assert all(pod["spec"]["initContainers"][1]["name"] == "lustre" for pod in core.created)
    verdicts = {v.node: v for v in report.nodes}
    lustre = {n: next(e for e in v.evidence if e.check == "lustre-efa").status for n, v in verdicts.items()}
    assert lustre == {NODES[0]: "pass", NODES[1]: "pass", NODES[2]: "failed", NODES[3]: "pass"}
    assert verdicts[NODES[2]].reason() == "lustre-efa-failed"
