"""Opt-in API keys: created by the CLI, checked by a real server, one uniform 401."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import click
import httpx
import pytest

# serving: start(90), the first start sets up the stores
from tests.memory_support import cli_in_process, serving
from tests.pg import PostgresFactory
from tests.server_process import ServerProcess


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A `keys` command through the CLI's own entry in this process: what it prints and
    its exit code are under test, not a Python start (seconds each under load)."""
    return cli_in_process(home, {}, *args)


def create_key(home: Path, *args: str) -> str:
    done = cli(home, "keys", "create", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def body(owner: str) -> dict[str, object]:
    return {"type": "semantic", "content": {"text": "k"},
            "identity": {"owner_id": owner, "owner_type": "user"}}


def test_keys_end_to_end(tmp_path: Path) -> None:
    key = create_key(tmp_path, "--agent", "agent_a")
    admin_key = create_key(tmp_path, "--agent", "ops", "--admin")
    other = create_key(tmp_path, "--agent", "agent_b")
    assert key.startswith("ampk_") and key != other
    stored = (tmp_path / "amp.db").read_bytes()
    assert key.encode() not in stored  # only the hash is kept
    with serving(tmp_path, {"AMP_REQUIRE_KEYS": "1"}) as srv:
        base = srv.url + "/amp/v1"
        assert httpx.get(f"{base}/health").status_code == 200
        assert httpx.get(f"{base}/spec").json()["capabilities"]["api_keys_required"] is True
        ok = httpx.post(f"{base}/memories", json=body("u"),
                        headers={"X-AMP-Agent-ID": "agent_a", "X-AMP-API-Key": key})
        assert ok.status_code == 201
        bearer = httpx.get(f"{base}/memories/{ok.json()['id']}",
                           headers={"X-AMP-Agent-ID": "agent_a",
                                    "Authorization": f"Bearer {key}"})
        assert bearer.status_code == 200
        # X-AMP-API-Key is the key; Authorization is then not read (a gateway's own Bearer
        # token may pass through), so it neither rescues a wrong key nor names another agent.
        for sent, bearer_key, status in ((key, other, 200), ("ampk_wrong", key, 401)):
            both = httpx.get(f"{base}/memories", headers={
                "X-AMP-Agent-ID": "agent_a", "X-AMP-API-Key": sent,
                "Authorization": f"Bearer {bearer_key}"})
            assert both.status_code == status, (sent, bearer_key, both.text)
        failures = [
            {},  # nothing
            {"X-AMP-Agent-ID": "agent_a"},  # no key
            {"X-AMP-API-Key": key},  # no agent
            {"X-AMP-Agent-ID": "agent_a", "X-AMP-API-Key": "ampk_wrong"},
            {"X-AMP-Agent-ID": "agent_a", "X-AMP-API-Key": other},  # another agent's key
            {"X-AMP-Agent-ID": "nobody", "X-AMP-API-Key": key},  # unknown agent
        ]
        answers = [httpx.post(f"{base}/memories", content=b"{bad", headers=h) for h in failures]
        assert {a.status_code for a in answers} == {401}
        assert {a.json()["error"]["code"] for a in answers} == {"UNAUTHENTICATED"}
        assert len({a.content for a in answers}) == 1
        # With keys on, a body's identity.created_by names no caller (docs/api.md: it counts
        # only with keys off), with or without a key: else anyone creates as anyone.
        claimed = {**body("u"), "identity": {"owner_id": "u", "owner_type": "user",
                                             "created_by": "agent_a"}}
        for h in ({}, {"X-AMP-API-Key": key}):
            r = httpx.post(f"{base}/memories", json=claimed, headers=h)
            assert r.content == answers[0].content, r.text
        # Admin: the admin key opens admin routes; a plain key does not.
        run = httpx.post(f"{base}/lifecycle/run", json={"dry_run": True},
                         headers={"X-AMP-API-Key": admin_key})
        assert run.status_code == 200
        denied = httpx.post(f"{base}/lifecycle/run", json={}, headers={"X-AMP-API-Key": key})
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "ACCESS_DENIED"
        # Expiry and revocation take effect on the next request (the CLI writes to the
        # store the running server reads).
        short = create_key(tmp_path, "--agent", "agent_s", "--expires-in", "3s")
        h = {"X-AMP-Agent-ID": "agent_s", "X-AMP-API-Key": short}
        assert httpx.post(f"{base}/memories", json=body("u"), headers=h).status_code == 201
        time.sleep(3.2)
        assert httpx.post(f"{base}/memories", json=body("u"), headers=h).status_code == 401
        listing = cli(tmp_path, "keys", "list", "--json")
        assert "agent_b" in listing.stdout and other not in listing.stdout
        rows = [json.loads(line) for line in listing.stdout.splitlines()]
        key_id = next(r["key_id"] for r in rows if r["agent_id"] == "agent_b")
        revoked = cli(tmp_path, "keys", "revoke", key_id)
        assert revoked.returncode == 0, revoked.stderr + listing.stdout
        h = {"X-AMP-Agent-ID": "agent_b", "X-AMP-API-Key": other}
        assert httpx.post(f"{base}/memories", json=body("u"), headers=h).status_code == 401


def test_reference_keys_file(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps(
        {"agent_ref": "sha256:" + hashlib.sha256(b"ref-secret").hexdigest()}))
    with serving(tmp_path, {"AMP_API_KEYS_FILE": str(keys_file)}) as srv:
        base = srv.url + "/amp/v1"
        h = {"X-AMP-Agent-ID": "agent_ref", "X-AMP-API-Key": "ref-secret"}
        assert httpx.post(f"{base}/memories", json=body("u"), headers=h).status_code == 201
        h["X-AMP-API-Key"] = "nope"
        assert httpx.post(f"{base}/memories", json=body("u"), headers=h).status_code == 401


def test_a_keys_file_missing_at_start_is_one_warning_line(tmp_path: Path) -> None:
    """A missing AMP_API_KEYS_FILE is read as empty (the operator may write it later), so a
    typo in its path locked every agent out with no hint. The server still starts, and says
    so in one warning line naming the path; the file created later is honoured. Without the
    setting nothing is said."""
    keys_file = tmp_path / "typo" / "keys.json"
    with ServerProcess(tmp_path, env={"AMP_API_KEYS_FILE": str(keys_file)}) as srv:
        warned = [line for line in srv.log_path.read_text().splitlines()
                  if "AMP_API_KEYS_FILE" in line]
        assert len(warned) == 1, srv.log_path.read_text()
        assert "WARNING" in warned[0] and f"{keys_file} does not exist" in warned[0], warned
        assert "keys create" in warned[0], warned
        h = {"X-AMP-Agent-ID": "agent_ref", "X-AMP-API-Key": "ref-secret"}
        base = srv.url + "/amp/v1"
        assert httpx.post(f"{base}/memories", json=body("u"), headers=h).status_code == 401
        keys_file.parent.mkdir()
        keys_file.write_text(json.dumps(
            {"agent_ref": "sha256:" + hashlib.sha256(b"ref-secret").hexdigest()}))
        assert httpx.post(f"{base}/memories", json=body("u"), headers=h).status_code == 201
    with ServerProcess(tmp_path) as srv:
        assert "AMP_API_KEYS_FILE" not in srv.log_path.read_text()


def test_a_running_server_follows_the_keys_file(tmp_path: Path) -> None:
    """docs/security-model.md: the AMP_API_KEYS_FILE is re-read when it changes. A key added is
    honoured on the next request, a key removed refused, even when the new file keeps the
    old size and mtime (a copy that preserves times, or two writes in one clock tick); a
    half-written file grants nothing and is no 500."""

    def digest(secret: str) -> str:
        return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()

    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps({"agent_ref": digest("ref-secret")}))
    with ServerProcess(tmp_path, env={"AMP_API_KEYS_FILE": str(keys_file)}) as srv:
        base = srv.url + "/amp/v1"

        def status(agent: str, key: str) -> int:
            return httpx.post(f"{base}/memories", json=body("u"),
                              headers={"X-AMP-Agent-ID": agent, "X-AMP-API-Key": key}
                              ).status_code

        assert status("agent_new", "new-secret") == 401
        keys_file.write_text(json.dumps({"agent_ref": digest("ref-secret"),
                                         "agent_new": digest("new-secret")}))
        assert status("agent_new", "new-secret") == 201  # added: honoured at once
        assert status("agent_ref", "ref-secret") == 201
        # Rotate agent_new's key: same length, and the file keeps its old mtime.
        before = keys_file.stat()
        keys_file.write_text(json.dumps({"agent_ref": digest("ref-secret"),
                                         "agent_new": digest("new-secre2")}))
        os.utime(keys_file, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert keys_file.stat().st_size == before.st_size
        assert status("agent_new", "new-secret") == 401  # revoked
        assert status("agent_new", "new-secre2") == 201
        # Half-written: nothing from the file is accepted, and no request fails with 500.
        keys_file.write_text('{"agent_ref": "sha256:')
        assert status("agent_ref", "ref-secret") == 401
        keys_file.write_text(json.dumps({"agent_ref": digest("ref-secret")}))
        assert status("agent_ref", "ref-secret") == 201
        assert status("agent_new", "new-secre2") == 401
        keys_file.unlink()  # no file: no file keys
        assert status("agent_ref", "ref-secret") == 401
        # With keys on, a malformed agent id is the same uniform 401 (never a 500).
        keys_file.write_text(json.dumps({"agent_ref": digest("ref-secret")}))
        answers = [httpx.get(f"{base}/memories", headers={"X-AMP-Agent-ID": agent,
                                                          "X-AMP-API-Key": "ref-secret"})
                   for agent in ("agent_é".encode(), b"../x", b"x" * 5000, b"nobody")]
        assert {a.status_code for a in answers} == {401}
        assert len({a.content for a in answers}) == 1


def test_bad_cli_input_is_a_clear_error(tmp_path: Path) -> None:
    done = cli(tmp_path, "keys", "create", "--agent", "a", "--expires-in", "soon")
    assert done.returncode == 2 and "duration" in done.stderr
    assert "Invalid value for '--expires-in'" in done.stderr, done.stderr  # which option
    assert "Traceback" not in done.stderr
    for agent in ("../x", "agent_é", "x" * 257, "team*", " "):
        done = cli(tmp_path, "keys", "create", "--agent", agent)
        assert done.returncode == 2, (agent, done.stdout)
        assert "not a valid agent id" in done.stderr and "Traceback" not in done.stderr


def test_every_duration_option_reads_one_spelling(tmp_path: Path) -> None:
    """Key lifetimes, grace periods and times to live are one rule (timefmt.duration_seconds):
    each command takes what the others take, within its own bounds."""
    from ampup_memory.auth import parse_duration as key_lifetime
    from ampup_memory.errors import ValidationFailed
    from ampup_memory.memory.cli import parse_duration as grace
    from ampup_memory.timefmt import parse_ttl

    for text in ("90s", "45m", "12h", "30d", "2w", "1d12h", " 1H30M "):
        assert key_lifetime(text) == grace(text) == parse_ttl(text, ["ttl"]), text
    for text in ("soon", "30", "-1d", "1.5h", "", "d"):
        with pytest.raises(ValueError):
            key_lifetime(text)
        with pytest.raises(click.BadParameter):
            grace(text)
        with pytest.raises(ValidationFailed):
            parse_ttl(text, ["ttl"])
    assert grace("0s").total_seconds() == 0  # a grace may be none; a lifetime may not
    with pytest.raises(ValueError):
        key_lifetime("0s")
    done = cli(tmp_path, "keys", "create", "--agent", "agent_d", "--expires-in", "1d12h")
    assert done.returncode == 0, done.stderr


def test_listing_keys_makes_no_store(tmp_path: Path) -> None:
    """`keys list` and `keys revoke` only read: on a fresh home they say there is nothing,
    and leave no cell store (nor home folder) behind."""
    home = tmp_path / "fresh"
    listed = cli(home, "keys", "list")
    assert (listed.returncode, listed.stderr) == (0, ""), listed.stderr
    assert listed.stdout.startswith("no API keys"), listed.stdout
    as_json = cli(home, "keys", "list", "--json")
    assert (as_json.returncode, as_json.stdout) == (0, "")  # one line per key: none
    revoked = cli(home, "keys", "revoke", "key_nope")
    assert revoked.returncode == 2 and "no active key 'key_nope'" in revoked.stderr
    assert not home.exists()
    create_key(tmp_path, "--agent", "agent_l")
    assert "agent_l" in cli(tmp_path, "keys", "list").stdout


@pytest.mark.postgres
def test_listing_keys_makes_no_postgres_tables(tmp_path: Path, postgres: PostgresFactory
                                               ) -> None:
    import psycopg

    url = postgres.new_database("keys")

    def tables() -> list[str]:
        with psycopg.connect(url) as conn:
            return [r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]

    env = {**os.environ, "AMPUP_MEMORY_HOME": str(tmp_path), "AMP_STORE_URI": url}
    listed = subprocess.run([sys.executable, "-m", "ampup_memory.cli", "keys", "list"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and listed.stdout.startswith("no API keys"), listed
    assert tables() == []
    made = subprocess.run([sys.executable, "-m", "ampup_memory.cli", "keys", "create",
                           "--agent", "agent_p"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0, made.stderr
    assert "api_keys" in tables()
    listed = subprocess.run([sys.executable, "-m", "ampup_memory.cli", "keys", "list",
                             "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert json.loads(listed.stdout)["agent_id"] == "agent_p"


def test_the_key_list_shows_every_key_id_whole(tmp_path: Path) -> None:
    """`keys revoke` takes the id `keys list` shows: off a terminal (80 columns) the table
    cut it to `key_65ca72078…`, which revoke then refused; and it left out a key's user."""
    create_key(tmp_path, "--agent", "agent_billing_with_a_long_name_v1", "--user", "dana")
    create_key(tmp_path, "--agent", "ops", "--admin", "--expires-in", "30d")
    rows = [json.loads(line) for line in cli(tmp_path, "keys", "list", "--json")
            .stdout.splitlines()]
    # times as every answer spells them (RFC 3339, UTC, `Z`), not Python's `+00:00`
    assert all(row["created_at"].endswith("Z") for row in rows), rows
    expiring = [row["expires_at"] for row in rows if row["expires_at"]]
    assert len(expiring) == 1 and expiring[0].endswith("Z"), rows
    listed = cli(tmp_path, "keys", "list")
    assert listed.returncode == 0, listed.stderr
    for row in rows:
        assert row["key_id"] in listed.stdout, listed.stdout
        assert row["agent_id"] in listed.stdout, listed.stdout
    assert "dana" in listed.stdout
    revoked = cli(tmp_path, "keys", "revoke", listed.stdout.split()[len(
        "key id agent user admin created expires revoked".split())])
    assert revoked.returncode == 0, revoked.stderr


def test_the_sessions_and_workspace_listings_with_keys_on(tmp_path: Path) -> None:
    """With keys on, GET /sessions and GET /workspaces/{id} (and /snapshots) read as the
    key's user: no key is 401, a header naming another user is 401, another
    user's workspace is the same 404 as an unknown one, and an admin key sees it."""
    alice = create_key(tmp_path, "--agent", "agent_a", "--user", "alice")
    bob = create_key(tmp_path, "--agent", "agent_b", "--user", "bob")
    admin = create_key(tmp_path, "--agent", "ops", "--admin", "--user", "ops")
    with serving(tmp_path, {"AMP_REQUIRE_KEYS": "1"}) as srv:
        def as_(agent: str, key: str) -> httpx.Client:
            return httpx.Client(base_url=srv.url, timeout=60, headers={
                "X-AMP-Agent-ID": agent, "X-AMP-API-Key": key})

        with as_("agent_a", alice) as a, as_("agent_b", bob) as b, as_("ops", admin) as op:
            scope = "keys_audit/team"
            ses = a.post("/sessions/start", json={"scope": scope, "task": "t"}).json()["id"]
            ws = a.post("/workspaces", json={"name": "k", "ttl": "1h"}).json()["id"]
            assert a.post("/episodes", json={"scope": f"{ws}/t", "source": "doc:k",
                                             "body": "hello", "acl": ["*"]}
                          ).status_code == 201
            snap = a.post(f"/workspaces/{ws}/snapshots")
            assert snap.status_code == 201, snap.text

            listing = {"scope": scope}
            assert [s["id"] for s in a.get("/sessions", params=listing).json()["sessions"]
                    ] == [ses]
            spoofed = b.get("/sessions", params=listing, headers={"X-AmpUp-User": "alice"})
            assert spoofed.status_code == 401, spoofed.text
            assert b.get("/sessions", params=listing).json() == {
                "sessions": [], "next_before": None}
            for path in (f"/workspaces/{ws}", f"/workspaces/{ws}/snapshots"):
                unknown = a.get(path.replace(ws, "ws_0000000000000000"))
                hidden = b.get(path)
                assert unknown.status_code == hidden.status_code == 404
                assert unknown.json() == hidden.json()
                assert a.get(path).status_code == op.get(path).status_code == 200
                for none in (httpx.get(srv.url + path, headers={"X-AmpUp-User": "alice"}),
                             httpx.get(srv.url + path, headers={
                                 "X-AMP-Agent-ID": "agent_a", "X-AMP-API-Key": "ampk_x"})):
                    assert none.status_code == 401 and set(none.json()) == {"error"}
            assert [s["id"] for s in op.get(f"/workspaces/{ws}/snapshots").json()[
                "snapshots"]] == [snap.json()["id"]]
            assert httpx.get(srv.url + "/sessions", params=listing).status_code == 401


def test_with_keys_on_a_user_header_must_name_the_keys_user(tmp_path: Path) -> None:
    """Keys on, the key says who speaks. An ``X-AmpUp-User`` naming anyone else (or any
    user, for a key bound to none) is a 401 that says so, on the AmpUp routes, the AMP
    face and ``/mcp`` alike, and stdio MCP stops at start: ignoring it let a client
    configured as bob write ``user:bob`` ACLs while it read as alice. The key's own user
    in the header is the caller as before."""
    alice = create_key(tmp_path, "--agent", "agent_a", "--user", "alice")
    anyone = create_key(tmp_path, "--agent", "agent_n")
    with serving(tmp_path, {"AMP_REQUIRE_KEYS": "1"}) as srv:
        def send(key: str, agent: str, user: str | None, method: str, path: str,
                 **kw: object) -> httpx.Response:
            headers = {"X-AMP-Agent-ID": agent, "X-AMP-API-Key": key,
                       "Accept": "application/json, text/event-stream"}
            if user is not None:
                headers["X-AmpUp-User"] = user
            return httpx.request(method, srv.url + path, headers=headers, timeout=60, **kw)

        mcp = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "keys-test", "version": "1"}}}
        routes = [("GET", "/sessions?scope=keys_user/team", {}),
                  ("POST", "/amp/v1/memories", {"json": body("u")}),
                  ("POST", "/mcp", {"json": mcp})]
        for method, path, kw in routes:
            for key, agent, user, says in ((alice, "agent_a", "bob", "another user"),
                                           (alice, "agent_a", "Alice", "another user"),
                                           (anyone, "agent_n", "alice", "no AmpUp user")):
                refused = send(key, agent, user, method, path, **kw)
                assert refused.status_code == 401, (path, refused.text)
                error = refused.json()["error"]  # /mcp's: JSON-RPC's, our code in data
                code = error["data"]["code"] if path == "/mcp" else error["code"]
                assert code == "UNAUTHENTICATED" and says in error["message"], error
            for user in (None, "alice"):
                assert send(alice, "agent_a", user, method, path, **kw).status_code < 300, path
    stdio = cli_in_process(tmp_path, {"AMP_REQUIRE_KEYS": "1", "AMP_MCP_AGENT_ID": "agent_a",
                                      "AMP_MCP_API_KEY": alice,
                                      "AMPUP_MEMORY_MCP_USER": "bob"}, "mcp")
    assert stdio.returncode != 0
    assert "AMPUP_MEMORY_MCP_USER 'bob' is not the user AMP_MCP_API_KEY speaks for" in (
        stdio.stderr), stdio.stderr


def test_a_slow_reload_never_installs_the_older_file_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two requests reload the keys file across a rewrite: the one that read the older
    content (its parse slowed here) must not install it after the newer one, or a key
    removed from the file works again until the next reload."""
    from ampup_memory import auth
    from ampup_memory.amp.store.registry import open_store

    old_key, new_key = "amp_old_" + "a" * 40, "amp_new_" + "b" * 40
    keys_file = tmp_path / "keys.json"

    def write(key: str) -> bytes:
        content = json.dumps({"agent_x": "sha256:" + hashlib.sha256(key.encode())
                              .hexdigest()}).encode()
        keys_file.write_bytes(content)
        return content

    old_content = write(old_key)
    store = open_store(f"sqlite:///{tmp_path}/amp.db", 8)
    try:
        ring = auth.KeyRing(store, keys_file)
        ring._file_content = None  # as if the file had just changed: both threads reload
        parse, read_old = auth.parse_keys_file, threading.Event()

        def slow_parse(content: bytes) -> dict[str, str]:
            if content == old_content:
                read_old.set()
                time.sleep(0.5)  # the rewrite and the other reload happen meanwhile
            return parse(content)

        monkeypatch.setattr(auth, "parse_keys_file", slow_parse)
        slow = threading.Thread(target=ring._reload_file)
        slow.start()
        assert read_old.wait(5)
        new_content = write(new_key)  # the old key is removed from the file
        ring._reload_file()
        slow.join()
        # What the ring holds now, read without a reload (a lookup would reload and hide
        # the older content it had installed until then).
        assert ring._file_content == new_content
        assert set(ring._file_keys) == {auth.hash_key(new_key)}
        assert ring.lookup(new_key, datetime.now(UTC)) is not None
    finally:
        store.close()
