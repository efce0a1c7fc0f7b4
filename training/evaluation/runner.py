"""Run the evaluation: every case through the agent loop, bounded concurrency, resumable.

Resumability: each finished (case, sample) is appended to `<out>.cases.jsonl` and flushed;
the first line holds a fingerprint of everything that changes results (model, data file
hash, mode, sampling). A restarted run with the same fingerprint skips what is done; a
different fingerprint refuses to mix results unless `fresh` is set. A torn last line from a
crash is ignored (that case simply runs again).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from tqdm import tqdm

from serving.agent import Agent, AgentConfig, ChatClient, EndpointBackend, ToolExecutor
from serving.renderer import renderer_for_model
from serving.toolcalls import ToolRegistry, catalog_registry, using_registry
from training.data.packs.truth import dataset_registry
from training.evaluation.cases import CaseSet, EvalCase, load_cases
from training.evaluation.metrics import aggregate
from training.evaluation.report import EvalReport, EvalSource, write_report
from training.evaluation.scoring import CaseResult, score_case

JOURNAL_VERSION = 1
_FINGERPRINT_KEYS = (
    "model",
    "mode",
    "call_format",
    "max_turns",
    "temperature",
    "max_tokens",
    "samples",
    "sample_temperature",
    "pass_k_cases",
    "limit",
)


class EvalConfig(BaseModel):
    """One evaluation run (`toolrl eval`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str = Field(pattern=r"^https?://")
    """OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1."""
    model: str = Field(min_length=1)
    api_key: SecretStr | None = None
    data: Path
    out: Path
    mcp_url: str = Field(pattern=r"^https?://")
    """MCP server the tools run on: mock mode (faults off) reproduces the ground truth."""
    mcp_token: SecretStr | None = None
    mode: Literal["chat", "raw"] = "chat"
    call_format: Literal["hermes", "qwen3_coder", "auto"] = "auto"
    tokenizer: Path | None = None
    """Model dir whose chat template renders raw prompts (raw mode, and the fallback when the
    server answers HTTP 500 on malformed output). None: no fallback."""
    keep_special_tokens: bool = False
    """Ask raw completions for special tokens (vLLM `skip_special_tokens: false`), needed
    when the call tags are special tokens; `transformers serve` rejects the field."""
    concurrency: int = Field(default=16, ge=1, le=1024)
    max_turns: int = Field(default=8, ge=1, le=64)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=512, ge=1, le=131_072)
    samples: int = Field(default=1, ge=1, le=32)
    """k for pass^k: extra samples per case on the subset below."""
    sample_temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    pass_k_cases: int = Field(default=50, ge=0)
    """Cases (the first N) sampled `samples` times for pass^k."""
    limit: int | None = Field(default=None, ge=1)
    timeout_s: float = Field(default=120.0, gt=0.0, le=3600.0)
    fresh: bool = False
    """Ignore (overwrite) an existing journal instead of resuming it."""

    def fingerprint(self, data_sha256: str) -> str:
        keys = _FINGERPRINT_KEYS
        material = {k: getattr(self, k) for k in keys} | {"data": data_sha256}
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


class JournalError(ValueError):
    """The journal beside the report belongs to a different evaluation."""


def journal_path(out: Path) -> Path:
    return out.with_name(out.name + ".cases.jsonl")


def read_journal(path: Path, fingerprint: str) -> list[CaseResult]:
    """Finished results from an earlier run with the same fingerprint."""
    if not path.exists():
        return []
    results: list[CaseResult] = []
    with path.open(encoding="utf-8", errors="replace") as handle:
        try:
            header = json.loads(handle.readline())
        except ValueError:
            header = None
        if not isinstance(header, dict) or header.get("fingerprint") != fingerprint:
            raise JournalError(
                f"{path} holds results of a different evaluation; use --fresh to discard it"
            )
        for line in handle:
            try:
                results.append(CaseResult.model_validate_json(line))
            except ValidationError:
                continue  # a torn line from a crash: that case runs again
    return results


def _open_journal(path: Path, fingerprint: str, resume: bool) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    if resume and path.exists():
        handle = path.open("a", encoding="utf-8")
        handle.write("\n")  # terminate a torn line; blank lines are skipped on read
        return handle
    handle = path.open("w", encoding="utf-8")
    handle.write(json.dumps({"journal": JOURNAL_VERSION, "fingerprint": fingerprint}) + "\n")
    return handle


async def run_cases(
    work: Sequence[tuple[EvalCase, int]],
    agents: dict[int, Agent],
    registry: ToolRegistry,
    concurrency: int,
    journal: IO[str] | None = None,
    progress: bool = True,
) -> list[CaseResult]:
    """Each (case, sample) through its agent with `concurrency` workers; results appended
    to the journal as they finish."""
    queue: asyncio.Queue[tuple[EvalCase, int]] = asyncio.Queue()
    for item in work:
        queue.put_nowait(item)
    results: list[CaseResult] = []
    bar = tqdm(total=len(work), disable=not progress, desc="eval", unit="case")

    async def worker() -> None:
        while not queue.empty():
            case, sample = queue.get_nowait()
            agent = agents[0 if sample == 0 else 1]
            trajectory = await agent.run(case.messages, session=f"eval-{case.case_id}-{sample}")
            result = score_case(case.case_id, case.ground_truth_json, trajectory, registry, sample)
            result.language = case.language
            results.append(result)
            if journal is not None:
                journal.write(result.model_dump_json() + "\n")
                journal.flush()
            bar.update(1)

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(work)) or 1)))
    finally:
        bar.close()
    return results


def _failures(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    failed = [r for r in results if not r.passed and r.sample == 0][:50]
    return [
        {
            "case_id": r.case_id,
            "category": r.category,
            "error": r.error,
            "stop": r.stop,
            "expected": r.expected_tools,
            "called": r.called_tools,
            "malformed": r.malformed_kinds,
            "answer": r.final_answer[:200],
        }
        for r in failed
    ]


def build_report(
    config: EvalConfig, case_set: CaseSet, results: Sequence[CaseResult], wall_s: float
) -> EvalReport:
    return EvalReport(
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        source=EvalSource(
            endpoint=config.endpoint,
            model=config.model,
            mode=config.mode,
            data_path=str(config.data),
            data_sha256=case_set.data_sha256,
            dataset_version=case_set.dataset_version,
            max_turns=config.max_turns,
            samples=config.samples,
        ),
        cases_total=len(case_set.cases),
        cases_skipped=case_set.skipped,
        metrics=aggregate(results, config.samples),
        failures=_failures(results),
        harness={"wall_s": round(wall_s, 3), "cases_per_s": round(len(results) / wall_s, 3)}
        if wall_s > 0
        else {},
    )


def _client(config: EvalConfig, temperature: float) -> ChatClient:
    key = config.api_key.get_secret_value() if config.api_key else None
    sampling = {"temperature": temperature, "max_tokens": config.max_tokens}
    return ChatClient(
        config.endpoint,
        config.model,
        key,
        config.timeout_s,
        max_connections=config.concurrency,
        sampling=sampling,
        completion_extra={"skip_special_tokens": False} if config.keep_special_tokens else None,
    )


def _default_tools(config: EvalConfig) -> ToolExecutor:
    from serving.mcp_client.http import McpHttpClient

    token = config.mcp_token.get_secret_value() if config.mcp_token else None
    return McpHttpClient(config.mcp_url, token, max_concurrency=max(16, config.concurrency))


async def evaluate_async(
    config: EvalConfig, tools: ToolExecutor | None = None, progress: bool = True
) -> EvalReport:
    """Load cases, resume, run, aggregate, write JSON + HTML. Returns the report."""
    case_set = load_cases(config.data, config.limit)
    fingerprint = config.fingerprint(case_set.data_sha256)
    journal_file = journal_path(config.out)
    done = [] if config.fresh else read_journal(journal_file, fingerprint)
    finished = {(r.case_id, r.sample) for r in done}
    work = [(c, 0) for c in case_set.cases if (c.case_id, 0) not in finished]
    if config.samples > 1:
        subset = case_set.cases[: config.pass_k_cases]
        work += [
            (c, s)
            for s in range(1, config.samples)
            for c in subset
            if (c.case_id, s) not in finished
        ]
    executor = tools or _default_tools(config)
    renderer = renderer_for_model(config.tokenizer) if config.tokenizer else None
    agent_config = AgentConfig(call_format=config.call_format, max_turns=config.max_turns)
    clients = [_client(config, config.temperature), _client(config, config.sample_temperature)]
    agents = {
        i: Agent(EndpointBackend(c, config.mode, renderer), executor, agent_config)
        for i, c in enumerate(clients)
    }
    started = time.perf_counter()
    # a pack dataset is judged by its own tool snapshot, the built-in one by the catalog
    registry = dataset_registry(config.data) or catalog_registry()
    with (
        _open_journal(journal_file, fingerprint, resume=bool(done)) as journal,
        using_registry(registry),
    ):
        try:
            fresh = await run_cases(work, agents, registry, config.concurrency, journal, progress)
        finally:
            for client in clients:
                await client.close()
            if tools is None:
                close = getattr(executor, "close", None)
                if close is not None:
                    await close()
    report = build_report(config, case_set, [*done, *fresh], time.perf_counter() - started)
    write_report(report, config.out)
    return report


def evaluate(
    config: EvalConfig, tools: ToolExecutor | None = None, progress: bool = True
) -> EvalReport:
    return asyncio.run(evaluate_async(config, tools, progress))
