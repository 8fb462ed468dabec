"""The AmpUp routes that name versions of memory, once for both clients: branches and
merge, pins, snapshots and workspaces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ampup_memory.client._ampup_face import AmpUpFace, R, W, _fields, _names, _segments
from ampup_memory.client._base import path_segment


def _pin_path(pin: str) -> str:
    return f"/pin/{path_segment(pin, 'pin')}"


def _snapshot_path(snapshot: str) -> str:
    return f"/snapshots/{path_segment(snapshot, 'snapshot')}"


def _workspace_path(workspace: str) -> str:
    return f"/workspaces/{path_segment(workspace, 'workspace')}"


class VersionCalls(AmpUpFace[R, W]):
    # ---- branches --------------------------------------------------------------------

    def branches(self, scope: str) -> R:
        """``{scope, branches}``: ``main`` first, then every live branch."""
        return self._get("/branches", scope=scope)

    def create_branch(
        self, scope: str, name: str, *, from_: str | None = None, at_commit: str | None = None,
    ) -> R:
        """Fork ``name`` from ``from_`` (default ``main``) at ``at_commit`` (default its
        head)."""
        return self._post("/branches", _fields(scope=scope, name=name, at_commit=at_commit,
                                               **{"from": from_}))

    def delete_branch(self, scope: str, name: str) -> R:
        """``{scope, name, deleted, commit}``; the branch's commits stay in the ledger."""
        return self._delete(f"/branches/{_segments(name, 'name')}", scope=scope)

    def merge(
        self, scope: str, from_: str, *, into: str | None = None, message: str | None = None,
        dry_run: bool | None = None,
    ) -> R:
        """Three-way merge of branch ``from_`` into ``into`` (default ``main``); a conflict
        is a `ConflictError` whose ``details["conflicts"]`` lists them."""
        return self._post("/merge", _fields(scope=scope, into=into, message=message,
                                            dry_run=dry_run, **{"from": from_}))

    # ---- pins ------------------------------------------------------------------------

    def pin(
        self, scope: str, ttl: str, *, branch: str | None = None, at_commit: str | None = None,
    ) -> R:
        """Hold one scope and branch at one commit (default its head now) for ``ttl``
        (``"15m"``, ``"1d12h"``): the pin, ``{id, scope, branch, commit, expires_at, …}``.
        Pass its id as ``pin=`` to a read."""
        return self._post("/pin", _fields(scope=scope, branch=branch, at_commit=at_commit,
                                          ttl=ttl))

    def get_pin(self, pin: str) -> R:
        """The pin with its ``state``: live, expired or released."""
        return self._get(_pin_path(pin))

    def renew_pin(self, pin: str, ttl: str) -> R:
        """Creator only: the pin, now expiring ``ttl`` from now."""
        return self._post(f"{_pin_path(pin)}/renew", {"ttl": ttl})

    def release_pin(self, pin: str) -> R:
        """Creator only: release it now (reads through it answer 410 from then on)."""
        return self._delete(_pin_path(pin))

    # ---- snapshots -------------------------------------------------------------------

    def snapshot(self, scopes: str | Sequence[str]) -> R:
        """Hold the heads of several scopes under one id until released:
        ``{id, heads, workspace, …}``. Pass its id as ``snapshot=`` to a read."""
        return self._post("/snapshots", {"scopes": _names(scopes)})

    def get_snapshot(self, snapshot: str) -> R:
        """The snapshot with its heads and ``state``."""
        return self._get(_snapshot_path(snapshot))

    def release_snapshot(self, snapshot: str) -> R:
        """Creator only: release it (reads through it answer 410 from then on)."""
        return self._delete(_snapshot_path(snapshot))

    def snapshot_workspace(self, workspace: str) -> R:
        """Every scope of your workspace under one snapshot (``workspace`` set)."""
        return self._post(f"{_workspace_path(workspace)}/snapshots")

    def workspace_snapshots(self, workspace: str) -> R:
        """The snapshots taken of the workspace, newest first, released ones too:
        ``{snapshots}``."""
        return self._get(f"{_workspace_path(workspace)}/snapshots")

    # ---- workspaces ------------------------------------------------------------------

    def create_workspace(
        self, name: str, ttl: str, *, caps: Mapping[str, Any] | None = None,
    ) -> R:
        """A disposable org with caps (``scopes``, ``episodes``, ``facts``, ``bytes``) and a
        time to live: ``{id, org, name, created_by, created_at, expires_at, caps, usage}``.
        Its scopes are ``<id>/<team>``."""
        return self._post("/workspaces", _fields(
            name=name, ttl=ttl, caps=None if caps is None else dict(caps)))

    def workspaces(self, *, all_users: bool | None = None) -> R:
        """Your live workspaces with their usage (every user's: admin and
        ``all_users=True``): ``{workspaces}``."""
        return self._get("/workspaces", all=all_users)

    def get_workspace(self, workspace: str) -> R:
        """One live workspace of yours with its usage and ``scopes`` (their names)."""
        return self._get(_workspace_path(workspace))

    def renew_workspace(self, workspace: str, ttl: str) -> R:
        """The workspace, now expiring ``ttl`` from now."""
        return self._post(f"{_workspace_path(workspace)}/renew", {"ttl": ttl})

    def delete_workspace(self, workspace: str) -> R:
        """Drop it and every scope in it: ``{id, deleted, dropped, scopes}``."""
        return self._delete(_workspace_path(workspace))


__all__ = ["VersionCalls"]
