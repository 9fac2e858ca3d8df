"""The tuner's persistent store: an sqlite3 database (WAL mode) of decisions and the candidates
each one rejected, with the reasons.

A decision's key is the SHA-256 of its context (tournament.context: device, compiler, versions,
lowering sources, call, row bucket, candidate set, margins, protocol, gate, tuner version), so a
changed context finds no decision and is tuned again. Writers take the database's write lock
(BEGIN IMMEDIATE) and wait for each other (busy timeout), so concurrent processes tune safely.
A store that is not a database, is damaged, or was written by another store version is set aside
(renamed beside itself) with a warning and rebuilt: never a crash, never a decision read from it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from .. import settings

STORE_VERSION = 1  # PRAGMA user_version of a store this code writes
BUSY_TIMEOUT_S = 60.0

_SCHEMA = """
CREATE TABLE decisions (
    key TEXT PRIMARY KEY,
    context TEXT NOT NULL,
    site TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    chosen TEXT NOT NULL,
    route TEXT,
    records TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE rejections (
    key TEXT NOT NULL REFERENCES decisions(key) ON DELETE CASCADE,
    candidate TEXT NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY (key, candidate)
);
"""


class StoreError(RuntimeError):
    """A store that cannot be used or rebuilt (its path is named)."""


def default_path() -> Path:
    return settings.current().tune_store_path


class Store:
    """`Store()` (MLX_METILE_TUNE_STORE, else <cache root>/tune/decisions.sqlite3) or `Store(path)`."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else default_path()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    # -- reading and writing ---------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        """The decision stored under `key` (a dict of its columns, its rejections under
        "rejected"), or None."""
        with self._connection() as con:
            row = con.execute(
                "SELECT key, context, site, bucket, chosen, route, records, created FROM decisions WHERE key = ?",
                (key,),
            ).fetchone()
            if row is None:
                return None
            rejected = con.execute("SELECT candidate, reason FROM rejections WHERE key = ?", (key,)).fetchall()
        try:
            return _decoded(row, rejected)
        except ValueError as e:  # (a row this code did not write: no decision)
            warnings.warn(
                f"mlx_metile.tune: {self.path}: decision {key[:12]} is unreadable ({e}); tuning again",
                RuntimeWarning,
                stacklevel=2,
            )
            return None

    def put(self, key: str, entry: dict) -> None:
        """Store a decision: `entry` holds context, site, bucket, chosen, route, records and
        rejected (candidate -> reason); a decision under the same key is replaced."""
        with self._connection() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                con.execute("DELETE FROM rejections WHERE key = ?", (key,))
                con.execute(
                    "INSERT OR REPLACE INTO decisions (key, context, site, bucket, chosen, route, records, created) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        key,
                        json.dumps(entry["context"], sort_keys=True),
                        entry["site"],
                        int(entry["bucket"]),
                        entry["chosen"],
                        None if entry.get("route") is None else json.dumps(entry["route"], sort_keys=True),
                        json.dumps(entry["records"], sort_keys=True),
                        float(entry.get("created", time.time())),
                    ),
                )
                con.executemany(
                    "INSERT INTO rejections (key, candidate, reason) VALUES (?, ?, ?)",
                    [(key, name, reason) for name, reason in entry.get("rejected", {}).items()],
                )
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

    def all(self) -> list[dict]:
        """Every decision, newest first, each with its rejections."""
        with self._connection() as con:
            rows = con.execute(
                "SELECT key, context, site, bucket, chosen, route, records, created FROM decisions "
                "ORDER BY created DESC"
            ).fetchall()
            rejections: dict[str, list] = {}
            for key, candidate, reason in con.execute("SELECT key, candidate, reason FROM rejections"):
                rejections.setdefault(key, []).append((candidate, reason))
        out = []
        for row in rows:
            with contextlib.suppress(ValueError):  # (unreadable rows are left out)
                out.append(_decoded(row, rejections.get(row[0], [])))
        return out

    def delete(self, key: str) -> None:
        with self._connection() as con:
            con.execute("BEGIN IMMEDIATE")
            con.execute("DELETE FROM rejections WHERE key = ?", (key,))
            con.execute("DELETE FROM decisions WHERE key = ?", (key,))
            con.execute("COMMIT")

    # -- opening -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        con = self._open()
        try:
            yield con
        except sqlite3.DatabaseError as e:
            if _busy(e):
                raise StoreError(f"{self.path}: still locked by another process after {BUSY_TIMEOUT_S:.0f}s") from e
            con.close()
            self._set_aside(f"damaged ({e})")
            raise StoreError(f"{self.path}: the store was damaged while in use ({e}); it was set aside") from e
        finally:
            con.close()

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"{self.path}: cannot create its directory ({e.strerror})") from None
        for _ in range(3):
            problem = None
            con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            try:
                con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
                version = con.execute("PRAGMA user_version").fetchone()[0]
                if version == 0:
                    self._create(con)
                    version = con.execute("PRAGMA user_version").fetchone()[0]
                if version != STORE_VERSION:
                    problem = f"written by store version {version}, not {STORE_VERSION}"
                else:
                    con.execute(
                        "SELECT key, context, site, bucket, chosen, route, records, created FROM decisions LIMIT 1"
                    )
                    con.execute("SELECT key, candidate, reason FROM rejections LIMIT 1")
                    return con
            except sqlite3.DatabaseError as e:
                if _busy(e):
                    con.close()
                    raise StoreError(f"{self.path}: locked by another process for {BUSY_TIMEOUT_S:.0f}s") from e
                problem = f"not a store of decisions ({e})"
            con.close()
            self._set_aside(problem)
        raise StoreError(f"{self.path}: cannot be rebuilt (set aside three times)")

    def _create(self, con: sqlite3.Connection) -> None:
        """Make the tables of an empty database (once, whoever gets the write lock first)."""
        con.execute("PRAGMA journal_mode = WAL")
        con.execute("BEGIN IMMEDIATE")
        try:
            if con.execute("PRAGMA user_version").fetchone()[0] == 0:
                existing = con.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if existing:  # tables of something else in a database without our version
                    con.execute("ROLLBACK")
                    raise sqlite3.DatabaseError("it holds tables of another program")
                # (executescript would commit the transaction: the statements one by one)
                for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                    con.execute(statement)
                con.execute(f"PRAGMA user_version = {STORE_VERSION}")
            con.execute("COMMIT")
        except sqlite3.DatabaseError:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise

    def _set_aside(self, why: str) -> None:
        """Rename the store (and its WAL files) beside itself, under a lock, unless another
        process already replaced it with a good one."""
        lock = self.path.with_name(self.path.name + ".lock")
        with open(lock, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                if self._healthy():
                    return  # (another process set it aside and rebuilt it meanwhile)
                stamp = time.strftime("%Y%m%d-%H%M%S")
                aside = self.path.with_name(f"{self.path.name}.set-aside-{stamp}-{os.getpid()}")
                for suffix in ("", "-wal", "-shm"):
                    src = Path(str(self.path) + suffix)
                    if src.exists():
                        os.replace(src, Path(str(aside) + suffix))
                warnings.warn(
                    f"mlx_metile.tune: the store {self.path} is {why}; set aside as {aside.name} and rebuilt",
                    RuntimeWarning,
                    stacklevel=4,
                )
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _healthy(self) -> bool:
        if not self.path.exists():
            return True
        try:
            con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            try:
                if con.execute("PRAGMA user_version").fetchone()[0] != STORE_VERSION:
                    return False
                con.execute("SELECT key FROM decisions LIMIT 1")
                return True
            finally:
                con.close()
        except sqlite3.DatabaseError:
            return False


def _busy(e: sqlite3.DatabaseError) -> bool:
    text = str(e).lower()
    return isinstance(e, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def _decoded(row: tuple, rejected: list) -> dict:
    key, context, site, bucket, chosen, route, records, created = row
    return {
        "key": key,
        "context": json.loads(context),
        "site": site,
        "bucket": bucket,
        "chosen": chosen,
        "route": None if route is None else json.loads(route),
        "records": json.loads(records),
        "created": created,
        "rejected": dict(rejected),
    }
