from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ampup_memory.errors import ValidationFailed
from ampup_memory.search.timewindow import find_window

NOW = datetime(2025, 4, 15, 12, 0, tzinfo=UTC)  # a Tuesday


def d(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "start", "end", "rest"),
    [
        ("Acme budget last March", "2025-03-01", "2025-04-01", "Acme budget"),
        ("last April", "2024-04-01", "2024-05-01", ""),
        ("plans in April", "2025-04-01", "2025-05-01", "plans"),
        ("plans in June", "2024-06-01", "2024-07-01", "plans"),
        ("deals in Q3 2025", "2025-07-01", "2025-10-01", "deals"),
        ("deals in Q3", "2024-07-01", "2024-10-01", "deals"),
        ("this quarter", "2025-04-01", "2025-07-01", ""),
        ("last quarter", "2025-01-01", "2025-04-01", ""),
        ("who called yesterday", "2025-04-14", "2025-04-15", "who called"),
        ("today", "2025-04-15", "2025-04-16", ""),
        ("notes 2024-05-02", "2024-05-02", "2024-05-03", "notes"),
        ("the 2024-05 report", "2024-05-01", "2024-06-01", "the report"),
        ("May 2, 2024 call", "2024-05-02", "2024-05-03", "call"),
        ("2 May 2024", "2024-05-02", "2024-05-03", ""),
        ("last week standup", "2025-04-07", "2025-04-14", "standup"),
        ("this week", "2025-04-14", "2025-04-21", ""),
        ("last month", "2025-03-01", "2025-04-01", ""),
        ("revenue in 2023", "2023-01-01", "2024-01-01", "revenue"),
        ("March 2024 pricing", "2024-03-01", "2024-04-01", "pricing"),
        ("3 days ago", "2025-04-12", "2025-04-13", ""),
        ("last 7 days", "2025-04-09", "2025-04-16", ""),
        ("deals since June", "2024-06-01", "2025-04-16", "deals"),
        ("since April", "2025-04-01", "2025-05-01", ""),
        ("since March 2025", "2025-03-01", "2025-04-16", ""),
        ("since 2024-11-01", "2024-11-01", "2025-04-16", ""),
        ("notes Since 2025-02 today", "2025-02-01", "2025-04-16", "notes today"),
        ("since May 2, 2024", "2024-05-02", "2025-04-16", ""),
        ("since 2 May 2024", "2024-05-02", "2025-04-16", ""),
        ("since Q3 2024", "2024-07-01", "2025-04-16", ""),
        ("deals since 2023", "2023-01-01", "2025-04-16", "deals"),
        ("since 2026", "2026-01-01", "2027-01-01", ""),
        # a year after a month, a day or a quarter is that year, whatever its century (it
        # was left out: "in November 1859" read as the latest November)
        ("Darwin published in November 1859", "1859-11-01", "1859-12-01", "Darwin published"),
        ("treaty signed 4 July 1776", "1776-07-04", "1776-07-05", "treaty signed"),
        ("in Q3 1850", "1850-07-01", "1850-10-01", ""),
        ("during March of 2250", "2250-03-01", "2250-04-01", ""),
    ],
)
def test_windows(query: str, start: str, end: str, rest: str) -> None:
    window, remaining = find_window(query, NOW)
    assert window is not None
    assert (window.start, window.end) == (d(start), d(end))
    assert remaining == rest


@pytest.mark.parametrize("query", ["may I ask about Acme", "march on", "Acme budget", "Q5",
                                   "founded in 1850", "in Q4 9999", "in March 0000"])
def test_no_window(query: str) -> None:
    window, remaining = find_window(query, NOW)
    assert window is None and remaining == query


def test_time_zone_moves_calendar_days() -> None:
    window, _ = find_window("yesterday", NOW, "Asia/Tokyo")
    assert window is not None
    # 2025-04-14 in Tokyo (UTC+9) starts at 15:00 UTC the day before.
    assert window.start == datetime(2025, 4, 13, 15, tzinfo=UTC)
    assert window.end == datetime(2025, 4, 14, 15, tzinfo=UTC)


def test_unknown_time_zone_is_a_422() -> None:
    with pytest.raises(ValidationFailed):
        find_window("yesterday", NOW, "Mars/Olympus")


@pytest.mark.parametrize(("query", "tz"), [
    ("price 9999-12-31", None), ("price 9999-12", None), ("price 0001-01-01", "Asia/Tokyo"),
    ("price 0001-01", "Asia/Tokyo"), ("9999-12-31", "Pacific/Kiritimati"),
])
def test_dates_at_the_calendar_edge_are_ordinary_words(query: str, tz: str | None) -> None:
    """A date whose window cannot be represented (its next day or its zone shift leaves
    the calendar) is not a window: the query keeps the words, nothing raises."""
    window, remaining = find_window(query, NOW, tz)
    assert window is None and remaining == query
