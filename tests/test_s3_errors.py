"""S3 errors are clear errors, never a 500, a traceback or a corrupted memory.

- The store down for a few seconds in the middle of writes (a TCP relay in front of moto's
  server cut and brought back, tests/s3.py ``S3Outage``): every request gets an answer,
  a 503 ``UNAVAILABLE`` with ``Retry-After`` where the store was needed, never a 500; once
  the store is back every acknowledged write is there once, a write refused during the
  outage goes through when sent again, and the ledger is one chain.
- The bucket missing or the credentials wrong: ``serve`` refuses to start with one clear
  line naming the warehouse, and ``ampup-memory doctor`` says what is wrong in one line
  (for a missing bucket tests/test_doctor.py checks that).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.memory_support import QUIET, run_cli
from tests.pg import PostgresFactory
from tests.s3 import S3Outage, S3Server, s3  # noqa: F401  (session fixture)
from tests.server_process import ServerProcess
from tests.test_fleet import _assert_one_chain, _ledger

pytestmark = [pytest.mark.postgres, pytest.mark.fleet]

SCOPE = "outage/team_a"
USER = {"X-AmpUp-User": "alice"}


@pytest.fixture
def behind_relay(postgres: PostgresFactory, s3: S3Server,  # noqa: F811
                 tmp_path: Path) -> Iterator[tuple[ServerProcess, S3Outage]]:
    relay = S3Outage(s3).up()
    env = {**QUIET, **relay.env(s3.new_bucket("outage")),
           "AMPUP_MEMORY_CATALOG_URI": postgres.new_database("outage_catalog"),
           "AMPUP_MEMORY_INDEX_URI": postgres.new_database("outage_index"),
           "AMPUP_MEMORY_SEARCH_REFRESH_SECONDS": "0"}
    proc = ServerProcess(tmp_path, env=env).start()
    try:
        yield proc, relay
    finally:
        proc.stop()
        relay.down()


def _write(c: httpx.Client, n: int) -> httpx.Response:
    return c.post("/episodes", json={"scope": SCOPE, "source": f"doc:outage{n}",
                                     "body": f"Outage test write {n}: the Porto office opened.",
                                     "acl": ["*"]})


def test_the_store_down_for_a_few_seconds_gives_503s_and_loses_nothing(
        behind_relay: tuple[ServerProcess, S3Outage]) -> None:
    proc, relay = behind_relay
    acked: dict[str, str] = {}  # episode id -> commit
    refused: list[int] = []
    with httpx.Client(base_url=proc.url, timeout=120, headers=USER) as c:
        for n in range(3):
            r = _write(c, n)
            assert r.status_code == 201, r.text
            acked[r.json()["id"]] = r.json()["commit"]
        first = next(iter(acked))
        relay.down()
        down_at = time.monotonic()
        answers: list[int] = []
        n = 3
        while time.monotonic() - down_at < 3:
            r = _write(c, n)
            answers.append(r.status_code)
            assert r.status_code in (201, 503), (r.status_code, r.text)
            if r.status_code == 503:
                refused.append(n)
                body = r.json()["error"]
                assert body["code"] == "UNAVAILABLE" and "storage" in body["message"]
                assert r.headers["retry-after"] == "5"
                assert "Traceback" not in r.text
            else:
                acked[r.json()["id"]] = r.json()["commit"]
            for other in (c.get(f"/episodes/{first}", params={"scope": SCOPE}),
                          c.get("/ledger", params={"scope": SCOPE}),
                          c.post("/search", json={"scope": SCOPE, "query": "Porto office"})):
                assert other.status_code in (200, 503), (other.request.url, other.text)
            n += 1
        assert refused, answers  # the outage was felt
        relay.up()
        for k in refused:  # sent again once the store is back: it goes through
            r = _write(c, k)
            assert r.status_code in (200, 201), r.text  # 200: it had landed after all
            acked[r.json()["id"]] = r.json()["commit"]
        r = _write(c, 1000)
        assert r.status_code == 201, r.text
        acked[r.json()["id"]] = r.json()["commit"]
        chain = _ledger(c, SCOPE)
        _assert_one_chain(chain)
        assert set(acked.values()) <= {e["id"] for e in chain}
        for ep_id, commit in acked.items():
            got = c.get(f"/episodes/{ep_id}", params={"scope": SCOPE})
            assert got.status_code == 200 and got.json()["commit"] == commit, got.text
    log = proc.log_path.read_text()
    assert "storage error on POST /episodes" in log
    assert "Traceback" not in log


def _warehouse_line(out: str) -> str:
    """Doctor's one line on the warehouse (``FAIL  warehouse: …``)."""
    found = [x for x in out.splitlines() if x.partition("  ")[2].startswith("warehouse")]
    assert len(found) == 1, out
    return found[0]


def _serve_fails(tmp_path: Path, env: dict[str, str]) -> str:
    proc = ServerProcess(tmp_path, env={**QUIET, **env})
    with pytest.raises(RuntimeError) as failed:
        proc.start(timeout=60)
    return str(failed.value)


@pytest.fixture(scope="module")
def checking_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("moto-auth"), check_credentials=True).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_missing_bucket_is_one_clear_line(s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    env = s3.env("no-such-bucket-at-all")
    said = _serve_fails(tmp_path / "serve", env)
    assert "cannot use the Iceberg warehouse 's3://no-such-bucket-at-all/warehouse'" in said
    assert "Traceback" not in said
    # `doctor` on a missing bucket: tests/test_doctor.py; `load`: tests/test_s3_warehouse.py.


def test_wrong_credentials_are_one_clear_line(checking_s3: S3Server, tmp_path: Path) -> None:
    env = checking_s3.env("any-bucket")  # a key this store never issued
    said = _serve_fails(tmp_path / "serve", env)
    assert "cannot use the Iceberg warehouse" in said and "Traceback" not in said
    assert env["AMPUP_MEMORY_S3_SECRET_ACCESS_KEY"] not in said
    done = run_cli(tmp_path / "doctor", {**QUIET, **env}, "doctor")
    line = _warehouse_line(done.stdout)
    assert line.startswith("FAIL"), done.stdout
    assert any(w in line.lower() for w in ("access key", "credential", "denied", "forbidden")), line
    assert env["AMPUP_MEMORY_S3_SECRET_ACCESS_KEY"] not in done.stdout + done.stderr
