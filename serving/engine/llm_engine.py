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
from .scheduler import Scheduler
from .sequence import SamplingParams, Sequence
from .tokenizer import IncrementalDetokenizer, load_tokenizer


@dataclass
class Handover:
    """A prefilled request on its way from a prefill engine to a decode engine."""

    request_id: str
    token_ids: list[int]  # prompt + the first sampled token
    num_prompt_tokens: int
    params: SamplingParams
    kv: list  # per layer (k, v) [num_prompt_tokens, Hkv, D]
    num_emitted_chars: int
    times: dict  # arrival_time, first_scheduled_time, first_token_time, last_token_time (monotonic s)
    handed_over_at: float = 0.0
    first_output: RequestOutput | None = None  # disaggregated: the first token, streamed once the decode side has it


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
        from .model_runner import ModelRunner  # torch lives only behind the runner

        self.args = args
        self.model_config = ModelConfig.from_checkpoint(Path(args.checkpoint)) if args.checkpoint else ModelConfig()
        self.tokenizer = load_tokenizer(args.checkpoint)
        self.model_name = args.model_name or (Path(args.checkpoint).name if args.checkpoint else "builtin-random")
        self.eos_token_ids = sorted(set(self.model_config.eos_token_id) | set(self.tokenizer.eos_token_ids))
        self.max_model_len = min(args.max_model_len or self.model_config.max_position_embeddings,
                                 self.model_config.max_position_embeddings, args.num_blocks * args.block_size)
        self.runner = ModelRunner(args, self.model_config)
        self.block_manager = BlockManager(args.num_blocks, args.block_size, args.enable_prefix_caching)
        self.scheduler = Scheduler(self.block_manager, args.max_num_seqs, args.max_num_batched_tokens,
                                   args.enable_chunked_prefill)
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
            raise ValueError(f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                             f"requested {len(ids) + params.max_tokens} tokens ({len(ids)} in the prompt, "
                             f"{params.max_tokens} in the completion). Shorten the prompt or lower max_tokens.")
        bad = [i for i in ids if not 0 <= i < self.model_config.vocab_size]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are outside the vocabulary (0..{self.model_config.vocab_size - 1})")

    def add_request(self, prompt: str | list[int], params: SamplingParams, request_id: str | None = None,
                    arrival_time: float | None = None) -> Sequence:
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
        now = time.monotonic()
        for item in batch:
            if item.seq.first_scheduled_time is None:
                item.seq.first_scheduled_time = now
        num_prefill_chunks = sum(item.num_tokens > 1 for item in batch)
        with named_range("prefill" if num_prefill_chunks else "decode"):
            sampled = self.runner.run(batch)
            if self.args.prefill_delay_ms and num_prefill_chunks:  # the planted regression (EngineArgs)
                time.sleep(self.args.prefill_delay_ms * num_prefill_chunks / 1e3)
        with named_range("postprocess"):
            updated = self.scheduler.postprocess(batch, sampled, self.eos_token_ids, self.max_model_len)
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
            hits = [i for i in (detok.text.find(s, max(0, before - len(s))) for s in stops) if i >= 0]
            if hits:
                detok.text = detok.text[:min(hits)]
                self.scheduler.finish(seq, "stop")
        visible = len(detok.text)
        if stops and not seq.is_finished:  # hold back what may be the start of a stop string
            visible -= max(len(s) for s in stops) - 1
        delta = detok.text[detok.num_emitted:max(visible, detok.num_emitted)]
        detok.num_emitted += len(delta)
        if seq.is_finished:
            seq.finished_time = now
            self._live.pop(seq.request_id, None)
        return RequestOutput(seq.request_id, seq, delta, [seq.token_ids[-1]], seq.is_finished, seq.finish_reason, itl)

    # -- disaggregated serving: hand a prefilled request over to another engine ---------------
    def hand_over(self, request_id: str) -> Handover:
        """Take a request that just got its first token out of this engine, with its prompt's K/V."""
        seq, detok = self._live.pop(request_id)
        kv = self.runner.read_kv(seq.block_table, seq.num_prompt_tokens)
        times = {k: getattr(seq, k) for k in ("arrival_time", "first_scheduled_time", "first_token_time",
                                              "last_token_time")}
        self.scheduler.finish(seq, "handed_over")
        return Handover(request_id, list(seq.token_ids), seq.num_prompt_tokens, seq.params, kv, detok.num_emitted,
                        times, time.monotonic())

    def adopt(self, h: Handover) -> Sequence | None:
        """Continue a handed-over request here; None when there is no room yet (try later)."""
        seq = Sequence(h.token_ids[:h.num_prompt_tokens], h.params, h.request_id)
        seq.token_ids = list(h.token_ids)
        if len(self.scheduler.running) >= self.scheduler.max_num_seqs or \
                not self.block_manager.can_grow(seq, h.num_prompt_tokens):
            return None
        self.block_manager.grow(seq, h.num_prompt_tokens)
        self.runner.write_kv(seq.block_table, h.kv)
        seq.num_computed_tokens = h.num_prompt_tokens
        for k, v in h.times.items():
            setattr(seq, k, v)
        self.scheduler.adopt(seq)
        detok = IncrementalDetokenizer(self.tokenizer)
        detok.update(seq.output_token_ids)
        detok.num_emitted = h.num_emitted_chars
        self._live[seq.request_id] = (seq, detok)
        return seq

    # -- offline use --------------------------------------------------------------------
    def generate(self, prompts: list[str | list[int]], params: SamplingParams | list[SamplingParams]) -> list[dict]:
        """Run prompts to completion in one continuous batch; returns per prompt
        {"text", "token_ids", "finish_reason"} in input order."""
        plist = params if isinstance(params, list) else [params] * len(prompts)
        seqs = [self.add_request(p, sp) for p, sp in zip(prompts, plist, strict=True)]
        texts = {s.request_id: "" for s in seqs}
        while self.has_work():
            for out in self.step():
                texts[out.request_id] = texts.get(out.request_id, "") + out.text_delta
        return [{"text": texts[s.request_id], "token_ids": s.output_token_ids, "finish_reason": s.finish_reason}
                for s in seqs]
