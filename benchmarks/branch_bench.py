"""Branch benchmark, in process on the embedded default (SQLite catalog and read index).

    python benchmarks/branch_bench.py                     # 10k and 100k facts, writes docs
    python benchmarks/branch_bench.py --sizes 10000 --no-docs   # quick
    python benchmarks/branch_bench.py --home /tmp/bb --no-docs  # fill once, reuse the home

With ``--home`` each size's filled home is kept (``<home>/<size>``) and reused by the next
run (filling 100k facts takes minutes); every run adds its branches (new names) and its
merged facts (3,000) to it, so main grows by that much per run.

Measures, on a scope of N facts on main (commits of 1,000 facts, as a load makes them):
- branch create (POST /branches's service call): 20 creations, min and median, at each
  size; creation copies no rows, so the ratio between sizes should stay near 1;
- merge of a branch with 100 commits of 10 facts each (1,000 facts) into main, three
  times with fresh branches, min and median;
- GET /facts of one entity on a branch with 100 own commits vs on main, 200 reads each.

Results go to benchmarks/results/branches.json and, between markers, into
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from ampup_memory.memory import branches  # noqa: E402
from ampup_memory.memory.episode_types import DOC  # noqa: E402
from ampup_memory.memory.episodes import EpisodeIn, episode_id  # noqa: E402
from ampup_memory.memory.facts import FactIn  # noqa: E402
from ampup_memory.memory.service import MemoryService, build  # noqa: E402
from ampup_memory.settings import load_settings  # noqa: E402
from benchmarks.memory_bench import SCOPE, add_facts  # noqa: E402

MARK_START, MARK_END = "<!-- branch-bench:start -->", "<!-- branch-bench:end -->"
ENTITIES = 5000


def ms(v: float) -> float:
    return round(v * 1000, 2)


def summary(times: list[float]) -> dict[str, float]:
    return {"min_ms": ms(min(times)), "median_ms": ms(statistics.median(times)), "n": len(times)}


def branch_commits(svc: MemoryService, name: str, commits: int, per: int, tag: str) -> None:
    body = f"Branch note {tag}: revised figures."
    svc.write_episodes("bench", SCOPE, name, [EpisodeIn.model_validate(
        {"source": f"doc:branch/{tag}", "acl": ["*"], "body": body})])
    ep = episode_id(DOC, f"doc:branch/{tag}", body)
    for c in range(commits):
        batch = [FactIn.model_validate({
            "entity": f"e{(c * per + i) % ENTITIES}", "predicate": "p9",
            "value": f"{tag}-{c}-{i}", "quote": "revised figures",
            "cites": [{"episode": ep, "unit": 1}]}) for i in range(per)]
        svc.post_facts("bench", SCOPE, name, batch)


def run_size(home: Path, size: int, tag: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"facts": size}
    svc = MemoryService.open(load_settings(home=home, embedding_provider="hash"))
    try:
        times, cpu = [], []
        for i in range(20):
            req = build(branches.CreateBranch, scope=SCOPE, name=f"c{size}{tag}-{i}")
            t, c = time.perf_counter(), time.process_time()
            branches.create(svc, "bench", req)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        # CPU time of the process (all its threads): what the load of a shared machine
        # inflates least.
        out["create"] = summary(times)
        out["create_cpu"] = summary(cpu)
        merges, merge_cpu = [], []
        for i in range(3):
            name = f"m{size}{tag}-{i}"
            branches.create(svc, "bench", build(branches.CreateBranch, scope=SCOPE, name=name))
            branch_commits(svc, name, 100, 10, f"{size}{tag}-{i}")
            req = build(branches.MergeRequest, scope=SCOPE, **{"from": name})
            t, c = time.perf_counter(), time.process_time()
            done = branches.merge(svc, "bench", req)
            merges.append(time.perf_counter() - t)
            merge_cpu.append(time.process_time() - c)
            assert done["merged"], done
        out["merge_1000_facts"] = summary(merges)
        out["merge_cpu"] = summary(merge_cpu)
        name = f"r{size}{tag}"
        branches.create(svc, "bench", build(branches.CreateBranch, scope=SCOPE, name=name))
        branch_commits(svc, name, 100, 1, f"r{size}{tag}")
        reads: dict[str, list[float]] = {"main": [], name: []}
        for n in range(200):
            for where in reads:
                view = svc.view(SCOPE, where)
                t = time.perf_counter()
                svc.get_facts("bench", view, f"e{(n * 37) % ENTITIES}", None, None, False)
                reads[where].append(time.perf_counter() - t)
        out["facts_read_main"] = summary(reads["main"])
        out["facts_read_branch"] = summary(reads[name])
    finally:
        svc.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--home", help="keep the filled home here; reuse it when present")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, Any] = {"machine": f"{platform.machine()} {platform.system()}, "
                               f"Python {platform.python_version()}", "sizes": []}
    with tempfile.TemporaryDirectory() as tmp:
        have = 0
        for size in sizes:
            # --home: one kept home per size; otherwise one temporary home, filled up.
            home = Path(args.home) / str(size) if args.home else Path(tmp) / "home"
            filled = home / "bench-filled.txt"  # facts bulk-loaded into this home
            if args.home:
                have = int(filled.read_text()) if filled.exists() else 0
            tag = f"-{time.time_ns() % 10**9}" if args.home else ""  # this run's names
            t = time.perf_counter()
            if size > have:
                add_facts(home, have, size, ENTITIES)
                have = size
                filled.write_text(str(have))
            print(f"filled to {size} facts in {time.perf_counter() - t:.0f} s", flush=True)
            got = run_size(home, size, tag)
            print(json.dumps(got), flush=True)
            results["sizes"].append(got)
    if len(results["sizes"]) > 1:
        a, b = results["sizes"][0]["create"], results["sizes"][-1]["create"]
        results["create_ratio_median"] = round(b["median_ms"] / a["median_ms"], 2)
    (ROOT / "benchmarks" / "results").mkdir(exist_ok=True)
    (ROOT / "benchmarks" / "results" / "branches.json").write_text(
        json.dumps(results, indent=2) + "\n")
    if not args.no_docs:
        write_docs(results)


def write_docs(results: dict[str, Any]) -> None:
    lines = [MARK_START, "", f"Machine: {results['machine']}.", "",
             "| main facts | branch create min / median | merge 1,000 facts min / median "
             "| GET /facts main median | on a branch (100 own commits) median |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for r in results["sizes"]:
        lines.append(
            f"| {r['facts']:,} | {r['create']['min_ms']} / {r['create']['median_ms']} ms "
            f"| {r['merge_1000_facts']['min_ms']} / {r['merge_1000_facts']['median_ms']} ms "
            f"| {r['facts_read_main']['median_ms']} ms "
            f"| {r['facts_read_branch']['median_ms']} ms |")
    if "create_ratio_median" in results:
        lines += ["", f"Create median ratio, largest / smallest: "
                  f"{results['create_ratio_median']}."]
    lines += ["", MARK_END]
    doc = ROOT / "docs" / "performance.md"
    text = doc.read_text()
    block = "\n".join(lines)
    if MARK_START in text:
        head, rest = text.split(MARK_START, 1)
        text = head + block + rest.split(MARK_END, 1)[1]
    else:
        text += "\n## Branches\n\nMeasured by `benchmarks/branch_bench.py` (in process, " \
                "SQLite catalog and read index).\n\n" + block + "\n"
    doc.write_text(text)


if __name__ == "__main__":
    main()
