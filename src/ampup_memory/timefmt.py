"""How timestamps are spelled on the wire: RFC 3339, UTC, with a ``Z``.

Both faces use these two functions, so an AMP cell and an AmpUp episode spell the same
instant the same way (apart from AMP's fixed-width fraction)."""

from __future__ import annotations

from datetime import UTC, datetime


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds and a ``Z``: AMP's spelling (fixed width, so
    stored strings sort like the instants they name)."""
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def utc_text(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``; fractions only when the instant has them."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
