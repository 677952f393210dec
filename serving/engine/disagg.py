"""Disaggregated serving in miniature: a prefill worker, a KV-transfer thread and a decode
worker, each its own thread, in one process.

- The prefill worker runs an LLMEngine up to each request's first token. Its model calls
  a native "communication" step around every layer's MLP (`dispatch`, `combine`: a stand-in
  for DeepEP's all-to-all), which is libc's `usleep` loaded through `ctypes.PyDLL` (the call
  keeps the GIL) or `ctypes.CDLL` (it releases it): engine arg `comm_releases_gil`.
- The KV-transfer thread moves each prefilled request's K/V through a swappable transfer
  (`TRANSFERS`): "bytes" sends block by block like a network send, "clone" copies,
  "none" hands the tensors over as they are (the baseline: what the transfer costs is the
  difference).
- The decode worker adopts handed-over requests into its own LLMEngine, streams their first
  token (it travels with the K/V, as in disaggregated serving: TTFT includes the transfer)
  and decodes the rest.

Every phase is a torch.profiler named range: prefill, decode, dispatch, combine,
kv_transfer, schedule (threads named prefill-worker, kv-transfer, decode-worker).
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
import time
from dataclasses import dataclass, field

from .config import EngineArgs
from .llm_engine import LLMEngine, RequestOutput
from .ranges import named_range
from .sequence import SamplingParams, Sequence
from .tokenizer import IncrementalDetokenizer


@dataclass
class Handover:
    """A prefilled request on its way from a prefill engine to a decode engine."""

    request_id: str
    token_ids: list[int]  # prompt + the first sampled token
    num_prompt_tokens: int
    params: SamplingParams
    kv: list  # per layer (k, v) [num_prompt_tokens, Hkv, D]
    num_emitted_chars: int
    times: (
        dict  # arrival_time, first_scheduled_time, first_token_time, last_token_time (monotonic s)
    )
    handed_over_at: float = 0.0
    first_output: RequestOutput | None = (
        None  # the first token, streamed once the decode side has it
    )


def hand_over(engine: LLMEngine, request_id: str) -> Handover:
    """Take a request that just got its first token out of `engine`, with its prompt's K/V."""
    seq, detok = engine.detach(request_id)
    kv = engine.runner.read_kv(seq.block_table, seq.num_prompt_tokens)
    times = {
        k: getattr(seq, k)
        for k in ("arrival_time", "first_scheduled_time", "first_token_time", "last_token_time")
    }
    engine.scheduler.finish(seq, "handed_over")
    return Handover(
        request_id,
        list(seq.token_ids),
        seq.num_prompt_tokens,
        seq.params,
        kv,
        detok.num_emitted,
        times,
        time.monotonic(),
    )


def adopt(engine: LLMEngine, h: Handover) -> Sequence | None:
    """Continue a handed-over request in `engine`; None when there is no room yet (try later)."""
    seq = Sequence(h.token_ids[: h.num_prompt_tokens], h.params, h.request_id)
    seq.token_ids = list(h.token_ids)
    if len(
        engine.scheduler.running
    ) >= engine.scheduler.max_num_seqs or not engine.block_manager.can_grow(
        seq, h.num_prompt_tokens
    ):
        return None
    engine.block_manager.grow(seq, h.num_prompt_tokens)
    engine.runner.write_kv(seq.block_table, h.kv)
    seq.num_computed_tokens = h.num_prompt_tokens
    for k, v in h.times.items():
        setattr(seq, k, v)
    engine.scheduler.adopt(seq)
    detok = IncrementalDetokenizer(engine.tokenizer)
    detok.update(seq.output_token_ids)
    detok.num_emitted = h.num_emitted_chars
    engine.attach(seq, detok)
    return seq


class NativeComm:
    """dispatch/combine as one native call each: libc usleep(comm_us)."""

    def __init__(self, comm_us: int, releases_gil: bool):
        lib = ctypes.CDLL(None) if releases_gil else ctypes.PyDLL(None)
        self._usleep = lib.usleep
        self._usleep.argtypes = [ctypes.c_uint]
        self.comm_us = comm_us

    def dispatch(self) -> None:
        with named_range("dispatch"):
            self._usleep(self.comm_us)

    def combine(self) -> None:
        with named_range("combine"):
            self._usleep(self.comm_us)


def bytes_transfer(kv: list) -> list:
    """As a network send would: each KV block (MESSAGE_TOKENS tokens) of each layer's K and V to
    bytes and back, one message each, under the GIL; the send between (os.sched_yield(), a syscall)
    lets the GIL go, and each message has to win it back: behind a communication step that keeps
    the GIL, that waits out the whole dispatch/combine."""
    import torch

    out = []
    for k, v in kv:
        moved = []
        for t in (k, v):
            pieces = []
            for block in t.split(MESSAGE_TOKENS):
                data = block.contiguous().numpy().tobytes()
                os.sched_yield()
                pieces.append(torch.frombuffer(bytearray(data), dtype=t.dtype).view(block.shape))
            moved.append(torch.cat(pieces))
        out.append(tuple(moved))
    return out


MESSAGE_TOKENS = 16  # tokens of K (or V) per message: the engine's default block size


def clone_transfer(kv: list) -> list:
    return [(k.clone(), v.clone()) for k, v in kv]


def no_transfer(kv: list) -> list:
    """The baseline: the decode worker reads the K/V where the prefill worker left it (one memory)."""
    return kv


TRANSFERS = {"bytes": bytes_transfer, "clone": clone_transfer, "none": no_transfer}


@dataclass
class DisaggArgs:
    comm_releases_gil: bool = (
        True  # CDLL (releases) vs PyDLL (keeps the GIL during dispatch/combine)
    )
    comm_us: int = 8000  # microseconds per dispatch and per combine call (see __main__'s --comm-us)
    transfer: str = "bytes"  # a key of TRANSFERS
    engine: EngineArgs = field(default_factory=EngineArgs)


class DisaggregatedEngine:
    def __init__(self, args: DisaggArgs):
        if args.transfer not in TRANSFERS:
            raise ValueError(f"transfer {args.transfer!r} is not one of {sorted(TRANSFERS)}")
        self.args = args
        self.prefill = LLMEngine(args.engine)
        self.prefill.runner.model.comm = NativeComm(args.comm_us, args.comm_releases_gil)
        self.decode = LLMEngine(args.engine)
        self._transfer = TRANSFERS[args.transfer]
        self._prefill_inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._handovers: queue.SimpleQueue = queue.SimpleQueue()
        self._decode_inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.outputs: queue.SimpleQueue = queue.SimpleQueue()  # RequestOutput, from both workers
        self.kv_transfer_times_s: list[float] = []  # prefill done -> adopted by the decode worker
        self.last_prefill_at = (
            0.0  # time.monotonic() when the prefill worker last produced a first token
        )
        self._aborted: set[str] = set()  # request ids; each worker drops them at its next turn
        self._num_live = (
            0  # requests added and not yet finished or aborted (engine-loop thread only)
        )
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=fn, name=name, daemon=True)
            for fn, name in (
                (self._prefill_loop, "prefill-worker"),
                (self._transfer_loop, "kv-transfer"),
                (self._decode_loop, "decode-worker"),
            )
        ]
        for t in self._threads:
            t.start()

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        request_id: str,
        arrival_time: float | None = None,
    ) -> None:
        ids = self.prefill.encode(prompt)
        self.prefill.validate(ids, params)
        self._num_live += 1
        self._prefill_inbox.put((ids, params, request_id, arrival_time))

    def shutdown(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)

    # -- workers --------------------------------------------------------------------------
    def _prefill_loop(self) -> None:
        while not self._stop.is_set():
            while not self._prefill_inbox.empty():
                ids, params, request_id, arrival = self._prefill_inbox.get()
                self.prefill.add_request(ids, params, request_id, arrival_time=arrival)
            for request_id in list(self._aborted):
                self.prefill.abort(request_id)
            if not self.prefill.has_work():
                time.sleep(0.001)
                continue
            outs = self.prefill.step()
            for out in outs:
                if (
                    out.finished
                ):  # done at its first token (max_tokens=1, a stop): nothing to hand over
                    self.outputs.put(out)
                    continue
                # As in disaggregated serving (the decode instance streams every token): the first
                # token travels with the K/V and reaches the client once the decode worker has it,
                # so TTFT = queue + prefill + KV transfer.
                handover = hand_over(self.prefill, out.request_id)
                handover.first_output = out
                self._handovers.put(handover)
            if outs:
                self.last_prefill_at = time.monotonic()

    def _transfer_loop(self) -> None:
        while not self._stop.is_set():
            try:
                h: Handover = self._handovers.get(timeout=0.05)
            except queue.Empty:
                continue
            with named_range("kv_transfer"):
                h.kv = self._transfer(h.kv)
            self._decode_inbox.put(h)

    def _decode_loop(self) -> None:
        pending: list[Handover] = []
        while not self._stop.is_set():
            while not self._decode_inbox.empty():
                pending.append(self._decode_inbox.get())
            for request_id in list(self._aborted):
                self.decode.abort(request_id)
            pending = [
                h for h in pending if h.request_id not in self._aborted and not self._adopt(h)
            ]
            if not self.decode.has_work():
                time.sleep(0.001)
                continue
            for out in self.decode.step():
                self.outputs.put(out)

    def _adopt(self, h: Handover) -> bool:
        seq = adopt(self.decode, h)
        if seq is None:
            return False
        now = time.monotonic()
        self.kv_transfer_times_s.append(now - h.handed_over_at)
        # The first token reaches the client from here: TTFT (and the decode's start) is now, and the
        # prefill's end is kept beside it, so TTFT = queue + prefill + KV transfer (+ the hand-over's read).
        seq.prefill_end_time, seq.first_token_time, seq.last_token_time = (
            seq.first_token_time,
            now,
            now,
        )
        if h.first_output is not None:
            self.outputs.put(h.first_output)
        return True

    # -- the surface AsyncEngine (the HTTP server's engine loop) uses ----------------------
    @property
    def model_name(self):
        return self.prefill.model_name

    @property
    def tokenizer(self):
        return self.prefill.tokenizer

    @property
    def max_model_len(self):
        return self.prefill.max_model_len

    @property
    def runner(self):
        return self.prefill.runner

    @property
    def scheduler(self):  # metrics: the decode side's queues and counters
        return self.decode.scheduler

    @property
    def block_manager(self):
        return self.decode.block_manager

    def encode(self, prompt):
        return self.prefill.encode(prompt)

    def validate(self, ids, params) -> None:
        self.prefill.validate(ids, params)

    def has_work(self) -> bool:
        return self._num_live > 0

    def pop_kv_transfer_times(self) -> list[float]:
        """Hand-over times (s) recorded since the last call, for the metrics histogram."""
        times, self.kv_transfer_times_s = self.kv_transfer_times_s, []
        return times

    def abort(self, request_id: str) -> None:
        """Both workers drop the request at their next turn (returns None: its blocks are
        freed on the worker threads, not here)."""
        self._aborted.add(request_id)
        self._num_live -= 1

    def step(self) -> list[RequestOutput]:
        """The outputs both workers produced since the last call (waits up to 5 ms for one)."""
        try:
            outs = [self.outputs.get(timeout=0.005)]
        except queue.Empty:
            return []
        while not self.outputs.empty():
            outs.append(self.outputs.get())
        outs = [o for o in outs if o.request_id not in self._aborted]
        self._num_live -= sum(o.finished for o in outs)
        return outs

    # -- offline use ----------------------------------------------------------------------
    def generate(
        self, prompts: list[str | list[int]], params: SamplingParams, timeout_s: float = 300
    ) -> list[dict]:
        ids = [f"d{i}" for i in range(len(prompts))]
        for rid, p in zip(ids, prompts, strict=True):
            self.add_request(p, params, rid)
        done: dict[str, RequestOutput] = {}
        texts = dict.fromkeys(ids, "")
        deadline = time.monotonic() + timeout_s
        while len(done) < len(ids):
            out = self.outputs.get(timeout=max(deadline - time.monotonic(), 0.001))
            self._num_live -= out.finished
            texts[out.request_id] += out.text_delta
            if out.finished:
                done[out.request_id] = out
        return [
            {
                "text": texts[r],
                "token_ids": done[r].seq.output_token_ids,
                "finish_reason": done[r].finish_reason,
            }
            for r in ids
        ]
