"""check_numerics through MCP: verdicts, worst indices that point at the bug, bad input,
seeds, tolerance sources, artifacts, and pinned acceptance."""

import base64
import dataclasses
import json

import pytest
import torch
from conftest import ToolCallError, call
from numerics_cheats import OFF_BY_ONE_MASK

from infra_agent.kernels.workspace import load_workspace
from infra_agent.sandbox.worker.tensors import make_inputs
from infra_agent.tools.check_numerics.lock import lock_kernel

pytestmark = pytest.mark.anyio


async def test_builtin_kernels_pass_with_tolerance_from_the_spec(zoo_client):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="rmsnorm",
        shapes=[{"M": 3, "N": 40}, {"M": 2, "N": 64}],
        dtypes=["float32", "float16"],
        trials=2,
        hypothesis="the Triton rmsnorm matches the reference",
        expect=[
            "verdict == 'pass'",
            "error_to_tolerance <= 0.5",
            "partitioned_vs_unpartitioned_rel_l2 == 0",
            "len(error_finding_codes) == 0",
        ],
    )
    assert out["verdict"] == "pass" and len(out["cases"]) == 6  # 4 as made, 2 padded rows
    padded = [c for c in out["cases"] if c["layout"] == "padded_rows"]
    assert [(c["shape"], c["dtype"]) for c in padded] == [
        ({"M": 3, "N": 40}, "float32"),
        ({"M": 3, "N": 40}, "float16"),
    ]
    assert padded[0]["input_layouts"][0]["stride"] == [40 + 16, 1]  # x: padded rows
    case = out["cases"][0]
    assert case["tolerance_source"] == "spec" and case["tolerance_rel_l2"] == 1e-5
    assert case["errors"]["rel_l2_error"] < 1e-6 and case["errors"]["candidate_nan_count"] == 0
    assert (
        case["partition"]["is_within_tolerance"]
        and case["partition"]["partitioned_vs_unpartitioned_rel_l2"] == 0
    )
    assert len(case["seeds"]) == 2 and case["seeds"][0] != case["seeds"][1]
    assert (
        case["triton_launches"] == 2 and "aten::pow" not in case["aten_ops"]
    )  # the kernel, not the library
    answer = out["hypothesis_answer"]
    assert (
        answer["answer"] == "supported"
        and [c["answer"] for c in answer["conditions"]] == ["supported"] * 4
    )
    assert [c["scope"] for c in answer["conditions"][1]["comparisons"]] == [
        c["case"] for c in out["cases"]
    ]
    assert (
        "PASS" in out["summary"] and "Expect: supported (4 of 4 conditions hold)" in out["summary"]
    )
    assert {a.rsplit("/", 1)[1] for a in out["artifacts"]} == {
        "worst_cases.json",
        "error_histogram.png",
    }
    again = await call(
        zoo_client,
        "check_numerics",
        kernel="rmsnorm",
        shapes=[{"M": 3, "N": 40}],
        dtypes=["float32"],
        trials=2,
        partition=False,
    )
    assert set(again["cases"][0]["seeds"]).isdisjoint(case["seeds"])  # fresh inputs every call
    assert again["cases"][0]["partition"] is None


async def test_off_by_one_mask_fails_at_the_last_element(zoo_client):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        source=OFF_BY_ONE_MASK,
        entry="vector_add",
        shapes=[{"N": 300}],
        dtypes=["float32"],
        trials=2,
        expect=['"unwritten_output" in finding_codes', "verdict == 'pass'"],
    )
    assert out["verdict"] == "fail"
    assert [c["answer"] for c in out["hypothesis_answer"]["conditions"]] == [
        "supported",
        "contradicted",
    ]
    assert out["hypothesis_answer"]["answer"] == "contradicted"
    errors = out["cases"][0]["errors"]
    assert errors["worst_index"] == [299] and errors["first_mismatch_indices"] == [[299]]
    assert errors["num_mismatches"] == 1 and errors["nonfinite_mismatches"] == 1
    assert [f["code"] for f in out["findings"]] == ["unwritten_output"]


async def test_wrong_epsilon_fails_where_epsilon_matters_most(zoo_client, zoo_workspace):
    kernel = load_workspace(zoo_workspace).kernel("rmsnorm")
    source = (
        (kernel.folder / "rmsnorm_triton.py")
        .read_text()
        .replace("from reference import EPS", "EPS = 1e-1")
    )
    shape = {"M": 6, "N": 64}
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="rmsnorm",
        source=source,
        entry="rmsnorm",
        shapes=[shape],
        dtypes=["float32"],
        trials=2,
        partition=False,
    )
    assert out["verdict"] == "fail" and out["findings"] == []
    case = out["cases"][0]
    errors = case["errors"]
    assert errors["rel_l2_error"] > 1e-3
    # Rebuild the worst trial's inputs from its seed and predict where eps=0.1 hurts most.
    x, w = (
        t.double()
        for t in make_inputs(
            [dataclasses.asdict(a) for a in kernel.spec.args],
            shape,
            "float32",
            case["seeds"][errors["trial"]],
        )
    )
    ms = x.pow(2).mean(-1, keepdim=True)
    ref = x * torch.rsqrt(ms + 1e-6) * w
    wrong = x * torch.rsqrt(ms + 1e-1) * w
    score = (wrong - ref).abs() / (ref.abs() + ref.pow(2).mean().sqrt())
    assert errors["worst_index"] == list(divmod(int(score.argmax()), shape["N"]))


async def test_tolerance_argument_and_dtype_default_are_reported(zoo_client):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        shapes=[{"N": 64}],
        dtypes=["float16"],
        trials=1,
        tolerance=1e-9,
    )
    case = out["cases"][0]
    assert case["tolerance_source"] == "argument" and out["verdict"] == "fail"
    adhoc = await call(
        zoo_client,
        "check_numerics",
        source="def add(a, b):\n    return a + b\n",
        entry="add",
        reference="def ref(a, b):\n    return b + a\n",
        reference_entry="ref",
        args=[{"name": "a", "shape": ["N"]}, {"name": "b", "shape": ["N"]}],
        shapes=[{"N": 8}],
        trials=1,
    )
    assert adhoc["verdict"] == "pass" and adhoc["cases"][0]["tolerance_source"] == "dtype default"
    assert adhoc["lock"] is None


@pytest.mark.parametrize(
    "args, message",
    [
        ({"kernel": "rmsnorm", "shapes": [{"M": 4}]}, r"missing \['N'\]"),
        ({"kernel": "rmsnorm", "shapes": [{"M": 4, "N": 8, "K": 2}]}, r"unknown \['K'\]"),
        (
            {"kernel": "vector_add", "source": "def f(x):\n    return x\n", "entry": "f"},
            "cannot be called with 2 positional",
        ),
        (
            {"kernel": "vector_add", "source": "def f(x, y):\n    return x + y\n", "entry": "g"},
            "has no function 'g'",
        ),
        (
            {
                "kernel": "vector_add",
                "reference": "def bad(x, y):\n    raise ValueError('boom')\n",
                "reference_entry": "bad",
            },
            "reference bad raised.*ValueError: boom",
        ),
        ({"kernel": "vector_add", "dtypes": ["int3"]}, "dtype 'int3' is not checkable"),
        ({"kernel": "nope"}, "unknown kernel 'nope'"),
        (
            {"kernel": "vector_add", "expect": ["rel_l2 < 1"]},
            r"names rel_l2,.*per case: .*rel_l2_error.*expect://check_numerics",
        ),
        (
            {"kernel": "vector_add", "expect": ["rel_l2_error < baseline.rel_l2_error"]},
            "has no baseline",
        ),
        ({"kernel": "vector_add", "expect": ["verdict = 'pass'"]}, "compare with '=='"),
    ],
)
async def test_bad_input_is_a_clear_error(zoo_client, args, message):
    with pytest.raises(ToolCallError, match=message):
        await call(zoo_client, "check_numerics", trials=1, **{"shapes": [{"N": 16}], **args})


async def test_a_candidate_that_raises_is_a_case_error_at_its_line(zoo_client):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        source="def f(x, y):\n    raise KeyError('nope')\n",
        entry="f",
        shapes=[{"N": 16}],
        layouts=[],  # one case: the raise as made
        dtypes=["float32"],
        trials=1,
    )
    (case,) = out["cases"]
    assert out["verdict"] == case["verdict"] == "fail" and case["errors"] is None
    assert case["error"].startswith(
        "candidate.py:2:5: KeyError: 'nope'\nraised by the candidate on case N=16 float32, trial 0"
    ), case["error"]
    assert [f["code"] for f in out["findings"]] == ["candidate_raised"]


async def test_a_locked_kernel_with_a_modified_reference_cannot_pass(client, workspace):
    lock_kernel(load_workspace(workspace), "vector_add")
    args = {"kernel": "vector_add", "shapes": [{"N": 32}], "dtypes": ["float32"], "trials": 1}
    out = await call(client, "check_numerics", **args)
    assert out["verdict"] == "pass" and out["lock"]["locked"] and out["lock"]["problems"] == []
    loose = await call(client, "check_numerics", **args, tolerance=0.5)
    assert (
        loose["verdict"] == "fail" and "looser than the locked" in loose["findings"][0]["message"]
    )
    ref = workspace / "vector_add" / "reference.py"
    ref.write_text(ref.read_text().replace("return x + y", "return x + y  # edited"))
    out = await call(client, "check_numerics", **args)
    assert out["verdict"] == "fail" and out["cases"][0]["verdict"] == "pass"
    assert [f["code"] for f in out["findings"]] == ["reference_modified_since_lock"]
    assert "LOCKED ACCEPTANCE VIOLATED" in out["findings"][0]["message"]


async def test_degenerate_reference_is_inconclusive_and_checks_can_be_narrowed(zoo_client):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        reference="def zero(x, y):\n    return x * 0\n",
        reference_entry="zero",
        shapes=[{"N": 64}],
        dtypes=["float32"],
        trials=1,
        expect=["rel_l2_error <= 1e-6", "max_abs_error >= 0"],
    )
    assert out["verdict"] == "inconclusive" and out["cases"][0]["errors"]["rel_l2_error"] is None
    answer = out["hypothesis_answer"]  # relative error against an all-zero reference is undefined
    assert [c["answer"] for c in answer["conditions"]] == ["inconclusive", "supported"]
    assert answer["answer"] == "inconclusive" and "rel_l2_error has no value" in out["summary"]
    assert [f["code"] for f in out["findings"]] == ["degenerate_reference"]
    mutating = "def vector_add(x, y):\n    out = x + y\n    y.mul_(0.5)\n    return out\n"
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        source=mutating,
        entry="vector_add",
        shapes=[{"N": 64}],
        dtypes=["float32"],
        trials=1,
        checks=["unwritten", "aliasing"],
    )
    assert (
        out["findings"] == []
        and out["checks"] == ["aliasing", "unwritten"]
        and out["verdict"] == "pass"
    )


async def test_large_magnitudes_and_bad_partitions(zoo_client):
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="rmsnorm",
        shapes=[{"M": 3, "N": 32}],
        dtypes=["float32"],
        trials=1,
        distribution="large",
    )
    assert out["verdict"] == "pass" and abs(out["cases"][0]["errors"]["worst_reference"]) > 0
    with pytest.raises(ToolCallError, match="along dim 2, but it has 2 dimensions"):
        await call(
            zoo_client,
            "check_numerics",
            kernel="rmsnorm",
            shapes=[{"M": 3, "N": 32}],
            trials=1,
            partition={"args": {"x": 2}},
        )


async def test_progress_per_case_and_artifacts_are_readable(zoo_client, zoo_workspace):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    result = await zoo_client.call_tool(
        "check_numerics",
        {
            "kernel": "vector_add",
            "shapes": [{"N": 32}, {"N": 48}],
            "dtypes": ["float32"],
            "trials": 1,
        },
        progress_callback=on_progress,
    )
    out = result.structured_content
    assert [m for _, _, m in seen] == [
        "reference",
        "case N=32 float32",
        "case N=48 float32",
        "case N=32 float32 padded_rows",  # the smallest shape, re-laid out
        "verdict pass",
    ]
    assert all(total == 4 for _, total, _ in seen)
    exp = out["experiment_id"]
    # the plot is drawn off the reply's path: read it as an agent does, which waits for it
    png = (await zoo_client.read_resource(f"artifact://{exp}/error_histogram.png")).contents[0]
    assert png.mime_type == "image/png" and base64.b64decode(png.blob)[:8] == b"\x89PNG\r\n\x1a\n"
    files = {p.name: p for p in (zoo_workspace / ".infra-agent" / "artifacts" / exp).iterdir()}
    worst = json.loads(files["worst_cases.json"].read_text())
    assert [c["case"] for c in worst] == [
        "N=32 float32",
        "N=48 float32",
        "N=32 float32 padded_rows",
    ] and worst[0]["worst"]["worst_index"]


async def test_output_dtype_follows_the_reference_not_the_inputs(zoo_client):
    # float16 inputs, float32 result (e.g. logits): the reference says so, on the meta device
    args = {
        "kernel": "vector_add",
        "reference": "def widen(x, y):\n    return x.float() + y.float()\n",
        "reference_entry": "widen",
        "shapes": [{"N": 64}],
        "dtypes": ["float16"],
        "trials": 1,
    }
    out = await call(
        zoo_client,
        "check_numerics",
        **args,
        source="def f(x, y):\n    return x.float() + y.float()\n",
        entry="f",
    )
    assert out["verdict"] == "pass" and out["findings"] == []
    narrow = await call(
        zoo_client, "check_numerics", **args, source="def f(x, y):\n    return x + y\n", entry="f"
    )
    assert "wrong_output" in [f["code"] for f in narrow["findings"]] and narrow["verdict"] == "fail"


JITTER = """
import random

import torch


def vector_add(x, y):
    # one ulp more at two elements drawn per call, as unordered atomics give: within tolerance,
    # not repeatable (two calls agree only if they draw the same pair: 1 in 8 million at N=4096)
    out = x + y
    up = torch.tensor(float("inf"), dtype=out.dtype)
    for i in random.SystemRandom().sample(range(out.numel()), 2):
        out[i] = torch.nextafter(out[i], up)
    return out
"""


async def test_a_nondeterministic_pass_says_so_in_its_summary(zoo_client):
    """The eval's nondeterminism task (issue 38): a warning does not fail the verdict, so an agent
    reading only the summary line saw a plain PASS."""
    out = await call(
        zoo_client,
        "check_numerics",
        kernel="vector_add",
        source=JITTER,
        entry="vector_add",
        shapes=[{"N": 4096}],
        dtypes=["float32"],
        trials=1,
        layouts=[],
    )
    codes = {f["code"]: f["severity"] for f in out["findings"]}
    assert out["verdict"] == "pass" and codes.get("nondeterministic") == "warning", out["summary"]
    assert "warnings: " in out["summary"] and "nondeterministic" in out["summary"]
