import triton
import triton.language as tl


@triton.jit
def helper(x):
    return tl.dot(x, x)


@triton.jit
def nested_kernel(x_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, helper(x))
