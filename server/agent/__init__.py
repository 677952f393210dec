"""`infra-agent agent`: a model behind an OpenAI-compatible chat-completions API drives
this server's tools itself. loop.py runs it (given config.py's AgentConfig), with the
system prompt (prompt.py), the model's API client (model_client.py), the conversation's
bookkeeping (conversation.py) and what the run leaves behind (transcript.py)."""

from .config import AgentConfig, RunResult
from .loop import run_agent

__all__ = ["AgentConfig", "RunResult", "run_agent"]
