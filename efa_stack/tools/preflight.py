"""``efa-stack preflight``: the account checks the AWS EKS EFA guide asks for by hand, for one cluster spec.

Read-only: EFA support, zone offerings, On-Demand vCPU quotas, Capacity Reservations/Blocks and EKS add-on
versions (what each asks AWS: docs/design/commands.md, "preflight: what it asks AWS"). Every check takes
boto3 clients and returns :class:`efa_stack.tools.preflight.Finding` objects (pass / warn / fail, each with
the fix); missing or rejected credentials stop preflight with :class:`efa_stack.errors.UserError` (exit
code 2). IAM actions used: :data:`efa_stack.tools.preflight.REQUIRED_ACTIONS`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore import exceptions as _bex
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)

from efa_stack import contract
from efa_stack.console import styled
from efa_stack.errors import UserError
from efa_stack.planning import addons as spec_addons
from efa_stack.planning import catalog, node_software
from efa_stack.planning.catalog import UnknownInstanceType
from efa_stack.planning.node_groups import NodeGroupPlan
from efa_stack.planning.plan import ClusterPlan

PASS: contract.CheckStatus = "pass"
WARN: contract.CheckStatus = "warn"
FAIL: contract.CheckStatus = "fail"

DEFAULT_MAX_ATTEMPTS = 5
"""Total attempts per API call (first call + retries) before a throttled call is reported."""

EFA_FILTER = {"Name": "network-info.efa-supported", "Values": ["true"]}

REQUIRED_ACTIONS = (
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstances",
    "ec2:DescribeCapacityReservations",
    "servicequotas:GetServiceQuota",
    "servicequotas:GetAWSDefaultServiceQuota",
    "eks:DescribeAddonVersions",
    "ssm:GetParameter",
)

THROTTLING_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "RequestLimitExceeded", "RequestThrottled", "SlowDown",
    "EC2ThrottledException", "BandwidthLimitExceeded", "LimitExceededException",
})
ACCESS_DENIED_CODES = frozenset({
    "AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedAccess",
})
BAD_CREDENTIALS_CODES = frozenset({
    "AuthFailure", "InvalidClientTokenId", "UnrecognizedClientException", "ExpiredToken",
    "ExpiredTokenException", "RequestExpired", "SignatureDoesNotMatch", "InvalidAccessKeyId",
})


@dataclass(frozen=True)
class Finding:
    """One preflight result: what was checked, the verdict, what was found and how to fix it."""

    check: str
    status: contract.CheckStatus
    message: str
    fix: str = ""
    subject: str = ""
    """What the finding is about: a node group, an instance type, a quota code."""


# --------------------------------------------------------------------------------------------
# On-Demand vCPU quotas (Service Quotas, service code "ec2")
#
# The codes are the ones the Service Quotas console and API use for the running On-Demand vCPU
# quotas. Sources: the EC2 guide "Amazon EC2 instance type quotas" lists which instance families
# each quota covers (https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html);
# the AWS CLI reference shows L-1216C47A = "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z)
# instances" (https://awscli.amazonaws.com/v2/documentation/api/latest/reference/service-quotas/
# get-aws-default-service-quota.html). The other codes were cross-checked against independent tools
# that query them live (L-417A185B P, L-DB2E81BA G and VT, L-2C3B7624 Trn, L-1945791B Inf,
# L-6E869C2A DL, L-F7808C92 HPC, L-7295265B X, L-74FC7D96 F, L-43DA4232 High Memory).
# Every finding also carries the quota's name, so a wrong code shows up as a quota name mismatch.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quota:
    code: str
    name: str


STANDARD = Quota("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")
P = Quota("L-417A185B", "Running On-Demand P instances")
G_VT = Quota("L-DB2E81BA", "Running On-Demand G and VT instances")
TRN = Quota("L-2C3B7624", "Running On-Demand Trn instances")
INF = Quota("L-1945791B", "Running On-Demand Inf instances")
DL = Quota("L-6E869C2A", "Running On-Demand DL instances")
HPC = Quota("L-F7808C92", "Running On-Demand HPC instances")
X = Quota("L-7295265B", "Running On-Demand X instances")
F = Quota("L-74FC7D96", "Running On-Demand F instances")
HIGH_MEMORY = Quota("L-43DA4232", "Running On-Demand High Memory instances")

# Longest prefixes first: "hpc7g" is HPC (not H), "inf2" Inf (not I), "trn1" Trn (not T), "dl1" DL.
_QUOTA_PREFIXES: tuple[tuple[str, Quota], ...] = (
    ("hpc", HPC), ("trn", TRN), ("inf", INF), ("dl", DL), ("vt", G_VT),
    ("u", HIGH_MEMORY), ("p", P), ("g", G_VT), ("x", X), ("f", F),
)


def quota_for(instance_type: str) -> Quota:
    """The running On-Demand vCPU quota that ``instance_type`` counts against."""
    family = instance_type.split(".", 1)[0].lower()
    for prefix, quota in _QUOTA_PREFIXES:
        if family.startswith(prefix):
            return quota
    return STANDARD


# --------------------------------------------------------------------------------------------
# Clients and error handling
# --------------------------------------------------------------------------------------------


def client_config(max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> Config:
    """Retries with exponential backoff and jitter; ``max_attempts`` counts the first call too."""
    return Config(retries={"mode": "standard", "total_max_attempts": max(1, max_attempts)})


@dataclass
class Clients:
    ec2: Any
    quotas: Any
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    eks: Any = None
    """EKS client for the add-on version check (None: the check is skipped)."""
    ssm: Any = None
    """SSM client for the AMI release EKS gives a new node group (None: only the Karpenter pools' pinned releases
    are judged)."""
    resource_groups: Any = None
    """Resource Groups client for the Capacity Blocks of UltraServer node groups that target a resource group (None:
    those are not checked)."""

    @classmethod
    def from_session(cls, session: Any, region: str, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> Clients:
        cfg = client_config(max_attempts)
        return cls(
            ec2=session.client("ec2", region_name=region, config=cfg),
            quotas=session.client("service-quotas", region_name=region, config=cfg),
            max_attempts=max_attempts,
            eks=session.client("eks", region_name=region, config=cfg),
            ssm=session.client("ssm", region_name=region, config=cfg),
            resource_groups=session.client("resource-groups", region_name=region, config=cfg),
        )


_IAM_SERVICE = {
    "GetServiceQuota": "servicequotas", "GetAWSDefaultServiceQuota": "servicequotas", "DescribeAddonVersions": "eks",
    "GetParameter": "ssm", "ListGroupResources": "resource-groups",
}


def _action(exc: ClientError) -> str:
    op = exc.operation_name or "?"
    return f"{_IAM_SERVICE.get(op, 'ec2')}:{op}"


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


# Credential providers that failed to produce credentials (expired SSO token, failing
# credential_process, ...): as fatal as having none.
_CREDENTIAL_ERRORS: tuple[type[BaseException], ...] = tuple(
    getattr(_bex, name) for name in (
        "NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError", "TokenRetrievalError",
        "SSOTokenLoadError", "UnauthorizedSSOTokenError",
    ) if hasattr(_bex, name)
)


def abort_for(exc: BaseException) -> UserError | None:
    """The :class:`efa_stack.errors.UserError` for errors that make every further call pointless."""
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return UserError(
            f"no AWS credentials found ({exc})",
            "configure credentials (aws configure, aws sso login, AWS_PROFILE or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and run preflight again",
        )
    if isinstance(exc, _CREDENTIAL_ERRORS):
        return UserError(
            f"AWS credentials could not be loaded ({exc})",
            "refresh them (aws sso login, or fix the profile's credential_process) and run preflight again",
        )
    if isinstance(exc, (EndpointConnectionError, HTTPClientError, _bex.ConnectionError)):
        return UserError(
            f"cannot reach the AWS endpoint ({exc})",
            "check the network, the region, and AWS_ENDPOINT_URL if it is set",
        )
    if isinstance(exc, NoRegionError):
        return UserError(str(exc), "set metadata.region in the spec")
    if isinstance(exc, ClientError) and _code(exc) in BAD_CREDENTIALS_CODES:
        return UserError(
            f"AWS rejected the credentials on {_action(exc)} ({_code(exc)}: "
            f"{exc.response.get('Error', {}).get('Message', '')})",
            "refresh or replace the credentials (expired session? wrong account or partition?)",
        )
    return None


def api_error_finding(check: str, exc: ClientError, *, max_attempts: int | None = None, subject: str = "") -> Finding:
    """A failed AWS call as a finding that says what could not be checked and how to fix it."""
    code = _code(exc)
    message = exc.response.get("Error", {}).get("Message", "")
    action = _action(exc)
    if code in THROTTLING_CODES:
        attempts = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) + 1
        return Finding(
            check, FAIL,
            f"AWS throttled {action} ({code}) on all {attempts} attempts, retried with backoff; "
            "this check could not run",
            "wait a minute and run preflight again (other tools may be using the account's API rate), "
            f"or allow more attempts with --max-attempts (now {max_attempts or attempts})",
            subject,
        )
    if code in ACCESS_DENIED_CODES:
        return Finding(
            check, FAIL,
            f"not authorized to call {action} ({code}); this check could not run",
            f"allow {action} for the identity preflight runs as (read-only; preflight needs "
            f"{', '.join(REQUIRED_ACTIONS)})",
            subject,
        )
    return Finding(
        check, FAIL, f"{action} failed: {code}: {message}",
        "see the AWS error above; run preflight again once it is resolved", subject,
    )


def _guarded(check: str) -> Callable[[Callable[..., list[Finding]]], Callable[..., list[Finding]]]:
    """Turn API errors of a whole check into one finding; credential problems abort preflight."""

    def wrap(fn: Callable[..., list[Finding]]) -> Callable[..., list[Finding]]:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> list[Finding]:
            try:
                return fn(*args, **kwargs)
            except (ClientError, BotoCoreError) as exc:
                abort = abort_for(exc)
                if abort is not None:
                    raise abort from exc
                if isinstance(exc, ClientError):
                    return [api_error_finding(check, exc, max_attempts=kwargs.get("max_attempts"))]
                return [Finding(check, FAIL, f"the check could not run: {exc}", "see the error above", "")]

        return inner

    return wrap


def _paginate(client: Any, operation: str, result_key: str, **kwargs: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in client.get_paginator(operation).paginate(**kwargs):
        items.extend(page.get(result_key, []))
    return items


def _zones_text(names: Iterable[str], ids: dict[str, str]) -> str:
    names = sorted(names)
    if not names:
        return "no zone"
    return ", ".join(f"{n} ({ids[n]})" if n in ids else n for n in names)


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------


@_guarded("efa-support")
def check_efa_support(ec2: Any, plan: ClusterPlan, *, max_attempts: int | None = None) -> list[Finding]:
    """Which of the spec's EFA node groups' instance types support EFA in the plan's region."""
    groups = plan.efa_node_groups
    types = sorted({g.instance_type for g in groups})
    if not types:
        return []
    found: dict[str, dict[str, Any]] = {}
    unknown: set[str] = set()
    try:
        for item in _paginate(ec2, "describe_instance_types", "InstanceTypes", InstanceTypes=types, Filters=[EFA_FILTER]):
            found[item["InstanceType"]] = item
    except ClientError as exc:
        if _code(exc) != "InvalidInstanceType":
            raise
        # One unknown type fails the whole call: ask per type to learn which.
        for t in types:
            try:
                for item in _paginate(ec2, "describe_instance_types", "InstanceTypes", InstanceTypes=[t], Filters=[EFA_FILTER]):
                    found[item["InstanceType"]] = item
            except ClientError as inner:
                if _code(inner) != "InvalidInstanceType":
                    raise
                unknown.add(t)

    findings: list[Finding] = []
    for t in types:
        users = ", ".join(g.name for g in groups if g.instance_type == t)
        if t in unknown:
            findings.append(Finding(
                "efa-support", FAIL, f"{t} does not exist in {plan.region} (node groups {users})",
                f"choose an instance type offered in {plan.region}, or another region", t,
            ))
            continue
        entry = found.get(t)
        if entry is None:
            findings.append(Finding(
                "efa-support", FAIL,
                f"{t} does not support EFA in {plan.region} (node groups {users} have efaEnabled: true)",
                "choose an EFA-capable instance type (efa-stack catalog list --efa) or set efaEnabled: false", t,
            ))
            continue
        api_max = entry.get("NetworkInfo", {}).get("EfaInfo", {}).get("MaximumEfaInterfaces")
        try:
            known = catalog.get(t).max_efa_interfaces
        except UnknownInstanceType:
            known = None
        if api_max is not None and known is not None and api_max != known:
            findings.append(Finding(
                "efa-support", WARN,
                f"{t} supports EFA in {plan.region}, but EC2 reports {api_max} EFA interfaces and the "
                f"catalog says {known}",
                "refresh the catalog (efa-stack catalog refresh) so launch templates match EC2", t,
            ))
        else:
            findings.append(Finding(
                "efa-support", PASS,
                f"{t} supports EFA in {plan.region}"
                + (f" ({api_max} EFA interfaces)" if api_max is not None else ""),
                "", t,
            ))
    return findings


def zone_ids(ec2: Any) -> dict[str, str]:
    """Zone name -> zone id for the account (names map to different physical zones per account)."""
    zones = ec2.describe_availability_zones()["AvailabilityZones"]
    return {z["ZoneName"]: z["ZoneId"] for z in zones if "ZoneName" in z and "ZoneId" in z}


def offerings(ec2: Any, types: list[str]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per instance type: the zone names and the zone ids that offer it."""
    filt = [{"Name": "instance-type", "Values": types}]
    by_name: dict[str, set[str]] = {t: set() for t in types}
    by_id: dict[str, set[str]] = {t: set() for t in types}
    for loc_type, target in (("availability-zone", by_name), ("availability-zone-id", by_id)):
        for o in _paginate(ec2, "describe_instance_type_offerings", "InstanceTypeOfferings", LocationType=loc_type, Filters=filt):
            target.setdefault(o["InstanceType"], set()).add(o["Location"])
    return by_name, by_id


@_guarded("az-offering")
def check_zone_offerings(ec2: Any, plan: ClusterPlan, *, max_attempts: int | None = None) -> list[Finding]:
    """Whether each node group's zones exist for the account and offer its instance type."""
    ids = zone_ids(ec2)
    names_by_id = {v: k for k, v in ids.items()}
    findings: list[Finding] = []
    for az in plan.availability_zones:
        if az not in ids:
            findings.append(Finding(
                "availability-zone", FAIL,
                f"{az} is not an available zone of {plan.region} for this account",
                f"use zones of {plan.region} that the account has: {_zones_text(ids, ids)}", az,
            ))
    groups = plan.all_node_groups
    types = sorted({g.instance_type for g in groups})
    by_name, by_id = offerings(ec2, types)
    for g in groups:
        t = g.instance_type
        offered = by_name.get(t, set())
        # offerings by zone id, expressed as this account's zone names
        offered_ids = {names_by_id[i] for i in by_id.get(t, set()) if i in names_by_id}
        either = offered | offered_ids
        where = _zones_text(either, ids)
        missing = [az for az in g.availability_zones if az in ids and az not in either]
        disagree = [az for az in g.availability_zones if az in ids and (az in offered) != (az in offered_ids)]
        if not either:
            findings.append(Finding(
                "az-offering", FAIL, f"{t} is not offered in any zone of {plan.region} (node group {g.name})",
                f"choose another instance type or region for node group {g.name}", g.name,
            ))
            continue
        if missing:
            single = g.efa_enabled or len(missing) == len(g.availability_zones)
            first = min(either)
            findings.append(Finding(
                "az-offering", FAIL if single else WARN,
                f"{t} is not offered in {_zones_text(missing, ids)} (node group {g.name}); "
                f"it is offered in {where}",
                (f"set availabilityZones of node group {g.name} to one of {', '.join(sorted(either))} "
                 f"(e.g. [{first}]) and list that zone in the cluster's availabilityZones")
                if g.name != "system" else
                f"list zones that offer {t} in availabilityZones, or choose another systemNodeGroup.instanceType",
                g.name,
            ))
            continue
        if disagree:
            findings.append(Finding(
                "az-offering", WARN,
                f"offerings of {t} by zone name and by zone id disagree for {', '.join(disagree)} "
                f"(node group {g.name})",
                "check the zone mapping with aws ec2 describe-availability-zones", g.name,
            ))
            continue
        findings.append(Finding(
            "az-offering", PASS,
            f"{t} is offered in {_zones_text(g.availability_zones, ids)} (node group {g.name})", "", g.name,
        ))
    return findings


def quota_limit(quotas: Any, code: str) -> tuple[float | None, str]:
    """The applied value of an EC2 quota, the AWS default when no applied value exists, or None."""
    try:
        return float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]), "applied"
    except ClientError as exc:
        if _code(exc) != "NoSuchResourceException":
            raise
    try:
        value = quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
        return float(value), "AWS default (no applied value)"
    except (ClientError, NotImplementedError):
        # Only a fallback: an endpoint without it (an emulator such as moto raises
        # NotImplementedError in-process) leaves the quota unknown rather than failing preflight.
        return None, "not available"


def _vcpus(instance_type: str) -> int:
    try:
        return catalog.get(instance_type).vcpus
    except UnknownInstanceType:
        return 0


def running_vcpus(ec2: Any) -> dict[str, int]:
    """vCPUs of pending/running On-Demand instances, per quota code."""
    used: dict[str, int] = {}
    reservations = _paginate(
        ec2, "describe_instances", "Reservations",
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}],
    )
    for r in reservations:
        for inst in r.get("Instances", []):
            if inst.get("InstanceLifecycle") in ("spot", "scheduled", contract.EC2_CAPACITY_BLOCK):
                continue
            t = inst.get("InstanceType", "")
            cpu = inst.get("CpuOptions") or {}
            n = cpu.get("CoreCount", 0) * cpu.get("ThreadsPerCore", 0) or _vcpus(t)
            code = quota_for(t).code
            used[code] = used.get(code, 0) + n
    return used


@_guarded("quota")
def check_quotas(quotas: Any, ec2: Any, plan: ClusterPlan, *, max_attempts: int | None = None) -> list[Finding]:
    """Running On-Demand vCPU quota per instance family against what the spec can scale to."""
    demand: dict[Quota, list[NodeGroupPlan]] = {}
    findings: list[Finding] = []
    for g in plan.all_node_groups:
        if g.capacity != contract.ON_DEMAND:
            findings.append(Finding(
                "quota", PASS,
                f"node group {g.name} runs in {g.capacity} {g.reservation_id}: its instances use reserved "
                "capacity, so the running On-Demand vCPU quota is not counted for it (see the reservation check)",
                "", g.name,
            ))
            continue
        demand.setdefault(quota_for(g.instance_type), []).append(g)
    if not demand:
        return findings

    usage_note = ""
    try:
        used = running_vcpus(ec2)
    except ClientError as exc:
        if _code(exc) in ACCESS_DENIED_CODES:
            used, usage_note = {}, " (running instances not counted: ec2:DescribeInstances not allowed)"
        else:
            raise

    for quota, groups in sorted(demand.items(), key=lambda kv: kv[0].code):
        needed = sum(g.max_size * g.instance.vcpus for g in groups)
        parts = ", ".join(
            f"{g.name}: maxSize {g.max_size} x {g.instance.vcpus} vCPUs of {g.instance_type}" for g in groups
        )
        limit, source = quota_limit(quotas, quota.code)
        request = (
            f"request an increase of '{quota.name}' ({quota.code}) in {plan.region} to at least {{n}} vCPUs: "
            f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {quota.code} "
            f"--desired-value {{n}} --region {plan.region}"
        )
        if limit is None:
            findings.append(Finding(
                "quota", WARN,
                f"could not read '{quota.name}' ({quota.code}): Service Quotas has no value for it here; "
                f"the spec needs {needed} vCPUs ({parts})",
                f"check the quota in the Service Quotas console for {plan.region}", quota.code,
            ))
            continue
        in_use = used.get(quota.code, 0)
        head = f"'{quota.name}' ({quota.code}) is {limit:g} vCPUs ({source}); the spec needs {needed} ({parts})"
        if needed > limit:
            findings.append(Finding("quota", FAIL, head, request.format(n=needed + in_use), quota.code))
        elif needed + in_use > limit:
            findings.append(Finding(
                "quota", WARN,
                f"{head}, and {in_use} vCPUs of it are already in use by running instances{usage_note}",
                "fine if those instances are this cluster's own nodes; otherwise "
                + request.format(n=needed + in_use),
                quota.code,
            ))
        else:
            findings.append(Finding(
                "quota", PASS, f"{head}; {in_use} in use{usage_note}", "", quota.code,
            ))
    return findings


def _when(dt: Any, now: datetime) -> str:
    if not isinstance(dt, datetime):
        return str(dt)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - now
    hours = delta.total_seconds() / 3600
    rel = (f"in {hours / 24:.1f} days" if hours >= 48 else f"in {hours:.1f} hours") if hours >= 0 else (
        f"{-hours / 24:.1f} days ago" if hours <= -48 else f"{-hours:.1f} hours ago")
    return f"{dt.astimezone(UTC):%Y-%m-%d %H:%M} UTC ({rel})"


_KIND = {contract.RESERVATION: "Capacity Reservation", contract.CAPACITY_BLOCK: "Capacity Block"}


def reservation_findings(g: NodeGroupPlan, r: dict[str, Any], now: datetime, *, counts: bool = True) -> list[Finding]:
    """Compare one ``DescribeCapacityReservations`` item with the node group that targets it; without ``counts``
    its instance count is not judged (a Karpenter pool's is, over all its reservations)."""
    rid = r.get("CapacityReservationId", g.reservation_id)
    kind = _KIND[g.capacity]
    findings: list[Finding] = []
    rtype = r.get("ReservationType", "default")
    actual_kind = contract.CAPACITY_BLOCK if rtype == contract.EC2_CAPACITY_BLOCK else contract.RESERVATION
    if actual_kind != g.capacity:
        findings.append(Finding(
            "reservation", FAIL,
            f"{rid} is a {_KIND[actual_kind]} but node group {g.name} says capacity.type: {g.capacity}",
            f"set capacity.type: {actual_kind} for node group {g.name} (the launch template and node group "
            "capacity type differ between the two)",
            g.name,
        ))

    state = r.get("State", "")
    start, end = r.get("StartDate"), r.get("EndDate")
    if state == "active":
        until = f", ends {_when(end, now)}" if end else ""
        findings.append(Finding("reservation", PASS, f"{kind} {rid} is active{until}", "", g.name))
    elif state == "scheduled":
        findings.append(Finding(
            "reservation", WARN,
            f"{kind} {rid} is scheduled: it starts {_when(start, now)}; nodes of {g.name} cannot launch before then",
            "deploy after the start date, or deploy now and expect the node group to wait for capacity",
            g.name,
        ))
    elif state in ("pending", "payment-pending", "assessing", "delayed"):
        findings.append(Finding(
            "reservation", WARN, f"{kind} {rid} is {state}, not active yet",
            "wait until it is active (aws ec2 describe-capacity-reservations)", g.name,
        ))
    else:
        findings.append(Finding(
            "reservation", FAIL, f"{kind} {rid} is {state or 'in an unknown state'} and cannot be used",
            f"reserve new capacity and put its id in capacity.reservationId of node group {g.name}", g.name,
        ))

    rtype_name = r.get("InstanceType")
    if rtype_name and rtype_name != g.instance_type:
        findings.append(Finding(
            "reservation", FAIL,
            f"{rid} reserves {rtype_name} but node group {g.name} uses {g.instance_type}",
            f"set instanceType: {rtype_name} for node group {g.name}, or use a reservation for {g.instance_type}",
            g.name,
        ))
    raz = r.get("AvailabilityZone")
    if raz and raz != g.availability_zone:
        findings.append(Finding(
            "reservation", FAIL,
            f"{rid} is in {raz} but node group {g.name} is in {g.availability_zone}",
            f"set availabilityZones: [{raz}] for node group {g.name} and list {raz} in the cluster's availabilityZones",
            g.name,
        ))

    if not counts:
        return findings
    total = int(r.get("TotalInstanceCount", 0))
    available = int(r.get("AvailableInstanceCount", 0))
    want = g.desired_size
    if total < want:
        findings.append(Finding(
            "reservation", FAIL,
            f"{rid} holds {total} instances but node group {g.name} wants desiredCapacity {want}",
            f"lower desiredCapacity (and minSize) of {g.name} to {total} or below, or reserve more instances",
            g.name,
        ))
    elif state == "active" and available < want:
        findings.append(Finding(
            "reservation", WARN,
            f"{rid} holds {total} instances but only {available} are free; node group {g.name} wants {want}",
            "fine if the running instances are this cluster's own nodes; otherwise stop the instances that "
            "use the reservation or lower desiredCapacity",
            g.name,
        ))
    else:
        findings.append(Finding(
            "reservation", PASS,
            f"{rid} holds {total} instances ({available} free) for desiredCapacity {want}", "", g.name,
        ))
    if g.max_size > total >= want:
        findings.append(Finding(
            "reservation", WARN,
            f"maxSize {g.max_size} of node group {g.name} exceeds the {total} instances of {rid}; "
            "the node group cannot scale past the reservation",
            f"set maxSize of {g.name} to {total}, or reserve more instances",
            g.name,
        ))
    return findings


@_guarded("reservation")
def check_reservations(
    ec2: Any, plan: ClusterPlan, *, now: datetime | None = None, max_attempts: int | None = None
) -> list[Finding]:
    """Each referenced Capacity Reservation / Capacity Block: exists, active, matches, big enough."""
    now = now or datetime.now(UTC)
    findings: list[Finding] = []
    for g in plan.all_node_groups:
        if g.capacity == contract.ON_DEMAND or not g.reservation_id:
            continue
        kind = _KIND[g.capacity]
        try:
            items = ec2.describe_capacity_reservations(CapacityReservationIds=[g.reservation_id])["CapacityReservations"]
        except ClientError as exc:
            if _code(exc).startswith("InvalidCapacityReservationId"):
                items = []
            else:
                raise
        if not items:
            findings.append(Finding(
                "reservation", FAIL,
                f"{kind} {g.reservation_id} of node group {g.name} does not exist in {plan.region} for this account",
                "check the id and region (aws ec2 describe-capacity-reservations "
                f"--region {plan.region}); a reservation shared from another account must be shared with this one",
                g.name,
            ))
            continue
        findings.extend(reservation_findings(g, items[0], now))
    findings.extend(_pool_reservations(ec2, plan, now))
    return findings


def _pool_reservations(ec2: Any, plan: ClusterPlan, now: datetime) -> list[Finding]:
    """Each Karpenter pool's ``capacityReservationIds``: every one usable for the pool (as a node group's), and
    together enough for the pool: a static pool's ``replicas`` must fit, ``maxNodes`` above them is a warning."""
    findings: list[Finding] = []
    for pool in plan.karpenter.pools if plan.karpenter is not None else ():
        if not pool.reservation_ids:
            continue
        g, kind = pool.group, _KIND[pool.group.capacity]
        try:
            items = _paginate(ec2, "describe_capacity_reservations", "CapacityReservations",
                              CapacityReservationIds=list(pool.reservation_ids))
        except ClientError as exc:
            if not _code(exc).startswith("InvalidCapacityReservationId"):
                raise
            items = []
        found = {r.get("CapacityReservationId"): r for r in items}
        for rid in pool.reservation_ids:
            r = found.get(rid)
            if r is None:
                findings.append(Finding(
                    "reservation", FAIL, f"{kind} {rid} of pool {g.name} does not exist in {plan.region} for this account",
                    f"check the id in capacityReservationIds of pool {g.name} (aws ec2 describe-capacity-reservations "
                    f"--region {plan.region})", g.name,
                ))
                continue
            findings.extend(reservation_findings(g, r, now, counts=False))
        total = sum(int(r.get("TotalInstanceCount", 0)) for r in found.values())
        wanted = pool.replicas or 0
        if total < wanted:
            findings.append(Finding(
                "reservation", FAIL,
                f"the {len(found)} reservations of pool {g.name} hold {total} instances but it wants {wanted} replicas",
                f"lower replicas of {g.name} to {total} or below, or add reservations to capacityReservationIds", g.name,
            ))
        elif pool.max_nodes > total:
            findings.append(Finding(
                "reservation", WARN,
                f"maxNodes {pool.max_nodes} of pool {g.name} exceeds the {total} instances of its reservations; "
                "Karpenter cannot launch past them", f"set maxNodes of {g.name} to {total}, or reserve more", g.name,
            ))
        else:
            findings.append(Finding(
                "reservation", PASS, f"pool {g.name}: {len(found)} reservations hold {total} instances", "", g.name,
            ))
    return findings


CAPACITY_RESERVATION_TYPE = "AWS::EC2::CapacityReservation"
ULTRASERVER_BLOCK_END = timedelta(minutes=60)


@_guarded("reservation")
def check_reservation_groups(
    rg: Any, ec2: Any, plan: ClusterPlan, *, now: datetime | None = None, max_attempts: int | None = None
) -> list[Finding]:
    """Each resource group an UltraServer node group launches into (the launch template's
    ``CapacityReservationResourceGroupArn``): it exists, it holds Capacity Blocks (AWS Resource Groups
    ``ListGroupResources``, filtered to ``AWS::EC2::CapacityReservation``), each usable for the node group as a named
    reservation would be (its type, zone, state and kind: :func:`reservation_findings`), and together enough
    instances for the group's desired size."""
    now = now or datetime.now(UTC)
    findings: list[Finding] = []
    for g in plan.all_node_groups:
        arn = g.reservation_resource_group_arn
        if arn is None:
            continue
        try:
            found = _paginate(rg, "list_group_resources", "Resources", Group=arn,
                              Filters=[{"Name": "resource-type", "Values": [CAPACITY_RESERVATION_TYPE]}])
        except ClientError as exc:
            if _code(exc) not in ("NotFoundException", "BadRequestException"):
                raise
            findings.append(Finding(
                "reservation", FAIL, f"resource group {arn} of node group {g.name} does not exist in {plan.region} "
                "for this account", "check the ARN (aws resource-groups list-groups); the group is the one EC2 made for "
                "the UltraServer's Capacity Blocks, or one you made of them", g.name,
            ))
            continue
        ids = sorted({str(r["Identifier"]["ResourceArn"]).rsplit("/", 1)[-1] for r in found
                      if r.get("Identifier", {}).get("ResourceType") == CAPACITY_RESERVATION_TYPE})
        if not ids:
            findings.append(Finding(
                "reservation", FAIL, f"resource group {arn} of node group {g.name} holds no capacity reservation",
                "add the UltraServer's Capacity Blocks to the group, or name one of them: capacityReservationTarget: "
                "{capacityReservationID: cr-...}", g.name,
            ))
            continue
        items = _paginate(ec2, "describe_capacity_reservations", "CapacityReservations", CapacityReservationIds=ids)
        for r in items:
            findings.extend(reservation_findings(g, r, now, counts=False))
        total = sum(int(r.get("TotalInstanceCount", 0)) for r in items
                    if r.get("InstanceType") == g.instance_type and r.get("AvailabilityZone") == g.availability_zone)
        status = PASS if total >= g.desired_size else FAIL
        ends = [r["EndDate"] for r in items if isinstance(r.get("EndDate"), datetime)]
        # "With 30 minutes (for instance types) or 60 minutes (for UltraServer types) left in your Capacity Block
        # reservation, we begin terminating any instances" (EC2, as quoted by aws/karpenter-provider-aws
        # website/content/en/docs/tasks/odcrs.md)
        minutes = int(ULTRASERVER_BLOCK_END.total_seconds() // 60)
        ending = (f"; EC2 begins terminating its instances {minutes} minutes before the first block ends, "
                  f"{_when(min(ends) - ULTRASERVER_BLOCK_END, now)}" if ends else "")
        findings.append(Finding(
            "reservation", status,
            f"resource group {arn}: {len(items)} reservations hold {total} {g.instance_type} in {g.availability_zone} "
            f"for desiredCapacity {g.desired_size} of node group {g.name}{ending}",
            "" if status == PASS else f"lower desiredCapacity (and minSize) of {g.name} to {total} or below, or add "
            "reservations of its type and zone to the group", g.name,
        ))
    return findings


TOPOLOGY_CHECK = "reservation-topology"


def _topology_rows(ec2: Any, ids: list[str]) -> list[dict[str, Any]]:
    """Every DescribeCapacityReservationTopology row for ``ids`` (botocore has no paginator for it: NextToken)."""
    rows: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"CapacityReservationIds": ids}
    while True:
        page = ec2.describe_capacity_reservation_topology(**kwargs)
        rows.extend(page.get("CapacityReservations", []))
        if not page.get("NextToken"):
            return rows
        kwargs["NextToken"] = page["NextToken"]


def _nodes_text(nodes: dict[str, list[str]]) -> str:
    return "; ".join(f"{rid}: {' > '.join(n)}" for rid, n in sorted(nodes.items()))


def check_reservation_topology(ec2: Any, plan: ClusterPlan, *, max_attempts: int | None = None) -> list[Finding]:
    """Where the reserved capacity sits in the network (EC2 DescribeCapacityReservationTopology, Amazon EC2 User
    Guide "Amazon EC2 instance topology": ``NetworkNodes`` from the top layer down, hashed per account, empty for
    instance types without topology or reservations neither active nor pending; ``GroupName``: the placement
    group the reservation is in).

    Per node group or pool with reservations: the network nodes each reservation sits under; a pool whose
    reservations (several Capacity Blocks of one type) sit under different top-layer nodes is a warning, since
    traffic between them crosses the top of the network (keep a job inside one with Kueue's required topology);
    a node group naming a placement group other than its reservation's is a failure (a reservation's capacity is
    only in the placement group it was created in). API errors are warnings: the deployment does not depend on it."""
    owners: dict[str, list[str]] = {}
    groups: dict[str, NodeGroupPlan] = {}
    for g in plan.all_node_groups:
        if g.capacity != contract.ON_DEMAND and g.reservation_id:
            owners.setdefault(g.name, []).append(g.reservation_id)
            groups[g.name] = g
    for pool in plan.karpenter.pools if plan.karpenter is not None else ():
        if pool.reservation_ids:
            owners[pool.name] = list(pool.reservation_ids)
            groups[pool.name] = pool.group
    ids = sorted({rid for rids in owners.values() for rid in rids})
    if not ids:
        return []
    try:
        rows = _topology_rows(ec2, ids)
    except (ClientError, BotoCoreError, NotImplementedError) as exc:
        return [_unread(
            TOPOLOGY_CHECK, exc, max_attempts, "the topology of the reservations could not be read",
            f"check with `aws ec2 describe-capacity-reservation-topology --region {plan.region} "
            f"--capacity-reservation-ids {' '.join(ids)}`", "",
        )]
    by_id = {r.get("CapacityReservationId"): r for r in rows}
    findings: list[Finding] = []
    for owner, rids in owners.items():
        g = groups[owner]
        nodes = {rid: list((by_id.get(rid) or {}).get("NetworkNodes") or []) for rid in rids}
        unknown = [rid for rid, n in nodes.items() if not n]
        if unknown:
            findings.append(Finding(
                TOPOLOGY_CHECK, WARN,
                f"{owner}: EC2 gives no network topology for {', '.join(unknown)} ({g.instance_type} may not support "
                "it, or the reservation is neither active nor pending)",
                "nothing to do if the instance type has no topology; otherwise run preflight again once it is active",
                owner,
            ))
        known = {rid: n for rid, n in nodes.items() if n}
        tops = {n[0] for n in known.values()}
        if len(tops) > 1:
            findings.append(Finding(
                TOPOLOGY_CHECK, WARN,
                f"{owner}: its reservations sit under {len(tops)} different top-layer network nodes "
                f"({_nodes_text(known)}); "
                "a job spread over them crosses the top of the network",
                "keep each job inside one reservation (scheduling.kueue with topology: required), or reserve "
                "blocks under one network node", owner,
            ))
        elif known:
            findings.append(Finding(
                TOPOLOGY_CHECK, PASS,
                f"{owner}: {len(known)} reservation(s) under network nodes "
                + _nodes_text(known), "", owner,
            ))
        for rid in rids:
            pg = (by_id.get(rid) or {}).get("GroupName")
            if pg and g.placement_group_name and pg != g.placement_group_name:
                findings.append(Finding(
                    TOPOLOGY_CHECK, FAIL,
                    f"{rid} is in placement group {pg} but {owner} names placement group {g.placement_group_name}",
                    f"set placementGroup: {pg} for {owner} (a reservation's capacity is only in its own group)", owner,
                ))
    return findings


# --------------------------------------------------------------------------------------------
# Add-on versions (EKS DescribeAddonVersions)
#
# Request and response: Amazon EKS API Reference, DescribeAddonVersions
# (https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeAddonVersions.html): GET
# /addons/supported-versions?addonName=&kubernetesVersion=, paginated with nextToken (boto3's paginator
# for it has result key ``addons``, botocore data/eks/2017-11-01/paginators-1.json); each
# ``addons[]`` item (AddonInfo) has ``addonName`` and ``addonVersions[]`` (AddonVersionInfo) with
# ``addonVersion`` and ``compatibilities[]`` (Compatibility: ``clusterVersion``, ``defaultVersion``,
# ``platformVersions``). The operation's errors are ServerException, ResourceNotFoundException and
# InvalidParameterException (botocore data/eks/2017-11-01/service-2.json).
# --------------------------------------------------------------------------------------------

ADDON_CHECK = "addon-version"
ADDON_VERSIONS_SHOWN = 5
"""How many of the newest offered builds a failed add-on finding names."""


def addon_version_key(version: str) -> tuple[int, ...]:
    """Sort key of an add-on build ``vX.Y.Z-eksbuild.N``: the numbers in order (eksbuild last)."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


@dataclass(frozen=True)
class AddonOffer:
    """What EKS offers for one add-on and one Kubernetes version."""

    versions: tuple[str, ...]
    """The builds offered for the Kubernetes version, newest first."""
    default: str | None
    """The build EKS marks ``defaultVersion`` for the Kubernetes version (installed when none is given)."""


def addon_offer(eks: Any, name: str, kubernetes_version: str) -> AddonOffer | None:
    """The builds of ``name`` EKS offers for ``kubernetes_version``; None when the region knows no such add-on.

    An add-on that exists but has no build for this Kubernetes version comes back with no versions.
    """
    try:
        infos = _paginate(eks, "describe_addon_versions", "addons", addonName=name, kubernetesVersion=kubernetes_version)
    except ClientError as exc:
        if _code(exc) == "ResourceNotFoundException":
            return None
        raise
    infos = [i for i in infos if i.get("addonName", name) == name]
    versions: set[str] = set()
    default: str | None = None
    for info in infos:
        for v in info.get("addonVersions", []):
            compat = [c for c in v.get("compatibilities", []) if c.get("clusterVersion") == kubernetes_version]
            if v.get("compatibilities") and not compat:
                continue
            versions.add(v["addonVersion"])
            if any(c.get("defaultVersion") for c in compat):
                default = v["addonVersion"]
    if not infos:
        # Filtered by Kubernetes version, an add-on without a build for it may come back empty too:
        # ask once more without the filter to tell "not for this version" from "unknown here".
        try:
            if not _paginate(eks, "describe_addon_versions", "addons", addonName=name):
                return None
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                return None
            raise
    return AddonOffer(tuple(sorted(versions, key=addon_version_key, reverse=True)), default)


def _addon_api_warning(name: str, exc: Exception, *, max_attempts: int | None, subject: str) -> Finding:
    """An add-on that could not be looked up: a warning with the reason (the deployment may still work)."""
    if isinstance(exc, ClientError):
        f = api_error_finding(ADDON_CHECK, exc, max_attempts=max_attempts, subject=subject)
        return Finding(ADDON_CHECK, WARN, f"{name}: {f.message}", f.fix, subject)
    return Finding(
        ADDON_CHECK, WARN, f"{name}: the add-on versions could not be read ({exc})",
        "run preflight again; check the network and AWS_ENDPOINT_URL if it persists", subject,
    )


def addon_version_findings(
    plan: ClusterPlan, name: str, version: str | None, offer: AddonOffer | None
) -> list[Finding]:
    """Compare one add-on of the plan with what EKS offers for the plan's Kubernetes version."""
    k8s, region = plan.kubernetes_version, plan.region
    pinned = spec_addons.pinned_version(name, k8s)
    by_efa_stack = version is not None and version == pinned
    if offer is None:
        return [Finding(
            ADDON_CHECK, FAIL, f"EKS does not know the add-on {name} in {region}",
            f"remove {name} from addons, or check its name with `aws eks describe-addon-versions --region {region} "
            "--query 'addons[].addonName'` (some add-ons are offered in some regions only)", name,
        )]
    newest = offer.versions[:ADDON_VERSIONS_SHOWN]
    offered = ", ".join(newest) + (f" and {len(offer.versions) - len(newest)} older" if len(offer.versions) > len(newest) else "")
    if not offer.versions:
        return [Finding(
            ADDON_CHECK, FAIL, f"EKS offers no build of {name} for Kubernetes {k8s} in {region}",
            f"remove {name} from addons, or choose a Kubernetes version it supports (metadata.version; see `aws eks "
            f"describe-addon-versions --addon-name {name} --region {region}`)", name,
        )]
    default_text = f"EKS's default is {offer.default}" if offer.default else "EKS marks no default build"
    if version is None:
        if offer.default is None:
            return [Finding(
                ADDON_CHECK, WARN,
                f"{name} has no version set and EKS marks no default build for Kubernetes {k8s}; "
                f"offered: {offered}",
                f"set version: {newest[0]} for {name} in addons", name,
            )]
        return [Finding(
            ADDON_CHECK, PASS, f"{name}: no version set, EKS installs its default {offer.default} for Kubernetes {k8s}",
            "", name,
        )]
    if version in offer.versions:
        return [Finding(
            ADDON_CHECK, PASS,
            f"{name} {version}{' (pinned by efa-stack)' if by_efa_stack else ''} is offered for Kubernetes {k8s} "
            f"in {region} ({default_text}; newest {newest[0]})",
            "", name,
        )]
    if by_efa_stack:
        fix = (f"set addons: [{{name: {name}, version: {newest[0]}}}] in the spec (or update the pin in "
               "efa_stack/planning/data/addons.json)")
    else:
        fix = (f"set version: {newest[0]} for {name} in addons"
               + (f", or leave version out for EKS's default {offer.default}" if offer.default else ""))
    return [Finding(
        ADDON_CHECK, FAIL,
        f"{name} {version}{' (pinned by efa-stack)' if by_efa_stack else ''} is not offered for Kubernetes {k8s} "
        f"in {region}; offered: {offered}",
        fix, name,
    )]


def check_addon_versions(eks: Any, plan: ClusterPlan, *, max_attempts: int | None = None) -> list[Finding]:
    """Each add-on of the plan (user's and efa-stack's) against the builds EKS offers for its Kubernetes version.

    API errors become warnings (the deployment would still try); missing credentials abort preflight.
    """
    findings: list[Finding] = []
    for i, addon in enumerate(plan.addons):
        try:
            offer = addon_offer(eks, addon.name, plan.kubernetes_version)
        except (ClientError, BotoCoreError, NotImplementedError) as exc:
            abort = abort_for(exc)
            if abort is not None:
                raise abort from exc
            findings.append(_addon_api_warning(addon.name, exc, max_attempts=max_attempts, subject=addon.name))
            if isinstance(exc, ClientError) and _code(exc) in ACCESS_DENIED_CODES:
                rest = [a.name for a in plan.addons[i + 1:]]
                if rest:
                    findings.append(Finding(
                        ADDON_CHECK, WARN, f"not checked either (same permission): {', '.join(rest)}",
                        "allow eks:DescribeAddonVersions for the identity preflight runs as", "eks",
                    ))
                break
            continue
        findings.extend(addon_version_findings(plan, addon.name, addon.version, offer))
    return findings


CLUSTER_VERSION_CHECK = "cluster-version"


def _unread(check: str, exc: Exception, max_attempts: int | None, message: str, fix: str, subject: str) -> Finding:
    """A warning for a check whose AWS answer could not be read (the deployment does not depend on it); missing
    or bad credentials abort preflight instead."""
    abort = abort_for(exc)
    if abort is not None:
        raise abort from exc
    why = api_error_finding(check, exc, max_attempts=max_attempts).message if isinstance(exc, ClientError) else str(exc)
    return Finding(check, WARN, f"{message}: {why}", fix, subject)


def check_cluster_version(eks: Any, plan: ClusterPlan, *, max_attempts: int | None = None) -> list[Finding]:
    """The plan's Kubernetes version against the versions EKS offers in the region for new clusters
    (EKS DescribeClusterVersions: ``versionStatus`` STANDARD_SUPPORT, EXTENDED_SUPPORT or UNSUPPORTED,
    botocore's eks-2017-11-01 model). efa-stack's own dated data can lag a new release; this asks EKS.

    An API error is a warning (the deployment may still work, and CreateCluster says so if not); missing
    credentials abort preflight."""
    k8s, region = plan.kubernetes_version, plan.region
    try:
        rows = _paginate(eks, "describe_cluster_versions", "clusterVersions", clusterVersions=[k8s])
        row = next((r for r in rows if r.get("clusterVersion") == k8s), None)
        status = (row or {}).get("versionStatus") or str((row or {}).get("status", "")).upper().replace("-", "_")
        listed = _paginate(eks, "describe_cluster_versions", "clusterVersions") if (
            row is None or status == "UNSUPPORTED") else []
    except (ClientError, BotoCoreError, NotImplementedError) as exc:
        return [_unread(
            CLUSTER_VERSION_CHECK, exc, max_attempts, f"EKS in {region} could not say whether it offers Kubernetes {k8s}",
            f"check with `aws eks describe-cluster-versions --region {region} --cluster-versions {k8s}`", k8s,
        )]
    if row is None or status == "UNSUPPORTED":
        offered = sorted({r["clusterVersion"] for r in listed if r.get("versionStatus", r.get("status")) not in (
            "UNSUPPORTED", "unsupported")}, key=addon_version_key)
        return [Finding(
            CLUSTER_VERSION_CHECK, FAIL, f"EKS in {region} does not offer Kubernetes {k8s} for new clusters",
            f"set metadata.version to one EKS offers there: {', '.join(offered) or 'none listed'}", k8s,
        )]
    findings = _tier_findings(plan, row)
    if status == "EXTENDED_SUPPORT":
        end = row.get("endOfExtendedSupportDate")
        return [*findings, Finding(
            CLUSTER_VERSION_CHECK, WARN,
            f"Kubernetes {k8s} is in extended support in {region}"
            + (f" until {end:%Y-%m-%d}" if isinstance(end, datetime) else "")
            + ": the cluster costs more per hour",
            "set metadata.version to a version in standard support to avoid the extra cost", k8s,
        )]
    return [*findings, Finding(
        CLUSTER_VERSION_CHECK, PASS, f"EKS in {region} offers Kubernetes {k8s} ({status.lower()})", "", k8s)]


NVIDIA_DRIVER_CHECK = "nvidia-driver"
AMI_SSM_PATH = {"AL2023_X86_64_NVIDIA": "amazon-linux-2023/x86_64/nvidia", "AL2023_ARM_64_NVIDIA": "amazon-linux-2023/arm64/nvidia"}
"""The SSM path of each EKS AL2023 NVIDIA AMI type (Amazon EKS User Guide, "Retrieve recommended Amazon Linux AMI IDs":
``/aws/service/eks/optimized-ami/<k8s>/<path>/recommended/<sub-parameter>``); ``release_version`` holds the release
EKS creates a node group from when the node group names none (``1.35.4-20260917``)."""


def recommended_release_parameter(kubernetes_version: str, ami_type: str) -> str:
    return f"/aws/service/eks/optimized-ami/{kubernetes_version}/{AMI_SSM_PATH[ami_type]}/recommended/release_version"


def _driver_finding(group: NodeGroupPlan, k8s: str, release: str, how: str) -> Finding:
    verdict = node_software.release_finding(group, k8s, release, how)
    return Finding(NVIDIA_DRIVER_CHECK, verdict.status, f"{group.name}: {verdict.message}", verdict.fix, group.name)


def check_nvidia_drivers(ssm: Any, plan: ClusterPlan, *, max_attempts: int | None = None) -> list[Finding]:
    """The NVIDIA driver the EKS AL2023 NVIDIA AMI gives each GPU node group's instance type, against the known-bad
    rows of the table of EFA software (efa_stack/planning/node_software.py): a managed node group gets its
    ``releaseVersion``, or without one the release SSM recommends today (EKS creates it from that); a Karpenter pool
    its pinned ``amiVersion``; a custom AMI cannot be judged before it runs. An unread parameter or a release the
    data does not know warns: ``efa-stack verify --acceptance`` reads the driver on the nodes."""
    findings: list[Finding] = []
    k8s = plan.kubernetes_version
    releases: dict[str, str | None] = {}
    for g in plan.node_groups:
        if g.instance.accelerator != "nvidia":
            continue
        if g.ami_id is not None:
            findings.append(Finding(
                NVIDIA_DRIVER_CHECK, WARN, f"{g.name}: custom AMI {g.ami_id}: its NVIDIA driver is not known here",
                "after the deploy, run `efa-stack verify --acceptance`: it reads the driver on the nodes and fails a "
                "known-bad one", g.name,
            ))
            continue
        pinned = node_software.release_of(g.release_version) if g.release_version else None
        if pinned is not None:  # the node group's releaseVersion: what EKS creates it from
            findings.append(_driver_finding(g, k8s, pinned, f"the node group's releaseVersion {g.release_version}"))
            continue
        if ssm is None or g.ami_type not in AMI_SSM_PATH:
            continue
        name = recommended_release_parameter(k8s, g.ami_type)
        if name not in releases:
            try:
                value = ssm.get_parameter(Name=name)["Parameter"]["Value"]
            except (ClientError, BotoCoreError) as exc:
                findings.append(_unread(
                    NVIDIA_DRIVER_CHECK, exc, max_attempts, f"{g.name}: the AMI release EKS would use could not be read",
                    f"check with `aws ssm get-parameter --name {name}`; after the deploy, `efa-stack verify "
                    "--acceptance` reads the driver on the nodes", g.name,
                ))
                continue
            releases[name] = node_software.release_of(str(value))
        release = releases[name]
        if release is None:
            findings.append(Finding(
                NVIDIA_DRIVER_CHECK, WARN, f"{g.name}: SSM {name} holds no amazon-eks-ami release", "", g.name))
            continue
        findings.append(_driver_finding(g, k8s, release, f"the release EKS creates the node group from ({name})"))
    for pool in plan.karpenter.pools if plan.karpenter else ():
        if pool.group.instance.accelerator == "nvidia":
            findings.append(_driver_finding(pool.group, k8s, pool.ami_version, "the pool's amiVersion"))
    return findings


def _tier_findings(plan: ClusterPlan, row: dict[str, Any]) -> list[Finding]:
    """The spec's Provisioned Control Plane tier against the tiers EKS lists for the version
    (DescribeClusterVersions ``controlPlaneScalingTiers[].tierName``, with each tier's API request concurrency and
    pod scheduling rate)."""
    tier = plan.control_plane_tier
    if tier is None or tier == "standard":
        return []
    tiers = {t.get("tierName"): t for t in row.get("controlPlaneScalingTiers", [])}
    k8s = plan.kubernetes_version
    if tier not in tiers:
        offered = ", ".join(sorted(t for t in tiers if t)) or "none"
        return [Finding(
            CLUSTER_VERSION_CHECK, FAIL, f"EKS in {plan.region} offers no control plane tier {tier} for Kubernetes {k8s}",
            f"set controlPlaneScalingConfig.tier to one EKS offers there ({offered}), or remove it", tier,
        )]
    info = tiers[tier]
    figures = ", ".join(f"{label} {info[key]}" for key, label in (
        ("apiRequestConcurrency", "API request concurrency"), ("podSchedulingRatePerSecond", "pods scheduled per second"),
        ("clusterDatabaseSizeGb", "database GB")) if key in info)
    return [Finding(
        CLUSTER_VERSION_CHECK, PASS,
        f"EKS offers control plane tier {tier} for Kubernetes {k8s}" + (f" ({figures})" if figures else ""), "", tier,
    )]


def check_training_images(plan: ClusterPlan) -> list[Finding]:
    """Each training job's prebuilt image against the compatibility data's known-bad builds (offline): a dated
    tag of a bad build fails; a moving tag that ever pointed at a bad build warns (a node keeps what it pulled)."""
    from efa_stack.planning.image_compat import image_problems

    findings: list[Finding] = []
    for i, job in enumerate(plan.training_jobs):
        for p in image_problems(f"trainingJobs[{i}].image", job.image):
            status = WARN if p.message.startswith("the tag moves") else FAIL
            findings.append(Finding("training image", status, f"{job.name}: {p.message}", p.fix, p.field))
        if not findings or findings[-1].subject != f"trainingJobs[{i}].image":
            findings.append(Finding("training image", PASS, f"{job.name}: {job.image}", "", f"trainingJobs[{i}].image"))
    return findings


def run_preflight(
    plan: ClusterPlan,
    session: Any = None,
    *,
    clients: Clients | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    now: datetime | None = None,
) -> list[Finding]:
    """Every check for ``plan``; raises :class:`efa_stack.errors.UserError` when AWS cannot be asked at all."""
    if clients is None:
        if session is None:
            import boto3

            session = boto3.Session()
        try:
            clients = Clients.from_session(session, plan.region, max_attempts)
        except BotoCoreError as exc:
            raise abort_for(exc) or UserError(
                f"cannot create AWS clients ({exc})", "check the AWS profile, region and AWS_ENDPOINT_URL"
            ) from exc
    attempts = clients.max_attempts
    findings: list[Finding] = []
    findings += check_efa_support(clients.ec2, plan, max_attempts=attempts)
    findings += check_zone_offerings(clients.ec2, plan, max_attempts=attempts)
    findings += check_quotas(clients.quotas, clients.ec2, plan, max_attempts=attempts)
    findings += check_reservations(clients.ec2, plan, now=now, max_attempts=attempts)
    findings += check_reservation_topology(clients.ec2, plan, max_attempts=attempts)
    if clients.resource_groups is not None:
        findings += check_reservation_groups(clients.resource_groups, clients.ec2, plan, now=now, max_attempts=attempts)
    if clients.eks is not None:
        findings += check_cluster_version(clients.eks, plan, max_attempts=attempts)
        findings += check_addon_versions(clients.eks, plan, max_attempts=attempts)
    findings += check_nvidia_drivers(clients.ssm, plan, max_attempts=attempts)
    findings += check_training_images(plan)
    return findings


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def exit_code(findings: Iterable[Finding]) -> int:
    return 1 if any(f.status == FAIL for f in findings) else 0


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    out: dict[str, int] = {PASS: 0, WARN: 0, FAIL: 0}
    for f in findings:
        out[f.status] += 1
    return out


def to_json(findings: list[Finding], plan: ClusterPlan | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if plan is not None:
        data.update({"cluster": plan.name, "region": plan.region})
    data.update({
        "ok": exit_code(findings) == 0,
        "summary": counts(findings),
        "findings": [asdict(f) for f in findings],
    })
    return data


def render(findings: list[Finding], console: Any, plan: ClusterPlan | None = None) -> None:
    """A rich table, one row per finding, then a one-line summary."""
    from rich.markup import escape
    from rich.table import Table

    title = escape(f"preflight: {plan.name} in {plan.region}") if plan is not None else "preflight"
    table = Table(title=title, show_lines=False, expand=False)
    table.add_column("status", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("subject", overflow="fold")
    table.add_column("finding")
    table.add_column("fix")
    for f in findings:
        table.add_row(
            styled(f.status), escape(f.check), escape(f.subject), escape(f.message), escape(f.fix)
        )
    console.print(table)
    c = counts(findings)
    verdict = styled(FAIL) if c[FAIL] else styled(WARN, "OK with warnings") if c[WARN] else styled(PASS, "OK")
    console.print(f"{verdict}: {c[PASS]} pass, {c[WARN]} warn, {c[FAIL]} fail")
