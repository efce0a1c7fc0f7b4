"""Check a pack against its server's tools before anything runs: every problem, each with
file, line and intent, in one report (the per-intent checks: `check_intent`).

What is caught: tools the server does not list, arguments that do not fill the tool's
`inputSchema` (required ones missing, wrong types: the filled arguments of sampled slot
draws are validated with `jsonschema`), chain references that point to the same or a later
step or to a call that does not exist, unknown slots and pools, fields a slot's values do
not have, languages without phrasings, and intents too small to hold a template out for test.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from training.data.packs.arguments import validator_for
from training.data.packs.check_intent import ProblemReport, check_call, check_intent
from training.data.packs.language_defaults import SYSTEM_PROMPTS
from training.data.packs.loader import LoadedPack
from training.data.packs.model import PackSpec
from training.data.queries import normalise_query
from training.data.schema import Category


def _check_duplicate_texts(report: ProblemReport, pack: PackSpec) -> None:
    """Two templates with the same text (up to case, punctuation and slot names) in one intent
    would give train and test the same query shapes; the generator could not keep them
    apart. Across intents the slot names are kept: `Convert {value} {src} to {dst}` (units)
    and `Convert {amount} {src} to {dst}` (currencies) fill different values, so their
    queries differ (and the planner still refuses any query shape the other split has)."""
    seen: dict[str, str] = {}
    for index, intent in enumerate(pack.intents):
        for lang, texts in intent.phrasings.items():
            for tid, text in texts.items():
                blank = normalise_query(re.sub(r"{[^{}]*}", "{}", text))
                named = normalise_query(text)
                where = f"{intent.name}/{lang}/{tid}"
                keys = (f"{lang}|{intent.name}|{blank}", f"{lang}|*|{named}")
                earlier = next((seen[k] for k in keys if k in seen), None)
                if earlier is not None:
                    report.add(
                        ["intents", index, "phrasings", lang, tid],
                        f"intent {intent.name!r}",
                        f"template {lang}/{tid} has the same text as {earlier}",
                    )
                else:
                    for key in keys:
                        seen[key] = where


def check_pack(loaded: LoadedPack, tools: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every problem of the pack against `tools` (server tool name -> inputSchema)."""
    pack = loaded.spec
    report = ProblemReport(loaded)
    for lang in pack.languages:
        if lang not in SYSTEM_PROMPTS and lang not in pack.system_prompts:
            report.add(["languages"], "pack", f"language {lang!r} needs a system_prompts entry")
    present = {intent.category for intent in pack.intents}
    if pack.category_mix is not None:
        for category, share in pack.category_mix.items():
            if share > 0 and category not in present:
                report.add(
                    ["category_mix"],
                    "pack",
                    f"category_mix asks for {category.value} rows, but no intent is "
                    f"{category.value}",
                )
    for t_index, tool in enumerate(pack.session_tools):
        if tool not in tools:
            report.add(
                ["session_tools", t_index],
                "pack",
                f"session_tools names unknown tool {tool!r}: the server lists "
                f"{', '.join(sorted(tools)) or 'none'}",
            )
    if pack.stateful is False and pack.reset:
        report.add(["reset"], "pack", "`reset` is only used with `stateful: true`")
    sizes = [1] * len(pack.reset)
    for r_index, call in enumerate(pack.reset):
        check_call(report, call, tools, r_index, sizes, ["reset", r_index], "reset")
    validators = {name: validator_for(schema) for name, schema in tools.items()}
    for index, intent in enumerate(pack.intents):
        check_intent(report, index, intent, pack, tools, validators)
    _check_duplicate_texts(report, pack)
    if not any(
        i.category not in (Category.IRRELEVANCE, Category.CLARIFICATION) for i in pack.intents
    ):
        report.add(["intents"], "pack", "no intent calls a tool")
    return report.problems
