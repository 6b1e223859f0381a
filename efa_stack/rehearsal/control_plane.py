"""A Kubernetes control plane of local processes: etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok.

:func:`control_plane` starts them on free ports of 127.0.0.1 with their data, keys, kubeconfigs and logs in a state
directory, and stops them (reverse order, bounded) when its ``with`` block ends, also on an error or Ctrl-C. What it
proves, with the nodes of :mod:`efa_stack.rehearsal.nodes`: the real scheduler places the pods the real controllers
make, with the real admission chain in front, webhooks included (unlike the API server test, which turns the webhook
admission plugins off); kwok plays the kubelets (:mod:`efa_stack.rehearsal.kwok`).

kube-controller-manager and kube-scheduler use the cluster-admin token, as kubeadm's static credentials for them are
admins too in effect; the controllers efa-stack installs get their own ServiceAccounts' tokens
(:mod:`efa_stack.rehearsal.controllers`).
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import ssl
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from efa_stack.rehearsal.binaries import Binary
from efa_stack.rehearsal.client import Api, poll
from efa_stack.rehearsal.kwok import flags as kwok_flags
from efa_stack.rehearsal.kwok import stages
from efa_stack.rehearsal.pki import Authority, service_account_keys
from efa_stack.rehearsal.processes import Process, Processes, free_ports

START_TIMEOUT = 180
"""Seconds each component has to answer ready (a loaded 2-core machine needs a few)."""
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.128.0.0/16"
"""The addresses kwok gives pods (kwok's own default /24 holds 254)."""
ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN = "efa-stack-rehearsal-admin"


@dataclass
class ControlPlane:
    """A running control plane: its API (as cluster admin), its processes and where its files are."""

    state: Path
    api: Api
    ca_file: Path
    processes: Processes
    components: dict[str, Process]
    started_in: float = 0.0
    """Seconds from the start of etcd until every component answered ready."""

    def kubeconfig(self, name: str, token: str) -> Path:
        """A kubeconfig under ``state`` for a client authenticating with ``token``."""
        path = self.state / "kubeconfigs" / f"{name}.yaml"
        write_kubeconfig(path, self.api.url, self.ca_file, token, name)
        return path

    def peak_memory_mib(self) -> dict[str, int]:
        """Process name -> the most memory it has held (Linux ``VmHWM``, peak resident set), in MiB."""
        out: dict[str, int] = {}
        for p in self.processes.started:
            try:
                status = Path(f"/proc/{p.pid}/status").read_text()
            except OSError:
                continue
            line = next((x for x in status.splitlines() if x.startswith("VmHWM:")), None)
            if line is not None:
                out[p.name] = int(line.split()[1]) // 1024
        return out

    def check_running(self) -> None:
        """RuntimeError naming every component that exited (with the end of its log)."""
        from efa_stack.rehearsal.processes import tail

        dead = [p for p in self.processes.started if not p.running()]
        if dead:
            raise RuntimeError("\n".join(f"{p.name} exited with {p.popen.returncode} (log {p.log}):\n{tail(p.log)}"
                                         for p in dead))


def write_kubeconfig(path: Path, server: str, ca_file: Path, token: str, user: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "rehearsal",
        "clusters": [{"name": "rehearsal", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "rehearsal", "context": {"cluster": "rehearsal", "user": user}}],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def _healthy(url: str, context: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, timeout=5, context=context) as resp:
        return bool(resp.status == 200)


def _insecure() -> ssl.SSLContext:
    """For the health endpoints of kube-scheduler and kube-controller-manager, which serve self-signed certificates."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def start_api_server(processes: Processes, bins: Mapping[Binary, Path], state: Path, *,
                     admission_webhooks: bool = True) -> tuple[Api, Path]:
    """etcd, then kube-apiserver with a static cluster-admin token, files under ``state``; (the API as cluster admin,
    the CA file its serving certificate verifies against). ``admission_webhooks=False`` turns the two webhook
    admission plugins off (for a server no webhook serves: the API server test); every other default plugin stays
    on."""
    pki = state / "pki"
    authority = Authority.create("efa-stack-rehearsal-ca")
    ca_file, _ = authority.pair.write(pki / "ca.crt", pki / "ca.key")
    cert, key = authority.issue("kube-apiserver", dns_names=["localhost", "kubernetes.default.svc"],
                                ips=["127.0.0.1"]).write(pki / "apiserver.crt", pki / "apiserver.key")
    sa_pub, sa_key = service_account_keys().write(pki / "sa.pub", pki / "sa.key")
    token = secrets.token_hex(16)
    tokens = pki / "tokens.csv"
    tokens.write_text(f"{token},{ADMIN},{ADMIN},system:masters\n")
    tokens.chmod(0o600)
    etcd_port, peer_port, api_port = free_ports(3)
    etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
    etcd = processes.start("etcd", [
        str(bins["etcd"]), "--name=rehearsal", f"--data-dir={state / 'etcd'}",
        f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
        f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=rehearsal={peer_url}", "--log-level=warn", "--unsafe-no-fsync",
    ], state / "logs" / "etcd.log")
    etcd.wait_ready(lambda: _healthy(f"{etcd_url}/health"), START_TIMEOUT)
    apiserver = processes.start("kube-apiserver", [
        str(bins["kube-apiserver"]), f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
        f"--tls-cert-file={cert}", f"--tls-private-key-file={key}", f"--client-ca-file={ca_file}",
        f"--token-auth-file={tokens}", "--authorization-mode=Node,RBAC",
        f"--service-account-issuer={ISSUER}", f"--service-account-key-file={sa_pub}",
        f"--service-account-signing-key-file={sa_key}", f"--service-cluster-ip-range={SERVICE_CIDR}",
        # as on EKS: privileged containers are allowed (the device plugins run privileged)
        "--allow-privileged=true", "--profiling=false", f"--cert-dir={pki / 'apiserver'}",
        *([] if admission_webhooks else
          ["--disable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook"]),
    ], state / "logs" / "kube-apiserver.log")
    api = Api(f"https://127.0.0.1:{api_port}", ssl.create_default_context(cafile=str(ca_file)), token)
    apiserver.wait_ready(lambda: api.request("GET", "/readyz").status == 200, START_TIMEOUT)
    return api, ca_file


def _start_components(processes: Processes, bins: Mapping[Binary, Path], state: Path, plane: ControlPlane) -> None:
    """kube-controller-manager, kube-scheduler and kwok, each waited for."""
    admin = plane.kubeconfig("admin", plane.api.token)
    pki = state / "pki"
    kcm_port, scheduler_port, kwok_port = free_ports(3)
    kcm = processes.start("kube-controller-manager", [
        str(bins["kube-controller-manager"]), f"--kubeconfig={admin}", "--leader-elect=false",
        "--bind-address=127.0.0.1", f"--secure-port={kcm_port}", f"--cert-dir={pki / 'kcm'}",
        f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={plane.ca_file}",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--cluster-name=rehearsal", "--profiling=false",
    ], state / "logs" / "kube-controller-manager.log")
    scheduler = processes.start("kube-scheduler", [
        str(bins["kube-scheduler"]), f"--kubeconfig={admin}", "--leader-elect=false",
        "--bind-address=127.0.0.1", f"--secure-port={scheduler_port}", f"--cert-dir={pki / 'scheduler'}",
        "--profiling=false",
    ], state / "logs" / "kube-scheduler.log")
    config = state / "kwok.yaml"
    config.write_text(yaml.safe_dump_all(stages(), sort_keys=False))
    kwok = processes.start("kwok", [str(bins["kwok"]), f"--kubeconfig={admin}", f"--config={config}",
                                    *kwok_flags(f"127.0.0.1:{kwok_port}", POD_CIDR)],
                           state / "logs" / "kwok.log", env={"HOME": str(state)})
    insecure = _insecure()
    kcm.wait_ready(lambda: _healthy(f"https://127.0.0.1:{kcm_port}/healthz", insecure), START_TIMEOUT)
    scheduler.wait_ready(lambda: _healthy(f"https://127.0.0.1:{scheduler_port}/healthz", insecure), START_TIMEOUT)
    kwok.wait_ready(lambda: _healthy(f"http://127.0.0.1:{kwok_port}/healthz"), START_TIMEOUT)
    plane.components.update({"kube-controller-manager": kcm, "kube-scheduler": scheduler, "kwok": kwok})
    # kube-controller-manager is at work once its ServiceAccount controller gave the default namespace its account
    default_sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "default"}}
    poll("ServiceAccount default/default (kube-controller-manager)",
         lambda: True if plane.api.get(default_sa).status == 200 else None, START_TIMEOUT)


@contextlib.contextmanager
def control_plane(state: Path, bins: Mapping[Binary, Path]) -> Iterator[ControlPlane]:
    """The control plane of the module docstring, with its files under ``state`` (created; etcd's data removed at the
    end: its write-ahead log preallocates 64 MB files)."""
    state.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with Processes() as processes:
        try:
            api, ca_file = start_api_server(processes, bins, state)
            plane = ControlPlane(state, api, ca_file, processes, {p.name: p for p in processes.started})
            _start_components(processes, bins, state, plane)
            plane.started_in = time.monotonic() - started
            yield plane
        finally:
            processes.stop_all()
            shutil.rmtree(state / "etcd", ignore_errors=True)
