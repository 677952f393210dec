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
    slow_kernel      kernels {"rmsnorm": <fast impl>} -> {"rmsnorm": <slow impl>}: the engine's
                     hot op (every layer's norms, every step) runs the workspace's
                     kernels/rmsnorm impl that loops over rows one at a time (prefill, decode)
    starved_client   only the decoy changed, but the load test's client is starved: while the
                     task runs, a busy neighbour holds the load generator's CPU and every load
                     generator is pinned beside it at a lower priority (neighbour.py). The
                     engines are as fast as yesterday; the client reads their tokens late
    control_config   a change this traffic cannot feel (max_num_seqs still above the requests
                     in flight, a token budget above every step's tokens, a model length above
                     every request's): nothing is wrong

Every family asks the same question (the load test reads TTFT worse since the change: is the
change to blame, in which phase, which key, or is the reading not the engine's?), so the
question alone tells no family from another. A seed draws the values (the planted key's, the
decoy, the traffic's sizes, the neighbour's priority), so variants exist beyond these. The
workspace holds the configs as files too (serve/yesterday.json, serve/today.json,
serve/traffic.json), as a user's repository would; the question quotes them. The slow_kernel
family's workspace also holds the kernel its engine runs (kernels/rmsnorm/: a
spec at the engine's shapes, the reference, and both impls in plain torch), so the kernel
tools can time the impls the engine ran.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .kernel_tasks import KernelFiles
from .tasks import Cause, Location, Truth

CHECKPOINT = "tiny"
# the tiny checkpoint's shape (tests/serving/tools/serve_helpers.py builds the same defaults);
# room for the shared-prefix prompts (prefix + suffix + output tokens)
MAX_POSITIONS = 512
HIDDEN = 64  # its hidden size (build_tiny_checkpoint's default): the norm's row length
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


RMSNORM_SPEC = """
from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance

SPEC = KernelSpec(
    name="rmsnorm",
    description="y = x / sqrt(mean(x^2, -1) + eps) * weight: the serving engine's norm, before "
    "every layer's attention and MLP and before the logits (engine launch_serve kernels=)",
    reference="reference.py:rmsnorm",
    impls={"@IMPL_A@": "rmsnorm_impls.py:@IMPL_A@", "@IMPL_B@": "rmsnorm_impls.py:@IMPL_B@"},
    args=(Arg("x", ("M", "N")), Arg("weight", ("N",), distribution="positive")),
    # the engine's: M rows a prefill step and a decode step hand it, N the model's hidden size
    shapes={"cpu": (@SHAPES@), "gpu": ({"M": 4096, "N": 4096},)},
    dtypes=("float32",),
    flops=lambda s: 4 * s["M"] * s["N"] + s["M"],
    bytes=lambda s, itemsize: (2 * s["M"] * s["N"] + s["N"]) * itemsize,
    tolerances={"float32": Tolerance(rel_l2=1e-5, why="fp32 sum of N squares")},
)
"""

RMSNORM_REFERENCE = """
import torch

EPS = 1e-6  # the model's rms_norm_eps


def rmsnorm(x, weight):  # [M, N], [N] -> [M, N]
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * weight
"""

RMSNORM_IMPLS = """
import torch
from reference import EPS


def @IMPL_A@(x, weight):  # [M, N], [N] -> [M, N]: every row at once
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * weight


def @IMPL_B@(x, weight):  # [M, N], [N] -> [M, N]: one row at a time, as one program per row reads
    out = torch.empty_like(x)
    for m in range(x.shape[0]):
        row = x[m]
        out[m] = row * torch.rsqrt(row.pow(2).mean() + EPS) * weight
    return out
"""


def _slow_kernel(rng: random.Random) -> dict:
    fast = rng.choice(("fused", "vectorized", "batched"))
    slow = rng.choice(("rowwise", "per_row", "row_loop"))
    yesterday = _yesterday(rng) | {"kernels": {"rmsnorm": fast}}
    today = dict(yesterday, kernels={"rmsnorm": slow})
    _decoy(rng, today)
    traffic = _burst(rng, rng.choice((32, 48)), rng.choice((8, 12)))
    return {
        "config_key": "kernels",
        "kernel": {
            "name": "rmsnorm",
            "fast": fast,
            "slow": slow,
            "shapes": [  # a prefill step's rows (every prompt at once) and a decode step's
                {"M": traffic["num_requests"] * traffic["input_len"], "N": HIDDEN},
                {"M": traffic["num_requests"], "N": HIDDEN},
            ],
        },
        "yesterday": yesterday,
        "today": today,
        "traffic": traffic,
    }


# the vectorised impl is @IMPL_A@, the row-by-row one @IMPL_B@
RMSNORM = KernelFiles(RMSNORM_SPEC, RMSNORM_REFERENCE, RMSNORM_IMPLS, impl_file="{kernel}_impls.py")


def _write_kernel(kernel: dict, folder: Path) -> None:
    """kernels/<name>/ as the engine and the kernel tools read it."""
    folder.mkdir(parents=True)
    impls = (kernel["fast"], kernel["slow"])
    RMSNORM.write(
        {"kernel": kernel["name"], "impls": impls, "shapes": kernel["shapes"]}, folder, None
    )


def _starved_client(rng: random.Random) -> dict:
    yesterday = _yesterday(rng)
    today = dict(yesterday)
    _decoy(rng, today)  # the only change: one this traffic cannot feel
    return {
        "config_key": None,  # no config is to blame: the client is
        "yesterday": yesterday,
        "today": today,
        "traffic": _burst(rng, rng.choice((24, 32)), rng.choice((12, 16))),
        "neighbour": {"nice": rng.choice((0, 3))},  # the runner plants it (neighbour.py)
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
Since yesterday's change to our serving engine's config, our load test (the traffic below, run \
on the engine's host) reads time to first token worse. Did the change cause a regression, and \
if it did, in which phase, and which change is to blame? If the engine is not slower, is the \
load test's reading the engine's at all? If nothing got worse beyond noise, say so.

The engine is the built-in one (launch_serve engine="builtin"); the model is the checkpoint at \
tiny/ in the workspace. Its launch_serve args (also in serve/yesterday.json and \
serve/today.json):
yesterday: {yesterday}
today: {today}
Our traffic, as a serve_benchmark workload (serve/traffic.json):
traffic: {traffic}
"""


KERNELS_NOTE = """\
The engine's kernels= arg picks, per hot op, an impl of the workspace's kernel of that name \
(kernels/<op>/spec.py lists them).
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
        if self.cause == Cause.none or params["config_key"] is None:  # no config is to blame
            return params, Truth(cause=self.cause, location=Location())
        kernel = params.get("kernel") or {}  # the kernel today's config switched, its slow impl
        where = Location(
            config_key=params["config_key"], kernel=kernel.get("name"), impl=kernel.get("slow")
        )
        return params, Truth(cause=self.cause, location=where)

    def question(self, params: dict) -> str:
        text = QUESTION.format(
            **{k: json.dumps(params[k]) for k in ("yesterday", "today", "traffic")}
        )
        if "kernel" in params:
            text += KERNELS_NOTE
        return text

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
        if "kernel" in params:
            _write_kernel(params["kernel"], root / "kernels" / params["kernel"]["name"])
        return root


FAMILIES: dict[str, ServingFamily] = {
    "max_num_seqs": ServingFamily(Cause.queueing_max_num_seqs, _max_num_seqs),
    "token_budget": ServingFamily(Cause.small_token_budget, _token_budget),
    "prefix_caching": ServingFamily(Cause.prefix_caching_off, _prefix_caching),
    "slow_kernel": ServingFamily(Cause.slow_kernel, _slow_kernel),
    "starved_client": ServingFamily(Cause.starved_client, _starved_client),
    "control_config": ServingFamily(Cause.none, _control),
}
