"""The sandbox's folders on the host, made once per Sandbox, and the Layout built from them.

<state_dir>/jobs/   one folder per job (the only writable bind)
<state_dir>/etc/    passwd/group naming the sandbox user (65534)
<state_dir>/pkg/    ia_worker -> sandbox/worker, for PYTHONPATH when there is no bwrap
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .policy import Layout


def prepare_state(workspace: Path, state_dir: Path, gpu_devices: tuple[str, ...]) -> Layout:
    jobs, etc, pkg = state_dir / "jobs", state_dir / "etc", state_dir / "pkg"
    for d in (jobs, etc, pkg):
        d.mkdir(parents=True, exist_ok=True)
    (etc / "passwd").write_text("nobody:x:65534:65534:sandbox:/nonexistent:/usr/sbin/nologin\n")
    (etc / "group").write_text("nogroup:x:65534:\n")
    worker = Path(__file__).resolve().parent / "worker"
    link = pkg / "ia_worker"
    if not link.is_symlink() or link.resolve() != worker:
        link.unlink(missing_ok=True)
        link.symlink_to(worker)
    prefixes = sorted(
        {
            Path(p).resolve()
            for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
        }
    )
    prefixes = [p for p in prefixes if not any(q != p and q in p.parents for q in prefixes)]
    package_dir = worker.parent.parent  # site-packages/infra_agent when installed (not editable)
    hidden = (
        [package_dir]
        if any(package_dir.is_relative_to(p) for p in [*prefixes, Path("/usr")])
        else []
    )
    workspace_hidden = (
        (str(state_dir.relative_to(workspace)),)
        if state_dir.is_relative_to(workspace) and state_dir != workspace
        else ()
    )
    return Layout(
        worker_dir=worker,
        workspace=workspace,
        jobs_dir=jobs,
        etc_dir=etc,
        pkg_dir=pkg,
        python_prefixes=tuple(prefixes),
        hidden_dirs=tuple(hidden),
        workspace_hidden=workspace_hidden,
        gpu_devices=gpu_devices,
        python=os.path.abspath(sys.executable),  # ".." in it would not resolve in the sandbox
    )
