"""Pinned acceptance: a person locks a kernel's reference, tolerances and shapes.

``infra-agent lock KERNEL`` calls `lock_kernel`, which records sha256 hashes of the
reference source and the spec file, plus the tolerances and shapes, in
``<workspace>/infra-agent.lock.json``. Every check_numerics on that kernel calls
`check_lock`; anything changed since the lock is reported loudly and the verdict cannot
pass. Humans set the acceptance criteria; the agent does not quietly move them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

LOCK_NAME = "infra-agent.lock.json"


@dataclass
class LockStatus:
    locked: bool  # a lock entry exists for this kernel
    changes: list[str] = field(default_factory=list)  # what differs from the lock, in words
    locked_at: str | None = None
    record: dict | None = None  # the lock entry (tolerances, shapes) when locked

    @property
    def ok(self) -> bool:
        return not self.changes


def lock_path(workspace) -> Path:
    return Path(workspace.root) / LOCK_NAME


def kernel_record(workspace, kernel_name: str) -> dict:
    """What a lock pins for one kernel, as plain JSON data."""
    kernel = workspace.kernel(kernel_name)
    spec = kernel.spec
    return {
        "reference": spec.reference,
        "reference_sha256": _sha256(kernel.source_of(spec.reference)),
        "spec_sha256": _sha256(kernel.folder / "spec.py"),
        "tolerances": {
            dtype: dataclasses.asdict(tol) for dtype, tol in sorted(spec.tolerances.items())
        },
        "shapes": {
            device: [dict(s) for s in shapes] for device, shapes in sorted(spec.shapes.items())
        },
        "dtypes": list(spec.dtypes),
        "forbidden_ops": list(spec.forbidden_ops),
    }


def lock_kernel(workspace, kernel_name: str) -> dict:
    """Record the kernel's current acceptance criteria; returns the entry written."""
    entry = {
        **kernel_record(workspace, kernel_name),
        "locked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = lock_path(workspace)
    data = _read(path)
    data.setdefault("kernels", {})[kernel_name] = entry
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return entry


def check_lock(workspace, kernel_name: str) -> LockStatus:
    entry = _read(lock_path(workspace)).get("kernels", {}).get(kernel_name)
    if entry is None:
        return LockStatus(locked=False)
    now = kernel_record(workspace, kernel_name)
    labels = {
        "reference": "the reference entry point",
        "reference_sha256": f"the reference source ({now['reference'].split(':')[0]})",
        "spec_sha256": "the spec file (spec.py)",
        "tolerances": "the tolerances",
        "shapes": "the test shapes",
        "dtypes": "the dtypes",
        "forbidden_ops": "the forbidden ops",
    }
    changes = [
        f"{label} changed since the lock of {entry.get('locked_at', '?')}"
        for key, label in labels.items()
        if entry.get(key) != now[key]
    ]
    return LockStatus(locked=True, changes=changes, locked_at=entry.get("locked_at"), record=entry)


def _read(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        # A corrupt lock must not read as "unlocked": that would silently drop the pin.
        raise ValueError(
            f"{path} is not valid JSON ({exc}); restore it or re-run `infra-agent lock`"
        ) from exc
    return data if isinstance(data, dict) else {}


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
