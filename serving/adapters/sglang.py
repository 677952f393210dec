"""SGLang's server, on an interpreter of its own (`[engines.sglang] python` in infra-agent.toml,
or the `sglang` on PATH). A GPU build: PyPI's SGLang has no CPU path (its CPU ops need a
source build of sgl-kernel), so this adapter is tested by the argv and payloads it builds,
never started on a CPU host."""

from __future__ import annotations

from .base import OPENAI_SERVER_FLAGS, EngineAdapter, EngineArgs, Flag, supported_by


def chunked_prefill_off(flag: str, enabled: bool | None) -> list[str]:
    """SGLang has no on/off switch: chunking is on by default and a size of -1 turns it off."""
    return [flag, "-1"] if enabled is False else []


class SglangAdapter(EngineAdapter):
    name = "sglang"
    extensions = frozenset({"ignore_eos", "min_tokens", "repetition_penalty", "top_k"})
    profile_paths = ("/start_profile", "/stop_profile")
    package = "sglang"
    shared_memory = True
    own_ports = True
    needs_model = True
    flags = (
        *OPENAI_SERVER_FLAGS,
        Flag("max_num_seqs", "--max-running-requests"),
        Flag("max_num_batched_tokens", "--max-prefill-tokens"),
        Flag("max_model_len", "--context-length"),
        Flag("enable_chunked_prefill", "--chunked-prefill-size", chunked_prefill_off),
    )
    supported = supported_by(flags, "tensor_parallel_size")

    def _head(self, args: EngineArgs, *, model, port, python):
        return [
            python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tp-size",
            str(args.tensor_parallel_size),
            "--enable-metrics",
        ]

    def env(self, args: EngineArgs, *, memory_bytes: int) -> dict[str, str]:
        return {"SGLANG_TORCH_PROFILER_DIR": "profiles"}
