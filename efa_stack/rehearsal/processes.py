"""Local processes that never outlive the Python process that started them.

Each child gets Linux ``PR_SET_PDEATHSIG``: the kernel sends it SIGKILL when the thread that started it ends, so a
killed test run or command leaves no etcd, API server or controller behind. :class:`Processes` stops what it started
in reverse order (SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT`) when its ``with`` block ends, on an exception and
on Ctrl-C (KeyboardInterrupt) alike. Every wait here is bounded.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
import urllib.error
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

STOP_TIMEOUT = 15
"""Seconds a process has to exit after SIGTERM before it is killed."""
POLL_INTERVAL = 0.25


def _prctl() -> Callable[[int, int], int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()
"""libc's prctl, looked up before any fork: the child only calls it (no import, no lock)."""
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the thread that started it ends (Linux ``PR_SET_PDEATHSIG``)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (all held open while chosen)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(log: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of ``log`` ("" when it cannot be read)."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class ProcessError(RuntimeError):
    """A process exited, or did not become ready in time; the message ends with the tail of its log."""


@dataclass
class Process:
    """One started binary and the file its stdout and stderr go to."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; returns once the process is gone."""
        if self.popen.poll() is not None:
            return
        self.popen.terminate()
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout)

    def wait_ready(self, ready: Callable[[], bool], timeout: float) -> None:
        """Poll ``ready`` until it is true; :class:`ProcessError` when the process exits or ``timeout`` passes. OSError
        and URLError from ``ready`` count as not ready yet (a port not yet open, a TLS handshake refused)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise ProcessError(f"{self.name} exited with {self.popen.returncode} before it was ready "
                                   f"(log {self.log}):\n{tail(self.log)}")
            try:
                if ready():
                    return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(POLL_INTERVAL)
        raise ProcessError(f"{self.name} not ready after {timeout:.0f}s (log {self.log}):\n{tail(self.log)}")


@dataclass
class Processes:
    """The processes of one control plane: :meth:`Processes.start` adds one, leaving the ``with`` block stops them
    all, the last started first."""

    started: list[Process] = field(default_factory=list)

    def start(self, name: str, args: Sequence[str], log: Path, *, env: Mapping[str, str] | None = None,
              cwd: Path | None = None) -> Process:
        """Start ``args`` with stdout and stderr into ``log`` and stdin closed. ``env`` is added to this process's
        environment. The child gets a session of its own, so a Ctrl-C at the terminal reaches only this process,
        which then stops the children in order."""
        log.parent.mkdir(parents=True, exist_ok=True)
        full_env = {**os.environ, **env} if env is not None else None
        with log.open("ab") as out:
            popen = subprocess.Popen(
                list(args), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env, cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509  # calls the prctl looked up above, nothing else
            )
        process = Process(name, popen, log)
        self.started.append(process)
        return process

    def stop(self, process: Process) -> None:
        """Stop one process (a controller restarted by a scenario) and forget it."""
        process.stop()
        if process in self.started:
            self.started.remove(process)

    def stop_all(self) -> None:
        """Stop every process, the last started first; a Ctrl-C during the stop does not leave the rest running."""
        while self.started:
            process = self.started.pop()
            try:
                process.stop()
            except KeyboardInterrupt:
                process.popen.kill()
                for rest in self.started:
                    rest.popen.kill()
                raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop_all()
