"""Any OpenAI-compatible server started by a command line of the agent's (inside the
sandbox like every engine). No request extensions are assumed."""

from __future__ import annotations

from .base import AdapterError, EngineAdapter, EngineArgs


class CommandAdapter(EngineAdapter):
    name = "command"
    metrics_path = "/metrics"  # scraped if it answers; attribution says when it does not
    supported = frozenset({"command", "health_path", "model", "served_model_name"})

    def __init__(self, health_path: str = "/health"):
        self._health = health_path

    @property
    def health_path(self) -> str:
        return self._health

    def _check(self, args: EngineArgs) -> None:
        if not args.command:
            raise AdapterError(
                "the command engine needs command= the server's argv, e.g. "
                "['python', 'my_server.py', '--port', '{port}']"
            )
        if not args.health_path.startswith("/"):
            raise AdapterError(f"health_path must start with '/', got {args.health_path!r}")

    def _head(self, args: EngineArgs, *, model, port, python):
        return [
            w.replace("{port}", str(port)).replace("{model}", model or "") for w in args.command
        ]
