"""The ``efa-stack`` command line (console script ``efa-stack = "efa_stack.tools.cli:main"``).

Commands (each has ``--help``; human output by default, ``--json`` for machines):

* ``efa-stack preflight --spec FILE``       account checks before ``cdk deploy`` (boto3)
* ``efa-stack lookup --spec FILE``          an existing VPC's subnet zones, recorded for ``cdk synth``
* ``efa-stack catalog refresh``             regenerate planning/data/ from EC2 DescribeInstanceTypes
* ``efa-stack catalog list --efa``          the instance catalog, optionally EFA-capable types only
* ``efa-stack catalog show TYPE``           one instance type: network cards and interface layout
* ``efa-stack nccl-report LOG ...``         judge nccl-tests output against the EFA line rate
* ``efa-stack verify --spec FILE``          a deployed cluster's nodes against the plan (+ NCCL test)
* ``efa-stack verify nodes|nccl|accept``    the same, one mode per subcommand (``--run-nccl``, ``--acceptance``)
* ``efa-stack rehearse --spec FILE``        the spec's jobs on a local control plane with the real controllers

Exit codes: 0 success; 1 a check failed (preflight finding, node mismatch, failed NCCL job, NCCL
result below expectation); 2 bad input or no access (a spec problem, no AWS credentials, no
kubeconfig). Every error, a bad spec included, is printed by
:func:`efa_stack.console.print_error` (``--json``: one JSON error document on stdout), never
as a traceback. Heavy modules (boto3, kubernetes, the nccl-report package) are imported inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from efa_stack import contract
from efa_stack.console import print_error, styled
from efa_stack.errors import UserError
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


def _exit_with(exc: UserError | SpecError, *, json_out: bool = False, context: dict[str, Any] | None = None) -> NoReturn:
    """Print ``exc`` (``--json``: the error document on stdout; else stderr) and exit with its code."""
    raise typer.Exit(print_error(exc, json_out=json_out, console=_err(), echo=typer.echo, context=context))


def _fail(message: str, fix: str = "", code: int = 2, *, json_out: bool = False,
          context: dict[str, Any] | None = None) -> NoReturn:
    _exit_with(UserError(message, fix, exit_code=code), json_out=json_out, context=context)


def _echo_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def _load_plan(spec: Path, *, json_out: bool = False) -> Any:
    from efa_stack.planning.plan import plan_from_file
    from efa_stack.tools.lookup import recorded_zones

    try:  # with the subnet zones `efa-stack lookup` recorded, as cdk synth reads them
        return plan_from_file(spec, subnet_zones=recorded_zones())
    except (SpecError, UserError) as exc:  # UserError: a bad EFA_STACK_TODAY
        _exit_with(exc, json_out=json_out)


def _session(profile: str | None, region: str | None = None, *, json_out: bool = False,
             context: dict[str, Any] | None = None) -> Any:
    import boto3
    from botocore.exceptions import ProfileNotFound

    try:
        return boto3.Session(profile_name=profile, region_name=region)
    except ProfileNotFound as exc:
        _fail(str(exc), "use a profile from ~/.aws/config (aws configure list-profiles)", json_out=json_out,
              context=context)


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
    from efa_stack.tools.preflight import exit_code, render, run_preflight, to_json

    plan = _load_plan(spec, json_out=json_out)
    context = {"cluster": plan.name, "region": plan.region}
    session = _session(profile, plan.region, json_out=json_out, context=context)
    try:
        findings = run_preflight(plan, session, max_attempts=max_attempts)
    except UserError as exc:
        _exit_with(exc, json_out=json_out, context=context)
    if json_out:
        _echo_json(to_json(findings, plan))
    else:
        render(findings, _out(), plan)
    raise typer.Exit(exit_code(findings))


@app.command()
def lookup(
    spec: Path = typer.Option(..., "--spec", "-s", help=SPEC_HELP),
    context_file: Path = typer.Option(
        Path(contract.CDK_CONTEXT_FILE), "--context-file", help="Where to record the zones (cdk synth reads it)."
    ),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    profile: str | None = typer.Option(None, "--profile", help="AWS profile (default: the SDK's usual chain)."),
) -> None:
    """Record the availability zones of an existing VPC's subnets (EC2 DescribeSubnets) for cdk synth.

    Only subnets the spec gives without ``az`` (and not named by a zone) are looked up; the zones go into
    cdk.context.json as ``efa-stack:subnet-zones``, which the CDK CLI passes to every synth. Read-only in AWS.
    """
    from botocore.exceptions import BotoCoreError

    from efa_stack.spec.loader import load_spec
    from efa_stack.tools.lookup import look_up_zones, record_zones, subnets_to_look_up
    from efa_stack.tools.preflight import abort_for

    try:
        cluster = load_spec(spec)
    except SpecError as exc:
        _exit_with(exc, json_out=json_out)
    context = {"cluster": cluster.metadata.name, "region": cluster.metadata.region}
    if not subnets_to_look_up(cluster):
        _fail(f"{spec} gives the zone of every subnet (or uses no existing VPC): nothing to look up", code=0,
              json_out=json_out, context=context)
    session = _session(profile, cluster.metadata.region, json_out=json_out, context=context)
    try:
        zones = look_up_zones(session.client("ec2", region_name=cluster.metadata.region), cluster)
        record_zones(zones, context_file)
    except UserError as exc:
        _exit_with(exc, json_out=json_out, context=context)
    except BotoCoreError as exc:
        _exit_with(abort_for(exc) or UserError(f"EC2 could not be asked ({exc})", "check the network and the "
                   "AWS settings"), json_out=json_out, context=context)
    if json_out:
        _echo_json({"file": str(context_file), "subnetZones": zones})
        return
    for subnet, zone in zones.items():
        _out().print(f"{subnet}: {zone}")
    _out().print(f"recorded in {context_file} ({contract.SUBNET_ZONES_CONTEXT}); cdk synth reads it")


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

    context = {"region": region}
    session = _session(profile, region, json_out=json_out, context=context)
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
            _fail(abort.message, abort.fix.replace("run preflight again", "run `efa-stack catalog refresh` again"), 2,
                  json_out=json_out, context=context)
        _fail(f"catalog refresh failed: {exc}", "check the region and the identity's ec2:Describe* permissions", 1,
              json_out=json_out, context=context)
    except OSError as exc:
        _fail(f"cannot write the catalog: {exc}", "pass writable paths with --catalog-output/--regions-output", 2,
              json_out=json_out, context=context)
    if json_out:
        _echo_json(summary.to_json())
        return
    from efa_stack.tools.render import render_refresh

    render_refresh(summary, _out())


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
        _fail(f"unknown instance type {instance_type!r}", exc.advice())
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
        out.print(f"{styled('note', f'no {layout} layout')}: {escape(layout_note)}")


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
    from efa_stack.nccl_report.command import report_command

    thr = threshold if threshold is not None else contract.NCCL_PASS_THRESHOLD
    raise typer.Exit(report_command(list(logs), instance_type, nodes, json_out, plot, thr))


# --------------------------------------------------------------------------------------------
# rehearse
# --------------------------------------------------------------------------------------------


@app.command()
def rehearse(
    spec: Path = typer.Option(..., "--spec", "-s", help=SPEC_HELP),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    size: str = typer.Option("desired", "--size", help="Node groups at their desiredCapacity or maxSize: desired or max."),
    nodes_per_domain: int | None = typer.Option(
        None, "--nodes-per-domain", min=1,
        help="Nodes under one network node of the lowest layer (network-node-layer-3 on p5); default: all of a group."),
    cordon: list[str] = typer.Option(
        [], "--cordon", help="A node made unschedulable, as <node group>-<index> (repeatable)."),
    job_timeout: float = typer.Option(180.0, "--job-timeout", min=1, help="Seconds each job may take to run."),
    state: Path | None = typer.Option(
        None, "--state", help="Keep the control plane's files and logs in this folder (default: removed)."),
) -> None:
    """Rehearse the spec on a local control plane: the real scheduler, Kueue, the MPI operator and the Kubeflow
    controllers decide whether each job lands, on fake nodes made from the plan.

    Each job is started by its own efa-stack.io/start command; per job: admitted or not (with Kueue's reason), its
    nodes and topology domains, the time to admission and to Running. Runs from a checkout of efa-stack: the first
    run builds the pinned binaries (tens of CPU-minutes, said before it starts). Exit 0 when every job lands, 1 when
    one does not, 2 for bad input. docs/rehearse.md says what it proves and what it cannot.
    """
    from efa_stack.tools.rehearse import RehearseOptions, run_rehearse
    from efa_stack.tools.render import render_rehearse

    if size not in ("desired", "max"):
        _fail(f"--size {size}: not a size", "use --size desired or --size max", json_out=json_out)
    plan = _load_plan(spec, json_out=json_out)
    options = RehearseOptions(size="max" if size == "max" else "desired", nodes_per_domain=nodes_per_domain,
                              cordoned=tuple(cordon), job_timeout=job_timeout, state=state)
    try:
        report = run_rehearse(plan, spec, options, lambda line: _err().print(f"[dim]{escape(line)}[/]", soft_wrap=True))
    except UserError as exc:
        _exit_with(exc, json_out=json_out, context={"cluster": plan.name})
    if json_out:
        _echo_json(report.to_json())
    else:
        render_rehearse(report, _out())
    raise typer.Exit(report.exit_code)


# --------------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------------


def _kube_apis(kubeconfig: Path | None, context: str | None, plan: Any, *, json_out: bool = False) -> tuple[Any, Any]:
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
                json_out=json_out, context={"cluster": plan.name},
            )
    return client.CoreV1Api(), client.CustomObjectsApi()


verify_app = typer.Typer(no_args_is_help=False)  # the help is verify()'s docstring
app.add_typer(verify_app, name="verify")

_CONTEXT = typer.Option(None, "--context", help="kubeconfig context (default: the current one).")
_KUBECONFIG = typer.Option(None, "--kubeconfig", help="kubeconfig file (default: ~/.kube/config).")
_INTERVAL = typer.Option(15.0, "--interval", min=0.1, help="Seconds between polls.")
_NAMESPACE = typer.Option(contract.NCCL_JOB_NAMESPACE, "--namespace", help="Namespace of the NCCL-tests MPIJob.")
_JOB_TIMEOUT = typer.Option(1800.0, "--job-timeout", min=0, help="Seconds to wait for the MPIJob.")
_THRESHOLD = typer.Option(None, "--threshold", help="nccl-report pass mark (fraction of line rate).")
_DCGM_LEVEL = typer.Option(2, "--dcgm-level", help="dcgmi diag -r LEVEL (1-4).")
_NO_EFA = typer.Option(False, "--no-efa", help="GPU-only checks (no EFA, no pair tests).")
_QUARANTINE = typer.Option(
    False, "--quarantine", help="Cordon and taint (efa-stack.io/quarantine) every node that is slow or failed."
)


def _run_verify(spec: Path, context: str | None, kubeconfig: Path | None, options: Any) -> NoReturn:
    """Every form of ``verify``: bad input is refused before the kubeconfig is read, then the command runs."""
    from efa_stack.tools.verify import run_verify

    plan = _load_plan(spec, json_out=options.json_out)
    try:
        options.check(plan)
    except UserError as exc:
        _exit_with(exc, json_out=options.json_out, context={"cluster": plan.name})
    core, custom = _kube_apis(kubeconfig, context, plan, json_out=options.json_out)
    raise typer.Exit(run_verify(plan, core, custom, options, console=_out(), err_console=_err(), echo=typer.echo))


def _refuse_options_before(subcommand: str, ctx: typer.Context) -> None:
    """``verify``'s own options given before a subcommand would be ignored: refuse them."""
    given = [param.opts[0] for param in ctx.command.params if param.name is not None and param.opts
             and (src := ctx.get_parameter_source(param.name)) is not None and src.name == "COMMANDLINE"]
    if given:
        _fail(f"{', '.join(given)} before `{subcommand}` would be ignored",
              f"put the options after the subcommand (efa-stack verify {subcommand} --spec FILE)")


# The verify commands declare every option as typer needs it (one parameter each, so more than 8); each is thin: it
# gathers its options into one VerifyOptions and hands over to _run_verify (tests/test_code_shape.py).
@verify_app.callback(invoke_without_command=True)
def verify(
    ctx: typer.Context,
    spec: Path | None = typer.Option(None, "--spec", "-s", help=SPEC_HELP),
    context: str | None = _CONTEXT,
    kubeconfig: Path | None = _KUBECONFIG,
    timeout: float = typer.Option(600.0, "--timeout", min=0, help="Seconds to wait for the nodes; 0 checks once."),
    interval: float = _INTERVAL,
    run_nccl: bool = typer.Option(False, "--run-nccl", help="Start the NCCL-tests MPIJob and report its result."),
    node_group: str | None = typer.Option(None, "--node-group", help="Node group whose NCCL test to run (default: the first EFA group)."),
    namespace: str = _NAMESPACE,
    job_timeout: float = _JOB_TIMEOUT,
    threshold: float | None = _THRESHOLD,
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

    With --run-nccl (or `verify nccl`), starts nccl-tests-NODEGROUP, follows it and judges the launcher
    log with nccl-report.

    With --acceptance (or `verify accept`), runs a check pod on every node of the node group and 2-node
    NCCL tests between them; each node is pass, slow or failed, with evidence (efa_stack/acceptance).
    """
    from efa_stack.tools.verify import VerifyOptions

    if ctx.invoked_subcommand is not None:
        _refuse_options_before(ctx.invoked_subcommand, ctx)
        return
    if spec is None:
        _fail("missing option --spec", "efa-stack verify --spec FILE (see efa-stack verify --help)")
    _run_verify(spec, context, kubeconfig, VerifyOptions(
        timeout=timeout, interval=interval, run_nccl=run_nccl, acceptance=acceptance, node_group=node_group,
        namespace=namespace, job_timeout=job_timeout, threshold=threshold, plot=plot, dcgm_level=dcgm_level,
        no_efa=no_efa, quarantine=quarantine, json_out=json_out,
    ))


@verify_app.command("nodes")
def verify_nodes(
    spec: Path = typer.Option(..., "--spec", "-s", help=SPEC_HELP),
    context: str | None = _CONTEXT,
    kubeconfig: Path | None = _KUBECONFIG,
    timeout: float = typer.Option(600.0, "--timeout", min=0, help="Seconds to wait for the nodes; 0 checks once."),
    interval: float = _INTERVAL,
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """The nodes only (same as `efa-stack verify --spec FILE`)."""
    from efa_stack.tools.verify import VerifyOptions

    _run_verify(spec, context, kubeconfig, VerifyOptions(timeout=timeout, interval=interval, json_out=json_out))


@verify_app.command("nccl")
def verify_nccl(
    spec: Path = typer.Option(..., "--spec", "-s", help=SPEC_HELP),
    context: str | None = _CONTEXT,
    kubeconfig: Path | None = _KUBECONFIG,
    timeout: float = typer.Option(600.0, "--timeout", min=0, help="Seconds to wait for the nodes; 0 checks once."),
    interval: float = _INTERVAL,
    node_group: str | None = typer.Option(None, "--node-group", help="Node group whose NCCL test to run (default: the first EFA group)."),
    namespace: str = _NAMESPACE,
    job_timeout: float = _JOB_TIMEOUT,
    threshold: float | None = _THRESHOLD,
    plot: Path | None = typer.Option(None, "--plot", help="Write the busbw plot (PNG)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """The nodes, then the node group's NCCL-tests MPIJob judged by nccl-report (same as `verify --run-nccl`)."""
    from efa_stack.tools.verify import VerifyOptions

    _run_verify(spec, context, kubeconfig, VerifyOptions(
        timeout=timeout, interval=interval, run_nccl=True, node_group=node_group, namespace=namespace,
        job_timeout=job_timeout, threshold=threshold, plot=plot, json_out=json_out,
    ))


@verify_app.command("accept")
def verify_accept(
    spec: Path = typer.Option(..., "--spec", "-s", help=SPEC_HELP),
    context: str | None = _CONTEXT,
    kubeconfig: Path | None = _KUBECONFIG,
    timeout: float = typer.Option(600.0, "--timeout", min=0, help="Seconds the whole run may take."),
    interval: float = _INTERVAL,
    node_group: str | None = typer.Option(None, "--node-group", help="Node group to accept (default: the first EFA GPU group)."),
    namespace: str = typer.Option(contract.NCCL_JOB_NAMESPACE, "--namespace", help="Namespace of the check pods and pair MPIJobs."),
    threshold: float | None = _THRESHOLD,
    dcgm_level: int = _DCGM_LEVEL,
    no_efa: bool = _NO_EFA,
    quarantine: bool = _QUARANTINE,
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Node acceptance: check pods on every node and pairwise NCCL; pass, slow or failed per node (same as
    `verify --acceptance`)."""
    from efa_stack.tools.verify import VerifyOptions

    _run_verify(spec, context, kubeconfig, VerifyOptions(
        timeout=timeout, interval=interval, acceptance=True, node_group=node_group, namespace=namespace,
        threshold=threshold, dcgm_level=dcgm_level, no_efa=no_efa, quarantine=quarantine, json_out=json_out,
    ))


def main() -> None:
    """Console-script entry point."""
    app(prog_name="efa-stack")


if __name__ == "__main__":  # pragma: no cover
    main()
