"""Adapters build their engine's command line from typed arguments and refuse what the engine
has no flag for. vLLM and SGLang are GPU builds that cannot be installed here: they are
tested by the argv and the request fields they produce, never started."""

from __future__ import annotations

import pytest

from infra_agent.serving.adapters import ADAPTERS, AdapterError, EngineArgs, adapter_for


def argv(engine: str, **kw) -> list[str]:
    args = EngineArgs(**kw)
    adapter = adapter_for(engine, args)
    adapter.check(args)
    return adapter.argv(args, model="/model", port=8000, python="py")


def test_vllm_argv_and_extensions():
    cmd = argv("vllm", model="m", tensor_parallel_size=2, quantization="fp8", kv_cache_dtype="fp8",
               enable_chunked_prefill=False, max_num_seqs=64, max_num_batched_tokens=2048,
               extra_args=["--enforce-eager"])
    assert cmd[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(cmd)
    for part in ("--model /model", "--port 8000", "--tensor-parallel-size 2", "--quantization fp8",
                 "--kv-cache-dtype fp8", "--no-enable-chunked-prefill", "--max-num-seqs 64",
                 "--max-num-batched-tokens 2048"):
        assert part in joined
    assert cmd[-1] == "--enforce-eager"
    vllm = ADAPTERS["vllm"]()
    assert vllm.request_extras(ignore_eos=True) == {"ignore_eos": True} and vllm.continuous_usage
    assert vllm.env(EngineArgs(model="m"))["VLLM_TORCH_PROFILER_DIR"] == "profiles"


def test_sglang_argv():
    cmd = " ".join(argv("sglang", model="m", tensor_parallel_size=4, max_num_seqs=8, enable_chunked_prefill=False))
    for part in ("-m sglang.launch_server", "--model-path /model", "--tp-size 4", "--max-running-requests 8",
                 "--chunked-prefill-size -1", "--enable-metrics"):
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
    cmd = argv("builtin", kernels={"rmsnorm": "triton"}, max_num_seqs=8, enable_chunked_prefill=True)
    assert cmd[:3] == ["py", "-m", "infra_agent.serving.engine"]
    assert "--kernels" in cmd and '{"rmsnorm": "triton"}' in cmd and "--enable-chunked-prefill" in cmd
    assert argv("command", command=["srv", "--port", "{port}", "--model", "{model}"]) == [
        "srv", "--port", "8000", "--model", "/model"]
    with pytest.raises(AdapterError, match="needs command="):
        argv("command")
    with pytest.raises(AdapterError, match="unknown engine"):
        adapter_for("tgi", EngineArgs())
