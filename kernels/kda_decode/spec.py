from infra_agent.kernels.schema import Arg, KernelSpec, Partition, Tolerance

_HEAD_ARGS = ("q", "k", "v", "g", "beta", "state", "gate")  # everything indexed by head

SPEC = KernelSpec(
    name="kda_decode",
    description="One decode step of gated delta-rule linear attention (KDA) per (batch, head): the FP32 state "
    "S [K, V] decays by exp(g) per K row, takes the delta-rule update beta * k (v - S^T k)^T, is read out with "
    "q; the readout is RMS-normalised over V and SiLU-gated in FP32. Returns (out [B, H, V], new_state "
    "[B, H, K, V]). 'vtiled' splits V across programs and recomputes the row statistic in every tile; "
    "'fused' computes it once per head.",
    reference="reference.py:kda_decode",
    impls={
        "fused": "kda_decode_triton.py:kda_decode_fused",
        "vtiled": "kda_decode_triton.py:kda_decode_vtiled",
    },
    # Every argument "contiguous": the kernels index each tensor as a packed [B*H, ...] block
    # (pid_bh * K, pid_bh * K * V) instead of taking strides, and _check asserts it; a padded
    # or sliced input would be misread, so no other layout is tried (check_numerics' layouts).
    args=(
        Arg("q", ("B", "H", "K"), layout="contiguous"),
        Arg("k", ("B", "H", "K"), layout="contiguous"),
        Arg("v", ("B", "H", "V"), layout="contiguous"),
        Arg("g", ("B", "H", "K"), dtype="float32", layout="contiguous"),  # log-decay, <= 0
        Arg("beta", ("B", "H"), dtype="float32", layout="contiguous"),  # step size in (0, 1)
        Arg("state", ("B", "H", "K", "V"), dtype="float32", layout="contiguous"),
        Arg("norm_weight", ("V",), distribution="positive", layout="contiguous"),
        Arg("gate", ("B", "H", "V"), layout="contiguous"),
    ),
    make_inputs="inputs.py:make_inputs",
    shapes={
        # V = 64 and 40 give the vtiled impl (BLOCK_V 32) two tiles per head, one of them ragged; K = 12 and
        # H = 3 exercise the K mask and an uneven head split. Tiny: every vtiled tile re-reads the whole row.
        "cpu": ({"B": 1, "H": 2, "K": 16, "V": 64}, {"B": 1, "H": 3, "K": 12, "V": 40}),
        # Kimi-Linear-like heads (K = V = 128): batch 1 decode, and batches whose state (128 MiB and
        # 256 MiB in FP32) does not fit in L2
        "gpu": ({"B": 1, "H": 32, "K": 128, "V": 128}, {"B": 64, "H": 32, "K": 128, "V": 128},
                {"B": 256, "H": 16, "K": 128, "V": 128}),
    },
    dtypes=("float32", "bfloat16"),
    # per head: decay K*V, S^T k 2KV, update 2KV, readout 2KV; ~10 per V element (delta, norm, gate) and
    # ~6 per K element (two L2 norms, decay exp)
    flops=lambda s: s["B"] * s["H"] * (7 * s["K"] * s["V"] + 10 * s["V"] + 6 * s["K"]),
    # the FP32 state read and written once; q, k, v, gate and out in the activation dtype; g and beta FP32;
    # norm_weight once. (vtiled re-reads the state V/BLOCK_V times more: that is its cost, not the problem's.)
    bytes=lambda s, itemsize: s["B"] * s["H"] * (8 * s["K"] * s["V"] + itemsize * (2 * s["K"] + 3 * s["V"])
                                                 + 4 * s["K"] + 4) + itemsize * s["V"],
    tolerances={
        # FP32 throughout: sums over K (S^T k, S^T q) and V (the norm), error ~sqrt(K)*2^-24 per element.
        "float32": Tolerance(rel_l2=1e-5, why="fp32 state update and readout, sums of K and V terms (~sqrt(K)*2^-24)"),
        # bf16 inputs are exact in the float64 reference; the output's one bf16 rounding (2^-9 rms) dominates,
        # the FP32 state is as accurate as in the float32 case.
        "bfloat16": Tolerance(rel_l2=1e-2, why="fp32 compute, one bf16 rounding of the output (2^-8)"),
    },
    # Heads are independent (tensor parallelism shards heads): split H, concatenate both outputs along H.
    partition=Partition(args={name: 1 for name in _HEAD_ARGS}, num_parts=2, combine="concat", out_dim=1),
    forbidden_ops=("aten::einsum", "aten::bmm", "aten::mm", "aten::matmul", "aten::mul", "aten::exp",
                   "aten::sigmoid", "aten::silu", "aten::rsqrt", "aten::rms_norm"),
    extra={"l2_eps": 1e-6, "norm_eps": 1e-6, "outputs": ["out [B, H, V]", "new_state [B, H, K, V] float32"]},
)
