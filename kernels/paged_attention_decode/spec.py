import importlib.util
from pathlib import Path

from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance


def _load_inputs_module():
    # the lengths the inputs hold, from the file that generates them (plain Python, no torch)
    spec = importlib.util.spec_from_file_location("paged_attention_decode_inputs",
                                                  Path(__file__).with_name("paged_inputs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_inputs = _load_inputs_module()


def _tokens(s) -> int:
    """Cached tokens attended to in one call, summed over the batch."""
    return sum(_inputs.context_lengths(s["B"], s["MB"], s["BS"]))


def _blocks(s) -> int:
    """Block-table entries read: each sequence's blocks up to its last token."""
    return sum(-(-n // s["BS"]) for n in _inputs.context_lengths(s["B"], s["MB"], s["BS"]))


SPEC = KernelSpec(
    name="paged_attention_decode",
    description="Decode attention over a paged KV cache: out[b, h] = softmax(q[b, h] K_b^T / sqrt(D)) V_b, where "
    "K_b, V_b are the first seq_lens[b] tokens of the cache blocks block_table[b, :]; grouped-query (Hq a "
    "multiple of Hkv). The serving engine's hot op in every decode step; memory-bound (reads the whole context).",
    reference="reference.py:paged_attention_decode",
    impls={"triton": "paged_attention_triton.py:paged_attention_decode"},
    args=(
        Arg("q", ("B", "Hq", "D")),
        Arg("k_cache", ("NB", "BS", "Hkv", "D")),
        Arg("v_cache", ("NB", "BS", "Hkv", "D")),
        Arg("block_table", ("B", "MB"), dtype="int32", distribution="int"),
        Arg("seq_lens", ("B",), dtype="int32", distribution="int", low=1),
    ),
    # B sequences, Hq query heads, Hkv KV heads, head dim D, a pool of NB blocks of BS tokens, MB blocks
    # per sequence at most. Lengths: from MB*BS down to 1 token (paged_inputs.context_lengths).
    shapes={
        "cpu": (
            {"B": 3, "Hq": 4, "Hkv": 2, "D": 16, "NB": 8, "BS": 4, "MB": 2},
            {"B": 2, "Hq": 8, "Hkv": 1, "D": 40, "NB": 9, "BS": 8, "MB": 3},
            {"B": 2, "Hq": 2, "Hkv": 2, "D": 64, "NB": 5, "BS": 16, "MB": 2},
        ),
        "gpu": (
            {"B": 64, "Hq": 32, "Hkv": 8, "D": 128, "NB": 4096, "BS": 16, "MB": 64},
            {"B": 1, "Hq": 32, "Hkv": 8, "D": 128, "NB": 512, "BS": 16, "MB": 512},
            {"B": 16, "Hq": 64, "Hkv": 8, "D": 128, "NB": 2048, "BS": 16, "MB": 128},
        ),
    },
    dtypes=("float32", "bfloat16", "float16"),
    make_inputs="paged_inputs.py:make_inputs",
    # per cached token and query head: q.k (2D) and p.v (2D), plus max, exp, sum and rescale (~5)
    flops=lambda s: _tokens(s) * s["Hq"] * (4 * s["D"] + 5),
    # read K and V of every cached token once per KV head, q and out once; int32 table entries and lengths
    bytes=lambda s, itemsize: (2 * _tokens(s) * s["Hkv"] * s["D"] + 2 * s["B"] * s["Hq"] * s["D"]) * itemsize
    + 4 * (_blocks(s) + s["B"]),
    tolerances={
        # FP32 scores, online softmax and accumulation over L tokens: ~sqrt(L) * 2^-24 plus exp's few ulp.
        "float32": Tolerance(rel_l2=1e-5, why="fp32 dot products, online softmax and sums over the context"),
        "float16": Tolerance(rel_l2=2e-3, why="fp32 math on fp16 inputs, one fp16 rounding of out (2^-11)"),
        "bfloat16": Tolerance(rel_l2=1e-2, why="fp32 math on bf16 inputs, one bf16 rounding of out (2^-8)"),
    },
    # the reference's matmuls and softmax; a kernel that calls them is the library, not a kernel
    forbidden_ops=("aten::bmm", "aten::mm", "aten::matmul", "aten::einsum", "aten::_softmax", "aten::softmax",
                   "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
                   "aten::_scaled_dot_product_efficient_attention"),
    extra={
        "scale": "1/sqrt(D)", "seq_lens": ">= 1",
        # the same kernel over kv_quant's quantised caches (see README); checkable with path= and entry=
        "entries": {
            "paged_attention_decode_int8": "(q, k_codes int8 [NB, BS, Hkv, D], k_scale float32 [NB, BS, Hkv], "
                                           "v_codes, v_scale, block_table, seq_lens) -> out [B, Hq, D]",
            "paged_attention_decode_fp8": "as _int8 with uint8 codes holding float8_e4m3fn bits",
            "attend_int8_cache": "spec inputs; quantise K, V with kv_quant, then attend (same name in reference.py)",
            "attend_fp8_cache": "spec inputs; fp8 e4m3 as attend_int8_cache",
        },
    },
)
