"""An `s3://` warehouse on a real S3-compatible server: table files, orphan-file cleanup
and a workspace's drop all go through the configured FileIO, none through local paths."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from tests.memory_support import QUIET, Memory, new_scope, run_cli, serving
from tests.s3 import S3Server, s3  # noqa: F401  (session fixture)


def test_tables_maintenance_and_drops_live_in_the_bucket(s3: S3Server,  # noqa: F811
                                                         tmp_path: Path) -> None:
    bucket = s3.new_bucket("wh")
    env = {**QUIET, **s3.env(bucket, "memory")}
    scope = new_scope()
    ns = scope.replace("/", "__")
    with serving(tmp_path, env) as server:
        m = Memory(server.url)
        ep = m.write(scope, "The Acme renewal is due in May.")
        assert ep.status_code == 201, ep.text
        episode = ep.json()["id"]
        keys = s3.keys(bucket)
        assert any(k.startswith(f"memory/{ns}/episodes/data/") for k in keys), keys
        assert not (tmp_path / "warehouse").exists()  # nothing on the local disk

        # A stray file in the table's folder (a crashed write's): maintenance removes it
        # through the FileIO, and only it.
        stray = f"memory/{ns}/episodes/data/00000-stray.parquet"
        assert httpx.put(f"{s3.url}/{bucket}/{stray}", content=b"junk").status_code == 200
        time.sleep(1.5)
        done = run_cli(tmp_path, env, "maintenance", "--scope", scope, "--orphan-grace", "1s")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)["tables"]
        assert sum(t["orphan_files"] for t in report.values()) >= 1, report
        assert stray not in s3.keys(bucket)
        got = m.episode(scope, episode)
        assert got.status_code == 200 and got.json()["body"] == "The Acme renewal is due in May."

        # A workspace's drop takes its files out of the bucket too.
        ws = m.http.post("/workspaces", json={"name": "scratch", "ttl": "1h"})
        assert ws.status_code == 201, ws.text
        org = ws.json()["id"]
        assert m.write(f"{org}/team_1", "scratch note").status_code == 201
        assert any(k.startswith(f"memory/{org}__team_1/") for k in s3.keys(bucket))
        gone = m.http.delete(f"/workspaces/{org}")
        assert gone.status_code == 200 and gone.json()["dropped"] is True, gone.text
        assert not [k for k in s3.keys(bucket) if k.startswith(f"memory/{org}__")]
        assert any(k.startswith(f"memory/{ns}/") for k in s3.keys(bucket))  # others stay
        m.close()


def test_settings_mask_the_s3_secret(s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    env = s3.env("some-bucket")
    shown = run_cli(tmp_path, env, "settings", "--json")
    assert shown.returncode == 0, shown.stderr
    values = json.loads(shown.stdout)
    text = shown.stdout
    assert env["AMPUP_MEMORY_S3_SECRET_ACCESS_KEY"] not in text
    assert "s3://some-bucket/warehouse" in text and s3.url in text
    assert values  # one object of settings


def test_a_missing_bucket_is_a_clear_error(s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    env = {**QUIET, **s3.env("no-such-bucket-x")}
    done = run_cli(tmp_path, env, "load", str(tmp_path), "--scope", "acme/sales")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "bucket" in done.stderr.lower(), done.stderr
