"""Typed spec builders: a test states the pieces of its spec and what it overrides, never YAML by hand.

A spec is data (:class:`Spec`, frozen): the cluster's name, region, version and zones, its node groups, its
Karpenter pools and any further top-level section. Pieces come from functions with the defaults most tests want
(:func:`node_group`, :func:`cpu_group`, :func:`pool`); every eksctl or efa-stack field a piece does not name goes
in as a keyword, spelled as in the spec (``node_group(interfaceLayout="legacy")``). Overrides return a new spec::

    BASE.with_group(instanceType="trn2.48xlarge")          # a field of node group "gpu" (None removes it)
    BASE.add(cpu_group()).with_(vpc={"podCIDR": "100.64.0.0/16"})   # a group, a section (merged into one there)
    BASE.with_(storage={}).plan()                         # its plan; .problems(), .one_problem(), .synth()

The text (:attr:`Spec.text`) is what :func:`efa_stack.spec.loader.parse_spec` reads.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from efa_stack.planning.plan import ClusterPlan
    from efa_stack.spec.errors import Problem
    from tests.support import Built, Synthesized

ZONE = "us-west-2a"


def node_group(name: str = "gpu", instance_type: str | None = "p5.48xlarge", *, min_size: int | None = 1,
               desired: int | None = None, max_size: int | None = None, zones: tuple[str, ...] | None = (ZONE,),
               private: bool = False, efa: bool | None = True, **fields: Any) -> dict[str, Any]:
    """A managed node group: ``instance_type`` nodes (``minSize``, and ``desiredCapacity``/``maxSize`` when given) in
    ``zones``, with EFA (``efa=None`` leaves ``efaEnabled`` out), ``privateNetworking: true`` when ``private``;
    ``fields``: any further field of the group, as the spec spells it."""
    group: dict[str, Any] = {"name": name}
    for key, value in (("instanceType", instance_type), ("minSize", min_size), ("desiredCapacity", desired),
                       ("maxSize", max_size), ("availabilityZones", list(zones) if zones else None)):
        if value is not None:
            group[key] = value
    if private:
        group["privateNetworking"] = True
    if efa is not None:
        group["efaEnabled"] = efa
    return {**group, **fields}


def cpu_group(instance_type: str = "m7i.xlarge", name: str = "cpu", **fields: Any) -> dict[str, Any]:
    """A node group of one ``instance_type`` node, no zones of its own and no EFA field."""
    return node_group(name, instance_type, zones=None, efa=None, **fields)


def pool(name: str = "pool0", instance_type: str = "p5en.48xlarge", *, max_nodes: int = 4,
         zone: str = "us-west-2b", **fields: Any) -> dict[str, Any]:
    """A Karpenter pool (``karpenterNodePools[]``) of up to ``max_nodes`` ``instance_type`` nodes in ``zone``."""
    return {"name": name, "instanceType": instance_type, "maxNodes": max_nodes, "availabilityZone": zone, **fields}


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` merged in: mappings key by key, anything else replaced; a None value removes."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass(frozen=True)
class Spec:
    """A cluster spec (an eksctl ClusterConfig with efa-stack's sections) as data."""

    name: str = "t"
    region: str = "us-west-2"
    version: str = "1.34"
    zones: tuple[str, ...] | None = ("us-west-2a", "us-west-2b")
    """The cluster's ``availabilityZones``; None leaves the field out."""
    groups: tuple[Mapping[str, Any], ...] = ()
    pools: tuple[Mapping[str, Any], ...] = ()
    sections: Mapping[str, Any] = field(default_factory=dict)
    """Further top-level sections (``vpc``, ``storage``, ``addons``...), as the spec spells them."""

    def with_(self, **sections: Any) -> Spec:
        """This spec with ``sections`` merged into its own (:func:`merged`)."""
        return dataclasses.replace(self, sections=merged(self.sections, sections))

    def with_group(self, name: str = "gpu", /, **fields: Any) -> Spec:
        """This spec with ``fields`` merged into its node group ``name`` (a None value removes that field)."""
        if name not in [g["name"] for g in self.groups]:
            raise KeyError(f"no node group {name!r} in {[g['name'] for g in self.groups]}")
        return dataclasses.replace(self, groups=tuple(
            merged(g, fields) if g["name"] == name else g for g in self.groups))

    def add(self, *groups: Mapping[str, Any]) -> Spec:
        """This spec with further node groups."""
        return dataclasses.replace(self, groups=(*self.groups, *groups))

    def with_pools(self, *pools: Mapping[str, Any]) -> Spec:
        """This spec with further Karpenter pools."""
        return dataclasses.replace(self, pools=(*self.pools, *pools))

    def replace(self, **changes: Any) -> Spec:
        """This spec with other ``name``, ``region``, ``version``, ``zones``, ``groups`` or ``pools``."""
        return dataclasses.replace(self, **changes)

    @property
    def doc(self) -> dict[str, Any]:
        """The spec as the mapping its YAML holds."""
        doc: dict[str, Any] = {
            "apiVersion": "eksctl.io/v1alpha5", "kind": "ClusterConfig",
            "metadata": {"name": self.name, "region": self.region, "version": self.version},
        }
        if self.zones is not None:
            doc["availabilityZones"] = list(self.zones)
        if self.groups:
            doc["managedNodeGroups"] = [dict(g) for g in self.groups]
        if self.pools:
            doc["karpenterNodePools"] = [dict(p) for p in self.pools]
        return merged(doc, self.sections)

    @property
    def text(self) -> str:
        """The spec's YAML."""
        return yaml.safe_dump(self.doc, sort_keys=False)

    def plan(self) -> ClusterPlan:
        """The plan; raises :class:`efa_stack.spec.errors.SpecError` if the spec is refused."""
        from tests.support import plan_of

        return plan_of(self.text)

    def problems(self) -> list[Problem]:
        """Every problem of the spec; fails the test if it is accepted."""
        from tests.support import problems_of

        return problems_of(self.text)

    def one_problem(self) -> Problem:
        """The one problem of the spec; fails the test if there are none or several."""
        from tests.support import one_problem

        return one_problem(self.text)

    def synth(self) -> Synthesized:
        """The whole app synthesized (memoised per test process): only for what only a whole synth shows."""
        from tests.support import synth_text

        return synth_text(self.text)

    def charts(self) -> Built:
        """Every chart of the spec built (memoised per test process)."""
        from tests.support import built_text

        return built_text(self.text)


def cluster(*groups: Mapping[str, Any], **spec: Any) -> Spec:
    """A spec of ``groups`` (:func:`node_group`; ``spec``: the :class:`Spec` fields to change)."""
    return Spec(groups=groups, **spec)


BASE = cluster(node_group(desired=2, max_size=3, private=True))
"""One EFA node group ``gpu``: 1 to 3 p5.48xlarge nodes (2 desired) in us-west-2a on private subnets, in a cluster
``t`` of us-west-2a/b on Kubernetes 1.34 (the spec of tests.support.BASE)."""


# --- the specs of the whole-synth tests of options no shipped spec has (tests/conftest.py: one synth each per run) ---

ACCESS_ENTRY = {
    "principalARN": "arn:aws:iam::111122223333:role/ml-platform",
    "accessPolicies": [{"policyARN": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
                        "accessScope": {"type": "cluster"}}],
}
OPTIONS = BASE.replace(name="options").with_group(ami="ami-0123456789abcdef0", amiFamily="AmazonLinux2023").with_(
    accessConfig={"authenticationMode": "API_AND_CONFIG_MAP", "accessEntries": [ACCESS_ENTRY]},
    controlPlaneScalingConfig={"tier": "tier-2xl"},
    cloudWatch={"clusterLogging": {"enableTypes": ["api", "audit"], "logRetentionInDays": 30}},
    vpc={"publicAccessCIDRs": ["203.0.113.0/24"]},
    addons=[{"name": "vpc-cni", "configurationValues": '{"env": {"ENABLE_PREFIX_DELEGATION": "true"}}'}],
    trainingImage={"build": True},
)
"""Cluster options only the cluster stack's template shows: access entries and authentication mode, control plane
tier and logging, public endpoint CIDRs, the VPC CNI's configuration, a custom AMI (the cluster's details for
nodeadm), the training image."""
SCRATCH_STORAGE = {"deploymentType": "SCRATCH_2", "storageCapacityGiB": 2400, "s3": {
    "bucket": "training-data.example", "prefix": "tfrecords/", "autoImport": ["NEW", "CHANGED"]}}
PRIVATE = BASE.replace(name="private").add(
    node_group("big", min_size=600, desired=600, max_size=600, capacity={
        "type": "reservation", "reservationId": "cr-0123456789abcdef0"}),
).with_(
    vpc={"clusterEndpoints": {"publicAccess": False, "privateAccess": True}},
    observability={"containerInsights": False},
    storage=SCRATCH_STORAGE,
)
"""A private-only endpoint, no Container Insights, SCRATCH_2 storage linked to S3 through its import path, and a node
group of a reservation split over two EKS node groups (above EKS's 450 nodes per group)."""


def shipped(stem: str, **sections: Any) -> str:
    """The YAML of the shipped spec clusters/<stem>.yaml with ``sections`` merged into it (:func:`merged`)."""
    from tests.support import CLUSTERS

    return yaml.safe_dump(merged(yaml.safe_load((CLUSTERS / f"{stem}.yaml").read_text()), sections), sort_keys=False)
