"""Every tool call that data generation executed, with its result: the ground truth a dataset
version points to, and what the record/replay MCP server answers from.

Why SQLite and canonical arguments: ground truth is produced by *executing* calls against a
user's real server once; training must then see exactly those results without touching that
server again. Two calls the model means the same way (`{"b": 1, "a": 2.0}` and
`{"a": 2, "b": 1}`) must find the same row, so arguments are stored in one canonical form.
One file per store, written with one transaction per batch, so a crash loses no recorded row
and a half-written batch never shows. `digest()` fingerprints the content, not the file, so
a dataset version names the results it was built from.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    result TEXT NOT NULL,
    is_error INTEGER NOT NULL,
    PRIMARY KEY (server, tool, arguments)
)
"""
MAX_DEPTH = 32


class CallStoreError(ValueError):
    """Arguments that have no canonical form (NaN, non-JSON values, nesting too deep)."""


def _canonical_value(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise CallStoreError("arguments are nested too deeply")
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CallStoreError(f"arguments hold a non-finite number ({value})")
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise CallStoreError("argument object keys must be strings")
        return {
            unicodedata.normalize("NFC", k): _canonical_value(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_canonical_value(v, depth + 1) for v in value]
    raise CallStoreError(f"arguments hold a {type(value).__name__}, which JSON cannot")


def canonical_arguments(arguments: Mapping[str, Any] | None) -> str:
    """One string per meaning: keys sorted, no whitespace, integral floats as integers,
    strings NFC-normalised. Raises CallStoreError for what JSON cannot carry."""
    value = _canonical_value(dict(arguments or {}), 0)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class RecordedCall:
    server: str
    tool: str
    arguments: str
    """Canonical JSON (`canonical_arguments`)."""
    result: str
    is_error: bool


class CallStore:
    """A SQLite file of recorded calls; safe to share between threads of one process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # No fsync per commit: calls are recorded one at a time as they are answered (1,400
        # commits for a 2,000-row dataset: half its generation time with fsync). In WAL mode
        # the file stays consistent and survives a crash of the process; only a power loss
        # may drop the last commits, which a recording can afford.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> CallStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def record(self, calls: Iterable[RecordedCall]) -> int:
        """Store a batch in one transaction (a later result for the same call replaces the
        earlier one); returns how many rows were written."""
        rows = [(c.server, c.tool, c.arguments, c.result, int(c.is_error)) for c in calls]
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany("INSERT OR REPLACE INTO calls VALUES (?,?,?,?,?)", rows)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return len(rows)

    def record_one(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None,
        result: str,
        is_error: bool,
    ) -> RecordedCall:
        call = RecordedCall(server, tool, canonical_arguments(arguments), result, is_error)
        self.record([call])
        return call

    def lookup(
        self, server: str, tool: str, arguments: Mapping[str, Any] | None
    ) -> RecordedCall | None:
        """The recorded call with the same meaning, or None (also for arguments that have no
        canonical form: such a call was never recorded)."""
        try:
            key = canonical_arguments(arguments)
        except CallStoreError:
            return None
        with self._lock:
            row = self._db.execute(
                "SELECT result, is_error FROM calls WHERE server=? AND tool=? AND arguments=?",
                (server, tool, key),
            ).fetchone()
        return None if row is None else RecordedCall(server, tool, key, row[0], bool(row[1]))

    def __iter__(self) -> Iterator[RecordedCall]:
        with self._lock:
            rows = self._db.execute(
                "SELECT server, tool, arguments, result, is_error FROM calls "
                "ORDER BY server, tool, arguments"
            ).fetchall()
        return iter(RecordedCall(s, t, a, r, bool(e)) for s, t, a, r, e in rows)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def digest(self) -> str:
        """sha256 over the content in canonical order: the same calls, the same digest."""
        return digest_of(self)


def digest_of(calls: Iterable[RecordedCall]) -> str:
    """`CallStore.digest` of calls already read (in the store's order: server, tool,
    arguments), so a reader that loads the rows once (the replay server) names the same
    content without a second pass over the file."""
    hasher = hashlib.sha256()
    for call in calls:
        line = json.dumps(
            [call.server, call.tool, call.arguments, call.result, call.is_error],
            ensure_ascii=False,
        )
        hasher.update(line.encode("utf-8") + b"\n")
    return hasher.hexdigest()
