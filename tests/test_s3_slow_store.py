"""A store that is slow or stops answering (tests/s3.py ``S3Proxy`` in front of moto, which
holds requests without an answer, or delays each):

- a hung store answers a write 503 ``UNAVAILABLE`` within the bound the S3 settings give
  (about attempts × request timeout), never a hang past a proxy's timeout; once it answers
  again the write goes through, and everything acknowledged is there once;
- a slow store that keeps answering within the timeout is not cut off;
- what a write costs in S3 requests stays small: each is a round trip to the store.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.memory_support import QUIET, Memory
from tests.s3 import S3Proxy, S3Server, s3  # noqa: F401  (session fixture)
from tests.server_process import ServerProcess
from tests.test_fleet import _assert_one_chain

SCOPE = "slow/team_a"
BOUNDS = {"AMPUP_MEMORY_S3_CONNECT_TIMEOUT_SECONDS": "1",
          "AMPUP_MEMORY_S3_REQUEST_TIMEOUT_SECONDS": "2",
          "AMPUP_MEMORY_S3_ATTEMPTS": "2"}


@pytest.fixture(scope="module")
def slow(s3: S3Server, tmp_path_factory: pytest.TempPathFactory,  # noqa: F811
         ) -> Iterator[tuple[Memory, S3Proxy, ServerProcess]]:
    proxy = S3Proxy(s3).up()
    env = {**QUIET, **proxy.env(s3.new_bucket("slow")), **BOUNDS,
           "AMPUP_MEMORY_SEARCH_REFRESH_SECONDS": "0"}
    proc = ServerProcess(tmp_path_factory.mktemp("slow"), env=env).start(timeout=120)
    mem = Memory(proc.url)
    try:
        yield mem, proxy, proc
    finally:
        mem.close()
        proc.stop()
        proxy.down()


def _write(mem: Memory, n: int) -> tuple[float, httpx.Response]:
    t0 = time.monotonic()
    r = mem.write(SCOPE, f"Slow store write {n}: the Porto office opened.", source=f"doc:slow{n}")
    return time.monotonic() - t0, r


def test_a_hung_store_is_a_503_within_the_set_bound(
        slow: tuple[Memory, S3Proxy, ServerProcess]) -> None:
    mem, proxy, proc = slow
    acked: dict[str, str] = {}
    for n in range(2):
        _, r = _write(mem, n)
        assert r.status_code == 201, r.text
        acked[r.json()["id"]] = r.json()["commit"]
    proxy.hang()
    try:
        took, r = _write(mem, 2)
    finally:
        proxy.release()
    # 2 attempts of a PUT that hears nothing: each the 2 s of silence after its body, plus
    # ~6 s that pyarrow's client adds to a request with a body (16 s measured): well under
    # 60 s, nginx's default proxy timeout. Before the settings: 3 × 60 s, 182 s measured.
    assert took < 30, took
    assert r.status_code == 503, r.text
    body = r.json()["error"]
    assert body["code"] == "UNAVAILABLE" and "storage" in body["message"]
    assert r.headers["retry-after"] == "5"
    _, again = _write(mem, 2)  # the store answers again: the same write goes through
    assert again.status_code in (200, 201), again.text
    acked[again.json()["id"]] = again.json()["commit"]
    chain = mem.ledger(SCOPE)
    _assert_one_chain(chain)
    assert set(acked.values()) <= {c["id"] for c in chain}
    for ep, commit in acked.items():
        got = mem.episode(SCOPE, ep)
        assert got.status_code == 200 and got.json()["commit"] == commit, got.text
    assert "Traceback" not in proc.log_path.read_text()


def test_a_slow_store_is_not_cut_off_and_a_write_costs_few_requests(
        slow: tuple[Memory, S3Proxy, ServerProcess], s3: S3Server) -> None:  # noqa: F811
    mem, proxy, proc = slow
    for n in range(100, 104):  # the tables are loaded and past their kept versions
        _write(mem, n)
    proxy.take()
    proxy.delay = 0.5  # a quarter of the request timeout, on every request
    try:
        took, r = _write(mem, 104)
    finally:
        proxy.delay = 0.0
    assert r.status_code == 201, r.text
    seen = proxy.take()
    # Two commits (the episode's rows, then the ledger row), each a data file, a
    # manifest, a manifest list and a metadata file, one PUT each, and the deletion of a
    # metadata file past the kept versions (HEAD, DELETE and pyarrow's folder marker, on
    # a background thread: they may or may not land before the count).
    # Before, 40 to 46: multipart uploads of 3 requests, a HEAD after each file for its
    # length, the metadata read back with a HEAD and a GET, a HEAD and a listing to check
    # a new metadata file was not there yet.
    assert len(seen) <= 14, seen
    assert took < 0.5 * 14 + 10, took
    # The superseded metadata files are deleted off the write's path, but deleted: each
    # table keeps its current one and the 3 before it (previous-versions-max).
    bucket = proc.env["AMPUP_MEMORY_WAREHOUSE"].removeprefix("s3://").split("/")[0]
    deadline = time.monotonic() + 30
    while True:
        kept = [k for k in s3.keys(bucket) if k.endswith(".metadata.json")
                and "/slow__team_a/episodes/" in k]
        if len(kept) <= 4 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(kept) <= 4, kept
