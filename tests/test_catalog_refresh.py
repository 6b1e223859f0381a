"""`efa-stack catalog refresh`: the checked-in catalog is exactly what the refresh makes of moto's recorded EC2 answers
(real data), so the data file cannot drift from its generator. The unit tier hands the recording to the refresh's
catalog builder as the pages DescribeInstanceTypes returns; the integration tier runs the whole command against moto's
EC2 API (its XML round trip of 1,395 instance types costs about 4 s of CPU)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from efa_stack.planning.catalog import CATALOG_FILE, REGIONS_FILE
from tests.conftest import fake_aws_credentials
from tests.support import moto_instance_types


class RecordedEc2:
    """An EC2 client whose ``describe_instance_types`` pages (of 100, as EC2's) are moto's recording."""

    def get_paginator(self, operation: str) -> Any:
        assert operation == "describe_instance_types"
        return self

    def paginate(self) -> Any:
        items = list(moto_instance_types().values())
        for i in range(0, len(items), 100):
            yield {"InstanceTypes": items[i:i + 100]}


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    from efa_stack.tools.catalog_refresh import build_catalog

    return build_catalog(RecordedEc2(), source="moto's recording")


def test_the_catalog_is_what_the_refresh_makes_of_the_recorded_answers(recorded):
    checked_in = json.loads(CATALOG_FILE.read_text())
    assert recorded["instance_types"] == checked_in["instance_types"], "run `make catalog`"
    # 303 EFA-capable types in moto's recording, plus dl1.24xlarge and p6e-gb200.36xlarge from the supplement
    assert recorded["efa_capable"] == checked_in["efa_capable"] == 305


def test_refresh_records_per_card_data(recorded):
    p5 = recorded["instance_types"]["p5.48xlarge"]
    assert p5["max_efa_interfaces"] == 32 and len(p5["network_cards"]) == 32
    assert p5["network_cards"][0]["interface_types"] == ["interface", "efa", "efa-only"]


@pytest.fixture(scope="module")
def refreshed(tmp_path_factory):
    import boto3
    from moto import mock_aws

    from efa_stack.tools.catalog_refresh import refresh

    out = tmp_path_factory.mktemp("catalog")
    mp = pytest.MonkeyPatch()
    fake_aws_credentials(mp, region="us-east-1")
    with mock_aws():
        summary = refresh(
            boto3.Session(region_name="us-east-1"), region="us-east-1",
            catalog_path=out / "catalog.json", regions_path=out / "regions.json", all_regions=False,
        )
    mp.undo()
    return summary, json.loads((out / "catalog.json").read_text()), json.loads((out / "regions.json").read_text())


@pytest.mark.integration
def test_refresh_against_moto_reproduces_the_checked_in_catalog(refreshed):
    summary, catalog, _ = refreshed
    checked_in = json.loads(CATALOG_FILE.read_text())
    assert catalog["instance_types"] == checked_in["instance_types"], "run `make catalog`"
    assert summary.efa_capable == checked_in["efa_capable"] == 305


@pytest.mark.integration
def test_refresh_writes_region_zones(refreshed):
    _, _, regions = refreshed
    assert regions["regions"]["us-east-1"] == json.loads(REGIONS_FILE.read_text())["regions"]["us-east-1"]
