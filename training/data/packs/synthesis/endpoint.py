"""The prompt and the requests: schemas and a few executed TRAIN calls shown to any
OpenAI-compatible endpoint, asked for tasks in bounded, retried requests.

Why only TRAIN calls are shown: the LLM must not see a held-out query, or it could copy a
test phrasing into train.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from serving.runtime.retry import retry_async
from training.data.packs.execute import ServerTool
from training.data.packs.synthesis.config import SynthesisConfig
from training.data.packs.synthesis.proposal import reply_tasks
from training.data.packs.synthesis.report import ProposalError, SynthesisReport
from training.data.schema import GroundTruth

SAMPLE_RESULT_CHARS = 600

PROMPT = """You write training tasks for an assistant that calls tools.

Tools (name, description, JSON Schema of the arguments):
{tools}

Calls already executed on the real server, with their results (JSON):
{samples}

Write {count} new, varied user requests that these tools answer, with the exact calls that
answer each. Languages: {languages}. Prefer {focus}.
Rules:
- "steps" is a list of steps; a step is a list of calls made together (independent calls in
  one turn). Use two or more steps only when a later call needs an earlier result.
- A later argument may point into an earlier result: "$steps[0].result.KEY" (then ".KEY",
  "[N]"), optionally with "| hhmm" (a time as HH:MM), "| date", "| num", "| lower".
- "answers": what the final reply must contain, as references into results (optional).
- Put every value the calls need into the request itself.
Reply with JSON only, exactly this shape:
{{"tasks": [{{"query": "...", "language": "{first_language}",
  "steps": [[{{"tool": "NAME", "arguments": {{}}}}]], "answers": []}}]}}
"""
FOCUSES = (
    "one call answering one request",
    "two or more independent calls in one step",
    "a chain: a later call uses an earlier call's result",
)


def sample_calls(rows: Sequence[Mapping[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Up to `limit` executed calls from TRAIN rows, one per tool first: shown with their
    results so the LLM sees what the server really answers (and which keys a chain reads)."""
    picked: list[dict[str, Any]] = []
    seen: set[str] = set()
    for row in rows:
        if len(picked) >= limit:
            break
        if row["extra_info"]["split"] != "train":
            continue
        truth = GroundTruth.from_json(row["reward_model"]["ground_truth"])
        for step, results in zip(truth.steps, truth.results, strict=True):
            for call, result in zip(step, results, strict=True):
                if call.name in seen or len(picked) >= limit:
                    continue
                seen.add(call.name)
                text = json.dumps(result, ensure_ascii=False)[:SAMPLE_RESULT_CHARS]
                picked.append({"tool": call.name, "arguments": call.arguments, "result": text})
    return picked


def build_prompt(
    tools: Mapping[str, ServerTool],
    samples: Sequence[Mapping[str, Any]],
    languages: Sequence[str],
    count: int,
    focus: str,
) -> str:
    listed = "\n".join(
        json.dumps(
            {"name": t.exposed, "description": t.description[:500], "inputSchema": t.input_schema},
            ensure_ascii=False,
        )
        for t in sorted(tools.values(), key=lambda t: t.exposed)
    )
    shown = "\n".join(
        f"{s['tool']}({json.dumps(s['arguments'], ensure_ascii=False)}) -> {s['result']}"
        for s in samples
    )
    return PROMPT.format(
        tools=listed,
        samples=shown or "(none)",
        count=count,
        languages=", ".join(languages),
        first_language=languages[0],
        focus=focus,
    )


class _RetryableError(Exception):
    """An answer worth another try (429, 5xx); its message is the problem."""


async def _post(client: httpx.AsyncClient, body: dict[str, Any], limit: int) -> httpx.Response:
    """POST with the body read up to `limit` bytes (a huge reply is refused, not buffered)."""
    async with client.stream("POST", "/chat/completions", json=body) as response:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise ProposalError("too_large", f"HTTP body over {limit} bytes")
            chunks.append(chunk)
        return httpx.Response(
            response.status_code, content=b"".join(chunks), request=response.request
        )


async def ask(client: httpx.AsyncClient, config: SynthesisConfig, prompt: str) -> str:
    """One chat completion's content; ProposalError (`endpoint_error`, `too_large`) when
    there is none after the retries."""
    body: dict[str, Any] = {
        "model": config.model,
        "temperature": config.temperature,
        "max_tokens": config.max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    if config.json_mode:
        body["response_format"] = {"type": "json_object"}

    async def once() -> str:
        try:
            response = await _post(client, body, config.max_reply_bytes)
            if response.status_code == 400 and "response_format" in body:
                body.pop("response_format")  # an endpoint without JSON mode: ask plainly
                response = await _post(client, body, config.max_reply_bytes)
            if response.status_code in (429, 500, 502, 503, 504):
                raise _RetryableError(f"HTTP {response.status_code}")
            if response.status_code != 200:
                raise ProposalError("endpoint_error", f"HTTP {response.status_code}")
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ProposalError("endpoint_error", f"not a chat completion: {exc}"[:160]) from None
        if not isinstance(content, str):
            raise ProposalError("endpoint_error", "the reply has no text content")
        return content

    return await retry_async(
        once,
        attempts=config.retries + 1,
        first_backoff_s=0.2,
        what="the endpoint",
        retry_on=(_RetryableError, httpx.HTTPError),
        error=lambda message: ProposalError("endpoint_error", message),
        describe=lambda exc: str(exc)[:120] or type(exc).__name__,
    )


async def propose(
    config: SynthesisConfig,
    tools: Mapping[str, ServerTool],
    samples: Sequence[Mapping[str, Any]],
    languages: Sequence[str],
    report: SynthesisReport,
) -> list[Any]:
    """Ask the endpoint for `config.proposals` tasks; the task items of the usable replies
    (each counted as proposed; an unusable reply counts as one rejected proposal)."""
    requests = -(-config.proposals // config.per_request)
    gate = asyncio.Semaphore(config.concurrency)
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    items: list[list[Any]] = [[] for _ in range(requests)]
    async with httpx.AsyncClient(
        base_url=config.url.rstrip("/"), headers=headers, timeout=config.timeout_s
    ) as client:

        async def one(index: int) -> None:
            count = min(config.per_request, config.proposals - index * config.per_request)
            prompt = build_prompt(tools, samples, languages, count, FOCUSES[index % len(FOCUSES)])
            async with gate:
                try:
                    content = await ask(client, config, prompt)
                    tasks = reply_tasks(content, config)
                except ProposalError as exc:
                    report.proposed += 1
                    report.reject(exc.reason, exc.detail)
                    return
            report.proposed += min(len(tasks), count)
            for extra in tasks[count:]:
                report.proposed += 1
                report.reject("excess", f"more tasks than asked: {str(extra)[:60]}")
            items[index] = tasks[:count]

        report.requests = requests
        await asyncio.gather(*(one(i) for i in range(requests)))
    return [item for batch in items for item in batch]
