"""Cut an episode body into passages: about 300 bytes, on unit boundaries, never over 2,000.

Units are packed greedily while the passage stays at or under the target, so a passage
is one unit (a turn, a paragraph) or a few short ones: a unit of up to 2,000 bytes stays
whole. A unit that alone exceeds the hard limit is split on sentence boundaries, then on
word boundaries, and as a last resort (one "word" over the limit) on UTF-8 character
boundaries.

The target was 1,500 bytes until the ablation in docs/performance.md ("Search: retrieval
levers"): passages of about one turn rank the right session first more often, for the
keyword and the meaning side alike. The index records :data:`CUT`; an index cut another
way is emptied and refilled from the tables (`SearchEngine.ensure_cut`), so passages of
two sizes never meet in one ranking.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ampup_memory.search.index.base import Unit

TARGET_BYTES = 300
MAX_BYTES = 2000
CUT = f"units/{TARGET_BYTES}/{MAX_BYTES}"  # what the index records of how it was cut
SEPARATOR = "\n\n"  # between units inside a passage; counted in its size

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
_SPACE = re.compile(r"(?<=\s)(?=\S)")

Piece = tuple[int, str, str]  # (unit n, kind, text)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _pack(parts: Sequence[str], sep: str, limit: int, target: int) -> list[str]:
    """Greedy packing of small parts into chunks of at most ``target`` bytes (``limit`` is
    only reached by a part that alone is longer than the target)."""
    chunks: list[str] = []
    current = ""
    for part in parts:
        candidate = current + sep + part if current else part
        if current and _size(candidate) > target:
            chunks.append(current)
            current = part
        else:
            current = candidate
    if current:
        chunks.append(current)
    return chunks


def _hard_split(text: str, limit: int) -> list[str]:
    """Split on character boundaries so no piece exceeds ``limit`` bytes."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for ch in text:
        n = _size(ch)
        if size + n > limit and current:
            pieces.append("".join(current))
            current, size = [], 0
        current.append(ch)
        size += n
    if current:
        pieces.append("".join(current))
    return pieces


def split_long(text: str, target: int = TARGET_BYTES, limit: int = MAX_BYTES) -> list[str]:
    """Pieces of one over-long unit: sentences first, then words, then characters."""
    text = text.strip()
    if _size(text) <= limit:
        return [text] if text else []
    sentences: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        if _size(sentence) <= limit:
            sentences.append(sentence)
            continue
        for word_chunk in _pack(_SPACE.split(sentence), "", limit, target):
            word_chunk = word_chunk.strip()
            if _size(word_chunk) <= limit:
                sentences.append(word_chunk)
            else:
                sentences.extend(_hard_split(word_chunk, limit))
    return [c for c in _pack(sentences, " ", limit, target) if c]


def cut(units: Sequence[Unit], target: int = TARGET_BYTES, limit: int = MAX_BYTES
        ) -> list[tuple[Piece, ...]]:
    """Passages of an episode, each a tuple of unit pieces in order."""
    pieces: list[Piece] = []
    for unit in units:
        text = unit.text.strip()
        if not text:
            continue
        if _size(text) <= target:
            pieces.append((unit.n, unit.kind, text))
        else:
            pieces.extend((unit.n, unit.kind, p) for p in split_long(text, target, limit))
    passages: list[tuple[Piece, ...]] = []
    current: list[Piece] = []
    size = 0
    for piece in pieces:
        n = _size(piece[2])
        added = n + (_size(SEPARATOR) if current else 0)
        if current and size + added > target:
            passages.append(tuple(current))
            current, size = [], 0
            added = n
        current.append(piece)
        size += added
    if current:
        passages.append(tuple(current))
    return passages


def passage_text(passage: Sequence[Piece]) -> str:
    return SEPARATOR.join(text for _, _, text in passage)
