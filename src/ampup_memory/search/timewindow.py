"""Find the time window a query names: "last March", "in Q3 2025", "yesterday", "2024-05-02".

``find_window(query, now, tz)`` returns the window as ``[start, end)`` in UTC and the query
with the time words removed (so "last March" does not also count as the keyword "march").
A window written as a calendar date with digits ("2025-11-20", "12 June 2025", "September
2024", "Q3 2025", "in 2023") keeps its date words as keywords too (``Window.words``): a
fact whose value or quote *is* that date is found by it, not only facts valid on that day.
The words are those written plus the ISO spelling's numbers ("12 June 2025" → 12, june,
2025, 06), because an index splits "2025-06-12" into the words 2025, 06, 12. Calendar
words are read in ``tz`` (an IANA name; UTC when not given): "yesterday" in Tokyo is a
different 24 hours than in London.

Understood, case-insensitively (the first match in the query wins):
  dates         2024-05-02, 2024-05, "May 2, 2024", "2 May 2024", "May 2"
  days          today, yesterday, "N days ago"
  named spans   this/last week, month, quarter, year; "last N days|weeks|months"
  months        "last March", "in March", "March 2024", "in March of 2024"
  since         "since" before a month, date, quarter or year ("since March", "since
                2024-05-02", "since Q3", "since 2023") runs from its start up to and
                including today
  quarters      "Q3 2025", "in Q3", "last quarter"
  years         "in 2023", "during 2023", "2023" (1900-2199 alone; after a month, a day
                or a quarter any four digits: "in November 1859")
A month or quarter named without a year means the latest one that has already begun
("in March" said in April 2025 is March 2025; said in February 2025 it is March 2024).
"last March" is the latest March before the current month. Weeks start on Monday.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ampup_memory.errors import field_error
from ampup_memory.search.tokenize import words
from ampup_memory.timefmt import utc_text

MONTHS = {
    name: i + 1
    for i, names in enumerate([
        ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"),
        ("may",), ("june", "jun"), ("july", "jul"), ("august", "aug"),
        ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
        ("december", "dec"),
    ])
    for name in names
}
_MONTH = "(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_YEAR = r"(?P<year>(?:19|20|21)\d\d)"  # a year alone: "in 2023", "2023"
# A year after a month, a day or a quarter is one whatever its century ("in November 1859",
# "4 July 1776"): were it left out, the month would be read as the latest one.
_DATE_YEAR = r"(?P<year>\d{4})"
MAX_ZONE_NAME = 64  # the longest IANA name has 32 characters
_UNITS = {"day": 1, "days": 1, "week": 7, "weeks": 7}


@dataclass(frozen=True)
class Window:
    start: datetime  # UTC, inclusive
    end: datetime  # UTC, exclusive
    text: str  # the words that named it
    words: tuple[str, ...] = ()  # keyword words of a written calendar date (see above)

    def wire(self) -> dict[str, str]:
        return {"start": _iso(self.start), "end": _iso(self.end), "text": self.text}


def _iso(value: datetime) -> str:
    return utc_text(value)


# Files below the tz database that name no zone of their own: "localtime" is the
# machine's zone (the same request would mean another day on another server),
# "posixrules" a default for POSIX strings, and right/ and posix/ copies of the zones.
_NOT_ZONES = re.compile(r"localtime|posixrules|(?:right|posix)/.*")


def zone(tz: str | None) -> ZoneInfo:
    """The named time zone, or a 422 for a name the system does not know."""
    if tz is None:
        return ZoneInfo("UTC")
    try:
        if len(tz) > MAX_ZONE_NAME or _NOT_ZONES.fullmatch(tz):
            raise ValueError(tz)
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # A zone name is a file name below the tz database: a folder ("America") or a name
        # longer than the file system allows is an OSError, not ZoneInfoNotFoundError.
        raise field_error(["tz"], f"unknown time zone {tz[:80]!r} (use an IANA name)"
                          ) from None


def _month_start(year: int, month: int) -> date:
    return date(year + (month - 1) // 12, (month - 1) % 12 + 1, 1)


def _add_months(day: date, months: int) -> date:
    return _month_start(day.year, day.month + months)


def _latest_begun(month: int, today: date, strictly_before: bool) -> int:
    """Year of the latest ``month`` that began by today (or before this month)."""
    if month < today.month or (month == today.month and not strictly_before):
        return today.year
    return today.year - 1


# Each pattern maps to a builder of (start date, end date) in local days.
Span = tuple[date, date]


def _iso_date(m: re.Match[str], today: date) -> Span | None:
    y, mo, d = int(m["y"]), int(m["m"]), m["d"]
    try:
        if d is None:
            start = date(y, mo, 1)
            return start, _add_months(start, 1)
        day = date(y, mo, int(d))
    except ValueError:
        return None
    return day, day + timedelta(days=1)


def _named_day(m: re.Match[str], today: date) -> Span | None:
    mo = MONTHS[m["month"].lower()]
    year = int(m["year"]) if m["year"] else None
    try:
        if year is None:
            day = date(today.year, mo, int(m["day"]))
            if day > today:
                day = date(today.year - 1, mo, int(m["day"]))
        else:
            day = date(year, mo, int(m["day"]))
    except ValueError:
        return None
    return day, day + timedelta(days=1)


def _relative_day(m: re.Match[str], today: date) -> Span:
    word = m["word"].lower()
    day = today if word == "today" else today - timedelta(days=1)
    return day, day + timedelta(days=1)


def _days_ago(m: re.Match[str], today: date) -> Span:
    step = _UNITS[m["unit"].lower()]  # "2 weeks ago" is that whole week-long span
    day = today - timedelta(days=int(m["n"]) * step)
    return day, day + timedelta(days=step)


def _last_n(m: re.Match[str], today: date) -> Span:
    n, unit = int(m["n"]), m["unit"].lower().rstrip("s")
    end = today + timedelta(days=1)
    if unit == "month":
        return _add_months(today, -n), end
    if unit == "year":
        return date(today.year - n, today.month, min(today.day, 28)), end
    return end - timedelta(days=n * _UNITS[unit + "s"]), end


def _this_last(m: re.Match[str], today: date) -> Span:
    back = 1 if m["which"].lower() in ("last", "previous", "past") else 0
    unit = m["unit"].lower()
    if unit == "week":
        monday = today - timedelta(days=today.weekday()) - timedelta(weeks=back)
        return monday, monday + timedelta(weeks=1)
    if unit == "month":
        start = _add_months(_month_start(today.year, today.month), -back)
        return start, _add_months(start, 1)
    if unit == "quarter":
        q_month = (today.month - 1) // 3 * 3 + 1
        start = _add_months(_month_start(today.year, q_month), -3 * back)
        return start, _add_months(start, 3)
    year = today.year - back
    return date(year, 1, 1), date(year + 1, 1, 1)


def _quarter(m: re.Match[str], today: date) -> Span:
    q = int(m["q"])
    q_month = (q - 1) * 3 + 1
    if m["year"]:
        year = int(m["year"])
    else:
        year = _latest_begun(q_month, today, strictly_before=m["last"] is not None)
    start = date(year, q_month, 1)
    return start, _add_months(start, 3)


def _month(m: re.Match[str], today: date) -> Span:
    mo = MONTHS[m["month"].lower()]
    if m["year"]:
        year = int(m["year"])
    else:
        year = _latest_begun(mo, today, strictly_before=(m["pre"] or "").lower() == "last")
    start = date(year, mo, 1)
    return start, _add_months(start, 1)


def _year(m: re.Match[str], today: date) -> Span:
    year = int(m["year"])
    return date(year, 1, 1), date(year + 1, 1, 1)


_B = r"(?<![\w-])"  # word start that is not inside a longer token
_E = r"(?![\w-])"
PATTERNS = [
    (re.compile(_B + r"(?:on\s+|(?P<since>(?i:since))\s+)?(?P<y>\d{4})-(?P<m>\d\d)"
                r"(?:-(?P<d>\d\d))?" + _E), _iso_date),
    (re.compile(_B + r"(?:on\s+|(?P<since>since)\s+)?" + _MONTH
                + r"\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?"
                r"(?:,?\s+" + _DATE_YEAR + ")?" + _E, re.I), _named_day),
    (re.compile(_B + r"(?:on\s+|(?P<since>since)\s+)?(?P<day>\d{1,2})(?:st|nd|rd|th)?\s+"
                + _MONTH
                + r"(?:,?\s+" + _DATE_YEAR + ")?" + _E, re.I), _named_day),
    (re.compile(_B + r"(?P<word>today|yesterday)" + _E, re.I), _relative_day),
    (re.compile(_B + r"(?P<n>\d{1,3})\s+(?P<unit>days?|weeks?)\s+ago" + _E, re.I), _days_ago),
    (re.compile(_B + r"(?:in\s+|over\s+|during\s+)?(?:the\s+)?(?:last|past)\s+(?P<n>\d{1,3})"
                r"\s+(?P<unit>days|weeks|months|years)" + _E, re.I), _last_n),
    (re.compile(_B + r"(?:in\s+|during\s+|(?P<since>since)\s+)?(?:the\s+)?"
                r"(?P<last>last\s+)?q(?P<q>[1-4])"
                r"(?:\s+(?:of\s+)?" + _DATE_YEAR + ")?" + _E, re.I), _quarter),
    (re.compile(_B + r"(?:in\s+|during\s+)?(?P<which>this|last|previous|past)\s+"
                r"(?P<unit>week|month|quarter|year)" + _E, re.I), _this_last),
    (re.compile(_B + r"(?:(?P<pre>in|during|last|this|since|of)\s+)?" + _MONTH
                + r"(?:,?\s+(?:of\s+)?" + _DATE_YEAR + ")?" + _E, re.I), _month),
    (re.compile(_B + r"(?:(?:in|during)\s+|(?P<since>since)\s+)?" + _YEAR + _E, re.I), _year),
]


def _since(m: re.Match[str]) -> bool:
    """Whether "since" opens the match: its own group, or a month's preposition."""
    groups = m.groupdict()
    return bool(groups.get("since")) or (groups.get("pre") or "").lower() == "since"


def _month_needs_context(m: re.Match[str]) -> bool:
    # A bare month word may be an ordinary word ("may", "march", "sep"): it names a month
    # only after a preposition or before a year.
    return m.re.pattern.find("(?P<pre>") >= 0 and not m["pre"] and not m["year"]


_CALENDAR = (_iso_date, _named_day, _quarter, _month, _year)


def _date_words(m: re.Match[str], build: object, span: Span | None) -> tuple[str, ...]:
    """The keyword words of a written calendar date (none for a relative window)."""
    text = m.group(0)
    if span is None or build not in _CALENDAR or not any(c.isdigit() for c in text):
        return ()
    found = [w for w in words(text)
             if w.isdigit() or w in MONTHS or re.fullmatch(r"q[1-4]", w)]
    first = span[0]
    if build is _named_day:  # its ISO spelling: the month and day as two digits
        found += [f"{first:%m}", f"{first:%d}"]
    elif build is _month and m["year"]:
        found.append(f"{first:%m}")
    return tuple(dict.fromkeys(found))


def _utc_bounds(span: Span, zone_info: ZoneInfo) -> tuple[datetime, datetime]:
    first, last = span
    return (datetime.combine(first, time(), zone_info).astimezone(UTC),
            datetime.combine(last, time(), zone_info).astimezone(UTC))


def find_window(query: str, now: datetime, tz: str | None = None) -> tuple[Window | None, str]:
    """The window the query names (or None) and the query without those words."""
    zone_info = zone(tz)
    today = now.astimezone(zone_info).date()
    best: tuple[int, re.Match[str], tuple[datetime, datetime], tuple[str, ...]] | None = None
    for pattern, build in PATTERNS:
        for m in pattern.finditer(query):
            if build is _month and _month_needs_context(m):
                continue
            try:
                span = build(m, today)
                if span and _since(m):
                    # "since June", "since 2024-05-02": from then up to and including
                    # today, not through June or that day alone.
                    span = span[0], max(span[1], today + timedelta(days=1))
                bounds = span and _utc_bounds(span, zone_info)
            except (ValueError, OverflowError):
                # "9999-12-31" or "0001-01-01" in a far zone: no representable window, so
                # the words are ordinary query words.
                continue
            if not bounds:
                continue
            if best is None or m.start() < best[0]:
                best = (m.start(), m, bounds, _date_words(m, build, span))
            break
    if best is None:
        return None, query
    _, m, (start, end), date_words = best
    rest = (query[: m.start()] + " " + query[m.end():]).strip()
    return Window(start, end, m.group(0).strip(), date_words), re.sub(r"\s{2,}", " ", rest)
