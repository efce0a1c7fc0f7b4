"""The whole synthesis run: the pack's template dataset, then the LLM's proposals through
the three gates, the accepted ones added to TRAIN.

Why TRAIN only: evaluation stays on the pack's hand-written held-out templates, so a
synthetic row can teach the model but never grade it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from serving.mcp_client.base import McpClient
from serving.mcp_client.call_store import CallStore
from training.data.config import ValidationConfig
from training.data.packs.execute import CallExecutor
from training.data.packs.generate import (
    STORE_FILE,
    PackDataset,
    generate_pack_dataset,
    run_on_pack_server,
)
from training.data.packs.loader import LoadedPack
from training.data.packs.manifest import refresh_manifest
from training.data.packs.model import PackSpec
from training.data.packs.rows import build_row
from training.data.packs.server import server_tools
from training.data.packs.synthesis.config import SynthesisConfig
from training.data.packs.synthesis.endpoint import propose, sample_calls
from training.data.packs.synthesis.execution import Candidate, execute_candidates
from training.data.packs.synthesis.report import SynthesisReport
from training.data.packs.synthesis.screening import screen_synthetic
from training.data.schema import DATA_SOURCE
from training.data.writer import write_dataset


def candidate_rows(
    base_rows: list[dict[str, Any]], candidates: list[Candidate], pack: PackSpec
) -> list[dict[str, Any]]:
    """The dataset rows of the executed candidates, numbered after `base_rows`. Every row,
    base rows included, gets the union of the tools the base rows and the candidates call
    (a candidate may call a tool no template row does)."""
    kwargs = dict(base_rows[0]["extra_info"]["tools_kwargs"]) if base_rows else {}
    for candidate in candidates:
        for step in candidate.truth.steps:
            for call in step:
                kwargs.setdefault(call.name, {"create_kwargs": {"data_source": DATA_SOURCE}})
    for row in base_rows:
        row["extra_info"]["tools_kwargs"] = kwargs
    return [
        build_row(len(base_rows) + i, c.planned, c.truth, pack, kwargs)
        for i, c in enumerate(candidates)
    ]


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
    base_rows = dataset.rows
    with CallStore(store_path) as store:
        executor = CallExecutor.for_pack(client, pack, tools, store, concurrency)
        candidates = await execute_candidates(items, executor, loaded, tools, report)
        report.calls_sent = executor.stats.sent
        synthetic = candidate_rows(base_rows, candidates, pack)
        manifest = refresh_manifest(dataset.manifest, base_rows + synthetic, store)
    if synthetic:
        synthetic, manifest = screen_synthetic(
            base_rows, synthetic, manifest, out_dir, store_path, validation, report
        )
    rows = base_rows + synthetic
    report.accepted = len(synthetic)
    manifest["synthesis"] = {"url": llm.url, "model": llm.model, **report.to_json()}
    write_dataset(rows, manifest, out_dir)
    shutil.rmtree(out_dir / "validation", ignore_errors=True)  # of an intermediate write
    return PackDataset(rows, manifest, dataset.invalid)


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
