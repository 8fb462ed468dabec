"""docs/schemas-and-queries.md's worked example runs as written against a real server.

As in test_branches_doc.py: the ```bash blocks run in order in one bash; each ```text block
after a bash block lists lines that block's output must contain; every block exits 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import doc_blocks
from tests.memory_support import ADMIN_TOKEN, QUIET, start
from tests.server_process import ServerProcess

DOC = Path(__file__).resolve().parent.parent / "docs" / "schemas-and-queries.md"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start(tmp_path_factory.mktemp("schemas-doc"), dict(QUIET))
    yield proc
    proc.stop()


def test_the_worked_example_runs(server: ServerProcess) -> None:
    blocks = doc_blocks.steps(DOC.read_text())
    assert len(blocks) >= 5 and all(expected for _, expected in blocks)
    outputs = doc_blocks.run(blocks, {"AMPUP": server.url, "AMPUP_ADMIN_TOKEN": ADMIN_TOKEN})
    for (block, expected), out in zip(blocks, outputs, strict=True):
        for line in expected:
            assert line in out, (block[:80], line, out[-2000:])
