"""Retrying a lost race on an Iceberg commit: exponential back-off with full jitter.

Under contention a commit may need dozens of attempts (measured: up to 50 immediate retries),
so waits grow quickly but stay short, and random so the losers do not collide again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pyiceberg.exceptions import CommitFailedException, ValidationException

from ampup_memory.errors import ServiceUnavailable

T = TypeVar("T")
# Both guarantee the commit did not land: CommitFailed (a requirement or the catalog's
# compare-and-set failed), Validation (pyiceberg's own rebase found its base gone).
LOST_RACE = (CommitFailedException, ValidationException)


@dataclass(frozen=True)
class Backoff:
    base: float = 0.002
    cap: float = 0.1  # a commit takes ~30-60 ms: waiting much longer only idles the writer
    deadline_seconds: float = 120.0

    def wait(self, attempt: int) -> float:
        return random.uniform(0, min(self.cap, self.base * 2 ** min(attempt, 16)))


def until_won(attempt: Callable[[], T], backoff: Backoff) -> tuple[T, int]:
    """Run ``attempt`` until it does not lose a race; returns its result and the losses."""
    deadline = time.monotonic() + backoff.deadline_seconds
    losses = 0
    while True:
        try:
            return attempt(), losses
        except LOST_RACE:
            losses += 1
            if time.monotonic() > deadline:
                raise ServiceUnavailable(
                    "The tables stayed busy; the write was not committed. Retry it.",
                    details={"conflicts": losses},
                ) from None
            time.sleep(backoff.wait(losses))
