"""LLM-as-judge, RULER style: one judge call scores a GROUP of trajectories for the same
prompt relative to each other.

Why relative: GRPO only uses differences within a group, and a judge ranks far more reliably
than it grades on an absolute scale. The shared prefix (the prompt) is sent once, each
trajectory is numbered, and the judge returns `{"scores": [{"trajectory_id", "explanation",
"score"}]}` with scores in [0, 1]. Groups larger than `max_sub_batch` are judged in chunks,
at most `concurrent_chunks` requests in flight.

Failure is normal for a remote judge, so it is never fatal: a timeout, an HTTP error or a
garbage reply (after retries with exponential backoff) makes that chunk fall back to the rule
score, and the fallback is counted in `JudgeStats`. Replies are cached by request content.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from serving.runtime.retry import retry_async
from training.rewards.config import JudgeConfig, RuleWeights

logger = logging.getLogger(__name__)

_OUTPUT_FORMAT = (
    'Reply with JSON only, exactly: {"scores": [{"trajectory_id": "<id>", "explanation": '
    '"<one short sentence>", "score": <number from 0 to 1>}, ...]} with one entry per trajectory.'
)


class JudgeReplyError(ValueError):
    """The judge answered, but not with one valid score per trajectory."""


@dataclass
class JudgeStats:
    """Counters for metrics: how often the judge was asked, answered from cache, or failed."""

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    fallbacks: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    #: Seconds waited before each retry, in order: the backoff schedule as it ran.
    backoff_waits: list[float] = field(default_factory=list)

    def count_failure(self, reason: str) -> None:
        self.failures[reason] = self.failures.get(reason, 0) + 1


@dataclass(frozen=True)
class GroupJudgement:
    """Per trajectory: the combined score, the judge's score (None on fallback) and reason."""

    scores: list[float]
    judge_scores: list[float | None]
    reasons: list[str]
    fallbacks: int
    errors: list[str]


def common_prefix(texts: Sequence[str]) -> str:
    """The longest shared prefix, cut back to a line start so no trajectory starts mid-word."""
    if len(texts) < 2:
        return ""
    shortest, longest = min(texts), max(texts)
    size = 0
    for a, b in zip(shortest, longest, strict=False):
        if a != b:
            break
        size += 1
    cut = shortest.rfind("\n", 0, size)
    return shortest[: cut + 1] if cut >= 0 else ""


def _clip_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + "\n...(cut)...\n" + text[-half:]


def build_messages(
    config: JudgeConfig, prompt: str, trajectories: Sequence[str]
) -> list[dict[str, str]]:
    """The judge request: rubric + format in the system message, context and numbered
    trajectories (their common prefix removed) in the user message."""
    prefix = common_prefix(trajectories)
    parts = [f"<context>\n{_clip_middle(prompt + prefix, config.max_trajectory_chars)}\n</context>"]
    for index, text in enumerate(trajectories, start=1):
        body = _clip_middle(text[len(prefix) :], config.max_trajectory_chars)
        parts.append(f'<trajectory id="{index}">\n{body}\n</trajectory>')
    return [
        {"role": "system", "content": f"{config.rubric}\n\n{_OUTPUT_FORMAT}"},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def _json_object(content: str) -> Any:
    start, end = content.find("{"), content.rfind("}")
    if start < 0 or end <= start:
        raise JudgeReplyError("no JSON object in the judge reply")
    try:
        return json.loads(content[start : end + 1])
    except (ValueError, RecursionError) as exc:
        raise JudgeReplyError(f"judge reply is not JSON: {exc}") from exc


def parse_reply(content: str, count: int) -> tuple[list[float], list[str]]:
    """Scores and reasons in trajectory order; raises JudgeReplyError on anything else."""
    obj = _json_object(content)
    entries = obj.get("scores") if isinstance(obj, dict) else None
    if not isinstance(entries, list):
        raise JudgeReplyError("judge reply has no 'scores' list")
    scores: dict[int, tuple[float, str]] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise JudgeReplyError("a score entry is not an object")
        try:
            index = int(str(entry.get("trajectory_id", "")).strip())
            score = float(entry["score"])
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise JudgeReplyError(f"bad score entry: {str(entry)[:80]}") from exc
        if not 0.0 <= score <= 1.0:
            raise JudgeReplyError(f"score {score} outside [0, 1]")
        scores[index] = (score, str(entry.get("explanation", ""))[:300])
    if sorted(scores) != list(range(1, count + 1)):
        raise JudgeReplyError(f"expected ids 1..{count}, got {sorted(scores)[:20]}")
    return [scores[i][0] for i in range(1, count + 1)], [scores[i][1] for i in range(1, count + 1)]


def failure_reason(exc: BaseException) -> str:
    """The counted key of a failed judge request (`JudgeStats.failures`)."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"http_{exc.response.status_code}"
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.TransportError):
        return "transport"
    if isinstance(exc, JudgeReplyError):
        return "bad_reply"
    return type(exc).__name__


def _worth_retrying(exc: BaseException) -> bool:
    """429 and 5xx, timeouts, transport failures and garbage replies; not other 4xx (the
    request itself is wrong, another try gets the same answer)."""
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        return status == 429 or status >= 500
    return isinstance(exc, TimeoutError | httpx.TransportError | JudgeReplyError)


def combine(rule: float, judge: float | None, weight: float, weights: RuleWeights) -> float:
    """(1 - w) x rule + w x judge scaled onto the rule's clip range; rule alone on fallback."""
    if judge is None:
        return rule
    scaled = weights.clip_low + judge * (weights.clip_high - weights.clip_low)
    return (1.0 - weight) * rule + weight * scaled


class GroupJudge:
    """Scores groups through an OpenAI-compatible `/chat/completions` endpoint."""

    def __init__(
        self,
        config: JudgeConfig,
        weights: RuleWeights | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.config = config
        self.weights = weights or RuleWeights()
        self.stats = JudgeStats()
        self._client = client
        self._owns_client = client is None
        self._cache: OrderedDict[str, tuple[list[float], list[str]]] = OrderedDict()
        self._semaphore: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _bind_loop(self) -> asyncio.Semaphore:
        """The semaphore (and HTTP client) belong to one event loop; a caller that runs each
        batch under a new `asyncio.run` gets fresh ones instead of a cross-loop error."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._semaphore is None:
            if self._loop is not None and self._loop is not loop and self._owns_client:
                self._client = None
            self._loop = loop
            self._semaphore = asyncio.Semaphore(self.config.concurrent_chunks)
        return self._semaphore

    async def __aenter__(self) -> GroupJudge:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Content-Type": "application/json"}
            if self.config.api_key is not None:
                headers["Authorization"] = f"Bearer {self.config.api_key.get_secret_value()}"
            self._client = httpx.AsyncClient(
                base_url=self.config.base_url.rstrip("/"),
                headers=headers,
                timeout=httpx.Timeout(self.config.timeout_s),
            )
        return self._client

    def _cache_key(self, messages: list[dict[str, str]]) -> str:
        payload = json.dumps(
            [self.config.model, self.config.max_completion_tokens, messages], ensure_ascii=False
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    async def _request(
        self, messages: list[dict[str, str]], count: int
    ) -> tuple[list[float], list[str]]:
        body = {
            "model": self.config.model,
            "messages": messages,
            "max_completion_tokens": self.config.max_completion_tokens,
            "temperature": self.config.temperature,
        }
        self.stats.requests += 1
        response = await asyncio.wait_for(
            self._http().post("/chat/completions", json=body), self.config.timeout_s
        )
        if response.status_code == 429 or response.status_code >= 500:
            raise httpx.HTTPStatusError("retryable", request=response.request, response=response)
        response.raise_for_status()
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise JudgeReplyError("not an OpenAI chat completion") from exc
        if not isinstance(content, str):
            raise JudgeReplyError("completion has no text content")
        return parse_reply(content, count)

    async def _request_counted(
        self, messages: list[dict[str, str]], count: int
    ) -> tuple[list[float], list[str]]:
        """`_request`, with each failure of a known kind counted by its reason."""
        try:
            return await self._request(messages, count)
        except (httpx.HTTPStatusError, TimeoutError, httpx.TransportError, JudgeReplyError) as exc:
            self.stats.count_failure(failure_reason(exc))
            raise

    def _count_retry(self, _: BaseException, wait_s: float) -> None:
        self.stats.retries += 1
        self.stats.backoff_waits.append(wait_s)

    async def _judge_chunk(
        self, prompt: str, chunk: Sequence[str]
    ) -> tuple[list[float], list[str]]:
        messages = build_messages(self.config, prompt, chunk)
        key = self._cache_key(messages)
        if key in self._cache:
            self.stats.cache_hits += 1
            self._cache.move_to_end(key)
            return self._cache[key]
        async with self._bind_loop():
            result = await retry_async(
                self._request_counted,
                messages,
                len(chunk),
                attempts=self.config.max_retries + 1,
                first_backoff_s=self.config.backoff_s,
                what="judge",
                retry_on=_worth_retrying,
                error=JudgeReplyError,
                describe=failure_reason,
                on_retry=self._count_retry,
            )
        if self.config.cache_size:
            self._cache[key] = result
            while len(self._cache) > self.config.cache_size:
                self._cache.popitem(last=False)
        return result

    async def score_group(
        self, prompt: str, trajectories: Sequence[str], rule_scores: Sequence[float]
    ) -> GroupJudgement:
        """Judge one group; every chunk that fails falls back to its rule scores."""
        if len(trajectories) != len(rule_scores):
            raise ValueError("one rule score per trajectory is required")
        size = self.config.max_sub_batch
        starts = list(range(0, len(trajectories), size))
        outcomes = await asyncio.gather(
            *(self._judge_chunk(prompt, trajectories[s : s + size]) for s in starts),
            return_exceptions=True,
        )
        judged: list[float | None] = []
        reasons: list[str] = []
        errors: list[str] = []
        fallbacks = 0
        for start, outcome in zip(starts, outcomes, strict=True):
            count = len(trajectories[start : start + size])
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome
                fallbacks += count
                message = f"{type(outcome).__name__}: {str(outcome)[:120]}"
                logger.warning("judge fell back to rule scores: %s", message)
                judged.extend([None] * count)
                reasons.extend([""] * count)
                errors.extend([message] * count)
            else:
                judged.extend(outcome[0])
                reasons.extend(outcome[1])
                errors.extend([""] * count)
        self.stats.fallbacks += fallbacks
        weight = self.config.judge_weight
        combined = [
            combine(rule, judge, weight, self.weights)
            for rule, judge in zip(rule_scores, judged, strict=True)
        ]
        return GroupJudgement(combined, judged, reasons, fallbacks, errors)

    async def score_batch(
        self, prompts: Sequence[str], completions: Sequence[str], rule_scores: Sequence[float]
    ) -> list[float]:
        """A flat batch (TRL reward functions get one): grouped by prompt, judged, and
        returned in the input order."""
        groups: dict[str, list[int]] = {}
        for index, prompt in enumerate(prompts):
            groups.setdefault(prompt, []).append(index)
        results = await asyncio.gather(
            *(
                self.score_group(
                    prompt, [completions[i] for i in idx], [rule_scores[i] for i in idx]
                )
                for prompt, idx in groups.items()
            )
        )
        out = [0.0] * len(prompts)
        for idx, judgement in zip(groups.values(), results, strict=True):
            for position, score in zip(idx, judgement.scores, strict=True):
                out[position] = score
        return out
