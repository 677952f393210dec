"""The adversarial suite: every trick is caught by a finding that names it, and honest
kernels produce no findings at all."""

import pytest
from conftest import call
from numerics_cheats import CHEATS

pytestmark = pytest.mark.anyio

SHAPES = {
    "vector_add": [{"N": 300}],
    "rmsnorm": [{"M": 4, "N": 32}],
    "tp_linear": [{"M": 16, "N": 16, "K": 96}],
}


@pytest.mark.parametrize("name", sorted(CHEATS))
async def test_each_trick_is_named(zoo_client, name):
    kernel, source, code = CHEATS[name]
    out = await call(
        zoo_client,
        "check_numerics",
        kernel=kernel,
        source=source,
        entry=kernel,
        shapes=SHAPES[kernel],
        dtypes=["float32"],
        trials=3,
    )
    codes = {f["code"] for f in out["findings"]}
    assert code in codes, (name, out["summary"], out["findings"])
    finding = next(f for f in out["findings"] if f["code"] == code)
    assert finding["case"] == {"vector_add": "N=300 float32", "rmsnorm": "M=4 N=32 float32"}[kernel]
    if finding["severity"] == "error":
        assert out["verdict"] == "fail"


@pytest.mark.parametrize(
    "kernel, impl, dtypes",
    [
        ("vector_add", "triton", ["float32", "float16"]),
        ("rmsnorm", "triton", ["float32", "bfloat16"]),
        ("tp_linear", "tf32x3", ["float32"]),
    ],
)
async def test_honest_kernels_have_no_findings(zoo_client, kernel, impl, dtypes):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel=kernel,
        impl=impl,
        shapes=SHAPES[kernel],
        dtypes=dtypes,
        trials=2,
    )
    assert out["findings"] == [], out["findings"]
    assert out["verdict"] == "pass" and all(c["verdict"] == "pass" for c in out["cases"])


async def test_an_input_dependent_bug_is_not_called_a_trick(zoo_client):
    # wrong only when x[0] >= 0: some trials pass, some fail, and no finding may blame state or caching
    source = "def vector_add(x, y):\n    return x + y if x[0] < 0 else x + y + 1e-3\n"
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        source=source,
        entry="vector_add",
        shapes=SHAPES["vector_add"],
        dtypes=["float32"],
        trials=4,
    )
    assert out["findings"] == [], out["findings"]


async def test_unwritten_integer_outputs_are_found_too(zoo_client):
    args = [
        {
            "name": "x",
            "shape": ["N"],
            "dtype": "int32",
            "distribution": "int",
            "low": 0,
            "high": 100,
        }
    ]
    out = await call(
        zoo_client,
        "check_numerics",
        source="import torch\ndef f(x):\n    out = torch.empty_like(x)\n"
        "    out[:-1] = x[:-1] * 2\n    return out\n",
        entry="f",
        reference="def ref(x):\n    return x * 2\n",
        reference_entry="ref",
        args=args,
        shapes=[{"N": 40}],
        trials=1,
    )
    assert out["verdict"] == "fail" and [f["code"] for f in out["findings"]] == ["unwritten_output"]
    assert "first at [39]" in out["findings"][0]["message"] and out["cases"][0]["errors"][
        "worst_index"
    ] == [39]
