"""One row of the dataset contract from a planned row and its executed calls.

Why apart from the generator: the LLM synthesis builds its accepted rows with this same
function, so a synthetic row and a template row cannot differ in layout.
"""

from __future__ import annotations

import json
from typing import Any

from training.data.packs.execute import RowTruth
from training.data.packs.language_defaults import SYSTEM_PROMPTS
from training.data.packs.model import PackSpec
from training.data.packs.plan import PlannedRow
from training.data.schema import AGENT_NAME, DATA_SOURCE, GroundTruth


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
