"""The experiment ledger: every tool call is one row, so the agent can look back.

SQLite in WAL mode (readers never block the writer; a killed writer leaves the last
committed state). Each write is one short transaction under a process-wide lock, so
concurrent tool calls in one server share a connection safely; separate processes on
the same workspace (a server and `infra-agent call`) wait on ``busy_timeout``.

A row is opened as ``running`` before the tool runs and closed as ``ok`` or ``error``
after. Rows left ``running`` by a process that no longer exists (a SIGKILLed server)
are marked ``interrupted`` when the ledger is next opened.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ..sandbox import pid_alive
from .limits import utf8_text

SCHEMA = """
CREATE TABLE IF NOT EXISTS experiments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE,
    tool TEXT NOT NULL,
    kernel TEXT,
    hypothesis TEXT,
    arguments TEXT NOT NULL,
    git_commit TEXT,
    git_diff_sha256 TEXT,
    device_fingerprint TEXT,
    device TEXT,
    pid INTEGER,
    started_at REAL NOT NULL,
    ended_at REAL,
    duration_s REAL,
    status TEXT NOT NULL,
    result TEXT,
    error TEXT,
    artifacts TEXT NOT NULL DEFAULT '[]',
    run_id TEXT,
    run_step INTEGER,
    run_model TEXT
);
CREATE INDEX IF NOT EXISTS experiments_tool ON experiments(tool);
CREATE INDEX IF NOT EXISTS experiments_kernel ON experiments(kernel);
CREATE INDEX IF NOT EXISTS experiments_started ON experiments(started_at);
"""
# Columns added after the first release: a ledger written before them gains them on open.
# `code`: the manifest of the code the call ran (kernels/snapshots.py); NULL on rows written before.
# `parent_id`: the call that made this one (a sweep's trial names its sweep); NULL for an agent's call.
# `nodes`: the cluster nodes the call's jobs ran on (sandbox/cluster.py), each with its device
# fingerprint and how many jobs; NULL when every job ran on the server's own host.
# `pinned`: 1 when `infra-agent pin` kept the row's files from `infra-agent gc` (server/retention.py).
# `artifacts_pruned_at`: when gc deleted the row's artifacts (Unix time, s); NULL while they are kept.
LATER_COLUMNS = {
    "run_id": "TEXT",
    "run_step": "INTEGER",
    "run_model": "TEXT",
    "code": "TEXT",
    "parent_id": "TEXT",
    "nodes": "TEXT",
    "pinned": "INTEGER",
    "artifacts_pruned_at": "REAL",
}

JSON_COLUMNS = ("arguments", "device", "result", "artifacts", "code", "nodes")

# SQLite's page cache for the server's one connection, KiB. SQLite's default (2000 KiB) fills as
# the ledger grows, a page per read or written page: a long session's server grew ~10 KB per
# listing call until the 2 MB were full (issue 36, item 6). The rows a call reads are the newest
# (an index walk) and the OS's file cache keeps the rest a read away, so a small cache is enough.
CACHE_KIB = 256


class Ledger:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, so each write is
        # exactly one transaction and nothing is left half-open between calls.
        self._conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=10.0
        )
        self._conn.row_factory = sqlite3.Row
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(
                "PRAGMA synchronous=NORMAL"
            )  # WAL + NORMAL: durable at checkpoints, never corrupt
            self._conn.execute("PRAGMA busy_timeout=10000")
            self._conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")  # negative: KiB, not pages
            self._conn.executescript(SCHEMA)
            self._add_later_columns()
        self._mark_interrupted()

    def _add_later_columns(self) -> None:
        have = {r["name"] for r in self._conn.execute("PRAGMA table_info(experiments)")}
        for name, sql_type in LATER_COLUMNS.items():
            if name not in have:
                self._conn.execute(f"ALTER TABLE experiments ADD COLUMN {name} {sql_type}")
        self._conn.execute("CREATE INDEX IF NOT EXISTS experiments_run ON experiments(run_id)")
        self._conn.execute(
            "CREATE INDEX IF NOT EXISTS experiments_parent ON experiments(parent_id)"
        )

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _write(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                cur = self._conn.execute(sql, params)
                self._conn.execute("COMMIT")
                return cur
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def _mark_interrupted(self) -> None:
        rows = self._read("SELECT seq, pid FROM experiments WHERE status = 'running'")
        dead = [r["seq"] for r in rows if r["pid"] is None or not pid_alive(r["pid"])]
        for seq in dead:
            self._write(
                "UPDATE experiments SET status='interrupted', error='the server stopped before this call finished' "
                "WHERE seq=? AND status='running'",
                (seq,),
            )

    def _read(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def open(
        self,
        *,
        tool: str,
        arguments: dict,
        kernel: str | None,
        hypothesis: str | None,
        git_commit: str | None,
        git_diff_sha256: str | None,
        device: dict | None,
        device_fingerprint: str | None,
        run: dict | None = None,
        parent_id: str | None = None,
    ) -> str:
        """Insert a ``running`` row and return its id (short, sortable: e00042-9f3a).

        ``run`` links the call to an agent run: {"run_id", "step", "model"} (see
        server/context.py's run_link); ``parent_id`` to the call that made it (a sweep)."""
        run = run or {}
        suffix = secrets.token_hex(2)  # ids stay unique even if a ledger file is replaced
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                cur = self._conn.execute(
                    "INSERT INTO experiments (tool, kernel, hypothesis, arguments, git_commit, git_diff_sha256, "
                    "device_fingerprint, device, pid, started_at, status, run_id, run_step, run_model, "
                    "parent_id) VALUES (?,?,?,?,?,?,?,?,?,?, 'running', ?,?,?,?)",
                    (
                        tool,
                        utf8_text(kernel),
                        utf8_text(hypothesis),
                        json.dumps(arguments, sort_keys=True, default=str),
                        git_commit,
                        git_diff_sha256,
                        device_fingerprint,
                        json.dumps(device),
                        os.getpid(),
                        time.time(),
                        utf8_text(run.get("run_id")),
                        run.get("step"),
                        utf8_text(run.get("model")),
                        parent_id,
                    ),
                )
                experiment_id = f"e{cur.lastrowid:05d}-{suffix}"
                self._conn.execute(
                    "UPDATE experiments SET id=? WHERE seq=?", (experiment_id, cur.lastrowid)
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return experiment_id

    def close_ok(
        self,
        experiment_id: str,
        result: dict,
        artifacts: list[str],
        code: dict | None = None,
        nodes: list[dict] | None = None,
    ) -> None:
        self._close(
            experiment_id, "ok", json.dumps(result, default=str), None, artifacts, code, nodes
        )

    def close_error(
        self,
        experiment_id: str,
        error: str,
        artifacts: list[str],
        code: dict | None = None,
        nodes: list[dict] | None = None,
    ) -> None:
        self._close(experiment_id, "error", None, error, artifacts, code, nodes)

    def close_interrupted(self, experiment_id: str, why: str) -> None:
        """A call the server stopped (shutdown) before it finished."""
        self._write(
            "UPDATE experiments SET status='interrupted', error=?, ended_at=?, duration_s=? - started_at "
            "WHERE id=? AND status='running'",
            (why, time.time(), time.time(), experiment_id),
        )

    def interrupt_running(self, why: str) -> int:
        """Mark this process's calls still ``running`` as interrupted (at shutdown); how many."""
        cur = self._write(
            "UPDATE experiments SET status='interrupted', error=?, ended_at=?, "
            "duration_s=? - started_at WHERE status='running' AND pid=?",
            (why, time.time(), time.time(), os.getpid()),
        )
        return cur.rowcount

    def _close(
        self,
        experiment_id: str,
        status: str,
        result: str | None,
        error: str | None,
        artifacts: list[str],
        code: dict | None,
        nodes: list[dict] | None = None,
    ) -> None:
        ended = time.time()
        self._write(
            "UPDATE experiments SET status=?, result=?, error=?, artifacts=?, code=?, nodes=?, "
            "ended_at=?, duration_s=? - started_at WHERE id=?",
            (
                status,
                result,
                utf8_text(error),
                json.dumps(artifacts),
                None if code is None else json.dumps(code),
                json.dumps(nodes) if nodes else None,
                ended,
                ended,
                experiment_id,
            ),
        )

    def running_ids(self) -> list[str]:
        """Calls still running in a live process (dead ones were marked interrupted on open)."""
        return [
            r["id"]
            for r in self._read("SELECT id FROM experiments WHERE status='running' ORDER BY seq")
        ]

    def code_shas(self) -> set[str]:
        """Every blob any row's code snapshot names (what `infra-agent gc` keeps)."""
        shas: set[str] = set()
        for row in self._read("SELECT code FROM experiments WHERE code IS NOT NULL"):
            manifest = json.loads(row["code"])
            for section in ("files", "inline"):
                shas.update(e["sha256"] for e in (manifest.get(section) or {}).values())
        return shas

    def pin(self, experiment_id: str, pinned: bool = True) -> bool:
        """Keep (or stop keeping) a row's files from gc; False when there is no such row."""
        cur = self._write(
            "UPDATE experiments SET pinned=? WHERE id=?", (1 if pinned else None, experiment_id)
        )
        return cur.rowcount > 0

    def retention_rows(self) -> list[dict]:
        """What gc's policy reads of every row, oldest first: id, started_at, status, pinned,
        parent_id, artifacts_pruned_at and the baseline its arguments name (or None)."""
        rows = self._read(
            "SELECT id, started_at, status, pinned, parent_id, artifacts_pruned_at, "
            "json_extract(arguments, '$.baseline') AS baseline FROM experiments ORDER BY seq"
        )
        return [dict(r) for r in rows]

    def mark_pruned(self, experiment_id: str, when: float) -> None:
        self._write(
            "UPDATE experiments SET artifacts_pruned_at=? WHERE id=?", (when, experiment_id)
        )

    def get(self, experiment_id: str) -> dict | None:
        rows = self._read("SELECT * FROM experiments WHERE id=?", (experiment_id,))
        return _row(rows[0]) if rows else None

    def children(self, parent_id: str) -> list[dict]:
        """The calls `parent_id` made (a sweep's trials), oldest first."""
        rows = self._read("SELECT * FROM experiments WHERE parent_id=? ORDER BY seq", (parent_id,))
        return [_row(r) for r in rows]

    def query(
        self,
        *,
        tool: str | None = None,
        kernel: str | None = None,
        since: float | None = None,
        exclude_tools: tuple[str, ...] = (),
        run_id: str | None = None,
        parent_id: str | None = None,
        top_level: bool = False,
        limit: int = 20,
    ) -> list[dict]:
        """Newest first. `parent_id`: only the calls that call made (a sweep's trials);
        `top_level`: only calls nothing else made."""
        where, params = list[str](), list[object]()
        if top_level:
            where.append("parent_id IS NULL")
        for column, value in (
            ("tool", tool),
            ("kernel", kernel),
            ("run_id", run_id),
            ("parent_id", parent_id),
        ):
            if value:
                where.append(f"{column} = ?")
                params.append(value)
        if since is not None:
            where.append("started_at >= ?")
            params.append(since)
        if exclude_tools:
            where.append(f"tool NOT IN ({','.join('?' * len(exclude_tools))})")
            params.extend(exclude_tools)
        sql = "SELECT * FROM experiments"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq DESC LIMIT ?"
        params.append(limit)
        return [_row(r) for r in self._read(sql, tuple(params))]

    def integrity_ok(self) -> bool:
        return self._read("PRAGMA integrity_check")[0][0] == "ok"


def read_only_rows(
    path: Path, *, since: float | None = None, until: float | None = None, kernel: str | None = None
) -> list[dict]:
    """The rows started in [since, until), oldest first, read without opening the ledger for
    writing (a report must not mark another server's running calls interrupted). A missing
    ledger file has no rows."""
    if not Path(path).is_file():
        return []
    where, params = ["1=1"], list[object]()
    for clause, value in (
        ("started_at >= ?", since),
        ("started_at < ?", until),
        ("kernel = ?", kernel),
    ):
        if value is not None:
            where.append(clause)
            params.append(value)
    conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=10.0)
    conn.row_factory = sqlite3.Row
    try:
        sql = f"SELECT * FROM experiments WHERE {' AND '.join(where)} ORDER BY seq"
        return [_row(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def _row(row: sqlite3.Row) -> dict[str, Any]:
    data = dict(row)
    for col in JSON_COLUMNS:
        if data.get(col) is not None:
            data[col] = json.loads(data[col])
    return data
