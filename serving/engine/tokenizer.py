"""Text <-> token ids: a checkpoint's `tokenizer.json` (the `tokenizers` library) or, without
a checkpoint, bytes. Also the chat template and incremental detokenisation for streaming.
"""

from __future__ import annotations

import json
from pathlib import Path

BYTE_BOS, BYTE_EOS = 256, 257


class ByteTokenizer:
    """One token per UTF-8 byte; 256 = BOS, 257 = EOS. Needs no files."""

    vocab_size = 258
    bos_token_id = BYTE_BOS
    eos_token_ids = [BYTE_EOS]
    chat_template = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return ([BYTE_BOS] if add_special_tokens else []) + list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    @staticmethod
    def text_token_ids() -> list[int]:
        """The ids a model without a checkpoint may sample: printable ASCII, newline and EOS. Its
        random weights pick any of the 258 ids otherwise, most bytes >= 128 are no complete UTF-8
        character, and the detokeniser holds them back to the request's end: it streamed one chunk
        per request (TTFT = E2EL). Each of these ids decodes to text on its own."""
        return [*range(32, 127), ord("\n"), BYTE_EOS]


class HFTokenizer:
    """A checkpoint's tokenizer.json; BOS and the chat template from tokenizer_config.json."""

    def __init__(self, folder: Path):
        from tokenizers import Tokenizer

        path = Path(folder) / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(
                f"{folder} has no tokenizer.json (a fast tokenizer is required)"
            )
        self._tok = Tokenizer.from_file(str(path))
        cfg_path = Path(folder) / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        self.chat_template = cfg.get("chat_template")
        self.vocab_size = self._tok.get_vocab_size()
        self.bos_token_id = self._id_of(cfg.get("bos_token"))
        eos = self._id_of(cfg.get("eos_token"))
        self.eos_token_ids = [eos] if eos is not None else []

    def _id_of(self, token) -> int | None:
        if isinstance(token, dict):
            token = token.get("content")
        return self._tok.token_to_id(token) if token else None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=True)


def load_tokenizer(checkpoint: str | None):
    return ByteTokenizer() if checkpoint is None else HFTokenizer(Path(checkpoint))


def render_chat(tokenizer, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """The checkpoint's Jinja chat template when it has one; otherwise "role: content" lines."""
    if tokenizer.chat_template:
        import jinja2

        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        template = env.from_string(tokenizer.chat_template)
        return template.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token="",
            eos_token="",
        )
    lines = [f"{m['role']}: {_content_text(m.get('content'))}" for m in messages]
    return "\n".join(lines) + ("\nassistant:" if add_generation_prompt else "")


def _content_text(content) -> str:
    if isinstance(content, list):  # OpenAI content parts: keep the text parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


class IncrementalDetokenizer:
    """Turns a growing list of ids into text deltas, at a cost per step that does not grow with
    the output. Each step decodes only a window: the ids of the last emitted piece (context, so
    BPE merges, byte fallback and a decoder's leading-space rule come out as in a full decode)
    plus the new ones, and emits what the new ids add to that piece's text. Text ending in
    U+FFFD is held back, with its ids, until the rest of the character arrives (a multi-byte
    character split over tokens); the last step of a request emits whatever is left.
    Decoding the whole list every step gave the same text at O(n) per token
    (bench/detokenize.py)."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.text = ""  # everything emitted by update() so far (the stop-string logic may cut it)
        self.num_emitted = 0  # characters of `text` already handed to the client
        self._context_at = 0  # ids[_context_at:_read_at] decoded to the last piece added to `text`
        self._read_at = 0  # ids before this are in `text`

    def update(self, ids: list[int], final: bool = False) -> str:
        if len(ids) <= self._read_at:
            return ""
        context = (
            self._tokenizer.decode(ids[self._context_at : self._read_at]) if self._read_at else ""
        )
        window = self._tokenizer.decode(ids[self._context_at :])
        if window.endswith("\ufffd") and not final:  # the last request's text is taken as it is
            return ""
        if window.startswith(context):
            delta = window[len(context) :]
        else:  # a decoder that rewrote the context given what follows: decode it all, as exact as before
            delta = self._tokenizer.decode(ids)[len(self.text) :]
        self.text += delta
        self._context_at, self._read_at = self._read_at, len(ids)
        return delta
