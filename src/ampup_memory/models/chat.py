"""The one way the server asks a model something: an OpenAI-compatible chat endpoint.

Any server that speaks the OpenAI chat API works (Ollama, vLLM, llama.cpp server, hosted
APIs); the official ``openai`` package does the talking. Each kind of work is a *role*
(extract, judge, learn, compile) whose endpoint falls back to the default one, so a team can
send extraction to a small local model and note learning to a larger one.

Answers are JSON validated by a pydantic model. Rate limits, 5xx, timeouts, lost
connections and answers that are not the asked-for JSON are retried a bounded number of
times with back-off; then the call raises `ModelUnavailable` and the caller leaves its work
pending for a later pass. Nothing here writes anything.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Protocol, TypeVar

from pydantic import BaseModel, Strict, ValidationError

from ampup_memory.errors import ServiceUnavailable
from ampup_memory.settings import Settings
from ampup_memory.web import jsontext

T = TypeVar("T", bound=BaseModel)

# A number in a model's answer is a JSON number. Python (and pydantic's lax mode) reads
# `true` as 1: a unit of `true` cited unit 1, a reward of `true` was a full reward. Strict
# also refuses "2" and, for a whole number, 2.0.
AnswerInt = Annotated[int, Strict()]
AnswerNumber = Annotated[float, Strict()]
# Likewise a yes/no is JSON's true or false: lax mode read 1, "yes", "on" and "t" as true.
AnswerBool = Annotated[bool, Strict()]


class Role(StrEnum):
    EXTRACT = "extract"
    JUDGE = "judge"
    LEARN = "learn"
    COMPILE = "compile"


class ModelUnavailable(ServiceUnavailable):
    """The model did not give a usable answer within the retries (down, slow, 429, garbage)."""

    code = "MODEL_UNAVAILABLE"


class AnswerUnusable(ModelUnavailable):
    """Every attempt got an answer, none of the asked-for shape: unlike a model that is
    down, asking again about the same item is likely to give the same answer."""


class RequestRefused(ModelUnavailable):
    """The endpoint refused this one request as malformed (HTTP 400, 413 or 422: "context
    length exceeded", a body too large): a problem of what was asked, not of the endpoint,
    so the next item may still be asked. Never retried: it would be refused again."""


# What an endpoint says about one request (`RequestRefused`); any other 4xx but 408, 409
# and 429 (a bad key, no such model) is the endpoint's and stops the work that needs it.
REFUSED = (400, 413, 422)


@dataclass(frozen=True)
class Endpoint:
    """Where one role's requests go. ``api_key`` is never printed (see `__repr__`)."""

    role: Role
    base_url: str
    model: str
    api_key: str | None
    timeout: float
    concurrency: int
    retries: int

    def __repr__(self) -> str:
        return (f"Endpoint(role={self.role.value!r}, base_url={self.base_url!r}, "
                f"model={self.model!r}, timeout={self.timeout}, "
                f"concurrency={self.concurrency}, retries={self.retries})")


def endpoint_for(settings: Settings, role: Role) -> Endpoint | None:
    """The role's endpoint: each of its settings, else the default one; None if no model.

    A model needs both a base URL and a model name; with either missing the role has no
    model, and the work that needs it does not run (it does not fail)."""
    def pick(what: str) -> Any:
        own = getattr(settings, f"{role.value}_model_{what}")
        return own if own is not None else getattr(settings, f"model_{what}")

    base_url, model = pick("base_url"), pick("name")
    if not base_url or not model:
        return None
    return Endpoint(role=role, base_url=str(base_url), model=str(model),
                    api_key=pick("api_key"), timeout=float(pick("timeout_seconds")),
                    concurrency=int(pick("concurrency")), retries=settings.model_retries)


class ChatModel(Protocol):
    """What model-backed work needs: a name to record, and JSON answers of a given shape."""

    @property
    def name(self) -> str: ...

    def ask(self, system: str, user: str, answer: type[T]) -> T: ...


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_answer(text: str, answer: type[T]) -> T:
    """The model's text as ``answer``; a fenced ```json block is unwrapped first.

    Raises ValueError (bad JSON, or nested deeper than any answer: read by the server's one
    JSON reader, which never recurses into it) or pydantic's ValidationError (wrong shape).
    NaN and huge numbers are kept, so the candidate holding one is rejected alone."""
    fenced = _FENCE.match(text)
    return answer.model_validate(jsontext.loads(fenced.group(1) if fenced else text,
                                                "the model's answer", finite=False))


class OpenAIChat:
    """A `ChatModel` over one OpenAI-compatible endpoint, at most ``concurrency`` calls at once."""

    def __init__(self, endpoint: Endpoint, *, sleep: Callable[[float], None] = time.sleep
                 ) -> None:
        import openai  # noqa: PLC0415 — deferred: only servers with a model pay for it

        self.endpoint = endpoint
        self._openai = openai
        # The client's own retries are off: ours count every kind of failure (garbage too)
        # against one budget and honour Retry-After.
        self._client = openai.OpenAI(base_url=endpoint.base_url,
                                     api_key=endpoint.api_key or "not-needed",
                                     timeout=endpoint.timeout, max_retries=0)
        self._slots = threading.BoundedSemaphore(endpoint.concurrency)
        self._sleep = sleep

    @property
    def name(self) -> str:
        return self.endpoint.model

    def ask(self, system: str, user: str, answer: type[T]) -> T:
        last: str = "no attempt"
        last_wait: float | None = None
        unusable = 0  # attempts answered with something not of the asked-for shape
        for attempt in range(self.endpoint.retries + 1):
            if attempt:
                self._sleep(self._pause(attempt, last_wait))
                last_wait = None
            try:
                with self._slots:
                    reply = self._client.chat.completions.create(
                        model=self.endpoint.model,
                        messages=[{"role": "system", "content": system},
                                  {"role": "user", "content": user}],
                        response_format={"type": "json_object"},
                        temperature=0,
                    )
                text = reply.choices[0].message.content or ""
                return parse_answer(text, answer)
            except self._openai.RateLimitError as exc:
                last, last_wait = "rate limited (429)", _retry_after(exc.response)
            except self._openai.APITimeoutError:
                last = f"timed out after {self.endpoint.timeout:g} s"
            except self._openai.APIConnectionError as exc:
                last = f"cannot connect: {exc}"
            except self._openai.APIStatusError as exc:
                if exc.status_code in REFUSED:
                    raise RequestRefused(
                        f"model {self.name} refused the request: HTTP {exc.status_code}: "
                        f"{_said(exc)}") from exc
                if exc.status_code < 500 and exc.status_code not in (408, 409):
                    # A 4xx other than these will not change on a retry (bad key, no model).
                    raise ModelUnavailable(
                        f"model {self.name} refused the request: HTTP {exc.status_code}"
                    ) from exc
                last = f"HTTP {exc.status_code}"
            except (ValueError, ValidationError, IndexError, AttributeError) as exc:
                last = f"answer is not the expected JSON: {_short(exc)}"
                unusable += 1
        failure = AnswerUnusable if unusable == self.endpoint.retries + 1 else ModelUnavailable
        raise failure(
            f"model {self.name} gave no usable answer in {self.endpoint.retries + 1} "
            f"attempts; last: {last}")

    @staticmethod
    def _pause(attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, 30.0)
        return min(0.25 * 2.0 ** (attempt - 1), 8.0)


def _retry_after(response: Any) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after")))
    except (TypeError, ValueError, AttributeError):
        return None


def _said(exc: Any) -> str:
    """What an endpoint's error body says (OpenAI's ``{"error": {"message": ...}}``), in
    one printable line of at most 200 characters: it is logged and shown in a status."""
    body = getattr(exc, "body", None)
    text = body.get("message") if isinstance(body, dict) else None
    if not isinstance(text, str):
        text = _short(exc)
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:200]


def _short(exc: Exception) -> str:
    """The reason in one short line. pydantic's own first line only counts its errors
    ("1 validation error for Answer"): the first error's place and message say why."""
    if isinstance(exc, ValidationError) and exc.errors():
        errors = exc.errors()
        where = ".".join(str(part) for part in errors[0]["loc"])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"{where + ': ' if where else ''}{errors[0]['msg']}{more}"[:200]
    lines = str(exc).splitlines()
    return (lines[0] if lines else type(exc).__name__)[:200]


def chat_model(settings: Settings, role: Role) -> ChatModel | None:
    """The role's model, or None when none is configured."""
    endpoint = endpoint_for(settings, role)
    return None if endpoint is None else OpenAIChat(endpoint)

