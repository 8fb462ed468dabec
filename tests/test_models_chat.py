"""The model client against a real OpenAI-compatible HTTP server (the scripted one).

The model is the one edge we do not own; everything else here is our own code: role
fallback, JSON answers validated by a pydantic model, bounded retries with back-off.
"""

from __future__ import annotations

import time

import pytest
from pydantic import BaseModel

from ampup_memory.models.chat import (
    ModelUnavailable,
    OpenAIChat,
    Role,
    chat_model,
    endpoint_for,
    parse_answer,
)
from ampup_memory.settings import MODEL_ROLES, Settings
from tests.model_support import ScriptedModel


class Answer(BaseModel):
    value: int


def settings(**env: str) -> Settings:
    return Settings.model_validate(env)


def model(scripted: ScriptedModel, retries: int = 2, timeout: float = 5.0) -> OpenAIChat:
    endpoint = endpoint_for(settings(**scripted.env(), AMPUP_MEMORY_MODEL_RETRIES=str(retries),
                                     AMPUP_MEMORY_MODEL_TIMEOUT_SECONDS=str(timeout)),
                            Role.EXTRACT)
    assert endpoint is not None
    return OpenAIChat(endpoint, sleep=lambda _: None)


def test_no_model_configured_means_no_model() -> None:
    assert chat_model(settings(), Role.EXTRACT) is None
    # A base URL without a model name is not a model either.
    assert endpoint_for(settings(AMPUP_MEMORY_MODEL_BASE_URL="http://x/v1"), Role.JUDGE) is None


def test_each_role_falls_back_to_the_default_setting_by_setting() -> None:
    s = settings(AMPUP_MEMORY_MODEL_BASE_URL="http://default/v1", AMPUP_MEMORY_MODEL="small",
                 AMPUP_MEMORY_MODEL_API_KEY="k1", AMPUP_MEMORY_LEARN_MODEL="large",
                 AMPUP_MEMORY_LEARN_MODEL_CONCURRENCY="1",
                 AMPUP_MEMORY_JUDGE_MODEL_BASE_URL="http://judge/v1")
    learn, judge, extract = (endpoint_for(s, r) for r in (Role.LEARN, Role.JUDGE, Role.EXTRACT))
    assert learn is not None and judge is not None and extract is not None
    assert (learn.model, learn.base_url, learn.concurrency) == ("large", "http://default/v1", 1)
    assert (judge.model, judge.base_url, judge.api_key) == ("small", "http://judge/v1", "k1")
    assert (extract.model, extract.concurrency, extract.timeout) == ("small", 4, 60.0)
    assert "k1" not in repr(extract)


def test_a_json_answer_comes_back_validated(scripted_model: ScriptedModel) -> None:
    scripted_model.script([{"match": "seven", "reply": {"value": 7}},
                           {"match": "fenced", "reply": '```json\n{"value": 8}\n```'}])
    chat = model(scripted_model)
    assert chat.ask("You answer JSON.", "say seven", Answer) == Answer(value=7)
    assert chat.ask("You answer JSON.", "say fenced", Answer) == Answer(value=8)
    calls = scripted_model.calls()
    assert calls[0]["model"] == ScriptedModel.name
    assert calls[0]["response_format"] == {"type": "json_object"}
    assert [m["role"] for m in calls[0]["messages"]] == ["system", "user"]


@pytest.mark.parametrize("failure", [
    {"status": 500}, {"status": 503}, {"status": 429, "headers": {"retry-after": "0"}},
    {"reply": "not json at all"}, {"reply": {"value": "seven"}},
])
def test_failures_are_retried_then_the_answer_counts(scripted_model: ScriptedModel,
                                                     failure: dict[str, object]) -> None:
    scripted_model.script([{"match": "q", **failure, "times": 2},
                           {"match": "q", "reply": {"value": 1}}])
    assert model(scripted_model, retries=2).ask("s", "q", Answer) == Answer(value=1)
    assert len(scripted_model.calls()) == 3


def test_retries_are_bounded(scripted_model: ScriptedModel) -> None:
    scripted_model.script([], default={"reply": "garbage"})
    with pytest.raises(ModelUnavailable, match="3 attempts; last: answer is not the expected"):
        model(scripted_model, retries=2).ask("s", "q", Answer)
    assert len(scripted_model.calls()) == 3


def test_a_slow_model_times_out_and_is_retried(scripted_model: ScriptedModel) -> None:
    scripted_model.script([{"match": "q", "delay": 2.0, "reply": {"value": 1}, "times": 1},
                           {"match": "q", "reply": {"value": 2}}])
    started = time.monotonic()
    assert model(scripted_model, retries=1, timeout=0.5).ask("s", "q", Answer) == Answer(value=2)
    assert time.monotonic() - started < 2.0


def test_a_refusal_is_not_retried(scripted_model: ScriptedModel) -> None:
    scripted_model.script([], default={"status": 401})
    with pytest.raises(ModelUnavailable, match="HTTP 401"):
        model(scripted_model, retries=3).ask("s", "q", Answer)
    assert len(scripted_model.calls()) == 1


def test_a_down_model_is_unavailable_not_a_crash() -> None:
    endpoint = endpoint_for(settings(AMPUP_MEMORY_MODEL_BASE_URL="http://127.0.0.1:9/v1",
                                     AMPUP_MEMORY_MODEL="m", AMPUP_MEMORY_MODEL_RETRIES="1"),
                            Role.EXTRACT)
    assert endpoint is not None
    with pytest.raises(ModelUnavailable, match="cannot connect"):
        OpenAIChat(endpoint, sleep=lambda _: None).ask("s", "q", Answer)


def test_parse_answer_refuses_what_is_not_the_shape() -> None:
    with pytest.raises(ValueError):
        parse_answer("{", Answer)
    assert parse_answer(' ```\n{"value": 3}\n``` ', Answer) == Answer(value=3)


def test_every_role_has_its_settings() -> None:
    assert [r.value for r in Role] == list(MODEL_ROLES)
    for role in MODEL_ROLES:
        for what in ("base_url", "name", "api_key", "timeout_seconds", "concurrency"):
            assert f"{role}_model_{what}" in Settings.model_fields
