"""Serving: the built-in engine, engine adapters, engine lifecycle in the sandbox, and the load
generator, used by the launch_serve / serve_benchmark / stop_serve / list_serves tools.

    engine/       the built-in continuous-batching engine (torch-free scheduler and block
                  manager, one model runner, OpenAI-compatible HTTP API)
    adapters/     builtin, transformers, vllm, sglang, command: argv, accepted request
                  fields, metrics and profiling endpoints
    lifecycle.py  engines as sandbox services (Sandbox.start_service), ready when healthy
    loadgen/      datasets -> arrivals -> one timed stream -> a run -> vLLM's metric definitions
"""
