"""The engine's hot ops, taken from the workspace's kernel specs.

Each op is one of the workspace's kernels (`kernels/<op>/spec.py`): `impl` "reference"
is the spec's reference, any other name one of its `impls` ("triton", ...). Files are
imported with the sandbox worker's own loader, so the engine runs exactly what
check_numerics and microbench judge. An op whose kernel the workspace lacks, or "torch",
is plain torch written here. `KernelOps.choices` says what each op really runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

ENGINE_OPS = ("rmsnorm", "paged_attention_decode", "kv_quant", "w8a8_gemm")


class KernelOps:
    def __init__(
        self,
        kernels: dict[str, str],
        device: torch.device,
        workspace: str | None,
        rms_norm_eps: float,
    ):
        from infra_agent.kernels.workspace import load_workspace

        unknown = sorted(set(kernels) - set(ENGINE_OPS))
        if unknown:
            raise ValueError(
                f"kernels= names unknown ops {unknown}; the engine's ops are {list(ENGINE_OPS)}"
            )
        self._ws = load_workspace(workspace)
        self._device = device
        self._eps = rms_norm_eps
        self.choices: dict[str, str] = {}  # op -> "kernel:impl" or "torch (why)"
        default = "triton" if device.type == "cuda" else "reference"
        self.rmsnorm = self._resolve(
            "rmsnorm", kernels.get("rmsnorm", default), self._torch_rmsnorm
        )
        self.paged_attention_decode = self._resolve(
            "paged_attention_decode",
            kernels.get("paged_attention_decode", default),
            torch_paged_attention_decode,
        )
        self._kv_quant_impl = kernels.get("kv_quant", default)
        self._w8a8_impl = kernels.get("w8a8_gemm", default)
        self._quantize_rows = None

    def enable_w8a8(self) -> None:
        """quantization=w8a8: the zoo's w8a8_gemm for the linears; activations quantised per
        token with kv_quant's quantize_int8 (the same per-row int8 rule), else plain torch."""
        self.w8a8_gemm = self._resolve("w8a8_gemm", self._w8a8_impl, torch_w8a8_gemm)
        if "kv_quant" in self._ws.kernels:
            self._quantize_rows = self.kv_quantizer("int8")[0]
            del self.choices["kv_quant"]  # that entry names the KV cache's quantiser
            self.choices["activation_quant"] = f"kv_quant:{self._kv_quant_impl} (int8 per token)"
        else:
            self.choices["activation_quant"] = "torch (the workspace has no kv_quant kernel)"

    def quantize_activations(self, x):  # [T, K] -> (int8 [T, K], fp32 [T])
        if self._quantize_rows is None:
            scale = x.float().abs().amax(dim=1) / 127.0
            safe = torch.where(scale > 0, scale, torch.ones_like(scale))
            return torch.round(x.float() / safe[:, None]).clamp(-127, 127).to(torch.int8), scale
        codes, scale = self._quantize_rows(x[:, None, :])
        return codes[:, 0, :], scale[:, 0]

    def kv_quantizer(self, kind: str):
        """(quantize, dequantize) for an "int8" or "fp8" cache: the zoo's kv_quant entries
        quantize_<kind> and dequantize_<kind>, from the chosen impl's file."""
        kernel = self._ws.kernels.get("kv_quant")
        if kernel is None:
            raise ValueError(
                f"kv_cache_dtype={kind} needs the workspace's kv_quant kernel, which it lacks; "
                "use kv_cache_dtype=auto"
            )
        impl = self._kv_quant_impl
        refs = {"reference": kernel.spec.reference, **kernel.spec.impls}
        if impl not in refs:
            raise ValueError(f"kernel 'kv_quant' has no impl {impl!r}; it has {sorted(refs)}")
        file = refs[impl].split(":", 1)[0]
        fns = tuple(
            _load(
                kernel,
                f"{file}:{name}_{kind}",
                f"infra_agent_engine_kv_quant_{impl}",
                interpret=self._device.type != "cuda",
            )
            for name in ("quantize", "dequantize")
        )
        self.choices["kv_quant"] = f"kv_quant:{impl} ({kind})"
        return fns

    def _resolve(self, op: str, impl: str, torch_fn):
        if impl == "torch":
            self.choices[op] = "torch (asked for)"
            return torch_fn
        kernel = self._ws.kernels.get(op)
        if kernel is None:
            self.choices[op] = f"torch (the workspace has no {op} kernel yet)"
            return torch_fn
        if op == "rmsnorm" and abs(kernel.spec.extra.get("eps", self._eps) - self._eps) > 0:
            self.choices[op] = (
                f"torch (the kernel's eps {kernel.spec.extra['eps']} != the model's {self._eps})"
            )
            return torch_fn
        refs = {"reference": kernel.spec.reference, **kernel.spec.impls}
        if impl not in refs:
            raise ValueError(
                f"kernel {op!r} has no impl {impl!r}; it has {sorted(refs)} (or 'torch')"
            )
        fn = _load(
            kernel,
            refs[impl],
            f"infra_agent_engine_{op}_{impl}",
            interpret=self._device.type != "cuda",
        )
        self.choices[op] = f"{op}:{impl}"
        return _rows_2d(fn) if op == "rmsnorm" else fn

    def _torch_rmsnorm(self, x, weight):  # [M, N], [N] -> [M, N]; fp32 math as Hugging Face does it
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self._eps)).to(x.dtype) * weight


def _load(kernel, ref: str, module_name: str, interpret: bool):
    """Import a spec's "file.py:fn" with the worker's loader (Triton interpreted off CUDA)."""
    from infra_agent.sandbox.worker.loader import LoadError, ensure_triton_interpreter, import_file

    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # @triton.jit reads it at decoration time
        ensure_triton_interpreter()
    file, entry = kernel.entry_of(ref)
    module = import_file(Path(file), module_name)  # the loader keeps each kernel's siblings apart
    fn = getattr(module, entry, None)
    if not callable(fn):
        raise LoadError(f"{file} has no function {entry!r}")
    return fn


def _rows_2d(fn):
    """The rmsnorm kernels take [M, N] contiguous rows."""

    def rmsnorm(x, weight):
        return fn(x.contiguous(), weight)

    return rmsnorm


def torch_w8a8_gemm(a, a_scale, w, w_scale):  # int8 [M, K], [M], int8 [N, K], [N] -> [M, N]
    return ((a.float() @ w.float().T) * a_scale[:, None] * w_scale.float()[None, :]).to(
        w_scale.dtype
    )


def torch_paged_attention_decode(q, k_cache, v_cache, block_table, seq_lens):
    """For a workspace without the kernel: the embedded zoo's reference (batched torch; one copy of it)."""
    global _embedded_paged_attention
    if _embedded_paged_attention is None:
        from infra_agent.kernels.workspace import EMBEDDED_ROOT
        from infra_agent.sandbox.worker.loader import import_file

        path = Path(EMBEDDED_ROOT) / "paged_attention_decode" / "reference.py"
        _embedded_paged_attention = import_file(
            path, "infra_agent_engine_paged_attention_ref"
        ).paged_attention_decode
    return _embedded_paged_attention(q, k_cache, v_cache, block_table, seq_lens)


_embedded_paged_attention = None
