"""`toolrl-engine`: an OpenAI-compatible model server for CPU, on the packed engine.

What vLLM gives a GPU deployment, this gives the embedded default: the tool prompt's keys
computed once and shared (prefix caching), requests decoded together as they arrive
(continuous batching), calls returned as OpenAI `tool_calls` (the hermes format). Against
`transformers serve`, which recomputes the ~800-token tool prompt for every model turn and
serves one request at a time, it is what makes evaluating a 135M model on 100+ held-out
conversations take a minute instead of ten (`benchmarks/bench_serving_cpu.py`).

Endpoints: `GET /health`, `GET /v1/models`, `POST /v1/completions` (a raw prompt), `POST
/v1/chat/completions` (rendered with the model's chat template, `tools` included; `stream=true`
sends the prose token by token and the calls whole once the reply is complete). Request
bodies are untrusted: size-capped, type-checked by the field rules the front door uses too
(`serving/openai_request.py`), answered with OpenAI-style errors.

    python -m serving.engine.server --model DIR --port 8100 [--served-model-name NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

import serving.openai_request as fields
from serving.answer_stream import AnswerStream
from serving.engine.cpu_dtype import choose
from serving.engine.engine import Engine, Request, Sampling
from serving.engine.signals import ALONE_SIGNAL, SHARE_SIGNAL
from serving.engine.token_feed import TokenFeed
from serving.engine.worker import EngineWorker
from serving.openai_request import OpenAIRequestError as BadRequestError
from serving.renderer import ChatRenderer, RenderError
from serving.sse import ChunkWriter, ClientGoneError
from serving.toolcalls.openai_calls import split_tool_calls

logger = logging.getLogger(__name__)
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_TOKENS_CAP = 4096
POLL_S = 0.5
"""How often a waiting request checks that its caller is still connected."""


def error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "code": status}}, status=status
    )


def forced_call_prefix(body: dict[str, Any]) -> str:
    """What `tool_choice` makes the reply start with: `required` opens a hermes call, a named
    function opens a call to it, so the model only chooses what follows (for a named one, the
    arguments). `auto`/`none`/absent force nothing."""
    choice = body.get("tool_choice")
    if choice is None or choice in ("auto", "none"):
        return ""
    tools = body.get("tools")
    names = {
        t["function"]["name"]
        for t in (tools if isinstance(tools, list) else [])
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
    }
    if choice == "required":
        if not names:
            raise BadRequestError("tool_choice 'required' needs tools")
        return "<tool_call>\n"
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise BadRequestError("tool_choice must be 'auto', 'none', 'required' or a named function")
    if name not in names:
        raise BadRequestError(f"tool_choice names {name!r}, which is not among the tools")
    return '<tool_call>\n{"name": ' + json.dumps(name) + ', "arguments": '


@dataclass
class ModelHandle:
    """The loaded model, its tokenizer and the engine worker."""

    name: str
    renderer: ChatRenderer
    worker: EngineWorker
    stop_ids: frozenset[int]
    default_max_tokens: int = 512


class EngineServer:
    def __init__(self, handle: ModelHandle, request_timeout_s: float = 600.0) -> None:
        self.handle = handle
        self.request_timeout_s = request_timeout_s

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def health(self, _: web.Request) -> web.Response:
        worker = self.handle.worker
        return web.json_response(
            {
                "status": "ok",
                "failures": worker.failures,
                "in_flight": worker.in_flight,
                "threads": worker.wanted_threads,
            }
        )

    async def models(self, _: web.Request) -> web.Response:
        model = {"id": self.handle.name, "object": "model", "owned_by": "toolrl"}
        return web.json_response({"object": "list", "data": [model]})

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            raise BadRequestError("the body is too large", 413) from exc
        return fields.json_object(raw)

    def _sampling(self, body: dict[str, Any]) -> Sampling:
        """The request's sampling fields (shared rules, `serving/openai_request.py`); a
        budget above `MAX_TOKENS_CAP` is capped, not refused."""
        seed = fields.seed(body)
        fields.single_choice(body)
        budget = fields.max_tokens(body)
        temperature, top_p = fields.temperature(body), fields.top_p(body)
        return Sampling(
            max_new_tokens=(
                self.handle.default_max_tokens if budget is None else min(budget, MAX_TOKENS_CAP)
            ),
            temperature=0.0 if temperature is None else temperature,
            top_p=1.0 if top_p is None else top_p,
            stop_ids=self.handle.stop_ids,
            seed=seed,
        )

    async def _generate(
        self,
        prompt: list[int],
        sampling: Sampling,
        prefix_hint: Sequence[int] | None,
        http: web.Request | None = None,
    ) -> Request:
        """Generate on the worker; a caller that disconnects (a cancelled front-door episode)
        cancels the request within `POLL_S`, so abandoned work stops taking engine rows."""

        def caller_gone() -> bool:
            transport = http.transport if http is not None else None
            return http is not None and (transport is None or transport.is_closing())

        return await self.handle.worker.generate_async(
            Request(prompt, sampling), prefix_hint, self.request_timeout_s, caller_gone, POLL_S
        )

    def _decode(self, request: Request, stops: list[str]) -> tuple[str, str]:
        tokens = [t for t in request.tokens if t not in self.handle.stop_ids]
        text = str(self.handle.renderer.tokenizer.decode(tokens, skip_special_tokens=True))
        finish = "stop" if request.finish == "stop" else "length"
        for stop in stops:
            cut = text.find(stop)
            if cut >= 0:
                text, finish = text[:cut], "stop"
        return text, finish

    def _usage(self, prompt: list[int], request: Request) -> dict[str, int]:
        return {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(request.tokens),
            "total_tokens": len(prompt) + len(request.tokens),
        }

    async def completions(self, http: web.Request) -> web.Response:
        try:
            body = await self._body(http)
            if body.get("stream"):
                raise BadRequestError(
                    "stream=true is supported on /v1/chat/completions only; "
                    "call /v1/completions without it"
                )
            prompt_text = body.get("prompt")
            if not isinstance(prompt_text, str) or not prompt_text:
                raise BadRequestError("prompt must be a non-empty string")
            sampling, stops = self._sampling(body), fields.stop(body)
            tokenizer = self.handle.renderer.tokenizer
            prompt = list(tokenizer(prompt_text, add_special_tokens=False)["input_ids"])
            request = await self._generate(prompt, sampling, None, http)
        except BadRequestError as exc:
            return error(exc.status, exc.message)
        except TimeoutError:
            return error(504, "generation timed out", "timeout")
        if request.finish == "error":
            return error(400, request.error or "generation failed")
        text, finish = self._decode(request, stops)
        return web.json_response(
            {
                "id": f"cmpl-{uuid.uuid4().hex[:16]}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.handle.name,
                "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
                "usage": self._usage(prompt, request),
            }
        )

    def _render(self, body: dict[str, Any], forced: str = "") -> tuple[list[int], list[int] | None]:
        messages, tools = fields.message_list(body), body.get("tools")
        if body.get("tool_choice") == "none":
            tools = None  # answer without tools: the model is not shown them
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise BadRequestError(f"messages[{index}] must be an object with a role")
        if tools is not None and (
            not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)
        ):
            raise BadRequestError("tools must be a list of objects")
        renderer = self.handle.renderer
        try:
            text = renderer.text(messages, tools or None)
            hint = renderer.system_prefix_ids(messages, tools or None)
        except RenderError as exc:  # a template error is the request's fault, not the server's
            raise BadRequestError(str(exc)) from exc
        return renderer.encode(text + forced), hint

    async def chat(self, http: web.Request) -> web.StreamResponse:
        try:
            body = await self._body(http)
            stream = fields.stream_flags(body)
            forced = forced_call_prefix(body)
            prompt, hint = self._render(body, forced)
            sampling, stops = self._sampling(body), fields.stop(body)
            if stream.stream:
                return await self._stream_chat(
                    http,
                    prompt,
                    hint,
                    sampling,
                    stops,
                    forced,
                    stream.include_usage,
                    body.get("tools"),
                )
            request = await self._generate(prompt, sampling, hint, http)
        except BadRequestError as exc:
            return error(exc.status, exc.message)
        except TimeoutError:
            return error(504, "generation timed out", "timeout")
        if request.finish == "error":
            return error(400, request.error or "generation failed")
        text, finish = self._decode(request, stops)
        content, calls = split_tool_calls(forced + text, body.get("tools"))
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
            finish = "tool_calls"
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.handle.name,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": self._usage(prompt, request),
            }
        )

    async def _stream_chat(
        self,
        http: web.Request,
        prompt: list[int],
        hint: list[int] | None,
        sampling: Sampling,
        stops: list[str],
        forced: str,
        include_usage: bool,
        tools: Any = None,
    ) -> web.StreamResponse:
        """`stream=true`: prose as it is decoded (held back where a call or a stop string may
        be starting, `serving/answer_stream.py`), then the calls whole, the finish reason,
        usage when asked, `[DONE]`. A request the engine refuses before its first token
        still gets a plain JSON error; a failure later ends the stream with an error event."""
        feed = TokenFeed(
            self.handle.worker, Request(prompt, sampling), hint, self.request_timeout_s
        )
        request = feed.request
        try:
            await feed.wait(http)
        except TimeoutError:
            return error(504, "generation timed out", "timeout")
        except ClientGoneError:
            return web.Response(status=499)  # nobody reads it; the row is already freed
        if request.finish == "error":
            return error(400, request.error or "generation failed")
        out = await ChunkWriter.open(http, self.handle.name)
        prose = AnswerStream(stops=stops)
        try:
            await out.delta({"role": "assistant", "content": ""})
            while True:
                delta = prose.replace(forced + self._text(request))
                if delta:
                    await out.delta({"content": delta})
                if prose.ended_by == "stop" or request.finish is not None:
                    break
                await feed.wait(http)
            if request.finish == "error":
                await out.error(500, request.error or "generation failed", "server_error")
            else:
                await self._stream_end(out, prose, forced, stops, request, tools)
                if include_usage:
                    await out.chunk([], usage=self._usage(prompt, request))
            await out.done()
        except TimeoutError:
            await out.error(504, "generation timed out", "timeout")
            await out.done()
        except ClientGoneError:
            pass  # the caller is gone and the row freed; nothing to tell anyone
        finally:
            feed.cancel()  # a no-op once finished; frees the row after a stop string
        return out.response

    async def _stream_end(
        self,
        out: ChunkWriter,
        prose: AnswerStream,
        forced: str,
        stops: list[str],
        request: Request,
        tools: Any = None,
    ) -> None:
        """The rest of the reply once generation ended: held-back prose, the calls whole
        (in the plain reply's shape), the finish reason. What the stream adds up to is the
        plain reply's message."""
        text, finish = self._decode(request, stops)
        content, calls = split_tool_calls(forced + text, tools)
        if calls:
            finish = "tool_calls"
            rest = content[len(prose.sent) :] if content.startswith(prose.sent) else ""
        elif prose.ended_by == "call":  # a malformed call stays text, as in the plain reply
            whole = (forced + text).lstrip()
            rest = whole[len(prose.sent) :] if whole.startswith(prose.sent) else ""
        else:
            # tokens decoded after the loop's last look are new prose too, not only the tail
            # held back for a continuation
            rest = prose.replace(forced + text) + prose.finish()
        if rest:
            await out.delta({"content": rest})
        if calls:
            await out.delta({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
        await out.delta({}, finish)

    def _text(self, request: Request) -> str:
        tokens = [t for t in request.tokens if t not in self.handle.stop_ids]
        return str(self.handle.renderer.tokenizer.decode(tokens, skip_special_tokens=True))


def load(
    model_dir: str,
    name: str,
    dtype: str,
    max_rows: int,
    threads: int | None,
    own_thread: bool = True,
) -> ModelHandle:
    """The model, its renderer and an engine worker over it. `own_thread=False`: nothing
    steps the engine until a thread calls `worker.run_here` (the server's main thread)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    choice = choose(dtype)
    logger.info("engine dtype %s: %s", choice.dtype, choice.reason)
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[choice.dtype]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype).eval()
    stop_ids = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
    for token in ("<|im_end|>", "<|endoftext|>"):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            stop_ids.add(token_id)
    worker = EngineWorker(Engine(model, max_rows=max_rows), threads, own_thread=own_thread)
    return ModelHandle(name, ChatRenderer(tokenizer), worker, frozenset(stop_ids))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--model", required=True, help="Hugging Face model directory.")
    parser.add_argument("--served-model-name", default="toolrl")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument(
        "--dtype",
        choices=("auto", "bfloat16", "float32"),
        default="auto",
        help="auto: bfloat16 where the CPU has it natively (AVX512-BF16, AMX), else float32.",
    )
    parser.add_argument("--max-rows", type=int, default=16, help="Requests decoded together.")
    parser.add_argument("--threads", type=int, default=None, help="torch threads.")
    parser.add_argument("--max-tokens", type=int, default=512, help="Default max_tokens.")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        choices=range(20),
        metavar="0-19",
        help="Lower this process's CPU priority (the front door and tools then go first).",
    )
    args = parser.parse_args(argv)
    if args.nice:
        os.nice(args.nice)
    handle_box: list[ModelHandle] = []

    def share(signum: int, _: object) -> None:
        # installed before the model loads: an early signal must not end the process
        if handle_box:
            handle_box[0].worker.share_cores(signum == SHARE_SIGNAL)

    signal.signal(SHARE_SIGNAL, share)
    signal.signal(ALONE_SIGNAL, share)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    handle = load(
        args.model,
        args.served_model_name,
        args.dtype,
        args.max_rows,
        args.threads,
        own_thread=False,
    )
    handle_box.append(handle)
    handle.default_max_tokens = args.max_tokens
    logger.info("serving %s as %r on %s:%d", args.model, handle.name, args.host, args.port)
    serve_on_main_thread(handle, EngineServer(handle).app(), args.host, args.port)


def serve_on_main_thread(handle: ModelHandle, app: web.Application, host: str, port: int) -> None:
    """HTTP on a helper thread, the engine stepped on this (the main) thread: torch's OpenMP
    pool is fast only on the thread that made it, and loading the model made it here
    (`EngineWorker`'s docstring has the measurement). SIGTERM or SIGINT stops the HTTP side
    first (requests in flight finish, the engine still stepping), then the engine; an HTTP
    side that fails to start (a port in use) stops the engine and is raised here."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    failure: list[BaseException] = []
    stopping = threading.Event()

    def serve_http() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, host, port).start())
            loop.run_forever()
        except BaseException as exc:  # raised on the main thread once the engine stops
            if not stopping.is_set():
                failure.append(exc)
        finally:
            try:
                loop.run_until_complete(runner.cleanup())
            finally:
                loop.close()
                handle.worker.close()  # ends `run_here` below

    def stop(signum: int, _: object) -> None:
        logger.info("signal %d: stopping HTTP, then the engine", signum)
        stopping.set()
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:  # the loop is already closed: only the engine is left
            handle.worker.close()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    http = threading.Thread(target=serve_http, name="toolrl-http", daemon=True)
    http.start()
    handle.worker.run_here()
    http.join(timeout=90)
    if failure:
        raise failure[0]


if __name__ == "__main__":
    main()
