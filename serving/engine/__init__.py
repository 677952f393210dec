"""The built-in serving engine: a small, real, continuous-batching LLM server (see README.md).

`LLMEngine(EngineArgs(...))` offline; `python -m infra_agent.serving.engine` serves the
OpenAI-compatible HTTP API. Importing this package does not import torch.
"""

from .config import EngineArgs, ModelConfig
from .sequence import SamplingParams

__all__ = ["EngineArgs", "ModelConfig", "SamplingParams"]
