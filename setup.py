"""The package layout, found rather than listed (the rest of the metadata is pyproject.toml's).

The repository's top-level folders install as subpackages of one import package,
`infra_agent` (an implicit namespace: nothing generic such as `server` or `tools` lands in
site-packages). Every folder below them ships as a package of its own, with or without an
``__init__.py`` (the kernel zoo's folders are data: specs and sources are loaded by path, the
same way a user's own workspace is; the report's templates), and every file in it that is not a
module ships as its package data (READMEs, templates, infra-agent.toml). Skipped: ``__pycache__``,
compiled files, and hidden files and folders (state, caches). tests/packaging/test_wheel.py
builds the wheel and checks it against the files git knows.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
FOLDERS = ("server", "tools", "kernels", "serving", "sandbox")  # -> infra_agent.<folder>
PREFIX = "infra_agent"


def _shipped(path: Path) -> bool:
    """Whether a file or folder (relative to the repository root) belongs in the wheel."""
    hidden = any(part.startswith(".") or part == "__pycache__" for part in path.parts)
    return not hidden and path.suffix not in (".pyc", ".pyo")


def layout() -> tuple[dict[str, str], list[str], dict[str, list[str]]]:
    """(package_dir, packages, package_data) for setup()."""
    packages: list[str] = []
    package_data: dict[str, list[str]] = {}
    for top in FOLDERS:
        for folder in sorted([ROOT / top, *(p for p in (ROOT / top).rglob("*") if p.is_dir())]):
            rel = folder.relative_to(ROOT)
            if not _shipped(rel):
                continue
            name = ".".join((PREFIX, *rel.parts))
            packages.append(name)
            data = [
                f.name
                for f in sorted(folder.iterdir())
                if f.is_file() and f.suffix != ".py" and _shipped(f.relative_to(ROOT))
            ]
            if data:
                package_data[name] = data
    package_dir = {f"{PREFIX}.{top}": top for top in FOLDERS}
    return package_dir, packages, package_data


package_dir, packages, package_data = layout()
setup(package_dir=package_dir, packages=packages, package_data=package_data)
