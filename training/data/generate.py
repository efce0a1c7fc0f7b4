"""Generate a dataset version: sample intents, execute their calls for real, write parquet.

Deterministic for a given `GenerationConfig` (seed included): the dataset version is a hash
of the rows' content, so the same settings always produce the same version id.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from serving.tools import get_catalog
from training.data.config import GenerationConfig
from training.data.intent_library import INTENTS
from training.data.intents import Executor, Intent, Language
from training.data.schema import (
    AGENT_NAME,
    DATA_SOURCE,
    ROW_COLUMNS,
    SCHEMA_VERSION,
    Category,
    GroundTruth,
)

SYSTEM_PROMPTS: dict[Language, str] = {
    "en": (
        "You are a helpful assistant with access to tools. Call a tool when the question "
        "needs live data, lookups or exact computation; you may call several tools, in "
        "parallel or one after another. Answer directly when no tool is needed. If a required "
        "detail is missing, ask the user for it instead of guessing."
    ),
    "zh": (
        "你是一个可以调用工具的助手。问题需要实时数据、查询或精确计算时调用工具，可以并行或依次调用多个工具。"
        "不需要工具时直接回答。缺少必要信息时请向用户询问，不要猜测。"
    ),
}
DECORATIONS: dict[Language, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "en": (
        ("", "", "Hi! ", "Hey, ", "Hello. ", "Please help: ", "Quick one: "),
        ("", "", " Thanks!", " Thank you.", " No rush.", " Cheers."),
    ),
    "zh": (
        ("", "", "你好，", "请问，", "麻烦一下，", "嗨，"),
        ("", "", "谢谢！", "多谢。", "辛苦了。"),
    ),
}


class GenerationError(RuntimeError):
    """Generation could not satisfy the configuration (e.g. the template space is too small)."""


def template_split(template_id: str) -> str:
    """Assign a phrasing to train or test once and for all, so that no test query shares a
    phrasing with a training query (a near-duplicate by construction otherwise)."""
    digest = hashlib.sha1(template_id.encode(), usedforsecurity=False).digest()
    return "test" if digest[0] % 4 == 0 else "train"


def phrasing_pools(intent: Intent, lang: Language) -> dict[str, list[int]]:
    """Indices of the intent's phrasings per split; both splits are never empty."""
    phrasings = intent.phrasings[lang]
    pools: dict[str, list[int]] = {"train": [], "test": []}
    for index in range(len(phrasings)):
        pools[template_split(f"{intent.name}/{lang}/{index}")].append(index)
    if not pools["test"]:
        pools["test"].append(pools["train"].pop())
    if not pools["train"]:
        pools["train"].append(pools["test"].pop())
    return pools


@cache
def shared_tools_kwargs() -> dict[str, Any]:
    """verl's per-tool `create_kwargs`, one object shared by every row (memory: 100k rows).

    No per-row session id on purpose: the n rollouts of one prompt must not share a notes
    session, so the MCP bridge keys sessions by the trajectory's request id instead."""
    return {name: {"create_kwargs": {"data_source": DATA_SOURCE}} for name in get_catalog().names}


def catalog_fingerprint() -> str:
    schemas = json.dumps(get_catalog().openai_schemas(), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(schemas.encode()).hexdigest()[:12]


def _build_row(
    index: int,
    split: str,
    intent: Intent,
    lang: Language,
    phrasing_index: int,
    rng: random.Random,
) -> dict[str, Any]:
    executor = Executor(session_id=f"row-{index}")
    draft = intent.build(rng, executor, lang)
    prefixes, suffixes = DECORATIONS[lang]
    body = intent.phrasings[lang][phrasing_index].format(**draft.slots)
    query = f"{rng.choice(prefixes)}{body}{rng.choice(suffixes)}"
    truth = GroundTruth(
        category=intent.category,
        steps=executor.steps,
        results=executor.results,
        answers=draft.answers,
        missing_argument=draft.missing_argument,
    )
    tools_used = sorted({c.name for c in truth.expected_calls})
    return {
        "data_source": DATA_SOURCE,
        "agent_name": AGENT_NAME,
        "ability": "tool_use",
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPTS[lang]},
            {"role": "user", "content": query},
        ],
        "reward_model": {"style": "rule", "ground_truth": truth.to_json()},
        "extra_info": {
            "index": index,
            "split": split,
            "query": query,
            "need_tools_kwargs": True,
            "tools_kwargs": shared_tools_kwargs(),
        },
        "query": query,
        "language": lang,
        "category": intent.category.value,
        "difficulty": intent.difficulty.value,
        "num_steps": len(truth.steps),
        "tools_used": tools_used,
        "expected_calls": json.dumps(
            [[c.model_dump() for c in s] for s in truth.steps], ensure_ascii=False, sort_keys=True
        ),
        "template_id": f"{intent.name}/{lang}/{phrasing_index}",
    }


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


def _draw_intent(
    decks: dict[Category, list[Intent]],
    intents: list[Intent],
    category: Category,
    rng: random.Random,
) -> Intent:
    """Deal intents from a shuffled deck per category rather than sampling with replacement.

    Independent draws leave a rare intent (and the only tool it uses) out of a small dataset
    now and then, which the coverage check then rightly refuses; dealing from a deck visits
    every intent of a category before any repeats, so a few hundred rows always cover the
    catalog while the order stays seeded.
    """
    deck = decks.get(category)
    if not deck:
        deck = list(intents)
        rng.shuffle(deck)
        decks[category] = deck
    return deck.pop()


def generate_rows(config: GenerationConfig, progress: bool = True) -> list[dict[str, Any]]:
    rng = random.Random(config.seed)
    by_category: dict[Category, list[Intent]] = {}
    for intent in INTENTS:
        by_category.setdefault(intent.category, []).append(intent)
    plan = category_plan(config, rng)
    pools = {(i.name, lang): phrasing_pools(i, lang) for i in INTENTS for lang in ("en", "zh")}
    decks: dict[Category, list[Intent]] = {}
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    for index in tqdm(range(config.n), desc="generating", unit="row", disable=not progress):
        split = "test" if rng.random() < config.test_fraction else "train"
        for _attempt in range(config.max_attempts_per_row):
            category = plan[index]
            intent = _draw_intent(decks, by_category[category], category, rng)
            lang: Language = "zh" if rng.random() < config.chinese_fraction else "en"
            phrasing = rng.choice(pools[(intent.name, lang)][split])
            row = _build_row(index, split, intent, lang, phrasing, rng)
            if row["query"] not in seen:
                seen.add(row["query"])
                rows.append(row)
                break
        else:
            raise GenerationError(
                f"no new unique prompt after {config.max_attempts_per_row} attempts at row "
                f"{index}: the template space is exhausted; lower n or add phrasings"
            )
    return rows


def dataset_version(rows: list[dict[str, Any]]) -> str:
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode())
    return digest.hexdigest()[:16]


def build_manifest(rows: list[dict[str, Any]], config: GenerationConfig) -> dict[str, Any]:
    def counts(key: str) -> dict[str, int]:
        return dict(sorted(Counter(str(r[key]) for r in rows).items()))

    tool_counts = Counter(t for r in rows for t in r["tools_used"])
    return {
        "schema_version": SCHEMA_VERSION,
        "dataset_version": dataset_version(rows),
        "catalog_fingerprint": catalog_fingerprint(),
        "generator": {"kind": "templates", **config.model_dump(mode="json")},
        "rows": len(rows),
        "splits": dict(sorted(Counter(r["extra_info"]["split"] for r in rows).items())),
        "category": counts("category"),
        "difficulty": counts("difficulty"),
        "language": counts("language"),
        "tools": {name: tool_counts.get(name, 0) for name in get_catalog().names},
    }


def write_dataset(rows: list[dict[str, Any]], manifest: dict[str, Any], out_dir: Path) -> None:
    """Write train/test parquet and the manifest; the manifest goes last, so a directory with
    a manifest is always complete."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "manifest.json").unlink(missing_ok=True)
    frame = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    is_test = frame["extra_info"].map(lambda info: info["split"] == "test")
    for split, part in (("train", frame[~is_test]), ("test", frame[is_test])):
        tmp = out_dir / f".{split}.parquet.tmp"
        part.reset_index(drop=True).to_parquet(tmp, index=False)
        tmp.replace(out_dir / f"{split}.parquet")
    tmp_manifest = out_dir / ".manifest.json.tmp"
    tmp_manifest.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    tmp_manifest.replace(out_dir / "manifest.json")


def generate_dataset(
    config: GenerationConfig, out_dir: Path, progress: bool = True
) -> dict[str, Any]:
    rows = generate_rows(config, progress=progress)
    manifest = build_manifest(rows, config)
    write_dataset(rows, manifest, out_dir)
    return manifest
