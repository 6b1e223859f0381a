"""Which long-lived resources a template change would replace.

Compares two synthesized templates with CloudFormation's own resource schemas (as cfn-lint ships them)
plus :data:`DOCUMENTED_REPLACING`, for the :data:`STATEFUL_TYPES` whose replacement destroys state.
Details: docs/design/checks.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

STATEFUL_TYPES: frozenset[str] = frozenset({
    "AWS::EC2::VPC",
    "AWS::EC2::Subnet",
    "AWS::EKS::Cluster",
    "AWS::KMS::Key",
    "AWS::FSx::FileSystem",
    "AWS::FSx::DataRepositoryAssociation",
})

# "Update requires: Replacement" in the CloudFormation template reference, missing from the schema's
# createOnlyProperties (the AWS::FSx::FileSystem schema is not a registry schema and lists only five):
# awsdocs/aws-cloudformation-user-guide doc_source/aws-resource-fsx-filesystem.md (StorageType) and
# doc_source/aws-properties-fsx-filesystem-lustreconfiguration.md (DeploymentType, DriveCacheType,
# ExportPath, ImportPath, ImportedFileChunkSize).
# EfaEnabled: the sources disagree. The FSx for Lustre User Guide, "Working with EFA-enabled file systems" (read
# 2026-11-27): "you cannot enable or disable EFA on an existing file system"; the CloudFormation resource
# specification marks it "UpdateType: Immutable" (as generated into RonSijm/RonSijm.Humidifier, Humidifier.FSx
# FileSystem LustreConfiguration.EfaEnabled); a stored copy of the template reference page
# (aws-properties-fsx-filesystem-lustreconfiguration) says "Update requires: No interruption". A change is taken as a
# replacement, the answer that protects the data: the retained old file system would be left behind either way.
DOCUMENTED_REPLACING: dict[str, tuple[str, ...]] = {
    "AWS::FSx::FileSystem": (
        "/properties/StorageType",
        "/properties/LustreConfiguration/DeploymentType",
        "/properties/LustreConfiguration/DriveCacheType",
        "/properties/LustreConfiguration/ExportPath",
        "/properties/LustreConfiguration/ImportPath",
        "/properties/LustreConfiguration/ImportedFileChunkSize",
        "/properties/LustreConfiguration/EfaEnabled",
    ),
}


@dataclass(frozen=True)
class Replacement:
    logical_id: str
    type: str
    why: str


class UnknownResourceType(LookupError):
    """A resource type with no CloudFormation schema in the installed cfn-lint."""


@cache
def replacing_properties(type_: str, region: str = "us-east-1") -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(replacing, conditionally replacing) property paths of ``type_``, e.g. ``("AccessConfig",
    "BootstrapClusterCreatorAdminPermissions")``, from the schema plus :data:`DOCUMENTED_REPLACING`."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER, ResourceNotFoundError

    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region, type_).schema
    except ResourceNotFoundError as exc:
        raise UnknownResourceType(
            f"no CloudFormation schema for {type_} in {region} (cfn-lint's schemas); "
            "fix: upgrade cfn-lint, or leave the type out of `types`"
        ) from exc
    always = [*schema.get("createOnlyProperties", []), *DOCUMENTED_REPLACING.get(type_, ())]
    return tuple(dict.fromkeys(always)), tuple(schema.get("conditionalCreateOnlyProperties", []))


def _path(pointer: str) -> tuple[str, ...]:
    parts = pointer.split("/")
    if parts[:2] != ["", "properties"]:
        raise ValueError(f"not a property pointer: {pointer!r}")
    return tuple(parts[2:])


_MISSING = object()


def _at(props: dict[str, Any], path: tuple[str, ...]) -> Any:
    """The value at ``path``; a list on the way (e.g. of ``EncryptionConfig``) is walked element-wise."""
    value: Any = props
    for i, key in enumerate(path):
        if isinstance(value, list):
            return [_at(v, path[i:]) if isinstance(v, dict) else _MISSING for v in value]
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def replaced_resources(
    before: dict[str, Any], after: dict[str, Any], *, types: Iterable[str] | None = STATEFUL_TYPES,
    region: str = "us-east-1",
) -> list[Replacement]:
    """What deploying ``after`` over ``before`` (two templates of one stack) replaces, among ``types``
    (``None``: every type)."""
    wanted = None if types is None else frozenset(types)
    out: list[Replacement] = []
    res_before, res_after = before.get("Resources", {}), after.get("Resources", {})
    appeared = {lid: r.get("Type") for lid, r in res_after.items() if lid not in res_before}
    for lid, res in res_before.items():
        type_ = res.get("Type")
        if wanted is not None and type_ not in wanted:
            continue
        new = res_after.get(lid)
        if new is None or new.get("Type") != type_:
            successors = sorted(k for k, t in appeared.items() if t == type_)
            why = f"logical id removed; CloudFormation creates {', '.join(successors)} and deletes it" if successors \
                else "logical id removed or renamed"
            out.append(Replacement(lid, type_, why if new is None else f"type changed to {new.get('Type')}"))
            continue
        if type_.startswith("Custom::"):
            continue
        always, conditional = replacing_properties(type_, region)
        old_p, new_p = res.get("Properties") or {}, new.get("Properties") or {}
        for pointers, verb in ((always, "changed"), (conditional, "changed (may replace)")):
            for pointer in pointers:
                path = _path(pointer)
                if _at(old_p, path) != _at(new_p, path):
                    out.append(Replacement(lid, type_, f"{'.'.join(path)} {verb}"))
    return out
