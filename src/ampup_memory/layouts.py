"""The one rule for a store's recorded layout version, shared by the AMP cell store and the
read index.

A store records the version of its layout when it is made. A process that finds an older
one upgrades it (the cell store in place, the read index by rebuilding it from the
tables); one that finds a newer one, written by a newer AmpUp Memory, refuses to touch it:
two versions sharing a home would otherwise keep undoing each other's work.
"""

from __future__ import annotations

from ampup_memory.errors import ConfigurationError


def stored_version(text: str | None) -> int | None:
    """The recorded version as an integer (``"10"`` is newer than ``"9"``), or None when
    none is recorded. A record that is no integer was never written by any version: it
    reads as 0, older than every real one, so it is upgraded rather than refused."""
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return 0


def newer_layout(what: str, found: int, known: int, remedy: str) -> ConfigurationError:
    """The refusal of a layout newer than this version knows: one line that says what to
    do (``remedy``)."""
    return ConfigurationError(
        f"{what} was written by a newer AmpUp Memory (layout version {found}; this version "
        f"knows up to {known}): {remedy}")
