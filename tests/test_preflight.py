"""Preflight checks against moto's recorded EC2 data, botocore Stubbers and injected HTTP responses.

moto 5.2.5 knows the real instance types and offerings (moto/ec2/resources/instance_type_offerings)
but implements neither Service Quotas' EC2 codes nor capacity reservations, so those responses come
from botocore Stubbers, which validate every request and response against the service model.
Throttling is injected at the HTTP layer (``before-send``), below botocore's retry loop, because a
Stubber answers before the retry handler runs.
"""

from __future__ import annotations

import io
import os
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import boto3
import botocore.endpoint
import moto as _moto
import pytest
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber
from rich.console import Console

from efa_stack.errors import UserError
from efa_stack.planning.plan import ClusterPlan, build_plan
from efa_stack.spec.loader import parse_spec
from efa_stack.tools import preflight
from efa_stack.tools.preflight import FAIL, PASS, WARN, Clients, Finding
from tests.conftest import fake_aws_credentials

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def _spec(groups: str, *, azs: str = "[us-west-2a, us-west-2b]", system: str = "") -> ClusterPlan:
    text = textwrap.dedent(
        """\
        apiVersion: eksctl.io/v1alpha5
        kind: ClusterConfig
        metadata: {{name: pf, region: us-west-2, version: "1.34"}}
        availabilityZones: {azs}
        managedNodeGroups:
        {groups}
        {system}
        """
    ).format(azs=azs, groups=textwrap.indent(textwrap.dedent(groups), "  "), system=system)
    return build_plan(parse_spec(text))


P5 = """\
- name: gpu
  instanceType: p5.48xlarge
  minSize: 2
  desiredCapacity: 2
  maxSize: 2
  availabilityZones: [us-west-2a]
  efaEnabled: true
"""


def _group(name: str = "gpu", itype: str = "p5.48xlarge", az: str = "us-west-2a", size: int = 2,
           max_size: int | None = None, capacity: str = "", efa: bool = True) -> str:
    cap = f"\n  capacity: {capacity}" if capacity else ""
    return (
        f"- name: {name}\n  instanceType: {itype}\n  minSize: {size}\n  desiredCapacity: {size}\n"
        f"  maxSize: {max_size or size}\n  availabilityZones: [{az}]\n  efaEnabled: {str(efa).lower()}{cap}\n"
    )


def _by(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def _statuses(findings: list[Finding]) -> set[str]:
    return {f.status for f in findings}


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_aws_credentials(monkeypatch, region="us-west-2")


@pytest.fixture(scope="class")
def moto():
    """One moto account per test class: loading the recorded offerings is the slow part. Class scope
    (not module) so that the mock is off again for the HTTP-level throttling tests below."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # not needed here, and slow to load
        with _moto.mock_aws():
            yield


_SESSION: list[boto3.Session] = []


def _session() -> boto3.Session:
    """One shared session: a new one reloads the EC2 service model (~0.3 s)."""
    if not _SESSION:
        _SESSION.append(boto3.Session(region_name="us-west-2"))
    return _SESSION[0]


def _client(service: str, **kw):
    return _session().client(service, region_name="us-west-2", config=preflight.client_config(2), **kw)


def _quota(code: str, value: float, name: str = "") -> dict:
    return {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "QuotaName": name or code, "Value": value}}


# --- quota codes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("itype", "code"),
    [
        ("p5.48xlarge", "L-417A185B"), ("p4d.24xlarge", "L-417A185B"), ("p5en.48xlarge", "L-417A185B"),
        ("g5.48xlarge", "L-DB2E81BA"), ("g6e.xlarge", "L-DB2E81BA"), ("vt1.24xlarge", "L-DB2E81BA"),
        ("trn1.32xlarge", "L-2C3B7624"), ("trn2.48xlarge", "L-2C3B7624"), ("inf2.48xlarge", "L-1945791B"),
        ("dl1.24xlarge", "L-6E869C2A"), ("hpc7g.16xlarge", "L-F7808C92"), ("m7i.xlarge", "L-1216C47A"),
        ("c5n.18xlarge", "L-1216C47A"), ("r7i.large", "L-1216C47A"), ("i4i.32xlarge", "L-1216C47A"),
        ("x2idn.32xlarge", "L-7295265B"), ("f1.16xlarge", "L-74FC7D96"), ("u-6tb1.112xlarge", "L-43DA4232"),
    ],
)
def test_quota_for_maps_instance_families_to_quota_codes(itype: str, code: str) -> None:
    assert preflight.quota_for(itype).code == code


# --- clients -------------------------------------------------------------------------------------


def test_clients_use_the_sdk_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
    clients = Clients.from_session(_session(), "us-west-2")
    assert clients.ec2.meta.endpoint_url == "http://127.0.0.1:4566"
    assert clients.quotas.meta.endpoint_url == "http://127.0.0.1:4566"


def test_clients_retry_with_standard_mode_and_the_given_attempts() -> None:
    clients = Clients.from_session(_session(), "us-west-2", max_attempts=7)
    retries = clients.ec2.meta.config.retries
    assert retries["mode"] == "standard"
    assert retries["total_max_attempts"] == 7


# --- moto: EFA support and zone offerings (real recorded data) -----------------------------------


@pytest.mark.usefixtures("moto")
@pytest.mark.xdist_group("moto")  # one worker imports moto's EC2 backend
class TestOfferingsUnderMoto:
    """moto's recorded offerings are real data: p5en.48xlarge is not in us-west-2b, trn1 not in us-west-2a."""

    def test_default_spec_passes_efa_and_zone_checks_under_moto(self) -> None:
        from efa_stack.planning.plan import plan_from_file

        plan = plan_from_file(ROOT / "clusters" / "default.yaml")
        findings = preflight.run_preflight(plan, _session(), now=NOW)
        efa = _by(findings, "efa-support")
        assert [(f.status, f.subject) for f in efa] == [(PASS, "p5.48xlarge")]
        assert "32 EFA interfaces" in efa[0].message
        zones = _by(findings, "az-offering")
        assert {f.subject for f in zones} == {"p5", "system"}
        assert _statuses(zones) == {PASS}
        assert "us-west-2a (usw2-az2)" in next(f for f in zones if f.subject == "p5").message
        # moto 5.2.5 answers DescribeAddonVersions with 404 "Not yet implemented": a warning per add-on, no failure
        addons = _by(findings, "addon-version")
        assert addons and _statuses(addons) == {WARN} and "Not yet implemented" in addons[0].message
        # ... and DescribeClusterVersions the same way: a warning that names the command to ask by hand
        (version,) = _by(findings, "cluster-version")
        assert version.status == WARN and "aws eks describe-cluster-versions" in version.fix
        # moto holds no EKS AMI parameters: the AMI release (and so the NVIDIA driver) is unread, a warning
        (driver,) = _by(findings, "nvidia-driver")
        assert driver.status == WARN and "aws ssm get-parameter" in driver.fix
        assert preflight.exit_code(findings) == 0

    def test_fails_when_instance_type_is_not_offered_in_the_zone(self) -> None:
        # moto's recorded offerings: p5en.48xlarge in us-west-2a/c/d, not us-west-2b
        plan = _spec(_group(itype="p5en.48xlarge", az="us-west-2b"))
        findings = preflight.check_zone_offerings(_client("ec2"), plan)
        bad = [f for f in findings if f.subject == "gpu"]
        assert len(bad) == 1 and bad[0].status == FAIL
        assert "not offered in us-west-2b (usw2-az1)" in bad[0].message
        assert "us-west-2a (usw2-az2)" in bad[0].message
        assert "us-west-2a" in bad[0].fix and "availabilityZones" in bad[0].fix

    def test_fails_trainium_group_in_a_zone_without_trn1(self) -> None:
        # trn1.32xlarge is offered in us-west-2b and us-west-2d only
        plan = _spec(_group(name="trn", itype="trn1.32xlarge", az="us-west-2a"))
        findings = preflight.check_zone_offerings(_client("ec2"), plan)
        trn = next(f for f in findings if f.subject == "trn")
        assert trn.status == FAIL
        assert "us-west-2b" in trn.fix and "us-west-2d" in trn.fix


def test_efa_support_is_asked_with_the_efa_filter() -> None:
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_instance_types",
            {"InstanceTypes": [{"InstanceType": "p5.48xlarge", "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 32}}}]},
            {"InstanceTypes": ["p5.48xlarge"], "Filters": [{"Name": "network-info.efa-supported", "Values": ["true"]}]},
        )
        findings = preflight.check_efa_support(ec2, _spec(P5))
        stub.assert_no_pending_responses()
    assert [f.status for f in findings] == [PASS]


def test_fails_when_the_region_does_not_report_efa_for_the_type() -> None:
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_response("describe_instance_types", {"InstanceTypes": []})
        findings = preflight.check_efa_support(ec2, _spec(P5))
    assert findings[0].status == FAIL
    assert "does not support EFA in us-west-2" in findings[0].message
    assert "efaEnabled: false" in findings[0].fix


def test_warns_when_ec2_and_catalog_disagree_on_efa_interfaces() -> None:
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_instance_types",
            {"InstanceTypes": [{"InstanceType": "p5.48xlarge", "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 16}}}]},
        )
        findings = preflight.check_efa_support(ec2, _spec(P5))
    assert findings[0].status == WARN
    assert "catalog refresh" in findings[0].fix


def test_unknown_instance_type_in_region_is_found_per_type() -> None:
    plan = _spec(P5 + _group(name="p4", itype="p4d.24xlarge", az="us-west-2a"))
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_instance_types", "InvalidInstanceType", "The following supplied instance types do not exist: [p5.48xlarge]")
        stub.add_response("describe_instance_types", {"InstanceTypes": [{"InstanceType": "p4d.24xlarge", "NetworkInfo": {"EfaSupported": True, "EfaInfo": {"MaximumEfaInterfaces": 4}}}]})
        stub.add_client_error("describe_instance_types", "InvalidInstanceType", "The following supplied instance types do not exist: [p5.48xlarge]")
        findings = preflight.check_efa_support(ec2, plan)
    assert {(f.subject, f.status) for f in findings} == {("p4d.24xlarge", PASS), ("p5.48xlarge", FAIL)}
    assert "does not exist in us-west-2" in next(f for f in findings if f.status == FAIL).message


def test_fails_when_a_spec_zone_is_not_available_to_the_account() -> None:
    plan = _spec(P5)
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_response("describe_availability_zones", {"AvailabilityZones": [
            {"ZoneName": "us-west-2a", "ZoneId": "usw2-az2"}, {"ZoneName": "us-west-2c", "ZoneId": "usw2-az3"},
        ]})
        for loc in ("us-west-2a", "usw2-az2"):
            stub.add_response("describe_instance_type_offerings", {"InstanceTypeOfferings": [
                {"InstanceType": t, "Location": loc} for t in ("m7i.xlarge", "p5.48xlarge")
            ]})
        findings = preflight.check_zone_offerings(ec2, plan)
    zone = _by(findings, "availability-zone")
    assert [(f.subject, f.status) for f in zone] == [("us-west-2b", FAIL)]
    assert "not an available zone" in zone[0].message


def test_offerings_are_matched_by_zone_id_as_well_as_name() -> None:
    # The account maps us-west-2a to usw2-az4; offerings by id say az4 has the type, by name say nothing.
    plan = _spec(P5)
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_response("describe_availability_zones", {"AvailabilityZones": [
            {"ZoneName": "us-west-2a", "ZoneId": "usw2-az4"}, {"ZoneName": "us-west-2b", "ZoneId": "usw2-az1"},
        ]})
        stub.add_response("describe_instance_type_offerings", {"InstanceTypeOfferings": [
            {"InstanceType": "m7i.xlarge", "Location": "us-west-2a"}, {"InstanceType": "m7i.xlarge", "Location": "us-west-2b"},
        ]})
        stub.add_response("describe_instance_type_offerings", {"InstanceTypeOfferings": [
            {"InstanceType": "m7i.xlarge", "Location": "usw2-az4"}, {"InstanceType": "m7i.xlarge", "Location": "usw2-az1"},
            {"InstanceType": "p5.48xlarge", "Location": "usw2-az4"},
        ]})
        findings = preflight.check_zone_offerings(ec2, plan)
    gpu = next(f for f in findings if f.subject == "gpu")
    assert gpu.status == WARN and "disagree" in gpu.message


# --- quotas --------------------------------------------------------------------------------------


def _quota_clients(values: dict[str, float | Exception]) -> tuple[object, Stubber]:
    sq = _client("service-quotas")
    stub = Stubber(sq)
    for code, value in sorted(values.items()):
        if isinstance(value, Exception):
            stub.add_client_error("get_service_quota", str(value), "denied", 400)
        else:
            stub.add_response("get_service_quota", _quota(code, value), {"ServiceCode": "ec2", "QuotaCode": code})
    stub.activate()
    return sq, stub


@pytest.mark.usefixtures("moto")
@pytest.mark.xdist_group("moto")
class TestQuotasUnderMoto:
    """Quota values from Stubbers; running instances (ec2:DescribeInstances) from moto."""

    def test_quota_passes_when_it_covers_max_size(self) -> None:
        plan = _spec(P5)  # gpu: 2 x 192 = 384 (P), system: 3 x 4 = 12 (Standard)
        sq, stub = _quota_clients({"L-1216C47A": 64, "L-417A185B": 384})
        findings = preflight.check_quotas(sq, _client("ec2"), plan)
        stub.assert_no_pending_responses()
        assert [(f.subject, f.status) for f in findings] == [("L-1216C47A", PASS), ("L-417A185B", PASS)]
        assert "needs 384" in findings[1].message

    def test_fails_when_quota_is_below_what_the_spec_needs(self) -> None:
        plan = _spec(_group(size=2, max_size=4))  # 4 x 192 = 768
        sq, _ = _quota_clients({"L-1216C47A": 64, "L-417A185B": 192})
        findings = preflight.check_quotas(sq, _client("ec2"), plan)
        p = next(f for f in findings if f.subject == "L-417A185B")
        assert p.status == FAIL
        assert "Running On-Demand P instances" in p.message and "needs 768" in p.message
        assert "--quota-code L-417A185B --desired-value 768" in p.fix

    def test_warns_when_running_instances_use_part_of_the_quota(self) -> None:
        ec2 = _client("ec2")
        run = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType="p5.48xlarge")
        try:
            sq, _ = _quota_clients({"L-1216C47A": 64, "L-417A185B": 400})
            findings = preflight.check_quotas(sq, ec2, _spec(P5))
        finally:
            ec2.terminate_instances(InstanceIds=[run["Instances"][0]["InstanceId"]])
        p = next(f for f in findings if f.subject == "L-417A185B")
        assert p.status == WARN
        assert "192 vCPUs of it are already in use" in p.message

    def test_quota_falls_back_to_the_aws_default_value(self) -> None:
        sq = _client("service-quotas")
        with Stubber(sq) as stub:
            for code, value in (("L-1216C47A", 32), ("L-417A185B", 384)):
                stub.add_client_error("get_service_quota", "NoSuchResourceException", "no applied value")
                stub.add_response("get_aws_default_service_quota", _quota(code, value), {"ServiceCode": "ec2", "QuotaCode": code})
            findings = preflight.check_quotas(sq, _client("ec2"), _spec(P5))
        assert {f.status for f in findings} == {PASS}
        assert all("AWS default" in f.message for f in findings)

    def test_quota_unknown_to_the_endpoint_is_a_warning(self) -> None:
        # moto's Service Quotas backend only knows VPC codes: the EC2 quota is unknown there.
        findings = preflight.check_quotas(_client("service-quotas"), _client("ec2"), _spec(P5))
        assert {f.status for f in findings} == {WARN}
        assert "could not read 'Running On-Demand P instances' (L-417A185B)" in findings[-1].message

    def test_quota_access_denied_fails_with_the_iam_action(self) -> None:
        sq, _ = _quota_clients({"L-1216C47A": Exception("AccessDeniedException")})
        findings = preflight.check_quotas(sq, _client("ec2"), _spec(P5))
        assert len(findings) == 1 and findings[0].status == FAIL
        assert "servicequotas:GetServiceQuota" in findings[0].message
        assert "servicequotas:GetServiceQuota" in findings[0].fix

    def test_reserved_node_groups_are_not_counted_against_on_demand_quota(self) -> None:
        plan = _spec(_group(capacity="{type: capacity-block, reservationId: cr-0123456789abcdef0}"))
        sq, stub = _quota_clients({"L-1216C47A": 64})
        findings = preflight.check_quotas(sq, _client("ec2"), plan)
        stub.assert_no_pending_responses()  # no P quota asked
        gpu = next(f for f in findings if f.subject == "gpu")
        assert gpu.status == PASS and "not counted" in gpu.message


# --- reservations ------------------------------------------------------------------------------


def _reservation(**kw) -> dict:
    item = {
        "CapacityReservationId": "cr-0123456789abcdef0", "InstanceType": "p5.48xlarge",
        "InstancePlatform": "Linux/UNIX", "AvailabilityZone": "us-west-2a", "AvailabilityZoneId": "usw2-az2",
        "TotalInstanceCount": 2, "AvailableInstanceCount": 2, "State": "active", "ReservationType": "default",
        "StartDate": NOW - timedelta(days=1), "EndDate": NOW + timedelta(days=6),
    }
    item.update(kw)
    return item


def _res_plan(kind: str = "reservation", size: int = 2, max_size: int | None = None) -> ClusterPlan:
    return _spec(_group(size=size, max_size=max_size, capacity=f"{{type: {kind}, reservationId: cr-0123456789abcdef0}}"))


def _res_findings(plan: ClusterPlan, item: dict) -> list[Finding]:
    return preflight.reservation_findings(plan.node_group("gpu"), item, NOW)


def test_active_matching_reservation_passes() -> None:
    findings = _res_findings(_res_plan(), _reservation())
    assert _statuses(findings) == {PASS}
    assert any("is active" in f.message for f in findings)


def test_scheduled_capacity_block_warns_with_its_start_date() -> None:
    start = datetime(2026, 12, 1, 11, 30, tzinfo=UTC)
    item = _reservation(ReservationType="capacity-block", State="scheduled", StartDate=start, AvailableInstanceCount=0)
    findings = _res_findings(_res_plan("capacity-block"), item)
    warn = [f for f in findings if f.status == WARN]
    assert len(warn) == 1 and "scheduled" in warn[0].message
    assert "2026-12-01 11:30 UTC" in warn[0].message and "in 9.0 days" in warn[0].message
    assert FAIL not in _statuses(findings)


@pytest.mark.parametrize("state", ["expired", "cancelled", "failed", "payment-failed"])
def test_fails_when_reservation_is_not_usable(state: str) -> None:
    findings = _res_findings(_res_plan(), _reservation(State=state))
    assert any(f.status == FAIL and state in f.message for f in findings)


def test_fails_when_reservation_is_for_another_type_and_zone() -> None:
    findings = _res_findings(_res_plan(), _reservation(InstanceType="p4d.24xlarge", AvailabilityZone="us-west-2c"))
    fails = [f.message for f in findings if f.status == FAIL]
    assert any("reserves p4d.24xlarge" in m for m in fails)
    assert any("is in us-west-2c" in m for m in fails)


def test_fails_when_reservation_holds_fewer_instances_than_desired() -> None:
    findings = _res_findings(_res_plan(size=4), _reservation(TotalInstanceCount=2, AvailableInstanceCount=2))
    fail = next(f for f in findings if f.status == FAIL)
    assert "holds 2 instances" in fail.message and "desiredCapacity 4" in fail.message


def test_warns_when_reserved_instances_are_already_in_use() -> None:
    findings = _res_findings(_res_plan(), _reservation(AvailableInstanceCount=1))
    assert any(f.status == WARN and "only 1 are free" in f.message for f in findings)


def test_warns_when_max_size_exceeds_the_reservation() -> None:
    findings = _res_findings(_res_plan(size=2, max_size=3), _reservation())
    assert any(f.status == WARN and "maxSize 3" in f.message for f in findings)


def test_fails_when_capacity_type_does_not_match_the_reservation_type() -> None:
    findings = _res_findings(_res_plan("reservation"), _reservation(ReservationType="capacity-block"))
    fail = next(f for f in findings if f.status == FAIL)
    assert "is a Capacity Block" in fail.message and "capacity.type: capacity-block" in fail.fix


def test_check_reservations_describes_the_referenced_id() -> None:
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": [_reservation()]},
                          {"CapacityReservationIds": ["cr-0123456789abcdef0"]})
        findings = preflight.check_reservations(ec2, _res_plan(), now=NOW)
        stub.assert_no_pending_responses()
    assert _statuses(findings) == {PASS}


def test_fails_when_reservation_does_not_exist() -> None:
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_capacity_reservations", "InvalidCapacityReservationId.NotFound",
                              "The capacity reservation ID 'cr-0123456789abcdef0' does not exist")
        findings = preflight.check_reservations(ec2, _res_plan("capacity-block"), now=NOW)
    assert [f.status for f in findings] == [FAIL]
    assert "Capacity Block cr-0123456789abcdef0 of node group gpu does not exist" in findings[0].message


def test_on_demand_groups_ask_for_no_reservation() -> None:
    ec2 = _client("ec2")
    with Stubber(ec2):  # any call would fail: nothing is queued
        assert preflight.check_reservations(ec2, _spec(P5), now=NOW) == []


# --- access, credentials, throttling -------------------------------------------------------------


def test_access_denied_is_a_failed_check_naming_the_iam_action() -> None:
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_instance_types", "UnauthorizedOperation", "You are not authorized to perform this operation.")
        findings = preflight.check_efa_support(ec2, _spec(P5))
    assert len(findings) == 1 and findings[0].status == FAIL
    assert "not authorized to call ec2:DescribeInstanceTypes" in findings[0].message
    assert "allow ec2:DescribeInstanceTypes" in findings[0].fix


def test_rejected_credentials_abort_preflight() -> None:
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_availability_zones", "AuthFailure", "AWS was not able to validate the provided access credentials")
        with pytest.raises(UserError) as err:
            preflight.check_zone_offerings(ec2, _spec(P5))
    assert err.value.exit_code == 2 and "rejected the credentials" in err.value.message


def _no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    (tmp_path / "credentials").write_text("")
    (tmp_path / "config").write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # never the internet, whatever happens


def test_no_credentials_abort_with_a_clear_message(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    _no_credentials(monkeypatch, tmp_path)
    with pytest.raises(UserError) as err:
        preflight.run_preflight(_spec(P5), boto3.Session(region_name="us-west-2"))
    assert err.value.exit_code == 2
    assert "no AWS credentials" in err.value.message
    assert "aws configure" in err.value.fix


def test_unreachable_endpoint_aborts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(UserError) as err:
        preflight.run_preflight(_spec(P5), _session(), max_attempts=1)
    assert err.value.exit_code == 2 and "cannot reach the AWS endpoint" in err.value.message
    assert "AWS_ENDPOINT_URL" in err.value.fix


class _Raw:
    def __init__(self, body: bytes):
        self.body = body

    def stream(self, **_: object):
        yield self.body


THROTTLED = (
    b'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>RequestLimitExceeded</Code>'
    b"<Message>Request limit exceeded.</Message></Error></Errors><RequestID>r-1</RequestID></Response>"
)
EFA_OK = (
    b'<DescribeInstanceTypesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r-2</requestId>'
    b"<instanceTypeSet><item><instanceType>p5.48xlarge</instanceType><networkInfo><efaSupported>true</efaSupported>"
    b"<efaInfo><maximumEfaInterfaces>32</maximumEfaInterfaces></efaInfo></networkInfo></item></instanceTypeSet>"
    b"</DescribeInstanceTypesResponse>"
)


def _http(ec2, responses: list[tuple[int, bytes]]) -> list[int]:
    """Answer each HTTP request of ``ec2`` with the next response (below the retry loop)."""
    sent: list[int] = []

    def handler(request, **_):
        status, body = responses[min(len(sent), len(responses) - 1)]
        sent.append(status)
        return AWSResponse(request.url, status, {}, _Raw(body))

    ec2.meta.events.register("before-send.ec2", handler)
    return sent


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(botocore.endpoint, "time", SimpleNamespace(sleep=slept.append))
    return slept


def test_throttled_calls_are_retried_then_reported(monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    clients = Clients.from_session(_session(), "us-west-2", max_attempts=3)
    sent = _http(clients.ec2, [(503, THROTTLED)])
    findings = preflight.check_efa_support(clients.ec2, _spec(P5), max_attempts=3)
    assert sent == [503, 503, 503]
    assert len(no_sleep) == 2  # backoff between the attempts
    assert findings[0].status == FAIL
    assert "throttled ec2:DescribeInstanceTypes (RequestLimitExceeded) on all 3 attempts" in findings[0].message
    assert "--max-attempts" in findings[0].fix


def test_throttling_that_stops_is_invisible(monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    clients = Clients.from_session(_session(), "us-west-2", max_attempts=4)
    sent = _http(clients.ec2, [(503, THROTTLED), (503, THROTTLED), (200, EFA_OK)])
    findings = preflight.check_efa_support(clients.ec2, _spec(P5), max_attempts=4)
    assert sent == [503, 503, 200]
    assert [f.status for f in findings] == [PASS]


# --- output ------------------------------------------------------------------------------------


def test_json_form_counts_and_lists_findings() -> None:
    findings = [Finding("quota", PASS, "ok", "", "L-1"), Finding("az-offering", FAIL, "bad [zone]", "fix it", "gpu")]
    data = preflight.to_json(findings, _spec(P5))
    assert data["ok"] is False and data["cluster"] == "pf" and data["region"] == "us-west-2"
    assert data["summary"] == {"pass": 1, "warn": 0, "fail": 1}
    assert data["findings"][1] == {"check": "az-offering", "status": "fail", "message": "bad [zone]", "fix": "fix it", "subject": "gpu"}


def test_table_shows_every_finding_with_its_fix() -> None:
    buf = io.StringIO()
    findings = [Finding("az-offering", FAIL, "p5en.48xlarge is not offered in [us-west-2b]", "set availabilityZones: [us-west-2a]", "gpu")]
    preflight.render(findings, Console(file=buf, width=200, color_system=None), _spec(P5))
    out = buf.getvalue()
    assert "FAIL" in out and "[us-west-2b]" in out and "availabilityZones: [us-west-2a]" in out
    assert "0 pass, 0 warn, 1 fail" in out


def test_exit_code_is_one_only_on_failures() -> None:
    assert preflight.exit_code([Finding("x", WARN, "m")]) == 0
    assert preflight.exit_code([Finding("x", PASS, "m"), Finding("y", FAIL, "m")]) == 1


# --- add-on versions (EKS DescribeAddonVersions) -------------------------------------------------
# moto 5.2.5 answers DescribeAddonVersions with "404 Not yet implemented", so the responses come from
# Stubbers in the shape of the EKS API Reference (DescribeAddonVersions: addons[].addonVersions[]
# .addonVersion and .compatibilities[].clusterVersion/defaultVersion); the Stubber validates them against
# botocore's EKS service model.

CNI_PIN = "v1.20.1-eksbuild.3"  # efa_stack/planning/data/addons.json for 1.34


def _addon(name: str, versions: list[str], k8s: str = "1.34", default: str | None = None) -> dict:
    return {
        "addonName": name, "type": "networking", "owner": "aws", "publisher": "eks",
        "addonVersions": [
            {
                "addonVersion": v, "architecture": ["amd64", "arm64"],
                "compatibilities": [{"clusterVersion": k8s, "platformVersions": ["*"], "defaultVersion": v == default}],
                "requiresConfiguration": False, "requiresIamPermissions": False,
            }
            for v in versions
        ],
    }


def _eks_stub(eks, answers: Sequence[tuple[str, dict | str]], k8s: str = "1.34") -> Stubber:
    """Queue one DescribeAddonVersions answer per add-on, in the plan's order (a str is an error code)."""
    stub = Stubber(eks)
    for name, answer in answers:
        params = {"addonName": name, "kubernetesVersion": k8s}
        if isinstance(answer, str):
            stub.add_client_error("describe_addon_versions", answer, f"{answer} for {name}", expected_params=params)
        else:
            stub.add_response("describe_addon_versions", answer, params)
    return stub


def _offered(name: str, versions: list[str], default: str | None = None) -> dict:
    return {"addons": [_addon(name, versions, default=default or versions[0])]}


COREDNS = 'addons:\n- name: coredns\n  version: "v1.11.4-eksbuild.2"\n'
OBSERVABILITY = "addons:\n- name: amazon-cloudwatch-observability\n"


def _default_answers(cni: dict | str | None = None) -> list[tuple[str, dict | str]]:
    """EKS's answers for the add-ons every cluster gets, in the plan's order: vpc-cni (``cni``, by default one
    build, efa-stack's pin), then one build each of eks-pod-identity-agent and eks-node-monitoring-agent."""
    return [
        ("vpc-cni", _offered("vpc-cni", [CNI_PIN]) if cni is None else cni),
        ("eks-pod-identity-agent", _offered("eks-pod-identity-agent", ["v1.3.8-eksbuild.2"])),
        ("eks-node-monitoring-agent", _offered("eks-node-monitoring-agent", ["v1.4.0-eksbuild.2"])),
    ]


def test_addon_versions_pass_when_offered_and_name_the_default_where_no_version_is_set() -> None:
    # GIVEN the default add-ons of a GPU cluster on 1.34 (vpc-cni pinned, the other two without version)
    plan = _spec(P5)
    eks = _client("eks")
    answers = [
        ("vpc-cni", _offered("vpc-cni", ["v1.20.4-eksbuild.1", CNI_PIN], default=CNI_PIN)),
        ("eks-pod-identity-agent", _offered("eks-pod-identity-agent", ["v1.3.8-eksbuild.2", "v1.3.7-eksbuild.2"])),
        ("eks-node-monitoring-agent", _offered("eks-node-monitoring-agent", ["v1.4.0-eksbuild.2"])),
        ("amazon-cloudwatch-observability", _offered("amazon-cloudwatch-observability", ["v4.4.0-eksbuild.1"])),
    ]
    # WHEN preflight asks EKS
    with _eks_stub(eks, answers) as stub:
        findings = preflight.check_addon_versions(eks, plan)
        stub.assert_no_pending_responses()
    # THEN every add-on passes; the pin is named as efa-stack's, and the defaults are reported
    assert [(f.check, f.status, f.subject) for f in findings] == [
        ("addon-version", PASS, "vpc-cni"), ("addon-version", PASS, "eks-pod-identity-agent"),
        ("addon-version", PASS, "eks-node-monitoring-agent"), ("addon-version", PASS, "amazon-cloudwatch-observability"),
    ]
    assert f"vpc-cni {CNI_PIN} (pinned by efa-stack) is offered for Kubernetes 1.34" in findings[0].message
    assert "EKS installs its default v1.3.8-eksbuild.2 for Kubernetes 1.34" in findings[1].message


def test_fails_when_a_pinned_version_is_not_offered_for_the_cluster_version() -> None:
    # GIVEN the user pins coredns to a build EKS does not offer for 1.34
    plan = _spec(P5, system=COREDNS)
    eks = _client("eks")
    offered = ["v1.12.4-eksbuild.1", "v1.12.3-eksbuild.1", "v1.12.2-eksbuild.4", "v1.12.1-eksbuild.2",
               "v1.12.0-eksbuild.1", "v1.11.4-eksbuild.10"]
    answers = [
        *_default_answers(),
        ("coredns", {"addons": [_addon("coredns", list(reversed(offered)), default="v1.12.3-eksbuild.1")]}),
    ]
    with _eks_stub(eks, answers) as stub:
        findings = preflight.check_addon_versions(eks, plan)
        stub.assert_no_pending_responses()
    bad = [f for f in findings if f.subject == "coredns"]
    # THEN the finding fails, names the newest five builds newest first (numeric order: eksbuild.10 is
    # older than v1.12.0 but newer than eksbuild.2 would be), and the fix names the newest and the default
    assert len(bad) == 1 and bad[0].status == FAIL
    assert "coredns v1.11.4-eksbuild.2 is not offered for Kubernetes 1.34 in us-west-2" in bad[0].message
    assert ("offered: v1.12.4-eksbuild.1, v1.12.3-eksbuild.1, v1.12.2-eksbuild.4, v1.12.1-eksbuild.2, "
            "v1.12.0-eksbuild.1 and 1 older") in bad[0].message
    assert bad[0].fix == ("set version: v1.12.4-eksbuild.1 for coredns in addons, or leave version out for EKS's "
                          "default v1.12.3-eksbuild.1")
    assert preflight.exit_code(findings) == 1


def test_fails_when_efa_stacks_own_pin_is_not_offered_and_says_how_to_override_it() -> None:
    plan = _spec(P5)
    eks = _client("eks")
    with _eks_stub(eks, _default_answers(_offered("vpc-cni", ["v1.21.0-eksbuild.2"]))):
        findings = preflight.check_addon_versions(eks, plan)
    cni = findings[0]
    assert cni.status == FAIL and f"vpc-cni {CNI_PIN} (pinned by efa-stack) is not offered" in cni.message
    assert "{name: vpc-cni, version: v1.21.0-eksbuild.2}" in cni.fix and "addons.json" in cni.fix


def test_addon_versions_are_read_across_pages() -> None:
    # GIVEN EKS answers in two pages and the pinned build is on the second one
    plan = _spec(P5)
    eks = _client("eks")
    stub = Stubber(eks)
    first = {"addons": [_addon("vpc-cni", ["v1.21.0-eksbuild.2"], default="v1.21.0-eksbuild.2")], "nextToken": "t-1"}
    stub.add_response("describe_addon_versions", first, {"addonName": "vpc-cni", "kubernetesVersion": "1.34"})
    stub.add_response("describe_addon_versions", {"addons": [_addon("vpc-cni", [CNI_PIN])]},
                      {"addonName": "vpc-cni", "kubernetesVersion": "1.34", "nextToken": "t-1"})
    stub.add_response("describe_addon_versions", _offered("eks-pod-identity-agent", ["v1.3.8-eksbuild.2"]),
                      {"addonName": "eks-pod-identity-agent", "kubernetesVersion": "1.34"})
    stub.add_response("describe_addon_versions", _offered("eks-node-monitoring-agent", ["v1.4.0-eksbuild.2"]),
                      {"addonName": "eks-node-monitoring-agent", "kubernetesVersion": "1.34"})
    with stub:
        findings = preflight.check_addon_versions(eks, plan)
        stub.assert_no_pending_responses()
    # THEN the pin is found on page two, and the default from page one is still known
    assert findings[0].status == PASS
    assert "EKS's default is v1.21.0-eksbuild.2; newest v1.21.0-eksbuild.2" in findings[0].message


def test_fails_when_the_region_does_not_know_the_addon() -> None:
    plan = _spec(P5, system=OBSERVABILITY)
    eks = _client("eks")
    with _eks_stub(eks, [*_default_answers(), ("amazon-cloudwatch-observability", {"addons": []})]) as stub:
        # an empty answer for 1.34 is asked again without the version filter
        stub.add_response("describe_addon_versions", {"addons": []}, {"addonName": "amazon-cloudwatch-observability"})
        findings = preflight.check_addon_versions(eks, plan)
        stub.assert_no_pending_responses()
    bad = findings[-1]
    assert bad.status == FAIL and bad.message == "EKS does not know the add-on amazon-cloudwatch-observability in us-west-2"
    assert "describe-addon-versions --region us-west-2" in bad.fix


def test_fails_when_the_addon_has_no_build_for_the_kubernetes_version() -> None:
    plan = _spec(P5, system=OBSERVABILITY)
    eks = _client("eks")
    with _eks_stub(eks, [*_default_answers(), ("amazon-cloudwatch-observability", {"addons": []})]) as stub:
        stub.add_response(
            "describe_addon_versions", {"addons": [_addon("amazon-cloudwatch-observability", ["v4.1.0-eksbuild.1"],
                                                          k8s="1.33")]},
            {"addonName": "amazon-cloudwatch-observability"},
        )
        findings = preflight.check_addon_versions(eks, plan)
    bad = findings[-1]
    assert bad.status == FAIL
    assert bad.message == "EKS offers no build of amazon-cloudwatch-observability for Kubernetes 1.34 in us-west-2"
    assert "metadata.version" in bad.fix


def test_builds_for_other_kubernetes_versions_do_not_count() -> None:
    # a version listed only with compatibilities for 1.33 is not offered for 1.34
    offer_resp = {"addons": [_addon("vpc-cni", [CNI_PIN], k8s="1.33")]}
    eks = _client("eks")
    with Stubber(eks) as stub:
        stub.add_response("describe_addon_versions", offer_resp, {"addonName": "vpc-cni", "kubernetesVersion": "1.34"})
        offer = preflight.addon_offer(eks, "vpc-cni", "1.34")
    assert offer == preflight.AddonOffer((), None)


def test_access_denied_on_addon_versions_is_a_warning_naming_the_action() -> None:
    # GIVEN the identity may not call eks:DescribeAddonVersions
    plan = _spec(P5)
    eks = _client("eks")
    with _eks_stub(eks, [("vpc-cni", "AccessDeniedException")]) as stub:
        findings = preflight.check_addon_versions(eks, plan)
        stub.assert_no_pending_responses()  # asked once, not once per add-on
    # THEN one warning says why, and the add-ons left unchecked are named
    assert [f.status for f in findings] == [WARN, WARN]
    assert "vpc-cni: not authorized to call eks:DescribeAddonVersions (AccessDeniedException)" in findings[0].message
    assert "allow eks:DescribeAddonVersions" in findings[0].fix
    others = ", ".join(a.name for a in plan.addons[1:])
    assert others.startswith("eks-pod-identity-agent, eks-node-monitoring-agent")
    assert findings[1].message == f"not checked either (same permission): {others}"
    assert preflight.exit_code(findings) == 0


def test_server_error_on_one_addon_warns_and_the_others_are_still_checked() -> None:
    plan = _spec(P5)
    eks = _client("eks")
    answers = [
        *_default_answers("ServerException"),
        ("amazon-cloudwatch-observability", _offered("amazon-cloudwatch-observability", ["v4.4.0-eksbuild.1"])),
    ]
    with _eks_stub(eks, answers):
        findings = preflight.check_addon_versions(eks, plan)
    assert [f.status for f in findings] == [WARN, PASS, PASS, PASS]
    assert "eks:DescribeAddonVersions failed: ServerException" in findings[0].message


EKS_THROTTLED = b'{"__type": "ThrottlingException", "message": "Rate exceeded"}'


def test_throttled_addon_lookups_are_retried_then_a_warning(monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    clients = Clients.from_session(_session(), "us-west-2", max_attempts=2)
    sent: list[int] = []

    def handler(request, **_):
        sent.append(429)
        return AWSResponse(request.url, 429, {"x-amzn-ErrorType": "ThrottlingException"}, _Raw(EKS_THROTTLED))

    clients.eks.meta.events.register("before-send.eks", handler)
    plan = _spec(P5)
    findings = preflight.check_addon_versions(clients.eks, plan, max_attempts=2)
    assert len(plan.addons) == 4 and sent == [429] * 8  # two attempts for each of the four add-ons
    assert {f.status for f in findings} == {WARN}
    assert "throttled eks:DescribeAddonVersions (ThrottlingException) on all 2 attempts" in findings[0].message
    assert "--max-attempts" in findings[0].fix


def test_rejected_credentials_on_addon_versions_abort_preflight() -> None:
    eks = _client("eks")
    with _eks_stub(eks, [("vpc-cni", "UnrecognizedClientException")]), pytest.raises(UserError) as err:
        preflight.check_addon_versions(eks, _spec(P5))
    assert err.value.exit_code == 2 and "eks:DescribeAddonVersions" in err.value.message


def test_preflight_runs_the_addon_check_with_the_sessions_eks_client() -> None:
    clients = Clients.from_session(_session(), "us-west-2")
    assert clients.eks.meta.service_model.service_name == "eks"
    assert "eks:DescribeAddonVersions" in preflight.REQUIRED_ACTIONS


# --- training images (offline) ------------------------------------------------------------------------------

def _training_plan(image: str):
    from efa_stack.planning.plan import build_plan
    from efa_stack.spec.loader import parse_spec

    text = (Path(__file__).resolve().parent.parent / "clusters" / "training-p5.yaml").read_text()
    return build_plan(parse_spec(text.replace(
        "image: public.ecr.aws/deep-learning-containers/pytorch:2.11.0-cu130-amzn2023\n", f"image: {image}\n", 1)))


def test_training_image_moving_tag_with_a_bad_history_warns():
    from efa_stack.tools.preflight import check_training_images

    (f,) = check_training_images(_training_plan("public.ecr.aws/deep-learning-containers/pytorch:2.11.0-cu130-amzn2023"))
    assert (f.check, f.status, f.subject) == ("training image", "warn", "trainingJobs[0].image")
    assert "1.47.0" in f.message and "digest" in f.fix


def test_training_image_dated_tag_of_a_bad_build_fails_and_a_digest_passes():
    from efa_stack.tools.preflight import check_training_images

    bad = "public.ecr.aws/deep-learning-containers/pytorch:2.11.0-cu130-amzn2023-20260801"
    (f,) = check_training_images(_training_plan(bad))
    assert f.status == "fail" and "20260801" in f.message
    pinned = "public.ecr.aws/deep-learning-containers/pytorch:2.11.0-cu130-amzn2023@sha256:" + "a" * 64
    (ok,) = check_training_images(_training_plan(pinned))
    assert ok.status == "pass"


# --- Kubernetes version (EKS DescribeClusterVersions) --------------------------------------------
# Rows in the shape of botocore's eks-2017-11-01 model (clusterVersions[].clusterVersion, versionStatus,
# endOfExtendedSupportDate); the Stubber validates requests and answers against it.


def _version_row(version: str, status: str, end: datetime | None = None) -> dict:
    row: dict = {"clusterVersion": version, "clusterType": "eks", "versionStatus": status}
    if end is not None:
        row["endOfExtendedSupportDate"] = end
    return row


def _version_findings(spec_version: str, *answers: dict | str) -> list[Finding]:
    from tests.support import BASE, plan_of

    plan = plan_of(BASE.replace('version: "1.34"', f'version: "{spec_version}"'))
    assert plan.region == "us-west-2"
    eks = _client("eks")
    stub = Stubber(eks)
    for i, answer in enumerate(answers):
        params = {"clusterVersions": [spec_version]} if i == 0 else {}
        if isinstance(answer, str):
            stub.add_client_error("describe_cluster_versions", answer, answer, expected_params=params)
        else:
            stub.add_response("describe_cluster_versions", answer, params)
    with stub:
        findings = preflight.check_cluster_version(eks, plan)
    stub.assert_no_pending_responses()
    return findings


def test_cluster_version_in_standard_support_passes():
    (f,) = _version_findings("1.35", {"clusterVersions": [_version_row("1.35", "STANDARD_SUPPORT")]})
    assert (f.status, f.subject) == (PASS, "1.35")
    assert f.message == "EKS in us-west-2 offers Kubernetes 1.35 (standard_support)"


def test_cluster_version_in_extended_support_warns_with_its_end():
    end = datetime(2027, 3, 23, tzinfo=UTC)
    (f,) = _version_findings("1.32", {"clusterVersions": [_version_row("1.32", "EXTENDED_SUPPORT", end)]})
    assert f.status == WARN
    assert f.message == "Kubernetes 1.32 is in extended support in us-west-2 until 2027-03-23: the cluster costs more per hour"


def test_cluster_version_the_region_does_not_offer_fails_with_what_it_offers():
    listed = {"clusterVersions": [
        _version_row("1.36", "STANDARD_SUPPORT"), _version_row("1.35", "STANDARD_SUPPORT"),
        _version_row("1.31", "EXTENDED_SUPPORT"), _version_row("1.30", "UNSUPPORTED"),
    ]}
    (f,) = _version_findings("1.37", {"clusterVersions": []}, listed)
    assert f.status == FAIL
    assert f.message == "EKS in us-west-2 does not offer Kubernetes 1.37 for new clusters"
    assert f.fix == "set metadata.version to one EKS offers there: 1.31, 1.35, 1.36"


def test_cluster_version_api_error_is_a_warning():
    (f,) = _version_findings("1.35", "ThrottlingException")
    assert f.status == WARN and f.message.startswith("EKS in us-west-2 could not say whether it offers Kubernetes 1.35")


def test_cluster_version_without_credentials_aborts():
    with pytest.raises(UserError):
        _version_findings("1.35", "UnrecognizedClientException")


def _tier_findings(tier: str, offered: list[dict]) -> list[Finding]:
    from tests.support import BASE, plan_of

    plan = plan_of(BASE + f"controlPlaneScalingConfig: {{tier: {tier}}}\n")
    assert plan.control_plane_tier == tier
    eks = _client("eks")
    row = {**_version_row("1.34", "STANDARD_SUPPORT"), "controlPlaneScalingTiers": offered}
    with Stubber(eks) as stub:
        stub.add_response("describe_cluster_versions", {"clusterVersions": [row]}, {"clusterVersions": ["1.34"]})
        return preflight.check_cluster_version(eks, plan)


def test_control_plane_tier_eks_offers_passes_with_its_figures():
    tiers = [{"tierName": "tier-xl", "apiRequestConcurrency": 1700, "podSchedulingRatePerSecond": 100}]
    tier, version = _tier_findings("tier-xl", tiers)
    assert tier.status == PASS and tier.subject == "tier-xl"
    assert tier.message == ("EKS offers control plane tier tier-xl for Kubernetes 1.34 (API request concurrency 1700, "
                            "pods scheduled per second 100)")
    assert version.status == PASS


def test_control_plane_tier_eks_does_not_offer_fails():
    (tier, _) = _tier_findings("tier-8xl", [{"tierName": "tier-xl"}, {"tierName": "tier-2xl"}])
    assert tier.status == FAIL
    assert tier.fix == "set controlPlaneScalingConfig.tier to one EKS offers there (tier-2xl, tier-xl), or remove it"


# --- Karpenter pools' reservations and the reservations' network topology ------------------------------------
# EC2 DescribeCapacityReservations and DescribeCapacityReservationTopology in the shape of botocore's ec2 model
# (CapacityReservations[].CapacityReservationId, NetworkNodes from the top layer down, GroupName), validated by
# the Stubber; clusters/karpenter-capacity-block.yaml: one static pool of 4 p5en.48xlarge over three blocks.
BLOCKS = ("cr-0a1b2c3d4e5f60718", "cr-0b2c3d4e5f6071829", "cr-0c3d4e5f607182930")


def _blocks_plan() -> ClusterPlan:
    from efa_stack.planning.plan import plan_from_file

    return plan_from_file(ROOT / "clusters" / "karpenter-capacity-block.yaml")


def _block(rid: str, total: int) -> dict:
    return _reservation(CapacityReservationId=rid, InstanceType="p5en.48xlarge", AvailabilityZone="us-east-1a",
                        ReservationType="capacity-block", TotalInstanceCount=total, AvailableInstanceCount=total)


def _pool_reservation_findings(totals: dict[str, int]) -> list[Finding]:
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        stub.add_response("describe_capacity_reservations",
                          {"CapacityReservations": [_block(r, n) for r, n in totals.items()]},
                          {"CapacityReservationIds": list(BLOCKS)})
        return preflight.check_reservations(ec2, _blocks_plan(), now=NOW)


def test_pool_blocks_together_hold_its_replicas():
    findings = _pool_reservation_findings({BLOCKS[0]: 2, BLOCKS[1]: 1, BLOCKS[2]: 1})
    assert _statuses(findings) == {PASS}
    assert findings[-1].message == "pool p5en-blocks: 3 reservations hold 4 instances"
    assert sum("is active" in f.message for f in findings) == 3


def test_fails_pool_whose_blocks_hold_fewer_than_its_replicas_or_one_is_missing():
    findings = _pool_reservation_findings({BLOCKS[0]: 1, BLOCKS[1]: 1})
    fails = [f.message for f in findings if f.status == FAIL]
    assert f"Capacity Block {BLOCKS[2]} of pool p5en-blocks does not exist in us-east-1 for this account" in fails
    assert "the 2 reservations of pool p5en-blocks hold 2 instances but it wants 4 replicas" in fails


def _topology_findings(rows: list[dict] | str, plan: ClusterPlan | None = None) -> list[Finding]:
    plan = plan or _blocks_plan()
    ids = sorted({*(p for pool in plan.karpenter.pools for p in pool.reservation_ids)} if plan.karpenter else
                 {g.reservation_id for g in plan.all_node_groups if g.reservation_id})
    ec2 = _client("ec2")
    with Stubber(ec2) as stub:
        if isinstance(rows, str):
            stub.add_client_error("describe_capacity_reservation_topology", rows, rows,
                                  expected_params={"CapacityReservationIds": ids})
        else:
            stub.add_response("describe_capacity_reservation_topology", {"CapacityReservations": rows},
                              {"CapacityReservationIds": ids})
        return preflight.check_reservation_topology(ec2, plan)


def _row(rid: str, nodes: list[str], group: str | None = None) -> dict:
    row = {"CapacityReservationId": rid, "InstanceType": "p5en.48xlarge", "State": "active", "NetworkNodes": nodes,
           "AvailabilityZone": "us-east-1a"}
    return {**row, "GroupName": group} if group else row


def test_pool_blocks_under_one_top_network_node_pass_with_their_nodes():
    (f,) = _topology_findings([_row(r, ["nn-top", f"nn-mid-{i}", f"nn-low-{i}"]) for i, r in enumerate(BLOCKS)])
    assert f.status == PASS and f.subject == "p5en-blocks"
    assert f"{BLOCKS[0]}: nn-top > nn-mid-0 > nn-low-0" in f.message


def test_pool_blocks_under_different_top_network_nodes_warn():
    rows = [_row(BLOCKS[0], ["nn-a", "nn-1"]), _row(BLOCKS[1], ["nn-a", "nn-2"]), _row(BLOCKS[2], ["nn-b", "nn-3"])]
    (f,) = _topology_findings(rows)
    assert f.status == WARN and "2 different top-layer network nodes" in f.message
    assert "topology: required" in f.fix


def test_reservation_without_topology_warns():
    findings = _topology_findings([_row(BLOCKS[0], ["nn-a"]), _row(BLOCKS[1], ["nn-a"]), _row(BLOCKS[2], [])])
    assert [(f.status, BLOCKS[2] in f.message) for f in findings] == [(WARN, True), (PASS, False)]


def test_node_group_naming_another_placement_group_than_its_reservation_fails():
    plan = _spec(_group(capacity="{type: reservation, reservationId: cr-0123456789abcdef0}") + "  placementGroup: mine\n")
    findings = _topology_findings([_row("cr-0123456789abcdef0", ["nn-a"], group="theirs")], plan)
    (fail,) = [f for f in findings if f.status == FAIL]
    assert fail.message == "cr-0123456789abcdef0 is in placement group theirs but gpu names placement group mine"
    assert fail.fix.startswith("set placementGroup: theirs for gpu")


def test_topology_api_error_is_a_warning():
    (f,) = _topology_findings("InternalError")
    assert f.status == WARN and "describe-capacity-reservation-topology" in f.fix


def test_on_demand_plan_asks_no_topology():
    ec2 = _client("ec2")
    with Stubber(ec2):  # no call expected: any would fail
        assert preflight.check_reservation_topology(ec2, _spec(_group())) == []


# --- the NVIDIA driver the AMI release gives each GPU group (SSM + the table of EFA software) -------------------

SSM_NAME = "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/nvidia/recommended/release_version"


def _ssm(values: Sequence[str | Exception]) -> tuple[object, Stubber]:
    """An SSM client whose GetParameter answers ``values`` in turn (a string: the parameter's value)."""
    ssm = _client("ssm")
    stub = Stubber(ssm)
    for v in values:
        if isinstance(v, Exception):
            stub.add_client_error("get_parameter", service_error_code=str(v), service_message="denied",
                                  expected_params={"Name": SSM_NAME})
        else:
            stub.add_response("get_parameter", {"Parameter": {"Name": SSM_NAME, "Type": "String", "Value": v}},
                              expected_params={"Name": SSM_NAME})
    return ssm, stub


def test_gpu_group_on_the_recommended_release_passes_naming_its_driver() -> None:
    # GIVEN SSM recommends release 1.34.8-20260714 for the AL2023 x86_64 NVIDIA AMI of Kubernetes 1.34
    ssm, stub = _ssm(["1.34.8-20260714"])
    with stub:
        (f,) = preflight.check_nvidia_drivers(ssm, _spec(P5))
    # THEN the group passes, naming the release and the driver the data gives p5.48xlarge there
    assert (f.check, f.status, f.subject) == ("nvidia-driver", PASS, "gpu")
    assert "v20260714" in f.message and "R580 (580.159.03)" in f.message


def test_fails_gpu_group_whose_recommended_release_gives_a_known_bad_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_node_software import synthetic_r595_on_p5

    synthetic_r595_on_p5(monkeypatch)  # SYNTHETIC: v20260917 gives p5 the R595 driver, a known-bad row for p5
    ssm, stub = _ssm(["1.34.8-20260917"])
    with stub:
        (f,) = preflight.check_nvidia_drivers(ssm, _spec(P5))
    assert f.status == FAIL and "R595" in f.message and "synthetic row of tests" in f.message
    assert "R580" in f.fix
    assert preflight.exit_code([f]) == 1


def test_warns_when_the_recommended_release_is_not_in_the_data() -> None:
    ssm, stub = _ssm(["1.34.8-20261120"])
    with stub:
        (f,) = preflight.check_nvidia_drivers(ssm, _spec(P5))
    assert f.status == WARN and "v20261120" in f.message and "verify --acceptance" in f.fix


def test_warns_when_the_release_cannot_be_read_naming_the_iam_action() -> None:
    ssm, stub = _ssm([Exception("AccessDeniedException")])
    with stub:
        (f,) = preflight.check_nvidia_drivers(ssm, _spec(P5))
    assert f.status == WARN and "ssm:GetParameter" in f.message and SSM_NAME in f.fix


def test_groups_of_one_ami_type_ask_ssm_once_and_cpu_groups_not_at_all() -> None:
    two = P5 + P5.replace("name: gpu", "name: gpu2").replace("us-west-2a", "us-west-2b")
    ssm, stub = _ssm(["1.34.8-20260714"])  # one answer queued: a second call would fail the Stubber
    with stub:
        findings = preflight.check_nvidia_drivers(ssm, _spec(two))
    assert [(f.subject, f.status) for f in findings] == [("gpu", PASS), ("gpu2", PASS)]


def test_custom_ami_group_warns_that_verify_reads_its_driver() -> None:
    custom = P5 + "  ami: ami-0123456789abcdef0\n  amiFamily: AmazonLinux2023\n"
    ssm, stub = _ssm([])
    with stub:
        (f,) = preflight.check_nvidia_drivers(ssm, _spec(custom))
    assert f.status == WARN and "ami-0123456789abcdef0" in f.message and "verify --acceptance" in f.fix


def test_karpenter_pool_release_is_judged_offline() -> None:
    from efa_stack.planning.plan import plan_from_file

    plan = plan_from_file(ROOT / "clusters" / "karpenter-p5.yaml")
    ssm, stub = _ssm([])
    with stub:
        findings = [f for f in preflight.check_nvidia_drivers(ssm, plan) if plan.karpenter
                    and f.subject in {p.group.name for p in plan.karpenter.pools}]
    assert findings and all(f.status == PASS and "the pool's amiVersion" in f.message for f in findings)
