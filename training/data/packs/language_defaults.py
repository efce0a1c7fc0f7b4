"""The project's per-language defaults for a pack: the system prompt, and the openers and
closers around a query; a pack's own `system_prompts` and `decorations` win.
"""

from __future__ import annotations

from pydantic import Field

from training.data.packs.spec_types import StrictModel


class Decorations(StrictModel):
    """Openers and closers put around a query ("Hi! ... Thanks!"): more distinct prompts
    from one template. An empty string is a plain query; repeat it to weight it."""

    prefixes: list[str] = Field(default_factory=lambda: [""], min_length=1)
    suffixes: list[str] = Field(default_factory=lambda: [""], min_length=1)


SYSTEM_PROMPTS: dict[str, str] = {
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
"""The project's system prompts: a pack's `system_prompts` default, per language."""
DECORATIONS: dict[str, Decorations] = {
    "en": Decorations(
        prefixes=["", "", "Hi! ", "Hey, ", "Hello. ", "Please help: ", "Quick one: "],
        suffixes=["", "", " Thanks!", " Thank you.", " No rush.", " Cheers."],
    ),
    "zh": Decorations(
        prefixes=["", "", "你好，", "请问，", "麻烦一下，", "嗨，"],
        suffixes=["", "", "谢谢！", "多谢。", "辛苦了。"],
    ),
}
"""The project's openers and closers: a pack's `decorations` default, per language (other
languages: none)."""
