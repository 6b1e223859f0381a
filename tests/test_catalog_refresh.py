"""`efa-stack catalog refresh` against moto (its recorded EC2 answers are real data): the checked-in
catalog is exactly what the refresh writes, so the data file cannot drift from its generator."""

from __future__ import annotations

import json

import pytest
from moto import mock_aws

from efa_stack.planning.catalog import CATALOG_FILE, REGIONS_FILE
from tests.conftest import fake_aws_credentials


@pytest.fixture(scope="module")
def refreshed(tmp_path_factory):
    import boto3

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


def test_refresh_reproduces_the_checked_in_catalog(refreshed):
    summary, catalog, _ = refreshed
    checked_in = json.loads(CATALOG_FILE.read_text())
    assert catalog["instance_types"] == checked_in["instance_types"], "run `make catalog`"
    # 303 EFA-capable types in moto's recording, plus dl1.24xlarge and p6e-gb200.36xlarge from the supplement
    assert summary.efa_capable == checked_in["efa_capable"] == 305


def test_refresh_writes_region_zones(refreshed):
    _, _, regions = refreshed
    assert regions["regions"]["us-east-1"] == json.loads(REGIONS_FILE.read_text())["regions"]["us-east-1"]


def test_refresh_records_per_card_data(refreshed):
    _, catalog, _ = refreshed
    p5 = catalog["instance_types"]["p5.48xlarge"]
    assert p5["max_efa_interfaces"] == 32 and len(p5["network_cards"]) == 32
    assert p5["network_cards"][0]["interface_types"] == ["interface", "efa", "efa-only"]
