"""vLLM's OpenAI server. A GPU build that cannot be installed on a CPU host: this adapter
is tested by the argv and payloads it builds, never started here."""

from __future__ import annotations

from .base import EngineAdapter, EngineArgs, bool_flag, flag_if


class VllmAdapter(EngineAdapter):
    name = "vllm"
    extensions = frozenset({"ignore_eos", "min_tokens", "repetition_penalty", "top_k",
                            "stream_options.continuous_usage_stats"})
    continuous_usage = True
    profile_paths = ("/start_profile", "/stop_profile")  # needs VLLM_TORCH_PROFILER_DIR (set in env)
    supported = EngineAdapter.supported | {"tensor_parallel_size", "quantization", "kv_cache_dtype",
                                           "enable_chunked_prefill", "max_num_seqs", "max_num_batched_tokens",
                                           "max_model_len"}
    installable_here = False
    needs_model = True


    def _argv(self, args: EngineArgs, *, model, port, python):
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1",
                "--port", str(port), "--tensor-parallel-size", str(args.tensor_parallel_size)]
        argv += flag_if("--served-model-name", args.served_model_name)
        argv += flag_if("--dtype", args.dtype)
        argv += flag_if("--quantization", args.quantization)
        argv += flag_if("--kv-cache-dtype", args.kv_cache_dtype)
        argv += flag_if("--max-num-seqs", args.max_num_seqs)
        argv += flag_if("--max-num-batched-tokens", args.max_num_batched_tokens)
        argv += flag_if("--max-model-len", args.max_model_len)
        argv += bool_flag("--enable-chunked-prefill", args.enable_chunked_prefill)
        return argv

    def env(self, args: EngineArgs) -> dict[str, str]:
        return {"VLLM_TORCH_PROFILER_DIR": "profiles", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
