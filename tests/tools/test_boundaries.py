"""The trust boundary one floor down: the judge (tools/) never imports a worker op, and the
server's import path stays free of torch and matplotlib (a server starts in ~1 s; judges
and plots import them in their own threads)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"
FORBIDDEN = "infra_agent.sandbox.worker.ops"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in one file of tools/, relative ones resolved."""
    package = ["infra_agent", "tools", *path.relative_to(TOOLS).parent.parts]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def test_the_scan_resolves_relative_imports(tmp_path):
    probe = TOOLS / "microbench" / "__init__.py"
    names = {name for _, name in imported_modules(probe)}
    assert "infra_agent.tools.microbench.plan" in names  # `from . import jobs, plan`
    assert "infra_agent.tools.common.peaks" in names  # `from ..common.peaks import ...`


def test_no_module_in_tools_imports_a_worker_op():
    offenders = [
        f"{path.relative_to(TOOLS.parent)}:{line}: {name}"
        for path in sorted(TOOLS.rglob("*.py"))
        for line, name in imported_modules(path)
        if name == FORBIDDEN or name.startswith(FORBIDDEN + ".")
    ]
    assert not offenders, (
        "tools/ may import sandbox.worker.protocol and sandbox.worker.shared, never an op "
        "module:\n" + "\n".join(offenders)
    )


def test_the_server_starts_without_importing_torch_or_matplotlib():
    code = (
        "import sys\n"
        "from infra_agent.server.app import build_server, discover_tools\n"
        "assert discover_tools(), 'no tools found'\n"
        "print(sorted(m for m in ('torch', 'triton', 'matplotlib') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"the server's import path imported {out.stdout.strip()}"


def test_tools_folder_lists_the_tools_at_a_glance():
    """Every entry of tools/ is a tool (a module, or a package whose __init__ defines TOOL),
    or one of the shared homes; discovery finds a TOOL in both forms."""
    from infra_agent.server.app import discover_tools

    shared = {"__init__", "base", "common"}
    entries = {
        p.stem if p.suffix == ".py" else p.name
        for p in TOOLS.iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").is_file())
    }
    found = discover_tools()
    assert entries - shared == set(found), (
        "tools/ holds something that is neither a tool nor shared"
    )
    assert (
        TOOLS / "check_numerics" / "__init__.py"
    ).is_file() and "check_numerics" in found  # a package
    assert (TOOLS / "list_kernels.py").is_file() and "list_kernels" in found  # a module
