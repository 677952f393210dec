"""Adapters build their engine's command line from typed arguments and refuse what the engine
has no flag for. SGLang is a GPU build that cannot be installed here: it is tested by the argv
and the request fields it produces, never started. vLLM's CPU build is started for real in
test_serve_vllm.py; here, what its adapter asks of the command line and the sandbox."""

from __future__ import annotations

import json

import pytest

from infra_agent.serving.adapters import ADAPTERS, AdapterError, EngineArgs, adapter_for
from infra_agent.serving.tcp import KEEP_ALIVE_S

VLLM_PROFILER = (
    '{"profiler": "torch", "torch_profiler_dir": "profiles", "torch_profiler_with_stack": false}'
)


def argv(engine: str, **kw) -> list[str]:
    args = EngineArgs(**kw)
    adapter = adapter_for(engine, args)
    adapter.check(args)
    return adapter.argv(args, model="/model", port=8000, python="py")


def test_vllm_argv_and_extensions():
    cmd = argv(
        "vllm",
        model="m",
        tensor_parallel_size=2,
        quantization="fp8",
        kv_cache_dtype="fp8",
        enable_chunked_prefill=False,
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        extra_args=["--enforce-eager"],
    )
    assert cmd[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(cmd)
    for part in (
        "--model /model",
        "--port 8000",
        "--tensor-parallel-size 2",
        "--quantization fp8",
        "--kv-cache-dtype fp8",
        "--no-enable-chunked-prefill",
        "--max-num-seqs 64",
        "--max-num-batched-tokens 2048",
    ):
        assert part in joined
    assert cmd[-1] == "--enforce-eager"
    vllm = ADAPTERS["vllm"]()
    assert vllm.request_extras(ignore_eos=True) == {"ignore_eos": True} and vllm.continuous_usage
    env = vllm.env(EngineArgs(model="m"), memory_bytes=6 << 30)
    # CPU build only: a quarter of the engine's memory ceiling for the KV cache, in GiB (at least 1)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["VLLM_HOST_IP"] == "127.0.0.1"
    assert vllm.env(EngineArgs(model="m"), memory_bytes=32 << 30)["VLLM_CPU_KVCACHE_SPACE"] == "8"
    # its uvicorn keeps idle connections as long as the built-in engine's (uvicorn's default: 5 s)
    assert env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"] == str(KEEP_ALIVE_S) == "60"
    profiler = json.loads(cmd[cmd.index("--profiler-config") + 1])
    assert profiler == {
        "profiler": "torch",
        "torch_profiler_dir": "profiles",
        "torch_profiler_with_stack": False,
    }
    assert vllm.package == "vllm" and vllm.shared_memory and vllm.own_ports


def test_sglang_argv():
    cmd = " ".join(
        argv(
            "sglang",
            model="m",
            tensor_parallel_size=4,
            max_num_seqs=8,
            enable_chunked_prefill=False,
        )
    )
    for part in (
        "-m sglang.launch_server",
        "--model-path /model",
        "--tp-size 4",
        "--max-running-requests 8",
        "--chunked-prefill-size -1",
        "--enable-metrics",
    ):
        assert part in cmd


def test_transformers_sends_no_extension_and_refuses_what_it_lacks():
    ts = ADAPTERS["transformers"]()
    assert ts.request_extras(ignore_eos=True) == {}  # it answers 422 to ignore_eos
    assert "--continuous-batching" in argv("transformers", model="m")
    with pytest.raises(AdapterError, match="takes no tensor_parallel_size"):
        argv("transformers", model="m", tensor_parallel_size=2)
    with pytest.raises(AdapterError, match="needs model="):
        argv("transformers")


def test_builtin_and_command():
    cmd = argv(
        "builtin", kernels={"rmsnorm": "triton"}, max_num_seqs=8, enable_chunked_prefill=True
    )
    assert cmd[:3] == ["py", "-m", "infra_agent.serving.engine"]
    assert (
        "--kernels" in cmd and '{"rmsnorm": "triton"}' in cmd and "--enable-chunked-prefill" in cmd
    )
    assert argv("command", command=["srv", "--port", "{port}", "--model", "{model}"]) == [
        "srv",
        "--port",
        "8000",
        "--model",
        "/model",
    ]
    with pytest.raises(AdapterError, match="needs command="):
        argv("command")
    with pytest.raises(AdapterError, match="unknown engine"):
        adapter_for("tgi", EngineArgs())


# Every argument each adapter takes, and the argv it must produce: written out by hand from the
# adapters' code before their flags became tables, so a table that drops, renames or reorders
# a flag fails here.
FULL_ARGV = {
    "vllm": (
        dict(
            model="m",
            served_model_name="srv",
            dtype="bfloat16",
            tensor_parallel_size=2,
            quantization="fp8",
            kv_cache_dtype="fp8",
            enable_chunked_prefill=False,
            max_num_seqs=64,
            max_num_batched_tokens=2048,
            max_model_len=4096,
            enable_prefix_caching=False,
            extra_args=["--enforce-eager"],
        ),
        [
            "py",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "/model",
            "--host",
            "127.0.0.1",
            "--port",
            "8000",
            "--tensor-parallel-size",
            "2",
            "--profiler-config",
            VLLM_PROFILER,
            "--served-model-name",
            "srv",
            "--dtype",
            "bfloat16",
            "--quantization",
            "fp8",
            "--kv-cache-dtype",
            "fp8",
            "--max-num-seqs",
            "64",
            "--max-num-batched-tokens",
            "2048",
            "--max-model-len",
            "4096",
            "--no-enable-chunked-prefill",
            "--no-enable-prefix-caching",
            "--enforce-eager",
        ],
    ),
    "sglang": (
        dict(
            model="m",
            served_model_name="srv",
            dtype="bfloat16",
            tensor_parallel_size=2,
            quantization="fp8",
            kv_cache_dtype="fp8",
            enable_chunked_prefill=False,
            max_num_seqs=64,
            max_num_batched_tokens=2048,
            max_model_len=4096,
            extra_args=["--disable-radix-cache"],
        ),
        [
            "py",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/model",
            "--host",
            "127.0.0.1",
            "--port",
            "8000",
            "--tp-size",
            "2",
            "--enable-metrics",
            "--served-model-name",
            "srv",
            "--dtype",
            "bfloat16",
            "--quantization",
            "fp8",
            "--kv-cache-dtype",
            "fp8",
            "--max-running-requests",
            "64",
            "--max-prefill-tokens",
            "2048",
            "--context-length",
            "4096",
            "--chunked-prefill-size",
            "-1",
            "--disable-radix-cache",
        ],
    ),
    "builtin": (
        dict(
            model="m",
            served_model_name="srv",
            dtype="float32",
            kv_cache_dtype="int8",
            quantization="w8a8",
            max_num_seqs=8,
            max_num_batched_tokens=256,
            max_model_len=512,
            enable_chunked_prefill=True,
            enable_prefix_caching=False,
            kernels={"rmsnorm": "triton"},
            extra_args=["--prefill-delay-ms", "20"],
        ),
        [
            "py",
            "-m",
            "infra_agent.serving.engine",
            "--host",
            "127.0.0.1",
            "--port",
            "8000",
            "--workspace",
            "/workspace",
            "--profile-dir",
            "profiles",
            "--checkpoint",
            "/model",
            "--model-name",
            "srv",
            "--dtype",
            "float32",
            "--kv-cache-dtype",
            "int8",
            "--quantization",
            "w8a8",
            "--max-num-seqs",
            "8",
            "--max-num-batched-tokens",
            "256",
            "--max-model-len",
            "512",
            "--enable-chunked-prefill",
            "--no-enable-prefix-caching",
            "--kernels",
            '{"rmsnorm": "triton"}',
            "--prefill-delay-ms",
            "20",
        ],
    ),
    # served_model_name is taken but has no transformers flag: the argv leaves it out, as before.
    "transformers": (
        dict(
            model="m",
            served_model_name="srv",
            dtype="float32",
            max_num_batched_tokens=256,
            extra_args=["--x"],
        ),
        [
            "py",
            "-m",
            "transformers.cli.transformers",
            "serve",
            "/model",
            "--host",
            "127.0.0.1",
            "--port",
            "8000",
            "--device",
            "cpu",
            "--continuous-batching",
            "--cb-num-blocks",
            "512",
            "--cb-block-size",
            "32",
            "--dtype",
            "float32",
            "--cb-max-batch-tokens",
            "256",
            "--x",
        ],
    ),
    "command": (
        dict(
            model="m",
            served_model_name="srv",
            health_path="/ready",
            command=["srv", "--port", "{port}", "--model", "{model}"],
        ),
        ["srv", "--port", "8000", "--model", "/model"],
    ),
}

# The same adapters with only what they need: every optional flag renders as nothing.
MINIMAL_ARGV = {
    "vllm": [
        "py",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/model",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "1",
        "--profiler-config",
        VLLM_PROFILER,
    ],
    "sglang": [
        "py",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/model",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--tp-size",
        "1",
        "--enable-metrics",
    ],
    "builtin": [
        "py",
        "-m",
        "infra_agent.serving.engine",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--workspace",
        "/workspace",
        "--profile-dir",
        "profiles",
        "--checkpoint",
        "/model",
    ],
    "transformers": [
        "py",
        "-m",
        "transformers.cli.transformers",
        "serve",
        "/model",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--device",
        "cpu",
        "--continuous-batching",
        "--cb-num-blocks",
        "512",
        "--cb-block-size",
        "32",
    ],
}


@pytest.mark.parametrize("engine", sorted(FULL_ARGV))
def test_full_argv_is_exactly_the_engines_command_line(engine):
    kwargs, expected = FULL_ARGV[engine]
    assert argv(engine, **kwargs) == expected


@pytest.mark.parametrize("engine", sorted(MINIMAL_ARGV))
def test_minimal_argv_has_no_optional_flag(engine):
    assert argv(engine, model="m") == MINIMAL_ARGV[engine]


def test_sglang_chunked_prefill_on_is_its_default():
    assert "--chunked-prefill-size" not in argv("sglang", model="m", enable_chunked_prefill=True)


def test_every_engine_takes_every_argument_it_renders():
    """A flag table's field outside `supported` would be refused before it could be rendered."""
    for adapter in ADAPTERS.values():
        assert {f.field for f in adapter.flags} <= adapter.supported, adapter.name


def test_vllms_keep_alive_is_read_from_the_variable_its_adapter_sets():
    """vLLM reads its uvicorn keep-alive from VLLM_HTTP_TIMEOUT_KEEP_ALIVE (vllm/envs.py), and its
    API server hands that to uvicorn: the installed build's own source says so."""
    from serve_helpers import VLLM_PYTHON, require_vllm

    require_vllm()
    (site,) = VLLM_PYTHON.parent.parent.glob("lib/python3*/site-packages")
    envs = (site / "vllm" / "envs.py").read_text()
    server = (site / "vllm" / "entrypoints" / "launchers" / "api_server" / "entry.py").read_text()
    assert 'os.environ.get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE"' in envs
    assert "timeout_keep_alive=envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE" in server
