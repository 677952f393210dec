"""Size bounds on what the server stores and sends back, whatever a tool produced.

Arguments are validated against the limits in tools/base.py, but a call is recorded
before validation (so rejected calls are on record too): what the ledger stores is
clipped here. Replies over MAX_REPLY_CHARS are shrunk (long lists and strings cut,
with a note in the summary) and the full result is kept as an artifact.
"""

from __future__ import annotations

import json
from typing import Any, overload

from ..tools.base import MAX_CODE_CHARS, MAX_TEXT_CHARS

MAX_REPLY_CHARS = 256_000  # one tool result as JSON text (the structured and the text block each)
MAX_ERROR_CHARS = 4_000  # one error message
MAX_STORED_ARGUMENTS_CHARS = MAX_CODE_CHARS + 50_000  # the largest valid call fits whole
MAX_FULL_REPLY_CHARS = 64_000_000  # the reply.json artifact a truncated reply points to
ENVELOPE = ("experiment_id", "summary", "artifacts")  # never cut: they say where the rest is


@overload
def utf8_text(value: str) -> str: ...
@overload
def utf8_text(value: None) -> None: ...
def utf8_text(value: str | None) -> str | None:
    """Text that encodes as UTF-8 (what SQLite and every transport need): a lone UTF-16
    surrogate, which an in-process client can send inside an object key, becomes its escape."""
    return (
        value.encode("utf-8", "backslashreplace").decode("utf-8")
        if isinstance(value, str)
        else value
    )


def clip_text(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    note = f"... [cut: {len(text)} chars in all]"
    return text[: max(0, limit - len(note))] + note


def record_arguments(arguments: dict) -> dict:
    """The arguments as the ledger stores them: every string at most MAX_CODE_CHARS, and
    the whole at most MAX_STORED_ARGUMENTS_CHARS (else only the names and sizes)."""
    clipped = _shrink(arguments, MAX_CODE_CHARS, None)
    if len(json.dumps(clipped, default=str)) <= MAX_STORED_ARGUMENTS_CHARS:
        return clipped
    return {
        "_clipped": f"arguments over {MAX_STORED_ARGUMENTS_CHARS} chars; not stored",
        "_sizes": {
            str(k)[:100]: len(json.dumps(v, default=str)) for k, v in list(arguments.items())[:50]
        },
    }


def record_hypothesis(hypothesis: Any) -> str | None:
    return clip_text(hypothesis, MAX_TEXT_CHARS) if isinstance(hypothesis, str) else None


def fit_reply(result: dict) -> tuple[dict, str | None]:
    """(the reply to send, a note saying what was cut, or None when it fits whole).
    Lists and strings are cut, evenly, to the largest sizes that fit; objects keep all
    their keys, so the reply still has every field its output schema requires."""
    if len(json.dumps(result, ensure_ascii=False)) <= MAX_REPLY_CHARS:
        return result, None
    max_chars, max_items = 8_192, 256
    while True:
        body = {k: v for k, v in result.items() if k not in ENVELOPE}
        shrunk = {**result, **_shrink(body, max_chars, max_items)}
        if len(json.dumps(shrunk, ensure_ascii=False)) <= MAX_REPLY_CHARS or (
            max_chars <= 64 and max_items <= 1
        ):
            return shrunk, (
                f"reply cut to fit {MAX_REPLY_CHARS} chars (lists to {max_items} items, "
                f"strings to {max_chars} chars)"
            )
        max_chars, max_items = max(64, max_chars // 2), max(1, max_items // 2)


def _shrink(value: Any, max_chars: int, max_items: int | None) -> Any:
    if isinstance(value, str):
        return clip_text(value, max_chars)
    if isinstance(value, dict):  # objects keep every key: they are schema fields
        return {k: _shrink(v, max_chars, max_items) for k, v in value.items()}
    if isinstance(value, list):
        return [
            _shrink(v, max_chars, max_items) for v in (value[:max_items] if max_items else value)
        ]
    return value
