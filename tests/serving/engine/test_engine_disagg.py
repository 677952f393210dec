"""Disaggregated mode: prefill worker, KV-transfer thread and decode worker give the same
greedy tokens as the unified engine, with the native comm step holding or releasing the
GIL, and leave no block behind on either side; its phases are named ranges in a trace."""

from __future__ import annotations

import pytest

from infra_agent.serving.engine import EngineArgs, SamplingParams
from infra_agent.serving.engine.disagg import DisaggArgs, DisaggregatedEngine
from infra_agent.serving.engine.llm_engine import LLMEngine

PROMPTS = [
    "The quick brown fox",
    "Hello world! Numbers 0123456789",
    "A paged KV cache stores keys" * 2,
    "Hi",
]
GREEDY = SamplingParams(max_tokens=8, temperature=0)


@pytest.fixture(scope="module")
def args(tiny_checkpoint):
    return EngineArgs(checkpoint=str(tiny_checkpoint), block_size=8, num_blocks=64)


@pytest.fixture(scope="module")
def unified(args):
    return [o["token_ids"] for o in LLMEngine(args).generate(PROMPTS, GREEDY)]


@pytest.mark.parametrize(
    "releases_gil,transfer", [(False, "bytes"), (True, "bytes"), (True, "clone")]
)
def test_disaggregated_tokens_equal_the_unified_engine(args, unified, releases_gil, transfer):
    engine = DisaggregatedEngine(
        DisaggArgs(comm_releases_gil=releases_gil, comm_us=100, transfer=transfer, engine=args)
    )
    try:
        outs = engine.generate(PROMPTS, GREEDY)
    finally:
        engine.shutdown()
    assert [o["token_ids"] for o in outs] == unified
    assert len(engine.kv_transfer_times_s) == len(PROMPTS)
    for side in (engine.prefill, engine.decode):
        assert side.block_manager.num_free_blocks == 64 and not side.has_work()


def test_phases_are_named_ranges_on_their_threads(args):
    from infra_agent.sandbox.worker import ranges  # the range helper profile reads

    engine = DisaggregatedEngine(DisaggArgs(comm_us=100, engine=args))
    try:
        ranges.start()
        engine.generate(PROMPTS[:2], GREEDY)
    finally:
        recorded = ranges.stop()
        engine.shutdown()
    by_thread: dict[str, set] = {}
    for r in recorded["ranges"]:
        by_thread.setdefault(r["thread"], set()).add(r["name"])
    assert {"schedule", "prefill", "dispatch", "combine"} <= by_thread["prefill-worker"]
    assert {"kv_transfer"} == by_thread["kv-transfer"]
    assert {"schedule", "decode"} <= by_thread["decode-worker"]


def test_disaggregated_engine_behind_the_http_api(tiny_checkpoint, unified):
    import re
    import subprocess
    import sys
    import time

    import httpx

    from infra_agent.serving.engine.tokenizer import HFTokenizer

    tokenizer = HFTokenizer(tiny_checkpoint)

    cmd = [
        sys.executable,
        "-m",
        "infra_agent.serving.engine",
        "--checkpoint",
        str(tiny_checkpoint),
        "--port",
        "0",
        "--block-size",
        "8",
        "--num-blocks",
        "64",
        "--disaggregated",
        "--no-comm-releases-gil",
        "--comm-us",
        "100",
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        url, deadline = None, time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            match = re.search(r"ready at (http://\S+)", proc.stderr.readline())
            url = match.group(1) if match else None
        assert url, "the disaggregated engine did not report readiness"
        with httpx.Client(base_url=url, timeout=60) as http:
            for prompt, expected in zip(
                PROMPTS[:2], unified[:2], strict=True
            ):  # the unified engine's tokens
                body = {"prompt": prompt, "max_tokens": 8, "temperature": 0}
                answer = http.post("/v1/completions", json=body).json()
                assert answer["usage"]["completion_tokens"] == len(expected)
                assert answer["choices"][0]["text"] == tokenizer.decode(expected)
            with http.stream(
                "POST",
                "/v1/completions",
                json={"prompt": "Hi", "max_tokens": 60, "stream": True, "ignore_eos": True},
            ) as response:
                next(response.iter_lines())  # leave mid-stream: both workers drop it
            metrics = http.get("/metrics").text
        assert re.search(
            r"^infra_agent:kv_transfer_time_seconds_count\{[^}]*\} [1-9]", metrics, re.M
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_disaggregated_ttft_is_what_the_client_waits_for(args):
    """The first token reaches the client once the decode worker has the K/V, so the engine's TTFT
    must hold queue + prefill + KV transfer (issue 21: it left the transfer out, and fell while
    the client's TTFT rose). Per request the parts sum to at most the TTFT (the hand-over's K/V
    read lies between the prefill's end and the transfer's start), so the sums must too."""
    from infra_agent.serving.engine.metrics import EngineMetrics
    from infra_agent.tools.serve_benchmark.phases import parse

    engine = DisaggregatedEngine(DisaggArgs(comm_us=100, transfer="bytes", engine=args))
    metrics = EngineMetrics(engine.model_name)
    params = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    try:
        for i, prompt in enumerate(PROMPTS * 2):
            engine.add_request(prompt, params, f"r{i}")
        finished = 0
        while finished < 2 * len(PROMPTS):
            outs = engine.step()
            metrics.on_step(engine, outs)
            finished += sum(o.finished for o in outs)
    finally:
        engine.shutdown()
    m = parse(metrics.render().decode())
    total = {
        name: m[f"{name}_sum"]
        for name in (
            "vllm:time_to_first_token_seconds",
            "vllm:request_queue_time_seconds",
            "vllm:request_prefill_time_seconds",
            "infra_agent:kv_transfer_time_seconds",
        )
    }
    assert (
        m["infra_agent:kv_transfer_time_seconds_count"]
        == m["vllm:time_to_first_token_seconds_count"]
        == 8
    )
    parts = sum(v for k, v in total.items() if k != "vllm:time_to_first_token_seconds")
    assert total["infra_agent:kv_transfer_time_seconds"] > 0
    assert total["vllm:time_to_first_token_seconds"] >= parts - 1e-9, total


def test_a_deployment_keeps_its_flags_in_a_file(tmp_path):
    """`@FILE` (one argument a line) parses as the same flags given inline (the eval's GIL
    episode launches its deployment that way: the question does not spell the flags out)."""
    from infra_agent.serving.engine.__main__ import parser

    flags = ["--disaggregated", "--no-comm-releases-gil", "--kv-transfer-impl", "clone"]
    (tmp_path / "deploy.args").write_text("\n".join(flags) + "\n")
    from_file = parser().parse_args(["--port", "0", f"@{tmp_path / 'deploy.args'}"])
    inline = parser().parse_args(["--port", "0", *flags])
    assert vars(from_file) == vars(inline)
    assert from_file.disaggregated and not from_file.comm_releases_gil
