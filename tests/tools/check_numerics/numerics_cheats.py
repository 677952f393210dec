"""Adversarial candidates for check_numerics: each fools a naive evaluator one way.

CHEATS maps a name to (kernel, source, the finding code that must name the trick).
Every entry point is `vector_add(x, y)` or `rmsnorm(x, weight)`, as the spec expects.
"""

_TRITON_ADD = """
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
"""

CHEATS = {
    "empty_like": (
        "vector_add",
        "import torch\ndef vector_add(x, y):\n    return torch.empty_like(x)\n",
        "unwritten_output",
    ),
    "zeros": (
        "vector_add",
        "import torch\ndef vector_add(x, y):\n    return torch.zeros_like(x)\n",
        "constant_output",
    ),
    "returns_input": (
        "vector_add",
        "def vector_add(x, y):\n    return x\n",
        "output_aliases_input",
    ),
    "returns_view": (
        "vector_add",
        "def vector_add(x, y):\n    return x.view(-1)[:]\n",
        "output_aliases_input",
    ),
    "cache_by_pointer": (
        "vector_add",
        (
            "_cache = {}\n"
            "def vector_add(x, y):\n"
            "    key = (x.data_ptr(), y.data_ptr())\n"
            "    if key not in _cache:\n"
            "        _cache[key] = x + y\n"
            "    return _cache[key].clone()\n"
        ),
        "result_caching",
    ),
    "cache_by_shape": (
        "vector_add",
        (
            "_cache = {}\n"
            "def vector_add(x, y):\n"
            "    return _cache.setdefault(tuple(x.shape), x + y).clone()\n"
        ),
        "result_caching",
    ),
    "first_k_calls": (
        "vector_add",
        (
            "import torch\n"
            "calls = [0]\n"
            "def vector_add(x, y):\n"
            "    calls[0] += 1\n"
            "    return x + y if calls[0] <= 2 else torch.randn_like(x)\n"
        ),
        "stateful_output",
    ),
    "mutates_input": (
        "vector_add",
        "def vector_add(x, y):\n    out = x + y\n    y.mul_(0.5)\n    return out\n",
        "input_mutation",
    ),
    "lazy_subclass": (
        "vector_add",
        (
            "import torch\n"
            "class Lazy(torch.Tensor):\n"
            "    @classmethod\n"
            "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
            "        args = [a.x + a.y if isinstance(a, Lazy) else a for a in args]\n"
            "        with torch._C.DisableTorchFunctionSubclass():\n"
            "            return func(*args, **(kwargs or {}))\n"
            "def vector_add(x, y):\n"
            "    out = torch.empty_like(x).as_subclass(Lazy)\n"
            "    out.x, out.y = x, y\n"
            "    return out\n"
        ),
        "not_plain_tensor",
    ),
    "patches_allclose": (
        "vector_add",
        (
            "import torch\n"
            "torch.allclose = lambda *a, **k: True\n"
            "torch.testing.assert_close = lambda *a, **k: None\n"
            "def vector_add(x, y):\n"
            "    return x - y\n"
        ),
        "comparison_tampering",
    ),
    "reference_op_in_triton": (
        "vector_add",
        _TRITON_ADD
        + (
            "def vector_add(x, y):\n"
            "    scratch = torch.empty_like(x)\n"
            "    add_kernel[(1,)](x, y, scratch, 16, BLOCK=16)  # a token launch\n"
            "    return torch.add(x, y)\n"
        ),
        "library_ops_in_custom_kernel",
    ),
    "forbidden_op_in_triton": (
        "rmsnorm",
        (
            "import torch\nimport triton\n\n"
            "@triton.jit\ndef unused_kernel(x_ptr):\n    pass\n\n"
            "def rmsnorm(x, weight):\n"
            "    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight\n"
        ),
        "forbidden_op",
    ),
    "lower_precision": (
        "vector_add",
        "def vector_add(x, y):\n    return (x.half() + y.half()).float()\n",
        "lower_precision_than_declared",
    ),
    "try_except_fallback": (
        "vector_add",
        _TRITON_ADD
        + (
            "def vector_add(x, y):\n"
            "    out = torch.empty_like(x)\n"
            "    try:\n"
            "        add_kernel[(1,)](x, y, out, BLOCK=1024)  # missing argument: the launch raises\n"
            "    except Exception:\n"
            "        out = x + y\n"
            "    return out\n"
        ),
        "fallback_to_library",
    ),
}

# Deliberately wrong variants: the verdict fails and the worst index points at the bug.
# The add in float32: the Triton interpreter's bfloat16 arithmetic is wrong (FACTS.md), and its
# garbage bits hit the unwritten sentinel's payload (0x7FDA) 6 times in 60,000 bf16 adds, so a
# written element could read as unwritten in ~6% of runs.
_STORE_ADD = "tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)"
_STORE_ADD_FP32 = (
    "tl.store(out_ptr + offs, (tl.load(x_ptr + offs, mask=mask).to(tl.float32) + "
    "tl.load(y_ptr + offs, mask=mask).to(tl.float32)).to(out_ptr.dtype.element_ty), mask=mask)"
)
OFF_BY_ONE_MASK = _TRITON_ADD.replace("mask = offs < n", "mask = offs < n - 1").replace(
    _STORE_ADD, _STORE_ADD_FP32
) + (
    "def vector_add(x, y):\n"
    "    out = torch.empty_like(x)\n"
    "    n = out.numel()\n"
    "    add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)\n"
    "    return out\n"
)

# Issue 20: honest mistakes the verdict must name for what they are.
_RMSNORM_STORE = "tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)"


def rmsnorm_missing_last_column(triton_source: str) -> str:
    """The zoo's rmsnorm with a store mask one column short in every row: wrong the same way
    whether the rows are split across ranks or not."""
    assert _RMSNORM_STORE in triton_source
    return triton_source.replace(
        _RMSNORM_STORE, _RMSNORM_STORE.replace("mask=mask", "mask=cols < N - 1")
    )


# Element 7 computed as NaN (a constant NaN: the canonical bits the old NaN pre-fill had).
COMPUTES_NAN = _TRITON_ADD.replace(
    "tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)",
    "total = tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)\n"
    "    tl.store(out_ptr + offs, tl.where(offs == 7, float('nan'), total), mask=mask)",
) + (
    "def vector_add(x, y):\n"
    "    out = torch.empty_like(x)\n"
    "    add_kernel[(triton.cdiv(out.numel(), 256),)](x, y, out, out.numel(), BLOCK=256)\n"
    "    return out\n"
)

# Torch only, in a file that imports triton and holds no @triton.jit (no decoy).
TORCH_ONLY_WITH_TRITON_IMPORT = (
    "import torch\nimport triton\n\ndef vector_add(x, y):\n    return torch.add(x, y)\n"
)
TORCH_ONLY = "import torch\n\n\ndef vector_add(x, y):\n    return torch.add(x, y)\n"

# Adds in the storage dtype itself: right on a GPU, wrong for bfloat16 in the CPU interpreter.
NATIVE_DTYPE_ADD = _TRITON_ADD + (
    "def vector_add(x, y):\n"
    "    out = torch.empty_like(x)\n"
    "    add_kernel[(triton.cdiv(out.numel(), 256),)](x, y, out, out.numel(), BLOCK=256)\n"
    "    return out\n"
)

# Compiles for float32 only: the float16 case raises at line 11 (the static_assert), column 5.
FLOAT32_ONLY = """import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.static_assert(x.dtype == tl.float32, "this kernel is float32 only")
    tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vector_add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
"""
