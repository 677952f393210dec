"""The README's install lines, on the wheel built from this checkout: `uv tool install` and
`pipx install` into folders of the test's own, and `uvx --from`. Offline: every dependency (torch
included) comes from the local package indexes and wheel folders pip is configured with
(`pip config list`); where there are none, they cannot install without downloading, and the
tests say so and skip. uv's cache is .cache/uv (about 2 GB once; a later run links from it)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from wheel_install import ROOT, built_wheel  # noqa: F401 (fixture)

from infra_agent.server.app import discover_tools

VERSION_LINE = re.compile(r"^infra-agent \d+\.\d+\.\d+\S*$")


def _local_indexes() -> tuple[list[str], list[str]]:
    """The local package indexes (file:// URLs) and wheel folders in pip's config."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    indexes, links = [], []
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        for item in value.strip("'\"").split():  # pip quotes the value
            path = Path(item.removeprefix("file://"))
            if not path.is_absolute() or not path.is_dir():
                continue  # a remote index, or a folder this host does not have
            if key.endswith(("index-url", "extra-index-url")) and item.startswith("file://"):
                indexes.append(item)
            elif key.endswith("find-links"):
                links.append(str(path))
    if not indexes and not links:
        pytest.skip(
            "pip is configured with no local index or wheel folder: installing would download"
        )
    return indexes, list(dict.fromkeys(links))


def _uv_sources() -> list[str]:
    """uv's options to install from the local indexes and wheel folders only."""
    indexes, links = _local_indexes()
    args = ["--offline", "--index-url", indexes[0]] if indexes else ["--offline", "--no-index"]
    for index in indexes[1:]:
        args += ["--extra-index-url", index]
    for link in links:
        args += ["--find-links", link]
    return args


def _installer(command: str) -> str:
    path = Path(sys.executable).parent / command
    if not path.is_file():
        pytest.skip(f"{command} is not installed in the test venv (the test extra installs it)")
    return str(path)


@pytest.fixture
def uv_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        UV_TOOL_DIR=str(tmp_path / "tools"),
        UV_TOOL_BIN_DIR=str(tmp_path / "bin"),
        UV_CACHE_DIR=str(ROOT / ".cache" / "uv"),
        UV_PYTHON_DOWNLOADS="never",
        XDG_STATE_HOME=str(tmp_path / "state"),
    )
    return env


def _run(command: list[str], env: dict[str, str], timeout: float = 900):
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, (
        f"{shlex.join(command)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    )
    return done


def _serves_every_tool(command: Path, env: dict[str, str]) -> None:
    """The installed command: its version, every tool of the checkout, and the client
    configuration naming its own entry point."""
    assert VERSION_LINE.match(_run([str(command), "--version"], env).stdout.strip())
    listed = _run([str(command), "tools"], env, timeout=300).stdout
    for name in discover_tools():  # the checkout's tools, each in the installed table
        assert re.search(rf"^{name}\s", listed, re.M), f"{name} missing:\n{listed}"
    assert "failed to import" not in listed
    # the client configuration names the tool's own entry point, not a `python -m`
    config = _run([str(command), "config", "--client", "claude-code"], env).stdout
    assert f"claude mcp add infra-agent -- {command.resolve()} serve" in config


@pytest.mark.slow
def test_uv_tool_install_of_the_wheel_serves_every_tool(built_wheel, uv_env, tmp_path):
    sources = _uv_sources()
    install = [_installer("uv"), "tool", "install", "--python", sys.executable, *sources]
    _run([*install, str(built_wheel)], uv_env)
    _serves_every_tool(tmp_path / "bin" / "infra-agent", uv_env)


@pytest.mark.slow
def test_pipx_install_of_the_wheel_serves_every_tool(built_wheel, uv_env, tmp_path):
    indexes, links = _local_indexes()
    env = {
        **uv_env,
        "PIPX_HOME": str(tmp_path / "pipx"),
        "PIPX_BIN_DIR": str(tmp_path / "bin"),
        "PIPX_MAN_DIR": str(tmp_path / "man"),
        # pip inside pipx's venvs: the local indexes only (no PyPI), no .pyc compile (~2x faster)
        "PIP_INDEX_URL": indexes[0] if indexes else "",
        "PIP_EXTRA_INDEX_URL": " ".join(indexes[1:]),
        "PIP_FIND_LINKS": " ".join(links),
        "PIP_NO_COMPILE": "1",
        **({} if indexes else {"PIP_NO_INDEX": "1"}),
    }
    try:
        _run([_installer("pipx"), "install", "--python", sys.executable, str(built_wheel)], env)
        _serves_every_tool(tmp_path / "bin" / "infra-agent", env)
    finally:  # pipx copies every dependency into its venv: about 5 GB with torch and triton
        shutil.rmtree(tmp_path / "pipx", ignore_errors=True)


@pytest.mark.slow
def test_uvx_from_the_wheel_runs_the_command(built_wheel, uv_env):
    sources = _uv_sources()
    run = [_installer("uvx"), "--python", sys.executable, *sources]
    done = _run([*run, "--from", str(built_wheel), "infra-agent", "--version"], uv_env)
    assert VERSION_LINE.match(done.stdout.strip()), done.stdout
