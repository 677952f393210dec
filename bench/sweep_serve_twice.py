"""Issue 35's rerun check: the same sweep_serve twice, with identical arguments, one after the
other on one server, on the built-in engine or vLLM's CPU build. A sweep's answer must not
depend on which run you read: the same decided winner both times, or an honest tie or
"undecided" both times. Per sweep: wall time, the children by tool, best, the race's outcome,
ratio [interval] and runner-up, and the prefix-cache hit rate of every step (the engine's own
counter: each step must send prompts the engine has not seen). Prints whether the two agree.

    .venv/bin/python bench/sweep_serve_twice.py [--engine builtin|vllm]

vLLM runs from .cache/vllm (`make vllm`), on a checkpoint with head_dim 32 (its CPU attention's
smallest), eager (no torch.compile: launches of ~1 minute here instead of 2-3).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import anyio
from mcp_session import call, zoo_session

REPO = Path(__file__).resolve().parent.parent
VLLM_PYTHON = (REPO / ".cache" / "vllm").resolve() / "bin" / "python"
# the space: queueing (1 sequence at a time) against a batch, at loads where it shows
SPACE = {"max_num_seqs": [1, 8]}
COMMON = {
    "workload": {"num_requests": 16, "input_len": 32, "output_len": 8, "warmup": 1},
    "ladder": {"concurrencies": [1, 4]},
    "slo": {"ttft_p99_ms": 5000},
    "repeats": 2,
}
BASE_ARGS = {
    "builtin": {"model": "tiny"},
    "vllm": {"model": "tiny32", "extra_args": ["--enforce-eager"]},
}


def with_vllm(ws: Path) -> None:
    """A checkpoint vLLM's CPU attention takes (head_dim 128 / 4 = 32; ASCII tokens) at
    tiny32/, and the workspace's [engines.vllm] pointing at .cache/vllm."""
    from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

    if not VLLM_PYTHON.exists():
        raise SystemExit(f"no vLLM at {VLLM_PYTHON}: `make vllm` installs its CPU build")
    build_tiny_checkpoint(
        ws / "tiny32",
        byte_alphabet=False,
        hidden_size=128,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=256,
    )
    config = ws / "infra-agent.toml"
    config.write_text(config.read_text() + f'\n[engines.vllm]\npython = "{VLLM_PYTHON}"\n')


def answer_row(out: dict, children: list[dict], wall_s: float) -> dict:
    race = out.get("race") or {}
    steps = [s for c in out.get("configs") or [] for s in c.get("steps") or []]
    return {
        "wall_s": round(wall_s, 1),
        "children": dict(Counter(c["tool"] for c in children)),
        "best": out.get("best"),
        "outcome": race.get("outcome", "no race"),
        "ratio": race.get("ratio"),
        "interval": race.get("interval"),
        "runner_up": race.get("runner_up"),
        "hit_rates": [
            max((r or 0.0 for r in s.get("prefix_cache_hit_rates") or []), default=None)
            for s in steps
        ],
    }


def agree(first: dict, second: dict) -> str:
    if first["outcome"] == second["outcome"] == "decided":
        same = first["best"] == second["best"]
        return "the same decided winner" if same else "DIFFERENT decided winners"
    if first["outcome"] == "decided" or second["outcome"] == "decided":
        return f"{first['outcome']} then {second['outcome']}: one decided, one not"
    return f"{first['outcome']} both times (no winner claimed)"


async def main(engine: str) -> None:
    args = {"engine": engine, "base_args": BASE_ARGS[engine], "space": SPACE, **COMMON}
    rows = []
    prepare = with_vllm if engine == "vllm" else None
    async with zoo_session("sweep-twice-", tiny_checkpoint=True, prepare=prepare) as client:
        for _ in range(2):
            started = time.perf_counter()
            out = await call(client, "sweep_serve", **args)
            wall_s = time.perf_counter() - started
            listed = await client.read_resource(f"experiment://{out['experiment_id']}")
            children = json.loads(listed.contents[0].text)["children"]
            rows.append(answer_row(out, children, wall_s))
            print(json.dumps(rows[-1]), flush=True)
    print(f"{engine}: {agree(*rows)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=sorted(BASE_ARGS), default="builtin")
    anyio.run(main, parser.parse_args().engine)
