"""The worker harness: the child side of the sandbox.

Imports only the stdlib, numpy, torch and triton, so it starts fast and runs on a GPU
host that lacks the server's dependencies. Modules here use relative imports only:
inside the sandbox this folder is mounted on its own, without the rest of infra_agent.
"""
