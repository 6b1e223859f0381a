"""Compose the stack of one cluster plan into a CDK app: one stack, ``<name>-cluster``, with the network, the EKS
cluster, its node groups and charts, and the storage (CloudFormation creates what does not depend on each other
in parallel within a stack, and starts a stack only after the stacks it imports from are complete:
docs/design/deploy-model.md)."""

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
from stacks.network_stack import ClusterNetwork
from stacks.storage_stack import ClusterStorage

if TYPE_CHECKING:
    import cdk8s

    from efa_stack.planning.template_budget import StackLayout
    from k8s.rollout import Rollout


@dataclass
class ClusterStacks:
    """What :func:`build` added to the app: the cluster stack and, with a ``storage`` section, its storage."""

    cluster: ClusterStack
    storage: ClusterStorage | None = None
    """The storage construct in the cluster stack (with a ``storage`` section)."""

    @property
    def network(self) -> ClusterNetwork:
        """The VPC and the EFA security group in the cluster stack."""
        return self.cluster.network

    @property
    def all(self) -> list:
        """Every stack of the app (one)."""
        return [self.cluster]


def build(
    app: App,
    plan: ClusterPlan,
    *,
    account: str | None = None,
    nag: bool = True,
    charts: Sequence[cdk8s.Chart] | None = None,
    rollout: Rollout | None = None,
    layout: StackLayout | None = None,
) -> ClusterStacks:
    """Add the stacks for ``plan`` to ``app``. The region comes from the spec; synth needs no account.

    ``charts`` are the cdk8s charts of :func:`k8s.charts.build_charts` for ``plan`` and ``rollout`` their rollout
    (:func:`k8s.rollout.plan_rollout`); pass the ones you also write to ``dist/`` so that both come from the same
    objects and the same order (made here when absent). ``layout``: the parts in nested stacks
    (:func:`efa_stack.planning.template_budget.stack_layout`, made here when absent; raises
    :class:`efa_stack.spec.errors.SpecError` for a spec no layout fits).

    With ``nag`` (the default) the cdk-nag AwsSolutions pack and the project's EfaStack pack
    (efa_stack/checks/nag_pack.py) check every synth: an unacknowledged finding fails the synth
    (see aws_constructs/security.py for the acknowledged ones).
    """
    if charts is None or rollout is None:
        import cdk8s

        from k8s.charts import build_charts
        from k8s.rollout import plan_rollout

        charts = build_charts(plan, cdk8s.App())
        rollout = plan_rollout(plan, charts)
    if layout is None:
        layout = template_layout(plan, rollout)
    if nag:
        Validations.of(app).add_plugins(AwsSolutionsChecks(app), EfaStackChecks(app))
    env = Environment(account=account, region=plan.region)
    cluster = ClusterStack(
        app, names.stack_name(plan.name, "cluster"), plan=plan, charts=charts, rollout=rollout, layout=layout, env=env,
        description=f"efa-stack {plan.name}: VPC and EFA security group, EKS cluster, add-ons, node groups and charts"
        + (", FSx for Lustre (retained on delete) with its CSI driver and volume" if plan.storage is not None else ""),
    )
    storage = None
    if plan.storage is not None:
        storage = ClusterStorage(
            cluster, "Storage", plan=plan, network=cluster.network, cluster=cluster, storage=plan.storage,
        )
    stacks = ClusterStacks(cluster=cluster, storage=storage)
    for stack in stacks.all:
        Tags.of(stack).add(contract.TAG_CLUSTER, plan.name)
        for k, v in sorted(plan.tags.items()):
            Tags.of(stack).add(k, v)
    return stacks


def template_layout(plan: ClusterPlan, rollout: Rollout) -> StackLayout:
    """The nested stacks ``plan`` needs for its templates to fit (:mod:`efa_stack.planning.template_budget`)."""
    from efa_stack.planning.template_budget import stack_layout
    from k8s.template_parts import rendered

    return stack_layout(plan, rendered(plan, rollout))
