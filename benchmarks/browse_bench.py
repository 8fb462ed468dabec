"""The browsing listings (GET /scopes, /episodes, /entities) on a scope of 100k facts,
over real HTTP, on the embedded default (SQLite read index).

    python benchmarks/browse_bench.py                  # 100k facts, writes docs
    python benchmarks/browse_bench.py --facts 10000 --no-docs   # quick

The scope is filled in-process through the service (episodes and facts in commits of
1,000, as a loaded corpus); a tenth of the episodes are readable by another user only, so
every listing filters by ACL. Each request is repeated and its min and median wall time
are reported, with the server's CPU time per request (from /proc), which the load of the
shared machine does not inflate. Results go to benchmarks/results/browse_sqlite.json and,
between markers, into docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
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

from ampup_memory.memory.episodes import EpisodeIn  # noqa: E402
from ampup_memory.memory.facts import FactIn  # noqa: E402
from ampup_memory.memory.service import MemoryService  # noqa: E402
from ampup_memory.settings import load_settings  # noqa: E402

ENV = {"AMP_EMBEDDING_PROVIDER": "hash", "AMP_LIFECYCLE_ENABLED": "false",
       "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0"}
SCOPE = "bench/browse"
MARK_START, MARK_END = "<!-- browse-bench:start -->", "<!-- browse-bench:end -->"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fill(home: Path, facts: int, episodes: int, entities: int) -> None:
    """``episodes`` episodes (one in ten readable by ``other`` only) and ``facts`` fact
    versions over ``entities`` entities, each citing one episode."""
    svc = MemoryService.open(load_settings(home=home, embedding_provider="hash"))
    try:
        ids: list[str] = []
        for lo in range(0, episodes, 1000):
            batch = [EpisodeIn.model_validate({
                "source": f"doc:kb/sheet-{k}", "body": f"Fact sheet {k}: figures.",
                "acl": ["user:other"] if k % 10 == 0 else ["*"],
                "occurred_at": f"2025-{1 + k % 12:02d}-{1 + k % 28:02d}T00:00:00Z"})
                for k in range(lo, min(episodes, lo + 1000))]
            result = svc.write_episodes("bench", SCOPE, None, batch)
            ids += [i for i, _ in result.episodes]
        for lo in range(0, facts, 1000):
            svc.post_facts("other", SCOPE, None, [FactIn.model_validate({
                "entity": f"e{n % entities:06d}", "predicate": f"p{(n // entities) % 10}",
                "value": n, "quote": "Fact sheet",
                "valid_from": f"2024-01-01T00:{(n // entities) % 60:02d}:00Z",
                "cites": [{"episode": ids[n % episodes], "unit": 1}]})
                for n in range(lo, min(facts, lo + 1000))])
    finally:
        svc.close()


def timed(c: httpx.Client, pid: int, path: str, params: dict[str, Any],
          repeat: int) -> dict[str, Any]:
    c.get(path, params=params).raise_for_status()  # warm
    walls = []
    cpu0 = cpu_seconds(pid)
    for _ in range(repeat):
        t = time.perf_counter()
        r = c.get(path, params=params)
        walls.append(time.perf_counter() - t)
        assert r.status_code == 200, r.text
    cpu = (cpu_seconds(pid) - cpu0) / repeat
    shown = {k: ("<25th>" if k == "after" and path == "/episodes" else v)
             for k, v in params.items()}
    return {"request": f"GET {path}" + ("?" + "&".join(f"{k}={v}" for k, v in shown.items())
                                        if params else ""),
            "min_ms": round(min(walls) * 1000, 1),
            "median_ms": round(statistics.median(walls) * 1000, 1),
            "server_cpu_ms": round(cpu * 1000, 1)}


def markdown(r: dict[str, Any]) -> str:
    rows = "\n".join(f"| `{x['request']}` | {x['min_ms']} | {x['median_ms']} | "
                     f"{x['server_cpu_ms']} |" for x in r["requests"])
    return (f"{MARK_START}\n"
            f"Browsing listings on one scope of {r['facts']:,} fact versions, "
            f"{r['episodes']:,} episodes and {r['entities']:,} entities "
            f"(`python benchmarks/browse_bench.py`; {r['machine']}; load average "
            f"{r['load_before']} before, {r['load_after']} after, on a shared machine: the "
            f"server CPU column is the steadier figure). Each request is repeated "
            f"{r['repeat']} times as user `bench`, who may read 9 of 10 episodes:\n\n"
            "| request | min ms | median ms | server CPU ms |\n|---|---|---|---|\n"
            f"{rows}\n{MARK_END}\n")


def write_docs(section: str) -> None:
    path = ROOT / "docs" / "performance.md"
    text = path.read_text()
    if MARK_START in text:
        head, rest = text.split(MARK_START, 1)
        text = head + section + rest.split(MARK_END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n## Browsing listings (the inspector)\n\n" + section
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--facts", type=int, default=100000)
    ap.add_argument("--episodes", type=int, default=10000)
    ap.add_argument("--entities", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--home", help="reuse (or fill once) this home")
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    result: dict[str, Any] = {
        "facts": args.facts, "episodes": args.episodes, "entities": args.entities,
        "repeat": args.repeat,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}"}
    with tempfile.TemporaryDirectory(prefix="browse-bench-") as tmp:
        home = Path(args.home) if args.home else Path(tmp) / "home"
        if not (home / ".filled").exists():
            t = time.perf_counter()
            fill(home, args.facts, args.episodes, args.entities)
            (home / ".filled").write_text("")
            print(f"filled in {time.perf_counter() - t:.0f} s", flush=True)
        result["load_before"] = round(os.getloadavg()[0], 2)
        with ServerProcess(home, env=ENV) as server, httpx.Client(
                base_url=server.url, headers={"X-AmpUp-User": "bench"}, timeout=300) as c:
            assert server.proc is not None
            pid = server.proc.pid
            mid = c.get("/entities", params={"scope": SCOPE, "limit": 50})
            after = mid.json()["entities"][-1]["entity"]
            first = c.get("/episodes", params={"scope": SCOPE, "limit": 25})
            ep_after = first.json()["episodes"][-1]["id"]
            result["requests"] = [
                timed(c, pid, "/scopes", {}, args.repeat),
                timed(c, pid, "/episodes", {"scope": SCOPE, "limit": 25}, args.repeat),
                timed(c, pid, "/episodes", {"scope": SCOPE, "limit": 25, "after": ep_after},
                      args.repeat),
                timed(c, pid, "/entities", {"scope": SCOPE, "limit": 50}, args.repeat),
                timed(c, pid, "/entities", {"scope": SCOPE, "limit": 50, "after": after},
                      args.repeat),
            ]
            for x in result["requests"]:
                print(x, flush=True)
        result["load_after"] = round(os.getloadavg()[0], 2)
    out = ROOT / "benchmarks" / "results" / "browse_sqlite.json"
    out.write_text(json.dumps(result, indent=2))
    if not args.no_docs:
        write_docs(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
