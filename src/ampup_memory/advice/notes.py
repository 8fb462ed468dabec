"""Note learning: the learning model writes a situation's note from how its tasks went.

For a situation with enough rewarded runs and sessions (at least one positive), the prompt
shows the best-rewarded traces (what worked) and the failed ones (what went wrong), each cut
to a bounded size; the model (Role.LEARN) answers When, Steps and Pitfalls as JSON. The note
cites the runs and sessions it was shown and starts as a candidate with zeroed evidence.

A model that is down or answers garbage raises `ModelUnavailable` (after the client's
retries) and nothing is returned: the situation stays without a note until a later pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field
from ulid import ULID

from ampup_memory.advice.gate import Evidence, NoteState
from ampup_memory.advice.situations import Situation, TaskRecord
from ampup_memory.models.chat import AnswerUnusable, ChatModel
from ampup_memory.timefmt import format_time

MAX_SHOWN = 6  # traces shown per side (worked / failed)
MAX_TASK_CHARS = 300
MAX_TRACE_CHARS = 1500
MAX_OUTCOME_CHARS = 300
MAX_PROMPT_CHARS = 24000


class NoteAnswer(BaseModel):
    """The learning model's answer."""

    when: str = Field(min_length=1, max_length=600)
    steps: list[str] = Field(min_length=1, max_length=15)
    pitfalls: list[str] = Field(default_factory=list, max_length=15)


@dataclass(frozen=True)
class Note:
    key: str  # note_<ULID>
    situation: str
    when: str
    steps: tuple[str, ...]
    pitfalls: tuple[str, ...]
    sources: tuple[str, ...]  # ids of the runs and sessions the model was shown
    model: str
    created_at: str
    state: NoteState = NoteState.CANDIDATE
    evidence: Evidence = field(default_factory=Evidence)

    def to_dict(self) -> dict[str, Any]:
        """The note for storage (JSON); `from_dict` reads it back."""
        return {"key": self.key, "situation": self.situation, "when": self.when,
                "steps": list(self.steps), "pitfalls": list(self.pitfalls),
                "sources": list(self.sources), "model": self.model,
                "created_at": self.created_at, "state": self.state.value,
                "evidence": self.evidence.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Note:
        return cls(key=data["key"], situation=data["situation"], when=data["when"],
                   steps=tuple(data["steps"]), pitfalls=tuple(data["pitfalls"]),
                   sources=tuple(data["sources"]), model=data["model"],
                   created_at=data["created_at"], state=NoteState(data["state"]),
                   evidence=Evidence.from_dict(data["evidence"]))


SYSTEM = (
    "You write a short working note for one kind of task, from how earlier attempts went. "
    "Use only what the attempts show. 'when': one sentence saying which tasks the note is "
    "for. 'steps': the steps the best-rewarded attempts took, in order, each one imperative "
    "sentence. 'pitfalls': what the failed attempts did wrong, each one sentence. Answer "
    'JSON: {"when": "...", "steps": ["..."], "pitfalls": ["..."]}'
)


def eligible(tasks: Sequence[TaskRecord], min_runs: int) -> bool:
    """Enough rewarded tasks for a note: at least ``min_runs``, one of them positive."""
    return len(tasks) >= min_runs and any(t.reward > 0 for t in tasks)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _block(task: TaskRecord) -> str:
    return (f"[{task.id}] reward {task.reward:+.2f}\n"
            f"task: {_cut(task.task, MAX_TASK_CHARS)}\n"
            f"trace: {_cut(task.trace, MAX_TRACE_CHARS)}\n"
            f"outcome: {_cut(task.outcome, MAX_OUTCOME_CHARS)}")


def build_prompt(situation: Situation, tasks: Sequence[TaskRecord]) -> tuple[str, list[str]]:
    """The prompt and the ids of the tasks it shows (best-rewarded and failed ones).

    Best first: highest reward, then newest; failed: lowest reward, then newest. The prompt
    never exceeds `MAX_PROMPT_CHARS`; tasks that do not fit are left out (and not cited)."""
    def newest_first(t: TaskRecord) -> float:
        return -t.at.timestamp()

    worked = sorted((t for t in tasks if t.reward > 0),
                    key=lambda t: (-t.reward, newest_first(t), t.id))[:MAX_SHOWN]
    failed = sorted((t for t in tasks if t.reward < 0),
                    key=lambda t: (t.reward, newest_first(t), t.id))[:MAX_SHOWN]
    head = f"Kind of task: {situation.name}\n"
    parts, shown, size = [head], [], len(head)
    for title, group in (("Attempts that worked (best first):", worked),
                         ("Attempts that failed:", failed)):
        if not group:
            continue
        parts.append(title)
        size += len(title) + 1
        for task in group:
            block = _block(task)
            if size + len(block) + 2 > MAX_PROMPT_CHARS:
                break
            parts.append(block)
            shown.append(task.id)
            size += len(block) + 2
    return "\n\n".join(parts), shown


def learn_note(situation: Situation, tasks: Sequence[TaskRecord], model: ChatModel, *,
               min_runs: int = 5, now: datetime | None = None) -> Note | None:
    """The situation's note written by ``model`` (Role.LEARN), or None when the situation
    has too few rewarded tasks (`eligible`). Raises `ModelUnavailable` (`AnswerUnusable`
    for an answer of the wrong shape): nothing partial."""
    if not eligible(tasks, min_runs):
        return None
    prompt, shown = build_prompt(situation, tasks)
    answer = model.ask(SYSTEM, prompt, NoteAnswer)
    steps = tuple(s.strip() for s in answer.steps if s.strip())
    if not steps:
        raise AnswerUnusable(f"model {model.name} wrote a note with no steps")
    return Note(key=f"note_{ULID()}", situation=situation.id, when=answer.when.strip(),
                steps=steps, pitfalls=tuple(p.strip() for p in answer.pitfalls if p.strip()),
                sources=tuple(shown), model=model.name,
                created_at=format_time(now or datetime.now(UTC)))
