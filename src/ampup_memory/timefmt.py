"""How timestamps are spelled on the wire and in stores, and which instants are accepted.

Both faces use these functions, so an AMP cell and an AmpUp episode spell the same
instant the same way (apart from AMP's fixed-width fraction).

Accepted instants: any RFC 3339 time with an offset whose UTC form falls in years
0001–9999 (`Instant`); "0001-01-01T00:00:00+14:00" is the year 0 in UTC, so it is a 422,
never an ``OverflowError`` deep inside a route. Every time stored or compared as text is
spelled by `format_time` (fixed width, zero-padded year) and read back by `parse_time`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BeforeValidator,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from ampup_memory.errors import field_error


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


# The start of an RFC 3339 date-time. Pydantic alone also reads a number, or a string of
# digits, as seconds since 1970 ("1741100000" was stored as 2025-03-04T14:53:20Z), and a
# query parameter always arrives as a string: only date-time text is a time here.
_DATE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}")
_PARSE = TypeAdapter(datetime)


def rfc3339_text(value: object) -> object:
    """A string that reads as an RFC 3339 date-time, parsed (the offset is checked after);
    any other string, digits included, a 422. Other values are left to the field's rule."""
    if not isinstance(value, str):
        return value
    if not _DATE_TIME.match(value):
        raise PydanticCustomError("datetime_parsing", "Input should be an RFC 3339 time "
                                  "with an offset, e.g. 2025-07-01T00:00:00Z")
    try:  # parsed here because a strict field takes no string once a validator ran first
        return _PARSE.validate_python(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise PydanticCustomError(first["type"], first["msg"]) from None


# Every datetime a client sends (AMP and AmpUp bodies, query parameters, MCP tool arguments):
# RFC 3339 with an offset, normalised to UTC, refused (422) when UTC cannot hold it.
Instant = Annotated[AwareDatetime, BeforeValidator(rfc3339_text), AfterValidator(in_utc)]


# A time to live (workspaces, pins): one or more <number><unit> parts, units s, m, h, d, w,
# e.g. "30m", "1h", "7d", "1d12h". Positive and at most MAX_TTL; anything else is a 422.
# ASCII digits only, as the published pattern says: Python's \d also takes "１" or "٣",
# which ECMA-262's (a client checking the schema) does not.
_TTL_PART = re.compile(r"([0-9]{1,9})([smhdw])")
_TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_TTL = timedelta(days=366)
TTL_PATTERN = r"^\s*([0-9]{1,9}[smhdwSMHDW])+\s*$"  # what the OpenAPI schema publishes
# A request's ttl field: the schema publishes the rule, `parse_ttl` checks it, so a bad one
# is a 422 that says how to write one rather than pydantic's "should match pattern '^\s*…'".
TTL_SCHEMA = {"type": "string", "pattern": TTL_PATTERN, "maxLength": 32,
              "description": "Time to live: a number and a unit s, m, h, d or w (e.g. 30s, "
              "1h, 7d; parts may follow each other: 1d12h); more than zero, at most 366d."}
TtlText = Annotated[str, WithJsonSchema(TTL_SCHEMA)]


def duration_seconds(text: str) -> int | None:
    """Seconds of a duration written as one or more <number><unit> parts, units s, m, h,
    d, w (``"30m"``, ``"7d"``, ``"1d12h"``; case and outer spaces ignored); None when it is
    not one. The one spelling of a duration: times to live, key lifetimes, grace periods.
    Each caller bounds the value its own way."""
    spelled = text.strip().lower()
    parts = _TTL_PART.findall(spelled)
    if not parts or len(spelled) > 32 or "".join(n + u for n, u in parts) != spelled:
        return None
    return sum(int(n) * _TTL_UNITS[u] for n, u in parts)


def parse_ttl(text: object, loc: list[str | int], maximum: timedelta = MAX_TTL) -> timedelta:
    """``"7d"`` → ``timedelta(days=7)``, or a 422 on ``loc`` naming the rule (``0s``,
    ``-1d``, garbage, more than ``maximum``)."""
    rule = ("use a positive time to live: a number and a unit s, m, h, d or w, e.g. 30m, "
            "1h, 7d (parts may follow each other: 1d12h)")
    if not isinstance(text, str) or not text.strip() or len(text) > 32:
        raise field_error(loc, rule, "ttl_invalid")
    seconds = duration_seconds(text)
    if seconds is None:
        raise field_error(loc, f"{text[:32]!r}: {rule}", "ttl_invalid")
    if seconds <= 0:
        raise field_error(loc, f"{text!r}: a time to live must be more than 0 seconds",
                          "ttl_invalid")
    if seconds > maximum.total_seconds():
        raise field_error(loc, f"{text!r}: a time to live is at most {maximum.days} days",
                          "ttl_too_long")
    return timedelta(seconds=seconds)
