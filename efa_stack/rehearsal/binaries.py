"""The binaries a rehearsal runs, built once from pinned Go modules by ``tools/build.sh`` into ``.cache/``.

Each component is a Go module of its own under ``tools/`` (a ``go.mod`` that requires it at one exact version, and
its ``go.sum``); kube-scheduler and kube-controller-manager come from the same module as the API server test's
kube-apiserver. The first build takes tens of CPU-minutes (docs/development.md gives the measured figures): the
script's own lines (what it builds, how long it may take, each binary when built) are passed on as they come; later
calls return at once.

``tools/`` is not part of the Python package: the rehearsal runs from a checkout of efa-stack (``make setup`` installs
it editable, so :data:`ROOT` is the checkout), and says so when the script is not there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "tools" / "build.sh"
BUILD_TIMEOUT = 3 * 3600
"""Seconds a first build of every binary may take on a busy 2-core machine."""
MODULE_TIMEOUT = 600
"""Seconds ``tools/build.sh --module-dir`` may take (a module download)."""

Binary = Literal[
    "etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok", "kueue", "mpi-operator", "jobset",
    "trainer-controller-manager", "training-operator", "karpenter-kwok", "compute-domain-controller",
]
CONTROL_PLANE: tuple[Binary, ...] = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")


class BuildError(RuntimeError):
    """tools/build.sh failed or is missing; the message holds the end of its output or what to do."""


def to_stderr(line: str) -> None:
    """A progress line on stderr, marked as the rehearsal's."""
    print(f"[rehearsal] {line}", file=sys.stderr, flush=True)


def binaries(names: Iterable[Binary], *, echo: Callable[[str], None] | None = to_stderr) -> dict[Binary, Path]:
    """Path of each binary of ``names``, building what is missing; ``echo`` gets the build's lines as they come (None:
    kept quiet)."""
    if not BUILD_SCRIPT.is_file():
        raise BuildError(f"{BUILD_SCRIPT} is missing: the rehearsal builds its binaries from the Go modules under "
                         "tools/ of a checkout of efa-stack; run it from a checkout (make setup installs it editable)")
    wanted = list(dict.fromkeys(names))
    started = time.monotonic()
    # a session of its own: on a timeout or Ctrl-C the whole build (go, its compilers) is stopped, not only the script
    proc = subprocess.Popen([str(BUILD_SCRIPT), *wanted], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    timer = threading.Timer(BUILD_TIMEOUT, os.killpg, (proc.pid, signal.SIGTERM))
    timer.start()
    lines: list[str] = []
    try:
        assert proc.stderr is not None and proc.stdout is not None
        for raw in proc.stderr:  # the script's lines as it writes them: a first build takes tens of minutes
            line = raw.rstrip("\n")
            lines.append(line)
            if echo is not None and "already built" not in line:
                echo(line)
        out = proc.stdout.read()
        proc.wait()
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate()
        raise
    finally:
        timer.cancel()
    err = "\n".join(lines)
    if proc.returncode != 0:
        raise BuildError(f"{BUILD_SCRIPT} {' '.join(wanted)} failed (exit {proc.returncode}) after "
                         f"{time.monotonic() - started:.0f}s:\n{err[-4000:]}")
    found: dict[Binary, Path] = {}
    for line in out.splitlines():
        name, _, path = line.partition(" ")
        if name in wanted:
            found[name] = Path(path)
    missing = [n for n in wanted if n not in found or not found[n].is_file()]
    if missing:
        raise BuildError(f"{BUILD_SCRIPT} did not leave {', '.join(missing)}:\n{out}{err[-2000:]}")
    return found


@cache
def module_dir(binary: Binary) -> Path:
    """The source folder of the Go module ``binary`` is built from (downloaded when missing): upstream's manifests
    and charts at exactly the binary's version."""
    proc = subprocess.run([str(BUILD_SCRIPT), "--module-dir", binary], cwd=ROOT, capture_output=True, text=True,
                          timeout=MODULE_TIMEOUT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} --module-dir {binary}: {proc.stderr.strip()}")
    return Path(proc.stdout.strip())
