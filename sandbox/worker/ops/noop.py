"""The smallest job: proves the path works and measures the sandbox's own overhead.

payload: {"echo": any JSON} is returned as is; {"progress": n} reports n progress steps.
"""

from __future__ import annotations

import os

from ..context import JobContext


def run(payload: dict, ctx: JobContext) -> dict:
    for step in range(int(payload.get("progress", 0))):
        ctx.progress(step + 1, payload["progress"], f"step {step + 1}")
    return {"echo": payload.get("echo"), "pid": os.getpid(), "device": ctx.device}
