"""microbench's limits (issue 10, defects 3, 4, 8): a runaway candidate is killed at its
timeout and frees the timing slot, repeated shapes are timed once, too many are refused."""

import pytest
from conftest import ToolCallError, call

from infra_agent.tools.common.cases import MAX_MICROBENCH_SHAPES
from infra_agent.tools.microbench.jobs import timing_timeout_s
from infra_agent.tools.microbench.schema import TIMEOUT_BASE_S, TIMEOUT_PER_BUDGET, Input

pytestmark = pytest.mark.anyio

RUNAWAY = "def f(x, y):\n    while True:\n        pass\n"
RAISES = "def f(x, y):\n    raise RuntimeError('boom')\n"


def test_the_default_timeout_follows_the_budget():
    assert (
        timing_timeout_s(Input(kernel="vector_add", budget_ms=100))
        == TIMEOUT_BASE_S + TIMEOUT_PER_BUDGET * 0.1
    )
    assert (
        timing_timeout_s(Input(kernel="vector_add", budget_ms=60_000))
        == TIMEOUT_BASE_S + TIMEOUT_PER_BUDGET * 60
    )
    assert timing_timeout_s(Input(kernel="vector_add", budget_ms=100, timeout_s=7)) == 7


async def test_a_runaway_is_killed_at_its_limit_and_the_slot_is_free_again(client):
    with pytest.raises(ToolCallError) as info:
        await call(
            client,
            "microbench",
            kernel="vector_add",
            shapes=[{"N": 1024}],
            budget_ms=100,
            source=RUNAWAY,
            entry="f",
            timeout_s=3,
        )
    text = str(info.value)
    assert "killed at its 3 s limit (timeout_s" in text and "internal error" not in text
    # the next timing job gets the (only) timing slot: it runs, and fails for its own reason
    with pytest.raises(ToolCallError, match="raised during timing.*boom") as info:
        await call(
            client,
            "microbench",
            kernel="vector_add",
            shapes=[{"N": 1024}],
            budget_ms=100,
            source=RAISES,
            entry="f",
        )
    assert "ia_worker" not in str(info.value)  # the agent's frames, not the worker harness's


async def test_too_many_shapes_are_refused_with_the_cap(client):
    shapes = [{"N": 1024 + i} for i in range(MAX_MICROBENCH_SHAPES + 1)]
    with pytest.raises(
        ToolCallError,
        match=f"{MAX_MICROBENCH_SHAPES + 1} distinct shapes.*cap is {MAX_MICROBENCH_SHAPES}",
    ):
        await call(client, "microbench", kernel="vector_add", shapes=shapes, budget_ms=100)
    assert (await call(client, "list_kernels"))["kernels"]


def test_repeated_shapes_are_timed_once(workspace):
    from infra_agent.kernels.workspace import load_workspace
    from infra_agent.tools.microbench.plan import shapes_of

    spec = load_workspace(workspace).kernel("vector_add").spec
    assert shapes_of(spec, [{"N": 8}] * 50 + [{"N": 16}, {"N": 8}], "cpu") == [{"N": 8}, {"N": 16}]
