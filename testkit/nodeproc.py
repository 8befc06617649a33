"""A real ``plateau node`` process on loopback, for integration tests and benchmarks."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent


def metric_values(url: str, sample: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Values of the ``/metrics`` sample ``sample`` (e.g. ``x_total``, ``x_count``) by label set."""
    text = httpx.get(f"{url}/metrics").text
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == sample
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class NodeExit:
    """What the kernel accounted for the node over its whole life (``wait4`` rusage)."""

    returncode: int
    cpu_user_s: float
    cpu_system_s: float
    write_bytes: int  # ru_oublock * 512: bytes the node caused to be written to storage
    max_rss_mb: float


class NodeProcess:
    """Starts ``plateau node`` as a subprocess; ``kill()`` is a real SIGKILL.

    The node is reaped with ``wait4`` rather than ``Popen.wait`` so that ``exit``
    holds the kernel's totals for its whole life, including the seals it does at
    shutdown, which the benchmarks report and sampling would miss.
    """

    def __init__(
        self,
        data_dir: Path,
        token: str | None = None,
        read_token: str | None = None,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        preexec: Callable[[], None] | None = None,
        root: Path = ROOT,
    ) -> None:
        self.data_dir = data_dir
        self.root = root  # the source tree whose node/ runs (bench/ab_nodes.py: another commit's)
        self.token = token
        self.read_token = read_token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = env or {}
        self.extra_args = args or []
        self.preexec = preexec  # run in the child before exec (e.g. enter a memory cgroup)
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit: NodeExit | None = None  # set once the last process started is reaped
        self.log_path = data_dir.parent / f"{data_dir.name}-node.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> NodeProcess:
        env = {**os.environ, **self.extra_env}
        if self.read_token:
            env["PLATEAU_AUTH__READ_TOKEN"] = self.read_token
        # this tree's node, even under an interpreter that has the dependencies but not
        # this project installed (a benchmark's)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(self.root / "node"), *filter(None, [env.get("PYTHONPATH")])]
        )
        cmd = [
            sys.executable,
            "-c",
            "from plateau.cli import main; main()",
            "node",
            "--data-dir",
            str(self.data_dir),
            "--bind",
            f"127.0.0.1:{self.port}",
            *self.extra_args,
        ]
        if self.token:
            cmd += ["--token", self.token]
        self.exit = None
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=self.preexec
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._reap(block=False):
                raise RuntimeError(f"node exited with {self.proc.returncode}: {self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"node did not become ready in {timeout}s: {self.log()}")

    def log(self) -> str:
        """The end of the node's log, for failure messages."""
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def headers(self, read: bool = False) -> dict[str, str]:
        tok = self.read_token if read and self.read_token else self.token
        return {"Authorization": f"Bearer {tok}"} if tok else {}

    def client(self, **kwargs: Any) -> httpx.Client:
        kwargs.setdefault("timeout", 30.0)
        return httpx.Client(base_url=self.url, headers=self.headers(), **kwargs)

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, as in a crash."""
        assert self.proc is not None
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
        self._reap(block=True)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the graceful shutdown path (the node seals its open segments).

        A node still running after ``timeout`` is SIGKILLed and reaped, then
        ``subprocess.TimeoutExpired`` is raised: a shutdown that hangs is a failure.
        """
        if self.proc is None:
            return 0
        if not self._reap(block=False):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            delay = 0.001
            while not self._reap(block=False):
                if time.monotonic() > deadline:
                    self.kill()
                    raise subprocess.TimeoutExpired(self.proc.args, timeout)
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        return self.proc.returncode

    def restart(self) -> NodeProcess:
        self.stop()
        return self.start()

    def _reap(self, block: bool) -> bool:
        """Whether the node has exited. Every reaping goes through here: ``Popen`` would reap
        with ``waitpid``, which drops the rusage that ``exit`` keeps."""
        assert self.proc is not None
        if self.proc.returncode is not None:
            return True
        try:
            pid, status, ru = os.wait4(self.proc.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere, without its rusage
            self.proc.wait()
            return True
        if pid == 0:
            return False
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.exit = NodeExit(
            returncode=self.proc.returncode,
            cpu_user_s=ru.ru_utime,
            cpu_system_s=ru.ru_stime,
            write_bytes=ru.ru_oublock * 512,
            max_rss_mb=ru.ru_maxrss / 1024,
        )
        return True
