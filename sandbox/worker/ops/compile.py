"""Compile one Triton kernel ahead of time for a named GPU target; no GPU needed.

Payload::

    {"source": "...python..." | None, "path": "/ws/rmsnorm/rmsnorm_triton.py" | None,
     "file_name": "rmsnorm/rmsnorm_triton.py",     # how errors name the file
     "entry": "rmsnorm_kernel" | None,             # the @triton.jit function
     "target": {"name": "sm_90a", "backend": "cuda", "arch": 90, "warp_size": 32},
     "signature": {"x_ptr": "*fp32", "N": "i32", "BLOCK": "constexpr"} | None,
     "constexprs": {"BLOCK": 1024} | None,
     "launch": {"launcher": "rmsnorm", "args": [Arg dicts], "shape": {"M": 1, "N": 4096},
                "dtype": "float32"} | None,        # infer the signature from a launch
     "options": {"num_warps": 4 | None, "num_stages": 3 | None},
     "launch_config": {"BLOCK_N": 256, "num_warps": 8} | None}  # launch_config.py; the
                                                   # explicit constexprs/options win over it

Returns raw compiler facts, never a judgement: {"status": "ok", "kernel": {...},
"ptxas_log", "resource_usage" (cuobjdump), "files": [...], "launch": {"grid", "scalar_args",
"outputs"} (with a launcher only)} or {"status":
"source_error" | "compile_error" | "setup_error", "diagnostic": {...}}. IR files go to
out_dir as kernel.{ttir,ttgir,llir,ptx,cubin,sass,amdgcn,hsaco}.

Signature inference runs the launcher (the impl's Python wrapper) on example tensors
with the entry's launch intercepted, then lets Triton's own binder specialise the
captured arguments for the target. The result is the signature, constexprs and
divisibility attributes a real launch on that GPU would compile with. The tensors are
uninitialised CPU tensors: their pages are never touched, so even large shapes cost
no memory, and they are 64-byte aligned like GPU allocations (meta tensors would do
too, but their first use imports sympy: seconds per job).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import time
import warnings
from pathlib import Path

from ..context import JobContext
from ..launch_config import LAUNCH_OPTIONS, LaunchConfigError, Overrides, kernel_params
from ..loader import ensure_triton_compiler, import_file
from .compile_diag import (
    captured_stderr_fd,
    compile_error_diagnostic,
    import_error_diagnostic,
    mlir_diagnostic,
)

TOOL_TIMEOUT_S = 60


class _Captured(BaseException):
    """Raised from the intercepted launch; BaseException so a launcher's `except
    Exception` cannot swallow it."""


class SetupError(Exception):
    """The request cannot be compiled as asked (no entry, bad signature); says why."""


def run(payload: dict, ctx: JobContext) -> dict:
    with warnings.catch_warnings():  # Triton's deprecation notices are not the agent's problem
        warnings.simplefilter("ignore")
        return _run(payload, ctx)


def _run(payload: dict, ctx: JobContext) -> dict:
    # Compile for real: the interpreter turns @triton.jit into a Python function. The
    # Triton cache goes to the job folder so nothing is shared between jobs.
    os.environ.pop("TRITON_INTERPRET", None)
    ensure_triton_compiler()  # the helpers too, should this process have interpreted kernels before
    os.environ["TRITON_CACHE_DIR"] = str(ctx.job_dir / "triton-cache")
    os.environ["TRITON_HOME"] = str(ctx.job_dir)
    file = _source_file(payload, ctx)
    file_name = payload.get("file_name") or file.name
    text = file.read_text()
    try:
        module = import_file(file, "candidate_kernel")
    except (Exception, SystemExit) as exc:  # agent code at import time: syntax error, bad import
        return {
            "status": "source_error",
            "diagnostic": import_error_diagnostic(exc, file, file_name, text),
        }
    try:
        fn, signature, constexprs, attrs, options, launch = _plan(module, payload)
    except SetupError as exc:
        return {"status": "setup_error", "diagnostic": {"message": str(exc), "file": file_name}}
    except Exception as exc:  # the launcher itself failed before it launched
        diag = import_error_diagnostic(exc, file, file_name, text)
        launcher = (payload.get("launch") or {}).get("launcher")
        diag["message"] = (
            f"running launcher {launcher!r} on example tensors to infer the signature failed "
            f"(give signature= and constexprs= instead): {diag['message']}"
        )
        return {"status": "setup_error", "diagnostic": diag}
    result = _compile(
        fn, signature, constexprs, attrs, options, payload, ctx, file, file_name, text
    )
    if launch is not None and result["status"] == "ok":
        result["launch_config_applied"] = launch.pop("launch_config_applied")
        result["launch"] = launch
    return result


def _source_file(payload: dict, ctx: JobContext) -> Path:
    if payload.get("source") is not None:
        file = ctx.job_dir / "candidate.py"
        file.write_text(payload["source"])
        return file
    return Path(payload["path"])


def _jit_functions(module) -> list:
    """The module's own @triton.jit functions (autotune/heuristics unwrapped), in file order."""
    from triton.runtime.jit import JITFunction

    found = {}
    for value in vars(module).values():
        inner = value
        while not isinstance(inner, JITFunction) and hasattr(inner, "fn"):
            inner = inner.fn
        if isinstance(inner, JITFunction) and inner.fn.__module__ == module.__name__:
            found[id(inner)] = inner
    return sorted(found.values(), key=lambda f: f.fn.__code__.co_firstlineno)


def _plan(module, payload: dict):
    """(JITFunction, signature, constexprs, attrs, options dict) for triton.compile."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    t = payload["target"]
    backend = make_backend(GPUTarget(t["backend"], t["arch"], t["warp_size"]))
    kernels = _jit_functions(module)
    if not kernels:
        raise SetupError(
            "the file defines no @triton.jit function; decorate the kernel with @triton.jit"
        )
    names = [k.__name__ for k in kernels]
    entry = payload.get("entry")
    if (
        entry is not None
        and entry not in names
        and payload.get("launch")
        and callable(getattr(module, entry, None))
    ):
        payload = {
            **payload,
            "launch": {**payload["launch"], "launcher": entry},
        }  # a wrapper, named as entry
        entry = None
    if entry is not None and entry not in names:
        raise SetupError(
            f"no @triton.jit function {entry!r} in the file; it defines: {', '.join(names)}"
        )
    opts = {k: v for k, v in (payload.get("options") or {}).items() if v is not None}

    # an explicit constexprs=/num_warps=/num_stages= wins over the same name in launch_config
    config = {
        k: v
        for k, v in (payload.get("launch_config") or {}).items()
        if k not in (payload.get("constexprs") or {}) and k not in opts
    }
    if payload.get("launch"):
        fn, args, kwargs, launch = _capture_launch(
            module, kernels, entry, payload["launch"], config
        )
        overrides = {
            k: v for k, v in (payload.get("constexprs") or {}).items() if k in fn.arg_names
        }
        kwargs = {**kwargs, **overrides, **opts}
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        bound, specialization, launch_opts = binder(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(
            backend, kwargs, bound, specialization, launch_opts
        )
        options = {k: v for k, v in options.__dict__.items() if k in kwargs or k in opts}
        return fn, signature, constexprs, attrs, options, launch

    signature = dict(payload.get("signature") or {})
    if not signature:
        raise SetupError(
            'give signature= (e.g. {"x_ptr": "*fp32", "N": "i32"}) or a kernel spec to infer it '
            "from"
        )
    fn = (
        next((k for k in kernels if k.__name__ == entry), None)
        if entry
        else next(
            (
                k
                for k in kernels
                if set(k.arg_names) == set(signature) | set(payload.get("constexprs") or {})
            ),
            kernels[0],
        )
    )
    constexprs = dict(payload.get("constexprs") or {})
    if config:  # no launcher: the config's constexprs and options go to this kernel directly
        rest = Overrides.of(_no_entry, config)
        _, kernel_constexprs = kernel_params(fn)
        constexprs = {**{k: v for k, v in config.items() if k in kernel_constexprs}, **constexprs}
        opts = {**{k: v for k, v in config.items() if k in LAUNCH_OPTIONS}, **opts}
        rest.overridden[fn.__name__] = {
            k for k in config if k in kernel_constexprs or k in LAUNCH_OPTIONS
        }
        rest.constexprs_seen[fn.__name__] = kernel_constexprs
        _check_config(rest)
    for p in fn.params:
        if p.is_constexpr:
            signature.setdefault(p.name, "constexpr")
            if p.name not in constexprs and p.has_default:
                constexprs[p.name] = p.default
    missing = [n for n in fn.arg_names if n not in signature]
    unknown = [n for n in list(signature) + list(constexprs) if n not in fn.arg_names]
    if missing or unknown:
        raise SetupError(
            f"signature does not match {fn.__name__}({', '.join(fn.arg_names)}): "
            f"missing {missing or 'nothing'}, unknown {unknown or 'nothing'}"
        )
    missing_ce = [n for n, ty in signature.items() if ty == "constexpr" and n not in constexprs]
    if missing_ce:
        raise SetupError(
            f"constexpr parameters need values in constexprs=: {', '.join(missing_ce)}"
        )
    # A JIT launch with torch tensors specialises every pointer as 16-byte aligned
    # (torch allocations are); assume the same so loads vectorise as they would.
    attrs = {
        (i,): backend.parse_attr("D")
        for i, n in enumerate(fn.arg_names)
        if signature[n].startswith("*")
    }
    return fn, signature, constexprs, attrs, opts, None


def _capture_launch(module, kernels: list, entry: str | None, launch: dict, config: dict):
    """Run the launcher on untouched CPU tensors; intercept the entry's launch, skip the others.
    `config` (launch_config.py) goes to the launcher's parameters and the launches it makes."""
    import torch

    from ..tensors import dtype_of

    launcher = getattr(module, launch["launcher"] or "", None)
    if not callable(launcher):
        raise SetupError(
            f"no launcher function {launch['launcher']!r} in the file; name the wrapper that "
            "launches the kernel, or give signature= and constexprs= explicitly"
        )
    captured: dict = {}
    overrides = Overrides.of(launcher, config)

    def interceptor(fn):
        def run(*args, grid, warmup, **kwargs):
            args, kwargs = overrides.rewrite(fn, args, kwargs)
            if entry is None or fn.__name__ == entry:
                captured.update(fn=fn, args=args, kwargs=kwargs, grid=grid)
                raise _Captured()
            return None  # another kernel of the same launcher: not the one asked for

        return run

    def autotuned(tuner):
        # @triton.autotune benchmarks every config on a GPU before launching; compile
        # its first config instead (constexprs= / num_warps= override it).
        def run(*args, **kwargs):
            inner = tuner.fn
            while not hasattr(inner, "arg_names") or hasattr(inner, "configs"):
                inner = inner.fn
            return inner.run(*args, **{**kwargs, **tuner.configs[0].all_kwargs()})

        return run

    for fn in kernels:
        fn.run = interceptor(fn)
    tuners = [v for v in vars(module).values() if hasattr(v, "configs") and hasattr(v, "fn")]
    for tuner in tuners:
        tuner.run = autotuned(tuner)
    tensors = [
        torch.empty(
            tuple(d if isinstance(d, int) else launch["shape"][d] for d in a["shape"]),
            dtype=dtype_of(a.get("dtype") or launch["dtype"]),
            device="cpu",
        )
        for a in launch["args"]
    ]
    try:
        launcher(*tensors, **overrides.entry_kwargs)
    except _Captured:
        _check_config(overrides)
        fn, args, kwargs = captured["fn"], captured["args"], captured["kwargs"]
        facts = _launch_facts(fn, args, kwargs, captured["grid"], tensors)
        return fn, args, kwargs, {**facts, "launch_config_applied": overrides.applied()}
    finally:
        for obj in (*kernels, *tuners):
            obj.__dict__.pop("run", None)
    raise SetupError(
        f"{launch['launcher']} returned without launching "
        f"{entry or 'any @triton.jit kernel of this file'}; give signature= explicitly"
    )


def _check_config(overrides: Overrides) -> None:
    try:
        overrides.check()
    except LaunchConfigError as exc:
        raise SetupError(str(exc)) from None


def _no_entry() -> None:
    """The entry of a compile without a launcher: it takes no config name."""


def _launch_facts(fn, args, kwargs, grid, inputs: list) -> dict:
    """What the launch looked like: its grid (programs), its integer scalar arguments (loop bounds
    such as V), and the tensors it writes that the launcher allocated (outputs, by parameter
    name, in elements). An output is a tensor argument sharing no storage with an input."""
    import torch

    named = {**dict(zip(fn.arg_names, args)), **kwargs}
    try:
        if callable(
            grid
        ):  # Triton calls a grid function with the bound arguments, constexprs included
            grid = grid(named)
        grid = [int(g) for g in (tuple(grid) if isinstance(grid, (tuple, list)) else (grid,))]
    except Exception:  # noqa: BLE001 - agent code; no grid means no per-output estimate, said there
        grid = None
    input_storages = {t.untyped_storage().data_ptr() for t in inputs}
    outputs = {
        name: v.numel()
        for name, v in named.items()
        if isinstance(v, torch.Tensor) and v.untyped_storage().data_ptr() not in input_storages
    }
    runtime = {p.name for p in fn.params if not p.is_constexpr}  # constexprs are reported as such
    scalars = {
        name: v
        for name, v in named.items()
        if isinstance(v, int) and not isinstance(v, bool) and name in runtime
    }
    return {
        "grid": None if grid is None else (grid + [1, 1, 1])[:3],
        "scalar_args": scalars,
        "outputs": outputs,
    }


def _compile(
    fn, signature, constexprs, attrs, options, payload, ctx, file, file_name, text
) -> dict:
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.errors import CompilationError

    t = payload["target"]
    target = GPUTarget(t["backend"], t["arch"], t["warp_size"])
    log = io.StringIO()
    started = time.perf_counter()
    # ptxas -v (registers, spills) is printed, not returned: capture it. A Triton cache
    # hit would skip ptxas and its report, so always compile.
    with knobs.nvidia.scope(), knobs.compilation.scope():
        knobs.nvidia.dump_ptxas_log = True
        knobs.compilation.always_compile = True
        with captured_stderr_fd() as native_stderr:
            try:
                with contextlib.redirect_stdout(log):
                    kernel = triton.compile(
                        ASTSource(fn, signature, constexprs, attrs), target=target, options=options
                    )
            except CompilationError as exc:
                return {
                    "status": "compile_error",
                    "diagnostic": compile_error_diagnostic(exc, file, file_name, text),
                }
            except (
                Exception
            ) as exc:  # MLIR/LLVM/ptxas failures: their words are on stderr / in the log
                diag = mlir_diagnostic(native_stderr(), exc, file, file_name, text)
                diag["compiler_output"] = log.getvalue()[-4000:]
                return {"status": "compile_error", "diagnostic": diag}
    compile_s = time.perf_counter() - started

    files = []
    for ext, data in kernel.asm.items():
        if ext == "source":
            continue
        path = ctx.out_dir / f"kernel.{ext}"
        path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)
        files.append(path.name)
    md = kernel.metadata
    result = {
        "status": "ok",
        "compile_s": compile_s,
        "triton_version": triton.__version__,
        "kernel": {
            "name": md.name,
            "num_warps": md.num_warps,
            "num_stages": getattr(md, "num_stages", None),
            "warp_size": md.warp_size,
            "shared_dynamic_bytes": md.shared,
            "tmem_bytes": getattr(md, "tmem_size", 0),
            "signature": signature,
            "constexprs": {
                fn.arg_names[k[0]] if isinstance(k, tuple) else k: _jsonable(v)
                for k, v in constexprs.items()
            },
        },
        "ptxas_log": log.getvalue()[-20000:],
        "files": files,
    }
    if "cubin" in kernel.asm:
        result.update(inspect_cubin(ctx.out_dir / "kernel.cubin", ctx.out_dir / "kernel.sass"))
        files.append("kernel.sass")
    return result


def nvidia_tool(name: str) -> str:
    """cuobjdump / nvdisasm / ptxas as shipped in the Triton wheel: no CUDA install needed."""
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def inspect_cubin(cubin: Path, sass_out: Path) -> dict:
    """cuobjdump's resource usage (text) and nvdisasm's SASS (written to sass_out)."""
    usage = subprocess.run(
        [nvidia_tool("cuobjdump"), "--dump-resource-usage", str(cubin)],
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
    )
    # -g: each instruction's source line (Triton compiles with line info), which ties a SASS loop
    # to the `for` statement whose trip count the TTIR gives
    sass = subprocess.run(
        [nvidia_tool("nvdisasm"), "-c", "-g", str(cubin)],
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
    )
    sass_out.write_text(sass.stdout if sass.returncode == 0 else f"nvdisasm failed: {sass.stderr}")
    return {"resource_usage": usage.stdout + usage.stderr}


def _jsonable(value):
    return value if isinstance(value, (int, float, bool, str, type(None))) else str(value)
