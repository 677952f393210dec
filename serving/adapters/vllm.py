"""vLLM's OpenAI server. A GPU build that cannot be installed on a CPU host: this adapter
is tested by the argv and payloads it builds, never started here."""

from __future__ import annotations

from .base import OPENAI_SERVER_FLAGS, EngineAdapter, EngineArgs, Flag, bool_flag, supported_by


class VllmAdapter(EngineAdapter):
    name = "vllm"
    extensions = frozenset(
        {
            "ignore_eos",
            "min_tokens",
            "repetition_penalty",
            "top_k",
            "stream_options.continuous_usage_stats",
        }
    )
    continuous_usage = True
    profile_paths = (
        "/start_profile",
        "/stop_profile",
    )  # needs VLLM_TORCH_PROFILER_DIR (set in env)
    installable_here = False
    needs_model = True
    flags = (
        *OPENAI_SERVER_FLAGS,
        Flag("max_num_seqs", "--max-num-seqs"),
        Flag("max_num_batched_tokens", "--max-num-batched-tokens"),
        Flag("max_model_len", "--max-model-len"),
        Flag("enable_chunked_prefill", "--enable-chunked-prefill", bool_flag),
    )
    supported = supported_by(flags, "tensor_parallel_size")

    def _head(self, args: EngineArgs, *, model, port, python):
        return [
            python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tensor-parallel-size",
            str(args.tensor_parallel_size),
        ]

    def env(self, args: EngineArgs) -> dict[str, str]:
        return {
            "VLLM_TORCH_PROFILER_DIR": "profiles",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
