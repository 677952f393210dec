"""What the replays share: the agent (conftest's zoo_client: one MCP server per replay module,
as one agent session holds it, so the replay's calls share its warm sandbox and its experiment
ledger) and a reader for the tool's answer to each expect condition.

Not a conftest.py: a conftest here would shadow tests/conftest.py for `from conftest import call`.
"""

import pytest


@pytest.fixture(scope="module")
def agent(zoo_client):
    """The replay's MCP client, on its own copy of the zoo (zoo_workspace)."""
    return zoo_client


def answers(out: dict) -> dict[str, str]:
    """What the tool said about each expect condition: {condition: supported|contradicted|inconclusive}."""
    return {c["condition"]: c["answer"] for c in out["hypothesis_answer"]["conditions"]}
