"""Per-tool counters (calls, errors by kind, latency histogram), shared by all workers.

Why shared memory: the server runs as several processes behind SO_REUSEPORT and a scrape
lands on any one of them. The counters live in one lock-free array created before the
workers fork; each worker writes only its own row, and `/metrics` sums the rows, so every
scrape sees the whole server at the cost of a few float additions per call.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from typing import Any, Final

LATENCY_BUCKETS_MS: Final = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0, 5000.0)
ERROR_KINDS: Final = (
    "unknown_tool",
    "invalid_arguments",
    "execution_error",
    "timeout",
    "internal_error",
    "not_recorded",
    "injected_timeout",
    "injected_rate_limit",
    "injected_upstream_5xx",
    "injected_invalid_argument",
    "injected_empty",
)
UNKNOWN_TOOL: Final = "_unknown"
_CALLS, _ERRORS, _LAT_SUM = 0, 1, 2
_FIXED = 3


class Metrics:
    """Counters for `workers` rows x tools x fields in one shared array."""

    def __init__(self, tools: Sequence[str], workers: int = 1) -> None:
        self.tools = [*tools, UNKNOWN_TOOL]
        self._tool_index = {name: i for i, name in enumerate(self.tools)}
        self._kind_index = {kind: i for i, kind in enumerate(ERROR_KINDS)}
        self.workers = workers
        self._tool_stride = _FIXED + len(LATENCY_BUCKETS_MS) + 1
        self._row = len(self.tools) * self._tool_stride + len(ERROR_KINDS)
        self._data: Any = multiprocessing.RawArray("d", self._row * workers)
        self.worker = 0

    def bind_worker(self, index: int) -> None:
        """Called in each worker after fork: which row this process writes."""
        if not 0 <= index < self.workers:
            raise ValueError(f"worker index {index} out of range")
        self.worker = index

    def record(self, tool: str, latency_s: float, error_kind: str | None) -> None:
        data = self._data
        t = self._tool_index.get(tool, len(self.tools) - 1)
        base = self.worker * self._row + t * self._tool_stride
        data[base + _CALLS] += 1
        ms = latency_s * 1000.0
        data[base + _LAT_SUM] += ms
        bucket = 0
        for bound in LATENCY_BUCKETS_MS:
            if ms <= bound:
                break
            bucket += 1
        data[base + _FIXED + bucket] += 1
        if error_kind is not None:
            data[base + _ERRORS] += 1
            k = self._kind_index.get(error_kind)
            if k is not None:
                data[self.worker * self._row + len(self.tools) * self._tool_stride + k] += 1

    def snapshot(self) -> dict[str, Any]:
        """Totals over all workers: {"tools": {name: {...}}, "errors_by_kind": {...}}."""
        data = list(self._data)
        tools: dict[str, Any] = {}
        for t, name in enumerate(self.tools):
            fields = [0.0] * self._tool_stride
            for w in range(self.workers):
                base = w * self._row + t * self._tool_stride
                for i in range(self._tool_stride):
                    fields[i] += data[base + i]
            if name == UNKNOWN_TOOL and fields[_CALLS] == 0:
                continue
            tools[name] = {
                "calls": int(fields[_CALLS]),
                "errors": int(fields[_ERRORS]),
                "latency_ms_sum": round(fields[_LAT_SUM], 3),
                "latency_buckets": [int(v) for v in fields[_FIXED:]],
            }
        kinds = {kind: 0 for kind in ERROR_KINDS}
        for w in range(self.workers):
            base = w * self._row + len(self.tools) * self._tool_stride
            for k, kind in enumerate(ERROR_KINDS):
                kinds[kind] += int(data[base + k])
        return {"tools": tools, "errors_by_kind": kinds}

    def render_prometheus(self) -> str:
        """Prometheus text exposition (version 0.0.4) of the snapshot."""
        snap = self.snapshot()
        lines = [
            "# HELP toolrl_mcp_tool_calls_total Tool calls answered.",
            "# TYPE toolrl_mcp_tool_calls_total counter",
        ]
        for name, item in snap["tools"].items():
            lines.append(f'toolrl_mcp_tool_calls_total{{tool="{name}"}} {item["calls"]}')
        lines += [
            "# HELP toolrl_mcp_tool_errors_total Tool calls answered with a tool error.",
            "# TYPE toolrl_mcp_tool_errors_total counter",
        ]
        for name, item in snap["tools"].items():
            lines.append(f'toolrl_mcp_tool_errors_total{{tool="{name}"}} {item["errors"]}')
        lines += [
            "# HELP toolrl_mcp_errors_by_kind_total Tool errors by kind (injected_*: mock faults).",
            "# TYPE toolrl_mcp_errors_by_kind_total counter",
        ]
        for kind, count in snap["errors_by_kind"].items():
            lines.append(f'toolrl_mcp_errors_by_kind_total{{kind="{kind}"}} {count}')
        lines += [
            "# HELP toolrl_mcp_tool_latency_ms Server-side tool call latency in milliseconds.",
            "# TYPE toolrl_mcp_tool_latency_ms histogram",
        ]
        for name, item in snap["tools"].items():
            cumulative = 0
            for bound, count in zip(
                (*LATENCY_BUCKETS_MS, "+Inf"), item["latency_buckets"], strict=True
            ):
                cumulative += count
                lines.append(
                    f'toolrl_mcp_tool_latency_ms_bucket{{tool="{name}",le="{bound}"}} {cumulative}'
                )
            lines.append(
                f'toolrl_mcp_tool_latency_ms_sum{{tool="{name}"}} {item["latency_ms_sum"]}'
            )
            lines.append(f'toolrl_mcp_tool_latency_ms_count{{tool="{name}"}} {item["calls"]}')
        return "\n".join(lines) + "\n"
