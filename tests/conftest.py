from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.model_support import ScriptedModel
from tests.pg import postgres  # noqa: F401  (session fixture shared by all tests)
from tests.server_process import ServerProcess, plain_client

ADMIN_TOKEN = "test-admin-token"

# The longest test files, longest first (their tests' seconds summed, on the 2-core CI
# machine: docs/testing.md, "Keeping the suite's time down"). `--dist=loadfile` gives each
# worker one whole file at a time, in collection order, and xdist by default puts the files
# with most tests first: long files of a few tests (the branch writers, the fuzz run, the
# reranker lines) came last, and one core ran them while the other sat idle. Started first,
# they leave the short files to fill in at the end. Files not listed follow, most tests
# first (xdist's own order); a new file of a minute or more belongs in this list.
LONGEST_FIRST = (
    "test_schemas.py", "test_rerank.py", "test_branch_safety.py", "test_cli.py",
    "test_fuzz.py", "test_workspaces.py", "test_branches.py", "test_bad_input.py",
    "test_advice_runs.py", "test_extraction.py", "test_fleet.py",
    "test_amp_pg_owner_search.py", "test_search_feed.py", "test_advice_loop.py",
    "test_index_contract.py", "test_edge_inputs.py", "test_pg_outage.py",
    "test_conformance.py", "test_store_contract.py", "test_catalog_restore.py",
    "test_fleet_handover.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the files as LONGEST_FIRST says (pyproject's `--no-loadscope-reorder` keeps
    this order under xdist); a file's tests keep their order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    tests = Counter(item.path for item in items)
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -tests[item.path],
                                 str(item.path)))


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real server on the embedded default store, shared by a test session."""
    home: Path = tmp_path_factory.mktemp("home")
    with ServerProcess(home, env={"AMP_ADMIN_TOKEN": ADMIN_TOKEN}) as proc:
        yield proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with plain_client(base_url=server.url + "/amp/v1", timeout=30) as client:
        yield client


@pytest.fixture
def uid() -> str:
    """A fresh suffix so tests sharing one server never see each other's cells."""
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def scripted_model_process() -> Iterator[ScriptedModel]:
    model = ScriptedModel().start()
    try:
        yield model
    finally:
        model.stop()


@pytest.fixture
def scripted_model(scripted_model_process: ScriptedModel) -> ScriptedModel:
    """The scripted OpenAI-compatible model server, with no rules and no calls recorded."""
    scripted_model_process.reset()
    return scripted_model_process
