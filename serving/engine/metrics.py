"""Prometheus metrics under vLLM's names and meanings (vllm/v1/metrics/loggers.py), so a
dashboard or load generator written for vLLM reads this engine too.

Per request (seconds): queue = arrival -> first scheduled; prefill = first scheduled ->
first token; decode = first token -> last token; inference = first scheduled -> finish;
TTFT = arrival -> first token; e2e = arrival -> finish; inter-token latency = gap between
consecutive tokens of one request. Ours alone: `infra_agent:kv_transfer_time_seconds`
(disaggregated mode's prefill -> decode hand-over). In disaggregated mode the first token
reaches the client once the decode worker has the K/V, so there TTFT = queue + prefill +
KV transfer (what the client waits for), prefill ends at the prefill's first token, and
decode starts at the hand-over.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class EngineMetrics:
    def __init__(self, model_name: str):
        self.registry = CollectorRegistry()
        r, labels = self.registry, ["model_name"]

        def hist(name, doc, buckets=LATENCY_BUCKETS):
            return Histogram(name, doc, labels, registry=r, buckets=buckets).labels(model_name)

        self.ttft = hist(
            "vllm:time_to_first_token_seconds", "Time to first token (arrival -> first token)"
        )
        self.itl = hist(
            "vllm:inter_token_latency_seconds", "Time between consecutive tokens of a request"
        )
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Arrival -> finish")
        self.queue = hist("vllm:request_queue_time_seconds", "Arrival -> first scheduled")
        self.prefill = hist("vllm:request_prefill_time_seconds", "First scheduled -> first token")
        self.decode = hist("vllm:request_decode_time_seconds", "First token -> last token")
        self.inference = hist("vllm:request_inference_time_seconds", "First scheduled -> finish")
        self.kv_transfer = hist(
            "infra_agent:kv_transfer_time_seconds",
            "Prefill -> decode KV hand-over per request (disaggregated mode)",
        )
        self.prompt_len = hist(
            "vllm:request_prompt_tokens", "Prompt tokens per request", TOKEN_BUCKETS
        )
        self.gen_len = hist(
            "vllm:request_generation_tokens", "Generated tokens per request", TOKEN_BUCKETS
        )

        def gauge(name, doc):
            return Gauge(name, doc, labels, registry=r).labels(model_name)

        def counter(name, doc):
            return Counter(name, doc, labels, registry=r).labels(model_name)

        self.running = gauge("vllm:num_requests_running", "Requests in the running batch")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled")
        self.kv_usage = gauge(
            "vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 = full)"
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prefill tokens processed")
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated")
        self.preemptions = counter("vllm:num_preemptions", "Preemptions (recompute)")
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache"
        )
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Of those, tokens found in the cache")
        self._success = Counter(
            "vllm:request_success", "Finished requests", labels + ["finished_reason"], registry=r
        )
        self._model_name = model_name
        self._last = {"preemptions": 0, "queries": 0, "hits": 0}

    def update_gauges(self, engine) -> None:
        self.running.set(len(engine.scheduler.running))
        self.waiting.set(len(engine.scheduler.waiting))
        self.kv_usage.set(engine.block_manager.usage)

    def on_step(self, engine, outputs) -> None:
        """After each engine step: gauges, counters, and per-request histograms."""
        sched = engine.scheduler
        self.update_gauges(engine)
        for key, counter, now in (
            ("preemptions", self.preemptions, sched.num_preemptions),
            ("queries", self.prefix_queries, sched.num_prefix_cache_queries),
            ("hits", self.prefix_hits, sched.num_prefix_cache_hits),
        ):
            counter.inc(now - self._last[key])
            self._last[key] = now
        self.generation_tokens.inc(len(outputs))
        for seconds in getattr(engine, "pop_kv_transfer_times", list)():  # disaggregated mode only
            self.kv_transfer.observe(seconds)
        for out in outputs:
            if out.inter_token_latency_s is not None:
                self.itl.observe(out.inter_token_latency_s)
            if out.finished:
                self.on_finished(out.seq)

    def on_finished(self, seq) -> None:
        reason = seq.finish_reason or "abort"
        self._success.labels(self._model_name, reason).inc()
        self.prompt_tokens.inc(seq.num_prompt_tokens)
        self.prompt_len.observe(seq.num_prompt_tokens)
        self.gen_len.observe(seq.num_output_tokens)
        end = seq.finished_time
        self.e2e.observe(end - seq.arrival_time)
        if seq.first_scheduled_time is not None:
            self.queue.observe(seq.first_scheduled_time - seq.arrival_time)
            self.inference.observe(end - seq.first_scheduled_time)
        if seq.first_token_time is not None:
            self.ttft.observe(seq.first_token_time - seq.arrival_time)
            prefill_end = seq.prefill_end_time or seq.first_token_time
            self.prefill.observe(prefill_end - (seq.first_scheduled_time or seq.arrival_time))
            self.decode.observe(seq.last_token_time - seq.first_token_time)

    def render(self) -> bytes:
        return generate_latest(self.registry)
