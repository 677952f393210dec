"""What users install: the wheel built from this checkout, installed (not editable) in a fresh
venv (fixtures a test module imports).

Nothing is downloaded. The wheel is built without build isolation (the test venv's setuptools,
`pip wheel --no-index`). The fresh venv gets the test venv's installed dependencies as hard links
(one filesystem: about 6 s for 55,000 files, where installing torch and the rest again takes
minutes), less this checkout's editable install, then the wheel (`--no-deps`): `infra_agent`
comes from the wheel only, and every dependency lies inside the venv, where the sandbox mounts
the Python it runs jobs with (a .pth line pointing outside it would leave jobs without numpy).
`pip check` then says whether the wheel's requirements are met.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_FOLDERS = ("server", "tools", "kernels", "serving", "sandbox")  # -> infra_agent.<folder>


def tracked_files() -> list[str]:
    """The checkout's files as git sees them (tracked, plus new ones not ignored)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the wheel tests build from the files git knows")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted(f for f in listed.split("\0") if f and (ROOT / f).is_file())


# this checkout's editable install in the test venv: its finder, .pth and metadata
EDITABLE_INSTALL = ("__editable__", "infra_agent-")


def _hard_link(src: Path, dst: Path) -> None:
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, copy_function=os.link)
    else:
        shutil.copy2(src, dst, follow_symlinks=False) if src.is_symlink() else os.link(src, dst)


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheel: Path
    env: dict[str, str]  # no PYTHONPATH, state under the test's folder

    @property
    def entry_point(self) -> Path:
        return self.venv / "bin" / "infra-agent"

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.entry_point), *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.venv,
            timeout=timeout,
        )


# the built wheel, once per session: each test module that imports the fixture gets a copy of
# its definition, and a session-scoped fixture is then made once per copy
_BUILT: dict[str, Path] = {}


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> Path:
    """The wheel of a clean copy of this checkout (no stale build/ folder can leak into it)."""
    if "wheel" not in _BUILT:
        _BUILT["wheel"] = _build_wheel(tmp_path_factory.mktemp("wheel"))
    return _BUILT["wheel"]


def _build_wheel(base: Path) -> Path:
    src = base / "src"
    for name in tracked_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["-q", "-w", str(base / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (base / "dist").glob("infra_agent-*.whl")
    return wheel


@pytest.fixture(scope="session")
def installed(built_wheel, tmp_path_factory) -> Installed:
    base = tmp_path_factory.mktemp("installed")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(EDITABLE_INSTALL):
            _hard_link(entry, site / entry.name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
        + ["--no-index", str(built_wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    check = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "check"],
        capture_output=True,
        text=True,
    )
    assert "infra-agent" not in check.stdout, check.stdout  # its requirements are all met
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["XDG_STATE_HOME"] = str(base / "state")
    return Installed(venv, built_wheel, env)


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())
