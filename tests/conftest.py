from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.model_support import ScriptedModel
from tests.pg import postgres  # noqa: F401  (session fixture shared by all tests)
from tests.server_process import ServerProcess, plain_client

ADMIN_TOKEN = "test-admin-token"


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
