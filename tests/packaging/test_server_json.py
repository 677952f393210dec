"""server.json, the MCP registry's entry for this server, is valid against the registry's
published schema (a vendored copy, README.md names its source) and agrees with the package."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path

import jsonschema

from infra_agent.server.cli import app as cli_app

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCHEMA = HERE / "server.schema.json"
SCHEMA_SHA256 = "d4c163f299ece68b7432f4e44c4108f2fdb663d99dc088c8344142e5b0a4b520"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _server_json() -> dict:
    return json.loads((ROOT / "server.json").read_text())


def test_server_json_is_valid_against_the_registry_schema():
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256  # the vendored copy
    schema = json.loads(SCHEMA.read_text())
    entry = _server_json()
    assert entry["$schema"] == schema["$id"]
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(entry)]
    assert not errors
    # the schema says so too: a server.json that breaks it is refused (the check has teeth)
    assert list(validator.iter_errors({**entry, "description": "x" * 101}))
    assert list(validator.iter_errors({**entry, "name": "no-namespace"}))


def test_server_json_names_this_package_its_version_and_stdio_command():
    entry = _server_json()
    (package,) = entry["packages"]
    assert package["registryType"] == "pypi" and package["identifier"] == PROJECT["name"]
    assert entry["version"] == package["version"] == PROJECT["version"]
    assert package["transport"] == {"type": "stdio"}
    # `uvx infra-agent serve`: the entry point named like the package, and its serve command
    assert PROJECT["scripts"] == {PROJECT["name"]: "infra_agent.server.cli:main"}
    commands = {c.name or c.callback.__name__ for c in cli_app.registered_commands}
    positional = [a["value"] for a in package["packageArguments"] if a["type"] == "positional"]
    assert positional == ["serve"] and "serve" in commands
    named = {a["name"] for a in package["packageArguments"] if a["type"] == "named"}
    assert named == {"--workspace"}


def test_the_readme_carries_the_registry_name_pypi_verifies():
    """The registry proves a PyPI package is the server's by finding `mcp-name: <name>` in its
    README, the package's long description (pyproject's readme)."""
    assert PROJECT["readme"] == "README.md"
    names = re.findall(r"mcp-name: (\S+)", (ROOT / "README.md").read_text())
    assert names == [_server_json()["name"]]
