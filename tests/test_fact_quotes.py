"""A fact's quote must occur verbatim in one of its cited units (facts.quote_found). A batch
asks the same long units many times, and :class:`CitedTexts` then looks quotes up in a
sample of the unit instead of scanning it: its answers must be ``in``'s, on any text."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ampup_memory.errors import ValidationFailed
from ampup_memory.memory.episode_types import Unit
from ampup_memory.memory.episodes import EpisodeIn
from ampup_memory.memory.facts import FactIn, quote_found
from ampup_memory.memory.quotes import (
    SAMPLED_FROM,
    SAMPLES,
    SCANS_BEFORE_SAMPLING,
    CitedTexts,
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


# Code points that a UTF-16 or a byte view would count differently: non-BMP characters,
# lone surrogates (a JSON body may hold "\\ud83d"), a combining mark, odd whitespace.
ODD = ["a", "b", "\U0001F600", "\u0301", "\ud83d", "\ude00", " ", "\u2028", "\t",
       "\uffff", "\U0010ffff"]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**32))
def test_sampled_look_ups_answer_as_in_on_odd_code_points(seed: int) -> None:
    """Texts over a few odd code points (or two letters: every window repeats), a length
    not a multiple of either width; quotes of 14 to 200 characters at the very start, the
    very end and anywhere, changed at either end or extended: sampled answers are ``in``'s."""
    rng = random.Random(seed)
    alpha = rng.choice([ODD, ["a", "b"], [chr(rng.randrange(0x20, 0x110000))
                                          for _ in range(64)]])
    text = "".join(rng.choices(alpha, k=SAMPLED_FROM + rng.randrange(1, 2 * SAMPLES[0])))
    texts = CitedTexts()
    for w in SAMPLES:  # past the scans: every later answer of either width is sampled
        for _ in range(SCANS_BEFORE_SAMPLING + 1):
            texts.holds(text, "\x01" * (2 * w - 1))
    assert all((text, w) in texts._samples for w in SAMPLES)
    for _ in range(60):
        n = rng.choice([14, 15, 16, 29, 30, 31, 32, 33, 47, 200])
        p = rng.choice([0, len(text) - n, len(text) - n - 1, rng.randrange(len(text) - n)])
        q = text[p:p + n]
        for quote in (q, q[:-1] + rng.choice(ODD), rng.choice(ODD) + q[1:],
                      q + rng.choice(ODD), "".join(rng.choices(ODD[:4], k=n))):
            assert texts.holds(text, quote) == (quote in text), (seed, n, p)


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
