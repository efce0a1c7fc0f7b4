"""A call's arguments against its tool's `inputSchema` (`jsonschema`), with the values that
point into an earlier result left out until the chain has run.

Why one module: the pack check, the executor, a pack dataset's truth and the LLM synthesis
all judge arguments, and must judge them alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema
from jsonschema.protocols import Validator

from training.data.packs.refs import has_reference

PLACEHOLDER_VALUE = "<result>"


def validator_for(schema: Mapping[str, Any]) -> Validator:
    """The validator of the schema's own draft (2020-12 when it names none)."""
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


def reference_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths inside `value` whose value is a result reference (its schema check waits
    until the chain has run)."""
    if has_reference(value):
        return [prefix]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in reference_paths(v, (*prefix, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in reference_paths(v, (*prefix, i))]
    return []


def blank_references(value: Any) -> Any:
    """`value` with every result reference replaced by a placeholder string."""
    if has_reference(value):
        return PLACEHOLDER_VALUE
    if isinstance(value, Mapping):
        return {k: blank_references(v) for k, v in value.items()}
    if isinstance(value, list):
        return [blank_references(v) for v in value]
    return value
