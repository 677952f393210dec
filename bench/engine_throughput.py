"""Output tokens/s of the built-in engine vs `transformers serve --continuous-batching` vs a
static-batch `generate` loop, at 1, 8 and 32 concurrent streaming requests, in one run, on
the same checkpoint (a small Llama built here: 4 layers, hidden 256, random weights).

    .venv/bin/python bench/engine_throughput.py [--max-tokens 64] [--rounds 2] [--workload equal|varied]
                                                [--json out.json]

Each concurrency level sends `rounds * C` requests through the project's load generator
(serving/loadgen) in a closed loop of C streams (a stream sends its next request when the
previous one ends). Output tokens are the server's `usage.completion_tokens` when it sends
usage, else the streamed text re-tokenised (the rule `vllm bench serve` uses); the report
says which. The static loop
runs `generate` on batches of C prompts (left padding, greedy, no EOS stop) in this process.
`offline` is the built-in engine's LLMEngine driven in this process the same way (C in flight,
no HTTP, no client): offline / static compares the engines' steps alone, served / offline is
what serving (HTTP, streaming, the client on the same cores) costs. `old socket` is the same
engine with the hidden bench-only `--no-tcp-nodelay` (its listening socket as before issue 21:
Nagle on every accepted connection), measured beside it in the same run: fixed / old socket is
what TCP_NODELAY changed, on the same machine load.

Workloads: `equal` asks every request for --max-tokens tokens: the static loop's best case (a
batch has no idle rows). `varied` draws each request's max_tokens uniformly from
[8, 2 * max_tokens - 8] (seeded; the same mean), as real traffic varies: the servers get each
request's own max_tokens (the built-in engine with ignore_eos), and the static loop runs each
batch to its longest member but counts only each request's own tokens, the useful ones.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from infra_agent.serving.lifecycle import free_port
from infra_agent.serving.loadgen import (
    Arrivals,
    BenchRequest,
    Endpoint,
    PlainTokenizer,
    run_benchmark,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
CONCURRENCY = (1, 8, 32)
ENGINE_FLAGS = [
    "--max-num-seqs",
    "32",
    "--num-blocks",
    "1024",
]  # the built-in engine, served and offline
WORDS = "the quick brown fox jumps over a lazy dog while paged caches store keys and values".split()


def prompts(n: int) -> list[str]:
    return [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(12 + i % 7)) for i in range(n)]


def output_lengths(n: int, max_tokens: int, workload: str, seed: int = 0) -> list[int]:
    """Each request's max_tokens: all equal, or uniform in [8, 2 * max_tokens - 8] (mean max_tokens)."""
    if workload == "equal" or max_tokens <= 8:
        return [max_tokens] * n
    rng = random.Random(seed)
    return [rng.randint(8, 2 * max_tokens - 8) for _ in range(n)]


def start(cmd: list[str], ready: str, timeout_s: float = 180) -> tuple[subprocess.Popen, str]:
    """Start a server; return it and the URL from its ready line (or the --port we gave)."""
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = Path(log.name).read_text()
        match = re.search(ready, text)
        if match:
            return proc, match.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited:\n{text[-2000:]}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{cmd} not ready after {timeout_s} s: {Path(log.name).read_text()[-2000:]}")


def wait_healthy(url: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url}/health never answered 200")


async def load(
    url: str,
    model: str,
    concurrency: int,
    lengths: list[int],
    extra: dict,
    tokenizer: PlainTokenizer,
) -> dict:
    """One request per entry of `lengths` (its max_tokens) through the project's load generator,
    C in flight (a closed loop)."""
    texts = prompts(len(lengths))
    requests = [
        BenchRequest(p, len(tokenizer.encode(p)), n) for p, n in zip(texts, lengths, strict=True)
    ]
    result = await run_benchmark(
        Endpoint(url, model=model, extra_body=extra),
        requests,
        Arrivals(max_concurrency=concurrency),
        warmup=requests[:1],
        tokenizer=tokenizer,
        timeout_s=600,
    )
    m = result.metrics
    if m.failed:
        raise RuntimeError(f"{m.failed} requests failed against {url}: {m.errors}")
    return {
        "output_tokens": sum(r.output_tokens for r in result.records),
        "seconds": result.duration_s,
        "tokens_per_s": m.output_throughput,
        "count_rule": m.output_tokens_source,
    }


def static_loop(folder: Path, concurrency: int, lengths: list[int]) -> dict:
    """Batches of C prompts, each run to its longest member's max_tokens; only each request's
    own max_tokens count (what a static server could return; the rest of its rows is waste)."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(folder, padding_side="left")
    tok.pad_token = tok.eos_token
    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    todo = prompts(len(lengths))
    model.generate(**tok(["warm up"], return_tensors="pt"), max_new_tokens=4, do_sample=False)
    t0, useful, computed = time.perf_counter(), 0, 0
    for i in range(0, len(todo), concurrency):
        batch = tok(todo[i : i + concurrency], return_tensors="pt", padding=True)
        longest = max(lengths[i : i + concurrency])
        out = model.generate(
            **batch,
            max_new_tokens=longest,
            min_new_tokens=longest,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
        )
        computed += (out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0]
        useful += sum(lengths[i : i + concurrency])
    elapsed = time.perf_counter() - t0
    return {
        "output_tokens": useful,
        "computed_tokens": computed,
        "seconds": elapsed,
        "tokens_per_s": useful / elapsed,
        "count_rule": "exact",
    }


def offline_engine(folder: Path, concurrency: int, lengths: list[int], extra_args: str) -> dict:
    """The built-in engine's LLMEngine driven in this process, no HTTP, no client: C requests in
    flight (the next added when one finishes), the same prompts and max_tokens. What the served
    engine would deliver if serving cost nothing: the gap to `builtin` is the HTTP/streaming path
    and the client sharing the machine."""
    import torch

    from infra_agent.serving.engine import SamplingParams
    from infra_agent.serving.engine.__main__ import engine_args, parser
    from infra_agent.serving.engine.llm_engine import LLMEngine

    threads = (
        torch.get_num_threads()
    )  # the engine sets its own; the static loop keeps torch's default
    ns = parser().parse_args(["--checkpoint", str(folder), *ENGINE_FLAGS, *extra_args.split()])
    engine = LLMEngine(engine_args(ns))
    try:
        engine.generate(["warm up"], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))
        todo = list(zip(prompts(len(lengths)), lengths, strict=True))
        t0, in_flight, tokens = time.perf_counter(), 0, 0
        while todo or engine.has_work():
            while todo and in_flight < concurrency:
                text, n = todo.pop(0)
                engine.add_request(
                    text,
                    SamplingParams(max_tokens=n, temperature=0, ignore_eos=True),
                    f"r{len(todo)}",
                )
                in_flight += 1
            for out in engine.step():
                if out.finished:
                    in_flight -= 1
                    tokens += out.seq.num_output_tokens
        elapsed = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    return {
        "output_tokens": tokens,
        "seconds": elapsed,
        "tokens_per_s": tokens / elapsed,
        "count_rule": "exact",
    }


def socket_only(engine_cmd: list[str], ns, tokenizer) -> int:
    """The engine with TCP_NODELAY and without (its socket before issue 21), side by side per level,
    the order alternating, `ns.rounds` runs of each, the median reported."""
    fixed, url = start(engine_cmd, r"ready at (http://\S+)")
    old, url_old = start(engine_cmd + ["--no-tcp-nodelay"], r"ready at (http://\S+)")
    rows = {}
    try:
        for c in CONCURRENCY:
            lengths = output_lengths(c * 2, ns.max_tokens, ns.workload, seed=c)
            runs: dict[str, list[float]] = {"fixed": [], "old": []}
            for i in range(ns.rounds):
                for name in ("fixed", "old") if i % 2 == 0 else ("old", "fixed"):
                    res = asyncio.run(
                        load(
                            url if name == "fixed" else url_old,
                            "bench-llama",
                            c,
                            lengths,
                            {"ignore_eos": True},
                            tokenizer,
                        )
                    )
                    runs[name].append(res["tokens_per_s"])
            rows[c] = runs
            print(c, runs, file=sys.stderr)
    finally:
        for proc in (fixed, old):
            proc.terminate()
            proc.wait()
    print(
        f"workload {ns.workload}, max_tokens {ns.max_tokens}, {ns.rounds} alternating runs of 2*C requests; "
        "output tok/s, median [min, max]"
    )
    print("| streams | TCP_NODELAY (now) | old socket (Nagle) | now / old |")
    print("|---|---|---|---|")
    for c, runs in rows.items():
        f, o = (sorted(runs[k]) for k in ("fixed", "old"))
        fm, om = f[len(f) // 2], o[len(o) // 2]
        print(
            f"| {c} | {fm:.1f} [{f[0]:.1f}, {f[-1]:.1f}] | {om:.1f} [{o[0]:.1f}, {o[-1]:.1f}] | {fm / om:.2f}x |"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--workload",
        choices=("equal", "varied"),
        default="equal",
        help="equal: every request asks for --max-tokens; varied: seeded, uniform in [8, 2*max-8]",
    )
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--engine-args", default="", help="extra args for the built-in engine")
    ap.add_argument(
        "--socket-only",
        action="store_true",
        help="only the engine and its old-socket twin, "
        "alternating per level (a quick TCP_NODELAY before/after on a busy host)",
    )
    ns = ap.parse_args()
    from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

    folder = build_tiny_checkpoint(
        Path(tempfile.mkdtemp()) / "bench-llama",
        hidden_size=256,
        num_layers=4,
        num_heads=8,
        num_kv_heads=4,
        intermediate_size=688,
        max_positions=1024,
        initializer_range=0.02,
    )
    tokenizer = PlainTokenizer(folder)
    results: dict[str, dict] = {
        "builtin": {},
        "builtin_torch_attention": {},
        "transformers_serve": {},
        "static_generate": {},
        "builtin_offline": {},
        "builtin_old_socket": {},
    }
    engine_cmd = [
        sys.executable,
        "-m",
        "infra_agent.serving.engine",
        "--checkpoint",
        str(folder),
        "--port",
        "0",
        *ENGINE_FLAGS,
        *ns.engine_args.split(),
    ]
    if ns.socket_only:
        return socket_only(engine_cmd, ns, tokenizer)
    # the default (the zoo's reference kernels on CPU), and the engine's batched torch decode attention
    builtin, url = start(engine_cmd, r"ready at (http://\S+)")
    builtin_t, url_t = start(
        engine_cmd + ["--kernels", "paged_attention_decode=torch"], r"ready at (http://\S+)"
    )
    builtin_old, url_old = start(engine_cmd + ["--no-tcp-nodelay"], r"ready at (http://\S+)")
    port = free_port()
    tf = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("transformers")),
            "serve",
            str(folder),
            "--device",
            "cpu",
            "--continuous-batching",
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    tf_url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(tf_url)
        for (
            c
        ) in CONCURRENCY:  # the four side by side per level, so machine load drifts hit all alike
            lengths = output_lengths(c * ns.rounds, ns.max_tokens, ns.workload, seed=c)
            results["builtin"][c] = asyncio.run(
                load(url, "bench-llama", c, lengths, {"ignore_eos": True}, tokenizer)
            )
            results["builtin_old_socket"][c] = asyncio.run(
                load(url_old, "bench-llama", c, lengths, {"ignore_eos": True}, tokenizer)
            )
            results["builtin_torch_attention"][c] = asyncio.run(
                load(url_t, "bench-llama", c, lengths, {"ignore_eos": True}, tokenizer)
            )
            results["transformers_serve"][c] = asyncio.run(
                load(tf_url, str(folder), c, lengths, {}, tokenizer)
            )
            results["static_generate"][c] = static_loop(folder, c, lengths)
            results["builtin_offline"][c] = offline_engine(folder, c, lengths, ns.engine_args)
            for k in results:
                print(k, c, results[k][c], file=sys.stderr)
    finally:
        for proc in (builtin, builtin_t, builtin_old, tf):
            proc.terminate()
            proc.wait()

    print(
        f"workload {ns.workload}, max_tokens {ns.max_tokens}, {ns.rounds} rounds; static loop computed/useful "
        "tokens: "
        + ", ".join(
            f"{c}: {results['static_generate'][c]['computed_tokens']}/"
            f"{results['static_generate'][c]['output_tokens']}"
            for c in CONCURRENCY
        )
    )
    print(
        f"{'concurrency':>11} {'builtin':>8} {'builtin+torch attn':>19} {'tf serve':>9} {'static':>8} "
        f"{'vs tf serve':>12} {'vs static':>10} {'offline':>8} {'offline/static':>15} {'served/offline':>15}"
        f" {'old socket':>11} {'fixed/old':>10}  (tok/s; ratios: builtin / builtin+torch attn)"
    )
    for c in CONCURRENCY:
        b, bt, t, s, o, old = (results[k][c]["tokens_per_s"] for k in results)
        print(
            f"{c:>11} {b:>8.1f} {bt:>19.1f} {t:>9.1f} {s:>8.1f} {b / t:>5.2f}/{bt / t:<5.2f}x "
            f"{b / s:>4.2f}/{bt / s:<4.2f}x {o:>8.1f} {o / s:>14.2f}x {b / o:>14.2f}x {old:>11.1f} {b / old:>9.2f}x"
        )
    if ns.json:
        Path(ns.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
