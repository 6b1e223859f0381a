"""One snapshot per CDK stack, of clusters/default.yaml (the storage part's, of clusters/fsx.yaml: tests/test_storage.py); asset hashes
normalised so snapshots change only when behaviour does. Other specs are covered by targeted, resource-scoped
assertions (tests/test_cluster_stack.py, tests/test_network_stack.py, ...), cfn-lint and the project rules.

Update on purpose with `make snapshots` and read the diff in review.
"""

from __future__ import annotations

import json

import pytest

from tests.support import CLUSTERS, normalise_assets, synth_spec

SPECS = ["default.yaml"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("stack", ["cluster"])
def test_stack_snapshot(spec, stack, snapshot):
    s = synth_spec(str(CLUSTERS / spec))
    text = normalise_assets(json.dumps(s.template(stack), indent=1, sort_keys=True))
    assert json.loads(text) == snapshot
