"""What an op sees of its job: its folders and its device."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class JobContext:
    job_dir: Path  # the job's only writable folder
    in_dir: Path  # files the parent copied in (read them, do not trust them to stay)
    out_dir: Path  # files for the parent: tensors, IR dumps, traces
    workspace: Path | None  # the workspace, read-only, as this process sees it
    device: str  # "cuda" or "cpu"

    def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Tell the parent how far the job is (best effort; the parent may ignore it)."""
        import json
        import time

        line = json.dumps({"t": time.time(), "done": done, "total": total, "message": message})
        with open(self.job_dir / "progress.jsonl", "a") as f:
            f.write(line + "\n")
