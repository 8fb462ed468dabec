"""docs/schemas-and-queries.md's worked example runs as written against a real server.

As in test_branches_doc.py: the ```bash blocks run in order in one bash; each ```text block
after a bash block lists lines that block's output must contain; every block exits 0.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.memory_support import ADMIN_TOKEN, QUIET, start
from tests.server_process import ServerProcess

DOC = Path(__file__).resolve().parent.parent / "docs" / "schemas-and-queries.md"
MARK = "=====block-end====="


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start(tmp_path_factory.mktemp("schemas-doc"), dict(QUIET))
    yield proc
    proc.stop()


def test_the_worked_example_runs(server: ServerProcess) -> None:
    fenced = re.findall(r"^```(\w*)\n(.*?)^```", DOC.read_text(), re.S | re.M)
    steps: list[tuple[str, list[str]]] = []
    for lang, text in fenced:
        if lang == "bash":
            steps.append((text, []))
        elif lang == "text" and steps:
            steps[-1][1].extend(line for line in text.splitlines() if line.strip())
    assert len(steps) >= 5 and all(expected for _, expected in steps)
    script = "set -e -o pipefail\n" + "".join(
        f"{block}\necho; echo {MARK}\n" for block, _ in steps)
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                              "AMPUP": server.url, "AMPUP_ADMIN_TOKEN": ADMIN_TOKEN})
    assert ran.returncode == 0, ran.stderr
    outputs = ran.stdout.split(MARK)
    assert len(outputs) == len(steps) + 1
    for (block, expected), out in zip(steps, outputs, strict=False):
        for line in expected:
            assert line in out, (block[:80], line, out[-2000:])
