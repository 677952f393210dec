"""Issue 34, item 8: a kernel of the user's own, in their own workspace (kernels/<name>/), read
through describe_kernel and check_numerics. Its spec sets a tolerance for float32 only, lists
float16 too, names a size only its cost model reads (Hk: q is one slice of a fused qkv row of
(Hq + 2 Hk) x D), and has a torch-only impl."""

from __future__ import annotations

import pytest
from conftest import ToolCallError, call

pytestmark = pytest.mark.anyio

SPEC = """
from infra_agent.kernels.schema import Arg, KernelSpec, Tolerance

SPEC = KernelSpec(
    name="q_scale",
    description="q * 2, q being the query slice of a fused qkv projection.",
    reference="reference.py:q_scale",
    impls={"torch": "q_scale_torch.py:q_scale"},
    args=(Arg("q", ("T", "Hq", "D")),),
    shapes={"cpu": ({"T": 3, "Hq": 2, "Hk": 1, "D": 8},), "gpu": ({"T": 64, "Hq": 32, "Hk": 8, "D": 128},)},
    dtypes=("float32", "float16"),
    flops=lambda s: s["T"] * s["Hq"] * s["D"],
    # reads q out of the fused row, writes q: the row's size is what the cost model needs
    bytes=lambda s, itemsize: s["T"] * (s["Hq"] + 2 * s["Hk"] + s["Hq"]) * s["D"] * itemsize,
    tolerances={"float32": Tolerance(rel_l2=1e-6, why="one fp32 rounding per element")},
)
"""
REFERENCE = "def q_scale(q):\n    return q * 2.0\n"
TORCH_IMPL = "import torch\n\n\ndef q_scale(q):\n    return torch.mul(q, 2.0)\n"


@pytest.fixture(scope="module")
async def own_client(tmp_path_factory):
    from mcp import Client

    from infra_agent.server.app import build_server

    root = tmp_path_factory.mktemp("own") / "ws"
    folder = root / "kernels" / "q_scale"  # the default `paths` is ["kernels"]
    folder.mkdir(parents=True)
    (folder / "spec.py").write_text(SPEC)
    (folder / "reference.py").write_text(REFERENCE)
    (folder / "q_scale_torch.py").write_text(TORCH_IMPL)
    srv = build_server(root)
    async with Client(srv) as client:
        yield client
    await srv.aclose()


def _ops_of_the_impl() -> list[str]:
    """The impl's compute ops, seen by a dispatch mode here (plain Python, not the harness)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append("aten::" + func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    scope: dict = {}
    exec(TORCH_IMPL, scope)
    q = torch.randn(3, 2, 8)
    with Ops():
        scope["q_scale"](q)
    return sorted(set(seen))


async def test_a_users_kernel_is_described_and_checked_as_its_spec_says(own_client):
    described = await call(own_client, "describe_kernel", kernel="q_scale", include_source=False)
    tolerances = {t["dtype"]: t for t in described["tolerances"]}
    # float16 is listed and the spec sets no tolerance for it: the default it is checked at
    assert set(tolerances) == {"float32", "float16"}, described["tolerances"]
    assert tolerances["float32"]["source"] == "spec"
    assert tolerances["float16"]["source"] == "dtype default"

    # the spec's own shape names Hk, which only the cost model reads: not an unknown size
    checked = await call(own_client, "check_numerics", kernel="q_scale", impl="torch", trials=1)
    assert checked["verdict"] == "pass", checked["summary"]
    # the witness of the tolerance: the one check_numerics applied, per dtype
    for case in checked["cases"]:
        shown = tolerances[case["dtype"]]
        assert (case["tolerance_rel_l2"], case["tolerance_source"]) == (
            shown["rel_l2"],
            shown["source"],
        )
        assert case["triton_launches"] == 0
    # the witness of what computed it: a dispatch mode around the impl, in this process
    ops = _ops_of_the_impl()
    assert ops == ["aten::mul"], ops
    assert f"no Triton launch: computed by {', '.join(ops)}" in checked["summary"], checked[
        "summary"
    ]

    explicit = await call(
        own_client,
        "check_numerics",
        kernel="q_scale",
        impl="torch",
        shapes=[{"T": 5, "Hq": 2, "Hk": 2, "D": 4}],
        dtypes=["float32"],
        trials=1,
    )
    assert explicit["verdict"] == "pass"
    with pytest.raises(ToolCallError, match=r"unknown \['K'\]"):
        await call(
            own_client,
            "check_numerics",
            kernel="q_scale",
            impl="torch",
            shapes=[{"T": 5, "Hq": 2, "Hk": 2, "D": 4, "K": 3}],
        )
