"""`python -m infra_agent.server [serve options]`: the MCP server over stdio (or --http)."""

import sys

from .cli import main

if __name__ == "__main__":
    main(["serve", *sys.argv[1:]])
