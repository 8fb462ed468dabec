"""Three agents, one memory: customer service shares a preference with billing only.

    python examples/multi_agent_demo.py              # starts its own server (embedded default)
    python examples/multi_agent_demo.py --url http://127.0.0.1:8765   # use a running one

Exits non-zero if any step misbehaves.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from ampup_memory.client import AccessDeniedError, AMPClient, AMPError


@contextmanager
def embedded_server() -> Iterator[str]:
    """`ampup-memory serve` on a free port with a throwaway home folder."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = tempfile.mkdtemp(prefix="ampup-demo-")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ampup_memory.cli", "serve", "--port", str(port)],
        env={**os.environ, "AMPUP_MEMORY_HOME": home},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise SystemExit("the server did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(home, ignore_errors=True)


def check(ok: bool, what: str) -> None:
    print(("  ok    " if ok else "  WRONG ") + what)
    if not ok:
        raise SystemExit(1)


def demo(url: str) -> None:
    run = uuid.uuid4().hex[:6]  # fresh ids, so the demo can run against any server
    user = f"user_{run}"
    cs = AMPClient(url, "agent_customer_service")
    billing = AMPClient(url, f"agent_billing_{run}")
    marketing = AMPClient(url, f"agent_marketing_{run}")

    print("1. customer service stores a contact preference, shared with agent_billing_*")
    cell = cs.remember("Prefers email over phone; keep messages short.", user,
                       readable_by=["agent_billing_*"], importance=0.8)
    check(cell["access_policy"]["readable_by"] == ["agent_billing_*"], f"stored {cell['id']}")

    print("2. billing searches for it")
    found = billing.recall("how does the customer want to be contacted", user)
    said = f"billing found: {found[0]['content']['text']!r}" if found else "billing found nothing"
    check([c["id"] for c in found] == [cell["id"]], said)

    print("3. marketing asks the same question")
    check(marketing.recall("how does the customer want to be contacted", user) == [],
          "marketing found nothing")
    errors = []
    for memory_id in (cell["id"], f"mem_{uuid.uuid4().hex[:26].upper()}"):
        try:
            marketing.get_memory(memory_id)
        except AccessDeniedError as exc:
            errors.append((exc.status_code, exc.code, str(exc)))
    check(len(errors) == 2 and errors[0] == errors[1],
          f"the real id and a made-up id both answer {errors[0][0]} {errors[0][1]}: "
          "marketing cannot tell whether the memory exists")
    print("done: the memory was shared exactly as its policy says.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="a running server (default: start an embedded one)")
    args = parser.parse_args()
    try:
        if args.url:
            demo(args.url)
        else:
            with embedded_server() as url:
                demo(url)
    except AMPError as exc:  # a server that refuses a step is a failed demo, not a crash
        print(f"  WRONG the server answered {exc.status_code} {exc.code}: {exc}")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
