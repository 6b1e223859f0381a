"""Advice passes every rule: where a problem's fix proposes a value, that value written back into the file is
accepted (no second refusal in the next run).

Each case: a spec that is valid but for one value, the field that is refused, the value the fix proposes (read
from the fix text), and where it goes; the spec with the proposal in place must plan without any problem.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.support import BASE, plan_of, problems_of

ZONES = "availabilityZones: [us-west-2a, us-west-2b]\n"
GROUP_FIELDS = "    efaEnabled: true\n"
"""The last line of BASE's node group: fields added after it belong to the group."""


@dataclass(frozen=True)
class Case:
    spec: str
    field: str
    proposal: str
    """A regex whose first group is the proposed value, searched in the fix."""
    rewrite: Callable[[str, str], str]
    """(spec, proposed value) -> the spec as the fix says to write it."""


def _group(extra: str) -> str:
    return BASE + extra


def _replace(old: str, new: str) -> Callable[[str, str], str]:
    return lambda spec, value: spec.replace(old, new.format(value))


POOL = "karpenterNodePools:\n  - {name: pool, instanceType: p5.48xlarge, maxNodes: 3, availabilityZone: us-west-2a"
VERSION = r"(v\d+\.\d+\.\d+-eksbuild\.\d+)"
CASES = {
    # the VPC CNI written without its "v" and below efa-stack's minimum: one fix for both
    "vpc-cni build without v, too old": Case(
        BASE + "addons:\n  - {name: vpc-cni, version: 1.18.1-eksbuild.1}\n", "addons[0].version", VERSION,
        _replace("version: 1.18.1-eksbuild.1", "version: {}"),
    ),
    "vpc-cni build without v": Case(
        BASE + "addons:\n  - {name: vpc-cni, version: 1.20.1-eksbuild.3}\n", "addons[0].version", VERSION,
        _replace("version: 1.20.1-eksbuild.3", "version: {}"),
    ),
    "vpc-cni too old": Case(
        BASE + "addons:\n  - {name: vpc-cni, version: v1.18.1-eksbuild.1}\n", "addons[0].version", VERSION,
        _replace("version: v1.18.1-eksbuild.1", "version: {}"),
    ),
    "io1 without IOPS": Case(
        _group("    volumeType: io1\n"), "managedNodeGroups[0].volumeIOPS", r"add volumeIOPS: (\d+)",
        lambda s, v: s + f"    volumeIOPS: {v}\n",
    ),
    # io1: 64,000 IOPS in EC2's range, but at most 50 per GiB: 10,000 for 200 GiB
    "io1 IOPS above the range": Case(
        _group("    volumeType: io1\n    volumeIOPS: 70000\n"), "managedNodeGroups[0].volumeIOPS",
        r"between \d+ and (\d+)", _replace("volumeIOPS: 70000", "volumeIOPS: {}"),
    ),
    # gp3: 1,000 MiB/s in EC2's range, but at most 0.25 MiB/s per IOPS: 750 at the 3,000 baseline
    "gp3 throughput above the range": Case(
        _group("    volumeThroughput: 2000\n"), "managedNodeGroups[0].volumeThroughput",
        r"between \d+ and (\d+)", _replace("volumeThroughput: 2000", "volumeThroughput: {}"),
    ),
    "gp3 volume too large": Case(
        _group("    volumeSize: 20000\n"), "managedNodeGroups[0].volumeSize", r"use at most (\d+) GiB",
        _replace("volumeSize: 20000", "volumeSize: {}"),
    ),
    # the other way out of the same problem: io2, which needs its IOPS named too
    "gp3 volume too large, as io2": Case(
        _group("    volumeSize: 20000\n"), "managedNodeGroups[0].volumeSize",
        r"or (volumeType: io2 with volumeIOPS: \d+)",
        lambda s, v: s + "    " + v.replace(" with ", "\n    ") + "\n",
    ),
    "a whole number written as a decimal": Case(
        _group("    volumeSize: 300.0\n"), "managedNodeGroups[0].volumeSize", r"(volumeSize: \d+)",
        _replace("volumeSize: 300.0", "{}"),
    ),
    "a whole number in quotes": Case(
        _group('    volumeSize: "300"\n'), "managedNodeGroups[0].volumeSize", r"(volumeSize: \d+)",
        _replace('volumeSize: "300"', "{}"),
    ),
    "pod range in the VPC's own range": Case(
        BASE.replace(ZONES, ZONES + "vpc: {cidr: 100.64.0.0/16, podCIDR: 100.64.0.0/16}\n").replace(
            "    efaEnabled: true\n", "    efaEnabled: true\n    interfaceLayout: legacy\n"),
        "vpc.podCIDR", r"such as (\S+/\d+)", _replace("podCIDR: 100.64.0.0/16", "podCIDR: {}"),
    ),
    "update more nodes than the group has": Case(
        _group("    updateConfig: {maxUnavailable: 5}\n"), "managedNodeGroups[0].updateConfig.maxUnavailable",
        r"use (\d+) or fewer", _replace("maxUnavailable: 5", "maxUnavailable: {}"),
    ),
    "Kubernetes version not offered": Case(
        BASE.replace('version: "1.34"', 'version: "1.29"'), "metadata.version", r'\(version: "([\d.]+)"\)',
        _replace('version: "1.29"', 'version: "{}"'),
    ),
    "EFA on a size without EFA": Case(
        BASE.replace("instanceType: p5.48xlarge", "instanceType: g6.xlarge"), "managedNodeGroups[0].instanceType",
        r"size \(([\w.-]+)", _replace("instanceType: g6.xlarge", "instanceType: {}"),
    ),
    "a training job on more nodes than the group has": Case(
        BASE + "trainingJobs:\n  - {name: ddp, nodeGroup: gpu, nnodes: 5, image: 'public.ecr.aws/x/y:1',"
        " command: [python, train.py]}\n", "trainingJobs[0].nnodes", r"use nnodes <= (\d+)",
        _replace("nnodes: 5", "nnodes: {}"),
    ),
    "FSx capacity between the steps": Case(
        BASE + "storage: {storageCapacityGiB: 3000}\n", "storage.storageCapacityGiB", r"nearest: (\d+)",
        _replace("storageCapacityGiB: 3000", "storageCapacityGiB: {}"),
    ),
    "pool AMI older than its Kubernetes version": Case(
        BASE + POOL + ", amiVersion: v20200101}\n", "karpenterNodePools[0].amiVersion", r"set amiVersion: (v\d+)",
        _replace("amiVersion: v20200101", "amiVersion: {}"),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_proposed_value_passes_every_rule(name):
    case = CASES[name]
    # GIVEN a spec refused for one value
    problems = [p for p in problems_of(case.spec) if p.field == case.field]
    assert len(problems) == 1, [p.render() for p in problems_of(case.spec)]
    match = re.search(case.proposal, problems[0].fix)
    assert match, problems[0].fix
    # WHEN the value the fix proposes is written THEN the spec is accepted
    plan_of(case.rewrite(case.spec, match.group(1)))
