"""Which Python an engine with an install of its own runs on: a configured path, else the
`#!` interpreter of its console script on PATH; each checked to hold the engine's package,
and each failure an error that says where it looked and what to set."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from infra_agent.serving.interpreters import InterpreterError, find_interpreter


def test_a_configured_interpreter_is_asked_for_its_prefixes_and_package():
    found = find_interpreter("pytest", "pytest", sys.executable)
    assert found.python == sys.executable
    assert str(Path(sys.prefix).resolve()) in found.folders
    assert str(Path(sys.base_prefix).resolve()) in found.folders


def test_an_interpreter_without_the_package_is_refused_with_how_to_install_it():
    with pytest.raises(InterpreterError) as err:
        find_interpreter("vllm", "no_such_package_x", sys.executable)
    message = str(err.value)
    assert "has no no_such_package_x package" in message and "-m pip install" in message
    assert "[engines.vllm] python" in message and "--engine-python vllm=PATH" in message


def test_a_path_that_is_no_program_is_refused(tmp_path):
    with pytest.raises(InterpreterError, match="is not an executable file"):
        find_interpreter("vllm", "vllm", str(tmp_path / "missing" / "python"))


def test_the_console_script_on_path_names_the_interpreter(tmp_path, monkeypatch):
    script = tmp_path / "bin" / "fake-engine"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nimport sys\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    assert find_interpreter("fake-engine", "pytest", None).python == sys.executable


def test_no_script_on_path_and_nothing_configured_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InterpreterError) as err:
        find_interpreter("vllm", "vllm", None)
    assert "no `vllm` on PATH" in str(err.value) and "[engines.vllm] python" in str(err.value)
