"""The HTTP API of a real engine process on loopback (`python -m infra_agent.serving.engine`):
OpenAI shapes, streaming with usage, vLLM's metric names, profiling, bad input, a client
that disconnects mid-stream, 200 concurrent requests."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time

import httpx
import pytest
from engine_process import engine_process

PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint, with the greedy first token after PROMPT declared a second EOS:
    so a request for PROMPT ends at once unless it sets ignore_eos."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("eos-llama")
    shutil.copytree(tiny_checkpoint, folder, dirs_exist_ok=True)
    ids = AutoTokenizer.from_pretrained(folder)(PROMPT)["input_ids"]
    with torch.no_grad():
        first = int(
            LlamaForCausalLM.from_pretrained(folder)(torch.tensor([ids])).logits[0, -1].argmax()
        )
    cfg = json.loads((folder / "config.json").read_text())
    cfg["eos_token_id"] = [cfg["eos_token_id"], first]
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.fixture(scope="module")
def engine_url(checkpoint, tmp_path_factory):
    profile_dir = tmp_path_factory.mktemp("traces")
    with engine_process(
        "--checkpoint",
        str(checkpoint),
        "--num-blocks",
        "64",
        "--block-size",
        "8",
        "--max-num-seqs",
        "16",
        "--max-num-batched-tokens",
        "64",
        "--profile-dir",
        str(profile_dir),
    ) as started:
        yield started.url, profile_dir


@pytest.fixture
def http(engine_url):
    with httpx.Client(base_url=engine_url[0], timeout=60) as client:
        yield client


def complete(http, **body):
    return http.post("/v1/completions", json={"prompt": PROMPT, "temperature": 0} | body)


def metric(http, name: str, labels: str = "") -> float:
    text = http.get("/metrics").text
    pattern = rf"^{re.escape(name)}\{{[^}}]*{re.escape(labels)}[^}}]*\}} (\S+)$"
    values = [float(m) for m in re.findall(pattern, text, flags=re.M)]
    return sum(values)


def sse_events(response) -> list:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_health_and_models(http):
    assert http.get("/health").status_code == 200
    models = http.get("/v1/models").json()
    assert models["data"][0]["id"] == "eos-llama0" or models["data"][0]["id"].startswith(
        "eos-llama"
    )


def test_eos_ends_a_request_unless_ignore_eos(http):
    stopped = complete(http, max_tokens=6).json()
    assert (
        stopped["choices"][0]["finish_reason"] == "stop"
        and stopped["usage"]["completion_tokens"] == 1
    )
    full = complete(http, max_tokens=6, ignore_eos=True).json()
    assert (
        full["choices"][0]["finish_reason"] == "length" and full["usage"]["completion_tokens"] == 6
    )
    assert full["usage"]["prompt_tokens"] == stopped["usage"]["prompt_tokens"] > 1


def test_stream_with_usage_matches_the_plain_answer(http):
    plain = complete(http, max_tokens=8, ignore_eos=True).json()
    body = {
        "prompt": PROMPT,
        "temperature": 0,
        "max_tokens": 8,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    with http.stream("POST", "/v1/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks, last = events[:-2], events[-2]
    assert last["choices"] == [] and last["usage"] == plain["usage"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == plain["choices"][0]["text"]
    assert all("usage" in c for c in chunks)  # continuous_usage_stats
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 8
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_chat_completion_and_its_stream(http):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello world!"},
    ]
    plain = http.post(
        "/v1/chat/completions",
        json={"messages": messages, "max_tokens": 5, "temperature": 0, "ignore_eos": True},
    ).json()
    assert (
        plain["object"] == "chat.completion"
        and plain["choices"][0]["message"]["role"] == "assistant"
    )
    body = {
        "messages": messages,
        "max_completion_tokens": 5,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        events = sse_events(response)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e["choices"])
    assert text == plain["choices"][0]["message"]["content"]
    assert events[-2]["usage"] == plain["usage"]


def test_unknown_fields_are_ignored_like_vllm(http):
    response = complete(
        http, max_tokens=2, ignore_eos=True, repetition_penalty=1.1, some_future_field={"a": 1}
    )
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize(
    "body,status,needle",
    [
        ({"max_tokens": 0}, 400, "max_tokens"),
        ({"max_tokens": -3}, 400, "max_tokens"),
        ({"model": "no-such-model"}, 404, "does not exist"),
        ({"prompt": "x " * 400}, 400, "maximum context length"),
        ({"prompt": None}, 400, "prompt"),
        ({"n": 2}, 400, "n must be 1"),
    ],
)
def test_bad_requests_get_clear_errors(http, body, status, needle):
    response = complete(http, **body)
    assert response.status_code == status
    assert needle in response.json()["error"]["message"]


def test_malformed_json_and_the_engine_keeps_serving(http):
    response = http.post(
        "/v1/completions", content=b'{"prompt": "x",', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]
    assert complete(http, max_tokens=2, ignore_eos=True).status_code == 200


def test_a_client_that_disconnects_mid_stream_frees_its_blocks(http):
    aborted_before = metric(http, "vllm:request_success_total", 'finished_reason="abort"')
    body = {"prompt": PROMPT, "max_tokens": 200, "ignore_eos": True, "stream": True}
    with http.stream("POST", "/v1/completions", json=body) as response:
        for i, _ in enumerate(response.iter_lines()):
            if i >= 2:
                break  # leave with ~200 tokens still to go
    for _ in range(100):
        if metric(http, "vllm:request_success_total", 'finished_reason="abort"') > aborted_before:
            break
        time.sleep(0.05)
    assert (
        metric(http, "vllm:request_success_total", 'finished_reason="abort"') == aborted_before + 1
    )
    assert metric(http, "vllm:kv_cache_usage_perc") == 0.0
    assert metric(http, "vllm:num_requests_running") == 0.0


def test_200_concurrent_requests_are_all_answered(engine_url):
    async def run():
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=engine_url[0], timeout=120, limits=limits) as client:
            bodies = [
                {"prompt": f"{PROMPT} {i}", "max_tokens": 3, "ignore_eos": True, "temperature": 0}
                for i in range(200)
            ]
            return await asyncio.gather(*(client.post("/v1/completions", json=b) for b in bodies))

    responses = asyncio.run(run())
    assert [r.status_code for r in responses] == [200] * 200
    assert all(r.json()["usage"]["completion_tokens"] == 3 for r in responses)


def test_metrics_use_vllm_names(http):
    complete(http, max_tokens=3, ignore_eos=True)
    for name in (
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_count",
        "vllm:request_queue_time_seconds_count",
        "vllm:request_prefill_time_seconds_count",
        "vllm:request_decode_time_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:generation_tokens_total",
    ):
        assert metric(http, name) > 0, name
    text = http.get("/metrics").text
    for name in (
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "infra_agent:kv_transfer_time_seconds",
    ):
        assert name in text


def test_profile_writes_a_trace_with_the_engine_ranges(http, engine_url):
    assert http.post("/stop_profile").status_code == 400  # nothing running yet
    assert http.post("/start_profile").status_code == 200
    complete(http, max_tokens=3, ignore_eos=True)
    trace = http.post("/stop_profile").json()["trace"]
    assert trace.startswith(str(engine_url[1]))
    names = {e.get("name") for e in json.load(open(trace))["traceEvents"]}
    assert {"schedule", "prefill", "decode"} <= names
