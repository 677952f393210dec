"""Which isolation layers this host actually provides, each probed, never assumed.

`device_info` reports `Isolation.as_dict()`; the runner refuses to run agent code
without bwrap unless the server was started with --allow-unsandboxed. A layer that
probes fine here but fails inside a job makes that job fail (no silent downgrade).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

from .cgroups import CgroupManager
from .policy import SandboxView
from .worker import confine, seccomp

LAYER_ORDER = ("bwrap", "landlock", "seccomp", "cgroup", "rlimits")
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap) "
    "and make sure unprivileged user namespaces are enabled, or start the server with "
    "--allow-unsandboxed to run agent code without namespaces (not recommended)"
)


@dataclass
class Isolation:
    layers: list[str]  # in force, in LAYER_ORDER
    missing: dict[str, str] = field(default_factory=dict)  # layer -> why it is not in force
    details: dict = field(default_factory=dict)

    @property
    def level(self) -> str:
        """e.g. "bwrap+landlock+seccomp+cgroup"; "none" when no layer isolates the job."""
        return "+".join(layer for layer in self.layers if layer != "rlimits") or "none"

    @property
    def sandboxed(self) -> bool:
        return "bwrap" in self.layers

    def as_dict(self) -> dict:
        return {
            "level": self.level,
            "sandboxed": self.sandboxed,
            "layers": list(self.layers),
            "missing": dict(self.missing),
            "details": dict(self.details),
        }


def probe(view: SandboxView, cgroups: CgroupManager, timeout_s: float = 30.0) -> Isolation:
    """Probe each layer; `view` is the sandboxed view whose bwrap command is tried."""
    in_force: set[str] = {"rlimits"}
    missing: dict[str, str] = {}
    details: dict = {}

    reason = _probe_bwrap(view, timeout_s)
    if reason is None:
        in_force.add("bwrap")
    else:
        missing["bwrap"] = f"{reason}; {INSTALL_HINT}"

    abi = confine.landlock_abi()
    if abi >= 1:
        in_force.add("landlock")
        details["landlock_abi"] = abi
        if abi < 6:
            details["landlock_note"] = (
                "ABI < 6: signals and abstract sockets across jobs are not scoped"
            )
    else:
        missing["landlock"] = "the kernel has no Landlock (Linux >= 5.13 with lsm=landlock)"

    seccomp_reason = seccomp.seccomp_available()
    if seccomp_reason is None:
        in_force.add("seccomp")
    else:
        missing["seccomp"] = seccomp_reason

    if cgroups.available:
        in_force.add("cgroup")
        details["cgroup"] = "v2" if cgroups.v2 else "v1"
    else:
        missing["cgroup"] = (
            f"{cgroups.reason}; without it memory and process count are not capped "
            "and a job's escaped daemons are not killed"
        )
    return Isolation([layer for layer in LAYER_ORDER if layer in in_force], missing, details)


def _probe_bwrap(view: SandboxView, timeout_s: float) -> str | None:
    """None when the real sandbox command line starts Python; else the reason."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap not found on PATH"
    argv = [bwrap, *view.bwrap_argv()[1:], "--", view.layout.python, "-S", "-c", "import os"]
    try:
        proc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run: {exc}"
    if proc.returncode != 0:
        return f"bwrap failed (exit {proc.returncode}): {proc.stderr.decode(errors='replace').strip()[-500:]}"
    return None
