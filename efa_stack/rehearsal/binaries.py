"""The binaries a rehearsal runs, built once from pinned Go modules by ``tools/build.sh`` into ``.cache/``.

Each component is a Go module of its own under ``tools/`` (a ``go.mod`` that requires it at one exact version, and
its ``go.sum``); kube-scheduler and kube-controller-manager come from the same module as the API server test's
kube-apiserver. The first build takes tens of CPU-minutes (docs/development.md gives the measured figures) and is
announced on stderr; later calls return at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "tools" / "build.sh"
BUILD_TIMEOUT = 3 * 3600
"""Seconds a first build of every binary may take on a busy 2-core machine."""

Binary = Literal[
    "etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok", "kueue", "mpi-operator", "jobset",
    "trainer-controller-manager", "training-operator", "karpenter-kwok",
]
CONTROL_PLANE: tuple[Binary, ...] = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")


class BuildError(RuntimeError):
    """tools/build.sh failed; the message holds the end of its output."""


def binaries(names: Iterable[Binary], *, echo: bool = True) -> dict[Binary, Path]:
    """Path of each binary of ``names``, building what is missing (``echo``: the build's progress goes to stderr)."""
    wanted = list(dict.fromkeys(names))
    started = time.monotonic()
    # a session of its own: on a timeout or Ctrl-C the whole build (go, its compilers) is stopped, not only the script
    proc = subprocess.Popen([str(BUILD_SCRIPT), *wanted], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=BUILD_TIMEOUT)
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate()
        raise
    if echo:
        for line in err.splitlines():
            if "already built" not in line:
                print(f"[rehearsal] {line}", file=sys.stderr, flush=True)
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
