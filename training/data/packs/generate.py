"""A dataset version from a pack: plan rows from the seed (`plan`), execute their calls on
the real server, write the same parquet layout and manifest (`manifest`) as the built-in
generator.

Why plan first, then execute: queries and slot values depend only on the seed, so the plan
is deterministic and cheap; only the arguments that point into earlier results need the
server. Planning everything first lets the calls of all rows run concurrently. Rows whose
calls fail are dropped, counted by reason in the manifest and reported; past
`max_invalid_fraction` the generation fails instead (a broken pack or server, not noise).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from serving.mcp_client.base import McpClient
from serving.mcp_client.call_store import CallStore
from training.data.packs.check import check_pack
from training.data.packs.execute import (
    CallExecutor,
    InvalidRowError,
    RowTruth,
    ServerTool,
    build_validators,
    count_reasons,
    execute_intents,
)
from training.data.packs.loader import LoadedPack, PackError, load_pack, resolve_pack
from training.data.packs.manifest import BUILTIN_KIND, PACK_KIND, TOOLS_FILE, build_manifest
from training.data.packs.model import PackSpec, step_calls
from training.data.packs.plan import (
    GenerationError,
    PlannedRow,
    pack_config,
    plan_rows,
    with_chinese_fraction,
)
from training.data.packs.rows import build_row
from training.data.packs.server import pack_client, server_tools, tools_snapshot
from training.data.schema import DATA_SOURCE
from training.data.writer import write_dataset

T = TypeVar("T")

STORE_FILE = "calls.sqlite"
BUILTIN_PACK = "toolrl"
"""The shipped pack of the project's 11 tools: what `toolrl data generate` and the dataset
DAG generate when no other pack is named."""


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


async def execute_plan(
    plan: list[PlannedRow],
    executor: CallExecutor,
    pack: PackSpec,
    tools: dict[str, ServerTool],
    progress: bool = True,
) -> list[RowTruth | InvalidRowError]:
    """Execute every planned row (concurrently, or one at a time for a stateful server)."""
    validators = build_validators(tools)
    work = [(planned.intent, planned.slots) for planned in plan]
    with tqdm(total=len(plan), desc="executing", unit="row", disable=not progress) as bar:
        return await execute_intents(executor, pack, work, validators, "row", on_done=bar.update)


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


async def _checked_tools(loaded: LoadedPack, client: McpClient) -> dict[str, ServerTool]:
    """The pack server's tools, once the pack is checked against their schemas (PackError
    names every problem)."""
    pack = loaded.spec
    tools = await server_tools(client, pack.server)
    if not tools:
        raise PackError([f"{loaded.path}: server {pack.server!r} lists no tools"])
    problems = check_pack(loaded, {name: t.input_schema for name, t in tools.items()})
    if problems:
        raise PackError(problems)
    return tools


def _invalid_rows(
    plan: list[PlannedRow],
    outcomes: list[RowTruth | InvalidRowError],
    max_invalid_fraction: float,
) -> list[tuple[PlannedRow, InvalidRowError]]:
    """The rows whose calls failed; GenerationError past `max_invalid_fraction` of the plan
    (a broken pack or server, not noise)."""
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
    return invalid


def _valid_rows(
    plan: list[PlannedRow],
    outcomes: list[RowTruth | InvalidRowError],
    pack: PackSpec,
    tools_used: list[str],
) -> list[dict[str, Any]]:
    """The dataset rows of the executed plan rows, numbered in plan order."""
    tools_kwargs = {name: {"create_kwargs": {"data_source": DATA_SOURCE}} for name in tools_used}
    rows: list[dict[str, Any]] = []
    for planned, outcome in zip(plan, outcomes, strict=True):
        if isinstance(outcome, RowTruth):
            rows.append(build_row(len(rows), planned, outcome, pack, tools_kwargs))
    return rows


def _store_ref(store_path: Path, out_dir: Path) -> str:
    """The store's path as the manifest records it: relative to the dataset when inside it."""
    try:
        return str(store_path.resolve().relative_to(out_dir.resolve()))
    except ValueError:
        return str(store_path.resolve())


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
    tools = await _checked_tools(loaded, client)
    config = pack_config(pack, n, seed, test_fraction)
    plan = plan_rows(pack, config)
    out_dir.mkdir(parents=True, exist_ok=True)
    store_path = store_path or out_dir / STORE_FILE
    with CallStore(store_path) as store:
        executor = CallExecutor.for_pack(client, pack, tools, store, concurrency)
        outcomes = await execute_plan(plan, executor, pack, tools, progress)
        invalid = _invalid_rows(plan, outcomes, max_invalid_fraction)
        used = sorted(
            {tools[c.tool].exposed for i in pack.intents for s in i.steps for c in step_calls(s)}
        )
        rows = _valid_rows(plan, outcomes, pack, used)
        snapshot = tools_snapshot(tools, pack.server)
        manifest = build_manifest(
            rows,
            config,
            loaded,
            snapshot,
            store,
            _store_ref(store_path, out_dir),
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
