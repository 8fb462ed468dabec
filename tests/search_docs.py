"""Builders of index documents for search tests (what issue-4 tables would hand the index)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from ampup_memory.search.index.base import Cite, EpisodeDoc, FactDoc, Unit


def when(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def episode(scope: str, texts: list[str], acl: list[str], kind: str = "turn",
            occurred: str = "2025-01-10", branch: str = "main", commit: str = "c1",
            source: str = "call:test") -> EpisodeDoc:
    body = "\n".join(texts)
    return EpisodeDoc(
        id=hashlib.sha256((source + "\n" + body).encode()).hexdigest(),
        scope=scope, branch=branch, commit=commit, occurred_at=when(occurred),
        acl=tuple(acl), units=tuple(Unit(i + 1, kind, t) for i, t in enumerate(texts)),
        source=source,
    )


def fact(ep: EpisodeDoc | list[EpisodeDoc], entity: str, predicate: str, value: str,
         quote: str, unit: int = 1, valid_from: str | None = "2025-01-10",
         valid_to: str | None = None, seq: int = 1, fact_id: str | None = None) -> FactDoc:
    eps = ep if isinstance(ep, list) else [ep]
    first = eps[0]
    fid = fact_id or hashlib.sha256(
        f"{entity}|{predicate}|{value}|{valid_from}|{[e.id for e in eps]}".encode()
    ).hexdigest()[:24]
    return FactDoc(
        id=fid, scope=first.scope, branch=first.branch, commit=f"c{seq}", entity=entity,
        predicate=predicate, value=value, quote=quote,
        valid_from=when(valid_from) if valid_from else None,
        valid_to=when(valid_to) if valid_to else None,
        cites=tuple(Cite(e.id, unit) for e in eps), written_by="posted", commit_seq=seq,
    )


def unit_vectors(n: int, dims: int, seed: int) -> Any:
    """``n`` random unit vectors of ``dims`` float32 (the vector step's tests: its cost and
    its answers do not depend on what the vectors mean)."""
    import numpy as np

    vecs = np.random.default_rng(seed).standard_normal((n, dims)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs
