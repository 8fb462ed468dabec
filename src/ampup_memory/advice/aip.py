"""Procedures (AIP): a scope's documents compiled into skills, each with a step graph.

A *skill* says when it applies, its steps, its edge cases and the document units it rests
on; its *graph* is the AIP step graph: steps with ids, and edges (from, to, optional
condition) with exactly one start, every step reachable from it. The format is documented
in docs/advice.md ("AIP step graph format").

`compile_skills` shows the compile model (Role.COMPILE) the documents with their units
numbered and asks for skills whose every step and edge case cites ``(episode, unit)``
pairs. Citations are checked against the units shown: a step or edge case with no valid
citation is dropped (as extraction drops a fact whose quote is not in its source), a dropped
step's incoming edges are joined to its outgoing ones, and a skill whose graph is no longer
valid, or that keeps no step, is dropped whole. A model that is down or answers garbage
raises `ModelUnavailable`: nothing is returned.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ampup_memory.models.chat import AnswerInt, ChatModel

STEP_ID = r"^[a-z][a-z0-9_]{0,39}$"
MAX_UNIT_CHARS = 800
MAX_PROMPT_CHARS = 40000


class Citation(BaseModel):
    """One unit of one episode: unit ``unit`` of episode ``episode``, numbered from 1 as
    episode units and fact citations are."""

    model_config = ConfigDict(frozen=True)

    episode: str = Field(min_length=1)
    unit: AnswerInt = Field(ge=1)


class GraphStep(BaseModel):
    id: str = Field(pattern=STEP_ID)
    text: str = Field(min_length=1, max_length=1000)


class GraphEdge(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    from_: str = Field(alias="from")
    to: str
    condition: str | None = Field(default=None, max_length=300)


class StepGraph(BaseModel):
    """An AIP step graph: unique step ids, edges between existing steps, one start (the
    only step no edge leads to), and every step reachable from it."""

    steps: list[GraphStep] = Field(min_length=1)
    edges: list[GraphEdge] = Field(default_factory=list)

    @model_validator(mode="after")
    def _well_formed(self) -> StepGraph:
        ids = [s.id for s in self.steps]
        if len(set(ids)) != len(ids):
            raise ValueError("step ids must be unique")
        known = set(ids)
        for edge in self.edges:
            if edge.from_ not in known or edge.to not in known:
                raise ValueError(f"edge {edge.from_} -> {edge.to} names a step that does not "
                                 "exist")
        starts = known - {e.to for e in self.edges}
        if len(starts) != 1:
            raise ValueError(f"a step graph has exactly one start (a step no edge leads to); "
                             f"found {len(starts)}")
        start = starts.pop()
        reached, frontier = {start}, [start]
        while frontier:
            here = frontier.pop()
            for edge in self.edges:
                if edge.from_ == here and edge.to not in reached:
                    reached.add(edge.to)
                    frontier.append(edge.to)
        unreachable = [i for i in ids if i not in reached]
        if unreachable:
            raise ValueError(f"steps not reachable from the start {start}: "
                             f"{', '.join(unreachable)}")
        return self

    @property
    def start(self) -> str:
        targets = {e.to for e in self.edges}
        return next(s.id for s in self.steps if s.id not in targets)

    def to_json_dict(self) -> dict[str, object]:
        return self.model_dump(by_alias=True, exclude_none=True)


class Skill(BaseModel):
    key: str  # proc_<hex>, from the skill's name
    name: str
    when: str
    steps: list[str]
    edge_cases: list[str]
    sources: list[Citation]
    graph: StepGraph


# -- what the model answers ------------------------------------------------------------------

class _CitedText(BaseModel):
    text: str = Field(min_length=1, max_length=1000)
    # Each read on its own (`_verified`): a cite of the wrong shape is dropped as one of a
    # unit never shown is, and the rest of the answer stands.
    cites: list[Any] = Field(default_factory=list)


class _DraftStep(_CitedText):
    id: str = Field(pattern=STEP_ID)


class _DraftSkill(BaseModel):
    name: str = Field(min_length=1, max_length=120)
    when: str = Field(min_length=1, max_length=600)
    steps: list[_DraftStep] = Field(min_length=1, max_length=30)
    edges: list[GraphEdge] = Field(default_factory=list)
    edge_cases: list[_CitedText] = Field(default_factory=list, max_length=20)


class CompileAnswer(BaseModel):
    skills: list[_DraftSkill] = Field(default_factory=list, max_length=20)


@dataclass(frozen=True)
class SourceDocument:
    """One chosen document: its episode id and its units (turns, paragraphs ...) in order."""

    episode: str
    units: tuple[str, ...]
    title: str = ""


SYSTEM = (
    "You compile a team's documents into skills: procedures an agent can follow. For each "
    "procedure the documents describe, give: 'name'; 'when' (one sentence: which tasks it is "
    "for); 'steps', each {id (lower-case, e.g. s1), text, cites}; 'edges' {from, to, "
    "condition?} from each step to the next (a branch has a condition); 'edge_cases', each "
    "{text, cites}. Every step and edge case cites the units it comes from as {episode, "
    "unit}, using only the episode ids and unit numbers shown. Do not invent anything the "
    "documents do not say. Answer JSON: {\"skills\": [...]}"
)


def build_prompt(documents: Sequence[SourceDocument]) -> tuple[str, set[Citation]]:
    """The prompt (documents with their units numbered) and the units it shows; units past
    `MAX_PROMPT_CHARS` are not shown and so cannot be cited."""
    parts: list[str] = []
    shown: set[Citation] = set()
    size = 0
    for doc in documents:
        head = f"Document episode={doc.episode}" + (f" title={doc.title!r}" if doc.title else "")
        if size + len(head) > MAX_PROMPT_CHARS:
            break
        parts.append(head)
        size += len(head) + 1
        for index, unit in enumerate(doc.units, start=1):
            text = " ".join(unit.split())
            if not text:
                continue
            line = f"[{index}] {text[:MAX_UNIT_CHARS]}"
            if size + len(line) > MAX_PROMPT_CHARS:
                break
            parts.append(line)
            shown.add(Citation(episode=doc.episode, unit=index))
            size += len(line) + 1
    return "\n".join(parts), shown


def _verified(cites: Sequence[Any], shown: set[Citation]) -> list[Citation]:
    """The model's cites that name a unit it was shown, in order, once each."""
    kept: list[Citation] = []
    for raw in cites:
        try:
            cite = Citation.model_validate(raw)
        except ValidationError:
            continue
        if cite in shown:
            kept.append(cite)
    return list(dict.fromkeys(kept))


def _contract(edges: list[GraphEdge], dropped: str) -> list[GraphEdge]:
    """Remove a step from the edges, joining each edge into it to each edge out of it."""
    into = [e for e in edges if e.to == dropped and e.from_ != dropped]
    out = [e for e in edges if e.from_ == dropped and e.to != dropped]
    kept = [e for e in edges if dropped not in (e.from_, e.to)]
    for a in into:
        for b in out:
            conditions = [c for c in (a.condition, b.condition) if c]
            joined = GraphEdge.model_validate({"from": a.from_, "to": b.to,
                                               "condition": " and ".join(conditions) or None})
            if not any(e.from_ == joined.from_ and e.to == joined.to
                       and e.condition == joined.condition for e in kept):
                kept.append(joined)
    return kept


def _skill(draft: _DraftSkill, shown: set[Citation]) -> Skill | None:
    sources: list[Citation] = []
    steps: list[GraphStep] = []
    edges = list(draft.edges)
    for step in draft.steps:
        cites = _verified(step.cites, shown)
        if cites:
            steps.append(GraphStep(id=step.id, text=step.text.strip()))
            sources.extend(cites)
        else:
            edges = _contract(edges, step.id)
    edge_cases: list[str] = []
    for case in draft.edge_cases:
        cites = _verified(case.cites, shown)
        if cites:
            edge_cases.append(case.text.strip())
            sources.extend(cites)
    if not steps:
        return None
    try:
        graph = StepGraph(steps=steps, edges=edges)
    except ValidationError:
        return None
    key = "proc_" + hashlib.sha256(" ".join(draft.name.lower().split()).encode()
                                   ).hexdigest()[:20]
    return Skill(key=key, name=draft.name.strip(), when=draft.when.strip(),
                 steps=[s.text for s in steps], edge_cases=edge_cases,
                 sources=list(dict.fromkeys(sources)), graph=graph)


def compile_skills(documents: Sequence[SourceDocument], model: ChatModel) -> list[Skill]:
    """The skills ``model`` (Role.COMPILE) finds in ``documents``, each claim verified
    against the units shown. Raises `ModelUnavailable` (nothing partial)."""
    prompt, shown = build_prompt(documents)
    if not shown:
        return []
    answer = model.ask(SYSTEM, prompt, CompileAnswer)
    skills: dict[str, Skill] = {}
    for draft in answer.skills:
        skill = _skill(draft, shown)
        if skill is not None:
            skills.setdefault(skill.key, skill)
    return list(skills.values())


# -- a scope's compiled procedures, as stored and served -------------------------------------

@dataclass(frozen=True)
class ProcedureSet:
    """One compilation of a scope's chosen documents: the skills, one unit-length vector per
    skill (its name and ``when``, embedded by ``embedder``) to match tasks against, and what
    was compiled: ``documents`` (the chosen keys) and ``inputs`` (each key's version, an
    episode id, that was read)."""

    skills: tuple[Skill, ...]
    vectors: tuple[tuple[float, ...], ...]
    embedder: str
    documents: tuple[str, ...]
    inputs: dict[str, str]
    model: str
    compiled_at: str

    @cached_property
    def matrix(self) -> Any:
        """The skills' vectors as one matrix (built once per compilation)."""
        import numpy as np

        return np.asarray(self.vectors, dtype=np.float64)

    def to_dict(self) -> dict[str, object]:
        return {"skills": [s.model_dump(mode="json", by_alias=True, exclude_none=True)
                           for s in self.skills],
                "vectors": [[round(x, 6) for x in v] for v in self.vectors],
                "embedder": self.embedder, "documents": list(self.documents),
                "inputs": dict(self.inputs), "model": self.model,
                "compiled_at": self.compiled_at}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProcedureSet:
        return cls(skills=tuple(Skill.model_validate(s) for s in data["skills"]),
                   vectors=tuple(tuple(float(x) for x in v) for v in data["vectors"]),
                   embedder=str(data["embedder"]), documents=tuple(data["documents"]),
                   inputs=dict(data["inputs"]), model=str(data["model"]),
                   compiled_at=str(data["compiled_at"]))


def match_text(skill: Skill) -> str:
    """What a skill is matched to tasks by: its name and when it applies."""
    return f"{skill.name}. {skill.when}"


def procedure_for(task_embedding: Sequence[float], procs: ProcedureSet, *, embedder: str,
                  min_similarity: float) -> Skill | None:
    """The skill whose name and ``when`` are most similar to the task, if at least
    ``min_similarity`` (the threshold situations use); a vector of another embedder (name
    or width) matches nothing."""
    import numpy as np

    if not procs.skills or embedder != procs.embedder:
        return None
    rows = procs.matrix
    v = np.asarray(task_embedding, dtype=np.float64)
    if rows.ndim != 2 or v.shape != (rows.shape[1],):
        return None
    norm = float(np.linalg.norm(v))
    sims = rows @ (v / norm if norm else v)
    best = int(np.argmax(sims))
    return procs.skills[best] if float(sims[best]) >= min_similarity else None
