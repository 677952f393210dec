"""The engine: requests in, tokens out. `step()` = schedule -> run -> postprocess.

Not thread-safe: one thread calls add_request/step/abort (the HTTP server's engine loop).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from .block_manager import BlockManager
from .config import EngineArgs, ModelConfig
from .ranges import named_range
from .scheduler import ScheduledSeq, Scheduler
from .sequence import SamplingParams, Sequence
from .tokenizer import IncrementalDetokenizer, load_tokenizer


@dataclass
class RequestOutput:
    request_id: str
    seq: Sequence
    text_delta: str  # new text since the last output of this request
    token_ids_delta: list[int]  # new token ids since the last output
    finished: bool
    finish_reason: str | None  # "stop", "length", "abort"
    inter_token_latency_s: float | None  # since this request's previous token; None for the first


class LLMEngine:
    def __init__(self, args: EngineArgs):
        from .planted import model_runner  # torch lives only behind the runner

        self.args = args
        self.model_config = (
            ModelConfig.from_checkpoint(Path(args.checkpoint)) if args.checkpoint else ModelConfig()
        )
        self.tokenizer = load_tokenizer(args.checkpoint)
        self.model_name = args.model_name or (
            Path(args.checkpoint).name if args.checkpoint else "builtin-random"
        )
        self.eos_token_ids = sorted(
            set(self.model_config.eos_token_id) | set(self.tokenizer.eos_token_ids)
        )
        self.max_model_len = min(
            args.max_model_len or self.model_config.max_position_embeddings,
            self.model_config.max_position_embeddings,
            args.num_blocks * args.block_size,
        )
        self.runner = model_runner(args, self.model_config)
        self.block_manager = BlockManager(
            args.num_blocks, args.block_size, args.enable_prefix_caching
        )
        self.scheduler = Scheduler(
            self.block_manager,
            args.max_num_seqs,
            args.max_num_batched_tokens,
            args.enable_chunked_prefill,
        )
        self._live: dict[str, tuple[Sequence, IncrementalDetokenizer]] = {}
        self.num_steps = 0

    # -- requests -----------------------------------------------------------------------
    def encode(self, prompt: str | list[int]) -> list[int]:
        return list(prompt) if isinstance(prompt, list) else self.tokenizer.encode(prompt)

    def validate(self, ids: list[int], params: SamplingParams) -> None:
        """Raise ValueError (its message is the client's error) for a request that cannot run."""
        if not ids:
            raise ValueError("the prompt is empty: give at least one token")
        if len(ids) + params.max_tokens > self.max_model_len:
            raise ValueError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                f"requested {len(ids) + params.max_tokens} tokens ({len(ids)} in the prompt, "
                f"{params.max_tokens} in the completion). Shorten the prompt or lower max_tokens."
            )
        bad = [i for i in ids if not 0 <= i < self.model_config.vocab_size]
        if bad:
            raise ValueError(
                f"token ids {bad[:5]} are outside the vocabulary (0..{self.model_config.vocab_size - 1})"
            )

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        request_id: str | None = None,
        arrival_time: float | None = None,
    ) -> Sequence:
        ids = self.encode(prompt)
        self.validate(ids, params)
        seq = Sequence(ids, params, request_id)
        seq.arrival_time = arrival_time or seq.arrival_time
        if seq.request_id in self._live:
            raise ValueError(f"request id {seq.request_id!r} is already running")
        self.scheduler.add(seq)
        self._live[seq.request_id] = (seq, IncrementalDetokenizer(self.tokenizer))
        return seq

    def abort(self, request_id: str) -> Sequence | None:
        """Stop a request (e.g. its client went away) and free its blocks; returns it, or
        None when it had already finished."""
        entry = self._live.pop(request_id, None)
        if entry is None:
            return None
        seq = entry[0]
        self.scheduler.finish(seq, "abort")
        seq.finished_time = time.monotonic()
        return seq

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    # -- the loop -----------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        with named_range("schedule"):
            batch = self.scheduler.schedule()
        if not batch:
            return []
        mark_scheduled(batch, time.monotonic())
        with named_range("prefill" if any(item.num_tokens > 1 for item in batch) else "decode"):
            sampled = self.runner.run(batch)
        with named_range("postprocess"):
            updated = self.scheduler.postprocess(
                batch, sampled, self.eos_token_ids, self.max_model_len
            )
            self.num_steps += 1
            return [self._output(seq) for seq in updated]

    def _output(self, seq: Sequence) -> RequestOutput:
        now = time.monotonic()
        itl = None if seq.last_token_time is None else now - seq.last_token_time
        seq.first_token_time = seq.first_token_time or now
        seq.last_token_time = now
        _, detok = self._live[seq.request_id]
        before = len(detok.text)
        detok.update(seq.output_token_ids, final=seq.is_finished)
        stops = seq.params.stop
        if stops and not seq.is_finished:
            hits = [
                i for i in (detok.text.find(s, max(0, before - len(s))) for s in stops) if i >= 0
            ]
            if hits:
                detok.text = detok.text[: min(hits)]
                self.scheduler.finish(seq, "stop")
        visible = len(detok.text)
        if stops and not seq.is_finished:  # hold back what may be the start of a stop string
            visible -= max(len(s) for s in stops) - 1
        delta = detok.text[detok.num_emitted : max(visible, detok.num_emitted)]
        detok.num_emitted += len(delta)
        if seq.is_finished:
            seq.finished_time = now
            self._live.pop(seq.request_id, None)
        return RequestOutput(
            seq.request_id, seq, delta, [seq.token_ids[-1]], seq.is_finished, seq.finish_reason, itl
        )

    # -- requests that move to another engine (disagg.py) -----------------------------------
    def detach(self, request_id: str) -> tuple[Sequence, IncrementalDetokenizer]:
        """Stop tracking a live request without finishing it: its blocks stay allocated."""
        return self._live.pop(request_id)

    def attach(self, seq: Sequence, detok: IncrementalDetokenizer) -> None:
        """Track a request that the scheduler already runs (adopted from another engine)."""
        self._live[seq.request_id] = (seq, detok)

    # -- offline use --------------------------------------------------------------------
    def generate(
        self, prompts: list[str | list[int]], params: SamplingParams | list[SamplingParams]
    ) -> list[dict]:
        """Run prompts to completion in one continuous batch; returns per prompt
        {"text", "token_ids", "finish_reason"} in input order."""
        plist = params if isinstance(params, list) else [params] * len(prompts)
        seqs = [self.add_request(p, sp) for p, sp in zip(prompts, plist, strict=True)]
        texts = {s.request_id: "" for s in seqs}
        while self.has_work():
            for out in self.step():
                texts[out.request_id] = texts.get(out.request_id, "") + out.text_delta
        return [
            {
                "text": texts[s.request_id],
                "token_ids": s.output_token_ids,
                "finish_reason": s.finish_reason,
            }
            for s in seqs
        ]


def mark_scheduled(batch: list[ScheduledSeq], now: float) -> None:
    """Queue time ends when a request is first scheduled (a recomputation keeps the first time)."""
    for item in batch:
        if item.seq.first_scheduled_time is None:
            item.seq.first_scheduled_time = now
