"""The controllers efa-stack installs, run as local processes of their real binaries at the pinned versions.

Each runs under its own ServiceAccount: the rehearsal asks the TokenRequest API for a token of the ServiceAccount the
rendered objects create and gives the controller a kubeconfig with it, so every request it makes is authorized by the
RBAC efa-stack renders. Their webhooks are served by these processes the way envtest serves them: the rehearsal makes
a CA (:class:`WebhookServing`) and one serving certificate for 127.0.0.1, gives each controller the certificate, and
points every webhook configuration and CRD conversion webhook that names one of the controller's Services at
``https://127.0.0.1:<port><path>`` (:meth:`LocalControllers.rewrite`); no webhook is removed. The CA bundle goes with
it, except for a controller whose own certificate manager writes it (Kueue, the Training Operator): they are given
the rehearsal's CA and write it themselves.

A controller efa-stack renders as a Deployment (the MPI operator, Kueue, the Training Operator) starts from that
Deployment's container (:mod:`efa_stack.rehearsal.pods`); what each one changes is in its class's docstring and in
:attr:`Launch.changes`.
"""

from __future__ import annotations

import base64
import copy
import fcntl
import hashlib
import json
import socket
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from efa_stack import contract
from efa_stack.planning.plan import ClusterPlan
from efa_stack.rehearsal.binaries import Binary, binaries
from efa_stack.rehearsal.client import Api, ApiError
from efa_stack.rehearsal.control_plane import ControlPlane
from efa_stack.rehearsal.pki import Authority, KeyPair
from efa_stack.rehearsal.pods import Container, container
from efa_stack.rehearsal.processes import Process, free_ports
from k8s.components import KUEUE, MPI_OPERATOR, TRAINING_OPERATOR
from k8s.training_operators import CERT_DIR

READY_TIMEOUT = 180
"""Seconds a controller has to answer ready after it started."""
LOCK_TIMEOUT = 600
"""Seconds to wait for a machine-wide resource (a fixed port or path) another rehearsal holds."""
CA_NAMES = ("kueue-ca", "training-operator-ca")
"""Names the webhook CA must verify for: cert-controller checks its CA against the controller's CA name
(open-policy-agent/cert-controller@v0.16.0 pkg/rotator/rotator.go ``validCACert``; kubernetes-sigs/kueue@v0.19.2 and
kubeflow/training-operator@v1.9.4 pkg/util/cert/cert.go and pkg/cert/cert.go ``caName``)."""


@dataclass(frozen=True)
class WebhookServing:
    """The rehearsal's webhook CA and the serving certificate every local controller presents (127.0.0.1 and the
    Service names the controllers' own certificate managers check)."""

    authority: Authority
    serving: KeyPair

    @classmethod
    def create(cls, service_names: tuple[str, ...]) -> WebhookServing:
        authority = Authority.create("efa-stack-rehearsal-webhooks", dns_names=CA_NAMES)
        return cls(authority, authority.issue("efa-stack-rehearsal-webhook", dns_names=["localhost", *service_names],
                                              ips=["127.0.0.1"]))

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.authority.pair.cert_pem).decode()

    def write(self, folder: Path) -> Path:
        """``tls.crt``, ``tls.key`` and ``ca.crt`` in ``folder`` (what controller-runtime's webhook server reads)."""
        self.serving.write(folder / "tls.crt", folder / "tls.key")
        (folder / "ca.crt").write_bytes(self.authority.pair.cert_pem)
        return folder

    def secret_data(self) -> dict[str, str]:
        """The data of a cert-controller Secret holding this CA and certificate (``ca.crt``, ``ca.key``, ``tls.crt``,
        ``tls.key``: rotator.go ``populateSecret``)."""
        raw = {"ca.crt": self.authority.pair.cert_pem, "ca.key": self.authority.pair.key_pem,
               "tls.crt": self.serving.cert_pem, "tls.key": self.serving.key_pem}
        return {k: base64.b64encode(v).decode() for k, v in raw.items()}


@dataclass
class Launch:
    """How a controller is started: arguments after the binary, extra environment, and what differs from the
    rendered Deployment (one line each, for the report)."""

    args: list[str]
    env: dict[str, str]
    changes: list[str] = field(default_factory=list)
    program: str | None = None
    """What runs instead of the controller's binary (which it then starts itself, or a stand-in's interpreter)."""


@dataclass
class Context:
    """What a controller needs to start: the control plane, the rendered objects, its folder and ports; the plan and,
    for a release's controller, the release's values."""

    plane: ControlPlane
    objects: list[dict[str, Any]]
    folder: Path
    ports: dict[str, int]
    webhooks: WebhookServing
    plan: ClusterPlan | None = None
    values: Mapping[str, Any] = field(default_factory=dict)
    binary: Path | None = None
    """The controller's built binary (None for a stand-in without one)."""

    @property
    def api(self) -> Api:
        return self.plane.api

    def rendered(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        for o in self.objects:
            meta = o["metadata"]
            if o["kind"] == kind and meta["name"] == name and meta.get("namespace") == namespace:
                return o
        raise KeyError(f"no rendered {kind} {namespace}/{name}")

    def live(self, namespace: str, template: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
        """(kind, name) -> the live ConfigMaps and Secrets ``template``'s volumes name (what a kubelet mounts)."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for v in template["spec"].get("volumes", []):
            ref = ("ConfigMap", v["configMap"]["name"]) if "configMap" in v else (
                ("Secret", v["secret"]["secretName"]) if "secret" in v else None)
            if ref is None:
                continue
            meta = {"name": ref[1], "namespace": namespace}
            got = self.api.get({"apiVersion": "v1", "kind": ref[0], "metadata": meta})
            if got.status != 200:
                raise ApiError(f"{ref[0]} {namespace}/{ref[1]} that the controller mounts: {got.message()}")
            out[ref] = got.body
        return out


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return bool(resp.status == 200)


def deep_merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in patch.items():
        out[key] = deep_merge(out.get(key) or {}, value) if isinstance(value, Mapping) else value
    return out


def flatten(patch: Mapping[str, Any], prefix: str = "") -> list[str]:
    lines: list[str] = []
    for key, value in patch.items():
        if isinstance(value, Mapping):
            lines += flatten(value, f"{prefix}{key}.")
        else:
            lines.append(f"{prefix}{key}: {value}")
    return lines


@contextmanager
def machine_lock(name: str, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """Hold ``/tmp/efa-stack-rehearsal-<name>.lock``: one rehearsal at a time on this machine uses a resource a
    controller fixes (a port, a path) that no flag moves."""
    path = Path("/tmp") / f"efa-stack-rehearsal-{name}.lock"
    with path.open("a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path}: another rehearsal on this machine held it for {timeout:.0f}s"
                                       ) from None
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


class LocalController:
    """One controller: which binary, under which ServiceAccount, from which rendered Deployment, serving which
    Services' webhooks. Subclasses say how it starts (:meth:`LocalController.launch`) and when it is ready
    (:meth:`LocalController.ready`)."""

    name: str
    """The rollout's component id (:mod:`k8s.components`) of what it runs, or its own for a subchart's controller."""
    binary: Binary | None
    """What tools/build.sh builds for it; None for a stand-in that runs in Python (:attr:`Launch.program`)."""
    namespace: str
    service_account: str
    deployment: str | None = None
    container: str = ""
    image_binary: tuple[str, ...] = ()
    services: tuple[str, ...] = ()
    """The Services (in :attr:`LocalController.namespace`) whose webhooks this process serves."""
    release_deployment: str | None = None
    """For a controller that stands in for a Helm release: the Deployment the release would create."""
    injects_ca: bool = False
    """Its own certificate manager writes the CA into its webhook configurations (the rehearsal then leaves
    ``caBundle`` out, so that the rollout's wait for it and the manager's RBAC are exercised)."""
    port_names: tuple[str, ...] = ("webhook", "health", "metrics")
    locks: tuple[str, ...] = ()
    """Machine-wide resources (:func:`machine_lock`) held while the process runs."""

    def rendered_container(self, ctx: Context) -> Container:
        assert self.deployment is not None, self.name
        deployment = ctx.rendered("Deployment", self.namespace, self.deployment)
        template = deployment["spec"]["template"]
        return container(template, self.container, ctx.live(self.namespace, template), namespace=self.namespace,
                         pod_name=f"{self.deployment}-rehearsal", folder=ctx.folder / "mounts",
                         image_binary=self.image_binary)

    def prepare(self, ctx: Context) -> None:
        """What must exist before the process starts (a Secret the cluster would fill)."""

    def transform(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A rendered object as this controller needs it applied in the rehearsal (unchanged by default)."""
        return obj

    def mounted_secret(self, ctx: Context, mount_path: str) -> str:
        """The Secret the rendered Deployment mounts at ``mount_path``."""
        assert self.deployment is not None, self.name
        spec = ctx.rendered("Deployment", self.namespace, self.deployment)["spec"]["template"]["spec"]
        volume = next(m["name"] for c in spec["containers"] for m in c.get("volumeMounts", [])
                      if m["mountPath"] == mount_path)
        return str(next(v["secret"]["secretName"] for v in spec["volumes"] if v["name"] == volume))

    def fill_cert_secret(self, ctx: Context, name: str) -> None:
        """Put the rehearsal's CA and certificate into the controller's (rendered, empty) certificate Secret, where its
        cert-controller rotator looks first: finding them valid, it keeps them and injects that CA itself."""
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"namespace": self.namespace, "name": name}}
        got = ctx.api.merge_patch(secret, {"data": ctx.webhooks.secret_data()})
        if not got.ok:
            raise ApiError(f"Secret {self.namespace}/{name}: {got.message()}")

    def launch(self, ctx: Context) -> Launch:
        raise NotImplementedError

    def ready(self, ctx: Context) -> bool:
        raise NotImplementedError

    def clean_up(self) -> None:
        """What to remove outside the state directory once the process has stopped."""

    def service_names(self) -> tuple[str, ...]:
        return tuple(f"{s}.{self.namespace}.svc" for s in self.services)


class MpiOperator(LocalController):
    """kubeflow/mpi-operator v0.8.2 from the rendered ``mpi-operator`` Deployment: its arguments as rendered, the
    kubeconfig through ``KUBECONFIG`` (cmd/mpi-operator/app/server.go: "ENV KUBECONFIG will overwrite user defined
    Kubeconfig option"). It serves its health check on the fixed ``:8080`` (server.go ``healthCheckPort``), so one
    rehearsal at a time on a machine runs it; ready once it holds its leader-election Lease (``--lock-namespace``),
    which is when it starts its controller (``OnStartedLeading``)."""

    name = MPI_OPERATOR
    binary: Binary = "mpi-operator"
    namespace = contract.MPI_OPERATOR_NAMESPACE
    service_account = contract.MPI_OPERATOR_NAME
    deployment = contract.MPI_OPERATOR_NAME
    container = contract.MPI_OPERATOR_NAME
    port_names = ()
    locks = ("port-8080",)
    HEALTH_PORT = 8080

    def launch(self, ctx: Context) -> Launch:
        if not _port_free(self.HEALTH_PORT):
            raise RuntimeError(f"port {self.HEALTH_PORT} is taken on this machine: the MPI operator serves its health "
                               "check there (not configurable at v0.8.2); stop what listens there")
        c = self.rendered_container(ctx)
        return Launch(list(c.args), c.env,
                      ["kubeconfig from KUBECONFIG (a ServiceAccount token) instead of in-cluster"])

    def ready(self, ctx: Context) -> bool:
        lease = ctx.api.get({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"namespace": self.namespace, "name": self.name}})
        return lease.status == 200 and bool((lease.body.get("spec") or {}).get("holderIdentity"))


class Kueue(LocalController):
    """Kueue v0.19.2 from the rendered ``kueue-controller-manager`` Deployment, with the Configuration of the rendered
    ConfigMap, patched only where a process outside a pod needs it (listed in :attr:`Launch.changes`):

    - ``health.healthProbeBindAddress``, ``metrics.bindAddress``, ``webhook.port`` and ``webhook.host``: free ports of
      127.0.0.1 instead of ``:8081``, ``:8443``, ``9443``;
    - ``webhook.certDir``: the folder the rendered Secret volume is written to (the Deployment mounts it at
      ``/tmp/k8s-webhook-server/serving-certs``, Kueue's default);
    - ``leaderElection.resourceNamespace``: ``kueue-system``, which controller-runtime reads from the ServiceAccount
      mount in a pod and refuses to guess outside one;
    - ``featureGates.VisibilityOnDemand: false``: the visibility API server writes its certificates into the fixed
      ``/visibility`` (pkg/visibility/server.go ``certDir``), which a local process cannot use; nothing efa-stack
      does reads that API.

    Its internal certificate management stays on, as rendered: the rehearsal fills the rendered (empty) Secret the
    Deployment mounts (``kueue-webhook-server-cert``) with its CA and serving certificate, valid for
    ``kueue-webhook-service.kueue-system.svc`` too, so Kueue's cert-controller finds them valid, keeps them and
    injects the CA into the webhook configurations and the CRDs' conversion webhooks itself (pkg/util/cert/cert.go
    ``BootstrapCerts``; the RBAC for that is the one efa-stack renders). The kubelet's part, writing the Secret into
    the mounted folder, is done before the start.
    """

    name = KUEUE
    binary: Binary = "kueue"
    namespace = contract.KUEUE_NAMESPACE
    service_account = contract.KUEUE_CONTROLLER
    deployment = contract.KUEUE_CONTROLLER
    container = "manager"
    image_binary = ("/manager",)
    services = ("kueue-webhook-service",)
    injects_ca = True
    CERT_MOUNT = "/tmp/k8s-webhook-server/serving-certs"
    CONFIG_FLAG = "--config="

    def prepare(self, ctx: Context) -> None:
        self.fill_cert_secret(ctx, self.mounted_secret(ctx, self.CERT_MOUNT))

    def launch(self, ctx: Context) -> Launch:
        c = self.rendered_container(ctx)
        config = Path(next(a for a in c.args if a.startswith(self.CONFIG_FLAG)).removeprefix(self.CONFIG_FLAG))
        patch = {
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ctx.ports['health']}"},
            "metrics": {"bindAddress": f"127.0.0.1:{ctx.ports['metrics']}"},
            "webhook": {"port": ctx.ports["webhook"], "host": "127.0.0.1", "certDir": str(c.mounts[self.CERT_MOUNT])},
            "leaderElection": {"resourceNamespace": self.namespace},
            "featureGates": {"VisibilityOnDemand": False},
        }
        config.write_text(yaml.safe_dump(deep_merge(yaml.safe_load(config.read_text()), patch), sort_keys=False))
        return Launch(list(c.args), {**c.env, "TMPDIR": str(ctx.folder / "tmp")},
                      [f"Configuration {line}" for line in flatten(patch)])

    def ready(self, ctx: Context) -> bool:
        return http_ok(f"http://127.0.0.1:{ctx.ports['health']}/readyz")


class TrainingOperator(LocalController):
    """Kubeflow Training Operator v1.9.4 (PyTorchJob) from the rendered ``training-operator`` Deployment: its arguments
    and environment as rendered, plus free ports of 127.0.0.1 for metrics, health and webhooks (its flags
    ``--metrics-bind-address``, ``--health-probe-bind-address``, ``--webhook-server-port``).

    Its certificate rotator cannot be turned off and watches the fixed ``/tmp/k8s-webhook-server/serving-certs``
    (kubeflow/training-operator@v1.9.4 pkg/cert/cert.go ``certDir``, cmd/training-operator.v1/main.go
    ``cert.ManageCerts``), where the rendered Deployment mounts its Secret: the rehearsal fills that Secret with its
    CA and certificate (valid for ``training-operator.kubeflow.svc``), writes the files into that folder as the
    kubelet would, and holds a machine-wide lock on it while the operator runs; the files are removed at the end."""

    name = TRAINING_OPERATOR
    binary: Binary = "training-operator"
    namespace = contract.TRAINING_OPERATOR_NAMESPACE
    service_account = contract.TRAINING_OPERATOR_NAME
    deployment = contract.TRAINING_OPERATOR_NAME
    container = contract.TRAINING_OPERATOR_NAME
    image_binary = ("/manager",)
    services = (contract.TRAINING_OPERATOR_NAME,)
    locks = ("tmp-k8s-webhook-server",)
    injects_ca = True

    def prepare(self, ctx: Context) -> None:
        self.fill_cert_secret(ctx, self.mounted_secret(ctx, CERT_DIR))

    def launch(self, ctx: Context) -> Launch:
        c = self.rendered_container(ctx)
        folder = Path(CERT_DIR)
        folder.mkdir(parents=True, exist_ok=True)
        for file in ("tls.crt", "tls.key"):
            (folder / file).write_bytes((c.mounts[CERT_DIR] / file).read_bytes())
        flags = [f"--metrics-bind-address=127.0.0.1:{ctx.ports['metrics']}",
                 f"--health-probe-bind-address=127.0.0.1:{ctx.ports['health']}",
                 f"--webhook-server-port={ctx.ports['webhook']}"]
        return Launch([*c.args, *flags], c.env, [f"flag {f}" for f in flags] + [f"certificate written to {folder}"])

    def ready(self, ctx: Context) -> bool:
        return http_ok(f"http://127.0.0.1:{ctx.ports['health']}/readyz")

    def clean_up(self) -> None:
        for file in ("tls.crt", "tls.key"):
            (Path(CERT_DIR) / file).unlink(missing_ok=True)


CONTROLLERS: dict[str, type[LocalController]] = {c.name: c for c in (MpiOperator, Kueue, TrainingOperator)}


@dataclass
class Running:
    controller: LocalController
    process: Process
    launch: Launch
    ready_in: float
    template: str = ""
    """A digest of the live pod template of its Deployment when it started ("" for a release's stand-in): a new one
    means a new pod, which starts with what the cluster holds then (:meth:`LocalControllers.restart`)."""
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class LocalControllers:
    """The controllers of one rehearsal: their ports, chosen up front so that the webhook configurations can be
    rewritten before they are applied (:meth:`LocalControllers.rewrite`), and the processes once started
    (:meth:`LocalControllers.start`)."""

    plane: ControlPlane
    bins: Mapping[Binary, Path]
    controllers: list[LocalController]
    webhooks: WebhookServing
    plan: ClusterPlan | None = None
    ports: dict[str, dict[str, int]] = field(default_factory=dict)
    running: dict[str, Running] = field(default_factory=dict)
    held: ExitStack = field(default_factory=ExitStack)
    locks: set[str] = field(default_factory=set)
    """Machine-wide locks held, and the controllers whose clean-up is registered (a restart takes neither again)."""

    @classmethod
    def create(cls, plane: ControlPlane, bins: Mapping[Binary, Path], controllers: list[LocalController],
               plan: ClusterPlan | None = None, known: tuple[LocalController, ...] = ()) -> LocalControllers:
        """``known``: every controller a later rollout of the cluster may start too (a spec change that adds a
        release), whose Services the serving certificate must name from the start."""
        names = tuple(dict.fromkeys(n for c in (*controllers, *known) for n in c.service_names()))
        out = cls(plane, bins, [], WebhookServing.create(names), plan)
        for c in controllers:
            out.add(c)
        return out

    def add(self, c: LocalController) -> None:
        """Take controller ``c`` on (its ports chosen), unless one of its name is there."""
        if all(x.name != c.name for x in self.controllers):
            self.controllers.append(c)
            self.ports[c.name] = dict(zip(c.port_names, free_ports(len(c.port_names)), strict=True))

    def serving(self, namespace: str, service: str) -> LocalController | None:
        """The controller serving ``namespace/service``'s webhooks, or None."""
        return next((c for c in self.controllers if c.namespace == namespace and service in c.services), None)

    def _client_config(self, config: dict[str, Any], where: str) -> dict[str, Any]:
        service = config.get("service")
        if service is None:
            return config
        c = self.serving(service["namespace"], service["name"])
        if c is None:
            raise KeyError(f"{where}: no local controller serves Service {service['namespace']}/{service['name']}")
        url = f"https://127.0.0.1:{self.ports[c.name]['webhook']}{service.get('path', '/')}"
        return {"url": url} if c.injects_ca else {"url": url, "caBundle": self.webhooks.ca_bundle}

    def rewrite(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` with every webhook ``clientConfig`` that names a Service pointed at the local controller serving it
        (webhook configurations, CRD conversion webhooks), and as each controller transforms it
        (:meth:`LocalController.transform`)."""
        for c in self.controllers:
            obj = c.transform(obj)
        kind, name = obj.get("kind"), obj.get("metadata", {}).get("name")
        if kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            out = copy.deepcopy(obj)
            for w in out.get("webhooks", []):
                w["clientConfig"] = self._client_config(w["clientConfig"], f"{kind} {name} webhook {w['name']}")
            return out
        conversion = (obj.get("spec") or {}).get("conversion") or {} if kind == "CustomResourceDefinition" else {}
        if conversion.get("strategy") == "Webhook":
            out = copy.deepcopy(obj)
            hook = out["spec"]["conversion"]["webhook"]
            hook["clientConfig"] = self._client_config(hook["clientConfig"], f"CRD {name} conversion")
            return out
        return obj

    def start(self, name: str, objects: list[dict[str, Any]], values: Mapping[str, Any] | None = None) -> Running:
        """Start controller ``name`` under its ServiceAccount's token and wait until it is ready (``values``: its
        release's values)."""
        c = next(x for x in self.controllers if x.name == name)
        if c.binary is not None and c.binary not in self.bins:  # a controller a spec change added
            self.bins = {**self.bins, **binaries([c.binary])}
        folder = self.plane.state / "controllers" / name
        (folder / "tmp").mkdir(parents=True, exist_ok=True)
        ctx = Context(self.plane, objects, folder, self.ports[name], self.webhooks, self.plan, values or {},
                      self.bins[c.binary] if c.binary is not None else None)
        for lock in c.locks:
            if lock not in self.locks:
                self.held.enter_context(machine_lock(lock))
                self.locks.add(lock)
        if f"clean-up {name}" not in self.locks:
            self.held.callback(c.clean_up)
            self.locks.add(f"clean-up {name}")
        c.prepare(ctx)
        launch = c.launch(ctx)
        token = self.plane.api.service_account_token(c.namespace, c.service_account)
        kubeconfig = self.plane.kubeconfig(f"{name}", token)
        env = {**launch.env, "KUBECONFIG": str(kubeconfig), "HOME": str(folder)}
        started = time.monotonic()
        program = launch.program or str(ctx.binary)
        process = self.plane.processes.start(name, [program, *launch.args],
                                             self.plane.state / "logs" / f"{name}.log", env=env, cwd=folder)
        process.wait_ready(lambda: c.ready(ctx), READY_TIMEOUT)
        running = Running(c, process, launch, time.monotonic() - started, self.template(c), values or {})
        self.running[name] = running
        return running

    def template(self, c: LocalController) -> str:
        """The digest of the live pod template of ``c``'s Deployment ("" without one)."""
        if c.deployment is None:
            return ""
        got = self.plane.api.get({"apiVersion": "apps/v1", "kind": "Deployment",
                                  "metadata": {"namespace": c.namespace, "name": c.deployment}})
        if got.status != 200:
            return ""
        return hashlib.sha256(json.dumps(got.body["spec"]["template"], sort_keys=True).encode()).hexdigest()

    def restart(self, name: str, objects: list[dict[str, Any]]) -> Running:
        """Stop controller ``name`` and start it again from what the cluster holds now (a rolled Deployment's new pod:
        its new arguments, configuration and certificates)."""
        old = self.running.pop(name)
        self.plane.processes.stop(old.process)
        return self.start(name, objects, old.values)

    def close(self) -> None:
        """Stop the controllers (the last started first) and release the machine-wide resources they held."""
        for running in reversed(list(self.running.values())):
            self.plane.processes.stop(running.process)
        self.running.clear()
        self.held.close()


def controllers_for(objects: list[dict[str, Any]]) -> list[LocalController]:
    """The local controllers whose Deployments ``objects`` render."""
    deployments = {(o["metadata"].get("namespace"), o["metadata"]["name"])
                   for o in objects if o["kind"] == "Deployment"}
    return [cls() for cls in CONTROLLERS.values() if (cls.namespace, cls.deployment) in deployments]
