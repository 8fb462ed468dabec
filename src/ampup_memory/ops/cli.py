"""Day-two commands: ``backup``, ``restore`` and ``status``.

Built on the main CLI's settings helpers (passed in, as ``memory/cli.py`` does), so the
modules never import each other; the heavy imports happen inside the commands.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ampup_memory.cliutil import (
    dumps,
    echo_beside,
    fail,
    interrupted,
    progress,
    progress_if_work,
)
from ampup_memory.memory.cli import SettingsOptions
from ampup_memory.settings import Settings


def ops_commands(settings_options: SettingsOptions,
                 settings_from: Callable[[dict[str, Any]], Settings],
                 runtime: Callable[..., Any]) -> list[click.Command]:

    @click.command("backup")
    @click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
    @settings_options("common", "cells", "tables", "lease")
    def backup(dest: Path, **kwargs: Any) -> None:
        """Copy the embedded stores (AMP cells, Iceberg tables) into DEST, a new folder.

        Safe while the server runs: every store is copied as of one instant. The search
        index is derived and left out; `restore` rebuilds it. On PostgreSQL or object
        storage it says what to use instead.
        """
        from ampup_memory.errors import ConfigurationError
        from ampup_memory.ops import backup as ops

        settings = settings_from(kwargs)
        try:
            with progress() as bar:
                task = bar.add_task("backing up", total=ops.backup_steps(settings))
                report = ops.backup(settings, dest, lambda what, n: bar.advance(task, n))
        except ConfigurationError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            interrupted(f"backup interrupted; nothing of it is left in {dest}: run it again")
        click.echo(dumps(report.wire()))

    @click.command("restore")
    @click.argument("src", type=click.Path(exists=True, file_okay=False, path_type=Path))
    @settings_options("common", "cells", "tables", "embedding", "ann")
    def restore(src: Path, **kwargs: Any) -> None:
        """Restore a backup from SRC into fresh stores, then rebuild the indexes.

        Into a home (--home / AMPUP_MEMORY_HOME) that holds no stores yet, or, with
        PostgreSQL and S3 settings, into empty databases and warehouse: how a laptop's
        memory moves to several servers (docs/deployment.md). Run it with no server
        on those stores; stopped, the same command run again finishes it.
        """
        import contextlib

        from ampup_memory.errors import ConfigurationError
        from ampup_memory.ops import backup as ops
        from ampup_memory.search.cli import rebuild_index

        settings = settings_from(kwargs)
        fleet = ops.into_fleet(settings)
        try:
            with contextlib.nullcontext() if fleet else ops.undone_on_failure(settings):
                with progress() as bar:
                    task = bar.add_task("restoring", total=ops.restore_steps(settings, src))
                    report = ops.restore(settings, src, lambda what, n: bar.advance(task, n))
                report["index"] = rebuild_index(settings)
                if fleet:
                    click.echo("building the AMP cells' vector indexes (once, over every "
                               "cell: minutes at 100,000 cells)", err=True)
                    with progress_if_work("re-embedding cells") as told:
                        report["cell_store"] = ops.finish_restore(settings, told)
        except ConfigurationError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            interrupted("restore interrupted; run the same command again to finish it"
                        if fleet else f"restore interrupted; what it had written into "
                        f"{settings.home} is removed: run it again")
        click.echo(dumps(report))

    @click.command("status")
    @settings_options("common", "cells", "tables", "embedding")
    def status(**kwargs: Any) -> None:
        """Versions, stores and sizes, scopes, commits and index lag, the embedder.

        Reads the stores directly: a running server's timers are in its admin status
        report (docs/api.md).
        """
        from ampup_memory.ops.status import collect

        settings = settings_from(kwargs)
        embedded = [n for n in ("store_uri", "index_uri", "catalog_uri", "warehouse")
                    if getattr(settings, n) is None]  # unset: a store in the home folder
        if embedded and not settings.home.exists():
            # Opening the stores would make the home and empty stores in it: a report of
            # nothing, and a folder left behind by a command that only looks.
            fail(f"no AmpUp Memory home at {settings.home}: nothing to report. Start one "
                 "with `ampup-memory serve` (it makes the home), or point --home / "
                 "AMPUP_MEMORY_HOME at an existing one")
        rt = runtime(settings, reembed=False)
        try:
            report = collect(rt)
        finally:
            rt.close()
        click.echo(dumps(report, indent=2))

    @click.command("doctor")
    @settings_options("common", "cells", "tables", "embedding", "models")
    def doctor(**kwargs: Any) -> None:
        """Check that each configured engine is reachable and writable.

        The home folder (it can hold files), AMP store, Iceberg catalog, warehouse, search
        index and any configured model endpoint: one line each, `ok` or what is wrong.
        Exit code 1 when any check fails.
        Nothing written stays (SQL probes roll back, the warehouse probe is deleted).
        """
        from ampup_memory.ops.doctor import checks, run_check, secrets_of

        settings = settings_from(kwargs)
        todo = checks(settings)
        secrets = secrets_of(settings)
        failed = 0
        with progress() as bar:
            task = bar.add_task("checking", total=len(todo))
            for check in todo:
                bar.update(task, description=f"checking {check.name}")
                result = run_check(check, secrets)
                failed += not result.ok
                echo_beside(bar, result.line())
                bar.advance(task)
        if failed:
            click.echo(f"{failed} of {len(todo)} checks failed", err=True)
            raise SystemExit(1)

    return [backup, restore, status, doctor]
