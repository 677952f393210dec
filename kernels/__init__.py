"""infra_agent.kernels."""
