"""Optional LLM synthesis: new training tasks proposed by any OpenAI-compatible endpoint,
kept only when they survive the same checks as the pack's own rows.

Why: a pack's templates give exact ground truth but only the phrasings someone wrote; an LLM
that reads the tool schemas proposes other requests and call chains. Its reply is untrusted
input (it may be malformed, huge, name tools that do not exist, or carry chat-template
markers), so every proposal passes three gates, and each rejection is counted by reason:

1. **format**: the reply parses (bounded size, JSON) into tasks whose query and expected
   calls name real tools, with arguments that validate against the tool's `inputSchema`
   (`jsonschema`; values that point into an earlier result are checked once filled);
2. **execution**: the calls run on the real server through `serving.mcp_client`, recorded
   in the dataset's `CallStore` like the pack generator's, and none may be a tool error;
3. **the suite**: the rows (built by the generator's own `build_row`) pass the per-row
   checks of the great-expectations suite, and the whole dataset then passes the suite.

Accepted rows go to TRAIN only, with template ids starting `llm-`: evaluation stays on the
pack's hand-written held-out templates. The LLM is shown schemas and a few executed calls
from TRAIN rows (never a test query), so it cannot copy a held-out phrasing into train.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from serving.mcp_client.base import McpClient
from serving.mcp_client.call_store import CallStore
from serving.runtime.retry import retry_async
from training.data.config import ValidationConfig
from training.data.packs.check import schema_problems
from training.data.packs.execute import (
    CallExecutor,
    InvalidRowError,
    RowTruth,
    ServerTool,
    build_validators,
    execute_intent,
    reset_server,
)
from training.data.packs.generate import (
    STORE_FILE,
    PackDataset,
    PlannedRow,
    build_row,
    dataset_version,
    generate_pack_dataset,
    run_on_pack_server,
    write_dataset,
)
from training.data.packs.loader import LoadedPack
from training.data.packs.model import IntentSpec
from training.data.packs.refs import RefError, has_reference, references_in
from training.data.packs.server import server_tools
from training.data.schema import DATA_SOURCE, Category, Difficulty, GroundTruth

TEMPLATE_PREFIX = "llm-"
MAX_QUERY_CHARS = 1_000
MAX_STEPS = 8
MAX_CALLS_PER_STEP = 8
MAX_ARGUMENT_CHARS = 4_000
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

_UNSAFE = re.compile(
    r"<\|[^|>]{0,40}\|>|</?(?:tool_call|tool_response|tools|think|function|system)\b|"
    r"im_start|im_end|<\s*/?\s*s\s*>",
    re.IGNORECASE,
)
_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F)}
_CJK = re.compile(r"[\u4e00-\u9fff]")
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class SynthesisConfig(BaseModel):
    """The endpoint and how hard to ask it (`ParaphraseConfig`'s conventions)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="Base URL of an OpenAI-compatible API, e.g. http://host:8000/v1")
    model: str = Field(default="default", description="Model name sent to the endpoint.")
    api_key: str | None = Field(default=None, description="Bearer token, if needed.")
    proposals: int = Field(default=20, ge=1, le=10_000, description="Tasks to ask for.")
    per_request: int = Field(default=4, ge=1, le=20, description="Tasks asked per request.")
    concurrency: int = Field(default=4, ge=1, le=64, description="Requests in flight.")
    timeout_s: float = Field(default=60.0, gt=0, description="Per-request timeout.")
    retries: int = Field(default=2, ge=0, le=10, description="Retries with backoff.")
    temperature: float = Field(default=0.9, ge=0, le=2)
    max_tokens: int = Field(default=1_500, ge=16, le=32_768)
    max_reply_bytes: int = Field(
        default=256 * 1024, ge=1_024, description="A longer HTTP body is refused unread."
    )
    max_reply_chars: int = Field(
        default=32_000, ge=100, description="A longer message content is refused unparsed."
    )
    samples: int = Field(default=3, ge=0, le=10, description="Executed calls shown.")
    json_mode: bool = Field(
        default=True, description="Send response_format json_object (dropped on a 400)."
    )


@dataclass
class SynthesisReport:
    """What happened to the proposals: the manifest's `synthesis` block."""

    requests: int = 0
    calls_sent: int = 0
    """Calls of the proposals sent to the server (the rest were answered from the store)."""
    proposed: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def reject(self, reason: str, detail: str = "") -> None:
        """Count one rejection; keep a few examples, with anything unprintable escaped (an
        example is the endpoint's text, and the CLI prints it to a terminal)."""
        self.rejected[reason] += 1
        if len(self.examples) < 8:
            text = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in detail[:240])
            self.examples.append(f"{reason}: {text}"[:240])

    @property
    def rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "calls_sent": self.calls_sent,
            "proposed": self.proposed,
            "accepted": self.accepted,
            "rate": round(self.rate, 4),
            "rejected": dict(sorted(self.rejected.items())),
            "examples": list(self.examples),
        }


class ProposalError(Exception):
    """A proposal (or a whole reply) that is refused; `reason` is the counted key."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# ---- the reply's shape ------------------------------------------------------------------
class ProposedCall(BaseModel):
    model_config = ConfigDict(extra="ignore")

    tool: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] = Field(default_factory=dict)

    @field_validator("tool", mode="before")
    @classmethod
    def _string(cls, value: Any) -> Any:
        if not isinstance(value, str):
            raise ValueError("tool must be a string")
        return value


class ProposedTask(BaseModel):
    """One task as the LLM writes it (extra keys, such as an explanation, are ignored)."""

    model_config = ConfigDict(extra="ignore")

    query: str = Field(min_length=4, max_length=MAX_QUERY_CHARS)
    language: str | None = Field(default=None, max_length=16)
    steps: list[list[ProposedCall]] = Field(min_length=1, max_length=MAX_STEPS)
    answers: list[str] = Field(default_factory=list, max_length=8)

    @field_validator("steps", mode="before")
    @classmethod
    def _steps(cls, value: Any) -> Any:
        """A step may be one call object instead of a list; `name` is read as `tool`."""
        if not isinstance(value, list):
            return value
        steps = []
        for step in value:
            calls = step if isinstance(step, list) else [step]
            if not 1 <= len(calls) <= MAX_CALLS_PER_STEP:
                raise ValueError(f"a step holds 1 to {MAX_CALLS_PER_STEP} calls")
            steps.append(
                [
                    {"tool": c.get("name"), **c} if isinstance(c, dict) and "tool" not in c else c
                    for c in calls
                ]
            )
        return steps


def reply_tasks(content: str, config: SynthesisConfig) -> list[Any]:
    """The task items of one reply (unvalidated), or ProposalError for the whole reply."""
    if len(content) > config.max_reply_chars:
        raise ProposalError("too_large", f"{len(content)} characters")
    fenced = _FENCE.match(content)
    text = fenced.group(1) if fenced else content.strip()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ProposalError("malformed_json", f"{str(exc)[:80]}: {text[:80]!r}") from None
    if isinstance(data, dict) and "tasks" in data:
        data = data["tasks"]
    elif isinstance(data, dict) and "query" in data:
        data = [data]
    if not isinstance(data, list) or not data:
        raise ProposalError("bad_shape", f"no task list in {text[:80]!r}")
    return data


def _unsafe(text: str) -> str | None:
    """Why a string cannot go into a prompt or a call (control or bidi characters, chat
    template markers), or None."""
    if _UNSAFE.search(text):
        return f"chat-template marker in {text[:60]!r}"
    for char in text:
        if char in _BIDI or (unicodedata.category(char) == "Cc" and char not in "\n\t"):
            return f"control character U+{ord(char):04X} in {text[:60]!r}"
    return None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _literal(value: Any) -> Any:
    """An LLM's value as pack data: references (`$steps...`) stay, every other string is
    escaped so its braces or `$` are text, never a slot template."""
    if isinstance(value, str):
        if has_reference(value) and "steps" in value:
            return value
        escaped = value.replace("{", "{{").replace("}", "}}")
        return "$" + escaped if escaped.startswith("$") else escaped
    if isinstance(value, Mapping):
        return {str(k): _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return value


def _category(task: ProposedTask) -> Category:
    if len(task.steps) >= 2:
        return Category.MULTI_STEP
    return Category.PARALLEL if len(task.steps[0]) >= 2 else Category.SINGLE


DIFFICULTY = {
    Category.SINGLE: Difficulty.EASY,
    Category.PARALLEL: Difficulty.MEDIUM,
    Category.MULTI_STEP: Difficulty.HARD,
}


def _language(task: ProposedTask, languages: Sequence[str]) -> str:
    has_cjk = bool(_CJK.search(task.query))
    lang = task.language or ("zh" if has_cjk and "zh" in languages else languages[0])
    if lang not in languages:
        raise ProposalError("language", f"{lang!r} is not one of the pack's {list(languages)}")
    if (lang == "en" and has_cjk) or (lang == "zh" and not has_cjk):
        raise ProposalError("language", f"the query is not in {lang!r}: {task.query[:60]!r}")
    return lang


def proposal_intent(
    item: Any,
    tools: Mapping[str, ServerTool],
    validators: Mapping[str, Any],
    languages: Sequence[str],
) -> tuple[IntentSpec, str, str]:
    """The format check: one task item as a pack intent (no slots, one phrasing), its
    language and query; ProposalError names the first thing wrong."""
    try:
        task = ProposedTask.model_validate(item)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ProposalError("bad_shape", f"{where}: {first['msg']}") from None
    query = task.query.strip()
    for text in (
        query,
        *task.answers,
        *(s for step in task.steps for c in step for s in _strings(c.arguments)),
    ):
        problem = _unsafe(text)
        if problem:
            raise ProposalError("unsafe_text", problem)
    lang = _language(task, languages)
    by_name = {t.exposed: t.name for t in tools.values()} | {t.name: t.name for t in tools.values()}
    steps: list[dict[str, Any]] = []
    for position, step in enumerate(task.steps):
        calls = []
        for call in step:
            own = by_name.get(call.tool)
            if own is None:
                raise ProposalError("unknown_tool", f"{call.tool[:60]!r}")
            if len(json.dumps(call.arguments, default=str)) > MAX_ARGUMENT_CHARS:
                raise ProposalError("bad_shape", f"{call.tool}: arguments over limit")
            try:
                refs = references_in(call.arguments)
            except RefError as exc:
                raise ProposalError("reference", str(exc)[:160]) from None
            if any(r.step >= position for r in refs):
                raise ProposalError("reference", f"{call.tool}: points to a step not yet run")
            skip = _reference_paths(call.arguments)
            problems = schema_problems(validators[own], call.arguments, skip)
            if problems:
                raise ProposalError("schema", f"{own}: {problems[0]}"[:200])
            calls.append({"tool": own, "arguments": _literal(call.arguments)})
        steps.append(calls[0] if len(calls) == 1 else {"parallel": calls})
    category = _category(task)
    try:
        intent = IntentSpec.model_validate(
            {
                "name": f"llm_{category.value}",
                "category": category,
                "difficulty": DIFFICULTY[category],
                "phrasings": {lang: {"llm": query.replace("{", "{{").replace("}", "}}")}},
                "steps": steps,
                "answers": [_literal(a) for a in task.answers],
            }
        )
    except ValidationError as exc:
        raise ProposalError("bad_shape", str(exc.errors(include_url=False)[0]["msg"])) from None
    return intent, lang, query


def _reference_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if has_reference(value):
        return [prefix]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _reference_paths(v, (*prefix, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _reference_paths(v, (*prefix, i))]
    return []


# ---- the prompt and the endpoint --------------------------------------------------------
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


# ---- the whole run ----------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    planned: PlannedRow
    truth: RowTruth


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


def _template(pack: str, category: Category, lang: str, query: str) -> str:
    digest = hashlib.sha1(query.encode(), usedforsecurity=False).hexdigest()[:12]
    return f"{TEMPLATE_PREFIX}{pack}/{category.value}/{lang}/{digest}"


async def execute_candidates(
    items: Sequence[Any],
    executor: CallExecutor,
    loaded: LoadedPack,
    tools: Mapping[str, ServerTool],
    report: SynthesisReport,
) -> list[Candidate]:
    """Gates 1 and 2: format, then execution on the server (recorded in the store)."""
    pack = loaded.spec
    validators = build_validators(tools)
    languages = list(pack.languages)
    parsed: list[tuple[IntentSpec, str, str]] = []
    for item in items:
        try:
            parsed.append(proposal_intent(item, tools, validators, languages))
        except ProposalError as exc:
            report.reject(exc.reason, exc.detail)
        except (RecursionError, ValueError, TypeError) as exc:
            # nesting deep enough to exhaust a recursive walk, values json cannot dump back
            report.reject("bad_shape", f"{type(exc).__name__}: {str(exc)[:120]}")
    outcomes: list[RowTruth | InvalidRowError] = [InvalidRowError("pending", "")] * len(parsed)

    async def one(position: int) -> None:
        intent = parsed[position][0]
        try:
            if pack.stateful:
                await reset_server(executor, pack.reset, validators)
            session = f"{pack.pack}/proposal-{position}" if pack.session_tools else None
            outcomes[position] = await execute_intent(executor, intent, {}, validators, session)
        except InvalidRowError as exc:
            outcomes[position] = exc
        except (RecursionError, ValueError, TypeError, ArithmeticError) as exc:
            # a value the reference filters or the store cannot take (the pack's own rows
            # never hold one; an LLM's may)
            outcomes[position] = InvalidRowError("arguments", f"{type(exc).__name__}: {exc}")

    if pack.stateful:
        for position in range(len(parsed)):
            await one(position)
    else:
        await asyncio.gather(*(one(p) for p in range(len(parsed))))
    candidates = []
    for (intent, lang, query), outcome in zip(parsed, outcomes, strict=True):
        if isinstance(outcome, InvalidRowError):
            report.reject(outcome.kind, outcome.detail)
            continue
        template = _template(pack.pack, intent.category, lang, query)
        candidates.append(
            Candidate(PlannedRow("train", intent, lang, template, query, {}), outcome)
        )
    return candidates


def _refresh_manifest(
    manifest: dict[str, Any], rows: list[dict[str, Any]], store: CallStore
) -> dict[str, Any]:
    """The template dataset's manifest with the counts, version and store digest of `rows`."""

    def counts(key: str) -> dict[str, int]:
        return dict(sorted(Counter(str(r[key]) for r in rows).items()))

    tool_counts = Counter(t for r in rows for t in r["tools_used"])
    names = sorted(set(manifest.get("tools") or {}) | set(tool_counts))
    updated = dict(manifest)
    updated.update(
        dataset_version=dataset_version(rows),
        rows=len(rows),
        splits=dict(sorted(Counter(r["extra_info"]["split"] for r in rows).items())),
        category=counts("category"),
        difficulty=counts("difficulty"),
        language=counts("language"),
        tools={name: tool_counts.get(name, 0) for name in names},
    )
    updated["call_store"] = {
        **manifest["call_store"],
        "digest": store.digest(),
        "calls": len(store),
    }
    return updated


def _refreshed(manifest: dict[str, Any], rows: list[dict[str, Any]], path: Path) -> dict[str, Any]:
    with CallStore(path) as store:
        return _refresh_manifest(manifest, rows, store)


SUITE_FLAGS = ("gt_parses", "tools_known", "args_valid", "gt_recomputes", "calls_consistent")


def screen_rows(
    out_dir: Path, first_synthetic: int, validation: ValidationConfig
) -> dict[int, str]:
    """Gate 3, per row: the suite's row checks (the derived columns the great-expectations
    suite asserts on, computed by `validate.derive_frame` from the written dataset) for the
    synthetic rows, `index -> reason` for each that fails one."""
    from training.data.packs.truth import PackTruth
    from training.data.validate import derive_frame, load_split

    manifest = json.loads((out_dir / "manifest.json").read_text(encoding="utf-8"))
    splits = {s: load_split(out_dir / f"{s}.parquet") for s in ("train", "test")}
    truth = PackTruth.open(out_dir, manifest)
    try:
        derived = derive_frame(splits, truth)
    finally:
        truth.close()
    test_shapes = set(derived.loc[derived.file_split == "test", "query_shape"])
    earlier_norms: set[str] = set(derived.loc[derived["index"] < first_synthetic, "query_norm"])
    bad: dict[int, str] = {}
    synthetic = derived[derived["index"] >= first_synthetic].to_dict("records")
    for row in synthetic:
        index, norm = int(row["index"]), str(row["query_norm"])
        failed = [flag for flag in SUITE_FLAGS if not row[flag]]
        if failed:
            bad[index] = f"suite_{failed[0]}"
        elif norm in earlier_norms:
            bad[index] = "duplicate"
        elif row["query_shape"] in test_shapes:
            bad[index] = "test_overlap"
        elif not 1 <= int(row["prompt_tokens"]) <= validation.max_prompt_tokens:
            bad[index] = "suite_prompt_tokens"
        else:
            earlier_norms.add(norm)
    return bad


async def synthesize_pack_dataset(
    loaded: LoadedPack,
    client: McpClient,
    out_dir: Path,
    llm: SynthesisConfig,
    *,
    validation: ValidationConfig | None = None,
    store_path: Path | None = None,
    concurrency: int = 32,
    **settings: Any,
) -> PackDataset:
    """The pack's dataset (`generate_pack_dataset`, same settings), plus the LLM's accepted
    tasks in train; `manifest["synthesis"]` reports proposed, accepted, rate, and rejected
    by reason. The endpoint failing entirely leaves the template dataset as it is."""
    validation = validation or ValidationConfig(check_verl_dataset=False)
    dataset = await generate_pack_dataset(
        loaded, client, out_dir, store_path=store_path, concurrency=concurrency, **settings
    )
    pack = loaded.spec
    store_path = store_path or out_dir / STORE_FILE
    tools = await server_tools(client, pack.server)
    report = SynthesisReport()
    samples = sample_calls(dataset.rows, llm.samples)
    items = await propose(llm, tools, samples, list(pack.languages), report)
    with CallStore(store_path) as store:
        executor = CallExecutor.for_pack(client, pack, tools, store, concurrency)
        candidates = await execute_candidates(items, executor, loaded, tools, report)
        report.calls_sent = executor.stats.sent
        base_rows = dataset.rows
        kwargs = dict(base_rows[0]["extra_info"]["tools_kwargs"]) if base_rows else {}
        for candidate in candidates:
            for step in candidate.truth.steps:
                for call in step:
                    kwargs.setdefault(call.name, {"create_kwargs": {"data_source": DATA_SOURCE}})
        for row in base_rows:
            row["extra_info"]["tools_kwargs"] = kwargs
        synthetic = [
            build_row(len(base_rows) + i, c.planned, c.truth, pack, kwargs)
            for i, c in enumerate(candidates)
        ]
        rows = base_rows + synthetic
        manifest = _refresh_manifest(dataset.manifest, rows, store)
    if synthetic:
        write_dataset(rows, manifest, out_dir)
        bad = screen_rows(out_dir, len(base_rows), validation)
        for index, reason in sorted(bad.items()):
            report.reject(reason, synthetic[index - len(base_rows)]["query"][:120])
        synthetic = [r for r in synthetic if r["extra_info"]["index"] not in bad]
        for position, row in enumerate(synthetic):
            row["extra_info"]["index"] = len(base_rows) + position
        rows = base_rows + synthetic
        manifest = _refreshed(manifest, rows, store_path)
        if synthetic and not _suite_passes(rows, manifest, out_dir, validation):
            for row in synthetic:
                report.reject("suite", row["query"][:120])
            synthetic = []
            rows = base_rows
            manifest = _refreshed(manifest, rows, store_path)
    report.accepted = len(synthetic)
    manifest["synthesis"] = {"url": llm.url, "model": llm.model, **report.to_json()}
    write_dataset(rows, manifest, out_dir)
    shutil.rmtree(out_dir / "validation", ignore_errors=True)  # of an intermediate write
    return PackDataset(rows, manifest, dataset.invalid)


def _suite_passes(
    rows: list[dict[str, Any]], manifest: dict[str, Any], out_dir: Path, config: ValidationConfig
) -> bool:
    """The whole great-expectations suite on the dataset with the accepted rows (dataset-level
    expectations, such as the category mix, can only be judged here)."""
    from training.data.validate import validate_dataset

    write_dataset(rows, manifest, out_dir)
    return validate_dataset(out_dir, config).success


def synthesize_from_sources(
    loaded: LoadedPack,
    out_dir: Path,
    llm: SynthesisConfig,
    sources_file: Path | None = None,
    **settings: Any,
) -> PackDataset:
    """`synthesize_pack_dataset` against the pack's server (see `run_on_pack_server`)."""
    return run_on_pack_server(
        loaded,
        sources_file,
        lambda catalog: synthesize_pack_dataset(loaded, catalog, out_dir, llm, **settings),
    )
