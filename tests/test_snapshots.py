"""One snapshot per stack; asset hashes normalised so snapshots change only when behaviour does.

Update on purpose with `make snapshots` and read the diff in review.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import CLUSTERS, normalise_assets, synth_spec

SPECS = ["default.yaml", "capacity-block.yaml"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("stack", ["network", "cluster"])
def test_stack_snapshot(spec, stack, snapshot):
    s = synth_spec(str(CLUSTERS / spec))
    text = normalise_assets(json.dumps(s.template(stack), indent=1, sort_keys=True))
    assert json.loads(text) == snapshot
