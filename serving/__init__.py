"""infra_agent.serving."""
