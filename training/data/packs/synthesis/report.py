"""What became of the proposals: counted by reason, as the manifest's `synthesis` block.

Why counted and not logged: an endpoint's quality is the acceptance rate and the reasons
for refusal, which the manifest keeps with the dataset they describe.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SynthesisReport:
    """What happened to the proposals: the manifest's `synthesis` block."""

    requests: int = 0
    calls_sent: int = 0
    """Calls of the proposals sent to the server (the rest were answered from the store)."""
    proposed: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def reject(self, reason: str, detail: str = "") -> None:
        """Count one rejection; keep a few examples, with anything unprintable escaped (an
        example is the endpoint's text, and the CLI prints it to a terminal)."""
        self.rejected[reason] += 1
        if len(self.examples) < 8:
            text = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in detail[:240])
            self.examples.append(f"{reason}: {text}"[:240])

    @property
    def rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "calls_sent": self.calls_sent,
            "proposed": self.proposed,
            "accepted": self.accepted,
            "rate": round(self.rate, 4),
            "rejected": dict(sorted(self.rejected.items())),
            "examples": list(self.examples),
        }


class ProposalError(Exception):
    """A proposal (or a whole reply) that is refused; `reason` is the counted key."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
