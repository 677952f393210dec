import triton
import triton.language as tl


@triton.jit
def spill_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    # With num_warps=1 and BLOCK=4096 each thread holds 128 values of x and 128 of its
    # prefix sum, both live at the store: more than 255 registers, so ptxas spills.
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < N, other=0.0)
    total = tl.sum(x, axis=0)
    prefix = tl.cumsum(x, axis=0)
    tl.store(out_ptr + offs, x * total + prefix, mask=offs < N)
