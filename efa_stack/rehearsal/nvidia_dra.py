"""The NVIDIA DRA driver's release (ComputeDomains only, k8s/compute_domains.py ``nvidia_dra_values``) in the
rehearsal: its ComputeDomain controller runs for real, its kubelet plugin is stood in for
(:mod:`efa_stack.rehearsal.compute_domains`).

The release's objects are read from the chart at the pinned version, in the Go module the controller is built from
(``tools/build.sh --module-dir compute-domain-controller``: kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1,
``deployments/helm/dra-driver-nvidia-gpu``), with the chart's ``values.yaml`` under the release's values:

- the CRDs of ``crds/`` (ComputeDomain, ComputeDomainClique);
- the templates :data:`TEMPLATES` rendered by :func:`render_template`: the DeviceClasses
  ``compute-domain-daemon.nvidia.com`` and ``compute-domain-default-channel.nvidia.com``, the RBAC of the controller,
  the kubelet plugin and the IMEX daemons, and the ValidatingAdmissionPolicy on ResourceSlices;
- the kubelet plugin's DaemonSet (:func:`kubelet_plugin_daemon_set`, templates/kubeletplugin.yaml): its names,
  labels, ServiceAccount, priority class and placement from the values, so that the real scheduler places its pods
  where the chart would (kwok runs them; nothing runs in them).

The controller (:class:`ComputeDomainController`) runs under the chart's controller ServiceAccount with the
environment of templates/controller.yaml. For every ComputeDomain it puts its finalizer on it and creates the channel
ResourceClaimTemplate the workers claim, the IMEX daemon DaemonSet and that DaemonSet's claim template
(cmd/compute-domain-controller/computedomain.go ``onAddOrUpdate``, daemonset.go ``Create``, resourceclaimtemplate.go
``Create``), and removes them with the finalizer when the ComputeDomain is deleted. Those objects are rendered from
files the controller reads at fixed paths, ``/templates/*.tmpl.yaml`` (daemonset.go:42, resourceclaimtemplate.go:41-42;
the image puts the module's ``templates/`` there): the rehearsal starts it in a private mount namespace of its own
(``unshare --user --map-root-user --mount``) whose root is the machine's with the module's ``templates/`` mounted at
``/templates`` (:data:`PRIVATE_ROOT`), so nothing outside the rehearsal's state directory is written.

Not rehearsed: the chart's controller Deployment and its other templates (webhook, network policies, validation),
and the IMEX daemons (``compute-domain-daemon``: NVML, IMEX), whose pods kwok runs without running them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from efa_stack import contract
from efa_stack.rehearsal import compute_domains
from efa_stack.rehearsal.binaries import ROOT, Binary, module_dir
from efa_stack.rehearsal.controllers import Context, Launch, LocalController, deep_merge, http_ok
from k8s.components import NVIDIA_DRA_DRIVER
from k8s.compute_domains import NVIDIA_DRA_CHART

CHART = Path("deployments") / "helm" / NVIDIA_DRA_CHART.rsplit("/", 1)[1]
"""The chart in the module (the one published as ``oci://registry.k8s.io/dra-driver-nvidia/charts/...``)."""
TEMPLATES = (
    "deviceclass-compute-domain-daemon.yaml", "deviceclass-compute-domain-default-channel.yaml",
    "rbac-controller.yaml", "rbac-kubeletplugin.yaml", "rbac-compute-domain-daemon.yaml",
    "validatingadmissionpolicy.yaml", "validatingadmissionpolicybinding.yaml",
)
RESOURCE_API_VERSION = contract.RESOURCE_API_VERSION
"""What the chart's ``resourceApiVersion`` helper picks on the rehearsal's API server, which serves resource.k8s.io/v1
(_helpers.tpl ``dra-driver-nvidia-gpu.resourceApiVersion``, unless the values name one)."""
PRIVATE_ROOT = """\
set -eu
# $1: an empty folder to build the root in, $2: the folder to mount at /templates; then the command
root=$1 templates=$2; shift 2
mount -t tmpfs tmpfs "$root"
for entry in /*; do
  if [ -L "$entry" ]; then cp -P "$entry" "$root$entry"
  elif [ -d "$entry" ]; then mkdir "$root$entry"; mount --rbind "$entry" "$root$entry"
  fi
done
mkdir "$root/templates"
mount --bind "$templates" "$root/templates"
cd "$root$PWD"
exec chroot "$root" "$@"
"""
"""Run in a new user and mount namespace: a root of the machine's top-level folders (bind mounts, symlinks copied)
plus ``/templates``, then the command chrooted into it (the same process: ``exec``)."""


# --- the chart's templates --------------------------------------------------------------------------------------
_ACTION = re.compile(r"\{\{(-)?\s*(.*?)\s*(-)?\}\}", re.DOTALL)
_OPEN = re.compile(r"^(if|range|with)\s+(.*)$", re.DOTALL)
_RANGE = re.compile(r"^\$(\w+)\s*:=\s*(.*)$", re.DOTALL)


class TemplateError(ValueError):
    """A template action :func:`render_template` does not know (the chart changed: teach it the action)."""


@dataclass(frozen=True)
class Known:
    """What :func:`render_template` knows: an action's text (``$.`` read as ``.``) -> its value (a string to print, a
    truth for ``if``/``with``, a list for ``range``); ``.Values.<path>`` is read from ``values``."""

    actions: Mapping[str, Any]
    values: Mapping[str, Any]

    def value(self, expr: str, scope: Mapping[str, Any]) -> Any:
        expr = re.sub(r"\$(?=\.)", "", expr).replace('" $', '" .').strip()
        base, _, pipe = expr.partition("|")
        base, pipe = base.strip(), pipe.strip()
        if base.startswith("$") and base[1:] in scope:
            got = scope[base[1:]]
        elif base in self.actions:
            got = self.actions[base]
        elif base.startswith(".Values."):
            got = self.values
            for key in base.removeprefix(".Values.").split("."):
                got = got.get(key) if isinstance(got, Mapping) else None
        else:
            raise TemplateError(f"a template action the rehearsal does not render: {{{{ {expr} }}}}")
        if not pipe:
            return got
        indent = re.fullmatch(r"nindent (\d+)", pipe)
        if indent is None or not isinstance(got, str):
            raise TemplateError(f"a template pipeline the rehearsal does not render: {{{{ {expr} }}}}")
        pad = " " * int(indent.group(1))
        return "\n" + "\n".join(pad + line for line in got.splitlines())


def _tokens(text: str) -> list[tuple[str, str]]:
    """("text", s) and ("action", body) in order, with the ``{{-`` and ``-}}`` trimming applied; comments dropped."""
    out: list[tuple[str, str]] = []
    trim_next, pos = False, 0
    for m in _ACTION.finditer(text):
        before = text[pos:m.start()]
        before = before.lstrip() if trim_next else before
        out.append(("text", before.rstrip() if m.group(1) else before))
        if not m.group(2).startswith("/*"):
            out.append(("action", m.group(2)))
        trim_next, pos = bool(m.group(3)), m.end()
    out.append(("text", text[pos:].lstrip() if trim_next else text[pos:]))
    return out


def _block(tokens: list[tuple[str, str]], i: int, known: Known, scope: dict[str, Any], emit: bool
           ) -> tuple[str, int, str]:
    """Render from ``tokens[i]`` up to the ``end`` or ``else`` closing this block: (text, index after it, which)."""
    out: list[str] = []
    while i < len(tokens):
        kind, body = tokens[i]
        i += 1
        if kind == "text":
            out.append(body if emit else "")
        elif body in ("end", "else"):
            return "".join(out), i, body
        elif (opened := _OPEN.match(body)) is not None:
            word, expr = opened.groups()
            ranged = _RANGE.match(expr) if word == "range" else None
            items = known.value(ranged.group(2), scope) if ranged and emit else [None]
            start = i
            for item in items if word == "range" else [None]:
                inner = {**scope, ranged.group(1): item} if ranged else scope
                truth = True if word == "range" else bool(emit and known.value(expr, scope))
                if word == "with" and truth:
                    raise TemplateError(f"{{{{ with {expr} }}}} with a value the rehearsal does not render")
                text, i, closed = _block(tokens, start, known, inner, emit and truth)
                out.append(text)
                if closed == "else":
                    text, i, _ = _block(tokens, i, known, inner, emit and not truth)
                    out.append(text)
            if word == "range" and not items:
                _, i, _ = _block(tokens, start, known, scope, False)
        elif (assigned := _RANGE.match(body)) is not None:
            if emit:
                scope[assigned.group(1)] = known.value(assigned.group(2), scope)
        elif emit:
            out.append(str(known.value(body, scope)))
    return "".join(out), i, "eof"


def render_template(text: str, known: Known) -> list[dict[str, Any]]:
    """The documents of a Helm template rendered with ``known``: ``if``/``else``/``range``/``with``/``end``, variables,
    ``include`` of the helpers ``known`` names and ``nindent``; :class:`TemplateError` for anything else."""
    out, _, closed = _block(_tokens(text), 0, known, {}, True)
    if closed != "eof":
        raise TemplateError(f"an unmatched {{{{ {closed} }}}}")
    return [d for d in yaml.safe_load_all(out) if d]


def chart_values(module: Path, values: Mapping[str, Any]) -> dict[str, Any]:
    """The chart's ``values.yaml`` with the release's ``values`` over it (what Helm renders with)."""
    return deep_merge(yaml.safe_load((module / CHART / "values.yaml").read_text()), values)


def _namespaces(namespace: str, values: Mapping[str, Any]) -> list[str]:
    """_helpers.tpl ``dra-driver-nvidia-gpu.namespaces``: the release's namespace and the controller's
    ``ADDITIONAL_NAMESPACES``."""
    out = [namespace]
    for env in values["controller"]["containers"]["computeDomain"].get("env") or []:
        if env.get("name") == "ADDITIONAL_NAMESPACES" and env.get("value"):
            out += [n.strip() for n in str(env["value"]).split(",") if n.strip()]
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class Names:
    """The chart's names for release ``release`` in ``namespace`` (_helpers.tpl with no overrides: the release name
    contains the chart name, so it is the fullname)."""

    release: str = contract.NVIDIA_DRA_RELEASE
    namespace: str = contract.NVIDIA_DRA_NAMESPACE
    chart: str = NVIDIA_DRA_CHART.rsplit("/", 1)[1]

    @property
    def fullname(self) -> str:
        return self.release if self.chart in self.release else f"{self.release}-{self.chart}"

    @property
    def service_account(self) -> str:
        return f"{self.fullname}-service-account"

    def selector(self, component: str) -> dict[str, str]:
        return {f"{self.chart}-component": component}

    def template_labels(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": self.chart, "app.kubernetes.io/instance": self.release}

    def labels(self, version: str) -> dict[str, str]:
        return {"helm.sh/chart": f"{self.chart}-{version}", "app.kubernetes.io/version": version,
                "app.kubernetes.io/managed-by": "Helm", **self.template_labels()}

    def image(self, values: Mapping[str, Any], app_version: str) -> str:
        """_helpers.tpl ``dra-driver-nvidia-gpu.fullimage``."""
        return f"{values['image']['repository']}:{values['image'].get('tag') or 'v' + app_version}"


def _chart(module: Path) -> dict[str, Any]:
    return dict(yaml.safe_load((module / CHART / "Chart.yaml").read_text()))


def _known(module: Path, names: Names, values: Mapping[str, Any]) -> Known:
    chart = _chart(module)
    include = 'include "dra-driver-nvidia-gpu.{}" .'
    labels = "\n".join(f'{k}: "{v}"' for k, v in names.labels(chart["version"]).items())
    features = values.get("featureGates") or {}
    return Known({
        include.format("name"): names.chart,
        include.format("namespace"): names.namespace,
        include.format("serviceAccountName"): names.service_account,
        include.format("resourceApiVersion"): values.get("resourceApiVersion") or RESOURCE_API_VERSION,
        include.format("labels"): labels,
        'splitList "," (include "dra-driver-nvidia-gpu.namespaces" .)': _namespaces(names.namespace, values),
        # the rehearsal's API server is no OpenShift's
        '.Capabilities.APIVersions.Has "security.openshift.io/v1/SecurityContextConstraints"': False,
        '(and .Values.resources.gpus.enabled (and .Values.featureGates (and (hasKey .Values.featureGates "MPSSupport") '
        '.Values.featureGates.MPSSupport)))': bool(values["resources"]["gpus"]["enabled"] and features.get("MPSSupport")),
    }, values)


def kubelet_plugin_daemon_set(module: Path, names: Names, values: Mapping[str, Any]) -> dict[str, Any]:
    """The kubelet plugin's DaemonSet (templates/kubeletplugin.yaml) with what decides where its pods run and under
    which account: names and labels, ``updateStrategy``, priority class, ServiceAccount, ``nodeSelector``,
    ``affinity``, ``tolerations`` from the values. Its containers carry their name and image only (kwok runs none)."""
    plugin, chart = values["kubeletPlugin"], _chart(module)
    image = names.image(values, chart["appVersion"])
    containers = [{"name": "compute-domains", "image": image}] if values["resources"]["computeDomains"]["enabled"] else []
    if values["resources"]["gpus"]["enabled"]:
        containers.append({"name": "gpus", "image": image})
    spec: dict[str, Any] = {
        "serviceAccountName": f"{names.service_account}-kubeletplugin",
        "initContainers": [{"name": "init-container", "image": image}],
        "containers": containers,
        **{k: plugin[k] for k in ("priorityClassName", "nodeSelector", "affinity", "tolerations") if plugin.get(k)},
    }
    selector = names.selector("kubelet-plugin")
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": f"{names.chart}-kubelet-plugin", "namespace": names.namespace,
                     "labels": names.labels(chart["version"])},
        "spec": {"selector": {"matchLabels": selector},
                 **({"updateStrategy": plugin["updateStrategy"]} if plugin.get("updateStrategy") else {}),
                 "template": {"metadata": {"labels": {**names.template_labels(), **selector}}, "spec": spec}},
    }


def release_objects(module: Path, values: Mapping[str, Any], names: Names = Names()) -> list[dict[str, Any]]:
    """The release's stand-in (module docstring), Namespace first, CRDs next."""
    merged = chart_values(module, values)
    crds = [d for f in sorted((module / CHART / "crds").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    known = _known(module, names, merged)
    rendered = [d for name in TEMPLATES for d in render_template((module / CHART / "templates" / name).read_text(), known)]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names.namespace}}
    return [namespace, *crds, *rendered, kubelet_plugin_daemon_set(module, names, merged)]


def controller_env(module: Path, names: Names, values: Mapping[str, Any]) -> dict[str, str]:
    """The controller container's environment as templates/controller.yaml renders it with the values (``POD_NAME``
    and ``NAMESPACE`` from the downward API as a pod would have them)."""
    merged, chart = chart_values(module, values), _chart(module)
    controller = merged["controller"]
    env: dict[str, str] = {}
    if controller["metrics"]["enabled"]:
        env |= {"HTTP_ENDPOINT": controller["metrics"]["httpEndpoint"], "METRICS_PATH": controller["metrics"]["metricsPath"],
                "PPROF_PATH": controller["metrics"]["profilePath"]}
    env |= {"LOG_VERBOSITY": str(merged["logVerbosity"]), "LOG_VERBOSITY_CD_DAEMON": str(merged["logVerbosity"]),
            "POD_NAME": f"{names.chart}-controller-rehearsal", "NAMESPACE": names.namespace,
            "IMAGE_NAME": names.image(merged, chart["appVersion"]), "NVIDIA_VISIBLE_DEVICES": "void"}
    if merged.get("imagePullSecrets"):
        env["CD_DAEMON_IMAGE_PULL_SECRET_NAMES"] = ",".join(s["name"] for s in merged["imagePullSecrets"])
    if merged.get("featureGates"):
        env["FEATURE_GATES"] = "".join(f"{k}={v}," for k, v in sorted(merged["featureGates"].items()))
    env |= {e["name"]: str(e["value"]) for e in controller["containers"]["computeDomain"].get("env") or []}
    election = controller["leaderElection"]
    env |= {"LEADER_ELECTION_ENABLED": str(election["enabled"]).lower(),
            "LEADER_ELECTION_LEASE_LOCK_NAME": f"{names.chart}-controller",
            "LEADER_ELECTION_LEASE_LOCK_NAMESPACE": names.namespace,
            "LEADER_ELECTION_LEASE_DURATION": election["leaseDuration"],
            "LEADER_ELECTION_RENEW_DEADLINE": election["renewDeadline"],
            "LEADER_ELECTION_RETRY_PERIOD": election["retryPeriod"]}
    return env


class ComputeDomainController(LocalController):
    """kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1's ``compute-domain-controller`` for the release, under the chart's
    controller ServiceAccount, with the environment of templates/controller.yaml (:func:`controller_env`) except
    ``HTTP_ENDPOINT`` (a free port of 127.0.0.1, not ``:8080``), in its private root with ``/templates`` (module
    docstring). Ready once its metrics endpoint answers: the chart gives the Deployment no probe, so Helm's wait is
    for the pod to run; the endpoint starts after the flags are read and the API client is made (main.go
    ``SetupHTTPEndpoint``)."""

    name = NVIDIA_DRA_DRIVER
    binary: Binary = "compute-domain-controller"
    namespace = contract.NVIDIA_DRA_NAMESPACE
    service_account = f"{Names().service_account}-controller"
    release_deployment = contract.NVIDIA_DRA_CONTROLLER
    port_names = ("metrics",)
    NAMESPACES = ("--user", "--map-root-user", "--mount")

    def prepare(self, ctx: Context) -> None:
        """RuntimeError with what to do when this machine refuses the private mount namespace."""
        proc = subprocess.run(["unshare", *self.NAMESPACES, "true"], capture_output=True, text=True, timeout=30,
                              check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"`unshare {' '.join(self.NAMESPACES)}` failed here ({proc.stderr.strip()}): the NVIDIA DRA driver's "
                "ComputeDomain controller reads its templates from the fixed /templates, which the rehearsal provides "
                "in a private mount namespace; allow user namespaces (sysctl kernel.unprivileged_userns_clone=1, or on "
                "Ubuntu kernel.apparmor_restrict_unprivileged_userns=0) or rehearse as root")

    def launch(self, ctx: Context) -> Launch:
        module = module_dir(self.binary)
        env = controller_env(module, Names(), ctx.values)
        env["HTTP_ENDPOINT"] = f"127.0.0.1:{ctx.ports['metrics']}"
        (ctx.folder / "root").mkdir(exist_ok=True)
        script = ctx.folder / "private-root.sh"
        script.write_text(PRIVATE_ROOT)
        assert ctx.binary is not None
        args = [*self.NAMESPACES, "sh", str(script), str(ctx.folder / "root"),
                str(module / "templates"), str(ctx.binary), "-v", env["LOG_VERBOSITY"]]
        return Launch(args, env, [(f"env HTTP_ENDPOINT={env['HTTP_ENDPOINT']} (the chart: "
                                  f"{chart_values(module, ctx.values)['controller']['metrics']['httpEndpoint']})"),
                                  f"/templates: {module / 'templates'} in a private mount namespace"],
                      program="unshare")

    def ready(self, ctx: Context) -> bool:
        return http_ok(f"http://127.0.0.1:{ctx.ports['metrics']}/metrics")


class KubeletPluginStandIn(LocalController):
    """The kubelet plugin's stand-in, :func:`efa_stack.rehearsal.compute_domains.serve`, as a process under the
    plugin's ServiceAccount (``<fullname>-service-account-kubeletplugin``, templates/rbac-kubeletplugin.yaml). Ready
    once the plugin's DaemonSet has every pod it wants running and each of their nodes has its slice (Helm's wait for
    a DaemonSet, and the plugin's first publication)."""

    name = "compute-domain-kubelet-plugin"
    binary = None
    namespace = contract.NVIDIA_DRA_NAMESPACE
    port_names = ()

    def __init__(self) -> None:
        names = Names()
        self.service_account = f"{names.service_account}-kubeletplugin"
        self.daemon_set = f"{names.chart}-kubelet-plugin"
        self.selector = ",".join(f"{k}={v}" for k, v in names.selector("kubelet-plugin").items())

    def launch(self, ctx: Context) -> Launch:
        (ctx.folder / "ready").unlink(missing_ok=True)
        args = ["-m", compute_domains.__name__, "--namespace", self.namespace, "--selector", self.selector,
                "--ready", str(ctx.folder / "ready")]
        what = "a stand-in: ResourceSlices and ComputeDomain node labels (efa_stack/rehearsal/compute_domains.py)"
        return Launch(args, {"PYTHONPATH": str(ROOT)}, [what], program=sys.executable)

    def ready(self, ctx: Context) -> bool:
        if not (ctx.folder / "ready").exists():
            return False
        got = ctx.api.get({"apiVersion": "apps/v1", "kind": "DaemonSet",
                           "metadata": {"namespace": self.namespace, "name": self.daemon_set}})
        status = got.body.get("status") or {}
        if got.status != 200 or status.get("observedGeneration") != got.body["metadata"].get("generation") or (
                status.get("numberReady") != status.get("desiredNumberScheduled")):
            return False
        pods = ctx.api.list("v1", "Pod", self.namespace, label_selector=self.selector)
        nodes = {p["spec"].get("nodeName") for p in pods}
        slices = ctx.api.list(compute_domains.RESOURCE_API_VERSION, "ResourceSlice",
                              field_selector=f"spec.driver={compute_domains.DRIVER}")
        return nodes <= {s["spec"]["nodeName"] for s in slices}
