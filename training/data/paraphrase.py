"""Optional LLM paraphrasing of template queries through any OpenAI-compatible endpoint.

Templates give exact ground truth but a narrow style; a paraphraser widens it. A paraphrase
is accepted only if every value the calls depend on (numbers, names, quoted text found in
the original query) survives verbatim, and it is not a duplicate: otherwise the template
query stays. Endpoint failures never fail generation; they are counted.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from serving.runtime.retry import RetryError, retry_async

PROMPT = (
    "Rewrite the user's request in different words, in the same language. Keep every number, "
    "name, code and quoted text exactly as written. Reply with the rewritten request only.\n\n"
    "Request: {query}"
)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class ParaphraseConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="Base URL of an OpenAI-compatible API, e.g. http://host:8000/v1")
    model: str = Field(default="default", description="Model name sent to the endpoint.")
    api_key: str | None = Field(
        default=None, description="Bearer token, if the endpoint needs one."
    )
    concurrency: int = Field(default=8, ge=1, le=256, description="Requests in flight.")
    timeout_s: float = Field(default=30.0, gt=0, description="Per-request timeout.")
    retries: int = Field(default=2, ge=0, le=10, description="Retries with backoff per query.")
    temperature: float = Field(default=0.8, ge=0, le=2)


@dataclass
class ParaphraseStats:
    attempted: int = 0
    accepted: int = 0
    rejected: int = 0
    failed: int = 0


def protected_values(row: dict[str, Any]) -> list[str]:
    """Strings the paraphrase must keep: call arguments that appear in the query, and numbers."""
    query = row["query"]
    values = set(_NUMBER.findall(query))
    for step in json.loads(row["expected_calls"]):
        for call in step:
            for value in call["arguments"].values():
                text = str(value)
                if text and text in query:
                    values.add(text)
    return sorted(values)


def accept(candidate: str, row: dict[str, Any], seen: set[str]) -> bool:
    candidate = candidate.strip()
    if not candidate or len(candidate) > 4 * len(row["query"]) + 200 or candidate in seen:
        return False
    return all(value in candidate for value in protected_values(row))


async def _ask(client: httpx.AsyncClient, config: ParaphraseConfig, query: str) -> str | None:
    body = {
        "model": config.model,
        "temperature": config.temperature,
        "max_tokens": 256,
        "messages": [{"role": "user", "content": PROMPT.format(query=query)}],
    }

    async def once() -> str | None:
        response = await client.post("/chat/completions", json=body)
        response.raise_for_status()  # any non-2xx: retried below, like every HTTP error
        content = response.json()["choices"][0]["message"]["content"]
        return content if isinstance(content, str) else None

    try:
        return await retry_async(
            once,
            attempts=config.retries + 1,
            first_backoff_s=0.2,
            what="paraphrase",
            retry_on=(httpx.HTTPError, ValueError, KeyError, IndexError, TypeError),
        )
    except RetryError:
        return None  # counted as failed; the template query stays


async def _paraphrase_all(
    rows: list[dict[str, Any]], config: ParaphraseConfig, progress: bool
) -> ParaphraseStats:
    stats = ParaphraseStats()
    seen = {row["query"] for row in rows}
    gate = asyncio.Semaphore(config.concurrency)
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    bar = tqdm(total=len(rows), desc="paraphrasing", unit="row", disable=not progress)
    async with httpx.AsyncClient(
        base_url=config.url.rstrip("/"), headers=headers, timeout=config.timeout_s
    ) as client:

        async def one(row: dict[str, Any]) -> None:
            async with gate:
                candidate = await _ask(client, config, row["query"])
            stats.attempted += 1
            if candidate is None:
                stats.failed += 1
            elif accept(candidate, row, seen):
                seen.add(candidate.strip())
                row["query"] = candidate.strip()
                row["prompt"][-1]["content"] = row["query"]
                stats.accepted += 1
            else:
                stats.rejected += 1
            bar.update()

        await asyncio.gather(*(one(row) for row in rows))
    bar.close()
    return stats


def paraphrase_rows(
    rows: list[dict[str, Any]], config: ParaphraseConfig, progress: bool = True
) -> ParaphraseStats:
    """Paraphrase rows in place (irrelevance rows too); return what happened."""
    return asyncio.run(_paraphrase_all(rows, config, progress))


def paraphrase_dataset(
    rows: list[dict[str, Any]],
    manifest: dict[str, Any],
    out_dir: Path,
    config: ParaphraseConfig,
    progress: bool = True,
) -> ParaphraseStats:
    """Paraphrase a generated dataset's rows and write it again: the manifest (updated in
    place) gets the new `dataset_version` and `paraphrase` (endpoint, model, counts). The
    ground truth, the call store and the tool snapshot do not change: only queries do."""
    from training.data.writer import dataset_version, write_dataset

    stats = paraphrase_rows(rows, config, progress=progress)
    manifest["dataset_version"] = dataset_version(rows)
    manifest["paraphrase"] = {"url": config.url, "model": config.model, **asdict(stats)}
    write_dataset(rows, manifest, out_dir)
    return stats
