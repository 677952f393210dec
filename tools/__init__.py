"""infra_agent.tools."""
