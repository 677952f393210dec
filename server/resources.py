"""Experiments and their files as MCP resources.

``experiment://{id}`` is the ledger row as JSON, with the manifest of the code it ran
(``code``: path -> sha256, size, uri); ``code://{experiment_id}/{sha256}`` is one of those
files as it ran; ``artifact://{experiment_id}/{name}`` is a file a tool stored (IR dumps,
traces, plots, logs), served as text or as a blob according to its MIME type;
``expect://{tool}`` is what that tool's `expect` may name, with meanings and units (an
unknown name's error points there).
``resources/list`` shows the most recent experiments, so a client browsing resources sees
what was tried.
"""

from __future__ import annotations

import json
import mimetypes
from pathlib import Path

import anyio.to_thread
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp_types import Resource

from ..kernels.snapshots import BlobStore, Manifest
from .context import ARTIFACT_NAME, ServerState
from .retention import pruned_message

RECENT_EXPERIMENTS = 50
TEXT_TYPES = {"application/json", "application/xml", "application/x-sh", "application/javascript"}
# IR and assembly dumps have no registered MIME type but are text.
TEXT_SUFFIXES = {
    ".ttir",
    ".ttgir",
    ".llir",
    ".ll",
    ".ptx",
    ".sass",
    ".amdgcn",
    ".mlir",
    ".log",
    ".txt",
    ".md",
    ".csv",
    ".jsonl",
    ".py",
    ".toml",
    ".yaml",
    ".yml",
}


def mime_type_of(name: str) -> str:
    suffix = Path(name).suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return "text/plain"
    guessed, _ = mimetypes.guess_type(name)
    return guessed or "application/octet-stream"


def is_text(mime_type: str) -> bool:
    return mime_type.startswith("text/") or mime_type in TEXT_TYPES


def register_resources(server, state: ServerState) -> None:
    @server.resource(
        "experiment://{experiment_id}",
        name="experiment",
        title="An experiment from the ledger",
        description="One tool call: tool, arguments, hypothesis, the code it ran (`code`: each file's "
        "workspace path -> sha256, size and its code:// URI; null for calls recorded before snapshots), git "
        "commit + diff hash, device, timing, status, result and artifact URIs, as JSON. A sweep's trials "
        "name it as `parent_id`; the sweep lists them under `children` (id, tool, status).",
        mime_type="application/json",
    )
    def read_experiment(experiment_id: str) -> str:
        row = state.ledger.get(experiment_id)
        if row is None:
            raise ResourceNotFoundError(
                f"no experiment {experiment_id!r}; list_experiments shows the ids"
            )
        for section in ("files", "inline"):
            for entry in ((row.get("code") or {}).get(section) or {}).values():
                entry["uri"] = f"code://{experiment_id}/{entry['sha256']}"
        children = state.ledger.children(experiment_id)
        if children:
            row["children"] = [
                {"id": c["id"], "tool": c["tool"], "status": c["status"]} for c in children
            ]
        return json.dumps(row, indent=2)

    @server.resource(
        "code://{experiment_id}/{sha256}",
        name="code",
        title="A file of the code an experiment ran",
        description="The exact bytes an experiment ran, by the sha256 its code manifest (experiment://{id}) "
        "lists: what a baseline=<id> rerun runs, whatever the workspace holds today.",
        mime_type="text/plain",
    )
    def read_code(experiment_id: str, sha256: str) -> str:
        row = state.ledger.get(experiment_id)
        if row is None:
            raise ResourceNotFoundError(
                f"no experiment {experiment_id!r}; list_experiments shows the ids"
            )
        manifest = Manifest.from_json(row.get("code"))
        if manifest is None or sha256 not in {e.sha256 for e in manifest.entries().values()}:
            raise ResourceNotFoundError(
                f"experiment {experiment_id} kept no file with sha256 {sha256[:16]!r}; "
                f"experiment://{experiment_id} lists its files (code)"
            )
        data = BlobStore(state.workspace.state_dir).read(sha256)
        if data is None:
            raise ResourceNotFoundError(
                f"the file {sha256[:12]} of {experiment_id} is gone from the blobs"
            )
        return data.decode("utf-8", errors="replace")

    @server.resource(
        "expect://{tool}",
        name="expect",
        title="What a tool's expect conditions may name",
        description="Every field and function a tool's `expect` conditions may name, grouped (whole call, "
        "per shape or case, functions), each with its meaning and unit, as text.",
        mime_type="text/plain",
    )
    def read_expect_fields(tool: str) -> str:
        spec = server.tools.get(tool)
        if spec is None:
            raise ResourceNotFoundError(f"no tool {tool!r}; tools/list shows them")
        return f"{tool}: expect may name\n{spec.catalogue.described()}\n"

    @server.resource(
        "artifact://{experiment_id}/{name}",
        name="artifact",
        title="A file an experiment produced",
        description="IR dumps, traces, plots and logs stored by a tool call; text or binary by MIME type.",
    )
    async def read_artifact(experiment_id: str, name: str) -> str | bytes:
        path = await artifact_path(state, experiment_id, name)
        data = path.read_bytes()
        if is_text(mime_type_of(name)):
            return data.decode("utf-8", errors="replace")
        return data


async def artifact_path(state: ServerState, experiment_id: str, name: str) -> Path:
    if not ARTIFACT_NAME.match(experiment_id) or not ARTIFACT_NAME.match(name):
        raise ResourceError(f"artifact://{experiment_id}/{name} is not a valid artifact URI")
    path = state.artifacts_dir / experiment_id / name
    if state.late_artifacts.is_pending(path):  # a plot still being drawn (late_artifacts.py)
        await anyio.to_thread.run_sync(state.late_artifacts.wait, path)
    if failed := state.late_artifacts.wait(path):  # returns at once now
        raise ResourceError(
            f"artifact://{experiment_id}/{name} could not be made ({failed}); "
            f"the call's other results stand"
        )
    if not path.is_file():
        row = state.ledger.get(experiment_id)
        if row is not None and row.get("artifacts_pruned_at"):
            raise ResourceNotFoundError(
                pruned_message(experiment_id, name, row["artifacts_pruned_at"])
            )
        raise ResourceNotFoundError(
            f"no artifact {name!r} for experiment {experiment_id!r}; "
            f"read experiment://{experiment_id} for its artifact list"
        )
    return path


def recent_experiment_resources(state: ServerState) -> list[Resource]:
    resources = []
    for row in state.ledger.query(limit=RECENT_EXPERIMENTS):
        label = row["tool"] + (f" {row['kernel']}" if row.get("kernel") else "")
        resources.append(
            Resource(
                uri=f"experiment://{row['id']}",
                name=row["id"],
                title=f"{row['id']}: {label} ({row['status']})",
                description=row.get("hypothesis") or None,
                mime_type="application/json",
            )
        )
    return resources
