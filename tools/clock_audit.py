"""Audit what servers whose clocks disagree, or jump, do to one memory: real servers on one
PostgreSQL (cell store, catalog, read index) and one warehouse folder, each server's clock
shifted from outside the process by libfaketime (``apt-get install faketime``), so no code
of ours is faked.

    PYTHONPATH=src:. python tools/clock_audit.py [--skew 5m] [--step 10m] [--out DIR]

Three servers share the memory: N (the true clock), A (``+skew``) and B (``-skew``). Then one
server alone whose clock steps back ``--step`` while it writes (an NTP step), through a
libfaketime timestamp file it rereads on every call. libfaketime also moves the process's
``CLOCK_MONOTONIC`` by the same offset (its ``FAKETIME_DONT_FAKE_MONOTONIC`` makes Python's
``time.sleep`` fail with EINVAL here), so the step is harsher than a real NTP step, which
leaves the monotonic clock alone.

Each check prints what it saw; ``DIR/findings.json`` holds what broke a rule the docs give
(a write lost or unread, a value a later write should have replaced, a 500, a commit chain
out of order) and the exit code is 1 when there are any. Where the docs say a skewed clock
moves a time (an expiry seen earlier or later), the size is printed, not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.pg import postgres_factory  # noqa: E402
from tests.server_process import ServerProcess, plain_client, start_together  # noqa: E402

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
ADMIN = "clock-admin-token"
USER = {"X-AmpUp-User": "clock.user"}
AGENT = {**USER, "X-AMP-Agent-ID": "clock_agent"}
QUIET = {"AMP_ADMIN_TOKEN": ADMIN, "AMP_EMBEDDING_PROVIDER": "hash",
         "AMP_LIFECYCLE_ENABLED": "false", "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0"}

findings: list[dict[str, Any]] = []


def finding(check: str, detail: str) -> None:
    findings.append({"check": check, "detail": detail})
    print(f"  FINDING {check}: {detail}")


def note(text: str) -> None:
    print(f"  {text}")


def offset(text: str) -> timedelta:
    m = re.fullmatch(r"([+-]?)(\d+)([smhd])", text)
    if not m:
        raise SystemExit(f"not an offset: {text!r} (e.g. 5m, -30s)")
    n = int(m[2]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m[3]]
    return timedelta(seconds=-n if m[1] == "-" else n)


def faked(spec: str | None = None, stamp_file: Path | None = None) -> dict[str, str]:
    """The environment that shifts a process's clock: by ``spec`` (``+5m``), or by what
    ``stamp_file`` says at each call."""
    env = {"LD_PRELOAD": str(FAKETIME_LIB)}
    if stamp_file is not None:
        env |= {"FAKETIME_TIMESTAMP_FILE": str(stamp_file), "FAKETIME_NO_CACHE": "1"}
    else:
        env["FAKETIME"] = spec or "+0"
    return env


def clock_of(env: dict[str, str]) -> float:
    """Seconds a process started with ``env`` is ahead of ours (time.time, datetime.now and
    a ULID's time, which must agree)."""
    code = ("import time, datetime, ulid; t = time.time(); "
            "d = datetime.datetime.now(datetime.UTC).timestamp(); "
            "u = ulid.ULID().datetime.timestamp(); print(t, d, u)")
    import subprocess
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, check=True).stdout.split()
    now = time.time()
    t, d, u = (float(x) for x in out)
    assert abs(t - d) < 1 and abs(t - u) < 1, out
    return t - now


def ok(r: httpx.Response, *codes: int) -> Any:
    if r.status_code >= 500:
        finding("no 500", f"{r.request.method} {r.request.url} -> {r.status_code} {r.text[:300]}")
    if r.status_code not in (codes or (200, 201)):
        raise AssertionError(f"{r.request.method} {r.request.url} -> {r.status_code} "
                             f"{r.text[:400]}")
    return r.json()


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@contextmanager
def fleet(url: str, warehouse: Path, clocks: dict[str, dict[str, str]],
          extra: dict[str, str] | None = None) -> Iterator[dict[str, httpx.Client]]:
    env = {**QUIET, "AMPUP_MEMORY_CATALOG_URI": url, "AMPUP_MEMORY_INDEX_URI": url,
           "AMP_STORE_URI": url, "AMPUP_MEMORY_WAREHOUSE": f"file://{warehouse}",
           **(extra or {})}
    procs = {name: ServerProcess(Path(tempfile.mkdtemp(prefix=f"clock-{name}-")),
                                 env={**env, **fake}) for name, fake in clocks.items()}
    errors = start_together(list(procs.values()), timeout=180)
    with ExitStack() as stack:
        for p in procs.values():
            stack.callback(p.stop)
        if errors:
            raise SystemExit(f"servers did not start: {errors}")
        clients = {n: stack.enter_context(plain_client(base_url=p.url, timeout=120,
                                                       headers=USER))
                   for n, p in procs.items()}
        yield clients


def chain(c: httpx.Client, scope: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    before = None
    while True:
        page = ok(c.get("/ledger", params={"scope": scope, "limit": 1000,
                                           **({"before": before} if before else {})}))
        out += page["commits"]
        before = page["next_before"]
        if not before:
            return out


def check_chain(name: str, commits: list[dict[str, Any]], acked: list[str]) -> None:
    """Newest first: one chain; every acknowledged commit in it once; no commit's id or
    time below its parent's."""
    ids = [c["id"] for c in commits]
    missing = [a for a in acked if a not in ids]
    if missing:
        finding(name, f"acknowledged commits missing from GET /ledger: {missing}")
    for newer, older in zip(commits, commits[1:], strict=False):
        if newer["parent"] != older["id"] or newer["seq"] != older["seq"] + 1:
            finding(name, f"chain broken between {older['id']} and {newer['id']}")
    id_back = sum(n["id"] < o["id"] for n, o in zip(commits, commits[1:], strict=False))
    time_back = sum(n["time"] < o["time"] for n, o in zip(commits, commits[1:], strict=False))
    note(f"{name}: {len(commits)} commits in one chain; id below its parent's: {id_back}, "
         f"time before its parent's: {time_back}")
    if id_back or time_back:
        finding(name, f"{id_back} commit id(s) below, {time_back} time(s) before, the "
                "parent's")


def episode(c: httpx.Client, scope: str, body: str, **extra: Any) -> dict[str, Any]:
    return ok(c.post("/episodes", json={"scope": scope, "source": f"doc:{uuid.uuid4().hex}",
                                        "body": body, "acl": ["*"], **extra}), 201)


def fact(c: httpx.Client, scope: str, entity: str, value: str, ep: str) -> dict[str, Any]:
    return ok(c.post("/facts", json={"scope": scope, "entity": entity, "predicate": "office",
                                     "value": value, "quote": value,
                                     "cites": [{"episode": ep, "unit": 1}]}), 201)


def current(c: httpx.Client, scope: str, entity: str) -> list[str]:
    got = ok(c.get("/facts", params={"scope": scope, "entity": entity}))["facts"]
    return [f["value"] for f in got]


def skewed(url: str, warehouse: Path, skew: timedelta) -> None:
    s = int(skew.total_seconds())
    clocks = {"N": faked("+0"), "A": faked(f"+{s}s"), "B": faked(f"-{s}s")}
    for name, env in clocks.items():
        note(f"server {name}'s clock is {clock_of(env):+.1f} s off ours")
    with fleet(url, warehouse, clocks) as srv:
        n, a, b = srv["N"], srv["A"], srv["B"]
        scope = f"clock/s{uuid.uuid4().hex[:6]}"

        print("ledger: writes through A, B, N in turn")
        acked = []
        for i, c in enumerate([a, b, n, a, b, n]):
            acked.append(episode(c, scope, f"ledger write {i} through one server")["commit"])
        for name, c in srv.items():
            check_chain(f"ledger read on {name}", chain(c, scope), acked)

        print("facts: a value through A, then a newer value through N and B")
        for first, second, label in ((a, n, "A then N"), (a, b, "A then B"),
                                     (n, b, "N then B")):
            entity = f"acct_{uuid.uuid4().hex[:6]}"
            e1 = episode(first, scope, f"{entity} moved to Lisbon.")
            fact(first, scope, entity, "Lisbon", e1["id"])
            e2 = episode(second, scope, f"{entity} moved to Porto.")
            fact(second, scope, entity, "Porto", e2["id"])
            seen = {name: current(c, scope, entity) for name, c in srv.items()}
            if any(v != ["Porto"] for v in seen.values()):
                finding("newest value wins", f"{label}: Lisbon, then Porto; current values "
                        f"read on each server: {seen}")
            else:
                note(f"{label}: Porto current on every server")

        print("close: a value through A, closed through N and through B")
        for closer, label in ((n, "N"), (b, "B")):
            entity = f"acct_{uuid.uuid4().hex[:6]}"
            e1 = episode(a, scope, f"{entity} moved to Faro.")
            fact(a, scope, entity, "Faro", e1["id"])
            r = closer.post("/close", json={"scope": scope, "entity": entity,
                                            "predicate": "office", "reason": "closed"})
            seen = {name: current(c, scope, entity) for name, c in srv.items()}
            note(f"close through {label}: {r.status_code} "
                 f"{r.json().get('error', {}).get('code', '')}; then current: {seen}")
            if r.status_code == 201 and any(seen.values()):
                finding("a close ends the value", f"A wrote Faro, {label} closed it (201); "
                        f"current after: {seen}")
            if r.status_code == 404:
                finding("a close ends the value", f"A wrote Faro, closing it through "
                        f"{label} answered 404 (the value is not current on {label} yet): "
                        f"{r.text[:200]}")

        print("episodes: written through A, N, B in turn; GET /episodes (newest first) on N")
        made = {episode(srv[name], scope, f"order episode through {name}")["id"]: name
                for name in ("A", "N", "B")}
        listed = ok(n.get("/episodes", params={"scope": scope, "limit": 3}))["episodes"]
        order = [made.get(x["id"], "?") for x in listed]
        if order != ["B", "N", "A"]:
            finding("episodes newest first", f"GET /episodes listed {order}, not B, N, A")
        else:
            note("GET /episodes: B, N, A")

        print("AMP cells: created on A, read on N; patched on B")
        owner = {"owner_id": f"u_{uuid.uuid4().hex[:6]}", "owner_type": "user"}
        cell = ok(a.post("/amp/v1/memories", headers=AGENT, json={
            "type": "semantic", "content": {"text": "cell from the fast server"},
            "identity": owner}), 201)
        seen = ok(n.get(f"/amp/v1/memories/{cell['id']}", headers=AGENT))
        note(f"created on A: created_at {seen['lifecycle']['created_at']} (read on N)")
        before_patch = seen["lifecycle"]["last_updated_at"]
        r = b.patch(f"/amp/v1/memories/{cell['id']}", headers={**AGENT, "If-Match":
                                                                n.get(f"/amp/v1/memories/"
                                                                      f"{cell['id']}",
                                                                      headers=AGENT
                                                                      ).headers["ETag"]},
                    json={"content": {"text": "patched on the slow server"}})
        after = ok(r)
        note(f"patched on B: last_updated_at {before_patch} -> "
             f"{after['lifecycle']['last_updated_at']}")
        if after["lifecycle"]["last_updated_at"] < before_patch:
            finding("updated_at moves forward", f"a PATCH on B set last_updated_at "
                    f"{after['lifecycle']['last_updated_at']}, before the create's "
                    f"{before_patch}")
        cells = {}
        for name, c in (("A", a), ("N", n), ("B", b)):
            cells[name] = ok(c.post("/amp/v1/memories", headers=AGENT, json={
                "type": "semantic", "content": {"text": f"order cell through {name}"},
                "identity": owner}), 201)["id"]
            time.sleep(0.05)
        listed = ok(n.get("/amp/v1/memories", headers=AGENT,
                          params={"owner_id": owner["owner_id"], "limit": 3}))
        names = {v: k for k, v in cells.items()}
        note(f"GET /amp/v1/memories on N (written A, N, B in that order): "
             f"{[names.get(x['id'], x['id']) for x in listed['results']]}")

        print("pins: ttl 10m made on A and on B, read on N")
        for name, c in (("A", a), ("B", b)):
            pin = ok(c.post("/pin", json={"scope": scope, "ttl": "10m"}), 201)
            on_n = n.get(f"/pin/{pin['id']}")
            state = on_n.json().get("state") or on_n.json().get("error", {}).get("code")
            left = (at(pin["expires_at"]) - datetime.now(UTC)).total_seconds()
            note(f"pin made on {name}: expires {left / 60:+.1f} min from now (asked 10); "
                 f"on N: {on_n.status_code} {state}")

        print("runs: recorded A, N, B in turn; GET /runs on N")
        runs = {}
        for name, c in (("A", a), ("N", n), ("B", b)):
            runs[ok(c.post("/runs", json={"scope": scope, "task": f"run through {name}"}),
                    201)["id"]] = name
        got = ok(n.get("/runs", params={"scope": scope}))
        note(f"GET /runs on N (newest first expected B, N, A): "
             f"{[runs.get(x['id'], '?') for x in got.get('runs', [])]}")


def stepping(url: str, warehouse: Path, step: timedelta) -> None:
    stamp = Path(tempfile.mkdtemp(prefix="clock-step-")) / "faketime"
    stamp.write_text("+0")
    with fleet(url, warehouse, {"S": faked(stamp_file=stamp)}) as srv:
        s = srv["S"]
        scope = f"clock/t{uuid.uuid4().hex[:6]}"
        entity = f"acct_{uuid.uuid4().hex[:6]}"
        acked = []
        values = []
        for i in range(6):
            if i == 3:
                stamp.write_text(f"-{int(step.total_seconds())}s")
                note(f"clock stepped back {step} before write {i}")
            e = episode(s, scope, f"{entity} moved to office {i}.")
            acked.append(e["commit"])
            acked.append(fact(s, scope, entity, f"office {i}", e["id"])["commit"])
            values.append(f"office {i}")
            now = current(s, scope, entity)
            if now != [values[-1]]:
                finding("newest value wins", f"after the step: wrote {values[-1]!r}, "
                        f"current is {now}")
        check_chain("ledger across the step", chain(s, scope), acked)
        hist = ok(s.get("/facts", params={"scope": scope, "entity": entity,
                                          "history": "true"}))["facts"]
        note(f"history after the step: {[(h['value'], h.get('valid_from')) for h in hist]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skew", default="5m")
    parser.add_argument("--step", default="10m")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not FAKETIME_LIB.exists():
        raise SystemExit(f"{FAKETIME_LIB} missing: apt-get install faketime")
    out = args.out or Path(tempfile.mkdtemp(prefix="clock-audit-"))
    out.mkdir(parents=True, exist_ok=True)
    with postgres_factory() as pg:
        print(f"== three servers, clocks 0, +{args.skew}, -{args.skew}")
        skewed(pg.new_database("clock"), Path(tempfile.mkdtemp(prefix="clock-wh-")),
               offset(args.skew))
        print(f"== one server whose clock steps back {args.step}")
        stepping(pg.new_database("clockstep"), Path(tempfile.mkdtemp(prefix="clock-wh-")),
                 offset(args.step))
    (out / "findings.json").write_text(json.dumps(findings, indent=2))
    print(f"{len(findings)} finding(s); {out / 'findings.json'}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
