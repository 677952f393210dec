"""The built-in engine (serving/engine/): the embedded default target."""

from __future__ import annotations

import json

from .base import EngineAdapter, EngineArgs, bool_flag, flag_if


class BuiltinAdapter(EngineAdapter):
    name = "builtin"
    extensions = frozenset({"ignore_eos", "stream_options.continuous_usage_stats", "top_k", "seed"})
    continuous_usage = True
    profile_paths = ("/start_profile", "/stop_profile")
    supported = EngineAdapter.supported | {"kv_cache_dtype", "quantization", "enable_chunked_prefill", "max_num_seqs",
                                           "max_num_batched_tokens", "max_model_len", "kernels"}

    def _argv(self, args: EngineArgs, *, model, port, python):
        argv = [python, "-m", "infra_agent.serving.engine", "--host", "127.0.0.1", "--port", str(port),
                "--workspace", "/workspace", "--profile-dir", "profiles"]
        argv += flag_if("--checkpoint", model)
        argv += flag_if("--model-name", args.served_model_name)
        argv += flag_if("--dtype", args.dtype)
        argv += flag_if("--kv-cache-dtype", args.kv_cache_dtype)
        argv += flag_if("--quantization", args.quantization)
        argv += flag_if("--max-num-seqs", args.max_num_seqs)
        argv += flag_if("--max-num-batched-tokens", args.max_num_batched_tokens)
        argv += flag_if("--max-model-len", args.max_model_len)
        argv += bool_flag("--enable-chunked-prefill", args.enable_chunked_prefill)
        if args.kernels:
            argv += ["--kernels", json.dumps(args.kernels)]
        return argv
