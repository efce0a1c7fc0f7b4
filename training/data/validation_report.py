"""The outcome of a dataset validation: each check's result and the report that holds them.

Why apart from the validation: the pipeline, the CLI and the validation page read reports;
none of them needs pandas or great-expectations to do so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CheckResult:
    name: str
    success: bool
    detail: str = ""
    examples: list[str] = field(default_factory=list)
    # For great-expectations checks, the result as it came (the validation page shows it):
    suite: str | None = None
    expectation: str | None = None
    column: str | None = None
    observed: Any = None
    unexpected_count: int | None = None


@dataclass
class ValidationReport:
    dataset_dir: str
    success: bool
    rows: int
    dataset_version: str | None
    checks: list[CheckResult]
    data_docs: str | None = None
    """great-expectations' Data Docs index; it loads its scripts from CDNs (blank offline)."""
    page: str | None = None
    """The self-contained validation page (`validation/index.html`): the one to open."""

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.success]

    def summary(self) -> str:
        status = "PASSED" if self.success else "FAILED"
        lines = [
            f"Dataset {self.dataset_dir} ({self.rows} rows): validation {status}, "
            f"{len(self.checks) - len(self.failed)}/{len(self.checks)} checks passed"
        ]
        for check in self.failed:
            lines.append(f"  x {check.name}: {check.detail}")
            lines.extend(f"      e.g. {example}" for example in check.examples[:3])
        if self.page:
            lines.append(f"Validation page: {self.page}")
        if self.data_docs:
            lines.append(f"Data Docs: {self.data_docs} (needs the network for its scripts)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset_dir": self.dataset_dir,
            "success": self.success,
            "rows": self.rows,
            "dataset_version": self.dataset_version,
            "data_docs": self.data_docs,
            "page": self.page,
            "checks": [c.__dict__ for c in self.checks],
        }
