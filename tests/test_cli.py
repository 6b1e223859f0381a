"""The efa-stack CLI: --help everywhere, exit codes, JSON output, SpecError rendering (no tracebacks).

AWS calls run under moto; Kubernetes APIs are fakes injected in place of ``tools.cli._kube_apis``
(no kubeconfig is loaded); nccl-report's command is replaced where the test is about the wiring.
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import moto as _moto
import pytest
from typer.testing import CliRunner

from efa_stack.planning import catalog
from efa_stack.tools import cli
from tests.conftest import fake_aws_credentials
from tests.specs import cluster_spec

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = str(ROOT / "clusters" / "default.yaml")
NCCL_LOG = str(Path(__file__).resolve().parent / "fixtures" / "k8s_api" / "launcher.log")

runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(cli.app, list(args))


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_aws_credentials(monkeypatch)


def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    (tmp_path / "credentials").write_text("")
    (tmp_path / "config").write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # never the internet


def bad_spec(tmp_path: Path) -> str:
    path = tmp_path / "bad.yaml"
    # a misspelt instance type, and desiredCapacity above maxSize
    path.write_text(cluster_spec("bad", instance_type="p5.48xlarg", min_size=2, desired=3, max_size=2).lstrip("\n"))
    return str(path)


# --- help ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [[], ["preflight"], ["catalog"], ["catalog", "refresh"], ["catalog", "list"], ["catalog", "show"],
     ["nccl-report"], ["verify"], ["verify", "nodes"], ["verify", "nccl"], ["verify", "accept"]],
    ids=lambda c: " ".join(c) or "efa-stack",
)
def test_every_command_has_help(command: list[str]) -> None:
    result = invoke(*command, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage" in result.stdout


def test_top_level_help_lists_the_commands() -> None:
    out = invoke("--help").stdout
    for name in ("preflight", "catalog", "nccl-report", "verify"):
        assert name in out


def test_main_runs_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["efa-stack", "--help"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 0


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["preflight", "verify"])
def test_bad_spec_prints_the_problems_and_exits_2(command: str, tmp_path: Path) -> None:
    result = invoke(command, "--spec", bad_spec(tmp_path))
    assert result.exit_code == 2
    assert "problems in the cluster spec" in result.stderr
    assert "managedNodeGroups[0].instanceType" in result.stderr and "did you mean p5.48xlarge" in result.stderr
    assert "Traceback" not in result.output


def test_missing_spec_file_exits_2(tmp_path: Path) -> None:
    result = invoke("preflight", "--spec", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2 and "the spec file does not exist" in result.stderr


def test_spec_option_is_required() -> None:
    result = invoke("preflight")
    assert result.exit_code == 2 and "--spec" in result.output


# --- preflight -----------------------------------------------------------------------------------


@pytest.fixture(scope="class")
def mocked_aws():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # not needed here, and slow to load
        with _moto.mock_aws():
            yield


@pytest.mark.usefixtures("mocked_aws")
@pytest.mark.xdist_group("moto")  # one worker imports moto's EC2 backend
class TestPreflightUnderMoto:
    def test_json_lists_findings_and_exits_0(self) -> None:
        result = invoke("preflight", "--spec", DEFAULT, "--json")
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["cluster"] == "efa-training" and doc["region"] == "us-west-2" and doc["ok"] is True
        checks = {(f["check"], f["subject"]): f["status"] for f in doc["findings"]}
        assert checks[("efa-support", "p5.48xlarge")] == "pass"
        assert checks[("az-offering", "p5")] == "pass"
        assert doc["summary"]["fail"] == 0

    def test_zone_without_the_instance_type_exits_1(self, tmp_path: Path) -> None:
        spec = Path(DEFAULT).read_text().replace('availabilityZones: ["us-west-2a"]', 'availabilityZones: ["us-west-2b"]')
        spec = spec.replace("p5.48xlarge", "p5en.48xlarge")
        path = tmp_path / "p5en.yaml"
        path.write_text(spec)
        result = invoke("preflight", "--spec", str(path))
        assert result.exit_code == 1, result.output
        assert "FAIL" in result.stdout and "not offered" in result.stdout


def test_preflight_without_credentials_exits_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    no_credentials(monkeypatch, tmp_path)
    result = invoke("preflight", "--spec", DEFAULT)
    assert result.exit_code == 2
    assert "no AWS credentials found" in result.stderr and "Fix:" in result.stderr
    assert "Traceback" not in result.output


def test_preflight_json_without_credentials_is_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    no_credentials(monkeypatch, tmp_path)
    result = invoke("preflight", "--spec", DEFAULT, "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and "no AWS credentials" in doc["error"]


def test_preflight_unknown_profile_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    no_credentials(monkeypatch, tmp_path)
    result = invoke("preflight", "--spec", DEFAULT, "--profile", "nope")
    assert result.exit_code == 2 and "nope" in result.stderr


# --- catalog -------------------------------------------------------------------------------------


def test_catalog_list_efa_json_has_only_efa_types() -> None:
    result = invoke("catalog", "list", "--efa", "--json")
    assert result.exit_code == 0
    items = json.loads(result.stdout)
    assert len(items) == len(catalog.efa_capable()) and all(i["efa_supported"] for i in items)
    p5 = next(i for i in items if i["name"] == "p5.48xlarge")
    assert (p5["max_efa_interfaces"], p5["gpus"], p5["efa_line_rate_gbps"]) == (32, 8, 3200.0)


def test_catalog_list_table_filters_by_family() -> None:
    result = invoke("catalog", "list", "--efa", "--family", "p5")
    assert result.exit_code == 0 and "p5.48xlarge" in result.stdout and "m7i" not in result.stdout


def test_catalog_show_gives_the_per_card_layout() -> None:
    result = invoke("catalog", "show", "p5.48xlarge", "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    interfaces = doc["interface_layout"]["interfaces"]
    assert interfaces[0] == {"network_card_index": 0, "device_index": 0, "interface_type": "interface"}
    assert sum(i["interface_type"] == "efa-only" for i in interfaces) == catalog.get("p5.48xlarge").max_efa_interfaces


def test_catalog_show_table_and_legacy_layout() -> None:
    result = invoke("catalog", "show", "p4d.24xlarge", "--layout", "legacy")
    assert result.exit_code == 0
    assert "network cards" in result.stdout and "legacy layout" in result.stdout and "efa" in result.stdout


def test_catalog_show_unknown_type_suggests_and_exits_2() -> None:
    result = invoke("catalog", "show", "p5.48xlarg")
    assert result.exit_code == 2 and "did you mean p5.48xlarge" in result.stderr


def test_catalog_show_without_efa_has_no_layout() -> None:
    result = invoke("catalog", "show", "m7i.xlarge", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["interface_layout"]["interfaces"] == []


def test_catalog_refresh_passes_the_options_and_prints_the_summary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import efa_stack.tools.catalog_refresh as refresh_module

    seen: dict[str, Any] = {}

    def fake_refresh(session, **kw):
        seen.update(kw, session=session)
        return refresh_module.RefreshSummary(instance_types=3, efa_capable=2, regions=1,
                                             catalog=str(kw["catalog_path"]), regions_file=str(kw["regions_path"]))

    monkeypatch.setattr(refresh_module, "refresh", fake_refresh)
    out = tmp_path / "c.json"
    result = invoke("catalog", "refresh", "--region", "us-west-2", "--output", str(out),
                    "--regions-output", str(tmp_path / "r.json"), "--this-region-only", "--json")
    assert result.exit_code == 0, result.output
    assert seen["region"] == "us-west-2" and seen["catalog_path"] == out and seen["all_regions"] is False
    assert seen["session"].region_name == "us-west-2"
    assert json.loads(result.stdout)["efa_capable"] == 2


def test_catalog_refresh_without_credentials_exits_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    no_credentials(monkeypatch, tmp_path)
    result = invoke("catalog", "refresh", "--output", str(tmp_path / "c.json"), "--regions-output", str(tmp_path / "r.json"))
    assert result.exit_code == 2 and "no AWS credentials" in result.stderr
    assert not (tmp_path / "c.json").exists()


# --- nccl-report ---------------------------------------------------------------------------------


@pytest.fixture
def fake_report(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    calls: list[tuple] = []

    def report_command(logs, instance_type, nodes, json_out, plot, threshold):
        calls.append((logs, instance_type, nodes, json_out, plot, threshold))
        return 1

    from efa_stack.nccl_report import command

    monkeypatch.setattr(command, "report_command", report_command)
    return calls


def test_nccl_report_passes_every_option_and_its_exit_code(fake_report: list, tmp_path: Path) -> None:
    result = invoke("nccl-report", "a.log", "b.log", "--instance-type", "p5.48xlarge", "--nodes", "2",
                    "--plot", str(tmp_path / "p.png"), "--json", "--threshold", "0.5")
    assert result.exit_code == 1
    assert fake_report == [([Path("a.log"), Path("b.log")], "p5.48xlarge", 2, True, tmp_path / "p.png", 0.5)]


def test_nccl_report_threshold_defaults_to_the_reports_own(fake_report: list) -> None:
    invoke("nccl-report", "a.log")
    assert fake_report[0][1:] == (None, None, False, None, 0.7)


def test_nccl_report_on_a_real_log() -> None:
    result = invoke("nccl-report", NCCL_LOG, "--instance-type", "p5.48xlarge", "--nodes", "2", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["exit_code"] == 0


# --- verify --------------------------------------------------------------------------------------


@pytest.fixture
def kube(monkeypatch: pytest.MonkeyPatch):
    """Replace the kubeconfig loading with fake APIs built from the recorded responses."""
    from efa_stack import cluster
    from tests.test_verify import Clock, FakeCore, FakeCustom, nodes

    clock = Clock()  # the command's waits advance this clock; nothing sleeps for real
    monkeypatch.setattr(cluster, "time", types.SimpleNamespace(monotonic=clock, sleep=clock.sleep))
    made: dict[str, Any] = {"clock": clock}

    def install(node_file: str, jobs: list | None = None) -> dict[str, Any]:
        made["core"] = FakeCore([nodes(node_file)])
        made["custom"] = FakeCustom(jobs or [])

        def fake_apis(kubeconfig, context, plan, **_: Any):
            made["args"] = (kubeconfig, context, plan.name)
            return made["core"], made["custom"]

        monkeypatch.setattr(cli, "_kube_apis", fake_apis)
        return made

    return install


def test_verify_ready_cluster_exits_0(kube) -> None:
    made = kube("nodes_ready.json")
    result = invoke("verify", "--spec", DEFAULT, "--timeout", "0", "--context", "ctx")
    assert result.exit_code == 0, result.output
    assert made["args"] == (None, "ctx", "efa-training")
    assert "4/4 nodes match" in result.stdout


def test_verify_json_missing_efa_exits_1(kube) -> None:
    kube("nodes_missing_efa.json")
    result = invoke("verify", "--spec", DEFAULT, "--timeout", "0", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    bad = [n for n in doc["nodes"] if n["status"] == "fail"]
    assert len(bad) == 1 and bad[0]["efa"] is None and bad[0]["expected_efa"] == 32


def test_verify_failed_job_exits_1(kube) -> None:
    from tests.test_verify import job

    made = kube("nodes_ready.json", [job("mpijob_suspended.json"), job("mpijob_running.json"), job("mpijob_failed.json")])
    made["core"].pods = types.SimpleNamespace(items=[])  # the launcher pod is gone: the failure is still reported
    result = invoke("verify", "--spec", DEFAULT, "--run-nccl", "--interval", "5")
    assert result.exit_code == 1, result.output
    assert "MPIJob nccl-tests-p5 failed" in result.stdout and "launcher log unavailable" in result.stdout
    assert made["custom"].patches and made["clock"].slept == [5]


def test_verify_waits_for_joining_nodes(kube) -> None:
    from tests.test_verify import nodes

    made = kube("nodes_joining.json")
    made["core"].node_lists.append(nodes("nodes_ready.json"))
    result = invoke("verify", "--spec", DEFAULT, "--interval", "20")
    assert result.exit_code == 0, result.output
    assert made["clock"].slept == [20]


def test_verify_kubeconfig_problem_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    import kubernetes.config

    def refuse(**_: Any) -> None:
        raise kubernetes.config.ConfigException("Invalid kube-config file. No configuration found.")

    monkeypatch.setattr(kubernetes.config, "load_kube_config", refuse)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = invoke("verify", "--spec", DEFAULT)
    assert result.exit_code == 2
    assert "cannot load the kubeconfig" in result.stderr
    assert "aws eks update-kubeconfig --name efa-training --region us-west-2" in result.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--dcgm-level", "7"), "--dcgm-level 7 is out of range"),
        (("--node-group", "nope"), "node group 'nope' is not in the spec"),
        (("--node-group", "system"), "has no NVIDIA GPUs"),
    ],
)
def test_fails_acceptance_bad_input_before_any_cluster_access(
    monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], said: str
) -> None:
    # GIVEN a kubeconfig that would fail if it were read
    import kubernetes.config

    def never(**_: Any) -> None:
        raise AssertionError("the kubeconfig was loaded for bad input")

    monkeypatch.setattr(kubernetes.config, "load_kube_config", never)
    # WHEN acceptance is asked with a bad option THEN it exits 2 naming the value and the fix
    result = invoke("verify", "--spec", DEFAULT, "--acceptance", *args)
    assert result.exit_code == 2, result.output
    assert said in result.stderr and "Fix: " in result.stderr
    # AND with --json the same error is one JSON document on stdout
    result = invoke("verify", "--spec", DEFAULT, "--acceptance", "--json", *args)
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["ok"] is False and said in data["error"] and data["fix"]


# --- errors: one document with --json, bad input before any cluster access -----------------------


def _never_load_kubeconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    import kubernetes.config

    def never(**_: Any) -> None:
        raise AssertionError("the kubeconfig was loaded for bad input")

    monkeypatch.setattr(kubernetes.config, "load_kube_config", never)


def test_verify_json_kubeconfig_problem_is_a_json_error_document(monkeypatch: pytest.MonkeyPatch) -> None:
    import kubernetes.config

    def refuse(**_: Any) -> None:
        raise kubernetes.config.ConfigException("Invalid kube-config file. No configuration found.")

    monkeypatch.setattr(kubernetes.config, "load_kube_config", refuse)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = invoke("verify", "--spec", DEFAULT, "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["cluster"] == "efa-training" and doc["ok"] is False
    assert "cannot load the kubeconfig" in doc["error"]
    assert "aws eks update-kubeconfig --name efa-training --region us-west-2" in doc["fix"]


def test_catalog_refresh_json_without_credentials_is_a_json_error_document(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    no_credentials(monkeypatch, tmp_path)
    result = invoke("catalog", "refresh", "--output", str(tmp_path / "c.json"),
                    "--regions-output", str(tmp_path / "r.json"), "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and "no AWS credentials" in doc["error"]
    assert "catalog refresh" in doc["fix"] and doc["region"] == "us-east-1"


def test_verify_json_bad_spec_is_a_json_error_document(tmp_path: Path) -> None:
    result = invoke("verify", "--spec", bad_spec(tmp_path), "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and "problems in the cluster spec" in doc["error"]
    assert any(p["field"] == "managedNodeGroups[0].instanceType" for p in doc["problems"])


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--node-group", "nope"), "node group 'nope' is not in the spec"),
        (("--node-group", "system"), "node group 'system' has no NCCL-tests MPIJob"),
        (("--namespace", "Not_A_Namespace"), "--namespace 'Not_A_Namespace' is not a namespace"),
    ],
)
def test_fails_run_nccl_bad_input_before_the_kubeconfig_is_read(
    monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], said: str
) -> None:
    _never_load_kubeconfig(monkeypatch)
    result = invoke("verify", "--spec", DEFAULT, "--run-nccl", *args)
    assert result.exit_code == 2, result.output
    assert said in result.stderr and "Fix: " in result.stderr
    result = invoke("verify", "--spec", DEFAULT, "--run-nccl", "--json", *args)
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and said in doc["error"] and doc["fix"]


def test_fails_quarantine_without_acceptance(monkeypatch: pytest.MonkeyPatch) -> None:
    _never_load_kubeconfig(monkeypatch)
    result = invoke("verify", "--spec", DEFAULT, "--quarantine")
    assert result.exit_code == 2, result.output
    assert "--quarantine only acts on the verdicts of --acceptance" in result.stderr
    assert "Fix: add --acceptance" in result.stderr


# --- verify nodes | nccl | accept ----------------------------------------------------------------


def test_verify_nodes_subcommand_is_plain_verify(kube) -> None:
    made = kube("nodes_ready.json")
    result = invoke("verify", "nodes", "--spec", DEFAULT, "--timeout", "0", "--context", "ctx")
    assert result.exit_code == 0, result.output
    assert made["args"] == (None, "ctx", "efa-training") and "4/4 nodes match" in result.stdout


def test_verify_nccl_subcommand_runs_the_job(kube) -> None:
    from tests.test_verify import job

    made = kube("nodes_ready.json", [job("mpijob_suspended.json"), job("mpijob_failed.json")])
    made["core"].pods = types.SimpleNamespace(items=[])
    result = invoke("verify", "nccl", "--spec", DEFAULT, "--interval", "5", "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["nccl"]["state"] == "Failed" and made["custom"].patches


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("nccl", "--node-group", "nope"), "node group 'nope' is not in the spec"),
        (("accept", "--dcgm-level", "7"), "--dcgm-level 7 is out of range"),
    ],
)
def test_fails_subcommand_bad_input_before_the_kubeconfig_is_read(
    monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], said: str
) -> None:
    _never_load_kubeconfig(monkeypatch)
    result = invoke("verify", *args, "--spec", DEFAULT)
    assert result.exit_code == 2, result.output
    assert said in result.stderr


def test_fails_options_before_the_subcommand() -> None:
    result = invoke("verify", "--json", "nodes", "--spec", DEFAULT)
    assert result.exit_code == 2
    assert "--json before `nodes` would be ignored" in result.stderr


def test_verify_without_spec_exits_2() -> None:
    result = invoke("verify", "--timeout", "0")
    assert result.exit_code == 2 and "missing option --spec" in result.stderr


def test_catalog_refresh_prints_the_summary_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import efa_stack.tools.catalog_refresh as refresh_module

    def fake_refresh(session, **kw):
        return refresh_module.RefreshSummary(instance_types=3, efa_capable=2, regions=1,
                                             catalog=str(kw["catalog_path"]), regions_file=str(kw["regions_path"]))

    monkeypatch.setattr(refresh_module, "refresh", fake_refresh)
    result = invoke("catalog", "refresh", "--output", str(tmp_path / "c.json"),
                    "--regions-output", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    assert "catalog: 3 instance types (2 EFA-capable)" in result.stdout and "regions: 1 -> " in result.stdout


def test_a_bad_efa_stack_today_is_a_user_error(monkeypatch):
    from typer.testing import CliRunner

    from efa_stack.tools.cli import app

    monkeypatch.setenv("EFA_STACK_TODAY", "nonsense")
    result = CliRunner().invoke(app, ["preflight", "--spec", "clusters/default.yaml"])
    assert result.exit_code == 2 and "EFA_STACK_TODAY='nonsense' is not a date" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
