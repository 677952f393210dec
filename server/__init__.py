"""infra_agent.server."""
