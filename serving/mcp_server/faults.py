"""Seeded, reproducible fault injection for mock mode.

Why keyed and not a stream: training hits the server from many concurrent trajectories
spread over several worker processes, so "the next random number" depends on scheduling.
Instead each call's fate is a pure function of (seed, session, sequence number): the n-th
call of a trajectory under seed K always gets the same outcome, whatever the interleaving
or the worker it lands on. Without a session the sequence is the worker's own call counter,
which makes a single-worker server replay exactly the same global sequence.

Failures imitate what real upstream services answer (timeouts, 429s, 5xx, argument
rejections, empty payloads), so that a policy learns to read an error and retry or adapt.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass
from typing import Final

from serving.mcp_server.config import FaultConfig

FAULT_KINDS: Final = ("timeout", "rate_limit", "upstream_5xx", "invalid_argument")
"""Error faults, in the order their weights below apply."""
_WEIGHTS: Final = (0.3, 0.25, 0.3, 0.15)

_SERVICES: Final = {
    "get_current_weather": "weather-api",
    "get_exchange_rate": "fx-rates",
    "lookup_price": "pricing-service",
    "translate_text": "translation-service",
    "search_knowledge": "knowledge-index",
    "save_note": "notes-store",
    "read_note": "notes-store",
}
_5XX: Final = (
    (500, "Internal Server Error"),
    (502, "Bad Gateway"),
    (503, "Service Unavailable"),
    (504, "Gateway Timeout"),
)


@dataclass(frozen=True, slots=True)
class Fault:
    """What mock mode does to one call instead of (or on top of) running the tool."""

    kind: str
    """One of FAULT_KINDS, "empty" (a successful but empty answer) or "none"."""
    message: str
    """The model-facing text; empty for "none"."""
    delay_s: float
    """Injected latency, applied whatever the outcome."""

    @property
    def is_error(self) -> bool:
        return self.kind in FAULT_KINDS


def _uniforms(seed: int, session: str, seq: int) -> tuple[float, float, float, float]:
    """Four independent U[0,1) draws from a keyed hash (stable across processes and runs)."""
    key = f"{seed}\x1f{session}\x1f{seq}".encode()
    digest = hashlib.blake2b(key, digest_size=32).digest()
    a, b, c, d = (w / 2.0**64 for w in struct.unpack("<4Q", digest))
    return a, b, c, d


class FaultInjector:
    """Decides each call's fault. Pure: no state, so it is safe in any worker or thread."""

    def __init__(self, config: FaultConfig) -> None:
        self.config = config

    @property
    def active(self) -> bool:
        cfg = self.config
        return cfg.failure_rate > 0 or cfg.empty_rate > 0 or cfg.latency_ms > 0

    def decide(self, tool: str, arguments: dict[str, object], session: str, seq: int) -> Fault:
        cfg = self.config
        u_fail, u_kind, u_empty, u_delay = _uniforms(cfg.seed, session, seq)
        delay = 0.0
        if cfg.latency_ms > 0:
            # Exponential: most calls fast, a realistic tail; capped so a turn cannot stall.
            delay = min(-math.log1p(-u_delay) * cfg.latency_ms, cfg.latency_max_ms) / 1000.0
        if u_fail < cfg.failure_rate:
            kind = _pick_kind(u_kind)
            return Fault(kind, _message(kind, tool, arguments, u_kind), delay)
        if u_empty < cfg.empty_rate:
            return Fault("empty", "", delay)
        return Fault("none", "", delay)


def _pick_kind(u: float) -> str:
    total = 0.0
    for kind, weight in zip(FAULT_KINDS, _WEIGHTS, strict=True):
        total += weight
        if u < total:
            return kind
    return FAULT_KINDS[-1]


def _message(kind: str, tool: str, arguments: dict[str, object], u: float) -> str:
    """Error text shaped like what real services and gateways send back."""
    service = _SERVICES.get(tool, "tool-runtime")
    variant = int(u * 1_000_003)
    if kind == "timeout":
        seconds = (5, 10, 15, 30)[variant % 4]
        return (
            f"Error: request to {service} timed out after {seconds} s "
            f"(no response from upstream). The service may be overloaded; retry the call."
        )
    if kind == "rate_limit":
        retry = 1 + variant % 5
        return (
            f"Error 429 Too Many Requests from {service}: rate limit exceeded for {tool} "
            f"(60 requests per minute). Retry after {retry} s."
        )
    if kind == "upstream_5xx":
        status, reason = _5XX[variant % len(_5XX)]
        return (
            f"Error {status} {reason} from {service} while running {tool}. "
            f"This is a temporary server-side problem; retry the call."
        )
    names = sorted(arguments) or ["arguments"]
    name = names[variant % len(names)]
    value = repr(arguments.get(name, ""))[:40]
    return (
        f"Error 400 Bad Request from {service}: the upstream service rejected argument "
        f"'{name}' (value {value}). Check the value's spelling and format, then call again."
    )


def empty_result(tool: str) -> dict[str, object]:
    """The shape an upstream answers with when it has nothing: valid, but no data."""
    service = _SERVICES.get(tool, "tool-runtime")
    return {"results": [], "message": f"{service} returned an empty response"}
