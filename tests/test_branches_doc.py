"""docs/branches.md's worked example (its own section) runs as written against a real
server.

The ```bash blocks run in order in one bash (their variables carry over, as in one
terminal); each ```text block after a bash block lists lines that block's output must
contain. Every block must exit 0.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.memory_support import QUIET, start
from tests.server_process import ServerProcess

DOC = Path(__file__).resolve().parent.parent / "docs" / "branches.md"
MARK = "=====block-end====="


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start(tmp_path_factory.mktemp("branches-doc"), dict(QUIET))
    yield proc
    proc.stop()


def test_the_worked_example_runs(server: ServerProcess) -> None:
    # The worked example is the page's "## A worked example" section; the workspace, pin
    # and snapshot sections after it are checked by their own tests.
    section = DOC.read_text().split("\n## A worked example\n", 1)[1].split("\n## ", 1)[0]
    fenced = re.findall(r"^```(\w*)\n(.*?)^```", section, re.S | re.M)
    steps: list[tuple[str, list[str]]] = []
    for lang, text in fenced:
        if lang == "bash":
            steps.append((text, []))
        elif lang == "text" and steps:
            steps[-1][1].extend(line for line in text.splitlines() if line.strip())
    assert len(steps) >= 6
    script = "set -e -o pipefail\n" + "".join(
        f"{block}\necho; echo {MARK}\n" for block, _ in steps)
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300,
                         env={"PATH": _path(), "AMPUP": server.url})
    assert ran.returncode == 0, ran.stderr
    outputs = ran.stdout.split(MARK)
    assert len(outputs) == len(steps) + 1
    for (block, expected), out in zip(steps, outputs, strict=False):
        for line in expected:
            assert line in out, (block[:80], line, out[-2000:])
        assert '"error"' not in out or expected, (block[:80], out)


def _path() -> str:
    import os

    return os.environ.get("PATH", "/usr/bin:/bin")
