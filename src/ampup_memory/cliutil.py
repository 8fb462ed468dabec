"""Small helpers every command module shares: the one-line error, JSON output, progress.

Light on purpose (click only; rich is imported when a progress bar is drawn), so the CLI
answers `--help` without loading the server stack.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from rich.progress import Progress


def error_line(message: str) -> None:
    """One line on stderr, for scripts: never a wrapped paragraph or a traceback."""
    click.echo(f"{click.style('error:', fg='red')} {' '.join(message.split())}", err=True)


def fail(message: str) -> NoReturn:
    """A command's error: one line on stderr, exit code 2."""
    error_line(message)
    sys.exit(2)


INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C


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

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True))


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
