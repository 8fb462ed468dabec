"""The quote check of a large fact batch, repeated: 1,000 facts each citing the same 32
one-paragraph episodes of ~1 MB, every quote in the last of them.

    python -m benchmarks.quote_check_bench --home /tmp/x/quotes                 # 1,000-char quotes
    python -m benchmarks.quote_check_bench --home /tmp/x/quotes --quote-chars 20

The episodes are written once into ``--home``. The operation repeated is
``MemoryService.post_facts`` of a batch whose last fact's quote is changed by one character,
so the batch is refused after every fact was checked and nothing is written: the time is
the check (the cited bodies read, split into units, every quote looked for), not a commit.
One accepted batch is timed after them (check and commit). Wall and process CPU time, min
and median; the 1-minute load average before and after. Each body is random words, 5,000 of
them, the quotes random stretches of the last body.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import string
import time
from pathlib import Path
from typing import Any

from ampup_memory.errors import ValidationFailed
from ampup_memory.memory.episodes import EpisodeIn
from ampup_memory.memory.facts import FactIn
from ampup_memory.memory.service import MemoryService
from ampup_memory.settings import load_settings

SCOPE = "bench/quotes"
UNITS = 32
BODY_CHARS = 999_000


def bodies() -> list[str]:
    rng = random.Random(3)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9)))
             for _ in range(5000)]
    return [" ".join(rng.choices(words, k=170_000))[:BODY_CHARS] for _ in range(UNITS)]


def batch(texts: list[str], eps: list[str], facts: int, chars: int) -> list[FactIn]:
    rng = random.Random(5)
    last = texts[-1]
    out = []
    for k in range(facts):
        start = rng.randrange(0, len(last) - chars)
        out.append(FactIn.model_validate({
            "entity": f"e:{k}", "predicate": "p", "value": k,
            "quote": last[start:start + chars],
            "cites": [{"episode": e, "unit": 1} for e in eps]}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--facts", type=int, default=1000)
    ap.add_argument("--quote-chars", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    svc = MemoryService.open(load_settings(home=args.home, embedding_provider="hash"))
    texts = bodies()
    svc.set_principal("w", [], [], "bench")
    result = svc.write_episodes("w", SCOPE, None, [EpisodeIn.model_validate(
        {"source": f"doc:big{i}", "acl": ["*"], "body": b}) for i, b in enumerate(texts)])
    eps = [e[0] for e in result.episodes]
    good = batch(texts, eps, args.facts, args.quote_chars)
    refused = [*good[:-1], good[-1].model_copy(update={"quote": good[-1].quote + "!"})]
    wire = {"scope": SCOPE, "facts": [f.model_dump(mode="json") for f in good]}
    load_before = [round(x, 2) for x in os.getloadavg()]
    walls, cpus = [], []
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            svc.post_facts("w", SCOPE, None, refused)
            raise AssertionError("the changed quote was accepted")
        except ValidationFailed as exc:
            assert exc.details["errors"][0]["loc"] == ["facts", len(good) - 1, "quote"]
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    t0, c0 = time.perf_counter(), time.process_time()
    svc.post_facts("w", SCOPE, None, good)
    accepted = (time.perf_counter() - t0, time.process_time() - c0)
    svc.close()
    ms = lambda x: round(x * 1000, 1)  # noqa: E731
    out: dict[str, Any] = {
        "facts": args.facts, "quote_chars": args.quote_chars, "units": UNITS,
        "unit_chars": BODY_CHARS, "request_bytes": len(json.dumps(wire)),
        "repeats": args.repeats,
        "check_wall_min_ms": ms(min(walls)), "check_wall_median_ms": ms(statistics.median(walls)),
        "check_cpu_min_ms": ms(min(cpus)), "check_cpu_median_ms": ms(statistics.median(cpus)),
        "accepted_wall_ms": ms(accepted[0]), "accepted_cpu_ms": ms(accepted[1]),
        "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}, {platform.system()}",
    }
    print(json.dumps(out, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
