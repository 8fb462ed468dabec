"""The advice loop's MCP tools (``record_run``, ``reward_run``, ``start_session``,
``end_session``, ``get_session``, ``get_advice``), on the same server as the other tools; they wrap
`advice.mcp_tools`, which call what the REST routes call."""

from __future__ import annotations

import json
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from ampup_memory.advice import mcp_tools as advice_tools
from ampup_memory.advice.sessions import MAX_SESSION_ID
from ampup_memory.auth import Caller
from ampup_memory.mcp.ampup import user_env
from ampup_memory.mcp.arguments import publish
from ampup_memory.mcp.tools import READS, TOOLSETS, WRITES, ToolContext, ToolEnv

# A session id, bounded as GET /sessions/{session_id} bounds its path.
SessionId = Annotated[str, Field(min_length=1, max_length=MAX_SESSION_ID)]


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


def register_advice_tools(server: MCPServer[Any], env: ToolEnv) -> None:
    uenv = user_env(env)
    memory = env.runtime.memory

    def run(caller: Caller, scope: str, task: str, trace: str | None, outcome: str | None,
            advice_key: str | None, acl: list[str] | None, branch: str | None,
            idempotency_key: str | None) -> str:
        return _json(advice_tools.record_run(memory, caller, scope=scope, task=task,
                                             trace=trace, outcome=outcome,
                                             advice_key=advice_key, acl=acl, branch=branch,
                                             idempotency_key=idempotency_key))

    def rate(caller: Caller, run: str, reward: float, reason: str) -> str:
        return _json(advice_tools.reward_run(memory, caller, run=run, reward=reward,
                                             reason=reason))

    def start(caller: Caller, scope: str, task: str | None, acl: list[str] | None,
              branch: str | None, idempotency_key: str | None) -> str:
        return _json(advice_tools.start_session(memory, caller, scope=scope, task=task,
                                                acl=acl, branch=branch,
                                                idempotency_key=idempotency_key))

    def end(caller: Caller, session: str, transcript: str, outcome: str,
            reward: float | None, reason: str | None) -> str:
        return _json(advice_tools.end_session(memory, caller, session=session,
                                              transcript=transcript, outcome=outcome,
                                              reward=reward, reason=reason))

    def read_session(caller: Caller, session: str) -> str:
        return _json(advice_tools.get_session(memory, caller, session=session))

    def advise(caller: Caller, scope: str, task: str, session: str | None) -> str:
        return _json(advice_tools.get_advice(memory, caller, env.runtime.embedder,
                                             env.runtime.settings, scope=scope, task=task,
                                             session=session))

    @server.tool(annotations=WRITES)
    async def get_advice(scope: str, task: str, ctx: ToolContext,
                         session: str | None = None) -> CallToolResult:
        """Ask team memory `scope` how this kind of `task` is best done: the steps that
        worked and the pitfalls that did not, learned from rewarded runs and sessions,
        with its evidence — or, before any note is learned, a procedure compiled from the
        team's documents (`kind: "procedure"`, with its step `graph`). Pass your open
        `session` (ses_…) so the serving is recorded and judged. Replies JSON `{"advice":
        {key, kind, when, steps, pitfalls, evidence, sources, trial, …}}` or `{"advice":
        null}`; record_run with `advice_key` when you follow it."""
        return await uenv.reply(ctx, advise, scope, task, session)

    @server.tool(annotations=WRITES)
    async def record_run(
        scope: str,
        task: str,
        ctx: ToolContext,
        trace: str | None = None,
        outcome: str | None = None,
        advice_key: str | None = None,
        acl: list[str] | None = None,
        branch: str | None = None,
        idempotency_key: str | None = None,
    ) -> CallToolResult:
        """Record a finished piece of work in team memory `scope` (org/team): the `task`,
        what you did (`trace`), the `outcome`, and the `advice_key` of advice you followed.
        Readable by you only unless `acl` lists readers. Pass an `idempotency_key` of your
        own (e.g. a UUID) to retry safely: the same key answers the run it first recorded.
        Replies JSON `{"id": "run_…", "created": true}`; reward it later with reward_run."""
        return await uenv.reply(ctx, run, scope, task, trace, outcome, advice_key, acl,
                                branch, idempotency_key)

    @server.tool(annotations=WRITES)
    async def reward_run(run: str, reward: float, reason: str,
                         ctx: ToolContext) -> CallToolResult:
        """Reward a run (run_…) or an ended session (ses_…; end_session takes a reward
        too): `reward` from -1 (failed) to 1 (went well) and why. A later reward replaces
        an earlier one; both stay in history."""
        return await uenv.reply(ctx, rate, run, reward, reason)

    @server.tool(annotations=WRITES)
    async def start_session(
        scope: str,
        ctx: ToolContext,
        task: str | None = None,
        acl: list[str] | None = None,
        branch: str | None = None,
        idempotency_key: str | None = None,
    ) -> CallToolResult:
        """Start a work session in `scope` on `task`; advice served to it is recorded on it.
        An `idempotency_key` of your own makes a retry answer the session it started.
        Replies JSON `{"id": "ses_…", "created": true}`; finish it with end_session."""
        return await uenv.reply(ctx, start, scope, task, acl, branch, idempotency_key)

    @server.tool(annotations=WRITES)
    async def end_session(
        session: str,
        transcript: str,
        outcome: str,
        ctx: ToolContext,
        reward: float | None = None,
        reason: str | None = None,
    ) -> CallToolResult:
        """End session `session` with a short `transcript` of what happened and the
        `outcome`. Give `reward` (-1..1) if you know how it went; otherwise the judge model
        (when one is configured) rewards it later. A session ends once."""
        return await uenv.reply(ctx, end, session, transcript, outcome, reward, reason)

    @server.tool(annotations=READS)
    async def get_session(session: SessionId, ctx: ToolContext) -> CallToolResult:
        """Read session `session` (ses_…) as JSON, as GET /sessions/{id} answers it:
        `state` (open/ended), the advice served (`steps`), `transcript`, `outcome`, and
        `reward` with `judging` (pending, judged, not needed): the judge's verdict, per
        advice key in `reward.notes` ({applied, helped}), once it has judged."""
        return await uenv.reply(ctx, read_session, session)

    for name, (model, texts) in advice_arguments().items():
        publish(server, name, texts=texts, models=(model,))


def advice_arguments() -> dict[str, tuple[type[BaseModel], dict[str, str]]]:
    """Per tool: the REST request model its service checks (bounds and texts for its
    input schema, `publish`) and what a model needs to know beyond it."""
    from ampup_memory.advice.loop import AdviceRequest
    from ampup_memory.advice.runs import RecordRun, RewardRun
    from ampup_memory.advice.sessions import EndSession, StartSession

    return {
        "get_advice": (AdviceRequest, {
            "task": "The task you are about to do, in a sentence."}),
        "record_run": (RecordRun, {"outcome": "How it turned out."}),
        "reward_run": (RewardRun, {"reason": "Why this reward."}),
        "start_session": (StartSession, {"task": "What the session is for."}),
        "get_session": (EndSession, {  # its `session`: the same id, the same bounds
            "session": "The session's id (ses_…), as start_session gave it."}),
        "end_session": (EndSession, {
            "session": "The id start_session gave (ses_…).",
            "transcript": "A short account of what happened in the session.",
            "outcome": "How it turned out.",
            "reward": "-1 (failed badly) to 1 (went well); leave it out to let the judge "
                      "model reward the session later.",
        }),
    }


TOOLSETS.append(register_advice_tools)
