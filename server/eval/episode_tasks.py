"""The seed's three episodes as task families (the project's yardstick: README, DESIGN):

    tp_partition      a row-parallel linear whose shards compute with TF32 operands: the
                      tensor-parallel result misses the unpartitioned FP32 one (check_numerics'
                      partition report); the fix was 3xTF32, the other implementation
    kda_recompute     a KDA decode step tiled along V whose every tile recomputes the head's FP32
                      normalisation over all of V (compile_kernel's executed counts per output,
                      the loop over V tiles); the other implementation computes it once
    kv_gil            the built-in engine's disaggregated mode with the native dispatch/combine
                      keeping the GIL: the KV-cache transfer thread never runs during them
                      (profile's gil_contention, the prefill worker holding the GIL)
    control_*         the kernel episodes with both implementations right

The kernel episodes' workspaces are written from the zoo's own files (kernels/tp_linear,
kernels/kda_decode), renamed and with their comments and docstrings removed (they tell the
story); the spec is written here with a neutral description. A seed draws the kernel's name,
the implementations' names, which one carries the problem, and the sizes (ranks, K, the V
tile). The GIL episode costs an engine and a profile (~100 s): one variant.
"""

from __future__ import annotations

import ast
import io
import json
import random
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...kernels.workspace import EMBEDDED_ROOT
from .kernel_tasks import IMPL_NAMES, TARGET
from .tasks import Cause, Location, Truth


def strip_story(source: str) -> str:
    """Python source without its comments and docstrings (code unchanged otherwise)."""
    tree = ast.parse(source)
    doc_lines: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                doc_lines.update(range(body[0].lineno, (body[0].end_lineno or 0) + 1))
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col].rstrip()
            if not lines[row - 1]:  # a comment's own line goes with it
                doc_lines.add(row)
    kept = [line for i, line in enumerate(lines, 1) if i not in doc_lines]
    text = re.sub(r"\n{3,}", "\n\n\n", "\n".join(kept).strip() + "\n")
    return text


def _rename(text: str, names: dict[str, str]) -> str:
    """Replace whole identifiers; each must occur (a zoo change would otherwise go unseen)."""
    for old, new in names.items():
        text, n = re.subn(rf"\b{re.escape(old)}\b", new, text)
        if not n:
            raise ValueError(f"{old!r} is not in the zoo source any more: update episode_tasks.py")
    return text


def _replace_once(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise ValueError(f"{old!r} is not once in the zoo source: update episode_tasks.py")
    return text.replace(old, new)


def _zoo(kernel: str, name: str) -> str:
    return strip_story((EMBEDDED_ROOT / kernel / name).read_text())


def _kernel_question(params: dict, what: str) -> str:
    impls = ", ".join(params["impls"])
    return (
        f"{what} Before we ship it to our H100 fleet (target {TARGET}), check the kernel "
        f"{params['kernel']}: is anything wrong with any of its implementations ({impls})? If "
        "something is, say which implementation and what the cause is (and the number that shows "
        "it, where one does); if nothing is, say so."
    )


# ---- (a) tensor-parallel partition numerics: TF32 shards vs the FP32 result --------------------

TP_SPEC = """
from infra_agent.kernels.schema import Arg, KernelSpec, Partition, Tolerance

SPEC = KernelSpec(
    name="{kernel}",
    description="y = x @ w.T as a row-parallel tensor-parallel linear: K split across {parts} ranks, "
    "the ranks' partial outputs summed (an all-reduce). Float32 in and out.",
    reference="reference.py:linear",
    impls={impls!r},
    args=(Arg("x", ("M", "K")), Arg("w", ("N", "K"))),
    shapes={{"cpu": {shapes!r}, "gpu": ({{"M": 128, "N": 4096, "K": 4096}},)}},
    dtypes=("float32",),
    flops=lambda s: 2 * s["M"] * s["N"] * s["K"],
    bytes=lambda s, itemsize: (s["M"] * s["K"] + s["N"] * s["K"] + s["M"] * s["N"]) * itemsize,
    tolerances={{"float32": Tolerance(rel_l2=1e-5, why="fp32 accumulation over K, ~sqrt(K)*2^-24")}},
    partition=Partition(args={{"x": 1, "w": 1}}, num_parts={parts}, combine="sum"),
    forbidden_ops=("aten::mm", "aten::matmul", "aten::addmm", "aten::bmm", "aten::linear"),
)
"""


def _tp_params(rng: random.Random) -> dict:
    parts = rng.choice((2, 4))
    return {
        "kernel": rng.choice(("tp_linear", "row_parallel_linear", "o_proj_tp", "down_proj_tp")),
        "num_parts": parts,
        "shapes": [
            {"M": 16, "N": 32, "K": rng.choice((256, 384))},
            {"M": 24, "N": rng.choice((40, 48)), "K": rng.choice((512, 640))},
        ],
    }


def _tp_write(params: dict, folder: Path, planted: str | None) -> None:
    kernel, (a, b) = params["kernel"], params["impls"]
    right = b if planted == a else a
    source = _zoo("tp_linear", "tp_linear_triton.py")
    if planted is None:  # both 3xTF32: the TF32 entry's body takes the 3xTF32 path too
        source = _replace_once(source, "split3=False", "split3=True")
        planted = b
    entries = {"linear_tf32x3": f"{kernel}_{right}", "linear_tf32": f"{kernel}_{planted}"}
    impl_file = f"{kernel}_triton.py"
    (folder / impl_file).write_text(_rename(source, entries))
    (folder / "reference.py").write_text(_zoo("tp_linear", "reference.py"))
    spec = TP_SPEC.format(
        kernel=kernel,
        parts=params["num_parts"],
        impls={i: f"{impl_file}:{kernel}_{i}" for i in (a, b)},
        shapes=tuple(params["shapes"]),
    )
    (folder / "spec.py").write_text(spec.lstrip())


def _tp_question(params: dict) -> str:
    return _kernel_question(
        params,
        f"We serve the linear layer {params['kernel']} row-parallel: its spec splits the "
        f"reduction dimension K across {params['num_parts']} tensor-parallel ranks and sums the "
        "ranks' partial outputs. Its tensor-parallel results must match the unpartitioned FP32 "
        "result within the spec's tolerance.",
    )


# ---- (c) a decode kernel tiled along V that recomputes FP32 normalisation per tile -------------

KDA_SPEC = """
from infra_agent.kernels.schema import Arg, KernelSpec, Partition, Tolerance

_HEAD_ARGS = ("q", "k", "v", "g", "beta", "state", "gate")

SPEC = KernelSpec(
    name="{kernel}",
    description="One decode step of gated delta-rule linear attention per (batch, head): the FP32 "
    "state S [K, V] decays by exp(g) per K row, takes the delta-rule update beta * k (v - S^T k)^T "
    "and is read out with q; the readout is RMS-normalised over V and SiLU-gated in FP32. Returns "
    "(out [B, H, V], new_state [B, H, K, V]).",
    reference="reference.py:kda_decode",
    impls={impls!r},
    args=(
        Arg("q", ("B", "H", "K"), layout="contiguous"),
        Arg("k", ("B", "H", "K"), layout="contiguous"),
        Arg("v", ("B", "H", "V"), layout="contiguous"),
        Arg("g", ("B", "H", "K"), dtype="float32", layout="contiguous"),
        Arg("beta", ("B", "H"), dtype="float32", layout="contiguous"),
        Arg("state", ("B", "H", "K", "V"), dtype="float32", layout="contiguous"),
        Arg("norm_weight", ("V",), distribution="positive", layout="contiguous"),
        Arg("gate", ("B", "H", "V"), layout="contiguous"),
    ),
    make_inputs="inputs.py:make_inputs",
    shapes={{
        "cpu": {shapes!r},
        "gpu": ({{"B": 1, "H": 32, "K": 128, "V": {gpu_v}}}, {{"B": 64, "H": 32, "K": 128, "V": {gpu_v}}}),
    }},
    dtypes=("float32",),
    flops=lambda s: s["B"] * s["H"] * (7 * s["K"] * s["V"] + 10 * s["V"] + 6 * s["K"]),
    bytes=lambda s, itemsize: s["B"] * s["H"] * (8 * s["K"] * s["V"] + itemsize * (2 * s["K"] + 3 * s["V"])
                                                 + 4 * s["K"] + 4) + itemsize * s["V"],
    tolerances={{"float32": Tolerance(rel_l2=1e-5, why="fp32 state update and readout, sums of K and V terms")}},
    partition=Partition(args={{name: 1 for name in _HEAD_ARGS}}, num_parts=2, combine="concat", out_dim=1),
    extra={{"outputs": ["out [B, H, V]", "new_state [B, H, K, V] float32"]}},
)
"""

KDA_GPU_V = 128  # the spec's first GPU shape: the one compile_kernel's launch uses


def _kda_params(rng: random.Random) -> dict:
    block_v = rng.choice((16, 32))
    return {
        "kernel": rng.choice(
            ("kda_decode", "gated_delta_decode", "linear_attn_decode", "kda_step")
        ),
        "block_v": block_v,
        # two V tiles or more per head on CPU, one of them ragged in the second shape
        "shapes": [
            {"B": 1, "H": 2, "K": 16, "V": 2 * block_v},
            {"B": 1, "H": 3, "K": 12, "V": block_v + block_v // 4},
        ],
    }


def _kda_write(params: dict, folder: Path, planted: str | None) -> None:
    kernel, (a, b) = params["kernel"], params["impls"]
    source = _zoo("kda_decode", "kda_decode_triton.py")
    source = _replace_once(source, "VTILE_BLOCK_V = 32", f"VTILE_BLOCK_V = {params['block_v']}")
    if planted is None:  # both compute the statistic once per head: the tiled path is gone
        start = source.index("@triton.jit\ndef kda_decode_vtiled_kernel(")
        source = source[:start] + source[source.index("def _check(") :]
        source = source[: source.index("def kda_decode_vtiled(")].rstrip() + "\n"
        source += (
            "\n\ndef kda_decode_vtiled(q, k, v, g, beta, state, norm_weight, gate):\n"
            "    return kda_decode_fused(q, k, v, g, beta, state, norm_weight, gate)\n"
        )
        planted = b
    right = b if planted == a else a
    entries = {
        "kda_decode_fused": f"{kernel}_{right}",
        "kda_decode_vtiled": f"{kernel}_{planted}",
        "kda_decode_fused_kernel": f"{kernel}_{right}_kernel",
    }
    if "kda_decode_vtiled_kernel" in source:
        entries["kda_decode_vtiled_kernel"] = f"{kernel}_{planted}_kernel"
    impl_file = f"{kernel}_triton.py"
    (folder / impl_file).write_text(_rename(source, entries))
    for name in ("reference.py", "inputs.py"):
        (folder / name).write_text(_zoo("kda_decode", name))
    spec = KDA_SPEC.format(
        kernel=kernel,
        impls={i: f"{impl_file}:{kernel}_{i}" for i in (a, b)},
        shapes=tuple(params["shapes"]),
        gpu_v=KDA_GPU_V,
    )
    (folder / "spec.py").write_text(spec.lstrip())


def _kda_question(params: dict) -> str:
    return _kernel_question(
        params,
        f"Our decode step runs {params['kernel']}, one decode step of gated delta-rule linear "
        "attention per batch and head (an FP32 recurrent state, an RMS-normalised and gated "
        "readout), and we want to pick one of its implementations for production, on its results "
        "and on what it costs.",
    )


# ---- the kernel episodes' family -----------------------------------------------------------------


@dataclass(frozen=True)
class EpisodeKernelFamily:
    """A kernel episode: `draw` picks a variant and its truth, `build` writes its workspace."""

    cause: Cause
    variant: Callable[[random.Random], dict]
    write: Callable[[dict, Path, str | None], None]
    ask: Callable[[dict], str]
    number: Callable[[dict], float | None] = lambda params: None
    number_meaning: str | None = None

    def draw(self, rng: random.Random) -> tuple[dict, Truth]:
        params = self.variant(rng)
        params["impls"] = list(rng.choice(IMPL_NAMES))
        planted = None if self.cause == Cause.none else rng.choice(params["impls"])
        params["buggy_impl"] = planted
        truth = Truth(
            cause=self.cause,
            location=Location(kernel=params["kernel"], impl=planted),
            number=None if planted is None else self.number(params),
            number_meaning=None if planted is None else self.number_meaning,
        )
        return params, truth

    def question(self, params: dict) -> str:
        return self.ask(params)

    def build(self, params: dict, root: Path) -> Path:
        folder = root / "kernels" / params["kernel"]
        folder.mkdir(parents=True)
        self.write(params, folder, params["buggy_impl"])
        return root


# ---- (b) the KV-cache transfer that never overlaps: the GIL held in the native call ---------------

PREFILL_THREAD = "prefill-worker"  # serving/engine/disagg.py's thread names
# The deployment's engine flags, in a file the engine reads (`@file`, argparse): the question
# gives the launch as a user has it, not the flag that plants the problem.
DEPLOY_ARGS = ("--disaggregated", "--no-comm-releases-gil", "--kv-transfer-impl", "bytes")
DEPLOY_FILE = "deploy/disaggregated.args"
# the load the deployment's complaint is about (the replay's: tests/case_studies)
LOAD = {"concurrency": 6, "input_len": 128, "output_len": 3}


@dataclass(frozen=True)
class GilFamily:
    """One variant: an engine and a profile cost ~100 s on this host."""

    def draw(self, rng: random.Random) -> tuple[dict, Truth]:
        params = {"checkpoint": "tiny", "args_file": DEPLOY_FILE, "load": dict(LOAD)}
        truth = Truth(cause=Cause.gil_held, location=Location(thread=PREFILL_THREAD))
        return params, truth

    def question(self, params: dict) -> str:
        launch = {"model": params["checkpoint"], "extra_args": [f"@/workspace/{DEPLOY_FILE}"]}
        load = params["load"]
        return (
            "We run the built-in engine disaggregated: a prefill worker, a KV-cache transfer "
            "thread and a decode worker in one process. Our deployment is "
            f"launch_serve(engine='builtin', args={json.dumps(launch)}) (its flags are in the "
            "file the extra argument names). The KV-cache transfer (named range kv_transfer) is "
            "meant to run while the prefill worker sits in its communication step (named ranges "
            "dispatch|combine), but under our load "
            f"({load['concurrency']} requests in flight, {load['input_len']}-token prompts, "
            f"{load['output_len']} output tokens) time to first token is far above what moving "
            "the K/V costs. Is something wrong with this deployment? If something is, say what "
            "the cause is and which thread is to blame; if nothing is, say so."
        )

    def build(self, params: dict, root: Path) -> Path:
        from ...serving.engine.tiny_checkpoint import build_tiny_checkpoint

        root.mkdir(parents=True)
        build_tiny_checkpoint(root / params["checkpoint"])
        args_file = root / params["args_file"]
        args_file.parent.mkdir(parents=True)
        args_file.write_text("\n".join(DEPLOY_ARGS) + "\n")
        return root


FAMILIES: dict[str, EpisodeKernelFamily | GilFamily] = {
    "tp_partition": EpisodeKernelFamily(
        Cause.partition_numerics, _tp_params, _tp_write, _tp_question
    ),
    "kda_recompute": EpisodeKernelFamily(
        Cause.redundant_recompute,
        _kda_params,
        _kda_write,
        _kda_question,
        number=lambda p: float(KDA_GPU_V // p["block_v"]),
        number_meaning="V tiles per head at the spec's first GPU shape: how many times every "
        "program of the tiled implementation recomputes the head's readout for its statistic",
    ),
    "kv_gil": GilFamily(),
    "control_tp_partition": EpisodeKernelFamily(Cause.none, _tp_params, _tp_write, _tp_question),
    "control_kda": EpisodeKernelFamily(Cause.none, _kda_params, _kda_write, _kda_question),
}
