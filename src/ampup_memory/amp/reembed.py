"""One vector space per cell store: re-embed every cell when the embedder changes.

A store records the embedder (`ModelInfo`: name and width) its vectors come from. A
process opening it with another embedder rewrites every cell's vector in batches and only
then records the new model, so a crash midway leaves the old record and the next start
does the work again (writing a vector twice is harmless). A store with cells and no record
(made before stores kept one) is re-embedded once; an empty one is just recorded.

One process at a time does it, under the store's lease (on PostgreSQL a session advisory
lock, on SQLite a file lock: both end with their process); a process that waited re-reads
the record and finds the work done. Re-embedding touches no clock: it is not an update.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ampup_memory.amp.store.base import CellStore
from ampup_memory.errors import ConfigurationError
from ampup_memory.progress import Progress
from ampup_memory.search.embed import Embedder, ModelInfo, model_info

log = logging.getLogger("ampup_memory.amp")

REEMBED_LEASE = "reembed"
# Both stores' leases end with their holder's process (a session advisory lock, a file
# lock); the TTL is the lease API's, unused by them.
LEASE_TTL_SECONDS = 120.0
WAIT_POLL_SECONDS = 0.5
BATCH = 256
LOG_EVERY = 5000


@dataclass(frozen=True)
class ReembedReport:
    model: ModelInfo
    previous: ModelInfo | None  # what the store had recorded (None: nothing)
    reembedded: int  # vectors rewritten

    def wire(self) -> dict[str, object]:
        return {
            "reembedded": self.reembedded,
            "model": self.model.name,
            "dimensions": self.model.dimensions,
            "previous_model": self.previous.name if self.previous else None,
            "previous_dimensions": self.previous.dimensions if self.previous else None,
        }


def ensure_embedding_model(
    store: CellStore,
    embedder: Embedder,
    *,
    force: bool = False,
    progress: Progress | None = None,
    batch: int = BATCH,
) -> ReembedReport:
    """Make every stored vector come from ``embedder``; ``force`` re-embeds even when the
    recorded model already matches (say, an endpoint's model changed under one name)."""
    model = model_info(embedder)
    recorded = store.embedding_model()
    if recorded == model and not force:
        return ReembedReport(model, recorded, 0)
    with _exclusive(store):
        recorded = store.embedding_model()  # another process may have finished meanwhile
        if recorded == model and not force:
            return ReembedReport(model, recorded, 0)
        done = _rewrite(store, embedder, recorded, model, progress, batch)
        store.set_embedding_model(model)  # last: an interrupted run is redone in full
    return ReembedReport(model, recorded, done)


@contextmanager
def _exclusive(store: CellStore) -> Iterator[None]:
    # Said only when the lease is still taken after one poll: servers started together on
    # a fresh store wait milliseconds for the first to record its embedder, which is no
    # re-embedding and worth no warning.
    polls = 0
    while True:
        with store.lease(REEMBED_LEASE, LEASE_TTL_SECONDS) as held:
            if held:
                yield
                return
        if polls == 1:
            log.warning("another process is re-embedding the cell store; waiting for it")
        polls += 1
        time.sleep(WAIT_POLL_SECONDS)


def _rewrite(
    store: CellStore,
    embedder: Embedder,
    recorded: ModelInfo | None,
    model: ModelInfo,
    progress: Progress | None,
    batch: int,
) -> int:
    total = store.count()
    if total:
        was = f"{recorded.name} ({recorded.dimensions}d)" if recorded else "an unrecorded model"
        log.warning("embedding model changed from %s to %s (%dd): re-embedding %d cells",
                    was, model.name, model.dimensions, total)
    started = time.monotonic()
    seen = written = 0
    next_log = LOG_EVERY
    after: str | None = None
    while sources := store.embedding_sources(after, batch):
        vectors = embedder.embed([s.text for s in sources])
        if len(vectors) != len(sources) or any(len(v) != model.dimensions for v in vectors):
            raise ConfigurationError(
                f"embedder {model.name} returned vectors of the wrong number or width"
            )
        written += store.replace_vectors(list(zip(sources, vectors, strict=True)))
        seen += len(sources)
        after = sources[-1].cell_id
        if progress is not None:
            progress(seen, max(total, seen))
        if seen >= next_log:
            log.info("re-embedded %d of about %d cells", seen, total)
            next_log = seen + LOG_EVERY
    if seen:
        log.warning("re-embedded %d cells with %s in %.1f s", written, model.name,
                    time.monotonic() - started)
    return written
