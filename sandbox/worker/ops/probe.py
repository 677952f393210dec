"""Run one function of agent code and return what it returns: no harness around it.

payload: {"source": inline Python | "path": a file, "entry": function name,
          "args": JSON list passed positionally}. The function's return value must be
JSON data. The sandbox's escape suite uses it to run each probe as a job; it is also
the plain "run this script" job.
"""

from __future__ import annotations

from ..context import JobContext
from ..loader import load_entry


def run(payload: dict, ctx: JobContext) -> dict:
    fn = load_entry(
        ctx,
        entry=payload.get("entry", "main"),
        source=payload.get("source"),
        path=payload.get("path"),
    )
    return {"value": fn(*payload.get("args", []))}
