import triton
import triton.language as tl


# A dot product of two 1-D blocks: tl.dot needs 2-D operands.
@triton.jit
def bad_dot_kernel(x_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < N, other=0.0)

    y = tl.dot(x, x)
    tl.store(x_ptr + offs, y, mask=offs < N)
