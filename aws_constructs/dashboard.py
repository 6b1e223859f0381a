"""A CloudWatch dashboard of the accelerator nodes: GPU or Neuron use, EFA traffic and EFA errors, per node.

Container Insights metrics (decision in :mod:`efa_stack.planning.observability`), each graph a metric
``SEARCH`` so nodes that join or leave appear without a deploy, plus a per-device row per accelerator
instance type. Details: docs/design/addons.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

NAMESPACE = "ContainerInsights"
NODE_DIMENSIONS = ("ClusterName", "InstanceId", "NodeName")
# Per-device dimension sets (same user guide page, and aws/amazon-cloudwatch-agent@v1.300071.0
# translator/translate/otel/exporter/awsemf/kubernetes.go): GPU metrics by GpuDevice, EFA metrics by
# NetworkInterfaceId, both with InstanceType.
GPU_DEVICE_DIMENSIONS = ("ClusterName", "GpuDevice", "InstanceId", "InstanceType", "NodeName")
EFA_DEVICE_DIMENSIONS = ("ClusterName", "InstanceId", "InstanceType", "NetworkInterfaceId", "NodeName")
PERIOD = Duration.minutes(1)

GPU_WIDGETS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("GPU utilization (%)", "Average", ("node_gpu_utilization",)),
    ("GPU memory utilization (%)", "Average", ("node_gpu_memory_utilization",)),
    ("GPU memory used (bytes)", "Average", ("node_gpu_memory_used",)),
    ("Tensor core utilization (%)", "Average", ("node_gpu_tensor_core_utilization",)),
    ("GPU power draw (W)", "Average", ("node_gpu_power_draw",)),
    ("GPU temperature (C)", "Maximum", ("node_gpu_temperature",)),
)
NEURON_WIDGETS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("NeuronCore utilization (%)", "Average", ("node_neuroncore_utilization",)),
    ("Neuron device memory used (bytes)", "Average", ("node_neurondevice_runtime_memory_used_bytes",)),
    ("Neuron execution errors", "Sum", ("node_neuron_execution_errors_total",)),
)
EFA_WIDGETS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("EFA rx/tx (bytes/s)", "Average", ("node_efa_rx_bytes", "node_efa_tx_bytes")),
    ("EFA RDMA read/write (bytes/s)", "Average",
     ("node_efa_rdma_read_bytes", "node_efa_rdma_write_bytes", "node_efa_rdma_write_recv_bytes")),
    ("EFA drops and retransmits (/s)", "Average",
     ("node_efa_rx_dropped", "node_efa_retrans_pkts", "node_efa_retrans_timeout_events")),
    ("EFA remote connection events (/s)", "Average",
     ("node_efa_impaired_remote_conn_events", "node_efa_unresponsive_remote_events")),
)
NVLINK_NOTE = (
    "NVLink throughput: Container Insights collects no NVLink metric (its agent maps seven DCGM fields: GPU, "
    "memory and tensor-core utilization, memory used/total, power and temperature), so this dashboard has none."
)


@dataclass(frozen=True)
class DashboardGroup:
    """An accelerator node group as the dashboard shows it."""

    name: str
    instance_type: str
    accelerator: str
    """``gpu`` or ``neuron``."""
    efa: bool


def search(metric: str, cluster: str, stat: str, *, dimensions: Sequence[str] = NODE_DIMENSIONS,
           instance_type: str | None = None) -> str:
    """A ``SEARCH`` expression for ``metric`` of ``cluster`` over one dimension set (exact-match terms)."""
    schema = "{" + ",".join((NAMESPACE, *dimensions)) + "}"
    terms = [f'MetricName="{metric}"', f'ClusterName="{cluster}"']
    if instance_type:
        terms.append(f'InstanceType="{instance_type}"')
    return f"SEARCH('{schema} {' '.join(terms)}', '{stat}', {int(PERIOD.to_seconds())})"


def _graph(title: str, expressions: Sequence[str], width: int = 8) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(
        title=title, width=width, height=6, period=PERIOD,
        left=[cloudwatch.MathExpression(expression=e, using_metrics={}, label="", period=PERIOD) for e in expressions],
    )


@dataclass(frozen=True)
class AcceleratorDashboardProps:
    """Props of :class:`AcceleratorDashboard` (all required)."""

    dashboard_name: str
    """The CloudWatch dashboard's name."""
    cluster: str
    """The EKS cluster whose Container Insights metrics the graphs search."""
    groups: Sequence[DashboardGroup]
    """The accelerator node groups, one row of graphs per kind (GPU, Neuron, EFA)."""


class AcceleratorDashboard(Construct):
    """The dashboard ``props.dashboard_name`` for the EKS cluster ``props.cluster`` and its accelerator node groups."""

    def __init__(self, scope: Construct, id: str, props: AcceleratorDashboardProps) -> None:
        super().__init__(scope, id)
        self.props = props
        dashboard_name, cluster, groups = props.dashboard_name, props.cluster, props.groups
        rows: list[list[cloudwatch.IWidget]] = []
        listing = ", ".join(f"{g.name} ({g.instance_type})" for g in groups) or "none"
        rows.append([cloudwatch.TextWidget(
            width=24, height=3,
            markdown=(
                f"# {cluster}: accelerators and EFA\n"
                f"Container Insights metrics per node (namespace {NAMESPACE}). Accelerator node groups: {listing}. "
                f"{NVLINK_NOTE}"
            ),
        )])
        gpu = any(g.accelerator == "gpu" for g in groups)
        neuron = any(g.accelerator == "neuron" for g in groups)
        efa = any(g.efa for g in groups)
        per_node: list[tuple[str, str, tuple[str, ...]]] = [
            *(GPU_WIDGETS if gpu else ()), *(NEURON_WIDGETS if neuron else ()), *(EFA_WIDGETS if efa else ()),
        ]
        widgets: list[cloudwatch.IWidget] = [
            _graph(f"{title} per node", [search(m, cluster, stat) for m in metrics])
            for title, stat, metrics in per_node
        ]
        rows.extend(widgets[i:i + 3] for i in range(0, len(widgets), 3))
        for instance_type in sorted({g.instance_type for g in groups}):
            members = ", ".join(g.name for g in groups if g.instance_type == instance_type)
            row: list[cloudwatch.IWidget] = []
            if any(g.accelerator == "gpu" for g in groups if g.instance_type == instance_type):
                row.append(_graph(
                    f"{instance_type} ({members}): GPU utilization per GPU (%)",
                    [search("node_gpu_utilization", cluster, "Average", dimensions=GPU_DEVICE_DIMENSIONS,
                            instance_type=instance_type)], width=12,
                ))
            if any(g.efa for g in groups if g.instance_type == instance_type):
                row.append(_graph(
                    f"{instance_type} ({members}): EFA rx per device (bytes/s)",
                    [search("node_efa_rx_bytes", cluster, "Average", dimensions=EFA_DEVICE_DIMENSIONS,
                            instance_type=instance_type)], width=12,
                ))
            if row:
                rows.append(row)
        self.dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=dashboard_name, widgets=rows,
            default_interval=Duration.hours(3),
        )
