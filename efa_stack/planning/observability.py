"""GPU, Neuron and EFA metrics a person can look at: CloudWatch Container Insights and a dashboard.

Decision: the Amazon CloudWatch Observability EKS add-on (``amazon-cloudwatch-observability``, Container
Insights with enhanced observability), not the NVIDIA DCGM exporter with a Prometheus stack.

- EFA counters. The add-on's CloudWatch agent reads the EFA devices of every node and publishes
  ``node_efa_rx_bytes``, ``node_efa_tx_bytes``, ``node_efa_rx_dropped``, ``node_efa_rdma_read_bytes``,
  ``node_efa_rdma_write_bytes`` and ``node_efa_rdma_write_recv_bytes`` (Amazon CloudWatch User Guide,
  "Amazon EKS and Kubernetes Container Insights with enhanced observability metrics", section "AWS Elastic
  Fabric Adapter (EFA) metrics": add-on v1.5.2-eksbuild.1 or later), and from CloudWatch agent v1.300063.0
  also ``node_efa_retrans_bytes``, ``node_efa_retrans_pkts``, ``node_efa_retrans_timeout_events``,
  ``node_efa_impaired_remote_conn_events`` and ``node_efa_unresponsive_remote_events``
  (aws/amazon-cloudwatch-agent@v1.300071.0 translator/translate/otel/exporter/awsemf/kubernetes.go,
  getEFAMetricDeclarations). The DCGM exporter reads GPUs only (NVIDIA/dcgm-exporter: DCGM fields
  ``DCGM_FI_*``): a Prometheus stack would need a second exporter for EFA, and a Prometheus server,
  storage and Grafana the AWS-only stack does not have.
- GPU metrics. The add-on runs the DCGM exporter itself and turns seven DCGM fields into
  ``node_gpu_utilization``, ``node_gpu_memory_utilization``, ``node_gpu_memory_used``,
  ``node_gpu_memory_total``, ``node_gpu_power_draw``, ``node_gpu_temperature`` and
  ``node_gpu_tensor_core_utilization`` (same user guide page, "NVIDIA GPU metrics", add-on v1.3.0 or later;
  agent v1.300071.0 translator/translate/otel/processor/metricstransformprocessor/translator.go maps
  DCGM_FI_DEV_GPU_UTIL, _FB_USED_PERCENT, _FB_USED, _FB_TOTAL, _GPU_TEMP, _POWER_USAGE and
  DCGM_FI_PROF_PIPE_TENSOR_ACTIVE). No NVLink field is mapped, so Container Insights has no NVLink metric;
  the dashboard says so and shows the GPU metrics that exist. Neuron devices: ``node_neuroncore_utilization``
  and friends (section "AWS Neuron metrics", add-on v1.5.0 or later).
- Where people look. The metrics land in the ``ContainerInsights`` namespace of CloudWatch, next to the
  control-plane logs efa-stack already sends there, with dimensions ``ClusterName``, ``InstanceId`` and
  ``NodeName`` per node (and ``InstanceType`` plus ``GpuDevice``/``NetworkInterfaceId`` per device).
- IAM. The add-on's ``cloudwatch-agent`` service account (namespace ``amazon-cloudwatch``) takes
  ``CloudWatchAgentServerPolicy`` through EKS Pod Identity from add-on v3.1.0 (CloudWatch User Guide, "Quick
  start with the Amazon CloudWatch Observability EKS add-on"), like efa-stack's other add-on roles.
- Taints. The chart's root ``tolerations: [{operator: Exists}]`` applies to the agent, DCGM exporter and
  Neuron monitor DaemonSets (aws-observability/helm-charts@amazon-cloudwatch-observability-6.4.0
  charts/amazon-cloudwatch-observability/values.yaml), so they run on the tainted GPU/Neuron nodes with no
  configurationValues. That chart's DCGM exporter DaemonSet is limited to a list of instance types
  (``dcgmExporter`` node affinity); p4d/p4de/p5/p5e/p5en/p6-b200/p6-b300/p6e-gb200 are in it.

Cost and default. Container Insights with enhanced observability is billed per observation, not per metric
(https://aws.amazon.com/cloudwatch/pricing/, "Container Insights"); the add-on also ships container logs
(Fluent Bit) and turns on Application Signals, each billed as CloudWatch Logs / Application Signals. A
dashboard beyond CloudWatch's free tier is billed per month (same page). Against the hourly price of one GPU or
Trainium node this is small, and a GPU cluster nobody can see is the costlier failure, so both are **on by
default when the spec has a GPU or Neuron node group** and off otherwise. ``observability:
{containerInsights: false}`` turns both off; ``dashboard: false`` keeps the add-on without the dashboard.
Listing ``amazon-cloudwatch-observability`` under ``addons`` turns Container Insights on (the entry is
merged with efa-stack's, like its other add-ons).
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
