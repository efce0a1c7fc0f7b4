"""Chat-template consistency: the call format the rollout parses must be the one the model's
own chat template teaches (the mismatch suspected in verl issue 6252: JSON tool schemas in
the prompt, XML calls expected from the model)."""

from __future__ import annotations

import json
from pathlib import Path

from training.model.source import is_package_reference
from training.spec.model import CallFormat, TrainingSpec

#: Distinctive fragments of each call syntax in Qwen chat templates.
MARKERS: dict[CallFormat, tuple[str, ...]] = {
    "hermes": ('"arguments": <args-json-object>', "call.arguments | tojson"),
    "qwen3_coder": ("<function=", "<parameter="),
}


def template_format(template: str) -> CallFormat | None:
    """Which call syntax a chat template renders, or None when it cannot tell."""
    found = [fmt for fmt, marks in MARKERS.items() if any(m in template for m in marks)]
    return found[0] if len(found) == 1 else None


def read_chat_template(model_path: str) -> str | None:
    """The chat template of a local HF model directory (file or tokenizer_config.json)."""
    root = Path(model_path)
    if not root.is_dir():
        return None
    jinja = root / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = root / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        return template if isinstance(template, str) else None
    return None


#: Call syntax of the released chat templates, by model family (checked against the
#: templates TRL ships verbatim: qwen2_5/qwen3 -> hermes, qwen3_5/qwen3_6 -> XML).
FAMILY_FORMATS: tuple[tuple[str, CallFormat], ...] = (
    ("qwen3.5", "qwen3_coder"),
    ("qwen3.6", "qwen3_coder"),
    ("qwen3-coder", "qwen3_coder"),
    ("qwen2.5", "hermes"),
    ("qwen3-", "hermes"),
    ("qwen3_", "hermes"),
)


def family_format(model_path: str) -> CallFormat | None:
    name = model_path.rstrip("/").rsplit("/", 1)[-1].lower()
    return next((fmt for prefix, fmt in FAMILY_FORMATS if name.startswith(prefix)), None)


def _mismatch(spec: TrainingSpec, found: CallFormat, where: str) -> list[str]:
    if found == spec.model.call_format:
        return []
    return [
        f"call_format={spec.model.call_format!r} but {where} teaches {found!r} calls: rollouts "
        "would be parsed in a format the model was never shown (the mismatch suspected in "
        "verl issue 6252)"
    ]


def template_warnings(spec: TrainingSpec) -> list[str]:
    if is_package_reference(spec.model.path):  # prepared with the project's hermes template
        return _mismatch(spec, "hermes", "the project's template for package models")
    template = read_chat_template(spec.model.path)
    if template is None:
        family = family_format(spec.model.path)
        if family is not None:
            return _mismatch(spec, family, f"the released {spec.model.path} chat template")
        return [
            f"model.path {spec.model.path!r} is not a local model directory of a known family: "
            f"the chat template could not be checked against call_format="
            f"{spec.model.call_format!r}"
        ]
    found = template_format(template)
    if found is None:
        return ["the model's chat template renders no recognisable tool-call syntax"]
    return _mismatch(spec, found, "the model's chat template")
