from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ampup_memory.search.index.base import Unit
from ampup_memory.search.passages import MAX_BYTES, TARGET_BYTES, cut, passage_text, split_long


def size(text: str) -> int:
    return len(text.encode("utf-8"))


def test_small_units_pack_to_target_on_unit_boundaries() -> None:
    units = [Unit(i, "turn", f"Speaker {i}: " + "word " * (TARGET_BYTES // 25))
             for i in range(1, 21)]
    passages = cut(units)
    assert len(passages) > 1
    seen = []
    for p in passages:
        assert size(passage_text(p)) <= TARGET_BYTES
        seen += [n for n, _, _ in p]
        # whole units only: each piece is exactly its unit's (stripped) text
        for n, kind, text in p:
            assert kind == "turn" and text == units[n - 1].text.strip()
    assert seen == list(range(1, 21))


def test_a_unit_over_the_target_but_under_the_limit_is_one_whole_passage() -> None:
    turn = "I moved the Acme renewal to May. " * ((TARGET_BYTES + MAX_BYTES) // 2 // 33)
    assert TARGET_BYTES < size(turn.strip()) <= MAX_BYTES
    units = [Unit(1, "turn", "Hi."), Unit(2, "turn", turn), Unit(3, "turn", "Thanks.")]
    assert cut(units) == [((1, "turn", "Hi."),), ((2, "turn", turn.strip()),),
                          ((3, "turn", "Thanks."),)]

def test_long_unit_splits_on_sentences_never_over_the_limit() -> None:
    sentence = "The quarterly budget for Acme was approved by the board after review. "
    units = [Unit(1, "paragraph", sentence * 80), Unit(2, "paragraph", "Short tail.")]
    passages = cut(units)
    assert all(size(passage_text(p)) <= MAX_BYTES for p in passages)
    pieces = [t for p in passages for n, _, t in p if n == 1]
    assert len(pieces) > 1
    assert all(t.endswith(".") for t in pieces)  # cut after a sentence, not mid-sentence
    assert passages[-1][-1] == (2, "paragraph", "Short tail.")


def test_sentence_longer_than_limit_splits_on_words_then_characters() -> None:
    words = " ".join(f"w{i}" for i in range(2000))  # one 'sentence', ~10 kB
    pieces = split_long(words)
    assert all(size(p) <= MAX_BYTES for p in pieces)
    assert " ".join(pieces).split() == words.split()
    blob = "é" * 5000  # one 'word' of 10,000 bytes: split on character boundaries
    pieces = split_long(blob)
    assert all(size(p) <= MAX_BYTES for p in pieces) and "".join(pieces) == blob


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=3000), min_size=1, max_size=8))
def test_any_body_respects_the_hard_limit_and_keeps_every_unit(texts: list[str]) -> None:
    units = [Unit(i + 1, "message", t) for i, t in enumerate(texts)]
    passages = cut(units)
    for p in passages:
        assert size(passage_text(p)) <= MAX_BYTES
    kept = {n for p in passages for n, _, _ in p}
    assert kept == {u.n for u in units if u.text.strip()}
