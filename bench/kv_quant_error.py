"""What a quantised KV cache costs in accuracy: int8 and fp8 e4m3 with one FP32 scale per
(token, head), measured against the bf16 cache they would replace.

Runs the zoo's Triton kernels (kernels/kv_quant; the Triton interpreter on a CPU host),
checks their codes equal the reference quantiser's bit for bit, and prints per data set:
the round-trip error of the cached values (relative L2, and the worst element relative
to its head's amax) and the error it causes in a decode attention output, each next to
what bf16 storage itself costs against fp32. Last, the Triton interpreter's own fp8 cast
against torch's on N(0,1) values (FACTS.md), next to the kernel's bit-level rounding.
Numbers go in kernels/kv_quant/README.md.

    python bench/kv_quant_error.py
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported; a GPU host may unset it

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from infra_agent.kernels.workspace import EMBEDDED_ROOT  # noqa: E402

T, H, D = 1024, 8, 128  # tokens of one layer's cache, KV heads, head dim
NUM_QUERIES = 32  # decode queries attending to the whole cache, per KV head


def load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, EMBEDDED_ROOT / "kv_quant" / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def datasets(gen: torch.Generator) -> dict[str, torch.Tensor]:
    """fp32 caches [T, H, D]: plain N(0, 1); K-like with a few outlier channels; and tokens
    whose magnitudes span 4 decades (per-token scales must follow them)."""
    normal = torch.randn((T, H, D), generator=gen)
    outliers = normal.clone()
    outliers[..., torch.randperm(D, generator=gen)[:4]] *= 20.0
    spread = normal * torch.logspace(-2, 2, T)[torch.randperm(T, generator=gen)][:, None, None]
    return {"N(0,1)": normal, "4 outlier channels x20": outliers, "token scales 1e-2..1e2": spread}


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Decode attention in float64: q [Q, H, D] over a cache k, v [T, H, D] -> [Q, H, D]."""
    q, k, v = q.double(), k.double(), v.double()
    p = torch.einsum("qhd,thd->hqt", q, k).div(math.sqrt(D)).softmax(-1)
    return torch.einsum("hqt,thd->qhd", p, v)


def measure(kern, ref, x32: torch.Tensor, v32: torch.Tensor, q: torch.Tensor) -> dict[str, tuple]:
    x, v = x32.bfloat16(), v32.bfloat16()  # the bf16 cache a quantised one replaces
    rows = {
        "bf16 vs fp32": (
            rel_l2(x, x32),
            _worst(x, x32),
            rel_l2(attention(q, x, v), attention(q, x32, v32)),
        )
    }
    exact = attention(q, x, v)
    for fmt in ("int8", "fp8"):
        codes, scale = getattr(kern, f"quantize_{fmt}")(x)
        ref_codes, ref_scale = getattr(ref, f"quantize_{fmt}")(x.double())
        assert torch.equal(codes, ref_codes) and torch.equal(scale, ref_scale), (
            f"{fmt} codes differ from the reference"
        )
        x_hat = getattr(kern, f"dequantize_{fmt}")(codes, scale)
        v_hat = getattr(kern, f"dequantize_{fmt}")(*getattr(kern, f"quantize_{fmt}")(v))
        rows[f"{fmt} vs bf16"] = (
            rel_l2(x_hat, x),
            _worst(x_hat, x),
            rel_l2(attention(q, x_hat, v_hat), exact),
        )
    return rows


def _worst(x_hat: torch.Tensor, x: torch.Tensor) -> float:
    """Largest |error| relative to its (token, head)'s amax: the quantiser's step shows here."""
    amax = x.double().abs().amax(-1, keepdim=True).clamp_min(1e-300)
    return float(((x_hat.double() - x.double()).abs() / amax).max())


@triton.jit
def _interpreter_cast_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    y = tl.load(x_ptr + offs, mask=offs < N)
    tl.store(out_ptr + offs, y.to(tl.float8e4nv).to(tl.uint8, bitcast=True), mask=offs < N)


def fp8_cast_comparison(kern, gen: torch.Generator) -> tuple[int, int, int]:
    """(values, differing codes of tl's cast vs torch, differing codes of the kernel's rounding vs torch)."""
    y = torch.randn(1000, generator=gen).clamp(-448, 448)
    want = y.to(torch.float8_e4m3fn).view(torch.uint8)
    cast = torch.empty(1000, dtype=torch.uint8)
    _interpreter_cast_kernel[(1,)](y, cast, 1000, BLOCK=1024)
    # the kernel quantises x / scale; a head whose amax is 448 has scale 1, so its codes are y's own
    x = torch.cat([y, torch.tensor([448.0])]).reshape(1, 1, -1)
    codes, scale = kern.quantize_fp8(x)
    assert float(scale) == 1.0
    return 1000, int((cast != want).sum()), int((codes.flatten()[:1000] != want).sum())


def main() -> None:
    kern, ref = (
        load("kv_quant_triton", "kv_quant_triton.py"),
        load("kv_quant_reference", "reference.py"),
    )
    gen = torch.Generator().manual_seed(0)
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    where = "interpreter" if interpreted else "GPU"
    print(f"cache [T={T}, H={H}, D={D}], {NUM_QUERIES} decode queries, Triton {where}")
    print(
        f"{'data':26} {'cache':14} {'value rel L2':>13} {'worst/amax':>11} {'attn out rel L2':>16}"
    )
    for name, k32 in datasets(gen).items():
        v32 = torch.randn((T, H, D), generator=gen)
        q = torch.randn((NUM_QUERIES, H, D), generator=gen)
        for label, (value_err, worst, attn_err) in measure(kern, ref, k32, v32, q).items():
            print(f"{name:26} {label:14} {value_err:13.2e} {worst:11.2e} {attn_err:16.2e}")
    if interpreted:
        n, cast_bad, kernel_bad = fp8_cast_comparison(kern, gen)
        print(
            f"fp8 e4m3 rounding of {n} N(0,1) values vs torch: tl .to(float8e4nv) under the interpreter "
            f"{cast_bad} differ; the kernel's bit-level rounding {kernel_bad} differ"
        )


if __name__ == "__main__":
    sys.exit(main())
