"""Compose the stacks of one cluster plan into a CDK app."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_cdk import App, Environment, Tags, Validations
from cdk_nag import AwsSolutionsChecks

from efa_stack import contract, names
from efa_stack.checks.nag_pack import EfaStackChecks
from efa_stack.planning.plan import ClusterPlan
from stacks.cluster_stack import ClusterStack
from stacks.network_stack import NetworkStack
from stacks.storage_stack import StorageStack

if TYPE_CHECKING:
    import cdk8s


@dataclass
class ClusterStacks:
    network: NetworkStack
    cluster: ClusterStack
    storage: StorageStack | None = None

    @property
    def all(self) -> list:
        return [s for s in (self.network, self.cluster, self.storage) if s is not None]


def build(
    app: App,
    plan: ClusterPlan,
    *,
    account: str | None = None,
    nag: bool = True,
    charts: Sequence[cdk8s.Chart] | None = None,
) -> ClusterStacks:
    """Add the stacks for ``plan`` to ``app``. The region comes from the spec; synth needs no account.

    ``charts`` are the cdk8s charts of :func:`k8s.charts.build_charts` for ``plan``; pass the ones you
    also write to ``dist/`` so that both come from the same objects (built here when absent).

    With ``nag`` (the default) the cdk-nag AwsSolutions pack and the project's EfaStack pack
    (efa_stack/checks/nag_pack.py) check every synth: an unacknowledged finding fails the synth
    (see aws_constructs/security.py for the acknowledged ones).
    """
    if nag:
        Validations.of(app).add_plugins(AwsSolutionsChecks(app), EfaStackChecks(app))
    env = Environment(account=account, region=plan.region)
    network = NetworkStack(
        app, names.stack_name(plan.name, "network"), plan=plan, env=env,
        description=f"efa-stack {plan.name}: VPC, subnets, endpoints and the EFA security group",
    )
    cluster = ClusterStack(
        app, names.stack_name(plan.name, "cluster"), plan=plan, network=network, charts=charts, env=env,
        description=f"efa-stack {plan.name}: EKS cluster, add-ons and node groups",
    )
    storage = None
    if plan.storage is not None:
        storage = StorageStack(
            app, names.stack_name(plan.name, "storage"), plan=plan, network=network, cluster=cluster,
            storage=plan.storage, env=env,
        )
    stacks = ClusterStacks(network=network, cluster=cluster, storage=storage)
    for stack in stacks.all:
        Tags.of(stack).add(contract.TAG_CLUSTER, plan.name)
        for k, v in sorted(plan.tags.items()):
            Tags.of(stack).add(k, v)
    return stacks
