"""Serving task families: yesterday's and today's engine config for the built-in engine on a
tiny checkpoint the task builds (tiny/, random weights, nothing downloaded), the traffic the
users send, and the question "did today's config make time to first token worse: which phase,
which change?". Today's config changes one key against yesterday's, and in the planted
families a second key that does not matter to this traffic (a decoy):

    max_num_seqs     max_num_seqs 64 -> 1 or 2 under a burst of 12-16 requests: they queue
                     for a sequence slot (the queue phase moves)
    token_budget     max_num_batched_tokens 512+ -> 16 or 32 under long prompts: each prefill
                     is cut into many steps, and waiting requests get no budget (queue, prefill)
    prefix_caching   enable_prefix_caching off under shared-prefix traffic: every request
                     prefills the shared prefix again (the prefix-cache hit rate drops to 0)
    control_config   a change this traffic cannot feel (max_num_seqs still above the requests
                     in flight, a token budget above every step's tokens, a model length above
                     every request's): nothing is wrong

A seed draws the values (the planted key's, the decoy, the traffic's sizes), so variants exist
beyond these. The workspace holds the configs as files too (serve/yesterday.json,
serve/today.json, serve/traffic.json), as a user's repository would; the question quotes them.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .tasks import Cause, Location, Truth

CHECKPOINT = "tiny"
# the tiny checkpoint's shape (tests/serving/tools/serve_helpers.py builds the same defaults);
# room for the shared-prefix prompts (prefix + suffix + output tokens)
MAX_POSITIONS = 512
BUDGETS = (512, 1024, 2048)  # yesterday's max_num_batched_tokens: any fits the traffic
# Changes no traffic of these families can feel: its requests fit any of these.
DECOYS = (
    ("max_model_len", (384, 448)),
    ("served_model_name", ("tiny-prod", "chat-tiny")),
)


def _burst(rng: random.Random, input_len: int, output_len: int) -> dict:
    """Every request at once (no arrival rate): the queue a too-small batch builds shows."""
    return {
        "dataset": "random",
        "num_requests": rng.choice((12, 16)),
        "input_len": input_len,
        "output_len": output_len,
        "warmup": 2,
    }


def _yesterday(rng: random.Random) -> dict:
    return {"model": CHECKPOINT, "max_num_seqs": 64, "max_num_batched_tokens": rng.choice(BUDGETS)}


def _decoy(rng: random.Random, today: dict) -> None:
    key, values = rng.choice(DECOYS)
    today[key] = rng.choice(values)


def _max_num_seqs(rng: random.Random) -> dict:
    yesterday = _yesterday(rng)
    today = dict(yesterday, max_num_seqs=rng.choice((1, 2)))
    _decoy(rng, today)
    return {
        "config_key": "max_num_seqs",
        "yesterday": yesterday,
        "today": today,
        "traffic": _burst(rng, rng.choice((24, 32)), rng.choice((12, 16))),
    }


def _token_budget(rng: random.Random) -> dict:
    yesterday = _yesterday(rng)
    today = dict(yesterday, max_num_batched_tokens=rng.choice((16, 32)))
    _decoy(rng, today)
    return {
        "config_key": "max_num_batched_tokens",
        "yesterday": yesterday,
        "today": today,
        "traffic": _burst(rng, rng.choice((192, 256)), 4),
    }


def _prefix_caching(rng: random.Random) -> dict:
    yesterday = _yesterday(rng)
    today = dict(yesterday, enable_prefix_caching=False)
    _decoy(rng, today)
    return {
        # a model whose prefill costs more than the client's overhead: recomputing the prefix shows
        "checkpoint": {"hidden_size": 256, "intermediate_size": 512, "num_layers": 4},
        "config_key": "enable_prefix_caching",
        "yesterday": yesterday,
        "today": today,
        "traffic": {
            "dataset": "shared_prefix",
            "num_requests": rng.choice((12, 16)),
            "prefix_len": rng.choice((192, 256)),
            "num_prefixes": 1,
            "input_len": 16,
            "output_len": 4,
            "max_concurrency": 4,  # the first few compute the prefix, the rest find it cached
            "warmup": 2,
        },
    }


def _control(rng: random.Random) -> dict:
    traffic = _burst(rng, rng.choice((24, 32)), rng.choice((12, 16)))
    assert traffic["num_requests"] * traffic["input_len"] <= BUDGETS[0]  # a step's, at most
    yesterday = _yesterday(rng)
    yesterday["max_num_batched_tokens"] = rng.choice(BUDGETS[1:])
    key = rng.choice(("max_num_seqs", "max_num_batched_tokens", "max_model_len"))
    value = {
        "max_num_seqs": rng.choice((24, 32)),  # still above the requests in flight
        # halved, yet every step's tokens still fit in one
        "max_num_batched_tokens": yesterday["max_num_batched_tokens"] // 2,
        "max_model_len": rng.choice(DECOYS[0][1]),  # above every request's tokens
    }[key]
    return {
        "config_key": key,
        "yesterday": yesterday,
        "today": dict(yesterday, **{key: value}),
        "traffic": traffic,
    }


QUESTION = """\
Since yesterday's change to our serving engine's config, users say time to first token got \
worse. Did the change cause a regression, and if it did, in which phase, and which change is \
to blame? If nothing got worse beyond noise, say so.

The engine is the built-in one (launch_serve engine="builtin"); the model is the checkpoint at \
tiny/ in the workspace. Its launch_serve args (also in serve/yesterday.json and \
serve/today.json):
yesterday: {yesterday}
today: {today}
Our traffic, as a serve_benchmark workload (serve/traffic.json):
traffic: {traffic}
"""


@dataclass(frozen=True)
class ServingFamily:
    """One kind of serving task: `draw` picks a variant and its truth, `build` writes its
    workspace (the checkpoint and the configs)."""

    cause: Cause
    variant: Callable[[random.Random], dict]

    def draw(self, rng: random.Random) -> tuple[dict, Truth]:
        params = self.variant(rng)
        params["checkpoint_seed"] = rng.randrange(1000)
        key = None if self.cause == Cause.none else params["config_key"]
        return params, Truth(cause=self.cause, location=Location(config_key=key))

    def question(self, params: dict) -> str:
        return QUESTION.format(
            **{k: json.dumps(params[k]) for k in ("yesterday", "today", "traffic")}
        )

    def build(self, params: dict, root: Path) -> Path:
        try:
            from ...serving.engine.tiny_checkpoint import build_tiny_checkpoint

            root.mkdir(parents=True)
            build_tiny_checkpoint(
                root / CHECKPOINT,
                seed=params["checkpoint_seed"],
                max_positions=MAX_POSITIONS,
                **params.get("checkpoint", {}),
            )
        except ImportError as exc:
            raise RuntimeError(
                f"the serving tasks build a tiny checkpoint with transformers ({exc}): install "
                "infra-agent's test extra (pip install 'infra-agent[test]'), or run only the "
                "kernel tasks (--tasks kernel.stride,...)"
            ) from None
        serve = root / "serve"
        serve.mkdir()
        for name in ("yesterday", "today", "traffic"):
            (serve / f"{name}.json").write_text(json.dumps(params[name], indent=2) + "\n")
        return root


FAMILIES: dict[str, ServingFamily] = {
    "max_num_seqs": ServingFamily(Cause.queueing_max_num_seqs, _max_num_seqs),
    "token_budget": ServingFamily(Cause.small_token_budget, _token_budget),
    "prefix_caching": ServingFamily(Cause.prefix_caching_off, _prefix_caching),
    "control_config": ServingFamily(Cause.none, _control),
}
