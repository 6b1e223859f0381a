"""GPU, Neuron and EFA metrics a person can look at: CloudWatch Container Insights and a dashboard.

Decides whether the Amazon CloudWatch Observability add-on and the accelerator dashboard are installed (on
by default with GPU or Neuron node groups) and which metrics the dashboard shows. Why Container Insights
and not a DCGM exporter with Prometheus, with the sources: docs/design/addons.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from efa_stack import names
from efa_stack.spec.errors import Problem
from efa_stack.spec.models import Observability


@dataclass(frozen=True)
class ObservabilityPlan:
    """Container Insights (the add-on) on or off, and the dashboard's name when there is one."""

    container_insights: bool = False
    dashboard_name: str | None = None

    @property
    def dashboard(self) -> bool:
        return self.dashboard_name is not None


def observability_plan(
    spec: Observability, *, cluster: str, region: str, accelerated: bool, addon_listed: bool,
) -> tuple[ObservabilityPlan, list[Problem]]:
    """The spec's ``observability`` with its defaults (on with GPU/Neuron node groups), checked."""
    problems: list[Problem] = []
    insights = spec.container_insights
    if insights is False and addon_listed:
        problems.append(Problem(
            "observability.containerInsights", False,
            "addons lists amazon-cloudwatch-observability, which is Container Insights",
            "remove containerInsights: false (efa-stack then merges the addons entry with its own), or remove "
            "the addons entry",
        ))
    if insights is None:
        insights = accelerated or addon_listed
    dashboard = spec.dashboard if spec.dashboard is not None else insights
    if dashboard and not insights:
        problems.append(Problem(
            "observability.dashboard", spec.dashboard,
            "the dashboard shows Container Insights metrics, and Container Insights is off"
            + ("" if spec.container_insights is False else " (the default without GPU or Neuron node groups)"),
            "set observability.containerInsights: true, or dashboard: false",
        ))
    name = names.cloudwatch_dashboard_name(cluster, region) if dashboard and insights else None
    if name is not None:
        violation = names.CLOUDWATCH_DASHBOARD_NAME.violation(name)
        if violation:
            problems.append(Problem("metadata.name", cluster, violation, "choose a shorter cluster name"))
    return ObservabilityPlan(container_insights=bool(insights), dashboard_name=name), problems
