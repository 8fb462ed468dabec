"""The AMP v0.1 conformance suite as a package: one module per area, one shared runner.

The area modules register their vectors on import, and the import order below is the
run order (the lifecycle vectors move every cell on the server, so they run last but for
the key vectors). ``conformance/amp_conformance.py`` is the command-line entry.
"""

from __future__ import annotations

# The order of these imports is the order the vectors run in.
# isort: off
from . import errors, cells, access, updates, paging, limits, lifecycle, keys  # noqa: F401
# isort: on
from .runner import VECTORS, main

__all__ = ["VECTORS", "main"]
