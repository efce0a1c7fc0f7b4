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
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from serving.mcp_client.base import McpClient
from serving.mcp_client.call_store import CallStore
from training.data.config import DEFAULT_MIX, GenerationConfig
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
from training.data.packs.loader import LoadedPack, PackError, load_pack, resolve_pack
from training.data.packs.model import (
    DECORATIONS,
    SYSTEM_PROMPTS,
    IntentSpec,
    PackSpec,
    step_calls,
)
from training.data.packs.refs import render_text
from training.data.packs.server import pack_client, server_tools, tools_snapshot
from training.data.packs.slots import draw_slots
from training.data.packs.split import held_out, template_id
from training.data.queries import normalise_query, query_shape
from training.data.schema import (
    AGENT_NAME,
    DATA_SOURCE,
    SCHEMA_VERSION,
    Category,
    GroundTruth,
)
from training.data.writer import dataset_version, write_dataset

T = TypeVar("T")

TOOLS_FILE = "tools.json"
STORE_FILE = "calls.sqlite"
BUILTIN_PACK = "toolrl"
"""The shipped pack of the project's 11 tools: what `toolrl data generate` and the dataset
DAG generate when no other pack is named."""
PACK_KIND = "pack"
BUILTIN_KIND = "builtin"


class GenerationError(RuntimeError):
    """Generation could not satisfy the settings (the template space is too small for n, too
    many rows are invalid)."""


@dataclass(frozen=True)
class PlannedRow:
    split: str
    intent: IntentSpec
    lang: str
    template: str
    query: str
    slots: dict[str, Any]


@dataclass(repr=False)
class PackDataset:
    rows: list[dict[str, Any]]
    manifest: dict[str, Any]
    invalid: list[tuple[PlannedRow, InvalidRowError]] = field(default_factory=list)

    def __repr__(self) -> str:
        # Short on purpose: asyncio.run reprs the finished task, and with it its result,
        # when it restores the SIGINT handler (CPython 3.11); every row costs 0.1 s at 2,000.
        version = self.manifest.get("dataset_version")
        return f"PackDataset({len(self.rows)} rows, version {version}, {len(self.invalid)} invalid)"


def with_chinese_fraction(loaded: LoadedPack, fraction: float | None) -> LoadedPack:
    """The pack with `fraction` of its rows in Chinese (`zh`) and the other languages' shares
    scaled to the rest (None: the pack as written). A language left with no share is dropped,
    so a fraction of 0 gives a dataset without Chinese rows."""
    pack = loaded.spec
    if fraction is None:
        return loaded
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"the Chinese fraction must be between 0 and 1 (got {fraction})")
    if "zh" not in pack.languages:
        raise PackError(
            [f"{loaded.path}: the pack has no Chinese (`zh`) phrasings to give a fraction to"]
        )
    others = {lang: share for lang, share in pack.languages.items() if lang != "zh"}
    rest = sum(others.values())
    if fraction < 1.0 and rest <= 0:
        raise PackError([f"{loaded.path}: the pack has only Chinese rows (`languages`)"])
    languages = {lang: share / rest * (1.0 - fraction) for lang, share in others.items()}
    languages["zh"] = fraction
    languages = {lang: share for lang, share in languages.items() if share > 0}
    return replace(loaded, spec=pack.model_copy(update={"languages": languages}))


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


def category_plan(config: GenerationConfig, rng: random.Random) -> list[Category]:
    """The category of every row: the target mix in exact counts (largest remainder), in a
    seeded random order.

    Independent weighted draws miss the mix by a binomial error: at 120 rows a share of 0.33
    is off by more than the validation's 0.08 tolerance about one run in twenty, and the
    dataset DAG (a new seed every run) then refuses its own output.
    """
    mix = {c: share for c, share in config.category_mix.items() if share > 0}
    total = sum(mix.values())
    exact = {c: config.n * share / total for c, share in mix.items()}
    counts = {c: int(value) for c, value in exact.items()}
    by_remainder = sorted(mix, key=lambda c: (counts[c] - exact[c], list(mix).index(c)))
    for category in by_remainder[: config.n - sum(counts.values())]:
        counts[category] += 1
    plan = [c for c, count in counts.items() for _ in range(count)]
    rng.shuffle(plan)
    return plan


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
            # Intents are dealt from a shuffled deck per category, not drawn with
            # replacement: independent draws leave a rare intent (and the only tool it
            # uses) out of a small dataset now and then, which the coverage check rightly
            # refuses; a deck visits every intent of a category before any repeats.
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
            decorations = pack.decorations.get(lang) or DECORATIONS.get(lang)
            prefixes, suffixes = (
                (decorations.prefixes, decorations.suffixes) if decorations else ([""], [""])
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
    """One row of the dataset contract (`training.data.schema`, docs/ARCHITECTURE.md)."""
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


def generator_kind(client: McpClient) -> str:
    """`generator.kind` of a dataset generated through `client`.

    `builtin`: the project's own catalog run in this process in mock mode, so every result
    is what a mock-mode rollout gets for the same call; the dataset is judged by the
    catalog (with its semantic validators) and trained against mock mode, like the
    built-in datasets have always been. `pack`: any server reached through tool sources
    (a third-party server, or a running `toolrl mcp serve` whose mode this cannot know);
    judged by the dataset's tool snapshot and call store, and trained against its replay."""
    from serving.mcp_server.inprocess import InProcessServer

    if isinstance(client, InProcessServer) and client.mode == "mock":
        return BUILTIN_KIND
    return PACK_KIND


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
    kind: str = PACK_KIND,
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
        "generator": {"kind": kind, **config.model_dump(mode="json")},
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
    chinese_fraction: float | None = None,
    store_path: Path | None = None,
    concurrency: int = 32,
    max_invalid_fraction: float = 0.05,
    progress: bool = True,
) -> PackDataset:
    """Check the pack against the server's tools, plan, execute, write `out_dir`.

    `client` is a `ToolCatalog` (the model's names, prefixes included) or one server's
    client. `chinese_fraction` overrides the pack's share of Chinese rows
    (`with_chinese_fraction`). Raises PackError (pack problems) or GenerationError (too many
    invalid rows, a template space too small); the rows written are always valid, and the
    store holds every answered call, tool errors included (a transport failure is no answer:
    not recorded)."""
    loaded = with_chinese_fraction(loaded, chinese_fraction)
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
            rows,
            config,
            loaded,
            snapshot,
            store,
            store_ref,
            executor,
            invalid,
            used,
            generator_kind(client),
        )
    (out_dir / TOOLS_FILE).write_text(json.dumps(snapshot, indent=2, ensure_ascii=False) + "\n")
    write_replay_sidecar(store_path, pack.server, tools)
    write_dataset(rows, manifest, out_dir)
    return PackDataset(rows, manifest, invalid)


def run_on_pack_server(
    loaded: LoadedPack,
    sources_file: Path | None,
    work: Callable[[McpClient], Awaitable[T]],
) -> T:
    """Run `work` against the pack's server alone (`server.pack_client`: from a sources
    file, or the pack's own `source:`, the project's server in-process included), closed
    whatever `work` does."""

    async def run() -> T:
        async with pack_client(loaded, sources_file) as client:
            return await work(client)

    return asyncio.run(run())


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
        lambda client: generate_pack_dataset(loaded, client, out_dir, **settings),
    )


@cache
def load_builtin_pack() -> LoadedPack:
    """The `toolrl` pack (`builtin/toolrl.yaml`): the project's 11 tools; read once per
    process (a shipped file; not to be changed in place: `with_chinese_fraction` copies)."""
    return load_pack(resolve_pack(BUILTIN_PACK))


def generate_builtin_dataset(out_dir: Path, **settings: Any) -> PackDataset:
    """The built-in dataset: the `toolrl` pack, its calls run on the project's server
    in-process in mock mode (`generator.kind: builtin`). `settings` are
    `generate_pack_dataset`'s (`n`, `seed`, `test_fraction`, `chinese_fraction`, ...)."""
    return generate_from_sources(load_builtin_pack(), out_dir, None, **settings)
