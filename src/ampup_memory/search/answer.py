"""Answers: JSON for programs, text for agents (what the MCP ``search_memory`` returns).

The text answer groups facts by entity, cites each as ``[e<i> <k><n>]`` (episode i of this
answer, unit kind letter k, unit n), quotes matching source text no shown fact cites with
its own label, and ends with ``episodes: <id> <id> …`` for ``get_episode``. Everything in
it comes from results the caller may see: hidden episodes contribute no title, quote,
label or count.

The JSON answer carries the same uncited source text, in the same order, as ``sources``
(episode id and unit instead of a label), so a scope loaded from documents, which has
passages but no facts yet, answers both ways.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ampup_memory.search.engine import FactResults, PassageResults, RankedPassage
from ampup_memory.search.index.base import UNIT_LETTERS, EpisodeRow
from ampup_memory.search.rank import Parts
from ampup_memory.search.tokenize import keyword_words
from ampup_memory.timefmt import utc_text

MAX_SOURCE_QUOTES = 3
MAX_QUOTE_CHARS = 300


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return utc_text(value)


def _parts(parts: Parts) -> dict[str, float]:
    out = {"keyword": round(parts.keyword, 6), "meaning": round(parts.meaning, 6),
           "time": round(parts.time, 6)}
    if parts.rerank is not None:  # only a reranked passage has one
        out["rerank"] = round(parts.rerank, 6)
    return out


def _value(text: str) -> Any:
    # Facts keep scalar values as JSON text; plain strings from other writers stay strings.
    try:
        return json.loads(text)
    except ValueError:
        return text


def facts_json(results: FactResults, sources: list[RankedPassage], scope: str, branch: str,
               query: str, as_of: datetime, at_commit: str | None = None) -> dict[str, Any]:
    episode_ids = {num: e.id for num, e in results.episodes.items()}
    return {
        "scope": scope,
        "branch": branch,
        "query": query,
        "as_of": _iso(as_of),
        "at_commit": at_commit,
        "window": results.window.wire() if results.window else None,
        "results": [
            {
                "id": f.row.id,
                "entity": f.row.entity,
                "predicate": f.row.predicate,
                "value": _value(f.row.value),
                "valid_from": _iso(f.row.valid_from),
                "valid_to": _iso(f.end),
                "stated_valid_to": _iso(f.row.valid_to),
                "quote": f.row.quote,
                "cites": [{"episode": episode_ids[e], "unit": u} for e, u in f.row.cites],
                "written_by": f.row.written_by,
                "commit": f.row.commit,
                "score": round(f.score, 6),
                "parts": _parts(f.parts),
            }
            for f in results.facts
        ],
        "sources": [
            {
                "episode": q.episode.id,
                "unit": q.unit,
                "kind": q.kind,
                "text": q.text,
                "source": q.episode.source,
                "occurred_at": _iso(q.episode.occurred_at),
            }
            for q in uncited_sources(results, sources)
        ],
    }


def passages_json(results: PassageResults, scope: str, branch: str, query: str,
                  at_commit: str | None = None) -> dict[str, Any]:
    return {
        "scope": scope,
        "branch": branch,
        "query": query,
        "at_commit": at_commit,
        "window": results.window.wire() if results.window else None,
        "results": [
            {
                "episode": p.episode.id,
                "occurred_at": _iso(p.episode.occurred_at),
                "source": p.episode.source,
                "first_unit": p.row.first_unit,
                "last_unit": p.row.last_unit,
                "units": [{"n": n, "kind": k, "text": t} for n, k, t in p.row.units],
                "text": p.row.text,
                "score": round(p.score, 6),
                "parts": _parts(p.parts),
            }
            for p in results.passages
        ],
    }


class _Labels:
    """Numbers episodes in order of first mention within one answer."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def label(self, episode: EpisodeRow, unit: int) -> str:
        if episode.id not in self.order:
            self.order.append(episode.id)
        i = self.order.index(episode.id) + 1
        kinds = episode.unit_kinds
        kind = kinds[unit - 1] if 0 < unit <= len(kinds) else ""
        return f"[e{i} {UNIT_LETTERS.get(kind, 'u')}{unit}]"


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_QUOTE_CHARS else text[: MAX_QUOTE_CHARS - 1] + "…"


def _matches(text: str, terms: list[str]) -> bool:
    """Whether a unit holds a query term (`keyword_terms`), read by the index's rule."""
    found = set(keyword_words(text))
    return any(t in found or any(w.startswith(t) for w in found if len(t) >= 4)
               for t in terms)


@dataclass(frozen=True)
class SourceQuote:
    """One piece of matching source text that no shown fact cites."""

    episode: EpisodeRow
    unit: int
    kind: str
    text: str  # whitespace folded, clipped to MAX_QUOTE_CHARS


def uncited_sources(results: FactResults, passages: list[RankedPassage]) -> list[SourceQuote]:
    """The matching units of the best passages that no shown fact cites, best first, at
    most MAX_SOURCE_QUOTES: the one list both answers show."""
    cited = {(results.episodes[num].id, unit) for f in results.facts for num, unit in f.row.cites}
    quotes: list[SourceQuote] = []
    for passage in passages:
        for n, kind, text in passage.row.units:
            if len(quotes) >= MAX_SOURCE_QUOTES:
                return quotes
            if (passage.episode.id, n) in cited or not _matches(text, results.terms):
                continue
            cited.add((passage.episode.id, n))
            quotes.append(SourceQuote(passage.episode, n, kind, _clip(text)))
    return quotes


def text_answer(results: FactResults, sources: list[RankedPassage]) -> str:
    labels = _Labels()
    lines: list[str] = []
    if results.window:
        w = results.window
        lines.append(f"time window: {_iso(w.start)} to {_iso(w.end)} ({w.text})")
    by_entity: dict[str, list[str]] = {}
    for f in results.facts:
        tags = [labels.label(results.episodes[num], unit) for num, unit in f.row.cites]
        span = _iso(f.row.valid_from) or "?"
        if f.end is not None:
            span += f" to {_iso(f.end)}"
        else:
            span = f"since {span}"
        by_entity.setdefault(f.row.entity, []).append(
            f"- {f.row.predicate}: {json.dumps(_value(f.row.value), ensure_ascii=False)}"
            f" ({span}) {' '.join(tags)} \"{_clip(f.row.quote)}\""
        )
    for entity, facts in by_entity.items():
        lines.append(entity)
        lines.extend("  " + line for line in facts)
    quotes = [f"  {labels.label(q.episode, q.unit)} \"{q.text}\""
              for q in uncited_sources(results, sources)]
    if quotes:
        lines.append("source text no fact cites:")
        lines.extend(quotes)
    if not results.facts and not quotes:
        lines.append("no matching memory")
    lines.append("episodes: " + " ".join(labels.order) if labels.order else "episodes:")
    return "\n".join(lines) + "\n"
