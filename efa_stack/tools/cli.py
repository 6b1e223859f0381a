"""The ``efa-stack`` command line (console script ``efa-stack = "efa_stack.tools.cli:main"``).

Commands (each has ``--help``; human output by default, ``--json`` for machines):

* ``efa-stack preflight --spec FILE``       account checks before ``cdk deploy`` (boto3)
* ``efa-stack catalog refresh``             regenerate planning/data/ from EC2 DescribeInstanceTypes
* ``efa-stack catalog list --efa``          the instance catalog, optionally EFA-capable types only
* ``efa-stack catalog show TYPE``           one instance type: network cards and interface layout
* ``efa-stack nccl-report LOG ...``         judge nccl-tests output against the EFA line rate
* ``efa-stack verify --spec FILE``          a deployed cluster's nodes against the plan (+ NCCL test)

Exit codes: 0 success; 1 a check failed (preflight finding, node mismatch, failed NCCL job, NCCL
result below expectation); 2 bad input or no access (a spec problem, no AWS credentials, no
kubeconfig). A bad spec prints :meth:`efa_stack.spec.errors.SpecError.render`, never a traceback.
Heavy modules (boto3, kubernetes, tools.nccl_report) are imported inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from efa_stack import contract
from efa_stack.spec.errors import SpecError

app = typer.Typer(
    name="efa-stack",
    help="EKS clusters with EFA networking from one cluster spec: preflight, catalog, verify, NCCL reports.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
catalog_app = typer.Typer(
    help="The instance catalog (planning/data/instance_catalog.json): refresh, list, show.",
    no_args_is_help=True,
)
app.add_typer(catalog_app, name="catalog")

SPEC_HELP = "Cluster spec file (YAML, an eksctl ClusterConfig plus efa-stack extensions)."
JSON_HELP = "Print JSON for machines instead of tables."


def _out() -> Console:
    return Console(highlight=False)


def _err() -> Console:
    return Console(stderr=True, highlight=False)


def _fail(message: str, fix: str = "", code: int = 2) -> NoReturn:
    _err().print(f"[bold red]error[/]: {escape(message)}" + (f"\nFix: {escape(fix)}" if fix else ""))
    raise typer.Exit(code)


def _echo_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def _load_plan(spec: Path) -> Any:
    from efa_stack.planning.plan import plan_from_file

    try:
        return plan_from_file(spec)
    except SpecError as exc:
        _err().print(exc.render(), markup=False, highlight=False)
        raise typer.Exit(2) from None


def _session(profile: str | None, region: str | None = None) -> Any:
    import boto3
    from botocore.exceptions import ProfileNotFound

    try:
        return boto3.Session(profile_name=profile, region_name=region)
    except ProfileNotFound as exc:
        _fail(str(exc), "use a profile from ~/.aws/config (aws configure list-profiles)")


@app.callback()
def _root() -> None:
    """EKS clusters with EFA networking from one cluster spec.

    Exit codes: 0 success, 1 a check failed, 2 bad input or no access.
    """


# --------------------------------------------------------------------------------------------
# preflight
# --------------------------------------------------------------------------------------------


@app.command()
def preflight(
    spec: Path = typer.Option(..., "--spec", "-s", help=SPEC_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    profile: str | None = typer.Option(None, "--profile", help="AWS profile (default: the SDK's usual chain)."),
    max_attempts: int = typer.Option(
        5, "--max-attempts", min=1, help="Attempts per AWS call, with backoff, before a throttled call is reported."
    ),
) -> None:
    """Check the AWS account before deploying: EFA support, zone offerings, vCPU quotas, reservations, add-on versions.

    Read-only. Uses whatever endpoint the AWS SDK is pointed at (AWS_ENDPOINT_URL, profiles).
    Exit 1 when a check fails, 2 when AWS cannot be asked at all.
    """
    from efa_stack.tools.preflight import PreflightAbort, exit_code, render, run_preflight, to_json

    plan = _load_plan(spec)
    session = _session(profile, plan.region)
    try:
        findings = run_preflight(plan, session, max_attempts=max_attempts)
    except PreflightAbort as exc:
        if json_out:
            _echo_json({"cluster": plan.name, "region": plan.region, "ok": False, "error": exc.message, "fix": exc.fix})
            raise typer.Exit(exc.exit_code) from None
        _fail(exc.message, exc.fix, exc.exit_code)
    if json_out:
        _echo_json(to_json(findings, plan))
    else:
        render(findings, _out(), plan)
    raise typer.Exit(exit_code(findings))


# --------------------------------------------------------------------------------------------
# catalog
# --------------------------------------------------------------------------------------------


@catalog_app.command("refresh")
def catalog_refresh(
    region: str = typer.Option("us-east-1", "--region", help="Region to call DescribeInstanceTypes in."),
    catalog_output: Path | None = typer.Option(
        None, "--catalog-output", "--output", help="Where to write the catalog (default: planning/data/instance_catalog.json)."
    ),
    regions_output: Path | None = typer.Option(
        None, "--regions-output", help="Where to write the region/zone list (default: planning/data/regions.json)."
    ),
    all_regions: bool = typer.Option(
        True, "--all-regions/--this-region-only", help="List the zones of every region, or of --region only."
    ),
    profile: str | None = typer.Option(None, "--profile", help="AWS profile (default: the SDK's usual chain)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Regenerate the instance catalog and the region/zone list from EC2 (boto3).

    Honours AWS_ENDPOINT_URL, so it also works against a recorded or emulated EC2 API.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    from efa_stack.planning.catalog import CATALOG_FILE, REGIONS_FILE
    from efa_stack.tools.catalog_refresh import refresh
    from efa_stack.tools.preflight import abort_for

    session = _session(profile, region)
    try:
        summary = refresh(
            session,
            region=region,
            catalog_path=catalog_output or CATALOG_FILE,
            regions_path=regions_output or REGIONS_FILE,
            all_regions=all_regions,
        )
    except (ClientError, BotoCoreError) as exc:
        abort = abort_for(exc)
        if abort is not None:
            _fail(abort.message, abort.fix.replace("run preflight again", "run `efa-stack catalog refresh` again"), 2)
        _fail(f"catalog refresh failed: {exc}", "check the region and the identity's ec2:Describe* permissions", 1)
    except OSError as exc:
        _fail(f"cannot write the catalog: {exc}", "pass writable paths with --catalog-output/--regions-output", 2)
    if json_out:
        _echo_json(summary)
        return
    _out().print(
        f"catalog: {summary['instance_types']} instance types ({summary['efa_capable']} EFA-capable) "
        f"-> {escape(str(summary['catalog']))}\n"
        f"regions: {summary['regions']} -> {escape(str(summary['regions_file']))}"
    )


def _accelerator(it: Any) -> str:
    if it.gpu is not None:
        return f"{it.gpu.count} x {it.gpu.manufacturer} {it.gpu.name}"
    if it.neuron is not None:
        return f"{it.neuron.count} x {it.neuron.name}"
    return ""


def _instance_json(it: Any) -> dict[str, Any]:
    data = it.model_dump(mode="json")
    data.update({
        "family": it.family,
        "accelerator": it.accelerator,
        "gpus": it.gpus,
        "neuron_devices": it.neuron_devices,
        "efa_line_rate_gbps": it.efa_line_rate_gbps,
    })
    return data


@catalog_app.command("list")
def catalog_list(
    efa: bool = typer.Option(False, "--efa", help="Only EFA-capable instance types."),
    family: str | None = typer.Option(None, "--family", help="Only this family, e.g. p5."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """List the instance types of the catalog with vCPUs, accelerators and EFA devices."""
    from rich.table import Table

    from efa_stack.planning import catalog

    items = catalog.efa_capable() if efa else [catalog.get(n) for n in catalog.names()]
    if family:
        items = [i for i in items if i.family == family]
    if json_out:
        _echo_json([_instance_json(i) for i in items])
        return
    table = Table(title=f"{len(items)} instance types" + (" with EFA" if efa else ""))
    for col, right in (("instance type", False), ("vCPUs", True), ("memory GiB", True), ("accelerator", False),
                       ("EFA devices", True), ("EFA Gbit/s", True), ("network", False)):
        table.add_column(col, justify="right" if right else "left", no_wrap=col == "instance type")
    for i in items:
        table.add_row(
            i.name, str(i.vcpus), f"{i.memory_mib / 1024:g}", escape(_accelerator(i)),
            str(i.max_efa_interfaces) if i.efa_supported else "-",
            f"{i.efa_line_rate_gbps:g}" if i.efa_supported else "-", escape(i.network_performance),
        )
    _out().print(table)


@catalog_app.command("show")
def catalog_show(
    instance_type: str = typer.Argument(..., metavar="TYPE", help="Instance type, e.g. p5.48xlarge."),
    layout: str = typer.Option("current", "--layout", help="Interface layout to show: current or legacy."),
    ena_on_efa_cards: bool = typer.Option(False, "--ena-on-efa-cards", help="Add an ENA interface on each EFA card."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show one instance type: network cards and the launch template's per-card interface layout."""
    from rich.table import Table

    from efa_stack.planning import catalog
    from efa_stack.planning.layout import LAYOUTS, LayoutError, describe, interface_layout

    try:
        it = catalog.get(instance_type)
    except catalog.UnknownInstanceType as exc:
        hint = f"did you mean {', '.join(exc.suggestions)}?" if exc.suggestions else "see efa-stack catalog list"
        _fail(f"unknown instance type {instance_type!r}", hint)
    if layout not in LAYOUTS:
        _fail(f"unknown layout {layout!r}", f"use one of {', '.join(LAYOUTS)}")
    interfaces: tuple[Any, ...] = ()
    layout_note = ""
    if it.efa_supported:
        try:
            interfaces = interface_layout(it, layout, ena_on_efa_cards=ena_on_efa_cards)
        except LayoutError as exc:
            layout_note = str(exc)
    if json_out:
        data = _instance_json(it)
        data["interface_layout"] = {
            "layout": layout,
            "interfaces": [i._asdict() for i in interfaces],
            "summary": describe(interfaces) if interfaces else None,
            "error": layout_note or None,
        }
        _echo_json(data)
        return

    out = _out()
    out.print(f"[bold]{escape(it.name)}[/] ({escape(it.family)} family)")
    out.print(f"  vCPUs {it.vcpus}, memory {it.memory_mib / 1024:g} GiB, architectures {', '.join(it.architectures)}")
    out.print(f"  accelerator: {escape(_accelerator(it)) or 'none'}")
    out.print(
        f"  EFA: {'yes' if it.efa_supported else 'no'}"
        + (f", {it.max_efa_interfaces} devices, {it.efa_line_rate_gbps:g} Gbit/s on EFA cards" if it.efa_supported else "")
    )
    out.print(f"  network: {escape(it.network_performance)}, {it.max_network_interfaces} interfaces max, "
              f"placement strategies {', '.join(it.placement_strategies) or 'none'}")
    cards = Table(title="network cards")
    for col in ("card", "interface types", "max interfaces", "baseline Gbit/s", "peak Gbit/s"):
        cards.add_column(col)
    for c in it.network_cards:
        cards.add_row(
            str(c.index), ", ".join(c.interface_types), str(c.max_interfaces),
            f"{c.baseline_gbps:g}" if c.baseline_gbps is not None else "-",
            f"{c.peak_gbps:g}" if c.peak_gbps is not None else "-",
        )
    out.print(cards)
    if interfaces:
        lt = Table(title=f"launch template interfaces ({layout} layout): {describe(interfaces)}")
        for col in ("network card", "device index", "interface type"):
            lt.add_column(col, no_wrap=True)
        for i in interfaces:
            lt.add_row(str(i.network_card_index), str(i.device_index), i.interface_type)
        out.print(lt)
    elif layout_note:
        out.print(f"[yellow]no {layout} layout[/]: {escape(layout_note)}")


# --------------------------------------------------------------------------------------------
# nccl-report
# --------------------------------------------------------------------------------------------


@app.command("nccl-report")
def nccl_report(
    logs: list[Path] = typer.Argument(
        ..., metavar="LOG...", help="nccl-tests output (plain, MPI/srun/kubectl logs) or -J JSON results."
    ),
    instance_type: str | None = typer.Option(None, "--instance-type", help="Judge against this type's EFA line rate."),
    nodes: int | None = typer.Option(None, "--nodes", help="Node count (default: read from the log)."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a busbw-vs-size plot (PNG)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    threshold: float | None = typer.Option(
        None, "--threshold", help="Pass mark as a fraction of the line rate (default: the report's, 0.7)."
    ),
) -> None:
    """Parse nccl-tests output (text or -J JSON), judge busbw against the EFA line rate and compare runs.

    With several runs (several logs, or several runs in one log) every later run is compared with the
    first: speed-up = later busbw / first busbw, so `nccl-report socket.log efa.log` shows how much faster
    EFA is. Exit 0 pass or not judged, 1 a check failed (data corruption, not EFA, below the mark),
    2 bad input; --json always prints one JSON object, errors included.
    """
    try:
        from efa_stack.tools import nccl_report as report
    except ImportError as exc:
        _fail(f"nccl-report is not available ({exc})", "reinstall efa-stack (pip install -e .)")
    thr = threshold if threshold is not None else getattr(report, "DEFAULT_THRESHOLD", contract.NCCL_PASS_THRESHOLD)
    raise typer.Exit(report.report_command(list(logs), instance_type, nodes, json_out, plot, thr))


# --------------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------------


def _kube_apis(kubeconfig: Path | None, context: str | None, plan: Any) -> tuple[Any, Any]:
    """CoreV1Api and CustomObjectsApi from the kubeconfig (the only place one is loaded)."""
    import os

    from kubernetes import client, config

    try:
        config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context)
    except Exception as exc:  # noqa: BLE001 - every load failure (ConfigException, missing file, bad YAML) is reported
        if not context and not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            _fail(
                f"cannot load the kubeconfig ({exc.__class__.__name__}: {exc})",
                f"aws eks update-kubeconfig --name {plan.name} --region {plan.region} "
                "(or pass --kubeconfig/--context)",
            )
    return client.CoreV1Api(), client.CustomObjectsApi()


@app.command()
def verify(
    spec: Path = typer.Option(..., "--spec", "-s", help=SPEC_HELP),
    context: str | None = typer.Option(None, "--context", help="kubeconfig context (default: the current one)."),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig", help="kubeconfig file (default: ~/.kube/config)."),
    timeout: float = typer.Option(600.0, "--timeout", min=0, help="Seconds to wait for the nodes; 0 checks once."),
    interval: float = typer.Option(15.0, "--interval", min=0.1, help="Seconds between polls."),
    run_nccl: bool = typer.Option(False, "--run-nccl", help="Start the NCCL-tests MPIJob and report its result."),
    node_group: str | None = typer.Option(None, "--node-group", help="Node group whose NCCL test to run (default: the first EFA group)."),
    namespace: str = typer.Option("default", "--namespace", help="Namespace of the NCCL-tests MPIJob."),
    job_timeout: float = typer.Option(1800.0, "--job-timeout", min=0, help="Seconds to wait for the MPIJob."),
    threshold: float | None = typer.Option(None, "--threshold", help="nccl-report pass mark (fraction of line rate)."),
    plot: Path | None = typer.Option(None, "--plot", help="With --run-nccl: write the busbw plot (PNG)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    acceptance: bool = typer.Option(
        False, "--acceptance", help="Run acceptance checks on every node of --node-group (GPU, DCGM, EFA, NCCL) "
        "and pairwise NCCL; --timeout bounds the whole run."
    ),
    dcgm_level: int = typer.Option(2, "--dcgm-level", help="With --acceptance: dcgmi diag -r LEVEL (1-4)."),
    no_efa: bool = typer.Option(False, "--no-efa", help="With --acceptance: GPU-only checks (no EFA, no pair tests)."),
    quarantine: bool = typer.Option(
        False, "--quarantine", help="With --acceptance: cordon and taint (efa-stack.io/quarantine) every node that is not pass."
    ),
) -> None:
    """Check a deployed cluster's nodes (instance type, allocatable GPUs and EFA devices) against the spec.

    Per node group: desiredCapacity nodes, each with the plan's GPUs and EFA devices. Waits (progress
    bar) until they match or --timeout passes.

    With --run-nccl, starts nccl-tests-NODEGROUP, follows it and hands the launcher log to nccl-report.

    With --acceptance, runs a check pod on every node of the node group and 2-node NCCL tests between them;
    each node is pass, slow or failed, with evidence (efa_stack/acceptance).
    """
    from efa_stack.tools.verify import run_verify

    plan = _load_plan(spec)
    if acceptance:
        # bad input (node group, --dcgm-level, --no-efa) is reported before any cluster access
        from efa_stack.acceptance.run import select_group
        from efa_stack.tools.verify import VerifyError

        try:
            select_group(plan, node_group, no_efa=no_efa, dcgm_level=dcgm_level)
        except VerifyError as exc:
            if json_out:
                _echo_json({"cluster": plan.name, "ok": False, "error": exc.message, "fix": exc.fix})
                raise typer.Exit(exc.exit_code) from None
            _fail(exc.message, exc.fix, exc.exit_code)
    core, custom = _kube_apis(kubeconfig, context, plan)
    if acceptance:
        from efa_stack.tools.verify import run_acceptance

        raise typer.Exit(run_acceptance(
            plan, core, custom, console=_out(), err_console=_err(), json_out=json_out, echo=typer.echo,
            node_group=node_group, dcgm_level=dcgm_level, no_efa=no_efa, quarantine=quarantine,
            namespace=namespace, timeout=timeout, interval=interval,
            threshold=threshold if threshold is not None else contract.NCCL_PASS_THRESHOLD,
        ))
    code = run_verify(
        plan, core, custom,
        console=_out(), err_console=_err(), json_out=json_out, timeout=timeout, interval=interval,
        run_nccl=run_nccl, node_group=node_group, namespace=namespace, job_timeout=job_timeout,
        threshold=threshold, plot=plot, echo=typer.echo,
    )
    raise typer.Exit(code)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="efa-stack")


if __name__ == "__main__":  # pragma: no cover
    main()
