"""Audit servers killed while they start: ``kill -9`` during a server's first start on an
empty store (its tables and indexes being made) and during a start that re-embeds every
cell of an existing store (the embedder changed), then every server started again on the
same store, which must come up and work.

    PYTHONPATH=src:. python tools/start_audit.py [--configs sqlite,postgres-2]
                                                [--trials 6] [--cells 10000] [--out DIR]

Per configuration (``sqlite``: one server on the embedded default; ``postgres-N``: N
servers started at once on one new PostgreSQL database, one of them killed; ``-s3``: the
tables on moto) and per phase (docs/testing.md, "The start audit"):

- ``fresh``: each trial an empty store. One clean start is timed first; each trial then
  starts the servers and kills the first after a random delay between 0 and that time
  (the default embedder, WordLlama, as a user runs it).
- ``reembed``: each trial a cell store of ``--cells`` AMP cells written under the
  ``hash`` embedder (and no tables or index yet); the servers start with the default one,
  so the first start makes the tables and re-embeds every cell. One clean start is timed
  first; each trial kills the first server after a random delay within it.

After each kill every server is started again (all at once) and must answer within
180 s; then a cell is created and read back, an episode is written and found by
``POST /search``, and after ``reembed`` the store must record the default embedder and
20 seeded cells picked at random must each be found by a search of their own text. No
server log (the killed one's included) may hold a traceback. Findings go to
``DIR/findings.json``; the exit code is 1 when there are any.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.pg import PostgresFactory, postgres_factory  # noqa: E402
from tests.s3 import S3Server  # noqa: E402
from tests.server_process import ServerProcess, plain_client, start_together  # noqa: E402
from tools.race_audit import (  # noqa: E402
    Finding,
    configs_of,
    load_text,
    parse_config,
    postgres_env,
    report_findings,
)

AGENT, USER = "start_agent", "start.user"
HEADERS = {"X-AMP-Agent-ID": AGENT, "X-AmpUp-User": USER}
QUIET = {"AMP_ADMIN_TOKEN": "start-admin-token", "AMP_LIFECYCLE_ENABLED": "false",
         "AMPUP_MEMORY_MAINTENANCE_INTERVAL_SECONDS": "0"}
START_LIMIT = 180.0
PICKED = 20
TRACEBACK = "Traceback (most recent call last)"


@dataclass
class Store:
    """One store the servers of a trial share: a home (SQLite) or a database (PostgreSQL),
    with the environment that points a server at it."""

    root: Path
    env: dict[str, str]
    count: int
    logs: list[Path] = field(default_factory=list)

    def servers(self, env: dict[str, str] | None = None) -> list[ServerProcess]:
        procs = [ServerProcess(self.root / f"srv{i}",
                               env={**self.env, **(env or {})}) for i in range(self.count)]
        if "AMPUP_MEMORY_HOME" in self.env:  # SQLite: every server on the one home
            for p in procs:
                p.env["AMPUP_MEMORY_HOME"] = self.env["AMPUP_MEMORY_HOME"]
        return procs


@contextmanager
def stores(config: str, pg: PostgresFactory | None,
           base: Path) -> Iterator[Callable[[], Store]]:
    """A maker of new empty stores for ``config``."""
    backend, count, on_s3 = parse_config(config)
    with ExitStack() as stack:
        s3 = None
        if on_s3:
            s3 = S3Server(base).start()
            stack.callback(s3.stop)

        def new_store() -> Store:
            root = Path(tempfile.mkdtemp(prefix="store-", dir=base))
            env = {**os.environ, **QUIET, "PYTHONPATH": os.pathsep.join(
                [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
            env.pop("AMP_EMBEDDING_PROVIDER", None)
            if backend == "postgres":
                assert pg is not None
                url = pg.new_database("start")
                env.update(postgres_env(url, root / "warehouse"))
                env.pop("AMPUP_MEMORY_HOME", None)
            else:
                env["AMPUP_MEMORY_HOME"] = str(root / "home")
            if s3 is not None:
                env.update(s3.env(s3.new_bucket("start")))
            return Store(root, env, count)

        yield new_store


class StartAudit:
    def __init__(self, config: str, rng: random.Random, cells: int) -> None:
        self.config = config
        self.rng = rng
        self.cells = cells
        self.phase = ""
        self.findings: list[Finding] = []
        self.checked: dict[str, int] = {}

    def find(self, kind: str, detail: str) -> None:
        self.findings.append(Finding(self.config, self.phase, kind, detail))

    def count(self, what: str, n: int = 1) -> None:
        self.checked[what] = self.checked.get(what, 0) + n

    # -- starting and killing ------------------------------------------------------------
    def timed_start(self, procs: list[ServerProcess]) -> float:
        began = time.monotonic()
        errors = start_together(procs, timeout=START_LIMIT)
        if errors:
            raise RuntimeError(f"a clean start failed: {errors}")
        return time.monotonic() - began

    def start_and_kill(self, procs: list[ServerProcess], within: float) -> float:
        """Start every server without waiting, kill the first after a random delay up to
        ``within`` seconds, let the others come up. The delay used."""
        delay = self.rng.uniform(0.0, within)
        for p in procs:
            p.launch()
        time.sleep(delay)
        procs[0].kill()
        for p in procs[1:]:  # the others go on with their start: they must finish it
            self.wait_healthy(p, "a server started beside the killed one")
        return delay

    def wait_healthy(self, p: ServerProcess, who: str) -> bool:
        try:
            p.wait_ready(START_LIMIT)
        except RuntimeError as exc:  # it exited
            self.find("start", f"{who}: {str(exc)[-1500:]}")
            return False
        except TimeoutError:
            self.find("start", f"{who} did not answer within {START_LIMIT:.0f} s")
            return False
        return True

    def restart(self, procs: list[ServerProcess]) -> bool:
        for p in procs:
            p.stop()
        errors = start_together(procs, timeout=START_LIMIT)
        for e in errors:
            self.find("restart", f"a server did not start again after the kill: {e}"[:2000])
        return not errors

    # -- checks --------------------------------------------------------------------------
    def works(self, procs: list[ServerProcess]) -> None:
        """A write and a read of each kind through every server."""
        for p in procs:
            with plain_client(base_url=p.url, headers=HEADERS, timeout=60) as c:
                text = f"start audit note {uuid.uuid4().hex}"
                made = c.post("/amp/v1/memories", json={
                    "type": "semantic", "content": {"text": text},
                    "identity": {"owner_id": AGENT, "owner_type": "agent"}})
                if made.status_code != 201:
                    self.find("write", f"POST /amp/v1/memories: {made.status_code} {made.text}")
                    continue
                got = c.get(f"/amp/v1/memories/{made.json()['id']}")
                if got.status_code != 200 or got.json()["content"]["text"] != text:
                    self.find("read", f"GET of a new cell: {got.status_code} {got.text[:300]}")
                scope = f"start/t{uuid.uuid4().hex[:8]}"
                word = f"zq{uuid.uuid4().hex[:10]}"
                ep = c.post("/episodes", json={"scope": scope, "source": "slack:audit",
                                               "body": f"the {word} report is due",
                                               "acl": [f"user:{USER}"]})
                if ep.status_code not in (200, 201):
                    self.find("write", f"POST /episodes: {ep.status_code} {ep.text[:300]}")
                    continue
                found = c.post("/search", json={"scope": scope, "query": word})
                if found.status_code != 200 or word not in found.text:
                    self.find("read", f"POST /search after a write: {found.status_code} "
                                      f"{found.text[:300]}")
                self.count("servers checked after a kill")

    def logs_clean(self, procs: list[ServerProcess]) -> None:
        for p in procs:
            text = p.log_path.read_text(errors="replace") if p.log_path.exists() else ""
            if TRACEBACK in text:
                at = text.index(TRACEBACK)
                self.find("log", f"{p.log_path.name}: {text[max(0, at - 300):at + 1500]}")

    # -- phases --------------------------------------------------------------------------
    def fresh(self, new_store: Callable[[], Store], trials: int) -> None:
        self.phase = "fresh"
        clean = new_store()
        procs = clean.servers()
        took = self.timed_start(procs)
        for p in procs:
            p.stop()
        print(f"{self.config} fresh: a clean first start takes {took:.1f} s", flush=True)
        for n in range(trials):
            store = new_store()
            procs = store.servers()
            delay = self.start_and_kill(procs, took)
            if self.restart(procs):
                self.works(procs)
            self.logs_clean(procs)
            for p in procs:
                p.stop()
            self.count("fresh stores killed mid-start")
            print(f"  trial {n}: killed after {delay:.2f} s", flush=True)

    def seeded(self, new_store: Callable[[], Store]) -> tuple[Store, list[str]]:
        """A new store whose cell store alone holds ``--cells`` cells embedded with the
        ``hash`` embedder, written in this process through `AmpService` (as a bulk loader
        would: HTTP would take minutes a trial); its tables and index are made by the
        first server start, the one the trial kills."""
        from ampup_memory.amp.reembed import ensure_embedding_model
        from ampup_memory.amp.service import AmpService, ScoringLimit
        from ampup_memory.amp.store.registry import open_store
        from ampup_memory.search.embed import build_embedder
        from ampup_memory.settings import Settings

        store = new_store()
        settings = Settings.model_validate({**store.env, "AMP_EMBEDDING_PROVIDER": "hash"})
        if "AMPUP_MEMORY_HOME" in store.env:
            Path(store.env["AMPUP_MEMORY_HOME"]).mkdir(parents=True, exist_ok=True)
        embedder = build_embedder(settings)
        cells = open_store(settings.resolved_store_uri, embedder.dimensions)
        try:
            ensure_embedding_model(cells, embedder)
            amp = AmpService(store=cells, embedder=embedder, scoring_limit=ScoringLimit(0, 0))
            texts = [f"seeded cell {i} about {self.rng.choice(WORDS)} and "
                     f"{self.rng.choice(WORDS)} number {uuid.uuid4().hex[:8]}"
                     for i in range(self.cells)]
            for i in range(0, len(texts), 256):
                chunk = texts[i:i + 256]
                for text, vector in zip(chunk, embedder.embed(chunk), strict=True):
                    amp.create(AGENT, json.dumps({
                        "type": "semantic", "content": {"text": text},
                        "identity": {"owner_id": AGENT, "owner_type": "agent"}}).encode(),
                        vector)
        finally:
            cells.close()
        return store, texts

    def reembed(self, new_store: Callable[[], Store], trials: int) -> None:
        self.phase = "reembed"
        store, _ = self.seeded(new_store)
        procs = store.servers()
        took = self.timed_start(procs)
        for p in procs:
            p.stop()
        print(f"{self.config} reembed: a clean start re-embedding {self.cells} cells takes "
              f"{took:.1f} s", flush=True)
        for n in range(trials):
            store, texts = self.seeded(new_store)
            procs = store.servers()
            delay = self.start_and_kill(procs, took)
            if self.restart(procs):
                self.works(procs)
                self.searchable(procs, texts)
            self.logs_clean(procs)
            for p in procs:
                p.stop()
            self.count("seeded stores killed mid-re-embedding")
            print(f"  trial {n}: killed after {delay:.2f} s", flush=True)

    def searchable(self, procs: list[ServerProcess], texts: list[str]) -> None:
        """Every server finds seeded cells by their own text, and the store records the
        embedder it now serves (the one `/status` names)."""
        for p in procs:
            with plain_client(base_url=p.url, headers=HEADERS, timeout=60) as c:
                for text in self.rng.sample(texts, PICKED):
                    r = c.post("/amp/v1/memories/search", json={
                        "query": text, "owner_id": AGENT, "limit": 3})
                    hits = [h.get("content", {}).get("text") for h in
                            r.json().get("results", [])] if r.status_code == 200 else []
                    if text not in hits:
                        self.find("search", f"a seeded cell not found by its own text "
                                            f"after the re-embedding: {text!r}: "
                                            f"{r.status_code} {r.text[:300]}")
                    self.count("seeded cells searched")
        embedder = recorded_embedder(procs[0])
        if embedder is None or embedder.get("recorded") != embedder.get("configured"):
            self.find("embedder", f"the store does not record the embedder it serves: "
                                  f"{embedder}")


def recorded_embedder(p: ServerProcess) -> dict[str, object] | None:
    """`ampup-memory status`'s ``embedder`` (configured and recorded), read from the
    stores the server uses; None when it cannot be read."""
    out = subprocess.run([sys.executable, "-m", "ampup_memory.cli", "status"],
                         env=p.env, capture_output=True, text=True, timeout=120)
    try:
        found = json.loads(out.stdout)
    except json.JSONDecodeError:
        return None
    embedder = found.get("embedder") if isinstance(found, dict) else None
    return embedder if isinstance(embedder, dict) else None


WORDS = ("invoice", "renewal", "outage", "billing", "migration", "holiday", "contract",
         "refund", "deadline", "onboarding", "security", "latency", "budget", "hiring")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="sqlite,postgres-2")
    parser.add_argument("--trials", type=int, default=6, help="kills per phase and config")
    parser.add_argument("--cells", type=int, default=10000)
    parser.add_argument("--phases", default="fresh,reembed")
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--out", type=Path, default=Path("start-report"))
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    configs = configs_of(args.configs)
    phases = args.phases.split(",")
    if set(phases) - {"fresh", "reembed"}:
        parser.error("--phases: fresh, reembed")
    began = time.monotonic()
    findings: list[Finding] = []
    checked: dict[str, dict[str, int]] = {}
    base = Path(tempfile.mkdtemp(prefix="start-audit-"))
    with ExitStack() as stack:
        pg = (stack.enter_context(postgres_factory())
              if any(c.startswith("postgres") for c in configs) else None)
        for config in configs:
            audit = StartAudit(config, random.Random(args.seed), args.cells)
            with stores(config, pg, base) as new_store:
                for phase in phases:
                    getattr(audit, phase)(new_store, args.trials)
            findings += audit.findings
            checked[config] = audit.checked
            print(f"{config} checked: {json.dumps(audit.checked)}", flush=True)
    found = report_findings(args.out, findings)
    print(f"{found} findings, {time.monotonic() - began:.0f} s, {load_text()} "
          f"({', '.join(configs)}, {args.trials} trials, {args.cells} cells)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
