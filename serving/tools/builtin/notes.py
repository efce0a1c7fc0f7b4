"""The per-session memory tools: `save_note` and `read_note`, over the context's notes store.

Why stateful tools among the built-ins: a chain that saves then reads back is the smallest
task whose answer depends on an earlier call's side effect, not only on its result.
"""

from __future__ import annotations

from typing import Any

from serving.tools.base import Tool, ToolContext, ToolExecutionError
from serving.tools.builtin.common import object_schema, string_property


def _save_note(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    count = context.notes.put(context.session_id, args["title"].strip(), args["content"])
    return {"saved": args["title"].strip(), "notes_stored": count}


def _read_note(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    title = args["title"].strip()
    content = context.notes.get(context.session_id, title)
    if content is None:
        titles = context.notes.titles(context.session_id)
        listing = ", ".join(repr(t) for t in titles[:10]) or "none yet"
        raise ToolExecutionError(f"no note titled {title[:40]!r}; saved notes: {listing}")
    return {"title": title, "content": content}


def save_note_tool() -> Tool:
    return Tool(
        "save_note",
        "Save a note to memory under a title, to recall later in the conversation.",
        object_schema(
            {
                "title": string_property("Short title", 80),
                "content": string_property("Note text", 2000),
            },
            ["title", "content"],
        ),
        _save_note,
        stateful=True,
        result_fields=("saved",),
    )


def read_note_tool() -> Tool:
    return Tool(
        "read_note",
        "Read a note previously saved under a title.",
        object_schema({"title": string_property("Title of the note", 80)}, ["title"]),
        _read_note,
        stateful=True,
        result_fields=("content",),
    )
