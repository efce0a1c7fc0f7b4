"""A scripted OpenAI-compatible server: known outputs, so the harness's scores are known.

Why it exists: no real model can be downloaded here, and metrics must be checked exactly
(known outputs -> known scores) and benchmarked without model time. It speaks the same HTTP
as vLLM / `transformers serve` (`/v1/chat/completions` with `tool_calls`, `/v1/completions`
with raw text, `/v1/models`, `/health`) on loopback. A `Script` decides each reply; the
`oracle` script answers every dataset case perfectly from its ground truth.

    python -m training.evaluation.scripted --data DIR/test.parquet --port 8080
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from training.data.schema import GroundTruth

Message = dict[str, Any]


@dataclass
class Scripted:
    """One scripted reply: prose and/or structured calls, or a raw HTTP status + body."""

    content: str = ""
    calls: list[tuple[str, Any]] = field(default_factory=list)
    """(name, arguments) pairs; arguments may be a dict or a (possibly broken) JSON string."""
    status: int = 200
    body: str | None = None


Script = Callable[[Sequence[Message], Sequence[Message]], Scripted]
"""(messages, tools) -> reply for the chat endpoint."""


def _first_user(messages: Sequence[Message]) -> str:
    return next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")


def _answer_for(truth: GroundTruth) -> str:
    if truth.category.value == "clarification":
        return f"Could you tell me the {(truth.missing_argument or 'details').replace('_', ' ')}?"
    if truth.category.value == "irrelevance":
        return "I can answer that directly without any tool."
    return "Here is the answer: " + ", ".join(truth.answers)


def oracle_script(truths: Mapping[str, GroundTruth]) -> Script:
    """Perfect answers: step i's calls on the i-th assistant turn, then the answer values.
    `truths` maps the first user message to the case's ground truth."""

    def reply(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        truth = truths.get(_first_user(messages))
        if truth is None:
            return Scripted(content="I do not know this conversation.")
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn < len(truth.steps):
            return Scripted(calls=[(c.name, dict(c.arguments)) for c in truth.steps[turn]])
        return Scripted(content=_answer_for(truth))

    return reply


def truths_from_parquet(path: Path) -> dict[str, GroundTruth]:
    from training.evaluation.cases import load_cases

    return {_first_user(c.messages): c.truth for c in load_cases(path).cases}


def hermes_text(reply: Scripted) -> str:
    """The raw text a hermes-format model would write for this reply."""
    blocks = [
        "<tool_call>\n"
        + json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
        + "\n</tool_call>"
        for name, args in reply.calls
    ]
    return "\n".join([reply.content, *blocks]).strip() if blocks else reply.content


def _messages_from_prompt(prompt: str) -> list[Message]:
    """Enough of a ChatML prompt for a script: the first user turn and assistant count."""
    messages: list[Message] = []
    for chunk in prompt.split("<|im_start|>")[1:]:
        role, _, rest = chunk.partition("\n")
        messages.append({"role": role.strip(), "content": rest.split("<|im_end|>")[0]})
    if messages and messages[-1]["role"] == "assistant" and not messages[-1]["content"]:
        messages.pop()  # the generation prompt
    return messages


def build_app(
    script: Script,
    usage: tuple[int, int] = (100, 20),
    received: list[dict[str, Any]] | None = None,
) -> web.Application:
    """The aiohttp app serving `script`; `usage` is the (prompt, completion) tokens claimed;
    `received`, when given, collects every chat request body (what a client really sent)."""
    counter = iter(range(1 << 62))

    def usage_block() -> dict[str, int]:
        return {"prompt_tokens": usage[0], "completion_tokens": usage[1]}

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        if received is not None:
            received.append(body)
        reply = script(body.get("messages", []), body.get("tools") or [])
        if reply.status != 200 or reply.body is not None:
            return web.Response(status=reply.status, text=reply.body or "{}")
        n = next(counter)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
        if reply.calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{n}_{i}",
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": args if isinstance(args, str) else json.dumps(args),
                    },
                }
                for i, (name, args) in enumerate(reply.calls)
            ]
        finish = "tool_calls" if reply.calls else "stop"
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return web.json_response(
            {"id": f"chatcmpl-{n}", "object": "chat.completion", "model": body.get("model"),
             "choices": [choice], "usage": usage_block()}
        )  # fmt: skip

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        reply = script(_messages_from_prompt(str(body.get("prompt", ""))), [])
        if reply.status != 200 or reply.body is not None:
            return web.Response(status=reply.status, text=reply.body or "{}")
        choice = {"index": 0, "text": hermes_text(reply), "finish_reason": "stop"}
        return web.json_response(
            {"object": "text_completion", "choices": [choice], "usage": usage_block()}
        )

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted"}]})

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


@contextmanager
def serve_in_thread(
    script: Script, port: int = 0, received: list[dict[str, Any]] | None = None
) -> Iterator[str]:
    """Run the scripted server on 127.0.0.1 in a background thread; yields the `/v1` URL."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    async def start() -> None:
        runner = web.AppRunner(build_app(script, received=received), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        holder["runner"] = runner
        holder["port"] = runner.addresses[0][1]
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    ready.wait(10)
    try:
        yield f"http://127.0.0.1:{holder['port']}/v1"
    finally:
        asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="test.parquet to answer")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    web.run_app(
        build_app(oracle_script(truths_from_parquet(args.data))),
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        print=None,
    )


if __name__ == "__main__":
    main()
