"""What an episode becomes in OpenAI's response shapes: the finish reason, the client's
tool calls, usage, and the `toolrl` extension (model version and the server-side calls).
Shared by the plain response and the stream, so both say the same thing."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from serving.agent import Trajectory


def finish_reason(trajectory: Trajectory) -> str:
    if trajectory.stop == "client_tools":
        return "tool_calls"
    return "length" if trajectory.stop == "max_turns" else "stop"


def client_tool_calls(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The calls the client runs itself, in OpenAI's `tool_calls` shape."""
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": json.dumps(call.arguments, ensure_ascii=False),
            },
        }
        for call in trajectory.client_calls
    ]


def trace(trajectory: Trajectory, version: str, received_at: float | None = None) -> dict[str, Any]:
    """The `toolrl` extension: which model version answered and what ran server-side.
    `received_at` (perf_counter when the request arrived) adds `door_s`, the time the
    request has spent in the front door so far, so a client can tell the front door's own
    cost (`door_s - episode_s`) from the network's and its own (`its latency - door_s`)."""
    client_ids = {call.id for call in trajectory.client_calls}
    return {
        "model_version": version,
        "turns": len(trajectory.turns),
        "stop": trajectory.stop,
        "timings": {
            "episode_s": round(trajectory.latency_s, 4),
            "model_s": round(trajectory.model_s, 4),
            "tools_s": round(trajectory.tools_s, 4),
            **({"door_s": round(time.perf_counter() - received_at, 4)} if received_at else {}),
        },
        "tool_calls": [
            {
                "name": c.name,
                "arguments": c.arguments,
                "is_error": c.result_is_error,
                "result": (c.result or "")[:2000],
            }
            for c in trajectory.calls
            if c.id not in client_ids
        ],
    }


def usage(trajectory: Trajectory) -> dict[str, int]:
    return {
        "prompt_tokens": trajectory.prompt_tokens,
        "completion_tokens": trajectory.completion_tokens,
        "total_tokens": trajectory.prompt_tokens + trajectory.completion_tokens,
    }


def completion_body(
    trajectory: Trajectory, model: str, version: str, received_at: float | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": trajectory.final_answer}
    if trajectory.client_calls:
        message["tool_calls"] = client_tool_calls(trajectory)
        message["content"] = trajectory.final_answer or None
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(trajectory)}],
        "usage": usage(trajectory),
        "toolrl": trace(trajectory, version, received_at),
    }
