"""Start a real `ampup-memory serve` process for tests (no mocks, no in-process app)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def raw_exchange(host: str, port: int, request: bytes, timeout: float = 30.0) -> bytes:
    """Send ``request`` byte for byte on a fresh connection and read the answer to its end
    (what httpx never sends: no Host, HTTP/1.0, ``..`` in a path). TimeoutError if the
    server neither answers nor closes within ``timeout``."""
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def plain_client(**kwargs: Any) -> httpx.Client:
    """An HTTP client for a test server (plain HTTP on 127.0.0.1): ``verify=False`` skips
    loading the system's CA bundle, ~70 ms of CPU per client, which no request here uses."""
    return httpx.Client(verify=False, **kwargs)


class PortTaken(RuntimeError):
    """The server could not bind its port: another process took it first."""


class ServerProcess:
    """One server process on a free port; `.url` is its base URL."""

    def __init__(self, home: Path, env: Mapping[str, str] | None = None,
                 args: list[str] | None = None, port: int | None = None,
                 command: list[str] | None = None) -> None:
        self.home = home
        self.env = {**os.environ, "AMPUP_MEMORY_HOME": str(home), **(env or {})}
        self.args = args or []
        self._given_command = command
        # A port we picked may be taken by another test worker before our server binds it;
        # then start() picks another. A port or command the test chose is used as given.
        self._may_move = port is None and command is None
        self._use_port(port or free_port())
        self.proc: subprocess.Popen[bytes] | None = None

    def _use_port(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        # Default: the real CLI. Tests of deliberately broken servers pass their own.
        self.command = self._given_command or [sys.executable, "-m", "ampup_memory.cli",
                                               "serve", "--port", str(port)]
        self.log_path = self.home / f"server-{port}.log"

    def start(self, timeout: float = 120.0) -> ServerProcess:
        for _ in range(5):
            try:
                return self._start(timeout)
            except PortTaken:
                self._use_port(free_port())
        return self._start(timeout)

    def launch(self) -> ServerProcess:
        """Start the process and return at once, before it answers (`start` waits for
        that): for audits that kill a server while it starts."""
        self.home.mkdir(parents=True, exist_ok=True)
        # The child holds its own copy of the descriptor; ours would only leak.
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.command, *self.args],
                env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )
        return self

    def _start(self, timeout: float) -> ServerProcess:
        self.launch()
        try:
            return self.wait_ready(timeout)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"server did not start: {self.log_path.read_text()}") from None

    def wait_ready(self, timeout: float) -> ServerProcess:
        """Wait until the launched server answers its health check. RuntimeError when it
        exits first (PortTaken when its port was taken), TimeoutError when ``timeout``
        passes; the process is left as it is."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        # One client for every probe, without TLS (the server speaks plain HTTP): each
        # `httpx.get` makes a client that loads the system's CA bundle, ~70 ms of CPU, and
        # a start polled 50-100 times under load spent seconds of CPU on it.
        with plain_client(timeout=1) as probe:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    text = self.log_path.read_text()
                    if self._may_move and "port is already in use" in text:
                        raise PortTaken(text)
                    raise RuntimeError(f"server exited: {text}")
                try:
                    if probe.get(f"{self.url}/amp/v1/health").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        raise TimeoutError(f"server did not answer within {timeout:.0f} s")

    def kill(self) -> None:
        """kill -9: no shutdown hooks, no flushing."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_together(procs: list[ServerProcess], timeout: float) -> list[BaseException]:
    """Start servers at the same time (as a fleet does), each on its own thread; the
    errors of those that failed to start, for the caller to assert in its own thread."""
    errors: list[BaseException] = []

    def start(p: ServerProcess) -> None:
        try:
            p.start(timeout=timeout)
        except BaseException as exc:  # reported in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(p,)) for p in procs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
