"""Search commands: ``ampup-memory index rebuild``.

Built from the main CLI's settings helpers (passed in, as ``memory/cli.py`` does), so
the two modules never import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ampup_memory.cliutil import dumps, fail, progress, task_progress
from ampup_memory.errors import AmpError, ConfigurationError
from ampup_memory.memory.cli import SettingsOptions, _service, existing_scope
from ampup_memory.settings import Settings


def search_commands(settings_options: SettingsOptions,
                    settings_from: Callable[[dict[str, Any]], Settings]) -> list[click.Command]:

    @click.group("index")
    def index() -> None:
        """The search index: derived from the tables, rebuilt from them alone."""

    @index.command("rebuild")
    @click.option("--scope", default=None, help="Only this org/team (default: every scope).")
    @settings_options("common", "tables", "embedding", "ann")
    def rebuild(scope: str | None, **kwargs: Any) -> None:
        """Recreate the search index from the Iceberg tables alone.

        Without --scope the read index is recreated from the tables too. Every server on
        the store must be stopped: it is refused while one runs, and a server does not
        start while it runs.
        """
        from ampup_memory.memory.scopes import parse_scope

        settings = settings_from(kwargs)
        only = None
        if scope is not None:
            try:
                only = str(parse_scope(scope, "--scope"))
            except AmpError as exc:
                fail(exc.message)
        try:
            report = rebuild_index(settings, only)
        except ConfigurationError as exc:
            fail(str(exc))
        click.echo(dumps(report))

    return [index]


def rebuild_index(settings: Settings, only: str | None = None) -> dict[str, Any]:
    """Recreate the read index (all scopes only) and the search index from the tables,
    with a progress bar; also the last step of ``restore``."""
    from ampup_memory.search.feed import attached_feed  # loads the embedder: only here
    from ampup_memory.serving import alone

    # Rebuilding the read index is what its refusal of a newer layout asks for. The feed
    # (and its embedder) first: a setting that cannot work fails before the long work.
    with alone(settings), _service(settings, replace_newer_index=only is None) as svc, \
            attached_feed(settings, svc) as feed:
        if only is not None:  # a typo is one error line, not a rebuild of nothing
            existing_scope(svc, only)
        commits = None
        if only is None:
            with progress() as bar:
                commits = svc.sync.rebuild(task_progress(bar, "rebuilding the read index"))
        feed.engine.index.clear(only)
        feed.engine.ensure_model()
        with progress() as bar:
            task = bar.add_task("indexing commits", total=feed.pending(only))
            done = feed.catch_up_all(only, lambda n: bar.advance(task, n))
        return {"commits": done, "read_index_commits": commits,
                **feed.engine.index.counts(only)}
