"""The nested stacks of a cluster stack (:class:`efa_stack.planning.template_budget.StackLayout`): one for the spec
node groups that moved, one for the charts that moved.

aws-cdk-lib's ``NestedStack`` is an ``AWS::CloudFormation::Stack`` resource of the cluster stack whose template is
an asset; a value of the cluster stack that a construct in it uses (the cluster's name, a security group's id, the
kubectl provider's service token) becomes a parameter of the nested stack, and a dependency between a construct in
it and one of the cluster stack becomes one on the nested stack's resource (aws-cdk-lib 2.275 core/lib/nested-stack.ts,
core/lib/private/refs.ts, core/lib/deps.ts). Construct ids are a contract: the ids below name the nested stacks.
"""

from __future__ import annotations

from aws_cdk import NestedStack, Stack
from constructs import Construct

from efa_stack.planning.template_budget import StackLayout

CHARTS_STACK_ID = "KeptCharts"
"""The nested stack of the charts that moved (charts whose objects outlive them)."""
NODE_GROUPS_STACK_ID = "NodeGroups"
"""The nested stack of the node groups that moved (every EKS node group of each)."""


class NestedParts:
    """The scope each part of ``stack`` goes in under ``layout``; the nested stacks are made on first use."""

    def __init__(self, stack: Stack, layout: StackLayout | None) -> None:
        self.stack = stack
        self.layout = layout or StackLayout()
        self.stacks: dict[str, NestedStack] = {}
        """The nested stacks made, by construct id."""

    def _nested(self, id: str, description: str) -> NestedStack:
        if id not in self.stacks:
            self.stacks[id] = NestedStack(self.stack, id, description=description)
        return self.stacks[id]

    def node_group_scope(self, group: str) -> Construct:
        """The cluster stack, or the nested stack of node groups when the layout moved ``group``."""
        if group not in self.layout.nested_node_groups:
            return self.stack
        return self._nested(NODE_GROUPS_STACK_ID, "efa-stack node groups (the cluster stack's template budget)")

    def chart_scope(self, chart: str) -> Construct | None:
        """The nested stack of kept charts when the layout moved ``chart``; None: the cluster's own scope."""
        if chart not in self.layout.nested_charts:
            return None
        return self._nested(CHARTS_STACK_ID, "efa-stack charts whose objects outlive them (CRDs)")
