"""How long passes tell a caller (a CLI progress bar) how far they are."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int], None]  # (items done, items in all)


def ticker(progress: Progress | None, total: int) -> Callable[[], None]:
    """A function to call once per item done: it tells ``progress`` (done, total). The
    start, (0, total), is told at once, so a bar shows its size before the first item."""
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    if progress is not None:
        progress(0, total)
    return tick
