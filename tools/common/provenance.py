"""Where an experiment ran: the workspace's code version and the machine.

Both are recorded with every ledger row so compare_experiments can say whether two
results differ because the code changed, the device changed, or neither. Nothing here
imports torch: the server process stays light; versions come from package metadata.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from ...sandbox.worker.shared import cpu_model


@lru_cache(maxsize=64)
def in_git_repo(root: Path) -> bool:
    """Asked once per workspace: a folder rarely becomes a repository while served, and
    asking git on every call costs a process spawn."""
    try:
        probe = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0 and probe.stdout.strip() == "true"


def git_state(root: Path) -> tuple[str | None, str | None]:
    """(HEAD commit, sha256 of `git diff HEAD`) for the repository holding `root`;
    (None, None) when it is not in a git repository or git is missing."""
    if not in_git_repo(root):
        return None, None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if commit.returncode != 0:
            return None, None
        diff = subprocess.run(
            ["git", "-C", str(root), "diff", "HEAD", "--binary"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    diff_hash = hashlib.sha256(diff.stdout).hexdigest() if diff.returncode == 0 else None
    return commit.stdout.strip(), diff_hash


@lru_cache(maxsize=1)
def device_facts() -> dict:
    """What this host is, as the server process sees it without importing torch."""
    facts = {
        "hostname": platform.node(),
        "machine": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "num_cpus": os.cpu_count(),
        "gpus": _nvidia_gpus(),
        "packages": {name: package_version(name) for name in ("torch", "triton", "numpy", "mcp")},
    }
    return facts


def fingerprint(facts: dict) -> str:
    """A short hash of the facts that change performance (not the hostname)."""
    keyed = {k: v for k, v in facts.items() if k != "hostname"}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]


def devices_ran_on(row: dict) -> list[str]:
    """The device fingerprints an experiment's work ran on, sorted: its cluster nodes' (the
    ledger's `nodes`) when its jobs or its engine ran there, else the server's host's (the row's
    own `device_fingerprint`; the facts recorded with a row are always the server's host's)."""
    on_nodes = {
        n["device_fingerprint"] for n in row.get("nodes") or [] if n.get("device_fingerprint")
    }
    if on_nodes:
        return sorted(on_nodes)
    host = row.get("device_fingerprint")
    return [host] if host else []


def package_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _nvidia_gpus() -> list[str]:
    """GPU model names from the NVIDIA driver's procfs (no CUDA initialisation)."""
    names = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            for line in info.read_text().splitlines():
                if line.startswith("Model:"):
                    names.append(line.split(":", 1)[1].strip())
        except OSError:
            continue
    return names
