"""A dataset version from a pack: plan rows from the seed, execute their calls on the real
server, write the same parquet layout and manifest as the built-in generator.

Why plan first, then execute: queries and slot values depend only on the seed, so the plan
is deterministic and cheap; only the arguments that point into earlier results need the
server. Planning everything first lets the calls of all rows run concurrently. Rows whose
calls fail are dropped, counted by reason in the manifest and reported; past
`max_invalid_fraction` the generation fails instead (a broken pack or server, not noise).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from serving.mcp_client.base import McpClient
from serving.mcp_client.call_store import CallStore
from serving.mcp_client.catalog import ToolCatalog
from serving.mcp_client.sources import ToolSources
from training.data.config import DEFAULT_MIX, GenerationConfig
from training.data.generate import (
    DECORATIONS,
    SYSTEM_PROMPTS,
    GenerationError,
    category_plan,
    dataset_version,
    write_dataset,
)
from training.data.packs.check import check_pack
from training.data.packs.execute import (
    CallExecutor,
    InvalidRowError,
    RowTruth,
    ServerTool,
    build_validators,
    count_reasons,
    execute_intent,
    reset_server,
)
from training.data.packs.loader import LoadedPack, PackError
from training.data.packs.model import IntentSpec, PackSpec, step_calls
from training.data.packs.refs import render_text
from training.data.packs.server import reach_pack_server, server_tools, tools_snapshot
from training.data.packs.slots import draw_slots
from training.data.packs.split import held_out, template_id
from training.data.queries import normalise_query, query_shape
from training.data.schema import AGENT_NAME, DATA_SOURCE, SCHEMA_VERSION, Category, GroundTruth

T = TypeVar("T")

TOOLS_FILE = "tools.json"
STORE_FILE = "calls.sqlite"


@dataclass(frozen=True)
class PlannedRow:
    split: str
    intent: IntentSpec
    lang: str
    template: str
    query: str
    slots: dict[str, Any]


@dataclass
class PackDataset:
    rows: list[dict[str, Any]]
    manifest: dict[str, Any]
    invalid: list[tuple[PlannedRow, InvalidRowError]] = field(default_factory=list)


def pack_config(pack: PackSpec, n: int, seed: int, test_fraction: float) -> GenerationConfig:
    """The generator settings recorded in the manifest (the validation reads the category
    mix from them). Without a `category_mix`, the project's default mix over the pack's
    categories."""
    mix = pack.category_mix
    if mix is None:
        present = {intent.category for intent in pack.intents}
        total = sum(share for c, share in DEFAULT_MIX.items() if c in present)
        mix = {c: share / total for c, share in DEFAULT_MIX.items() if c in present}
    return GenerationConfig(
        n=n,
        seed=seed,
        test_fraction=test_fraction,
        chinese_fraction=pack.languages.get("zh", 0.0),
        category_mix={c: s for c, s in mix.items() if s > 0},
    )


def template_pools(pack: PackSpec) -> dict[tuple[str, str], dict[str, list[str]]]:
    """(intent, language) -> split -> template keys (`lang/tid`)."""
    pools: dict[tuple[str, str], dict[str, list[str]]] = {}
    for intent in pack.intents:
        for lang in pack.languages:
            ids = [template_id(pack.pack, intent.name, lang, t) for t in intent.phrasings[lang]]
            test = held_out(ids)
            pools[(intent.name, lang)] = {
                "train": [i for i in ids if i not in test],
                "test": [i for i in ids if i in test],
            }
    return pools


def plan_rows(pack: PackSpec, config: GenerationConfig) -> list[PlannedRow]:
    """Every row's split, intent, language, template, slots and query, from the seed alone."""
    rng = random.Random(f"{pack.pack}/{config.seed}")
    by_category: dict[Category, list[IntentSpec]] = {}
    for intent in pack.intents:
        by_category.setdefault(intent.category, []).append(intent)
    plan = category_plan(config, rng)
    pools = template_pools(pack)
    languages, weights = list(pack.languages), list(pack.languages.values())
    decks: dict[Category, list[IntentSpec]] = {}
    seen: set[str] = set()
    shapes: dict[str, set[str]] = {"train": set(), "test": set()}
    rows: list[PlannedRow] = []
    for index in range(config.n):
        split = "test" if rng.random() < config.test_fraction else "train"
        other = "train" if split == "test" else "test"
        category = plan[index]
        for _attempt in range(config.max_attempts_per_row):
            deck = decks.get(category)
            if not deck:
                deck = list(by_category[category])
                rng.shuffle(deck)
                decks[category] = deck
            intent = deck.pop()
            lang = rng.choices(languages, weights)[0]
            template = rng.choice(pools[(intent.name, lang)][split])
            slots = draw_slots(intent, pack, lang, rng)
            body = render_text(intent.phrasings[lang][template.rsplit("/", 1)[1]], slots)
            decorations = pack.decorations.get(lang)
            prefixes, suffixes = (
                (decorations.prefixes, decorations.suffixes)
                if decorations
                else DECORATIONS.get(lang, (("",), ("",)))
            )
            query = f"{rng.choice(prefixes)}{body}{rng.choice(suffixes)}"
            norm, shape = normalise_query(query), query_shape(query)
            if norm in seen or shape in shapes[other]:
                continue
            seen.add(norm)
            shapes[split].add(shape)
            rows.append(PlannedRow(split, intent, lang, template, query, slots))
            break
        else:
            raise GenerationError(
                f"no new unique prompt after {config.max_attempts_per_row} attempts at row "
                f"{index} ({category.value}): the pack's templates and slot values are "
                "exhausted; lower n or add phrasings or values"
            )
    return rows


def _system_prompt(pack: PackSpec, lang: str) -> str:
    return pack.system_prompts.get(lang) or SYSTEM_PROMPTS[lang]


def build_row(
    index: int,
    planned: PlannedRow,
    truth: RowTruth,
    pack: PackSpec,
    tools_kwargs: dict[str, Any],
) -> dict[str, Any]:
    """One row in exactly the built-in generator's layout (`training.data.generate`)."""
    intent = planned.intent
    ground = GroundTruth(
        category=intent.category,
        steps=truth.steps,
        results=truth.results,
        answers=truth.answers,
        missing_argument=intent.missing.argument if intent.missing else None,
    )
    return {
        "data_source": DATA_SOURCE,
        "agent_name": AGENT_NAME,
        "ability": "tool_use",
        "prompt": [
            {"role": "system", "content": _system_prompt(pack, planned.lang)},
            {"role": "user", "content": planned.query},
        ],
        "reward_model": {"style": "rule", "ground_truth": ground.to_json()},
        "extra_info": {
            "index": index,
            "split": planned.split,
            "query": planned.query,
            "need_tools_kwargs": True,
            "tools_kwargs": tools_kwargs,
        },
        "query": planned.query,
        "language": planned.lang,
        "category": intent.category.value,
        "difficulty": intent.difficulty.value,
        "num_steps": len(ground.steps),
        "tools_used": sorted({c.name for c in ground.expected_calls}),
        "expected_calls": json.dumps(
            [[c.model_dump() for c in s] for s in ground.steps], ensure_ascii=False, sort_keys=True
        ),
        "template_id": planned.template,
    }


async def execute_plan(
    plan: list[PlannedRow],
    executor: CallExecutor,
    pack: PackSpec,
    tools: dict[str, ServerTool],
    progress: bool = True,
) -> list[RowTruth | InvalidRowError]:
    """Execute every planned row (concurrently, or one at a time for a stateful server)."""
    validators = build_validators(tools)
    outcomes: list[RowTruth | InvalidRowError] = [InvalidRowError("pending", "")] * len(plan)
    bar = tqdm(total=len(plan), desc="executing", unit="row", disable=not progress)

    async def one(position: int) -> None:
        planned = plan[position]
        try:
            if pack.stateful:
                await reset_server(executor, pack.reset, validators)
            session = f"{pack.pack}/row-{position}" if pack.session_tools else None
            outcomes[position] = await execute_intent(
                executor, planned.intent, planned.slots, validators, session
            )
        except InvalidRowError as exc:
            outcomes[position] = exc
        bar.update()

    try:
        if pack.stateful:
            for position in range(len(plan)):
                await one(position)
        else:
            await asyncio.gather(*(one(position) for position in range(len(plan))))
    finally:
        bar.close()
    return outcomes


def write_replay_sidecar(store_path: Path, server: str, tools: dict[str, ServerTool]) -> Path:
    """The recorded tools/list beside the store (`serving.mcp_client.recording`'s format), so
    `toolrl mcp serve --mode replay --store STORE` serves this dataset's calls as is."""
    from serving.mcp_client.recording import tools_path_for, write_recorded_tools

    listed = [
        {"name": t.name, "description": t.description, "inputSchema": dict(t.input_schema)}
        for t in sorted(tools.values(), key=lambda t: t.name)
    ]
    any_tool = next(iter(tools.values()))
    prefix = any_tool.exposed[: len(any_tool.exposed) - len(any_tool.name)]
    path = tools_path_for(store_path)
    write_recorded_tools(path, server, listed, prefix)
    return path


def _fingerprint(snapshot: list[dict[str, Any]]) -> str:
    text = json.dumps(snapshot, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_manifest(
    rows: list[dict[str, Any]],
    config: GenerationConfig,
    loaded: LoadedPack,
    snapshot: list[dict[str, Any]],
    store: CallStore,
    store_ref: str,
    executor: CallExecutor,
    invalid: list[tuple[PlannedRow, InvalidRowError]],
    pack_tools: list[str],
) -> dict[str, Any]:
    """The built-in manifest's keys, plus `pack` (which pack, held-out templates, invalid
    rows) and `call_store` (where the executed calls are, and their digest)."""
    pack = loaded.spec

    def counts(key: str) -> dict[str, int]:
        return dict(sorted(Counter(str(r[key]) for r in rows).items()))

    tool_counts = Counter(t for r in rows for t in r["tools_used"])
    pools = template_pools(pack)
    held = {
        category.value: {
            "train": sum(
                len(pools[(i.name, lang)]["train"])
                for i in pack.intents
                if i.category is category
                for lang in pack.languages
            ),
            "test": sum(
                len(pools[(i.name, lang)]["test"])
                for i in pack.intents
                if i.category is category
                for lang in pack.languages
            ),
        }
        for category in Category
        if any(i.category is category for i in pack.intents)
    }
    return {
        "schema_version": SCHEMA_VERSION,
        "dataset_version": dataset_version(rows),
        "catalog_fingerprint": _fingerprint(snapshot),
        "generator": {"kind": "pack", **config.model_dump(mode="json")},
        "rows": len(rows),
        "splits": dict(sorted(Counter(r["extra_info"]["split"] for r in rows).items())),
        "category": counts("category"),
        "difficulty": counts("difficulty"),
        "language": counts("language"),
        "tools": {name: tool_counts.get(name, 0) for name in pack_tools},
        "tools_file": TOOLS_FILE,
        "pack": {
            "name": pack.pack,
            "server": pack.server,
            "file": str(loaded.path),
            "sha256": hashlib.sha256(loaded.text.encode()).hexdigest(),
            "languages": dict(pack.languages),
            "stateful": pack.stateful,
            "data_files": dict(loaded.data_files),
            "templates": held,
            "planned_rows": len(rows) + len(invalid),
            "invalid_rows": len(invalid),
            "invalid_reasons": count_reasons([e for _, e in invalid]),
            "invalid_examples": [f"{p.template}: {e}"[:300] for p, e in invalid[:5]],
        },
        "call_store": {
            "path": store_ref,
            "digest": store.digest(),
            "calls": len(store),
            "sent": executor.stats.sent,
            "from_store": executor.stats.from_store,
            "shared_in_flight": executor.stats.shared,
        },
    }


async def generate_pack_dataset(
    loaded: LoadedPack,
    client: McpClient,
    out_dir: Path,
    *,
    n: int = 2_000,
    seed: int = 0,
    test_fraction: float = 0.1,
    store_path: Path | None = None,
    concurrency: int = 32,
    max_invalid_fraction: float = 0.05,
    progress: bool = True,
) -> PackDataset:
    """Check the pack against the server's tools, plan, execute, write `out_dir`.

    `client` is a `ToolCatalog` (the model's names, prefixes included) or one server's
    client. Raises PackError (pack problems) or GenerationError (too many invalid rows, a
    template space too small); the rows written are always valid, and the store holds every
    answered call, tool errors included (a transport failure is no answer: not recorded)."""
    pack = loaded.spec
    tools = await server_tools(client, pack.server)
    if not tools:
        raise PackError([f"{loaded.path}: server {pack.server!r} lists no tools"])
    problems = check_pack(loaded, {name: t.input_schema for name, t in tools.items()})
    if problems:
        raise PackError(problems)
    config = pack_config(pack, n, seed, test_fraction)
    plan = plan_rows(pack, config)
    out_dir.mkdir(parents=True, exist_ok=True)
    store_path = store_path or out_dir / STORE_FILE
    with CallStore(store_path) as store:
        executor = CallExecutor.for_pack(client, pack, tools, store, concurrency)
        outcomes = await execute_plan(plan, executor, pack, tools, progress)
        invalid = [
            (p, o) for p, o in zip(plan, outcomes, strict=True) if isinstance(o, InvalidRowError)
        ]
        if len(invalid) > max_invalid_fraction * len(plan):
            reasons = count_reasons([e for _, e in invalid])
            examples = "\n".join(f"  {p.template}: {e}"[:300] for p, e in invalid[:5])
            raise GenerationError(
                f"{len(invalid)} of {len(plan)} rows are invalid (over "
                f"{max_invalid_fraction:.0%}): {reasons}\n{examples}"
            )
        used = sorted(
            {tools[c.tool].exposed for i in pack.intents for s in i.steps for c in step_calls(s)}
        )
        tools_kwargs = {name: {"create_kwargs": {"data_source": DATA_SOURCE}} for name in used}
        rows: list[dict[str, Any]] = []
        for planned, outcome in zip(plan, outcomes, strict=True):
            if isinstance(outcome, RowTruth):
                rows.append(build_row(len(rows), planned, outcome, pack, tools_kwargs))
        snapshot = tools_snapshot(tools, pack.server)
        try:
            store_ref = str(store_path.resolve().relative_to(out_dir.resolve()))
        except ValueError:
            store_ref = str(store_path.resolve())
        manifest = build_manifest(
            rows, config, loaded, snapshot, store, store_ref, executor, invalid, used
        )
    (out_dir / TOOLS_FILE).write_text(json.dumps(snapshot, indent=2, ensure_ascii=False) + "\n")
    write_replay_sidecar(store_path, pack.server, tools)
    write_dataset(rows, manifest, out_dir)
    return PackDataset(rows, manifest, invalid)


def run_on_pack_server(
    loaded: LoadedPack,
    sources_file: Path | None,
    work: Callable[[ToolCatalog], Awaitable[T]],
) -> T:
    """Run `work` against the pack's server alone, from a sources file (or the pack's own
    `source:`, the project's server included); the server is started here and stopped
    whatever `work` does."""

    async def run(sources: ToolSources, base_dir: Path) -> T:
        only = sources.model_copy(
            update={"servers": {loaded.spec.server: sources.servers[loaded.spec.server]}}
        )
        catalog = ToolCatalog(only, base_dir=base_dir)
        try:
            return await work(catalog)
        finally:
            await catalog.close()

    with reach_pack_server(loaded, sources_file) as (sources, base_dir):
        return asyncio.run(run(sources, base_dir))


def generate_from_sources(
    loaded: LoadedPack,
    out_dir: Path,
    sources_file: Path | None = None,
    **settings: Any,
) -> PackDataset:
    """`generate_pack_dataset` against the pack's server (see `run_on_pack_server`)."""
    return run_on_pack_server(
        loaded,
        sources_file,
        lambda catalog: generate_pack_dataset(loaded, catalog, out_dir, **settings),
    )
