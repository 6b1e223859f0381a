"""Shared helpers for the k8s tests (no tests here): each spec's charts are built once per worker.

``built(name)`` / ``built_text(yaml)`` are memoised, so every test module of an xdist worker reuses
the same synthesized charts (a session-scoped cache without touching conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import CLUSTERS

GOLDEN_K8S = Path(__file__).resolve().parent / "golden" / "k8s"
CRD_FILE = Path(__file__).resolve().parent.parent / "k8s" / "crds" / "mpijob.yaml"

GOLDEN_SPECS = ("default", "eksctl-efa-cluster", "p4d", "p5en", "p6-b200", "trn2")
"""Specs whose rendered manifests are kept as golden files (tests/golden/k8s/<cluster name>/)."""

KUBECTL_HANDLER_LIMIT = 262_144
"""CDK's kubectl handler keeps the applied manifest in an annotation capped at this many bytes."""


@dataclass
class Built:
    plan: Any
    charts: list[Any]
    manifests: dict[str, list[dict[str, Any]]]  # chart id -> objects, in order

    @property
    def chart_ids(self) -> list[str]:
        return [c.node.id for c in self.charts]

    def objects(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for chart_id, objs in self.manifests.items():
            for obj in objs:
                yield chart_id, obj

    def find(self, kind: str, name: str | None = None) -> dict[str, Any]:
        hits = [o for _, o in self.objects() if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
        assert len(hits) == 1, f"expected one {kind} {name or ''}, found {len(hits)}"
        return hits[0]

    def mpijob(self) -> dict[str, Any]:
        return self.find("MPIJob")


def _build(plan: Any) -> Built:
    import cdk8s

    from k8s.charts import build_charts

    charts = build_charts(plan, cdk8s.App())
    manifests = {c.node.id: json.loads(json.dumps(c.to_json())) for c in charts}
    return Built(plan=plan, charts=charts, manifests=manifests)


@cache
def built(spec_stem: str) -> Built:
    """Charts of ``clusters/<spec_stem>.yaml``."""
    from efa_stack.planning.plan import plan_from_file

    return _build(plan_from_file(CLUSTERS / f"{spec_stem}.yaml"))


@cache
def built_text(text: str) -> Built:
    """Charts of a spec given as YAML text."""
    from efa_stack.planning.plan import build_plan
    from efa_stack.spec.loader import parse_spec

    return _build(build_plan(parse_spec(text)))


def spec_text(instance_type: str = "p5.48xlarge", nodes: int = 2, *, efa: bool = True,
              region: str = "us-west-2", extra: str = "") -> str:
    """A minimal valid spec with one node group (``gpu``) of ``nodes`` x ``instance_type``."""
    return f"""
apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata:
  name: k8s-test
  region: {region}
  version: "1.34"
availabilityZones: ["{region}a", "{region}b"]
managedNodeGroups:
  - name: gpu
    instanceType: {instance_type}
    minSize: {nodes}
    desiredCapacity: {nodes}
    maxSize: {nodes}
    availabilityZones: ["{region}a"]
    privateNetworking: true
    efaEnabled: {str(efa).lower()}
{extra}"""


@lru_cache(maxsize=1)
def crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_FILE.read_text())


def crd_schema() -> dict[str, Any]:
    (version,) = crd()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def launcher_command(mpijob: dict[str, Any]) -> list[str]:
    return mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]


def mpirun_args(mpijob: dict[str, Any]) -> list[str]:
    """The mpirun command line inside the launcher's command (after the wait-for-workers gate)."""
    command = launcher_command(mpijob)
    return command[command.index("/opt/amazon/openmpi/bin/mpirun"):]


def arg_after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def worker(mpijob: dict[str, Any]) -> dict[str, Any]:
    return mpijob["spec"]["mpiReplicaSpecs"]["Worker"]


def worker_container(mpijob: dict[str, Any]) -> dict[str, Any]:
    return worker(mpijob)["template"]["spec"]["containers"][0]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}
