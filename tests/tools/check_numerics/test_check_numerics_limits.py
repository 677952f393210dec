"""check_numerics' limits (issue 10, defects 3, 5, 8): partitions that cannot be valid
are clean errors, repeated cases count once, too many cases are refused with the cap."""

import pytest
from conftest import ToolCallError, call

from infra_agent.tools.common.cases import MAX_NUMERICS_CASES, distinct

pytestmark = pytest.mark.anyio

# plain torch (no Triton interpreter): the partition judge is what is under test, not speed
TORCH_RMSNORM = (
    "import torch\ndef f(x, w):\n"
    "    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w\n"
)
ONE_CASE = {"kernel": "rmsnorm", "trials": 1, "shapes": [{"M": 4, "N": 64}], "dtypes": ["float32"]}


async def test_partition_that_cannot_be_valid_is_a_clean_error(client):
    with pytest.raises(
        ToolCallError, match="partition.PartitionInput.args: Dictionary should have at least 1 item"
    ):
        await call(client, "check_numerics", **ONE_CASE, partition={"args": {}})
    with pytest.raises(
        ToolCallError, match=r"out_dim=-7 does not exist in output 0, which has 2 dimensions"
    ) as info:
        await call(
            client,
            "check_numerics",
            **ONE_CASE,
            source=TORCH_RMSNORM,
            entry="f",
            partition={"args": {"x": 0}, "out_dim": -7},
        )
    assert "internal error" not in str(info.value)
    assert (await call(client, "list_kernels"))["kernels"]  # the server answers the next call


async def test_repeats_count_once_and_too_many_cases_are_refused_with_the_cap(client):
    assert distinct([{"M": 4, "N": 8}, {"N": 8, "M": 4}, "float32", "float32"]) == [
        {"M": 4, "N": 8},
        "float32",
    ]
    half = MAX_NUMERICS_CASES // 2 + 1
    shapes = [{"M": 4, "N": 8 + i} for i in range(half)] + [
        {"M": 4, "N": 8}
    ] * 10  # one shape 11 times
    dtypes = ["float32", "float16"] * 20  # 2 distinct dtypes, 40 given
    with pytest.raises(
        ToolCallError,
        match=f"{2 * half} distinct cases \\(shapes x dtypes\\) in one call; the cap "
        f"is {MAX_NUMERICS_CASES}",
    ):
        await call(client, "check_numerics", kernel="rmsnorm", shapes=shapes, dtypes=dtypes)
    with pytest.raises(ToolCallError, match="tolerance: Input should be less than or equal to 1"):
        await call(client, "check_numerics", **ONE_CASE, tolerance=1e300)
