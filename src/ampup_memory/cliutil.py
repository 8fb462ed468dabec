"""Small helpers every command module shares: the one-line error, JSON output, progress.

Light on purpose (click only; rich is imported when a progress bar is drawn), so the CLI
answers `--help` without loading the server stack.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from rich.progress import Progress


def count_type(maximum: int | None = None) -> click.IntRange:
    """The one rule of every count option (``--limit``, ``--batch``, ``--batch-size``,
    ``--max-*``): a whole number of at least 1 (and at most ``maximum``). 0 or less is a
    usage error naming the option, as a route refuses ``limit=0`` (422): "at most 0"
    would do nothing, and no option takes 0 to mean "no limit" (leave it out for that)."""
    return click.IntRange(min=1, max=maximum)


def error_line(message: str) -> None:
    """One line on stderr, for scripts: never a wrapped paragraph or a traceback."""
    click.echo(f"{click.style('error:', fg='red')} {' '.join(message.split())}", err=True)


def fail(message: str) -> NoReturn:
    """A command's error: one line on stderr, exit code 2."""
    error_line(message)
    sys.exit(2)


def no_model_line(role: str, outcome: str) -> None:
    """One stderr line for a model pass run with no model for its role: what did not
    happen, and the variables that configure one (a report's `"model": null` alone said
    neither). Exit code 0: no model is no failure."""
    click.echo(f"no {role} model configured: {outcome}; set AMPUP_MEMORY_MODEL_BASE_URL "
               f"and AMPUP_MEMORY_MODEL (or AMPUP_MEMORY_{role.upper()}_MODEL_*; "
               "docs/models.md)", err=True)


def fail_if_model_failed(failed: int, items: str, left: str, set_aside: int = 0) -> None:
    """The exit rule of every command that asks a model about items (``extract``; ``advice
    judge``, ``learn``, ``compile``), called once its report is printed: the model failed
    on any item, however many others it did, is one error line and exit 2 (a script sees
    that work was left); none failed, nothing happens (exit 0). ``items`` names what
    failed (``session(s)``), ``left`` what became of them. Items ``set_aside``
    (models/setaside.py) are no failure of this pass, but are said in one warning line:
    nothing else would tell that they are no longer asked."""
    if set_aside:
        click.echo(f"{click.style('warning:', fg='yellow')} {set_aside} {items} set aside: "
                   "no usable answer (of the wrong shape, or the request refused) on "
                   "several passes in a row; "
                   "a new model or changed inputs ask again (the log names each)", err=True)
    if failed:
        fail(f"the model failed on {failed} {items}; {left}")


INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C
_ctrl_c = threading.Event()


def watch_ctrl_c() -> None:
    """Remember that Ctrl-C came, then raise KeyboardInterrupt as Python's own handler does.
    A library that calls back into Python from native code (pydantic-core serialising
    Iceberg metadata) may wrap the KeyboardInterrupt in an error of its own: the command
    then still ends as interrupted (``ctrl_c_seen``), not with that error's traceback.
    Only where Python's handler is installed: ``serve`` installs its own later."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return

    def on_sigint(signum: int, frame: object) -> None:
        _ctrl_c.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)


def ctrl_c_seen() -> bool:
    return _ctrl_c.is_set()


def interrupted(message: str = "interrupted") -> NoReturn:
    """A command stopped by Ctrl-C: one line on stderr, exit code 130."""
    error_line(message)
    sys.exit(INTERRUPTED)


def dumps(data: Any, **kwargs: Any) -> str:
    """JSON for people and scripts alike: Unicode as itself, never ``\\u2026``."""
    return json.dumps(data, ensure_ascii=False, **kwargs)


def progress() -> Progress:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    class Bars(Progress):
        refused = False

        def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
            # A command refused before any work (a backup into a folder that is not
            # empty) printed its bar at 0 above its one error line.
            self.refused = exc_type is not None and not any(t.completed for t in self.tasks)
            if exc_type is None:
                # A pass that learns its size as it goes (`advice cluster`: scopes) ended
                # at `1/?`; done, what it did is all there was.
                for task in self.tasks:
                    if task.total is None:
                        self.update(task.id, total=task.completed)
            super().__exit__(exc_type, exc, tb)

        def stop(self) -> None:
            # Off a terminal rich ends the display with a newline, bar or none: a command
            # that failed before its first bar put a blank line above its one error line.
            if (self.tasks and not self.refused) or self.disable:
                super().stop()
                return
            self.live.transient = True
            self.live.stop()

    console = Console(stderr=True)
    # Off a terminal (a log, a pipe) the last state is one plain line, `maintenance:
    # 8/8 0:00:01`: forty bar glyphs there said nothing the count does not.
    columns = ((TextColumn("{task.description}"), BarColumn()) if console.is_terminal
               else (TextColumn("{task.description}:"),))
    return Bars(*columns, MofNCompleteColumn(), TimeElapsedColumn(), console=console)


def echo_beside(bar: Progress, line: str) -> None:
    """A command's stdout line while ``bar`` is drawn. On a terminal the bar (on stderr)
    holds the cursor at the end of its own line: a line echoed to stdout was written
    after the bar's text (`checking AMP store ━━━ 0/4 0:00:01ok    AMP store: …`), and,
    under two bars, partly erased by the next redraw. There it goes above the bars,
    through their console (stdout and stderr being that one terminal); off a terminal, to
    stdout as it is."""
    if bar.live.is_started and bar.console.is_terminal and sys.stdout.isatty():
        bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
    else:
        click.echo(line)


def task_progress(bar: Progress, description: str, total: int | None = None,
                  ) -> Callable[[int, int], None]:
    """A ``(done, total)`` callback that moves a new task of ``bar``: what the long passes
    report (`ampup_memory.progress`), drawn."""
    task = bar.add_task(description, total=total)
    return lambda done, total: bar.update(task, completed=done, total=total)


@contextmanager
def progress_if_work(description: str) -> Iterator[Callable[[int, int], None]]:
    """A ``(done, total)`` callback that draws a bar from its first call on: for a phase
    that only sometimes has work (`serve`'s re-embedding), so no bar shows when it has
    none."""
    bar: Progress | None = None
    task: Any = None

    def update(done: int, total: int) -> None:
        nonlocal bar, task
        if bar is None:
            bar = progress()
            bar.start()
            task = bar.add_task(description, total=total)
        bar.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if bar is not None:
            bar.stop()


def user_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A ``--user``: checked by the id rule every caller of the server follows
    (`memory.acl.require_id`) before anything is opened. `load`, `close`, `branch`,
    `merge`, `schema set` and `keys create` took any text, and wrote commits (or bound
    keys) to a user no request could ever be."""
    from ampup_memory.errors import AmpError
    from ampup_memory.memory.acl import require_id

    if value is None:
        return None
    try:
        return require_id(value, ["user"], "user id")
    except AmpError as exc:
        raise click.BadParameter(exc.message) from None


def acl_option(ctx: click.Context, param: click.Parameter,
               value: tuple[str, ...]) -> tuple[str, ...]:
    """``--acl`` entries, checked by the ACL rule (`memory.acl.normalize_acl`) as a usage
    error, before any record is read; none given stays none (the command's default)."""
    from ampup_memory.errors import AmpError
    from ampup_memory.memory.acl import normalize_acl

    if not value:
        return value
    try:
        normalize_acl(value, ["acl"])
    except AmpError as exc:
        raise click.BadParameter(exc.message) from None
    return value
