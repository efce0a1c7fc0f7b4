"""Ground truth by execution: every expected call of a pack's rows runs on the real server,
and every call and result goes into the `CallStore` the dataset version points to.

Speed: rows run concurrently (the stdio and HTTP clients multiplex calls on one connection)
and a call already answered is not sent again: identical calls share one in-flight request,
and a call the store already holds is answered from it. That also keeps the store a
function: one result per canonical call, which is what replay serves. A live result (the
current time) is therefore fixed at its first execution; delete the store to re-execute.

A stateful server (a knowledge graph) is different: a row's later calls depend on its own
earlier ones, so rows run one at a time after the pack's `reset` calls, every call is sent,
and a call whose result differs from the one already recorded (same arguments, another
world) makes the row invalid instead of overwriting what other rows were built from.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serving.mcp_client.base import McpClient, McpClientError, McpProtocolError
from serving.mcp_client.call_store import CallStore, CallStoreError, canonical_arguments
from training.data.packs.arguments import schema_problems, validator_for
from training.data.packs.model import CallSpec, IntentSpec, PackSpec, step_calls
from training.data.packs.refs import FILTERS, ExecutedCall, RefError, fill
from training.data.packs.results import result_object
from training.data.schema import ExpectedCall


class InvalidRowError(Exception):
    """This row cannot be emitted; the message says why (it is counted and reported)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Outcome:
    text: str
    is_error: bool
    from_store: bool = False


@dataclass
class ExecutionStats:
    sent: int = 0
    """Calls sent to the server."""
    from_store: int = 0
    """Calls answered from the store (recorded earlier, by this run or a previous one)."""
    shared: int = 0
    """Calls that joined an identical call already in flight."""
    errors: int = 0


@dataclass(frozen=True, slots=True)
class ServerTool:
    """One tool of the pack's server: its own name, the name the model calls, its schema."""

    name: str
    exposed: str
    input_schema: Mapping[str, Any]
    description: str = ""


class CallExecutor:
    """Sends calls through any `McpClient` (a `ToolCatalog` under exposed names, or one
    server's client under its own names) and records them in the store."""

    def __init__(
        self,
        client: McpClient,
        server: str,
        tools: Mapping[str, ServerTool],
        store: CallStore,
        *,
        stateful: bool = False,
        session_tools: Sequence[str] = (),
        concurrency: int = 32,
    ) -> None:
        self.client = client
        self.session_tools = frozenset(session_tools)
        self.server = server
        self.tools = tools
        self.store = store
        self.stateful = stateful
        self.stats = ExecutionStats()
        self._inflight: dict[tuple[str, str], asyncio.Future[Outcome]] = {}
        self._limit = asyncio.Semaphore(concurrency)

    @classmethod
    def for_pack(
        cls,
        client: McpClient,
        pack: PackSpec,
        tools: Mapping[str, ServerTool],
        store: CallStore,
        concurrency: int = 32,
    ) -> CallExecutor:
        """The executor a pack's generation and synthesis share: the pack's server, its
        statefulness and its per-row session tools."""
        return cls(
            client,
            pack.server,
            tools,
            store,
            stateful=pack.stateful,
            session_tools=pack.session_tools,
            concurrency=concurrency,
        )

    async def _send(
        self, tool: str, arguments: Mapping[str, Any], session: str | None = None
    ) -> Outcome:
        exposed = self.tools[tool].exposed
        async with self._limit:
            try:
                result = await self.client.call_tool(exposed, arguments, session)
            except McpProtocolError as exc:
                # the server refusing the call (bad arguments, unknown tool): its answer,
                # recorded like any tool error
                self.stats.sent += 1
                refusal = exc.as_result()
                return Outcome(refusal.text, refusal.is_error)
            except McpClientError as exc:
                # the transport failed (crashed, timed out): no answer to record; the row is
                # invalid and the call is sent again by the next row that needs it
                self.stats.sent += 1
                raise InvalidRowError("transport", f"{tool}: {str(exc)[:200]}") from None
        self.stats.sent += 1
        return Outcome(result.text, result.is_error)

    async def call(
        self, tool: str, arguments: Mapping[str, Any], session: str | None = None
    ) -> Outcome:
        """The result of one call, executed at most once per canonical arguments (stateless
        servers) and recorded. A session tool (or any call of a stateful server) is sent
        every time, in the row's `session`, and must agree with what is recorded."""
        try:
            key = (tool, canonical_arguments(arguments))
        except CallStoreError as exc:
            raise InvalidRowError("arguments", f"{tool}: {exc}") from None
        if self.stateful or tool in self.session_tools:
            outcome = await self._send(
                tool, arguments, session if tool in self.session_tools else None
            )
            recorded = self.store.lookup(self.server, tool, arguments)
            if recorded is None:
                self.store.record_one(self.server, tool, arguments, outcome.text, outcome.is_error)
            elif (recorded.result, recorded.is_error) != (outcome.text, outcome.is_error):
                raise InvalidRowError(
                    "store_conflict",
                    f"{tool}{key[1]} answered differently in an earlier row; the store keeps "
                    "one result per call (give this row distinct arguments)",
                )
            return outcome
        pending = self._inflight.get(key)
        if pending is not None:
            self.stats.shared += 1
            return await asyncio.shield(pending)
        recorded = self.store.lookup(self.server, tool, arguments)
        if recorded is not None:
            self.stats.from_store += 1
            return Outcome(recorded.result, recorded.is_error, from_store=True)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            outcome = await self._send(tool, arguments)
            self.store.record_one(self.server, tool, arguments, outcome.text, outcome.is_error)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody joined
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(outcome)
        return outcome


@dataclass
class RowTruth:
    """What executing one row produced: the calls as the model must make them, the results,
    the answer strings."""

    steps: list[list[ExpectedCall]] = field(default_factory=list)
    results: list[list[dict[str, Any]]] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)


def _answer_text(value: Any) -> str:
    """An answer as text: numbers as `num` writes them (no trailing `.0`)."""
    return value if isinstance(value, str) else FILTERS["num"](value)


async def run_calls(
    executor: CallExecutor,
    steps: Sequence[CallSpec | Sequence[CallSpec]],
    slots: Mapping[str, Any],
    validators: Mapping[str, Any],
    session: str | None = None,
) -> tuple[list[list[ExpectedCall]], list[list[ExecutedCall]], list[list[dict[str, Any]]]]:
    """Fill and execute steps in order (calls of one step concurrently); `session` is the
    row's conversation, sent with session tools' calls."""
    expected: list[list[ExpectedCall]] = []
    executed: list[list[ExecutedCall]] = []
    results: list[list[dict[str, Any]]] = []
    for step in steps:
        calls = list(step) if isinstance(step, Sequence) else [step]
        filled: list[dict[str, Any]] = []
        for call in calls:
            try:
                arguments = fill(call.arguments, slots, executed)
            except RefError as exc:
                raise InvalidRowError("reference", f"{call.tool}: {exc}") from None
            if not isinstance(arguments, dict):
                raise InvalidRowError("arguments", f"{call.tool}: arguments are not an object")
            problems = schema_problems(validators[call.tool], arguments)
            if problems:
                raise InvalidRowError("schema", f"{call.tool}: {problems[0]}")
            filled.append(arguments)
        outcomes = await asyncio.gather(
            *(executor.call(c.tool, a, session) for c, a in zip(calls, filled, strict=True))
        )
        failed = [(c, o) for c, o in zip(calls, outcomes, strict=True) if o.is_error]
        if failed:
            executor.stats.errors += 1
            call, outcome = failed[0]
            raise InvalidRowError("tool_error", f"{call.tool}: {outcome.text[:200]}")
        objects = [result_object(o.text) for o in outcomes]
        expected.append(
            [
                ExpectedCall(
                    name=executor.tools[c.tool].exposed,
                    arguments=a,
                    free_arguments=list(c.free_arguments),
                )
                for c, a in zip(calls, filled, strict=True)
            ]
        )
        executed.append([ExecutedCall(a, r) for a, r in zip(filled, objects, strict=True)])
        results.append(objects)
    return expected, executed, results


async def execute_intent(
    executor: CallExecutor,
    intent: IntentSpec,
    slots: Mapping[str, Any],
    validators: Mapping[str, Any],
    session: str | None = None,
) -> RowTruth:
    """Run one row's expected calls and fill its answers; InvalidRowError says why it cannot be
    used (a tool error, a reference that found nothing, an answer the results do not hold)."""
    steps = [step_calls(step) for step in intent.steps]
    expected, executed, results = await run_calls(executor, steps, slots, validators, session)
    blob = json.dumps(results, ensure_ascii=False)
    answers: list[str] = []
    for answer in intent.answers:
        try:
            text = _answer_text(fill(answer, slots, executed))
        except RefError as exc:
            raise InvalidRowError("reference", f"answer: {exc}") from None
        if text not in blob:
            raise InvalidRowError("answer", f"answer {text!r} is not in the tools' results")
        answers.append(text)
    return RowTruth(expected, results, answers)


async def reset_server(
    executor: CallExecutor, reset: Sequence[CallSpec], validators: Mapping[str, Any]
) -> None:
    """Run the pack's reset calls (not recorded: they are set-up, not ground truth)."""
    executed: list[list[ExecutedCall]] = []
    for call in reset:
        try:
            arguments = fill(call.arguments, {}, executed)
        except RefError as exc:
            raise InvalidRowError("reset", f"{call.tool}: {exc}") from None
        outcome = await executor._send(call.tool, arguments)
        if outcome.is_error:
            raise InvalidRowError("reset", f"{call.tool}: {outcome.text[:200]}")
        executed.append([ExecutedCall(arguments, result_object(outcome.text))])


async def execute_intents(
    executor: CallExecutor,
    pack: PackSpec,
    work: Sequence[tuple[IntentSpec, Mapping[str, Any]]],
    validators: Mapping[str, Any],
    session_prefix: str,
    *,
    on_done: Callable[[], object] | None = None,
    refuse_bad_values: bool = False,
) -> list[RowTruth | InvalidRowError]:
    """Each (intent, slots) executed: concurrently, or one at a time after the pack's reset
    for a stateful server; a row's session (when the pack has session tools) is
    `PACK/SESSION_PREFIX-POSITION`. `refuse_bad_values`: a value the reference filters or
    the store cannot take makes the row invalid (`arguments`) instead of failing the run
    (the pack's own rows never hold one; an LLM's may)."""
    outcomes: list[RowTruth | InvalidRowError] = [InvalidRowError("pending", "")] * len(work)

    async def one(position: int) -> None:
        intent, slots = work[position]
        try:
            if pack.stateful:
                await reset_server(executor, pack.reset, validators)
            session = f"{pack.pack}/{session_prefix}-{position}" if pack.session_tools else None
            outcomes[position] = await execute_intent(executor, intent, slots, validators, session)
        except InvalidRowError as exc:
            outcomes[position] = exc
        except (RecursionError, ValueError, TypeError, ArithmeticError) as exc:
            if not refuse_bad_values:
                raise
            outcomes[position] = InvalidRowError("arguments", f"{type(exc).__name__}: {exc}")
        if on_done is not None:
            on_done()

    if pack.stateful:
        for position in range(len(work)):
            await one(position)
    else:
        await asyncio.gather(*(one(position) for position in range(len(work))))
    return outcomes


def build_validators(tools: Mapping[str, ServerTool]) -> dict[str, Any]:
    return {name: validator_for(tool.input_schema) for name, tool in tools.items()}


def count_reasons(errors: Sequence[InvalidRowError]) -> dict[str, int]:
    return dict(sorted(Counter(e.kind for e in errors).items()))
