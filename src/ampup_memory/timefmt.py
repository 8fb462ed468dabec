"""How timestamps are spelled on the wire and in stores, and which instants are accepted.

Both faces use these functions, so an AMP cell and an AmpUp episode spell the same
instant the same way (apart from AMP's fixed-width fraction).

Accepted instants: any RFC 3339 time with an offset whose UTC form falls in years
0001–9999 (`Instant`); "0001-01-01T00:00:00+14:00" is the year 0 in UTC, so it is a 422,
never an ``OverflowError`` deep inside a route. Every time stored or compared as text is
spelled by `format_time` (fixed width, zero-padded year) and read back by `parse_time`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds and a ``Z``: AMP's spelling and the one spelling of
    every time stored as text (fixed width with a four-digit year, so stored strings sort
    like the instants they name, year 0999 included)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    """A time `format_time` wrote, in UTC. Also reads a year written without its leading
    zeros ("999-01-01T…", as the search index once stored years before 1000), so such a
    row reads back until ``ampup-memory index rebuild`` rewrites it."""
    year, dash, rest = text.partition("-")
    if dash and year.isdigit() and len(year) < 4:
        text = year.zfill(4) + dash + rest
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utc_text(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``; fractions only when the instant has them."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def in_utc(value: datetime) -> datetime:
    """The same instant in UTC; ``ValueError`` when UTC has no year 0001–9999 for it."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(
            f"{value.isoformat()} is outside years 0001-9999 once converted to UTC"
        ) from None


# Every datetime a client sends (AMP and AmpUp bodies, query parameters, MCP tool arguments):
# RFC 3339 with an offset, normalised to UTC, refused (422) when UTC cannot hold it.
Instant = Annotated[AwareDatetime, AfterValidator(in_utc)]


_TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_TTL = timedelta(days=366)


def parse_ttl(text: str, loc: list[str | int]) -> timedelta:
    """A time to live: a whole number and one unit, ``30s``, ``15m``, ``1h``, ``7d``.

    Zero, negative, fractional or unitless values, anything else, and more than a year are
    a 422 at ``loc`` (raised here, so every route and command refuses the same way)."""
    from ampup_memory.errors import field_error  # errors imports nothing of ours

    raw = text.strip().lower() if isinstance(text, str) else ""
    number, unit = raw[:-1], raw[-1:]
    if not (unit in _TTL_UNITS and number.isascii() and number.isdigit()
            and len(number) <= 9):
        raise field_error(loc, "a time to live is a whole number and s, m, h or d "
                          "(e.g. 30s, 15m, 1h, 7d)", "ttl_invalid")
    ttl = timedelta(seconds=int(number) * _TTL_UNITS[unit])
    if ttl <= timedelta(0):
        raise field_error(loc, "a time to live must be more than zero", "ttl_invalid")
    if ttl > MAX_TTL:
        raise field_error(loc, "a time to live is at most a year (366d)", "ttl_invalid")
    return ttl
