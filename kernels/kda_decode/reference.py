"""One decode step of gated delta-rule linear attention (KDA), in plain torch.

Run in float64 by check_numerics; returns the step's output in the activations' dtype
and the new recurrent state in the state's dtype (float32), like the implementations.
"""

import torch

L2_EPS = 1e-6  # q and k are L2-normalised per head, as FLA's use_qk_l2norm_in_kernel
NORM_EPS = 1e-6  # the output RMSNorm over V


def kda_decode(q, k, v, g, beta, state, norm_weight, gate):
    # q, k, g [B, H, K]; v, gate [B, H, V]; beta [B, H]; state [B, H, K, V]; norm_weight [V]
    # -> out [B, H, V] (q's dtype), new_state [B, H, K, V] (state's dtype)
    out_dtype, dim_k = q.dtype, q.shape[-1]
    wide = torch.promote_types(q.dtype, state.dtype)  # FP32 (or float64) math, as the kernels
    q, k, v, g, beta, norm_weight, gate = (t.to(wide) for t in (q, k, v, g, beta, norm_weight, gate))
    q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + L2_EPS) * dim_k ** -0.5
    k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + L2_EPS)
    s = state.to(wide) * torch.exp(g)[..., None]  # per-channel decay of the state's K rows
    v_new = v - torch.einsum("bhkv,bhk->bhv", s, k)  # delta rule: what the state mispredicts for k
    s = s + beta[..., None, None] * k[..., :, None] * v_new[..., None, :]
    o = torch.einsum("bhkv,bhk->bhv", s, q)
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + NORM_EPS) * norm_weight
    out = o * gate * torch.sigmoid(gate)  # SiLU output gate
    return out.to(out_dtype), s.to(state.dtype)
