"""Nothing outside sandbox/ touches the sandbox's internals: serving/, tools/ and server/ use
its public API only (the names sandbox/__init__.py exports, and its PUBLIC_MODULES).

Imports are not enough to check: a second launcher can reach the internals through the
attributes of a public object (`sb.view.layout.jobs_dir`, `sb.cgroups.create(...)`), as
serving/lifecycle.py once did. So the scan also flags any attribute whose name belongs
only to the sandbox's internal classes, on any object but `self`/`cls`."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import io
import pathlib
import socket
import subprocess
import threading
from pathlib import Path

import infra_agent.sandbox as sandbox_api
from infra_agent.sandbox import cgroups, child, launcher, policy, runner, service

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("serving", "tools", "server")
PACKAGE = "infra_agent.sandbox"
# Attributes of a Sandbox that are its machinery, though their names carry no underscore.
SANDBOX_INTERNALS = {"view", "cgroups"}
INTERNAL_CLASSES = (
    policy.SandboxView,
    policy.Layout,
    cgroups.CgroupManager,
    cgroups.JobCgroup,
    launcher.Zygote,
    child.Child,
    service.DiskCap,
)
# Names so common that other objects have them too (a Popen's `kill`, a Path's `root`), and
# words others use as well (an Undecided's `reason`, an Engine's `describe`, platform.release).
COMMON_TYPES = (
    object,
    dict,
    list,
    set,
    str,
    bytes,
    pathlib.Path,
    subprocess.Popen,
    io.IOBase,
    socket.socket,
    threading.Thread,
    threading.Lock,
    asyncio.Task,
)
# `layout`: a tensor's (torch.strided) and a kernel argument's (kernels/schema.py Arg.layout) too
COMMON_WORDS = {"reason", "ready", "describe", "release", "layout"}


def members(cls: type) -> set[str]:
    """Methods, properties, class attributes, dataclass fields and `self.x =` assignments."""
    names = {n for n in dir(cls) if not n.startswith("__")}
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    for node in ast.walk(ast.parse(inspect.getsource(cls))):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            names.add(node.attr)
    return names


def internal_names() -> dict[str, bool]:
    """Name -> whether it is a method, for the attributes only the sandbox's machinery has."""
    sandbox_members = members(runner.Sandbox)
    private = {n for n in sandbox_members if n.startswith("_")} | SANDBOX_INTERNALS
    internal = set().union(*map(members, INTERNAL_CLASSES)) | private
    public = (
        set().union(
            *(
                members(obj)
                for obj in map(sandbox_api.__dict__.get, sandbox_api.__all__)
                if inspect.isclass(obj)
            )
        )
        - private
    )
    common = set().union(*(dir(t) for t in COMMON_TYPES)) | COMMON_WORDS
    owners = (*INTERNAL_CLASSES, runner.Sandbox)
    return {
        name: any(inspect.isfunction(getattr(cls, name, None)) for cls in owners)
        for name in internal - public - common
    }


def module_of(path: Path, node: ast.ImportFrom) -> str:
    package = ["infra_agent", *path.relative_to(ROOT).parent.parts]
    base = package[: len(package) - node.level + 1] if node.level else []
    return ".".join([*base, *(node.module.split(".") if node.module else [])])


def offences(path: Path, source: str, internal: dict[str, bool]) -> list[str]:
    """`path:line: what` for every import of, and attribute into, the sandbox's internals.
    A data attribute that is called (`tensor.view(...)`) is another object's method."""
    allowed = {PACKAGE, *(f"{PACKAGE}.{m}" for m in sandbox_api.PUBLIC_MODULES)}
    tree = ast.parse(source, str(path))
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = module_of(path, node)
            if module == PACKAGE:
                names = [
                    f"{module}.{a.name}" for a in node.names if a.name not in sandbox_api.__all__
                ]
            elif module.startswith(PACKAGE + ".") and module not in allowed:
                # `from ..sandbox.worker import recorder` names a public module; others do not
                names = [
                    f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" not in allowed
                ]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in internal
            and (internal[node.attr] or id(node) not in called)
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
        found += [
            f"{path.relative_to(ROOT)}:{node.lineno}: import {n}"
            for n in names
            if (n == PACKAGE or n.startswith(PACKAGE + ".")) and n not in allowed
        ]
    return found


def test_nothing_outside_the_sandbox_touches_its_internals():
    internal = internal_names()
    found = [
        hit
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
        for hit in offences(path, path.read_text(), internal)
    ]
    assert not found, (
        "outside sandbox/, use the sandbox's public API (infra_agent.sandbox's names: "
        "Sandbox.run, Sandbox.start_service, ...), or add what is missing to it:\n"
        + "\n".join(found)
    )


# What serving/lifecycle.py did before it used Sandbox.start_service (abridged, verbatim lines).
SECOND_LAUNCHER = """
from ..sandbox.streams import DiskWatch
def _start(self, eng):
    sb, view = self.sandbox, self.sandbox.view
    inside = view.job_dir(eng.folder.name)
    env = {**view.job_env(inside, sb.device, {}), "PYTHONPATH": view.worker_parent}
    rules = view.landlock_rules(inside)
    cgroup = sb.cgroups.create(eng.folder.name, self.memory_bytes, sb.limits.num_processes)
    argv = self.sandbox.view.bwrap_argv()
    jobs = sb.view.layout.jobs_dir
    members = eng.cgroup.procs()
"""


def test_the_scan_catches_a_second_launcher():
    hits = offences(ROOT / "serving" / "lifecycle.py", SECOND_LAUNCHER, internal_names())
    caught = {hit.split(": ", 1)[1] for hit in hits}
    assert {
        "import infra_agent.sandbox.streams.DiskWatch",
        ".view",
        ".job_dir",
        ".job_env",
        ".worker_parent",
        ".landlock_rules",
        ".cgroups",
        ".create",
        ".bwrap_argv",
        ".jobs_dir",  # sb.view.layout.jobs_dir: `layout` itself is a common word now
        ".procs",
        ".cgroup",
    } <= caught, caught


def test_the_scan_allows_the_public_api():
    public = """
from ..sandbox import Mount, ServiceSpec, SandboxError
from ...sandbox.job import Job
from ...sandbox.worker import recorder
from ...sandbox.worker.protocol import OP_PEAKS
async def launch(self, sb, spec):
    site = sb.service_site("engine-x")
    svc = await sb.start_service(spec)
    return svc.pids(), svc.alive, svc.log_tail(), sb.isolation.sandboxed, sb.limits.memory_bytes
"""
    assert offences(ROOT / "tools" / "profile" / "jobs.py", public, internal_names()) == []
