"""SGLang's server. A GPU build that cannot be installed on a CPU host: this adapter is
tested by the argv and payloads it builds, never started here."""

from __future__ import annotations

from .base import EngineAdapter, EngineArgs, flag_if


class SglangAdapter(EngineAdapter):
    name = "sglang"
    extensions = frozenset({"ignore_eos", "min_tokens", "repetition_penalty", "top_k"})
    profile_paths = ("/start_profile", "/stop_profile")
    supported = EngineAdapter.supported | {"tensor_parallel_size", "quantization", "kv_cache_dtype",
                                           "enable_chunked_prefill", "max_num_seqs", "max_num_batched_tokens",
                                           "max_model_len"}
    installable_here = False
    needs_model = True


    def _argv(self, args: EngineArgs, *, model, port, python):
        argv = [python, "-m", "sglang.launch_server", "--model-path", model, "--host", "127.0.0.1",
                "--port", str(port), "--tp-size", str(args.tensor_parallel_size), "--enable-metrics"]
        argv += flag_if("--served-model-name", args.served_model_name)
        argv += flag_if("--dtype", args.dtype)
        argv += flag_if("--quantization", args.quantization)
        argv += flag_if("--kv-cache-dtype", args.kv_cache_dtype)
        argv += flag_if("--max-running-requests", args.max_num_seqs)
        argv += flag_if("--max-prefill-tokens", args.max_num_batched_tokens)
        argv += flag_if("--context-length", args.max_model_len)
        if args.enable_chunked_prefill is False:
            argv += ["--chunked-prefill-size", "-1"]
        return argv

    def env(self, args: EngineArgs) -> dict[str, str]:
        return {"SGLANG_TORCH_PROFILER_DIR": "profiles"}
