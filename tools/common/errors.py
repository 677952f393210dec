"""The one error type a tool raises for what the caller caused or can fix."""


class AgentError(Exception):
    """A problem the caller can fix; the message must say what to do."""
