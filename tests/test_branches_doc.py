"""docs/branches.md's worked example (its own section) runs as written against a real
server.

The ```bash blocks run in order in one bash (their variables carry over, as in one
terminal); each ```text block after a bash block lists lines that block's output must
contain. Every block must exit 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import doc_blocks
from tests.memory_support import QUIET, start
from tests.server_process import ServerProcess

DOC = Path(__file__).resolve().parent.parent / "docs" / "branches.md"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start(tmp_path_factory.mktemp("branches-doc"), dict(QUIET))
    yield proc
    proc.stop()


def test_the_worked_example_runs(server: ServerProcess) -> None:
    # The worked example is the page's "## A worked example" section; the workspace, pin
    # and snapshot sections after it are checked by their own tests.
    section = DOC.read_text().split("\n## A worked example\n", 1)[1].split("\n## ", 1)[0]
    blocks = doc_blocks.steps(section)
    assert len(blocks) >= 6
    outputs = doc_blocks.run(blocks, {"AMPUP": server.url})
    for (block, expected), out in zip(blocks, outputs, strict=True):
        for line in expected:
            assert line in out, (block[:80], line, out[-2000:])
        assert '"error"' not in out or expected, (block[:80], out)
