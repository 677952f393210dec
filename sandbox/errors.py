"""Errors of the sandbox itself (not of the agent's code)."""


class SandboxError(Exception):
    """The sandbox itself failed or refused (not the agent's code): the message says what to do."""
