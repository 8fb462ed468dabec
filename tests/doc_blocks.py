"""Running a doc page's worked example: its ```bash blocks in order in one bash (variables
carry over, as in one terminal); each ```text block after a bash block lists lines that
block's output must contain."""

from __future__ import annotations

import os
import re
import subprocess

MARK = "=====block-end====="


def steps(text: str) -> list[tuple[str, list[str]]]:
    """(bash block, lines its output must contain), in page order."""
    fenced = re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
    out: list[tuple[str, list[str]]] = []
    for lang, block in fenced:
        if lang == "bash":
            out.append((block, []))
        elif lang == "text" and out:
            out[-1][1].extend(line for line in block.splitlines() if line.strip())
    return out


def run(blocks: list[tuple[str, list[str]]], env: dict[str, str]) -> list[str]:
    """Each block's output; bash stops at the first failing command (asserted exit 0)."""
    script = "set -e -o pipefail\n" + "".join(
        f"{block}\necho; echo {MARK}\n" for block, _ in blocks)
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env})
    assert ran.returncode == 0, ran.stderr
    outputs = ran.stdout.split(MARK)
    assert len(outputs) == len(blocks) + 1
    return outputs[:-1]
