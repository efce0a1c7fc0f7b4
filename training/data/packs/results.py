"""One tool result as ground truth: the object a reference walks and the reward compares.

Why from the text, not `structuredContent`: the text is what the model reads in a rollout
and what the call store records (and replays), so generation, validation from the store and
training all derive the same object from the same string. `GroundTruth.results` holds
objects: a JSON object is itself, other JSON is wrapped as `{"value": ...}`, plain text as
`{"text": ...}`.
"""

from __future__ import annotations

import json
from typing import Any


def result_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {"text": text}
    if isinstance(value, dict):
        return value
    return {"value": value}
