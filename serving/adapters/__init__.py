"""Engine adapters: builtin, transformers, vllm, sglang, command (see base.py)."""

from .base import AdapterError, EngineAdapter, EngineArgs
from .builtin import BuiltinAdapter
from .command import CommandAdapter
from .sglang import SglangAdapter
from .transformers import TransformersAdapter
from .vllm import VllmAdapter

ADAPTERS: dict[str, type[EngineAdapter]] = {
    a.name: a
    for a in (BuiltinAdapter, TransformersAdapter, VllmAdapter, SglangAdapter, CommandAdapter)
}


def adapter_for(engine: str, args: EngineArgs) -> EngineAdapter:
    if engine not in ADAPTERS:
        raise AdapterError(f"unknown engine {engine!r}; use one of {', '.join(ADAPTERS)}")
    if engine == "command":
        return CommandAdapter(args.health_path)
    return ADAPTERS[engine]()


__all__ = ["ADAPTERS", "AdapterError", "EngineAdapter", "EngineArgs", "adapter_for"]
