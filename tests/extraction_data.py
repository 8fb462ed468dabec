"""The deals schema, episode text and model answers extraction is tested and benchmarked
with (tests/test_extraction.py, benchmarks/extract_bench.py): one copy of the fixture data."""

from __future__ import annotations

from typing import Any

DEALS = {"name": "deals", "entities": [
    {"name": "deal", "attributes": [
        {"name": "stage", "type": "enum", "values": ["open", "won", "lost"]},
        {"name": "amount", "type": "money", "currency": "USD"},
        {"name": "close_date", "type": "date"}]}],
    "extract": [{"episode_types": ["doc"],
                 "targets": {"deal": ["stage", "amount", "close_date"]}}]}
BODY = ("The Acme deal\nis now won.\n\nThey signed for $50k in total.\n\n"
        "Close date is 2025-07-01.")
WHEN = "2025-06-02T09:00:00Z"


def fact(entity: str, predicate: str, value: Any, unit: int, quote: str) -> dict[str, Any]:
    return {"entity": entity, "predicate": predicate, "value": value, "unit": unit,
            "quote": quote}


GOOD = [fact("deal:acme", "stage", "won", 1, "Acme deal is now  won"),  # whitespace differs
        fact("deal:acme", "amount", "$50k", 2, "signed for $50k")]
BAD = [fact("deal:acme", "close_date", "2025-07-01", 2, "Close date is 2025-07-01"),  # unit 3's
       fact("deal:acme", "amount", "$90k", 2, "signed for $90k"),  # hallucinated
       fact("deal:acme", "stage", "maybe", 1, "is now won"),  # not one of the enum's values
       fact("deal:acme", "close_date", 17, 3, "2025-07-01"),  # a number is no date
       fact("deal:acme", "owner", "ann", 1, "Acme deal"),  # no such attribute
       fact("deal:acme", "stage", "won", 9, "won")]  # no such unit
