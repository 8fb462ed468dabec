#!/usr/bin/env python3
"""AMP v0.1 conformance suite: talks to a server over HTTP and nothing else.

Usage::

    python conformance/amp_conformance.py --base-url http://127.0.0.1:8765
    python conformance/amp_conformance.py --base-url URL --admin-token TOKEN
    python conformance/amp_conformance.py --base-url URL --api-key-mode \
        --key-command 'ampup-memory keys create --agent {agent}'
    python conformance/amp_conformance.py --base-url URL -k pattern_ -k listing

Every rule of the AMP v0.1 wire contract is one named vector: a small function
registered with ``@vector(name, group)``. A vector either returns (PASS), raises
``Fail`` (FAIL) or raises ``Skip`` (SKIP: it could not verify anything, for
example because it needs the admin credential and none was given). Skips are
counted in neither passed nor failed.

Output: one ``PASS name`` / ``FAIL name: reason`` / ``SKIP name: why`` line per
vector, then exactly one summary line ``N passed, M failed`` (with
``, K skipped`` appended when K > 0). The exit code is 0 iff M == 0.

The suite imports nothing from any server implementation (only the standard
library and httpx). This file is the command-line entry; the vectors live in
``amp_suite/``, one module per area, around one shared runner (``amp_suite/runner.py``).
Every run makes up fresh agent and owner ids (a random run id is part of each), so it
can run any number of times against one server.

Vectors in the "lifecycle" group run the lifecycle engine with a ``now`` far in
the future; that changes the status of every cell on the server (the engine's
passes are global). Point the suite at a test server, not at one holding data
you care about, when you pass --admin-token.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this folder is on sys.path already; imported from elsewhere, it is not.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from amp_suite import VECTORS, main  # noqa: E402

__all__ = ["VECTORS", "main"]

if __name__ == "__main__":
    sys.exit(main())
