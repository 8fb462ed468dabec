"""A fact's quote must occur verbatim in one of its cited units (facts.quote_found). A batch
asks the same long units many times, and :class:`CitedTexts` then looks quotes up in a
sample of the unit instead of scanning it: its answers must be ``in``'s, on any text."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ampup_memory.errors import ValidationFailed
from ampup_memory.memory.episode_types import Unit
from ampup_memory.memory.episodes import EpisodeIn
from ampup_memory.memory.facts import (
    SAMPLED_FROM,
    SAMPLES,
    SCANS_BEFORE_SAMPLING,
    CitedTexts,
    FactIn,
    quote_found,
)
from ampup_memory.memory.service import MemoryService
from ampup_memory.settings import load_settings


def _texts(rng: random.Random) -> list[str]:
    words = ["".join(rng.choices("abcdefgh", k=rng.randint(1, 6))) for _ in range(300)]
    prose = " ".join(rng.choices(words, k=SAMPLED_FROM // 3))
    few = "".join(rng.choices("ab", k=SAMPLED_FROM + 7))  # every window repeats
    periodic = "abcab" * (SAMPLED_FROM // 5 + 3) + "z"  # more starts than MAX_CANDIDATES
    return [prose, few, periodic]


def _quotes(rng: random.Random, text: str) -> list[str]:
    out = []
    for _ in range(400):
        n = rng.choice([1, 5, *(2 * w + d for w in SAMPLES for d in (-2, -1, 0)), 50, 333])
        p = rng.randrange(0, len(text) - n + 1)
        q = text[p:p + n]
        out.append(q)  # present, at any offset from the samples
        i = rng.randrange(n)
        out.append(q[:i] + rng.choice("abz") + q[i + 1:])  # often absent
        out.append(q + "q")  # absent unless "q" follows, which it never does
    for n in (20, 3 * SAMPLES[0]):
        out += [text[:n], text[-n:], text[1:n + 1], text[-n - 1:-1], text[-n:] + "a"]
    return out


def test_quotes_are_found_as_in_finds_them() -> None:
    rng = random.Random(18)
    for text in _texts(rng):
        texts = CitedTexts()
        unit = [Unit(1, "paragraph", text)]
        quotes = _quotes(rng, text)
        assert len(quotes) > SCANS_BEFORE_SAMPLING
        got = [quote_found(q, unit, texts) for q in quotes]
        assert got == [q in text for q in quotes]
        assert any(got) and not all(got)
        # the answers past the first scans came from samples of either width
        assert all((text, w) in texts._samples for w in SAMPLES)


def test_a_batch_is_accepted_and_refused_as_before(tmp_path: Path) -> None:
    """A thousand quotes in the last of four 200 kB units: accepted; one changed quote
    refuses the batch at that fact's quote."""
    rng = random.Random(7)
    svc = MemoryService.open(load_settings(home=tmp_path, embedding_provider="hash"))
    try:
        svc.set_principal("w", [], [], "t")
        words = ["".join(rng.choices("abcdefghijklmnop", k=rng.randint(2, 8)))
                 for _ in range(2000)]
        bodies = [" ".join(rng.choices(words, k=40_000))[:200_000] for _ in range(4)]
        eps = [svc.write_episodes("w", "acme/q", None, [EpisodeIn.model_validate(
            {"source": f"doc:big{i}", "acl": ["*"], "body": b})]).episodes[0][0]
            for i, b in enumerate(bodies)]
        facts = []
        for k in range(1000):
            start = rng.randrange(0, len(bodies[-1]) - 200)
            facts.append({"entity": f"e:{k}", "predicate": "p", "value": k,
                          "quote": bodies[-1][start:start + rng.choice([8, 40, 200])],
                          "cites": [{"episode": e, "unit": 1} for e in eps]})
        bad = dict(facts[700], quote=facts[700]["quote"] + "!")
        with pytest.raises(ValidationFailed) as refused:
            svc.post_facts("w", "acme/q", None, [FactIn.model_validate(f)
                                                   for f in [*facts[:700], bad]])
        assert refused.value.details["errors"][0]["loc"] == ["facts", 700, "quote"]
        ids, _ = svc.post_facts("w", "acme/q", None, [FactIn.model_validate(f) for f in facts])
        assert len(ids) == 1000
    finally:
        svc.close()
