"""AmpUp Memory core benchmark over real HTTP, on the embedded default (SQLite catalog,
file:// warehouse, SQLite read index).

    python benchmarks/memory_bench.py                      # full sizes, writes docs
    python benchmarks/memory_bench.py --facts 10000 --load 5000 --no-docs   # quick

Measures
- single-episode write (POST /episodes), in windows of 100 commits, with the fact read
  (GET /facts, one entity) and the episodes table's snapshots and data files after each
  window: upkeep keeps them, and so the times, flat;
- server CPU per write (from /proc), which the machine's load does not inflate;
- `ampup-memory load` throughput on a JSONL corpus, and its re-run (writes nothing);
- GET /facts for one entity at growing fact counts (up to 100k), served from the index;
- a bare pyiceberg table with default properties, for comparison (--baseline).

Results go to benchmarks/results/memory_sqlite.json and, between markers, into
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.server_process import ServerProcess  # noqa: E402

from ampup_memory.memory.episode_types import DOC  # noqa: E402
from ampup_memory.memory.episodes import EpisodeIn, episode_id  # noqa: E402
from ampup_memory.memory.facts import FactIn  # noqa: E402
from ampup_memory.memory.service import MemoryService  # noqa: E402
from ampup_memory.settings import load_settings  # noqa: E402

ENV = {"AMP_EMBEDDING_PROVIDER": "hash", "AMP_LIFECYCLE_ENABLED": "false",
       "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0"}
SCOPE = "bench/core"
MARK_START, MARK_END = "<!-- memory-bench:start -->", "<!-- memory-bench:end -->"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(value: float) -> float:
    return round(value * 1000, 1)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def table_shape(home: Path, name: str) -> dict[str, int]:
    svc = MemoryService.open(load_settings(home=home, embedding_provider="hash"))
    try:
        table = svc.tables.private(SCOPE.replace("/", "__"), name)
        snap = table.current_snapshot()
        files = int(snap.summary["total-data-files"] or 0) if snap and snap.summary else 0
        return {"snapshots": len(table.metadata.snapshots), "data_files": files}
    finally:
        svc.close()


def writes(c: httpx.Client, server: ServerProcess, home: Path, count: int) -> list[dict[str, Any]]:
    seed = c.post("/episodes", json={"scope": SCOPE, "source": "call:seed", "acl": ["*"],
                                     "body": "Ann: the Acme budget is 50k."}).json()["id"]
    c.post("/facts", json={"scope": SCOPE, "entity": "acme", "predicate": "budget",
                           "value": "50k", "quote": "budget is 50k",
                           "cites": [{"episode": seed, "unit": 1}]})
    rows = []
    assert server.proc is not None
    for window in range(count // 100):
        lat, reads = [], []
        cpu0 = cpu_seconds(server.proc.pid)
        for i in range(100):
            body = {"scope": SCOPE, "source": f"slack:C1:{window}-{i}", "acl": ["*"],
                    "body": f"ann: note {window}-{i} about the roadmap"}
            t = time.perf_counter()
            r = c.post("/episodes", json=body)
            lat.append(time.perf_counter() - t)
            assert r.status_code == 201, r.text
        cpu = (cpu_seconds(server.proc.pid) - cpu0) / 100
        for _ in range(50):
            t = time.perf_counter()
            assert c.get("/facts", params={"scope": SCOPE, "entity": "acme"}).status_code == 200
            reads.append(time.perf_counter() - t)
        rows.append({"commits": (window + 1) * 100, "write_p50_ms": ms(pct(lat, .5)),
                     "write_p90_ms": ms(pct(lat, .9)), "server_cpu_ms_per_write": ms(cpu),
                     "fact_read_p50_ms": ms(pct(reads, .5)),
                     **table_shape(home, "episodes")})
        print(rows[-1], flush=True)
    return rows


def load(home: Path, size: int) -> dict[str, Any]:
    corpus = home / "corpus"
    corpus.mkdir()
    rng = random.Random(7)
    with open(corpus / "feed.jsonl", "w") as f:
        for i in range(size):
            f.write(json.dumps({"source": f"gmail:t{i // 5}:{i}", "acl": ["group:sales"],
                                "body": f"From: rep{rng.randrange(50)}@acme.test\n\n"
                                        f"Quote {i}: {rng.randrange(10**6)} units."}) + "\n")
    cmd = [sys.executable, "-m", "ampup_memory.cli", "load", str(corpus), "--scope", SCOPE]
    env = {**os.environ, **ENV, "AMPUP_MEMORY_HOME": str(home),
           "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    out = {}
    for run in ("first", "rerun"):
        t = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        took = time.perf_counter() - t
        counts = json.loads(done.stdout)
        out[run] = {"seconds": round(took, 2), "episodes_per_s": round(size / took),
                    **counts}
        print(run, out[run], flush=True)
    return out


def add_facts(home: Path, start: int, stop: int, entities: int) -> None:
    """Facts in commits of 1,000 through the service (what a loaded corpus does)."""
    svc = MemoryService.open(load_settings(home=home, embedding_provider="hash"))
    try:
        if start == 0:
            sheets = [{"source": f"doc:kb/sheet-{k}", "acl": ["*"],
                       "body": f"Fact sheet {k}: figures for this quarter."} for k in range(100)]
            svc.write_episodes("bench", SCOPE, None,
                               [EpisodeIn.model_validate(s) for s in sheets])
        sheet = [episode_id(DOC, f"doc:kb/sheet-{k}", f"Fact sheet {k}: figures for this "
                            "quarter.") for k in range(100)]
        for lo in range(start, stop, 1000):
            batch = []
            for n in range(lo, min(stop, lo + 1000)):
                k = n % 100
                batch.append(FactIn.model_validate({
                    "entity": f"e{n % entities}", "predicate": f"p{(n // entities) % 10}",
                    "value": n, "quote": f"Fact sheet {k}",
                    "valid_from": f"2024-01-01T00:{(n // entities) % 60:02d}:00Z",
                    "cites": [{"episode": sheet[k], "unit": 1}]}))
            svc.post_facts("bench", SCOPE, None, batch)
    finally:
        svc.close()


def fact_reads(c: httpx.Client, entities: int, n: int = 200) -> dict[str, float]:
    rng = random.Random(3)
    cur, hist = [], []
    for _ in range(n):
        e = f"e{rng.randrange(entities)}"
        t = time.perf_counter()
        r = c.get("/facts", params={"scope": SCOPE, "entity": e})
        cur.append(time.perf_counter() - t)
        assert r.status_code == 200 and r.json()["facts"], r.text
        t = time.perf_counter()
        c.get("/facts", params={"scope": SCOPE, "entity": e, "history": "true"})
        hist.append(time.perf_counter() - t)
    return {"current_p50_ms": ms(pct(cur, .5)), "current_p90_ms": ms(pct(cur, .9)),
            "history_p50_ms": ms(pct(hist, .5))}


def baseline(home: Path, count: int) -> list[dict[str, Any]]:
    """A bare pyiceberg table, default properties, no upkeep: the cost we design around."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("bare", uri=f"sqlite:///{home / 'bare.db'}",
                     warehouse=f"file://{home / 'bare'}")
    cat.create_namespace("bare")
    schema = pa.schema([("id", pa.string()), ("body", pa.string())])
    table = cat.create_table(("bare", "t"), schema=schema)
    rows, lat = [], []
    for i in range(1, count + 1):
        t = time.perf_counter()
        table.append(pa.table({"id": [str(i)], "body": ["x" * 80]}, schema=schema))
        lat.append(time.perf_counter() - t)
        if i % 100 == 0:
            rows.append({"commits": i, "append_p50_ms": ms(pct(lat[-100:], .5))})
            print("bare", rows[-1], flush=True)
    return rows


def markdown(r: dict[str, Any]) -> str:
    run = f"`python benchmarks/memory_bench.py {r['args']}`".replace(" `", "`")
    lines = [MARK_START, "## AmpUp Memory core (Iceberg tables)", "",
             f"Run: {run} on {r['machine']}; "
             f"load average {r['load_before']} before, {r['load_after']} after (the machine "
             "was shared with other work, so wall times carry that load; server CPU per "
             "write does not).", "",
             "**Single-episode write** (`POST /episodes`, one episode = two Iceberg commits: "
             "rows, then ledger row) and **fact read** (`GET /facts`, one entity) as commits "
             "accumulate; snapshots and data files of the episodes table after each window:",
             "", "| commits | write p50 ms | write p90 ms | server CPU ms/write | "
             "fact read p50 ms | snapshots kept | data files |", "|---|---|---|---|---|---|---|"]
    for w in r["writes"]:
        lines.append(f"| {w['commits']} | {w['write_p50_ms']} | {w['write_p90_ms']} | "
                     f"{w['server_cpu_ms_per_write']} | {w['fact_read_p50_ms']} | "
                     f"{w['snapshots']} | {w['data_files']} |")
    ld = r["load"]
    lines += ["", f"**Load** (`ampup-memory load`, {r['load_size']:,} JSONL e-mails of about "
              "50 bytes, 1,000 per commit, process start included, embedder `hash`: not the "
              "default, see \"Load with the default embedder\" above): "
              f"{ld['first']['episodes_per_s']:,} episodes/s ({ld['first']['seconds']} s, "
              f"{ld['first']['commits']} commits); re-run {ld['rerun']['seconds']} s, "
              f"{ld['rerun']['created']} new, {ld['rerun']['commits']} commits.", "",
              "**Fact read at scale** (`GET /facts?entity=` for a random entity among "
              f"{r['entities']:,}; facts posted 1,000 per commit; served from the read index):",
              "", "| facts | current p50 ms | current p90 ms | history p50 ms |",
              "|---|---|---|---|"]
    for size, f in r["fact_reads"].items():
        lines.append(f"| {int(size):,} | {f['current_p50_ms']} | {f['current_p90_ms']} | "
                     f"{f['history_p50_ms']} |")
    if r.get("baseline"):
        lines += ["", "**Without our table properties and upkeep** (bare pyiceberg table, "
                  "defaults, one-row appends), for comparison:", "",
                  "| commits | append p50 ms |", "|---|---|"]
        lines += [f"| {b['commits']} | {b['append_p50_ms']} |" for b in r["baseline"]]
    lines += ["", "Targets: write p50 < 100 ms, load ≥ 1,000 episodes/s, fact read p50 < 20 "
              "ms at 100k facts.", MARK_END]
    return "\n".join(lines) + "\n"


def write_docs(section: str) -> None:
    path = ROOT / "docs" / "performance.md"
    text = path.read_text() if path.exists() else "# Performance\n\n"
    if MARK_START in text:
        head, rest = text.split(MARK_START, 1)
        text = head + section + rest.split(MARK_END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=500)
    ap.add_argument("--load", type=int, default=20000)
    ap.add_argument("--facts", type=int, default=100000)
    ap.add_argument("--entities", type=int, default=10000)
    ap.add_argument("--baseline", type=int, default=300, help="bare appends (0 = skip)")
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    result: dict[str, Any] = {
        "args": " ".join(sys.argv[1:]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}",
        "load_before": round(os.getloadavg()[0], 2), "entities": args.entities,
        "load_size": args.load}
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as tmp:
        home = Path(tmp) / "home"
        with ServerProcess(home, env=ENV) as server, httpx.Client(
                base_url=server.url, headers={"X-AmpUp-User": "bench"}, timeout=120) as c:
            result["writes"] = writes(c, server, home, args.writes)
            result["load"] = load(home, args.load)
        result["fact_reads"] = {}
        done = 0
        for size in (s for s in (1000, 10000, 100000, args.facts) if s <= args.facts):
            if size in result["fact_reads"] or size <= done:
                continue
            add_facts(home, done, size, min(args.entities, size))
            done = size
            with ServerProcess(home, env=ENV) as server, httpx.Client(
                    base_url=server.url, headers={"X-AmpUp-User": "bench"}, timeout=120) as c:
                result["fact_reads"][size] = fact_reads(c, min(args.entities, size))
            print(size, result["fact_reads"][size], flush=True)
        if args.baseline:
            result["baseline"] = baseline(Path(tmp), args.baseline)
    result["load_after"] = round(os.getloadavg()[0], 2)
    out = ROOT / "benchmarks" / "results" / "memory_sqlite.json"
    out.write_text(json.dumps(result, indent=2))
    if not args.no_docs:
        write_docs(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
