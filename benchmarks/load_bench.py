"""`ampup-memory load` throughput with the default embedder (bundled WordLlama).

    python benchmarks/load_bench.py              # 20,000 e-mails, 3 runs
    python benchmarks/load_bench.py --size 5000 --runs 1

Writes a JSONL corpus of e-mails of about 370 bytes (`gmail:` sources, 1,000 per commit as
`load` batches them), then times `ampup-memory load` into a fresh home per run, process
start included: wall seconds, CPU seconds of the process (user + sys), and episodes per
second of each. Prints min and median. Nothing is written to the docs: the machine's load
changes wall time a lot, so numbers go to docs/performance.md by hand with the load seen.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = ("pricing renewal contract seats discount pilot budget quarter invoice onboarding "
         "security review legal procurement timeline").split()


def corpus(folder: Path, size: int) -> int:
    folder.mkdir(parents=True)
    rng = random.Random(7)
    total = 0
    with open(folder / "feed.jsonl", "w") as f:
        for i in range(size):
            text = " ".join(rng.choice(WORDS) for _ in range(38))
            body = (f"From: rep{rng.randrange(50)}@acme.test\nTo: buyer{rng.randrange(80)}"
                    f"@client.test\nSubject: {rng.choice(WORDS)} {i}\n\n{text}.")
            total += len(body.encode())
            f.write(json.dumps({"source": f"gmail:t{i // 5}:{i}", "acl": ["*"],
                                "body": body}) + "\n")
    return total // size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        avg = corpus(Path(tmp) / "corpus", args.size)
        print(f"{args.size} e-mails, {avg} bytes per body on average", flush=True)
        walls, cpus = [], []
        for run in range(args.runs):
            env = {**os.environ, "AMPUP_MEMORY_HOME": f"{tmp}/home{run}",
                   "PYTHONPATH": str(ROOT / "src")}
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "ampup_memory.cli", "load",
                            f"{tmp}/corpus", "--scope", "bench/load", "--acl", "*"],
                           env=env, check=True, capture_output=True)
            walls.append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            print(f"run {run + 1}: wall {walls[-1]:.1f} s ({args.size / walls[-1]:.0f}/s), "
                  f"cpu {cpus[-1]:.1f} s ({args.size / cpus[-1]:.0f}/s)", flush=True)
        for name, values in (("wall", walls), ("cpu", cpus)):
            print(f"{name}: min {min(values):.1f} s ({args.size / min(values):.0f}/s), "
                  f"median {statistics.median(values):.1f} s "
                  f"({args.size / statistics.median(values):.0f}/s)")
        print(f"load average now: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
