"""The suite's file order (tests/conftest.py, LONGEST_FIRST) names files that exist: a
renamed or removed file would drop out of it silently and could run last again."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FIRST


def test_the_longest_first_list_names_test_files_once() -> None:
    here = Path(__file__).parent
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    assert [name for name in LONGEST_FIRST if not (here / name).is_file()] == []
    assert all(name.startswith("test_") and name.endswith(".py") for name in LONGEST_FIRST)
