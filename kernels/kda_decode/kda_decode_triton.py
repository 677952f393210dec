"""One KDA decode step per (batch, head), two ways of splitting the work.

Per head: q and k are L2-normalised (q also scaled by K^-1/2), the state S [K, V] decays
by exp(g) per K row, the delta rule writes beta * (v - S^T k) along k, and o = S^T q is
read out; then o is RMS-normalised over V in FP32, scaled by norm_weight and gated by
SiLU(gate). Everything is computed in FP32 (the Triton interpreter's bf16 arithmetic is
wrong, and the state is FP32 anyway); the output is rounded once to the activations'
dtype, the new state is stored in FP32.

- `kda_decode_fused`: one program per head holds the whole [K, V] state, so the row
  statistic of the RMSNorm and the head's prologue (two L2 norms, K decays) run once.
- `kda_decode_vtiled`: one program per (head, BLOCK_V slice of V), for more programs
  at small batch. The RMSNorm needs the whole V row, so every tile first re-reads the
  whole state and recomputes the whole readout to get sum(o^2) (and each tile repeats
  the prologue): the redundant FP32 work of the episode's kernel, (V / BLOCK_V + 1)x
  the readout's FMAs and V / BLOCK_V x the prologue's exp/rsqrt per output element.

Both return (out [B, H, V], new_state [B, H, K, V]); the input state is not modified.
"""

import torch
import triton
import triton.language as tl

L2_EPS = 1e-6
NORM_EPS = 1e-6
VTILE_BLOCK_V = 32


@triton.jit
def _head_prologue(q_ptr, k_ptr, g_ptr, beta_ptr, pid_bh, K, offs_k, mask_k, l2_eps, q_scale):
    """q (normalised, scaled), k (normalised), the decay exp(g) [BLOCK_K] and beta."""
    q = tl.load(q_ptr + pid_bh * K + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + pid_bh * K + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    q = q * (1.0 / tl.sqrt(tl.sum(q * q, axis=0) + l2_eps)) * q_scale
    k = k * (1.0 / tl.sqrt(tl.sum(k * k, axis=0) + l2_eps))
    decay = tl.exp(tl.load(g_ptr + pid_bh * K + offs_k, mask=mask_k, other=0.0))
    beta = tl.load(beta_ptr + pid_bh).to(tl.float32)
    return q, k, decay, beta


@triton.jit
def _step_tile(state_ptr, v_ptr, pid_bh, K, V, offs_k, mask_k, offs_v, mask_v, q, k, decay, beta):
    """New state tile [BLOCK_K, BLOCK_V] and its readout o [BLOCK_V] (before the norm)."""
    mask = mask_k[:, None] & mask_v[None, :]
    s_ptrs = state_ptr + pid_bh * K * V + offs_k[:, None] * V + offs_v[None, :]
    s = tl.load(s_ptrs, mask=mask, other=0.0) * decay[:, None]
    v = tl.load(v_ptr + pid_bh * V + offs_v, mask=mask_v, other=0.0).to(tl.float32)
    u = beta * (v - tl.sum(s * k[:, None], axis=0))  # delta rule: v minus the state's prediction for k
    s = s + k[:, None] * u[None, :]
    return s, tl.sum(s * q[:, None], axis=0)


@triton.jit
def _store_gated(out_ptr, w_ptr, gate_ptr, pid_bh, V, offs_v, mask_v, o, rstd):
    w = tl.load(w_ptr + offs_v, mask=mask_v, other=0.0).to(tl.float32)
    z = tl.load(gate_ptr + pid_bh * V + offs_v, mask=mask_v, other=0.0).to(tl.float32)
    y = o * rstd * w * (z * tl.sigmoid(z))
    tl.store(out_ptr + pid_bh * V + offs_v, y.to(out_ptr.dtype.element_ty), mask=mask_v)


@triton.jit
def kda_decode_fused_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, state_ptr, w_ptr, gate_ptr, out_ptr, new_state_ptr,
    K, V, l2_eps, norm_eps, q_scale,  # q_scale = K^-1/2
    BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,  # BLOCK_V >= V: the whole row
):
    pid_bh = tl.program_id(0)
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.arange(0, BLOCK_V)
    mask_k = offs_k < K
    mask_v = offs_v < V
    q, k, decay, beta = _head_prologue(q_ptr, k_ptr, g_ptr, beta_ptr, pid_bh, K, offs_k, mask_k, l2_eps, q_scale)
    s, o = _step_tile(state_ptr, v_ptr, pid_bh, K, V, offs_k, mask_k, offs_v, mask_v, q, k, decay, beta)
    tl.store(new_state_ptr + pid_bh * K * V + offs_k[:, None] * V + offs_v[None, :], s,
             mask=mask_k[:, None] & mask_v[None, :])
    rstd = 1.0 / tl.sqrt(tl.sum(o * o, axis=0) / V + norm_eps)  # once per head
    _store_gated(out_ptr, w_ptr, gate_ptr, pid_bh, V, offs_v, mask_v, o, rstd)


@triton.jit
def kda_decode_vtiled_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, state_ptr, w_ptr, gate_ptr, out_ptr, new_state_ptr,
    K, V, l2_eps, norm_eps, q_scale,  # q_scale = K^-1/2
    BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,  # one V slice per program
):
    pid_bh = tl.program_id(0)
    pid_v = tl.program_id(1)
    offs_k = tl.arange(0, BLOCK_K)
    mask_k = offs_k < K
    q, k, decay, beta = _head_prologue(q_ptr, k_ptr, g_ptr, beta_ptr, pid_bh, K, offs_k, mask_k, l2_eps, q_scale)
    # The RMSNorm's statistic needs all of o's row: every tile recomputes it over all of V.
    sum_sq = tl.zeros((BLOCK_V,), dtype=tl.float32)
    for v0 in range(0, V, BLOCK_V):
        offs = v0 + tl.arange(0, BLOCK_V)
        _, o_j = _step_tile(state_ptr, v_ptr, pid_bh, K, V, offs_k, mask_k, offs, offs < V, q, k, decay, beta)
        sum_sq += o_j * o_j
    rstd = 1.0 / tl.sqrt(tl.sum(sum_sq, axis=0) / V + norm_eps)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_v = offs_v < V
    s, o = _step_tile(state_ptr, v_ptr, pid_bh, K, V, offs_k, mask_k, offs_v, mask_v, q, k, decay, beta)
    tl.store(new_state_ptr + pid_bh * K * V + offs_k[:, None] * V + offs_v[None, :], s,
             mask=mask_k[:, None] & mask_v[None, :])
    _store_gated(out_ptr, w_ptr, gate_ptr, pid_bh, V, offs_v, mask_v, o, rstd)


def _check(q, k, v, g, beta, state, norm_weight, gate):
    B, H, K = q.shape
    V = v.shape[-1]
    assert k.shape == g.shape == (B, H, K) and v.shape == gate.shape == (B, H, V), \
        "q, k, g [B, H, K]; v, gate [B, H, V]"
    assert beta.shape == (B, H) and state.shape == (B, H, K, V) and norm_weight.shape == (V,), \
        "beta [B, H], state [B, H, K, V], norm_weight [V]"
    assert state.dtype == g.dtype == beta.dtype == torch.float32, "state, g and beta are float32"
    tensors = (q, k, v, g, beta, state, norm_weight, gate)
    assert all(t.is_contiguous() for t in tensors), "contiguous inputs"
    return B, H, K, V


def _launch(kernel, grid, block_v, num_warps, q, k, v, g, beta, state, norm_weight, gate):
    B, H, K, V = _check(q, k, v, g, beta, state, norm_weight, gate)
    out = torch.empty_like(v)
    new_state = torch.empty_like(state)
    kernel[grid](q, k, v, g, beta, state, norm_weight, gate, out, new_state, K, V, L2_EPS, NORM_EPS, K ** -0.5,
                 BLOCK_K=triton.next_power_of_2(K), BLOCK_V=block_v, num_warps=num_warps)
    return out, new_state


def kda_decode_fused(q, k, v, g, beta, state, norm_weight, gate):
    # -> out [B, H, V], new_state [B, H, K, V]
    B, H, K, V = _check(q, k, v, g, beta, state, norm_weight, gate)
    block_v = triton.next_power_of_2(V)
    # 4 warps keep a 128 x 128 state at 128 values per thread (no spills on sm_90a) and the K-vectors'
    # exp/rsqrt in a 1-D layout (8 warps: Triton recomputes exp(g) in the tile's slice layout, 17 EX2 vs 2)
    num_warps = max(4, triton.next_power_of_2(K) * block_v // 4096)
    return _launch(kda_decode_fused_kernel, (B * H,), block_v, num_warps, q, k, v, g, beta, state, norm_weight, gate)


def kda_decode_vtiled(q, k, v, g, beta, state, norm_weight, gate):
    # -> out [B, H, V], new_state [B, H, K, V]
    B, H, K, V = _check(q, k, v, g, beta, state, norm_weight, gate)
    block_v = min(VTILE_BLOCK_V, triton.next_power_of_2(V))
    grid = (B * H, triton.cdiv(V, block_v))
    return _launch(kda_decode_vtiled_kernel, grid, block_v, 4, q, k, v, g, beta, state, norm_weight, gate)
