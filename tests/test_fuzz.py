"""Property-based fuzzing of the whole API from its own OpenAPI schema (schemathesis).

Against a real server: no 5xx, no response that breaks the schema, no traceback in a body.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.server_process import ServerProcess


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home: Path = tmp_path_factory.mktemp("fuzz")
    with ServerProcess(home, env={"AMP_ADMIN_TOKEN": "fuzz-admin",
                                  "AMP_SCORING_PATCH_LIMIT": "0"}) as srv:
        yield srv


@pytest.fixture(scope="module")
def api_schema(fuzz_server: ServerProcess) -> Any:
    return schemathesis.openapi.from_url(f"{fuzz_server.url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


def _no_traceback(ctx: Any, response: Any, case: Any) -> None:
    text = response.text
    assert "Traceback" not in text and 'File "' not in text, text[:500]


# CI fuzzes the same examples every run (a red build must mean a regression, not a new
# random draw); FUZZ_RANDOM=1 draws fresh ones for a deeper local search.
RANDOM = os.environ.get("FUZZ_RANDOM", "") not in ("", "0")


@schema.parametrize()
@settings(max_examples=60 if RANDOM else 25, deadline=None, derandomize=not RANDOM,
          database=None, suppress_health_check=list(HealthCheck))
def test_api_never_fails(case: Any) -> None:
    case.headers = {**(case.headers or {}), "X-AMP-Agent-ID": "fuzz_agent",
                    "X-AMP-Admin-Token": "fuzz-admin"}
    response = case.call()
    assert response.status_code < 500, (case.method, case.path, response.text[:500])
    _no_traceback(None, response, case)
    case.validate_response(response)
