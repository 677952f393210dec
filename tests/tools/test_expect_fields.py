"""One home for `expect`: a tool with fields of its own declares them in its expect_fields.py (the
catalogue and `facts(inp, out, evidence)`), a small tool gets its output's plain fields, and on a
real call the facts have a value slot for every name the catalogue offers."""

import ast
import importlib
from pathlib import Path

import pytest
from conftest import call

import infra_agent.tools as tools_package
from infra_agent.server.app import discover_tools
from infra_agent.tools.common import expect
from infra_agent.tools.common.expect_eval import BUILTIN_FUNCTIONS
from infra_agent.tools.compile_kernel.expect_fields import KERNEL_FIELDS

TOOLS_DIR = Path(tools_package.__file__).parent
# Only these build catalogues and facts; everything else imports them.
EXPECT_HOMES = {"common/expect.py", "common/expect_eval.py"}
TORCH_ADD = "def add(x, y):\n    return x + y\n"


def test_every_tool_declares_its_expect_in_its_expect_fields_module():
    for name, tool in discover_tools().items():
        module = importlib.import_module(f"infra_agent.tools.{name}")
        if hasattr(module, "__path__"):  # a package: its fields live in its expect_fields.py
            fields = importlib.import_module(f"infra_agent.tools.{name}.expect_fields")
            assert tool.expect is fields.EXPECT, name
            assert tool.catalogue is fields.CATALOGUE, name
        else:  # one module: the output's own plain fields, nothing hand-written
            plain = expect.plain_fields(tool.output_model)
            assert tool.expect is None and tool.catalogue is plain.catalogue, name


def test_catalogues_and_facts_are_built_only_in_expect_fields_modules():
    """A Catalogue, Facts or ExpectFields built anywhere else is a second home (a schema, a judge);
    the language (expect_eval) is read only through common/expect.py."""
    builders = {"Catalogue", "Facts", "ExpectFields"}
    elsewhere, language = [], []
    for path in sorted(TOOLS_DIR.rglob("*.py")):
        relative = path.relative_to(TOOLS_DIR).as_posix()
        if relative in EXPECT_HOMES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("expect_eval"):
                language.append(f"{relative}:{node.lineno}")
            func = node.func if isinstance(node, ast.Call) else None
            called = getattr(func, "id", getattr(func, "attr", None))
            if called in builders and path.name != "expect_fields.py":
                elsewhere.append(f"{relative}:{node.lineno}")
    assert not elsewhere, f"expect built outside tools/<tool>/expect_fields.py: {elsewhere}"
    assert not language, f"import the expect language from tools/common/expect.py: {language}"


@pytest.fixture
def judged(monkeypatch):
    """Every (facts, catalogue) the harness judges, as the tools hand them over."""
    seen: list[tuple[expect.Facts, expect.Catalogue]] = []
    original = expect.judge

    def recording(conditions, facts, catalogue):
        seen.append((facts, catalogue))
        return original(conditions, facts, catalogue)

    monkeypatch.setattr(expect, "judge", recording)
    return seen


def _assert_covers(facts: expect.Facts, catalogue: expect.Catalogue, what: str) -> None:
    missing = set(catalogue.fields) - set(facts.fields)
    assert not missing, (what, missing)
    if catalogue.scoped:
        assert facts.scopes, what
        for label, scoped in facts.scopes.items():
            assert not set(catalogue.scoped) - set(scoped), (what, label)
    own = catalogue.function_names - set(BUILTIN_FUNCTIONS)
    assert own <= set(facts.functions), (what, own - set(facts.functions))


@pytest.mark.anyio
async def test_facts_cover_every_catalogued_field_on_a_real_call(zoo_client, judged):
    first = await call(zoo_client, "compile_kernel", kernel="rmsnorm", target="sm_90a")
    calls = [
        # the baseline's kernel is compile_kernel's evidence; profile's, the judged events
        (
            "compile_kernel",
            {
                "kernel": "rmsnorm",
                "target": "sm_90a",
                "num_warps": 4,
                "baseline": first["experiment_id"],
            },
        ),
        ("check_numerics", {"kernel": "vector_add", "trials": 1}),
        (
            "microbench",
            {
                "kernel": "vector_add",
                "source": TORCH_ADD,
                "entry": "add",
                "baseline": "reference",
                "shapes": [{"N": 65536}],
                "budget_ms": 400,
            },
        ),
        ("profile", {"kernel": "vector_add", "sample_threads": False}),
        ("describe_kernel", {"kernel": "rmsnorm", "include_source": False}),
        ("list_kernels", {}),
        ("list_experiments", {}),
        ("compare_experiments", {"a": first["experiment_id"], "b": first["experiment_id"]}),
        ("device_info", {}),
        ("list_serves", {}),
        (
            "sweep_kernel",
            {
                "kernel": "rmsnorm",
                "configs": [{"BLOCK_N": 64}, {"BLOCK_N": 128}],
                "shapes": [{"M": 4, "N": 64}],
                "dtype": "float32",
                "target": "sm_90a",
                "round_ms": 100,
            },
        ),
    ]
    tools = discover_tools()
    for name, args in calls:
        judged.clear()
        out = await call(zoo_client, name, **args, expect=["1 == 1"])
        assert out["hypothesis_answer"]["answer"] == "supported", name
        ((facts, catalogue),) = judged
        assert catalogue is tools[name].catalogue, name
        _assert_covers(facts, catalogue, name)
        if name == "compile_kernel":  # baseline.<field>: the baseline kernel's fields
            assert set(KERNEL_FIELDS) <= set(facts.baseline.fields)


@pytest.mark.slow
@pytest.mark.anyio
async def test_serving_facts_cover_every_catalogued_field_on_a_real_call(workspace, judged):
    """launch_serve, serve_benchmark (its criteria too, against a baseline) and stop_serve on the
    built-in engine: each judged with a value slot for every name its catalogue offers."""
    from mcp import Client

    from infra_agent.server.app import build_server
    from infra_agent.serving.engine.tiny_checkpoint import build_tiny_checkpoint

    build_tiny_checkpoint(workspace / "tiny")
    server = build_server(workspace)
    tools = discover_tools()
    async with Client(server) as c:
        launched = await call(
            c, "launch_serve", engine="builtin", args={"model": "tiny"}, expect=["1 == 1"]
        )
        handle = launched["handle"]
        await call(
            c,
            "serve_benchmark",
            handle=handle,
            baseline_handle=handle,
            repeats=1,
            workload={"num_requests": 4, "input_len": 16, "output_len": 4, "seed": 3},
            criteria=["1 == 1"],
            expect=["1 == 1"],
        )
        await call(c, "stop_serve", handle=handle, expect=["1 == 1"])
    await server.aclose()
    names = [catalogue for _, catalogue in judged]
    # launch_serve judges once before it returns (so a bad condition stops the engine), once after
    # serve_benchmark judges its criteria and its expect
    order = ["launch_serve", "launch_serve", "serve_benchmark", "serve_benchmark", "stop_serve"]
    assert names == [tools[name].catalogue for name in order]
    for (facts, catalogue), name in zip(judged, order, strict=True):
        _assert_covers(facts, catalogue, name)
        if name == "serve_benchmark":  # baseline.<field>: the same metrics of the baseline's run
            assert set(catalogue.fields) <= set(facts.baseline.fields)
