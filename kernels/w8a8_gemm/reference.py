

def w8a8_gemm(a, a_scale, w, w_scale):
    """a int8 [M, K], a_scale [M] float32, w int8 [N, K], w_scale [N] -> out [M, N] in w_scale's dtype:
    (a @ w^T) * a_scale[:, None] * w_scale[None, :]. Integer products are exact in float64 (|acc| < 2^53)."""
    acc = a.double() @ w.double().T
    return (acc * a_scale.double()[:, None] * w_scale.double()[None, :]).to(w_scale.dtype)
