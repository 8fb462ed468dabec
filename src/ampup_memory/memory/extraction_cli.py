"""``ampup-memory extract``: one extraction pass over the home's tables (extraction.py).

It runs in this process with the extract model from the settings; a server sharing the
catalog sees the facts on its next read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ampup_memory.cliutil import count_type, dumps
from ampup_memory.memory.cli import SettingsOptions, _service, existing_scope
from ampup_memory.memory.extraction import DEFAULT_BATCH
from ampup_memory.settings import Settings


def extraction_commands(settings_options: SettingsOptions,
                        settings_from: Callable[[dict[str, Any]], Settings],
                        ) -> list[click.Command]:

    @click.command("extract")
    @click.option("--scope", default=None,
                  help="One scope (org/team); default: every scope with a schema.")
    @click.option("--branch", default=None, help="Branch to read and write (default main).")
    @click.option("--limit", type=count_type(), default=None,
                  help="At most this many episodes per scope.")
    @click.option("--batch", type=count_type(1000), default=DEFAULT_BATCH,
                  show_default=True,
                  help="Episodes per commit (fewer once the model has taken 30 s).")
    @settings_options("common", "tables", "models")
    def extract(scope: str | None, branch: str | None, limit: int | None, batch: int,
                **kwargs: Any) -> None:
        """Read pending episodes with the extract model and write the facts it finds that
        check out (quote in the cited unit, value valid for the schema); one JSON line per
        scope. Exits 2 when the model failed, or refused an episode as too long (the pass
        goes on with the next); the episodes it did not read stay pending."""
        from ampup_memory.cliutil import (
            echo_beside,
            fail_if_model_failed,
            no_model_line,
            progress,
        )
        from ampup_memory.memory.extraction import NO_MODEL, extractor
        from ampup_memory.memory.scopes import parse_branch

        settings = settings_from(kwargs)
        failed = 0
        with _service(settings) as svc:
            # A bad or unknown scope or branch is refused with or without a model (a
            # blank or malformed --branch passed when none was configured).
            existing_scope(svc, scope)
            parse_branch(branch, "--branch")
            ex = extractor(svc, settings)
            if ex.model is None:
                click.echo(dumps({"model": NO_MODEL, "read": 0}))
                no_model_line("extract", "nothing was read")
                return
            scopes = [scope] if scope else [str(s) for s in svc.tables.scopes()]
            reported = 0
            with progress() as bar:
                for name in scopes:
                    task = bar.add_task(f"extract {name}", total=None)

                    def step(done: int, total: int, task: Any = task) -> None:
                        bar.update(task, completed=done, total=total)

                    out = ex.run(name, branch, limit, batch, progress=step)
                    if out.schema is None and not scope:
                        bar.remove_task(task)
                        continue
                    echo_beside(bar, dumps({"scope": name, **out.wire()}))
                    reported += 1
                    failed += out.error is not None or out.refused > 0
            if not reported:
                # Without --scope only scopes with a schema are read: say so rather than
                # print nothing (the model was never asked, so it was not checked either).
                click.echo("no scope has a schema: nothing was read (a scope's schema says "
                           "which episodes extraction reads: `ampup-memory schema set`, "
                           "docs/extraction.md; `ampup-memory doctor` checks the model)",
                           err=True)
        fail_if_model_failed(failed, "scope(s)", "the episodes it did not read stay pending")

    return [extract]
