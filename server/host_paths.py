"""Tool errors name files as the sandbox sees them, never by the server's host paths.

A job's traceback names the agent's files as /jobs/<id>/... and /workspace/... (its view),
but the frames of a library it called name the Python install by its host path, and
without bubblewrap every path is the host's; so do some of the server's own refusals
(the workspace root). Each error is rewritten once, where the server sends it: the host
workspace becomes /workspace, the jobs folder /jobs, the Python install <python> and this
package's source <infra_agent>.
"""

from __future__ import annotations

import sys
from pathlib import Path

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent
_SYSTEM_FOLDERS = {"/", "/usr", "/usr/local"}  # a system Python: these name more than the install


def sandbox_view(text: str, workspace_root: Path, state_dir: Path) -> str:
    for host, shown in _replacements(workspace_root, state_dir):
        text = text.replace(host, shown)
    return text


def _replacements(workspace_root: Path, state_dir: Path) -> list[tuple[str, str]]:
    pairs = {
        str(state_dir / "jobs"): "/jobs",
        str(workspace_root): "/workspace",
        str(_PACKAGE_ROOT): "<infra_agent>",
    }
    for prefix in {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
    } - _SYSTEM_FOLDERS:
        pairs[prefix] = "<python>"
    for host in list(pairs):  # the same folders by their resolved names (a /tmp link, a venv link)
        resolved = str(Path(host).resolve())
        pairs.setdefault(resolved, pairs[host])
    # longest first: the jobs folder inside the workspace's state folder before the workspace
    return sorted(((h, s) for h, s in pairs.items() if len(h) > 1), key=lambda p: -len(p[0]))
