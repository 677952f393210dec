"""`transformers serve --continuous-batching` (PyPI transformers[serving]): a real
third-party engine that runs on CPU. It answers 422 to any request field outside the
OpenAI schema, so no extension is ever sent to it; usage arrives in the last chunk."""

from __future__ import annotations

from .base import EngineAdapter, EngineArgs, Flag, supported_by


class TransformersAdapter(EngineAdapter):
    name = "transformers"
    extensions = frozenset()
    metrics_path = None  # no Prometheus endpoint
    needs_model = True
    flags = (
        Flag("dtype", "--dtype"),
        Flag("max_num_batched_tokens", "--cb-max-batch-tokens"),
    )
    supported = supported_by(flags)

    def _head(self, args: EngineArgs, *, model, port, python):
        # Its KV cache is sized from the memory it sees (the whole host's), which overshoots the
        # engine's cgroup and gets it OOM-killed at the first request: give it a size instead.
        return [
            python,
            "-m",
            "transformers.cli.transformers",
            "serve",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--device",
            "cpu",
            "--continuous-batching",
            "--cb-num-blocks",
            "512",
            "--cb-block-size",
            "32",
        ]
