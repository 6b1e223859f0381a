"""Regenerate the instance catalog and the region/AZ list from EC2 with boto3.

Works against any endpoint the AWS SDK is pointed at (``AWS_ENDPOINT_URL``), which is how the
checked-in data was generated offline from moto's recorded copy of the EC2 API.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any

from efa_stack.planning.catalog import CATALOG_FILE, REGIONS_FILE, SUPPLEMENT_FILE, InstanceType, record_from_api


@dataclass(frozen=True)
class RefreshSummary:
    """What a refresh wrote: counts and the two files."""

    instance_types: int
    efa_capable: int
    regions: int
    catalog: str
    regions_file: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def describe_all_instance_types(ec2: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in ec2.get_paginator("describe_instance_types").paginate():
        items.extend(page["InstanceTypes"])
    return items


def supplement(path: Path = SUPPLEMENT_FILE) -> dict[str, dict[str, Any]]:
    """The cited records of types EC2 sells that an API answer may lack (validated like the rest)."""
    records = json.loads(path.read_text())["instance_types"]
    for record in records.values():
        InstanceType.model_validate(record)
    return records


def build_catalog(
    ec2: Any, *, source: str, generated: str | None = None, extra: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Every instance type the API returns, keyed by name and sorted, plus the supplement's types it lacks.

    No filter on ``CurrentGeneration``: EC2 (and moto's recording of it) marks types it still sells,
    c5, m5 and r5 among them, as previous generation, and they are the system node groups of most
    eksctl configs (m5.large is eksctl's default).
    """
    records = {item["InstanceType"]: record_from_api(item) for item in describe_all_instance_types(ec2)}
    for name, record in (supplement() if extra is None else extra).items():
        records.setdefault(name, record)
    return {
        "source": source,
        "generated": generated or date.today().isoformat(),
        "efa_capable": sum(1 for r in records.values() if r["efa_supported"]),
        "instance_types": dict(sorted(records.items())),
    }


def build_regions(session: Any, region_names: list[str]) -> dict[str, Any]:
    regions: dict[str, list[str]] = {}
    for name in region_names:
        ec2 = session.client("ec2", region_name=name)
        zones = ec2.describe_availability_zones(
            Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}]
        )["AvailabilityZones"]
        regions[name] = sorted(z["ZoneName"] for z in zones)
    return {"regions": dict(sorted(regions.items()))}


def dump(data: dict[str, Any]) -> str:
    """JSON with one instance type per line, so a refresh reads well in a diff."""
    if "instance_types" not in data:
        return json.dumps(data, indent=1, sort_keys=True) + "\n"
    head = {k: v for k, v in data.items() if k != "instance_types"}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f" {json.dumps(k)}: {json.dumps(v)},")
    lines.append(' "instance_types": {')
    items = list(data["instance_types"].items())
    for i, (name, rec) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        lines.append(f"  {json.dumps(name)}: {json.dumps(rec, sort_keys=True)}{comma}")
    lines.append(" }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def refresh(
    session: Any,
    *,
    region: str,
    catalog_path: Path = CATALOG_FILE,
    regions_path: Path = REGIONS_FILE,
    all_regions: bool = True,
    source: str | None = None,
) -> RefreshSummary:
    """Write both data files; returns what was written."""
    ec2 = session.client("ec2", region_name=region)
    catalog = build_catalog(ec2, source=source or f"EC2 DescribeInstanceTypes ({region})")
    catalog_path.write_text(dump(catalog))
    names = (
        sorted(r["RegionName"] for r in ec2.describe_regions()["Regions"]) if all_regions else [region]
    )
    regions = build_regions(session, names)
    regions_path.write_text(dump(regions))
    return RefreshSummary(
        instance_types=len(catalog["instance_types"]),
        efa_capable=catalog["efa_capable"],
        regions=len(regions["regions"]),
        catalog=str(catalog_path),
        regions_file=str(regions_path),
    )
