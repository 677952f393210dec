"""The server as an IDE runs it (`python -m infra_agent.server` on stdio), spoken to line by line:
for tests that need a real server process (signals, a kill and a restart)."""

from __future__ import annotations

import json
import queue
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path


def rss_mb(pid: int | str = "self") -> float:
    """A process's resident set (this one's by default), MB: /proc/PID/statm's second field, in
    pages (memory tests read it: RSS sees native memory tracemalloc does not)."""
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


class StdioServer:
    """The server as an IDE runs it, spoken to line by line."""

    def __init__(self, workspace: Path, *extra: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "infra_agent.server", "--workspace", str(workspace), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def send(self, raw: bytes | str | dict) -> None:
        data = (
            raw
            if isinstance(raw, bytes)
            else (raw if isinstance(raw, str) else json.dumps(raw)).encode()
        )
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def reply(self, rid, timeout_s: float = 120) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                msg = self.lines.get(timeout=1)
            except queue.Empty:
                assert self.proc.poll() is None, "the server exited"
                continue
            if "method" not in msg and msg.get("id") == rid:
                return msg
        raise AssertionError(f"no reply with id {rid!r} in {timeout_s} s")

    def initialize(self) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
        assert "result" in self.reply(0)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, rid: int, tool: str, args: dict) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "tools/call",
                "params": {"name": tool, "arguments": args},
            }
        )

    def rss_mb(self) -> float:
        """The server process's resident set, MB."""
        return rss_mb(self.proc.pid)

    def close(self) -> None:
        """Stop the server (SIGTERM; killed when it will not stop within 60 s)."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
