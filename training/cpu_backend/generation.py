"""Generation for rollouts and the quick eval on CPU: the serving engine's continuous
batching on one packed cache (`serving/engine`), so training samples exactly as the CPU
model server answers.

Every prompt starts with the same tool prompt; `generate` computes the prefix the prompts
share once and decodes up to `max_rows` of them together, each row joining as another
finishes.
"""

from __future__ import annotations

from serving.engine.engine import common_prefix_length, generate

__all__ = ["common_prefix_length", "generate"]
