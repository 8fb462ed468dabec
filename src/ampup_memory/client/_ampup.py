"""`AmpUpClient`: the AmpUp face (episodes, facts, search, advice, branches), blocking.

Same transport and errors as `AMPClient` (`Transport`, `SyncTransport`, `error_for`); only
the routes and the caller's headers differ. Every method answers the server's JSON body as
a plain dict; the ``iter_*`` methods walk a listing's pages and yield its items.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from ampup_memory.client._base import Call, _json, path_segment
from ampup_memory.client._sync import SyncTransport
from ampup_memory.client.errors import ValidationError

JSON = dict[str, Any]


def _time(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def _fields(**fields: Any) -> JSON:
    """The fields given: one left as None is left out, so the server's default applies
    (and a field the route does not take is its 422, not a silent drop here)."""
    return {name: _time(value) if isinstance(value, datetime) else value
            for name, value in fields.items() if value is not None}


def _names(names: str | Sequence[str]) -> list[str]:
    # A str is a Sequence too: list("user:ana") would be one-letter entries.
    return [names] if isinstance(names, str) else list(names)


def _params(**fields: Any) -> dict[str, str | int]:
    params: dict[str, str | int] = {}
    for name, value in _fields(**fields).items():
        params[name] = ("true" if value else "false") if isinstance(value, bool) else value
    return params


class AmpUpClient(SyncTransport):
    """Synchronous client of the AmpUp routes (the server's root, beside ``/amp/v1``).

    ``AmpUpClient("http://127.0.0.1:8765", user="ana")``: keys off, ``user`` is sent as
    ``X-AmpUp-User``. Keys on, pass the key and its agent (``agent_id=..., api_key=...``);
    the server takes the caller from the key's user and ignores ``X-AmpUp-User``. ``user``
    is also the default ACL of the episodes you `remember` (``["user:<user>"]``: only
    you); without it, pass ``acl`` there. Use it as a context manager or call ``close()``
    (which closes the connections; `close_fact` closes a fact's value).
    """

    _prefix = ""

    def __init__(
        self,
        server_url: str | None = None,
        user: str | None = None,
        *,
        agent_id: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(server_url, agent_id, api_key, timeout=timeout, headers=headers)
        self.user = user

    def identity_headers(self) -> dict[str, str]:
        headers = super().identity_headers()
        if self.user:
            headers["X-AmpUp-User"] = self.user
        return headers

    def _acl(self, acl: str | Sequence[str] | None) -> list[str]:
        if acl is not None:
            return _names(acl)
        if not self.user:
            raise ValidationError("acl is required: this client names no user whose "
                                  "private ACL (user:<id>) could be the default")
        return [f"user:{self.user}"]

    def _post(self, path: str, body: JSON) -> JSON:
        return self._send(Call("POST", path, _json, json=body))

    def _get(self, path: str, **params: Any) -> JSON:
        return self._send(Call("GET", path, _json, params=_params(**params)))

    def _walk(self, path: str, items: str, cursor: str, **params: Any) -> Iterator[JSON]:
        """Every item of a cursor-paged listing: the answer's ``next_<cursor>`` is the next
        request's ``<cursor>`` until it is null (or a page comes back empty)."""
        position: str | None = None
        while True:
            page = self._get(path, **params, **{cursor: position})
            yield from page[items]
            position = page.get(f"next_{cursor}")
            if not position or not page[items]:
                return

    # ---- episodes --------------------------------------------------------------------

    def remember(
        self, scope: str, text: str, *, source: str, acl: str | Sequence[str] | None = None,
        about: str | Sequence[str] | None = None, occurred_at: datetime | str | None = None,
        document: str | None = None, branch: str | None = None,
    ) -> JSON:
        """Write one episode (``body`` = ``text``): ``{id, commit, created}``."""
        return self._post("/episodes", _fields(
            scope=scope, source=source, body=text, acl=self._acl(acl),
            about=None if about is None else _names(about), occurred_at=occurred_at,
            document=document, branch=branch))

    def remember_batch(
        self, scope: str, episodes: Sequence[Mapping[str, Any]], *, branch: str | None = None,
    ) -> JSON:
        """Write several episodes (each ``{source, body, acl?, about?, occurred_at?,
        document?}``; ``acl`` left out is `remember`'s default) in one commit:
        ``{commit, episodes: [{id, status}]}``. Any conflict refuses them all."""
        sent = [{**episode, "acl": self._acl(episode.get("acl"))} for episode in episodes]
        return self._post("/episodes/batch", _fields(scope=scope, episodes=sent, branch=branch))

    def set_acl(
        self, scope: str, id: str, acl: str | Sequence[str], *, branch: str | None = None,
    ) -> JSON:
        """Change an episode's ACL (its writer, or admin), which every version then obeys:
        ``{id, acl, commit}``."""
        return self._send(Call("PUT", f"/episodes/{path_segment(id, 'id')}/acl", _json,
                               json=_fields(scope=scope, acl=_names(acl), branch=branch)))

    def document(
        self, scope: str, document: str, *, as_of: datetime | str | None = None,
        branch: str | None = None, at_commit: str | None = None, pin: str | None = None,
        snapshot: str | None = None,
    ) -> JSON:
        """The newest version of ``document`` you may read (as of ``as_of``), as an
        episode with its units."""
        return self._post("/document", _fields(
            scope=scope, document=document, as_of=as_of, branch=branch, at_commit=at_commit,
            pin=pin, snapshot=snapshot))

    def get_episode(
        self, scope: str, id: str, *, branch: str | None = None, at_commit: str | None = None,
        pin: str | None = None, snapshot: str | None = None,
    ) -> JSON:
        """One episode with its body and numbered units."""
        return self._get(f"/episodes/{path_segment(id, 'id')}", scope=scope, branch=branch,
                         at_commit=at_commit, pin=pin, snapshot=snapshot)

    def episodes(
        self, scope: str, *, branch: str | None = None, limit: int | None = None,
        after: str | None = None, at_commit: str | None = None,
    ) -> JSON:
        """One page of the episodes you may read: ``{episodes, total, next_after}``."""
        return self._get("/episodes", scope=scope, branch=branch, limit=limit, after=after,
                         at_commit=at_commit)

    def iter_episodes(
        self, scope: str, *, branch: str | None = None, page_size: int = 1000,
    ) -> Iterator[JSON]:
        """Every episode you may read, newest first, page by page."""
        return self._walk("/episodes", "episodes", "after", scope=scope, branch=branch,
                          limit=page_size)

    # ---- facts and search ------------------------------------------------------------

    def search(
        self, scope: str, query: str, *, limit: int | None = None,
        as_of: datetime | str | None = None, branch: str | None = None, tz: str | None = None,
        at_commit: str | None = None, pin: str | None = None, snapshot: str | None = None,
        rerank: bool | None = None,
    ) -> JSON:
        """Facts matching ``query`` and the source text no fact cites (``POST /search``)."""
        return self._post("/search", _fields(
            scope=scope, query=query, limit=limit, as_of=as_of, branch=branch, tz=tz,
            at_commit=at_commit, pin=pin, snapshot=snapshot, rerank=rerank))

    def query(
        self, scope: str, query: str | None = None, *, find: str = "passages",
        limit: int | None = None, **fields: Any,
    ) -> JSON:
        """``POST /query``: ranked passages (``find="passages"``, needs ``query``), or typed
        ``find="facts"`` / ``"entities"`` with ``type``, ``entity``, ``predicate``,
        ``where``, ``select``, ``order_by``, ``offset``, ``as_of`` as keyword arguments;
        both take ``branch``, ``at_commit``, ``pin``, ``snapshot``."""
        return self._post("/query", _fields(scope=scope, find=find, query=query, limit=limit,
                                            **fields))

    def facts(
        self, scope: str, entity: str, *, predicate: str | None = None,
        as_of: datetime | str | None = None, history: bool | None = None,
        branch: str | None = None, at_commit: str | None = None, pin: str | None = None,
        snapshot: str | None = None,
    ) -> JSON:
        """An entity's current facts (every version with ``history=True``): ``{facts}``."""
        return self._get("/facts", scope=scope, entity=entity, predicate=predicate,
                         as_of=as_of, history=history, branch=branch,
                         at_commit=at_commit, pin=pin, snapshot=snapshot)

    def add_fact(
        self, scope: str, entity: str, predicate: str, value: str | int | float | bool | JSON,
        *, quote: str, cites: Sequence[Mapping[str, Any]],
        valid_from: datetime | str | None = None, valid_to: datetime | str | None = None,
        branch: str | None = None,
    ) -> JSON:
        """Post one fact citing episode units (``cites=[{"episode": id, "unit": n}]``);
        ``quote`` must occur in a cited unit: ``{id, commit}``."""
        return self._post("/facts", _fields(
            scope=scope, entity=entity, predicate=predicate, value=value, quote=quote,
            cites=[dict(c) for c in cites], valid_from=valid_from, valid_to=valid_to,
            branch=branch))

    def add_facts(
        self, scope: str, facts: Sequence[Mapping[str, Any]], *, branch: str | None = None,
    ) -> JSON:
        """Post several facts (each shaped as `add_fact`'s body) in one commit:
        ``{ids, commit}``; one invalid fact refuses them all."""
        return self._post("/facts/batch", _fields(scope=scope, facts=[dict(f) for f in facts],
                                                  branch=branch))

    def close_fact(
        self, scope: str, entity: str, predicate: str, reason: str, *,
        value: str | int | float | bool | None = None, acl: str | Sequence[str] | None = None,
        branch: str | None = None,
    ) -> JSON:
        """End an attribute's current value (``POST /close``; ``reason`` becomes its own
        episode): ``{episode, commit, closed, fact}``. ``acl`` left out is the server's
        default (what the closed value's episodes share), not this client's user."""
        return self._post("/close", _fields(
            scope=scope, entity=entity, predicate=predicate, reason=reason, value=value,
            acl=None if acl is None else self._acl(acl), branch=branch))

    # ---- advice: runs and sessions ---------------------------------------------------

    def advice(self, scope: str, task: str, session: str | None = None) -> JSON:
        """The advice for ``task`` (recorded on ``session``): ``{advice}``."""
        return self._post("/advice", _fields(scope=scope, task=task, session=session))

    def record_run(
        self, scope: str, task: str, *, trace: str | None = None, outcome: str | None = None,
        advice_key: str | None = None, acl: str | Sequence[str] | None = None,
        branch: str | None = None,
    ) -> JSON:
        """Record finished work: ``{id, commit}``. Without ``acl`` only you may read it."""
        return self._post("/runs", _fields(
            scope=scope, task=task, trace=trace, outcome=outcome, advice_key=advice_key,
            acl=None if acl is None else self._acl(acl), branch=branch))

    def reward_run(self, run: str, reward: float, reason: str) -> JSON:
        """Reward a run or an ended session, in [-1, 1]: ``{id, reward, commit}``."""
        return self._post("/runs/reward", {"run": run, "reward": reward, "reason": reason})

    def get_run(self, run: str) -> JSON:
        return self._get(f"/runs/{path_segment(run, 'run')}")

    def runs(
        self, scope: str, *, branch: str | None = None, limit: int | None = None,
        before: str | None = None,
    ) -> JSON:
        """One page of the runs you may read, newest first: ``{runs, next_before}``."""
        return self._get("/runs", scope=scope, branch=branch, limit=limit, before=before)

    def iter_runs(
        self, scope: str, *, branch: str | None = None, page_size: int = 1000,
    ) -> Iterator[JSON]:
        """Every run you may read, newest first, page by page."""
        return self._walk("/runs", "runs", "before", scope=scope, branch=branch,
                          limit=page_size)

    def start_session(
        self, scope: str, task: str | None = None, *, acl: str | Sequence[str] | None = None,
        branch: str | None = None,
    ) -> JSON:
        """Open a session (advice served on it is recorded): ``{id}``."""
        return self._post("/sessions/start", _fields(
            scope=scope, task=task, acl=None if acl is None else self._acl(acl),
            branch=branch))

    def end_session(
        self, session: str, transcript: str, outcome: str, *, reward: float | None = None,
        reason: str | None = None,
    ) -> JSON:
        """End it; with ``reward`` that is its explicit reward. Answers the ended session."""
        return self._post("/sessions/end", _fields(
            session=session, transcript=transcript, outcome=outcome, reward=reward,
            reason=reason))

    def get_session(self, session: str) -> JSON:
        return self._get(f"/sessions/{path_segment(session, 'session')}")

    def sessions(
        self, scope: str, *, branch: str | None = None, limit: int | None = None,
        before: str | None = None,
    ) -> JSON:
        """One page of the sessions you may read, newest first: ``{sessions, next_before}``."""
        return self._get("/sessions", scope=scope, branch=branch, limit=limit, before=before)

    def iter_sessions(
        self, scope: str, *, branch: str | None = None, page_size: int = 1000,
    ) -> Iterator[JSON]:
        """Every session you may read, newest first, page by page."""
        return self._walk("/sessions", "sessions", "before", scope=scope, branch=branch,
                          limit=page_size)

    # ---- branches --------------------------------------------------------------------

    def branches(self, scope: str) -> JSON:
        """``{scope, branches}``: ``main`` first, then every live branch."""
        return self._get("/branches", scope=scope)

    def create_branch(
        self, scope: str, name: str, *, from_: str | None = None, at_commit: str | None = None,
    ) -> JSON:
        """Fork ``name`` from ``from_`` (default ``main``) at ``at_commit`` (default its
        head)."""
        return self._post("/branches", _fields(scope=scope, name=name, at_commit=at_commit,
                                               **{"from": from_}))

    def delete_branch(self, scope: str, name: str) -> JSON:
        # A branch name may hold "/" separators: each part is its own segment.
        parts = name.split("/") if isinstance(name, str) else [name]
        path = "/".join(path_segment(part, "name") for part in parts)
        return self._send(Call("DELETE", f"/branches/{path}", _json,
                               params=_params(scope=scope)))

    def merge(
        self, scope: str, from_: str, *, into: str | None = None, message: str | None = None,
        dry_run: bool | None = None,
    ) -> JSON:
        """Three-way merge of branch ``from_`` into ``into`` (default ``main``); a conflict
        is a `ConflictError` whose ``details["conflicts"]`` lists them."""
        return self._post("/merge", _fields(scope=scope, into=into, message=message,
                                            dry_run=dry_run, **{"from": from_}))


__all__ = ["AmpUpClient"]
