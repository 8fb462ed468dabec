"""``ampup-memory workspace create|list|snapshots|renew|delete|gc``.

The command line speaks as the operator (it holds the tables): ``list``, ``snapshots``,
``renew`` and ``delete`` reach every user's workspaces; ``create`` records ``--user`` as
the creator.
"""

from __future__ import annotations

import uuid
from typing import Any

import click

from ampup_memory.cliutil import count_type, dumps, progress, task_progress, user_option
from ampup_memory.memory.cli import SettingsOptions, _fail, _service
from ampup_memory.settings import Settings


def workspace_commands(settings_options: SettingsOptions,
                       settings_from: Any) -> list[click.Command]:
    @click.group("workspace")
    def workspace() -> None:
        """Workspaces: disposable orgs with caps and a time to live."""

    @workspace.command("create")
    @click.argument("name")
    @click.option("--ttl", required=True, help="Time to live: 30m, 1h, 7d, 1d12h …")
    @click.option("--user", required=True, callback=user_option,
                  help="Who creates it (it is theirs to delete).")
    @click.option("--max-scopes", type=count_type(), default=None, help="Cap on scopes.")
    @click.option("--max-episodes", type=count_type(), default=None, help="Cap on episodes.")
    @click.option("--max-facts", type=count_type(), default=None, help="Cap on facts.")
    @click.option("--max-bytes", type=count_type(), default=None, help="Cap on body bytes.")
    @settings_options("common", "tables")
    def create(name: str, ttl: str, user: str, max_scopes: int | None,
               max_episodes: int | None, max_facts: int | None, max_bytes: int | None,
               **kwargs: Any) -> None:
        """Create a workspace; prints it (its id is its org: use <id>/<team> scopes)."""
        from ampup_memory.errors import ValidationFailed
        from ampup_memory.memory.service import build
        from ampup_memory.memory.workspaces import CreateWorkspace

        settings: Settings = settings_from(kwargs)
        caps = {k: v for k, v in (("scopes", max_scopes), ("episodes", max_episodes),
                                  ("facts", max_facts), ("bytes", max_bytes))
                if v is not None}
        with _service(settings) as svc:
            try:
                req = build(CreateWorkspace, name=name, ttl=ttl, caps=caps or None)
                made = svc.workspaces.create(user, req)
            except ValidationFailed as exc:
                # Named as the command takes them, as `pin create` names its --ttl.
                exc.rename({("ttl",): "--ttl", ("name",): "NAME"})
                raise
            click.echo(dumps(made))

    @workspace.command("list")
    @click.option("--user", default=None, callback=user_option,
                  help="Only this user's (default: everyone's).")
    @settings_options("common", "tables")
    def list_(user: str | None, **kwargs: Any) -> None:
        """Live workspaces with their caps and usage, as JSON."""
        settings: Settings = settings_from(kwargs)
        with _service(settings) as svc:
            found = svc.workspaces.listing(user or "", admin_all=user is None)
            click.echo(dumps({"workspaces": found}, indent=2))

    @workspace.command("snapshots")
    @click.argument("workspace_id")
    @settings_options("common", "tables")
    def snapshots(workspace_id: str, **kwargs: Any) -> None:
        """Snapshots taken of a live workspace, newest first, released ones with their
        state, as JSON (what the server lists for the workspace)."""
        from ampup_memory.memory.snapshots import workspace_snapshots

        settings: Settings = settings_from(kwargs)
        with _service(settings) as svc:
            taken = workspace_snapshots(svc, "cli", workspace_id, admin=True)
            click.echo(dumps({"snapshots": taken}, indent=2))

    @workspace.command("renew")
    @click.argument("workspace_id")
    @click.option("--ttl", required=True, help="New time to live from now: 30m, 1h, 7d …")
    @settings_options("common", "tables")
    def renew(workspace_id: str, ttl: str, **kwargs: Any) -> None:
        """Set a workspace's expiry to --ttl from now; prints it."""
        from ampup_memory.timefmt import parse_ttl

        settings: Settings = settings_from(kwargs)
        with _service(settings) as svc:
            click.echo(dumps(svc.workspaces.renew("cli", workspace_id, True,
                                                  parse_ttl(ttl, ["--ttl"]))))

    @workspace.command("delete")
    @click.argument("workspace_id")
    @settings_options("common", "tables", "embedding", "ann", "lease")
    def delete(workspace_id: str, **kwargs: Any) -> None:
        """Delete a workspace now: every scope, file and index row of it."""
        from ampup_memory.search.feed import attached_feed

        settings: Settings = settings_from(kwargs)
        with _service(settings) as svc, attached_feed(settings, svc):
            with progress() as bar:
                report = svc.workspaces.delete(
                    "cli", workspace_id, admin=True,
                    progress=task_progress(bar, "dropping workspace scopes"))
            click.echo(dumps(report))

    @workspace.command("gc")
    @settings_options("common", "tables", "embedding", "ann", "lease")
    def gc(**kwargs: Any) -> None:
        """Drop expired and deleted workspaces (and what a cut-short drop left behind)."""
        from ampup_memory.search.feed import attached_feed

        settings: Settings = settings_from(kwargs)
        with _service(settings) as svc, attached_feed(settings, svc):
            with progress() as bar:
                report = svc.workspaces.gc_if_free(
                    "cli-" + uuid.uuid4().hex[:12],
                    progress=task_progress(bar, "dropping workspace scopes"))
            if report is None:
                _fail("maintenance or a backup holds the lease; try again shortly")
            click.echo(dumps(report))

    return [workspace]
