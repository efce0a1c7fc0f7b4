"""Notes memory shared by all worker processes.

Why: `save_note` and `read_note` are stateful per conversation, but the kernel spreads
connections over the workers, so the call that saves a note and the call that reads it may
land in different processes. One SQLite file (WAL, no fsync: it is scratch memory, not a
record) gives every worker the same view for a few tens of microseconds per notes call.
A single-worker server keeps the in-memory store of the catalog.
"""

from __future__ import annotations

import sqlite3
import threading

from serving.tools.base import NotesStore, ToolExecutionError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (
    session TEXT NOT NULL,
    title TEXT NOT NULL,
    content TEXT NOT NULL,
    PRIMARY KEY (session, title)
);
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL UNIQUE
);
"""


class SqliteNotesStore(NotesStore):
    """Same contract and bounds as `NotesStore`, persisted in a file every worker opens."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._local_lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        # Opened lazily so that each forked worker gets its own connection.
        if self._conn is None:
            conn = sqlite3.connect(
                self.path, timeout=10.0, check_same_thread=False, isolation_level=None
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=OFF")
            conn.executescript(_SCHEMA)
            self._conn = conn
        return self._conn

    def put(self, session: str, title: str, content: str) -> int:
        with self._local_lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                known = db.execute(
                    "SELECT 1 FROM sessions WHERE session = ?", (session,)
                ).fetchone()
                if known is None:
                    (count,) = db.execute("SELECT COUNT(*) FROM sessions").fetchone()
                    if count >= self.MAX_SESSIONS:
                        (oldest,) = db.execute(
                            "SELECT session FROM sessions ORDER BY id LIMIT 1"
                        ).fetchone()
                        db.execute("DELETE FROM notes WHERE session = ?", (oldest,))
                        db.execute("DELETE FROM sessions WHERE session = ?", (oldest,))
                    db.execute("INSERT INTO sessions (session) VALUES (?)", (session,))
                exists = db.execute(
                    "SELECT 1 FROM notes WHERE session = ? AND title = ?", (session, title)
                ).fetchone()
                (stored,) = db.execute(
                    "SELECT COUNT(*) FROM notes WHERE session = ?", (session,)
                ).fetchone()
                if exists is None and stored >= self.MAX_NOTES_PER_SESSION:
                    raise ToolExecutionError(
                        f"note limit reached ({self.MAX_NOTES_PER_SESSION}); delete a note first"
                    )
                db.execute(
                    "INSERT OR REPLACE INTO notes (session, title, content) VALUES (?, ?, ?)",
                    (session, title, content),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return int(stored) + (0 if exists else 1)

    def get(self, session: str, title: str) -> str | None:
        with self._local_lock:
            row = (
                self._db()
                .execute(
                    "SELECT content FROM notes WHERE session = ? AND title = ?", (session, title)
                )
                .fetchone()
            )
        return None if row is None else str(row[0])

    def titles(self, session: str) -> list[str]:
        with self._local_lock:
            rows = self._db().execute(
                "SELECT title FROM notes WHERE session = ? ORDER BY title", (session,)
            )
            return [str(r[0]) for r in rows]

    def close(self) -> None:
        with self._local_lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
