"""Concurrent writers benchmark: commit throughput of 1 and of 4 server processes writing
one-episode commits to one branch of one scope (the shape of
tests/test_branch_safety.py::test_writers_and_merges_keep_one_chain), on the embedded
default (SQLite catalog, one read index per server).

    python benchmarks/writers_bench.py                  # 1 and 4 writers, 50 commits each
    python benchmarks/writers_bench.py --writers 4 --commits 20

Prints commits per second, the servers' CPU per commit (robust on a busy machine, where
wall times are not), the median and p90 commit latency, how many compare-and-set retries
the ledger appends met, how many data appends pyiceberg rebased, and how many upkeep
passes were wasted (from the servers' debug log).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.server_process import ServerProcess  # noqa: E402

ENV = {"AMP_EMBEDDING_PROVIDER": "hash", "AMP_LIFECYCLE_ENABLED": "false",
       "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0", "AMPUP_MEMORY_LOG_LEVEL": "debug"}
CONFLICTS = re.compile(r"ledger append for \S+ met (\d+) conflict")
REBASES = "Commit failed due to a concurrent update"  # pyiceberg rebasing a data append
DEFERRED = re.compile(r"upkeep of \S+ (?:deferred|failed)")


def run(writers: int, commits: int, extra_env: dict[str, str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        servers = [ServerProcess(home, env={**ENV, **extra_env,
                                            "AMPUP_MEMORY_INDEX_URI":
                                            f"sqlite:///{home}/idx{i}.db"}).start(90)
                   for i in range(writers)]
        scope = f"b{uuid.uuid4().hex[:8]}/team"
        try:
            lead = httpx.Client(base_url=servers[0].url, timeout=300,
                                headers={"X-AmpUp-User": "lead"})
            assert lead.post("/episodes", json={"scope": scope, "source": "doc:s",
                                                "body": "start", "acl": ["*"]}
                             ).status_code == 201
            assert lead.post("/branches", json={"scope": scope, "name": "work"}
                             ).status_code == 201

            def writer(i: int) -> list[float]:
                c = httpx.Client(base_url=servers[i].url, timeout=300,
                                 headers={"X-AmpUp-User": f"w{i}"})
                took = []
                for n in range(commits):
                    t = time.perf_counter()
                    r = c.post("/episodes", json={"scope": scope, "branch": "work",
                                                  "source": f"slack:C{i}:{n}",
                                                  "body": f"writer{i}: message {n}",
                                                  "acl": ["*"]})
                    assert r.status_code == 201, r.text
                    took.append(time.perf_counter() - t)
                return took

            cpu_before = sum(_cpu_seconds(s) for s in servers)
            began = time.perf_counter()
            with ThreadPoolExecutor(writers) as pool:
                lat = [x for xs in pool.map(writer, range(writers)) for x in xs]
            wall = time.perf_counter() - began
            cpu = sum(_cpu_seconds(s) for s in servers) - cpu_before
        finally:
            for s in servers:
                s.stop()
        logs = [s.log_path.read_text(errors="replace") for s in servers]
        retries = sum(int(m) for text in logs for m in CONFLICTS.findall(text))
        rebases = sum(text.count(REBASES) for text in logs)
        deferred = sum(len(DEFERRED.findall(text)) for text in logs)
        lat.sort()
        return {"writers": writers, "commits": writers * commits, "wall_s": round(wall, 1),
                "commits_per_s": round(writers * commits / wall, 1),
                "server_cpu_ms_per_commit": round(cpu / (writers * commits) * 1000),
                "p50_ms": round(statistics.median(lat) * 1000),
                "p90_ms": round(lat[int(len(lat) * 0.9)] * 1000),
                "max_ms": round(lat[-1] * 1000), "ledger_retries": retries,
                "data_rebases": rebases, "upkeep_deferred": deferred}


def _cpu_seconds(server: ServerProcess) -> float:
    """User + system CPU the server process has used so far (Linux /proc)."""
    assert server.proc is not None
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--commits", type=int, default=50)
    ap.add_argument("--catalog", default="", help="AMPUP_MEMORY_CATALOG_URI (default SQLite)")
    args = ap.parse_args()
    env = {"AMPUP_MEMORY_CATALOG_URI": args.catalog} if args.catalog else {}
    for w in args.writers:
        print(run(w, args.commits, env), flush=True)


if __name__ == "__main__":
    main()
