"""What every engine adapter says: how to start its engine, what its requests may carry,
and where it exposes health, metrics and profiling.

`EngineArgs` are the typed engine arguments an agent passes to `launch_serve`; each
adapter turns them into its engine's command line and refuses what its engine has no
flag for (an error that names the argument), instead of silently dropping it.
"""

from __future__ import annotations

import json
from typing import Any, Callable, ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict, Field


class AdapterError(ValueError):
    """The arguments do not fit this engine; the message says which and what to do."""


class EngineArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(
        None,
        max_length=4096,
        description="Model folder (a local Hugging Face checkpoint: "
        "config.json, *.safetensors, tokenizer.json), relative to the workspace or absolute. "
        "builtin: optional (default: seeded random weights, byte tokenizer).",
    )
    served_model_name: str | None = Field(
        None,
        max_length=200,
        description="The name requests use in 'model' "
        "(default: the engine's own choice, read back from /v1/models).",
    )
    dtype: str | None = Field(
        None,
        max_length=32,
        description="Weights/activations dtype, e.g. 'float32', "
        "'bfloat16' (default: the engine's).",
    )
    tensor_parallel_size: int = Field(
        1, ge=1, le=64, description="GPUs per replica (vllm, sglang)."
    )
    quantization: str | None = Field(
        None,
        max_length=32,
        description="Weight quantisation, e.g. 'w8a8' (builtin), 'fp8' (vllm, sglang).",
    )
    kv_cache_dtype: str | None = Field(
        None,
        max_length=32,
        description="KV-cache dtype, e.g. 'auto', 'int8', 'fp8' (builtin, vllm, sglang).",
    )
    enable_chunked_prefill: bool | None = Field(
        None,
        description="Split long prompts into chunks under the "
        "per-step token budget (default: the engine's).",
    )
    enable_prefix_caching: bool | None = Field(
        None,
        description="Reuse the KV blocks of prompt prefixes already computed (automatic prefix "
        "caching; builtin, vllm; default: the engine's, on for both).",
    )
    max_num_seqs: int | None = Field(
        None, ge=1, le=4096, description="Sequences running at once (max batch)."
    )
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        le=1 << 20,
        description="Token budget of one scheduler step (prefill chunks + decodes), tokens.",
    )
    max_model_len: int | None = Field(
        None, ge=1, le=1 << 22, description="Prompt + output tokens per sequence."
    )
    kernels: dict[str, str] = Field(
        default_factory=dict,
        description="builtin only: which implementation of the "
        "workspace's kernel specs each hot op uses, e.g. {'rmsnorm': 'triton'} "
        "(default: the torch reference on CPU, Triton on CUDA).",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Further command-line "
        "arguments for the engine, one list item per argv word, e.g. "
        "['--prefill-delay-ms', '20'] (builtin) or ['--enforce-eager'] (vllm).",
    )
    command: list[str] = Field(
        default_factory=list,
        max_length=256,
        description="command adapter only: the "
        "server's argv; '{port}' and '{model}' are replaced (it must serve an "
        "OpenAI-compatible API on 127.0.0.1:{port}).",
    )
    health_path: str = Field(
        "/health",
        max_length=200,
        description="command adapter only: the path that answers 200 once the server is ready.",
    )


# How one argument becomes argv words: (flag, value) -> words; a value of None (the engine's
# default) renders as nothing in every style.
Render = Callable[[str, Any], list[str]]


def value_flag(flag: str, value: Any) -> list[str]:
    """--x VALUE."""
    return [] if value is None else [flag, str(value)]


def bool_flag(flag: str, value: bool | None) -> list[str]:
    """--x / --no-x for an optional boolean (argparse BooleanOptionalAction style)."""
    if value is None:
        return []
    return [flag] if value else ["--no-" + flag[2:]]


def json_flag(flag: str, value: dict) -> list[str]:
    """--x '{"k": "v"}' for a non-empty mapping."""
    return [flag, json.dumps(value)] if value else []


class Flag(NamedTuple):
    """One `EngineArgs` field and the engine flag it becomes, rendered in table order after the
    adapter's fixed head (program, model, host, port)."""

    field: str
    flag: str
    render: Render = value_flag


# The flags vLLM's and SGLang's servers spell alike (the rest differ: see each adapter's table).
OPENAI_SERVER_FLAGS = (
    Flag("served_model_name", "--served-model-name"),
    Flag("dtype", "--dtype"),
    Flag("quantization", "--quantization"),
    Flag("kv_cache_dtype", "--kv-cache-dtype"),
)


def supported_by(flags: tuple[Flag, ...], *fixed: str) -> frozenset[str]:
    """What an adapter takes: the common arguments, its flag table's and those its head renders."""
    return EngineAdapter.supported | {f.field for f in flags} | set(fixed)


class EngineAdapter:
    """One engine family. Subclasses set the class fields, `flags` and `_head`."""

    name: ClassVar[str]
    flags: ClassVar[tuple[Flag, ...]] = ()  # the optional arguments, in argv order
    # Request fields outside the OpenAI schema this engine accepts (others are never sent:
    # transformers serve answers 422 to any unknown field).
    extensions: ClassVar[frozenset[str]] = frozenset()
    continuous_usage: ClassVar[bool] = (
        False  # usage in every stream chunk (stream_options.continuous_usage_stats)
    )
    metrics_path: ClassVar[str | None] = (
        "/metrics"  # Prometheus text, vLLM metric names where it has them
    )
    profile_paths: ClassVar[tuple[str, str] | None] = None  # (start, stop), POST
    # How profile(handle=) reads its window (tools/profile/engine_window.py): "window" (the
    # built-in engine's own recorder), "torch_traces" (torch.profiler traces in profiles/)
    profile_kind: ClassVar[str | None] = None
    supported: ClassVar[frozenset[str]] = frozenset(
        {"model", "served_model_name", "dtype", "extra_args"}
    )
    needs_model: ClassVar[bool] = (
        False  # True: the engine has no model of its own without a checkpoint folder
    )
    # An engine with an install of its own (vLLM, SGLang pin their own torch): the package its
    # interpreter must hold and the console script whose Python is the default one. None: the
    # engine runs on this server's Python (builtin, transformers, command).
    package: ClassVar[str | None] = None
    # What its sandbox grants beyond a job's (sandbox/service_spec.py): a private /dev/shm, and
    # loopback ports it picks itself for its internal sockets.
    shared_memory: ClassVar[bool] = False
    own_ports: ClassVar[bool] = False
    # Host folders it reads, shown read-only at their paths where the host has them (vLLM's CPU
    # backend reads the CPU and NUMA topology through lscpu and libnuma).
    host_folders: ClassVar[tuple[str, ...]] = ()

    @property
    def health_path(self) -> str:
        return "/health"

    def check(self, args: EngineArgs) -> None:
        """Refuse arguments this engine has no flag for."""
        defaults = EngineArgs()
        given = {k for k in EngineArgs.model_fields if getattr(args, k) != getattr(defaults, k)}
        unsupported = sorted(given - self.supported)
        if unsupported:
            raise AdapterError(
                f"the {self.name} engine takes no {', '.join(unsupported)}; it takes "
                f"{', '.join(sorted(self.supported))}"
            )
        self._check(args)

    def _check(self, args: EngineArgs) -> None:
        if self.needs_model and not args.model:
            raise AdapterError(
                f"the {self.name} engine needs model= a local checkpoint folder in the workspace"
            )

    def argv(self, args: EngineArgs, *, model: str | None, port: int, python: str) -> list[str]:
        """The engine's command line; `model` is the model folder as the engine sees it."""
        head = self._head(args, model=model, port=port, python=python)
        tail = [word for f in self.flags for word in f.render(f.flag, getattr(args, f.field))]
        return [*head, *tail, *args.extra_args]

    def _head(self, args: EngineArgs, *, model: str | None, port: int, python: str) -> list[str]:
        """The words every launch has: program, model, host, port and fixed settings."""
        raise NotImplementedError

    def env(self, args: EngineArgs, *, memory_bytes: int) -> dict[str, str]:
        """Environment for the engine; `memory_bytes` is its cgroup's memory ceiling."""
        return {}

    def request_extras(self, *, ignore_eos: bool) -> dict:
        """Fields to add to every benchmark request (only those the engine accepts)."""
        return {"ignore_eos": True} if ignore_eos and "ignore_eos" in self.extensions else {}
