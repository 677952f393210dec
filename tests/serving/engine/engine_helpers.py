"""The engine tests' tiny checkpoint: 2 layers, hidden 64 (serving/engine/tiny_checkpoint.py)."""

from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

__all__ = ["build_tiny_checkpoint"]
