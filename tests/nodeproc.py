"""A real ``plateau node`` process on loopback, for integration tests and benchmarks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families


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


class NodeProcess:
    """Starts ``plateau node`` as a subprocess; ``kill()`` is a real SIGKILL."""

    def __init__(
        self,
        data_dir: Path,
        token: str | None = None,
        read_token: str | None = None,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.token = token
        self.read_token = read_token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_env = env or {}
        self.extra_args = args or []
        self.preexec = preexec  # run in the child before exec (e.g. enter a memory cgroup)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-node.log"

    def start(self, timeout: float = 30.0) -> NodeProcess:
        env = {**os.environ, **self.extra_env}
        if self.read_token:
            env["PLATEAU_AUTH__READ_TOKEN"] = self.read_token
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
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=self.preexec
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node exited with {self.proc.returncode}: {self.log()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"node did not become ready: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def headers(self, read: bool = False) -> dict[str, str]:
        tok = self.read_token if read and self.read_token else self.token
        return {"Authorization": f"Bearer {tok}"} if tok else {}

    def client(self, **kwargs: Any) -> httpx.Client:
        kwargs.setdefault("timeout", 30.0)
        return httpx.Client(base_url=self.url, headers=self.headers(), **kwargs)

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, as in a crash."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the graceful shutdown path."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def restart(self) -> NodeProcess:
        self.stop()
        return self.start()
