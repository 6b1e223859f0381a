"""``efa-stack lookup``: the availability zones of an existing VPC's subnets, asked of EC2 once and recorded in
cdk.context.json, which the CDK CLI passes to every ``cdk synth`` (as it does for its own context lookups).

eksctl reads a subnet's zone from EC2 when ``vpc.subnets`` gives only its id (eksctl-io/eksctl@v0.230.0
pkg/vpc/vpc.go ``ImportSubnets``: DescribeSubnets); a synth that must work offline cannot, so the zones are
recorded here and read back as context ``efa-stack:subnet-zones`` ({subnet id: zone}). A subnet with ``az`` or
whose entry is named after its zone needs no lookup.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from efa_stack import contract
from efa_stack.errors import UserError
from efa_stack.planning import catalog
from efa_stack.spec.models import ClusterSpec


def subnets_to_look_up(spec: ClusterSpec) -> list[str]:
    """Ids of ``vpc.subnets`` entries whose zone the spec does not say (no ``az``, not named by a zone)."""
    if spec.vpc.subnets is None:
        return []
    zones = set(catalog.regions().get(spec.metadata.region, []))
    return sorted({
        subnet.id for entries in (spec.vpc.subnets.private, spec.vpc.subnets.public)
        for key, subnet in entries.items() if not subnet.az and key not in zones
    })


def look_up_zones(ec2: Any, spec: ClusterSpec) -> dict[str, str]:
    """EC2 DescribeSubnets for :func:`subnets_to_look_up`: {subnet id: zone}; every subnet must be in ``vpc.id``."""
    from botocore.exceptions import ClientError

    ids = subnets_to_look_up(spec)
    if not ids:
        return {}
    region = spec.metadata.region
    try:
        rows = ec2.describe_subnets(SubnetIds=ids)["Subnets"]
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "InvalidSubnetID.NotFound":
            raise UserError(
                f"EC2 in {region} does not know subnet(s) of vpc.subnets: {exc.response['Error'].get('Message', '')}",
                f"check the ids and metadata.region (aws ec2 describe-subnets --region {region} --filters "
                f"Name=vpc-id,Values={spec.vpc.id})",
            ) from None
        from efa_stack.tools.preflight import abort_for

        raise abort_for(exc) or UserError(
            f"EC2 DescribeSubnets failed ({code}): {exc}", "check the credentials' ec2:DescribeSubnets permission",
        ) from None
    zones: dict[str, str] = {}
    for row in rows:
        if row.get("VpcId") != spec.vpc.id:
            raise UserError(
                f"subnet {row['SubnetId']} is in {row.get('VpcId')}, not in vpc.id {spec.vpc.id}",
                "list only subnets of vpc.id in vpc.subnets, or correct vpc.id",
            )
        zones[row["SubnetId"]] = row["AvailabilityZone"]
    return zones


def recorded_zones(context_file: Path = Path(contract.CDK_CONTEXT_FILE)) -> dict[str, str]:
    """The zones recorded in ``context_file`` (none when it does not exist or holds none)."""
    try:
        data = json.loads(context_file.read_text())
    except (OSError, ValueError):
        return {}
    value = data.get(contract.SUBNET_ZONES_CONTEXT) if isinstance(data, dict) else None
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def record_zones(zones: dict[str, str], context_file: Path = Path(contract.CDK_CONTEXT_FILE)) -> dict[str, str]:
    """Merge ``zones`` into ``context_file`` (created if missing; other keys kept); returns every recorded zone."""
    data: dict[str, Any] = {}
    if context_file.exists():
        try:
            data = json.loads(context_file.read_text())
        except ValueError as exc:
            raise UserError(
                f"{context_file} is not JSON ({exc})", f"fix or delete {context_file}; the CDK CLI rewrites it",
            ) from None
        if not isinstance(data, dict):
            raise UserError(f"{context_file} does not hold a JSON object", f"fix or delete {context_file}")
    merged = {**recorded_zones(context_file), **zones}
    data[contract.SUBNET_ZONES_CONTEXT] = dict(sorted(merged.items()))
    context_file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return merged
