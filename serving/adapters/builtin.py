"""The built-in engine (serving/engine/): the embedded default target."""

from __future__ import annotations

from .base import EngineAdapter, EngineArgs, Flag, bool_flag, json_flag, supported_by, value_flag


class BuiltinAdapter(EngineAdapter):
    name = "builtin"
    extensions = frozenset({"ignore_eos", "stream_options.continuous_usage_stats", "top_k", "seed"})
    continuous_usage = True
    profile_paths = ("/start_profile", "/stop_profile")
    profile_kind = "window"
    flags = (
        Flag("served_model_name", "--model-name"),
        Flag("dtype", "--dtype"),
        Flag("kv_cache_dtype", "--kv-cache-dtype"),
        Flag("quantization", "--quantization"),
        Flag("max_num_seqs", "--max-num-seqs"),
        Flag("max_num_batched_tokens", "--max-num-batched-tokens"),
        Flag("max_model_len", "--max-model-len"),
        Flag("enable_chunked_prefill", "--enable-chunked-prefill", bool_flag),
        Flag("enable_prefix_caching", "--enable-prefix-caching", bool_flag),
        Flag("kernels", "--kernels", json_flag),
    )
    supported = supported_by(flags)

    def _head(self, args: EngineArgs, *, model, port, python):
        return [
            python,
            "-m",
            "infra_agent.serving.engine",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workspace",
            "/workspace",
            "--profile-dir",
            "profiles",
            *value_flag("--checkpoint", model),
        ]
