"""The `bfcl-eval` wheel as a library: imported from its own directory (its pinned
dependencies cannot join the project's environment), its data loaders, its AST checker, and
BFCL's conversion of its functions to OpenAI tools.

Why a module of its own: everything that touches BFCL's API is here, so a new bfcl-eval
release is checked against one file; the harness (`bfcl`) only runs cases and reports.
"""

from __future__ import annotations

import copy
import re
import sys
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODEL_NAME = "toolrl"
"""The model name BFCL's checker is told (it reads per-model flags by name)."""


class BfclUnavailableError(RuntimeError):
    """bfcl-eval is not importable; the message says how to install it."""


@dataclass(frozen=True)
class BfclApi:
    """The parts of bfcl-eval the harness calls."""

    version: str
    load_dataset_entry: Any
    load_ground_truth_entry: Any
    ast_checker: Any
    language: Any
    is_function_calling_format_output: Any
    is_empty_output: Any
    gorilla_to_openapi: Mapping[str, str]


class _OpenAiCompatible:
    underscore_to_dot = True


class _ModelConfigs(dict[str, Any]):
    def __missing__(self, key: str) -> _OpenAiCompatible:
        return _OpenAiCompatible()


def load_bfcl(root: Path | None = None) -> BfclApi:
    """Import bfcl-eval (from `root`, a `pip install --target` dir, when given)."""
    if root is not None:
        if not (root / "bfcl_eval").is_dir():
            raise BfclUnavailableError(f"{root} has no bfcl_eval package")
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
    stub = types.ModuleType("bfcl_eval.constants.model_config")
    stub.MODEL_CONFIG_MAPPING = _ModelConfigs()  # type: ignore[attr-defined]
    sys.modules.setdefault("bfcl_eval.constants.model_config", stub)
    try:
        from importlib.metadata import PackageNotFoundError, version

        from bfcl_eval.constants.enums import Language
        from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
        from bfcl_eval.utils import (
            is_empty_output,
            is_function_calling_format_output,
            load_dataset_entry,
            load_ground_truth_entry,
        )
    except ImportError as exc:
        raise BfclUnavailableError(
            "bfcl-eval is not importable; install its data and checker with "
            "`pip install --no-deps --target DIR bfcl-eval` and pass --bfcl-root DIR "
            f"({exc})"
        ) from exc
    try:
        found = version("bfcl-eval")
    except PackageNotFoundError:
        found = "unknown"
    return BfclApi(
        found,
        load_dataset_entry,
        load_ground_truth_entry,
        ast_checker,
        Language,
        is_function_calling_format_output,
        is_empty_output,
        GORILLA_TO_OPENAPI,
    )


def _cast_to_openai_type(properties: dict[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    """BFCL's `_cast_to_openai_type` (bfcl_eval/model_handler/utils.py, Apache-2.0)."""
    for key, value in properties.items():
        if "type" not in value:
            properties[key]["type"] = "string"
        else:
            var_type = value["type"]
            if var_type == "float":
                properties[key]["format"] = "float"
                properties[key]["description"] += " This is a float type value."
            properties[key]["type"] = mapping.get(var_type, "string")
        if properties[key]["type"] in ("array", "object"):
            if "properties" in properties[key]:
                properties[key]["properties"] = _cast_to_openai_type(
                    properties[key]["properties"], mapping
                )
            elif "items" in properties[key]:
                items = properties[key]["items"]
                items["type"] = mapping[items["type"]]
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = mapping[items["items"]["type"]]
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _cast_to_openai_type(items["properties"], mapping)
    return properties


def to_openai_tools(functions: Sequence[Mapping[str, Any]], api: BfclApi) -> list[dict[str, Any]]:
    """BFCL's `convert_to_tool` for OpenAI-style function-calling models."""
    tools = []
    items: list[dict[str, Any]] = copy.deepcopy([dict(f) for f in functions])
    for item in items:
        item["name"] = re.sub(r"\.", "_", item["name"])
        item["parameters"]["type"] = "object"
        item["parameters"]["properties"] = _cast_to_openai_type(
            item["parameters"]["properties"], api.gorilla_to_openapi
        )
        tools.append({"type": "function", "function": item})
    return tools


def _language(category: str, api: BfclApi) -> Any:
    if category.endswith("java"):
        return api.language.JAVA
    if category.endswith("javascript"):
        return api.language.JAVASCRIPT
    return api.language.PYTHON


def score_output(
    category: str,
    model_result: Any,
    functions: list[dict[str, Any]],
    possible_answer: list[Any] | None,
    api: BfclApi,
) -> dict[str, Any]:
    """BFCL's verdict for one decoded output (`[{name: args}]` list, or text)."""
    decodable = isinstance(model_result, list)
    if "irrelevance" in category:
        called = decodable and not api.is_empty_output(model_result)
        return {"valid": not called, "error_type": "irrelevance_error:decoder_success"}
    if not decodable:
        return {"valid": False, "error_type": "ast_decoder:decoder_failed"}
    if not api.is_function_calling_format_output(model_result):
        return {"valid": False, "error_type": "ast_decoder:decoder_wrong_output_format"}
    result: dict[str, Any] = api.ast_checker(
        functions, model_result, possible_answer, _language(category, api), category, MODEL_NAME
    )
    return result


def load_category(
    api: BfclApi, category: str, limit: int | None
) -> list[tuple[dict[str, Any], Any]]:
    """(entry, possible answer) pairs; entries carry BFCL's prompt-time function docs (with
    language hints) as `prompt_function` and the checker-time docs as `function`."""
    prompted = api.load_dataset_entry(category, include_prereq=False)
    plain = {e["id"]: e for e in api.load_dataset_entry(
        category, include_prereq=False, include_language_specific_hint=False)}  # fmt: skip
    answers = {}
    if "irrelevance" not in category:
        answers = {a["id"]: a["ground_truth"] for a in api.load_ground_truth_entry(category)}
    pairs = []
    for entry in prompted[:limit] if limit else prompted:
        merged = {**entry, "prompt_function": entry["function"],
                  "function": plain[entry["id"]]["function"]}  # fmt: skip
        pairs.append((merged, answers.get(entry["id"])))
    return pairs
