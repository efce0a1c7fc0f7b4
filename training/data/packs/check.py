"""Check a pack against its server's tools before anything runs: every problem, each with
file, line and intent, in one report.

What is caught: tools the server does not list, arguments that do not fill the tool's
`inputSchema` (required ones missing, wrong types: the filled arguments of sampled slot
draws are validated with `jsonschema`), chain references that point to the same or a later
step or to a call that does not exist, unknown slots and pools, fields a slot's values do
not have, languages without phrasings, and intents too small to hold a template out for test.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jsonschema
from jsonschema.protocols import Validator

from training.data.packs.loader import LoadedPack
from training.data.packs.model import (
    SYSTEM_PROMPTS,
    CallSpec,
    IntentSpec,
    PackSpec,
    SlotSpec,
    step_calls,
)
from training.data.packs.refs import (
    RefError,
    fill,
    has_reference,
    placeholders,
    references_in,
    slots_in,
)
from training.data.packs.slots import SlotError, candidates, draw_slots
from training.data.queries import normalise_query
from training.data.schema import Category

SAMPLE_DRAWS = 12
"""Slot draws per intent and language whose filled arguments are schema-checked."""
PLACEHOLDER_VALUE = "<result>"


def validator_for(schema: Mapping[str, Any]) -> Validator:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator: Validator = cls(schema)
    return validator


def schema_problems(
    validator: Validator, arguments: Mapping[str, Any], skip: Iterable[tuple[Any, ...]] = ()
) -> list[str]:
    """jsonschema's complaints about `arguments`, minus those inside a `skip` path (values
    that come from a result reference, not known until the chain runs)."""
    skipped = [tuple(p) for p in skip]
    problems = []
    for error in validator.iter_errors(dict(arguments)):
        path = tuple(error.absolute_path)
        if any(path[: len(s)] == s for s in skipped):
            continue
        where = "/".join(str(p) for p in path)
        problems.append(f"{where + ': ' if where else ''}{error.message}")
    return problems


def _ref_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if has_reference(value):
        return [prefix]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _ref_paths(v, (*prefix, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _ref_paths(v, (*prefix, i))]
    return []


def _blank_refs(value: Any) -> Any:
    if has_reference(value):
        return PLACEHOLDER_VALUE
    if isinstance(value, Mapping):
        return {k: _blank_refs(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_blank_refs(v) for v in value]
    return value


class _Report:
    def __init__(self, loaded: LoadedPack) -> None:
        self.loaded = loaded
        self.problems: list[str] = []

    def add(self, location: Sequence[str | int], label: str, message: str) -> None:
        line = self.loaded.where(location)
        entry = f"{line}: {label}: {message}"
        if entry not in self.problems:
            self.problems.append(entry)


def _check_slot_fields(
    report: _Report,
    intent: IntentSpec,
    pack: PackSpec,
    lang: str,
    used: Iterable[Any],
    location: Sequence[str | int],
    label: str,
) -> None:
    for placeholder in used:
        spec = intent.slots.get(placeholder.slot)
        if spec is None:
            known = ", ".join(intent.slots) or "none"
            report.add(location, label, f"unknown slot {{{placeholder.slot}}} (slots: {known})")
            continue
        if placeholder.field is None:
            continue
        kind = next(
            (k for k in ("range", "template", "compute") if getattr(spec, k) is not None), None
        )
        if kind is not None:
            what = {
                "range": "range of integers" if spec.range and spec.range.round is None else "",
                "template": "template (a text)",
                "compute": "computed number",
            }[kind] or "range of decimals"
            report.add(
                location,
                label,
                f"{{{placeholder.slot}.{placeholder.field}}}: slot {placeholder.slot!r} is a "
                f"{what}, which have no fields",
            )
            continue
        try:
            values = candidates(spec, pack, lang)
        except SlotError:
            continue  # reported with the slot itself
        if values is None:
            continue  # looked up or one_of: checked when drawn
        lacking = [v for v in values if not isinstance(v, Mapping) or placeholder.field not in v]
        if lacking:
            report.add(
                location,
                label,
                f"{{{placeholder.slot}.{placeholder.field}}}: {len(lacking)} value(s) of the "
                f"slot have no field {placeholder.field!r}, e.g. {str(lacking[0])[:80]}",
            )


def _slot_texts(spec: SlotSpec) -> list[str]:
    """The templates a slot is made from (`template`, `compute`, a `lookup` key)."""
    texts: list[str] = []
    if spec.template is not None:
        entries = spec.template.values() if isinstance(spec.template, dict) else [spec.template]
        for entry in entries:
            texts.extend(entry if isinstance(entry, list) else [entry])
    if spec.compute is not None:
        texts.append(spec.compute)
    if spec.lookup is not None:
        texts.append(spec.lookup.key)
    for alternative in spec.one_of or []:
        texts.extend(_slot_texts(alternative))
    return texts


def _check_call(
    report: _Report,
    call: CallSpec,
    tools: Mapping[str, Mapping[str, Any]],
    step_index: int,
    step_sizes: Sequence[int],
    location: Sequence[str | int],
    label: str,
) -> None:
    if call.tool not in tools:
        report.add(
            location,
            label,
            f"unknown tool {call.tool!r}: the server lists {', '.join(sorted(tools)) or 'none'}",
        )
    for name in call.free_arguments:
        if name not in call.arguments:
            report.add(location, label, f"free argument {name!r} is not among the arguments")
    try:
        refs = references_in(call.arguments)
    except RefError as exc:
        report.add(location, label, str(exc))
        return
    for ref in refs:
        if ref.step >= step_index:
            report.add(
                location,
                label,
                f"{ref.text} points to step {ref.step}, which is not an earlier step (this "
                f"is step {step_index}; a reference reads only results already produced)",
            )
            continue
        size = step_sizes[ref.step]
        if ref.call is None and size != 1:
            report.add(
                location, label, f"{ref.text}: step {ref.step} has {size} calls; use .calls[J]"
            )
        elif ref.call is not None and ref.call >= size:
            report.add(location, label, f"{ref.text}: step {ref.step} has no call {ref.call}")


def _check_intent(
    report: _Report,
    index: int,
    intent: IntentSpec,
    pack: PackSpec,
    tools: Mapping[str, Mapping[str, Any]],
    validators: Mapping[str, Validator],
) -> None:
    base: list[str | int] = ["intents", index]
    label = f"intent {intent.name!r}"
    for name, spec in intent.slots.items():
        for lang in pack.languages:
            try:
                candidates(spec, pack, lang)
            except SlotError as exc:
                report.add([*base, "slots", name], label, f"slot {name!r}: {exc}")
        for text in _slot_texts(spec):
            try:
                used = placeholders(text)
            except RefError as exc:
                report.add([*base, "slots", name], label, f"slot {name!r}: {exc}")
                continue
            for lang in pack.languages:
                _check_slot_fields(report, intent, pack, lang, used, [*base, "slots", name], label)
        for other in spec.distinct_from:
            if other.split(".", 1)[0] not in intent.slots:
                report.add(
                    [*base, "slots", name],
                    label,
                    f"slot {name!r}: distinct_from names unknown slot {other!r}",
                )
    for lang in pack.languages:
        texts = intent.phrasings.get(lang)
        if not texts:
            report.add(
                [*base, "phrasings"], label, f"no phrasings in {lang!r}, which `languages` asks for"
            )
            continue
        if len(texts) < 2:
            report.add(
                [*base, "phrasings", lang],
                label,
                f"{lang}: one phrasing only; give at least 2 so one can be held out for test",
            )
        for tid, text in texts.items():
            where = [*base, "phrasings", lang, tid]
            try:
                used = placeholders(text)
            except RefError as exc:
                report.add(where, label, str(exc))
                continue
            _check_slot_fields(report, intent, pack, lang, used, where, label)
    step_sizes = [len(step_calls(s)) for s in intent.steps]
    for s_index, step in enumerate(intent.steps):
        for c_index, call in enumerate(step_calls(step)):
            at: list[str | int] = [*base, "steps", s_index]
            if step_sizes[s_index] > 1:
                at += ["parallel", c_index]
            _check_call(report, call, tools, s_index, step_sizes, at, label)
            try:
                used_slots = slots_in(call.arguments)
            except RefError as exc:
                report.add(at, label, str(exc))
                continue
            for lang in pack.languages:
                _check_slot_fields(report, intent, pack, lang, used_slots, at, label)
    for a_index, answer in enumerate(intent.answers):
        where = [*base, "answers", a_index]
        try:
            refs = references_in(answer)
            used_slots = slots_in(answer)
        except RefError as exc:
            report.add(where, label, str(exc))
            continue
        for ref in refs:
            if ref.step >= len(step_sizes):
                report.add(
                    where,
                    label,
                    f"{ref.text} points to step {ref.step}; the intent has "
                    f"{len(step_sizes)} step(s)",
                )
            elif ref.call is None and step_sizes[ref.step] != 1:
                report.add(
                    where,
                    label,
                    f"{ref.text}: step {ref.step} has {step_sizes[ref.step]} calls; use .calls[J]",
                )
            elif ref.call is not None and ref.call >= step_sizes[ref.step]:
                report.add(where, label, f"{ref.text}: step {ref.step} has no call {ref.call}")
        for lang in pack.languages:
            _check_slot_fields(report, intent, pack, lang, used_slots, where, label)
    if intent.missing is not None:
        where = [*base, "missing"]
        schema = tools.get(intent.missing.tool)
        if schema is None:
            report.add(where, label, f"unknown tool {intent.missing.tool!r} in `missing`")
        elif intent.missing.argument not in (schema.get("required") or []):
            report.add(
                where,
                label,
                f"`missing.argument` {intent.missing.argument!r} is not a required argument of "
                f"{intent.missing.tool} (required: "
                f"{', '.join(schema.get('required') or []) or 'none'})",
            )
    _check_filled_arguments(report, index, intent, pack, validators, label)


def _check_filled_arguments(
    report: _Report,
    index: int,
    intent: IntentSpec,
    pack: PackSpec,
    validators: Mapping[str, Validator],
    label: str,
) -> None:
    """Fill the arguments from sampled slot draws and validate them against the schemas."""
    rng = random.Random(f"check/{intent.name}")
    for lang in pack.languages:
        for _ in range(SAMPLE_DRAWS):
            try:
                slots = draw_slots(intent, pack, lang, rng)
            except SlotError as exc:
                report.add(["intents", index, "slots"], label, str(exc))
                return
            for s_index, step in enumerate(intent.steps):
                calls = step_calls(step)
                for c_index, call in enumerate(calls):
                    if call.tool not in validators:
                        continue
                    where: list[str | int] = ["intents", index, "steps", s_index]
                    if len(calls) > 1:
                        where += ["parallel", c_index]
                    try:
                        filled = fill(_blank_refs(call.arguments), slots)
                    except RefError as exc:
                        report.add(where, label, str(exc))
                        continue
                    for problem in schema_problems(
                        validators[call.tool], filled, _ref_paths(call.arguments)
                    ):
                        report.add(
                            [*where, "arguments"],
                            label,
                            f"{call.tool} arguments do not fit its inputSchema: {problem}",
                        )


def _check_duplicate_texts(report: _Report, pack: PackSpec) -> None:
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
    report = _Report(loaded)
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
        _check_call(report, call, tools, r_index, sizes, ["reset", r_index], "reset")
    validators = {name: validator_for(schema) for name, schema in tools.items()}
    for index, intent in enumerate(pack.intents):
        _check_intent(report, index, intent, pack, tools, validators)
    _check_duplicate_texts(report, pack)
    if not any(
        i.category not in (Category.IRRELEVANCE, Category.CLARIFICATION) for i in pack.intents
    ):
        report.add(["intents"], "pack", "no intent calls a tool")
    return report.problems
