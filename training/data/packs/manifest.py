"""A pack dataset's manifest: the built-in manifest's keys, plus which pack made it (its
held-out templates, its invalid rows) and where its executed calls are recorded.

Why one module: the generator writes the manifest and the LLM synthesis rewrites its counts
after adding rows; both take the counts from `row_counts`, so the two cannot disagree on
what a count means.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from serving.mcp_client.call_store import CallStore
from training.data.config import GenerationConfig
from training.data.packs.execute import CallExecutor, InvalidRowError, count_reasons
from training.data.packs.loader import LoadedPack
from training.data.packs.model import PackSpec
from training.data.packs.plan import PlannedRow, template_pools
from training.data.schema import SCHEMA_VERSION, Category
from training.data.writer import dataset_version

TOOLS_FILE = "tools.json"
PACK_KIND = "pack"
BUILTIN_KIND = "builtin"


def row_counts(rows: list[dict[str, Any]], tool_names: Iterable[str]) -> dict[str, Any]:
    """The manifest's counts of `rows`: in all, per split, category, difficulty, language,
    and per tool of `tool_names` (a tool no row uses counts 0)."""

    def counts(key: str) -> dict[str, int]:
        return dict(sorted(Counter(str(r[key]) for r in rows).items()))

    tool_counts = Counter(t for r in rows for t in r["tools_used"])
    return {
        "rows": len(rows),
        "splits": dict(sorted(Counter(r["extra_info"]["split"] for r in rows).items())),
        "category": counts("category"),
        "difficulty": counts("difficulty"),
        "language": counts("language"),
        "tools": {name: tool_counts.get(name, 0) for name in tool_names},
    }


def refresh_manifest(
    manifest: dict[str, Any], rows: list[dict[str, Any]], store: CallStore
) -> dict[str, Any]:
    """`manifest` with the counts, version and store digest of `rows` (rows added or removed
    after it was built); the tools already listed keep their entry."""
    tool_names = set(manifest.get("tools") or {}) | {t for r in rows for t in r["tools_used"]}
    updated = dict(manifest)
    updated.update(dataset_version=dataset_version(rows), **row_counts(rows, sorted(tool_names)))
    updated["call_store"] = {
        **manifest["call_store"],
        "digest": store.digest(),
        "calls": len(store),
    }
    return updated


def _fingerprint(snapshot: list[dict[str, Any]]) -> str:
    text = json.dumps(snapshot, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def template_counts(pack: PackSpec) -> dict[str, dict[str, int]]:
    """category -> split -> how many templates (over all intents and languages) it holds."""
    pools = template_pools(pack)

    def count(category: Category, split: str) -> int:
        return sum(
            len(pools[(intent.name, lang)][split])
            for intent in pack.intents
            if intent.category is category
            for lang in pack.languages
        )

    return {
        category.value: {"train": count(category, "train"), "test": count(category, "test")}
        for category in Category
        if any(i.category is category for i in pack.intents)
    }


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
    return {
        "schema_version": SCHEMA_VERSION,
        "dataset_version": dataset_version(rows),
        "catalog_fingerprint": _fingerprint(snapshot),
        "generator": {"kind": kind, **config.model_dump(mode="json")},
        **row_counts(rows, pack_tools),
        "tools_file": TOOLS_FILE,
        "pack": {
            "name": pack.pack,
            "server": pack.server,
            "file": str(loaded.path),
            "sha256": hashlib.sha256(loaded.text.encode()).hexdigest(),
            "languages": dict(pack.languages),
            "stateful": pack.stateful,
            "data_files": dict(loaded.data_files),
            "templates": template_counts(pack),
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
