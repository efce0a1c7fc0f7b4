"""Gate 2, the execution: each proposal's calls run on the real server (recorded in the
dataset's call store like the pack generator's); a tool error or a value the reference
filters cannot take refuses it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from training.data.packs.execute import (
    CallExecutor,
    InvalidRowError,
    RowTruth,
    ServerTool,
    build_validators,
    execute_intents,
)
from training.data.packs.loader import LoadedPack
from training.data.packs.model import IntentSpec
from training.data.packs.plan import PlannedRow
from training.data.packs.synthesis.proposal import proposal_intent
from training.data.packs.synthesis.report import ProposalError, SynthesisReport
from training.data.schema import Category

TEMPLATE_PREFIX = "llm-"


@dataclass(frozen=True)
class Candidate:
    planned: PlannedRow
    truth: RowTruth


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
    outcomes = await execute_intents(
        executor,
        pack,
        [(intent, {}) for intent, _, _ in parsed],
        validators,
        "proposal",
        refuse_bad_values=True,
    )
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
