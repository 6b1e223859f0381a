"""The cluster's network as the spec gives it: an existing VPC and its subnets (eksctl ``vpc.id``/``vpc.subnets``),
and the availability zones the cluster's subnets are in.

:func:`existing_vpc` reads and checks eksctl's existing-VPC fields; :func:`cluster_zones` decides the cluster's
zones (the private subnets' zones with an existing VPC, ``availabilityZones``, or the node groups' zones and the
region's first); :func:`group_subnets` resolves a node group's ``subnets`` (names or ids) to subnets of the VPC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from efa_stack import contract
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import ClusterSpec

PRIVATE_SUBNETS_FIX = (
    "list the VPC's private subnets (with a route to a NAT gateway) under vpc.subnets.private: "
    "{<zone>: {id: subnet-...}}, or remove vpc.id and vpc.subnets (efa-stack then creates the VPC)"
)


@dataclass(frozen=True)
class ExistingVpc:
    """eksctl ``vpc.id`` and ``vpc.subnets``: the VPC and subnets the stacks use instead of creating them."""

    id: str
    private_subnets: tuple[tuple[str, str], ...]
    """(subnet id, availability zone) of each private subnet, in the spec's order."""
    public_subnets: tuple[tuple[str, str], ...] = ()
    private_names: tuple[str, ...] = ()
    """The names (keys in ``vpc.subnets.private``) of ``private_subnets``, in the same order."""
    public_refs: tuple[str, ...] = ()
    """The names and ids of every public subnet (a node group that names one is told it is public)."""
    unplaced_refs: tuple[str, ...] = ()
    """The names and ids of the private subnets whose zone is not known (each has a problem of its own)."""

    def private_subnet_ids(self, zone: str) -> tuple[str, ...]:
        return tuple(i for i, z in self.private_subnets if z == zone)

    @property
    def private_zones(self) -> tuple[str, ...]:
        """The zones of the private subnets, in the spec's order, each once."""
        return tuple(dict.fromkeys(z for _, z in self.private_subnets))


def existing_vpc(
    spec: ClusterSpec, region_azs: list[str], problems: list[Problem], subnet_zones: Mapping[str, str]
) -> ExistingVpc | None:
    """eksctl's ``vpc.id`` and ``vpc.subnets`` checked: an id, private subnets with zones, two or more private
    zones. None without an existing VPC, or when the spec names no private subnet of one (said in ``problems``)."""
    vpc = spec.vpc
    if vpc.id is None and vpc.subnets is None:
        return None
    if vpc.id is None:
        problems.append(Problem(
            "vpc.id", None, "an existing VPC needs its id",
            "give vpc.id: vpc-... (the VPC of vpc.subnets), or remove vpc.subnets (efa-stack then creates the VPC)",
        ))
        return None
    if vpc.subnets is None:
        problems.append(Problem(
            "vpc.subnets", None, "an existing VPC needs its private subnets",
            "give vpc.subnets.private: {<zone>: {id: subnet-...}}, or remove vpc.id (efa-stack then creates the VPC)",
        ))
        return None
    if not vpc.subnets.private:
        problems.append(Problem(
            "vpc.subnets.private", {}, "no private subnet for the nodes: efa-stack places the nodes and the control "
            "plane's network interfaces in private subnets only (public subnets serve load balancers)",
            PRIVATE_SUBNETS_FIX,
        ))
        return None
    kinds: dict[str, list[tuple[str, str, str]]] = {"private": [], "public": []}
    unplaced: list[str] = []
    for kind, entries in (("private", vpc.subnets.private), ("public", vpc.subnets.public)):
        for key, subnet in entries.items():
            zone = subnet.az or (key if key in region_azs else None) or subnet_zones.get(subnet.id)
            if zone is None:
                problems.append(Problem(
                    f"vpc.subnets.{kind}.{key}.az", None,
                    "the subnet's availability zone is not known (synth does not call EC2)",
                    f"add az: <zone> to the subnet (one of {', '.join(region_azs) or 'the region zones'}), name the "
                    f"entry by its zone, or run `efa-stack lookup --spec <file>` once with AWS credentials (it "
                    f"records the subnets' zones in {contract.CDK_CONTEXT_FILE} for cdk synth)",
                ))
                if kind == "private":
                    unplaced += [key, subnet.id]
                continue
            if region_azs and zone not in region_azs:
                problems.append(Problem(
                    f"vpc.subnets.{kind}.{key}.az", zone, f"zone is not in region {spec.metadata.region}",
                    f"use zones of {spec.metadata.region}: {', '.join(region_azs)}",
                ))
            kinds[kind].append((key, subnet.id, zone))
    private_zones = {z for _, _, z in kinds["private"]}
    if kinds["private"] and len(private_zones) < 2:
        problems.append(Problem(
            "vpc.subnets.private", sorted(private_zones), "EKS needs subnets in at least two availability zones",
            "list private subnets of two or more zones",
        ))
    return ExistingVpc(
        id=vpc.id,
        private_subnets=tuple((i, z) for _, i, z in kinds["private"]),
        public_subnets=tuple((i, z) for _, i, z in kinds["public"]),
        private_names=tuple(k for k, _, _ in kinds["private"]),
        public_refs=tuple(r for key, s in vpc.subnets.public.items() for r in (key, s.id)),
        unplaced_refs=tuple(unplaced),
    )


def cluster_zones(
    spec: ClusterSpec, region_azs: list[str], existing: ExistingVpc | None, problems: list[Problem],
) -> tuple[str, ...]:
    """The zones of the cluster's subnets: an existing VPC's private subnets' zones; else ``availabilityZones``
    (checked: in the region, each once, two or more); else the node groups' zones and the region's first zones,
    two at least (eksctl's default)."""
    md = spec.metadata
    azs = tuple(spec.availability_zones or ())
    if existing is not None:
        private_zones = existing.private_zones
        if spec.availability_zones is not None and set(azs) != set(private_zones):
            problems.append(Problem(
                "availabilityZones", list(azs), f"the private subnets of vpc.subnets are in {', '.join(private_zones)}",
                "remove availabilityZones (with an existing VPC the subnets say the zones)",
            ))
        return private_zones
    if spec.availability_zones is not None:
        for az in azs:
            if region_azs and az not in region_azs:
                problems.append(Problem(
                    "availabilityZones", az, f"zone is not in region {md.region}",
                    f"use zones of {md.region}: {', '.join(region_azs)}",
                ))
        if len(set(azs)) != len(azs):
            problems.append(Problem("availabilityZones", list(azs), "zones are listed twice", "list each zone once"))
        if len(set(azs)) < 2:
            problems.append(Problem(
                "availabilityZones", list(azs), "EKS needs subnets in at least two availability zones",
                f"list two or more zones of {md.region}",
            ))
        return azs
    wanted: list[str] = []
    for ng in spec.managed_node_groups:
        for az in ng.availability_zones or []:
            if az not in wanted:
                wanted.append(az)
    for az in region_azs:
        if len(wanted) >= 2:
            break
        if az not in wanted:
            wanted.append(az)
    for az in wanted:
        if region_azs and az not in region_azs:
            problems.append(Problem(
                "managedNodeGroups[].availabilityZones", az, f"zone is not in region {md.region}",
                f"use zones of {md.region}: {', '.join(region_azs)}",
            ))
    return tuple(wanted)


def zone_problems(
    field_name: str, azs: tuple[str, ...], cluster_azs: tuple[str, ...], existing: ExistingVpc | None,
) -> list[Problem]:
    """A node group's or pool's zones (``field_name``) against the cluster's: each must have a private subnet of
    the existing VPC, or be one of the cluster's zones."""
    out: list[Problem] = []
    for az in azs:
        if existing is not None and not existing.private_subnet_ids(az):
            out.append(Problem(
                field_name, az, "no private subnet of vpc.subnets is in that zone",
                f"use one of {', '.join(existing.private_zones)} or add a private subnet of {az} to vpc.subnets.private",
            ))
        elif cluster_azs and az not in cluster_azs:
            out.append(Problem(
                field_name, az, "zone is not one of the cluster's availabilityZones",
                f"use one of {', '.join(cluster_azs)} or add {az} to availabilityZones",
            ))
    return out


def group_subnets(
    prefix: str, wanted: list[str], efa: bool, zones_given: list[str] | None, existing: ExistingVpc | None,
    problems: list[Problem],
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ids and zones of eksctl's ``managedNodeGroups[].subnets`` (``wanted``: names in vpc.subnets.private or
    ids). A public subnet is refused as such; a private subnet whose zone is not known has its own problem."""
    if existing is None:
        problems.append(Problem(
            f"{prefix}.subnets", wanted, "subnets name subnets of an existing VPC (vpc.id, vpc.subnets)",
            "use availabilityZones: the node group goes in that zone's private subnet of the VPC efa-stack creates",
        ))
        return (), ()
    ids: list[str] = []
    zones: list[str] = []
    for name in wanted:
        found = next(((i, z) for key, (i, z) in zip(existing.private_names, existing.private_subnets)
                      if name in (key, i)), None)
        if found is None:
            if name in existing.public_refs:
                problems.append(Problem(
                    f"{prefix}.subnets", name, "this node group names a public subnet: efa-stack places nodes in "
                    "private subnets only",
                    "name a subnet listed under vpc.subnets.private (the nodes reach the internet through its NAT "
                    "route)",
                ))
            elif name not in existing.unplaced_refs:
                problems.append(Problem(
                    f"{prefix}.subnets", name, "not a private subnet of vpc.subnets (by name or id)",
                    "name a subnet listed under vpc.subnets.private",
                ))
            continue
        ids.append(found[0])
        if found[1] not in zones:
            zones.append(found[1])
    if efa and len(ids) > 1:
        problems.append(Problem(
            f"{prefix}.subnets", wanted, "an EFA node group lives in one subnet (one zone, one placement group)",
            "list one subnet",
        ))
    if zones_given and zones and set(zones_given) != set(zones):
        problems.append(Problem(
            f"{prefix}.availabilityZones", list(zones_given), f"the subnets are in {', '.join(zones)}",
            "remove availabilityZones (the subnets say the zones)",
        ))
    return tuple(ids), tuple(zones)
