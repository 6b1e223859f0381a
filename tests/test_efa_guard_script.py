"""k8s/scripts/efa_guard.sh run for real (sh and bash in a subprocess) against recorded fi_info outputs.

A fake ``fi_info`` on PATH prints a file of tests/fixtures/fi_info/ (see the README there for where
each comes from); a temporary directory stands in for /dev/infiniband and another for the library
directory holding aws-ofi-nccl's ``libnccl-net.so``. PATH holds only the fakes, ``sed`` and ``cat``, so the
host's own tools never leak into a result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from efa_stack import contract
from k8s.efa_guard import SCRIPT_PATH

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "fi_info"
SHELLS = [s for s in ("sh", "bash") if shutil.which(s)]


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str
    termination: str
    fi_info_args: str


@dataclass
class Node:
    root: Path
    bin: Path
    devices: Path
    libs: Path

    def uverbs(self, n: int) -> None:
        for i in range(n):
            (self.devices / f"uverbs{i}").touch()
        (self.devices / "rdma_cm").touch()  # not a uverbs device: never counted

    def fi_info(self, stdout: str | None = None, *, stderr: str | None = None, rc: int = 0) -> None:
        lines = ["#!/bin/sh", f'echo "$*" > "{self.root}/fi_info.args"']
        if stdout is not None:
            lines.append(f'cat "{FIXTURES / stdout}"')
        if stderr is not None:
            lines.append(f'cat "{FIXTURES / stderr}" >&2')
        lines.append(f"exit {rc}")
        self._tool("fi_info", "\n".join(lines))

    def ldconfig(self, listing: str = "") -> None:
        self._tool("ldconfig", f"#!/bin/sh\nprintf '%s' '{listing}'\n")

    def _tool(self, name: str, text: str) -> None:
        path = self.bin / name
        path.write_text(text + "\n")
        path.chmod(0o755)

    def run(self, shell: str = "sh", *, expected: int, gpus: int = 8, **env: str) -> Result:
        term = self.root / "termination-log"
        base = {
            "PATH": str(self.bin),
            "EFA_GUARD_EXPECTED_EFA": str(expected),
            "EFA_GUARD_EXPECTED_GPUS": str(gpus),
            "NODE_NAME": "ip-10-0-1-23.us-west-2.compute.internal",
            "POD_NAME": "nccl-tests-p5-worker-1",
            "POD_NAMESPACE": "default",
            "LD_LIBRARY_PATH": f"/nonexistent:{self.libs}",
            "EFA_GUARD_DEVICE_DIR": str(self.devices),
            "EFA_GUARD_TERMINATION_LOG": str(term),
            "EFA_GUARD_LDCONFIG": "ldconfig",
        }
        base.update(env)
        proc = subprocess.run(
            [shutil.which(shell) or shell, str(SCRIPT_PATH)], env=base, capture_output=True, text=True, timeout=30, check=False
        )
        args = self.root / "fi_info.args"
        return Result(
            proc.returncode, proc.stdout, proc.stderr, term.read_text() if term.exists() else "",
            args.read_text().strip() if args.exists() else "",
        )


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path, tmp_path / "bin", tmp_path / "infiniband", tmp_path / "lib")
    for d in (n.bin, n.devices, n.libs):
        d.mkdir()
    for tool in ("sed", "cat"):  # sed for the guard, cat for the fake fi_info
        os.symlink(shutil.which(tool) or f"/bin/{tool}", n.bin / tool)
    n.ldconfig()
    (n.libs / "libnccl-net.so").touch()
    return n


def _one_line(r: Result) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert r.termination.strip() == lines[0]
    return lines[0]


# --- EFA as planned -------------------------------------------------------------------------------


@pytest.mark.parametrize("shell", SHELLS)
def test_p5_with_all_32_devices_passes(node, shell):
    # GIVEN a p5.48xlarge pod that sees its 32 EFA devices (libfabric 2.x: efa-direct and efa records)
    node.fi_info("p5.48xlarge-32-devices.txt")
    node.uverbs(32)
    # WHEN the guard runs THEN it passes and says what it found
    r = node.run(shell, expected=32)
    assert r.rc == 0, r.stderr
    line = _one_line(r)
    assert line.startswith("efa-stack guard: OK node=ip-10-0-1-23.us-west-2.compute.internal pod=default/nccl-tests-p5")
    assert "32 EFA devices via fi_info -p efa, 32" in line and f"{node.libs}/libnccl-net.so" in line
    assert r.fi_info_args == "-p efa -t FI_EP_RDM"


def test_p4d_with_4_devices_passes(node):
    node.fi_info("p4d.24xlarge-4-devices.txt")
    node.uverbs(4)
    assert node.run(expected=4).rc == 0


@pytest.mark.parametrize("recorded", ["hyperpod-1-device.txt", "libfabric-1.9-1-device.txt"])
def test_real_outputs_count_one_device_however_often_it_is_listed(node, recorded):
    # GIVEN real outputs that list one device 3 times (efa-direct/efa/DGRAM, or an efa;ofi_rxd layer)
    node.fi_info(recorded)
    node.uverbs(1)
    r = node.run(expected=1)
    assert r.rc == 0 and "1 EFA devices via fi_info" in r.stderr
    # AND expecting 2 fails: the repeated records are not counted twice
    assert node.run(expected=2).rc == 1


def test_plugin_named_by_nccl_net_plugin_is_found_as_nccl_resolves_it(node):
    # NCCL_NET_PLUGIN=ofi: NCCL tries "ofi" then "libnccl-net-ofi.so" (nccl src/plugin/plugin_open.cc)
    (node.libs / "libnccl-net.so").unlink()
    (node.libs / "libnccl-net-ofi.so").touch()
    node.fi_info("p4d.24xlarge-4-devices.txt")
    node.uverbs(4)
    assert node.run(expected=4).rc == 1  # unset: NCCL loads libnccl-net.so, which is not there
    r = node.run(expected=4, NCCL_NET_PLUGIN="ofi")
    assert r.rc == 0 and "libnccl-net-ofi.so" in r.stderr


def test_plugin_in_the_ld_so_cache_is_found(node):
    (node.libs / "libnccl-net.so").unlink()
    node.ldconfig("\tlibnccl-net.so (libc6,x86-64) => /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so\n")
    node.fi_info("p4d.24xlarge-4-devices.txt")
    node.uverbs(4)
    r = node.run(expected=4)
    assert r.rc == 0 and "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so" in r.stderr


# --- what the guard exists for --------------------------------------------------------------------


@pytest.mark.parametrize("shell", SHELLS)
def test_fails_when_libfabric_has_no_efa_provider(node, shell):
    # GIVEN a pod without EFA devices: fi_info -p efa fails with -FI_ENODATA
    node.fi_info(stderr="no-efa-provider.stderr.txt", rc=61)
    # WHEN the guard runs THEN one line names node, pod, expectation, finding and fix; exit 1
    r = node.run(shell, expected=32)
    assert r.rc == 1
    line = _one_line(r)
    assert line.startswith(contract.EFA_GUARD_FAIL_PREFIX + " node=ip-10-0-1-23.us-west-2.compute.internal")
    assert "pod=default/nccl-tests-p5-worker-1" in line
    assert "expected 32 EFA devices (8 GPUs)" in line
    assert "libfabric finds no EFA provider (fi_info -p efa -t FI_EP_RDM exited 61: fi_getinfo: -61)" in line
    assert "Fix: request vpc.amazonaws.com/efa" in line


def test_fails_with_fewer_devices_than_planned(node):
    node.fi_info("p5.48xlarge-16-of-32-devices.txt")
    node.uverbs(16)
    line = _one_line(r := node.run(expected=32))
    assert r.rc == 1
    assert "expected 32 EFA devices (8 GPUs) but found 16 via fi_info -p efa and 16" in line
    assert "kubectl describe node ip-10-0-1-23.us-west-2.compute.internal" in line


def test_fails_when_the_device_files_are_missing(node):
    node.fi_info("p5.48xlarge-32-devices.txt")
    r = node.run(expected=32)
    assert r.rc == 1 and "found 32 via fi_info -p efa and 0 " in _one_line(r)


def test_fails_when_the_image_has_no_fi_info(node):
    # GIVEN an image without the EFA software (no fi_info anywhere on PATH)
    r = node.run(expected=32)
    assert r.rc == 1
    line = _one_line(r)
    assert "found no fi_info on PATH" in line and "Fix: use an image built with the AWS EFA installer" in line


def test_fails_when_the_image_has_no_aws_ofi_nccl(node):
    (node.libs / "libnccl-net.so").unlink()
    node.fi_info("p5.48xlarge-32-devices.txt")
    node.uverbs(32)
    r = node.run(expected=32)
    assert r.rc == 1
    assert "found no NCCL net plugin (libnccl-net.so) on LD_LIBRARY_PATH" in _one_line(r)


@pytest.mark.parametrize("value", ["", "0", "32x"])
def test_fails_without_a_positive_expected_count(node, value):
    node.fi_info("p5.48xlarge-32-devices.txt")
    node.uverbs(32)
    r = node.run(expected=32, EFA_GUARD_EXPECTED_EFA=value)
    assert r.rc == 1 and "not a positive device count" in _one_line(r)


def test_the_script_is_shellcheck_clean():
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    proc = subprocess.run(
        [shellcheck, "--shell=sh", str(SCRIPT_PATH)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout


def test_the_verify_fixture_carries_the_line_this_script_prints(node):
    # tests/fixtures/k8s_api/worker_pods_guard_failed.json holds worker-1's termination message
    doc = json.loads((FIXTURES.parent / "k8s_api" / "worker_pods_guard_failed.json").read_text())
    message = doc["items"][1]["status"]["initContainerStatuses"][0]["state"]["terminated"]["message"]
    node.fi_info(stderr="no-efa-provider.stderr.txt", rc=61)
    r = node.run(expected=32, NODE_NAME="ip-10-0-1-24.us-west-2.compute.internal", POD_NAME="nccl-tests-p5-worker-1")
    assert r.termination == message


# --- devices: dra (the pod claims its EFA devices from aws-dranet) -----------------------------------------------


def test_a_dra_pod_with_its_claimed_devices_passes(node):
    # GIVEN a sub-node worker on a DRA node that claimed the 4 EFA devices of its GPU's PCIe root and sees them
    node.fi_info("p4d.24xlarge-4-devices.txt")
    node.uverbs(4)
    # WHEN the guard runs with the claim's count THEN it passes
    r = node.run(expected=4, gpus=1, EFA_GUARD_DEVICES=contract.DEVICES_DRA)
    assert r.rc == 0, r.stderr
    assert "4 EFA devices via fi_info -p efa" in _one_line(r)


def test_fails_a_dra_pod_where_libfabric_finds_no_efa_with_the_dra_fix(node):
    # GIVEN a DRA pod where libfabric reports no EFA (the claim not in the container, or a mounted /dev/infiniband or
    # other verbs device: fi_getinfo -61)
    node.fi_info(stderr="no-efa-provider.stderr.txt", rc=61)
    r = node.run(expected=4, gpus=1, EFA_GUARD_DEVICES=contract.DEVICES_DRA)
    # THEN it fails, and the fix points at the claim, the EFA DRA driver and its slices, not at the device plugin
    assert r.rc == 1
    line = _one_line(r)
    assert "expected 4 EFA devices (1 GPUs)" in line and "vpc.amazonaws.com/efa" not in line
    assert "resources.claims" in line and "kubectl -n kube-system get ds aws-dranet" in line
    assert "spec.driver=dra.net" in line and "/dev/infiniband hostPath" in line


def test_fails_a_dra_pod_with_fewer_devices_than_its_claim(node):
    node.fi_info("p5.48xlarge-16-of-32-devices.txt")
    node.uverbs(16)
    line = _one_line(r := node.run(expected=32, EFA_GUARD_DEVICES=contract.DEVICES_DRA))
    assert r.rc == 1
    assert "expected 32 EFA devices (8 GPUs) but found 16" in line
    assert "kubectl get resourceclaims -n default" in line and "describe node" not in line
