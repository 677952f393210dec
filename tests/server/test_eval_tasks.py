"""Issue 38: the eval's tasks as data (seeded variants, workspaces that load: kernel specs,
serving checkpoints and configs) and its grading by ground truth, read off recorded ledger
rows. No model and no tool runs here."""

from __future__ import annotations

import json
import re

import pytest

from infra_agent.kernels.workspace import load_workspace
from infra_agent.server.eval.episode_tasks import DEPLOY_FILE, KDA_GPU_V, PREFILL_THREAD
from infra_agent.server.eval.grade import grade, host_measured
from infra_agent.server.eval.kernel_tasks import FAMILIES
from infra_agent.server.eval.runner import TaskRun, score
from infra_agent.server.eval.serving_tasks import DECOYS, MAX_POSITIONS
from infra_agent.server.eval.submit import Input as Submission
from infra_agent.server.eval.tasks import Cause, families, generate_tasks
from infra_agent.serving.engine.__main__ import parser
from infra_agent.tools.serve_benchmark.judge import attribution
from infra_agent.tools.serve_benchmark.schema import Workload

ONE_VARIANT = {"episode.kv_gil"}  # an engine and a profile a run: one variant, drawn by no seed


def test_a_seed_draws_the_same_tasks_and_another_seed_other_variants():
    first, again = generate_tasks(7), generate_tasks(7)
    assert [t.model_dump() for t in first] == [t.model_dump() for t in again]
    assert [t.id for t in first] == list(families())
    assert [t.id for t in first][: len(FAMILIES)] == [f"kernel.{name}" for name in FAMILIES]
    assert {t.category for t in first} == {"kernel", "serving", "episode"}
    variants = {
        seed: {
            t.id: (t.params["kernel"], t.truth.location.impl, str(t.params["shapes"]))
            for t in generate_tasks(seed)
            if t.category != "serving" and t.id not in ONE_VARIANT
        }
        for seed in range(6)
    }
    for task_id in variants[0]:
        assert len({variants[s][task_id] for s in variants}) > 1, task_id  # the seed varies it
    for task_id in ("kernel.stride", "episode.tp_partition", "episode.kda_recompute"):
        buggy = {variants[s][task_id][1] for s in variants}
        assert len(buggy) > 1, task_id  # which impl carries the bug is drawn too
    first = [t for t in first if t.category != "serving"]  # (serving tasks: tests below)
    controls = [t for t in first if t.control]
    assert len(controls) >= 4 and all(
        t.truth.cause == Cause.none and t.truth.location.impl is None for t in controls
    )
    assert all(
        not t.control and t.truth.location.impl in t.params["impls"]
        for t in first
        if t.id not in {c.id for c in controls} | ONE_VARIANT
    )


def test_only_selects_tasks_and_an_unknown_name_says_which_exist():
    assert [t.id for t in generate_tasks(0, ["kernel.stride", "tail_mask"])] == [
        "kernel.stride",
        "kernel.tail_mask",
    ]
    with pytest.raises(ValueError, match="unknown task.*kernel.nope.*the tasks are kernel.stride"):
        generate_tasks(0, ["kernel.nope"])


@pytest.mark.parametrize("seed", [0, 1])
def test_every_task_builds_a_workspace_whose_spec_loads(tmp_path, seed):
    for task in generate_tasks(seed):
        if task.id in ONE_VARIANT or task.category == "serving":
            continue  # a deployment or a serving config, not a kernel: the tests below
        root = task.build_workspace(tmp_path / str(seed) / task.family)
        ws = load_workspace(root)
        assert not ws.errors and list(ws.kernels) == [task.params["kernel"]], ws.errors
        spec = ws.kernels[task.params["kernel"]].spec
        assert list(spec.impls) == task.params["impls"]
        assert task.params["kernel"] in task.question and all(
            i in task.question for i in spec.impls
        )
        assert task.truth.cause.value not in task.question  # the question does not give it away


def test_the_gil_episode_plants_its_flags_in_the_file_its_question_launches(tmp_path):
    (task,) = generate_tasks(0, ["kv_gil"])
    root = task.build_workspace(tmp_path / "ws")
    assert (root / "tiny" / "config.json").is_file() and not load_workspace(root).kernels
    launch = re.search(r"'extra_args': \[([^]]*)\]", task.question.replace('"', "'")).group(1)
    assert launch == f"'@/workspace/{DEPLOY_FILE}'"  # the engine sandbox's view of the workspace
    flags = parser().parse_args([f"@{root / DEPLOY_FILE}"])
    assert flags.disaggregated and not flags.comm_releases_gil  # the native call keeps the GIL
    assert flags.kv_transfer_impl == "bytes"
    assert "GIL" not in task.question and "gil" not in task.question.lower()
    assert task.truth.cause == Cause.gil_held and task.truth.location.thread == PREFILL_THREAD


def _sources(root) -> dict[str, str]:
    return {p.name: p.read_text() for p in root.rglob("*.py")}


@pytest.mark.parametrize("seed", [0, 1])
def test_the_kernel_episodes_plant_the_problem_in_one_impl_and_tell_no_story(tmp_path, seed):
    by_id = {t.id: t for t in generate_tasks(seed)}
    for task_id in ("episode.tp_partition", "episode.control_tp_partition"):
        task = by_id[task_id]
        files = _sources(task.build_workspace(tmp_path / task_id))
        impl = files[f"{task.params['kernel']}_triton.py"]
        three = {
            i for i in task.params["impls"] if _body(impl, task.params["kernel"], i, "split3=True")
        }
        want = set(task.params["impls"]) - {task.truth.location.impl}
        assert three == want, (three, want)  # the planted impl keeps TF32 operands; the rest 3xTF32
        assert f"num_parts={task.params['num_parts']}" in files["spec.py"]
    for task_id in ("episode.kda_recompute", "episode.control_kda"):
        task = by_id[task_id]
        files = _sources(task.build_workspace(tmp_path / task_id))
        impl = files[f"{task.params['kernel']}_triton.py"]
        assert f"VTILE_BLOCK_V = {task.params['block_v']}" in impl
        tiled = "for v0 in range(0, V, BLOCK_V)" in impl  # the loop every V tile runs
        assert tiled == (not task.control)
        if not task.control:
            assert task.truth.number == KDA_GPU_V / task.params["block_v"]
            tiles = {
                i
                for i in task.params["impls"]
                if _body(impl, task.params["kernel"], i, "triton.cdiv(V, block_v)")
            }
            assert tiles == {task.truth.location.impl}  # only the planted impl tiles V
    for task in by_id.values():
        if task.category != "episode":
            continue
        text = (
            "\n".join(_sources(tmp_path / task.id).values()) if task.id not in ONE_VARIANT else ""
        )
        for tell in ("#", '"""', "3xTF32", "recompute", "redundant", "episode", "vtiled", "fused"):
            assert tell not in text, (task.id, tell)  # the zoo's comments tell the story
        assert task.truth.cause.value not in task.question


def _entry(source: str, kernel: str, impl: str) -> str:
    """The body of the entry function `{kernel}_{impl}`."""
    start = source.index(f"def {kernel}_{impl}(")
    end = source.find("\ndef ", start + 1)
    return source[start : end if end > 0 else None]


def _body(source: str, kernel: str, impl: str, needle: str) -> bool:
    return needle in _entry(source, kernel, impl)


# ---- grading, on ledger rows as the server records them ---------------------------------------


def _numerics(eid, impl, verdict, cases, codes=()):
    return {
        "id": eid,
        "tool": "check_numerics",
        "status": "ok",
        "kernel": "k",
        "arguments": {"kernel": "k", "impl": impl},
        "result": {
            "verdict": verdict,
            "candidate": f"k/{impl}",
            "cases": [
                {"verdict": v, "layout": layout, "dtype": dtype} for v, layout, dtype in cases
            ],
            "findings": [{"code": c} for c in codes],
        },
    }


def _task(family, seed=0):
    (task,) = generate_tasks(seed, [family])
    return task.model_copy(
        update={
            "truth": task.truth.model_copy(
                update={"location": task.truth.location.model_copy(update={"kernel": "k"})}
            )
        }
    )


def test_grading_needs_the_cause_the_place_and_evidence_that_shows_it():
    task = _task("stride")
    impl, other = (
        task.truth.location.impl,
        next(i for i in task.params["impls"] if i != task.truth.location.impl),
    )
    ledger = {
        "e1": _numerics(
            "e1", impl, "fail", [("pass", "as_made", "float32"), ("fail", "padded_rows", "float32")]
        ),
        "e2": _numerics(
            "e2",
            other,
            "pass",
            [("pass", "as_made", "float32"), ("pass", "padded_rows", "float32")],
        ),
    }
    right = Submission(cause=Cause.stride_assumption, kernel="k", impl=impl, experiment_ids=["e1"])
    g = grade(task, right, ledger)
    assert g.correct and g.identified and g.localized and g.evidence_ok and g.number_ok is None

    wrong_impl = grade(task, right.model_copy(update={"impl": other}), ledger)
    assert not wrong_impl.correct and wrong_impl.identified and not wrong_impl.localized
    unsupported = grade(task, right.model_copy(update={"experiment_ids": ["e2"]}), ledger)
    assert not unsupported.evidence_ok and "not " + impl in unsupported.notes[-1]
    invented = grade(
        task, right.model_copy(update={"experiment_ids": ["e1", "e99999-ffff"]}), ledger
    )
    assert not invented.evidence_ok and "not in this ledger" in invented.notes[-1]
    bare = grade(task, right.model_copy(update={"experiment_ids": []}), ledger)
    assert not bare.correct and "no experiment cited" in bare.notes[-1]
    # a failing check that fails as made is no evidence of a stride assumption
    as_made = {"e3": _numerics("e3", impl, "fail", [("fail", "as_made", "float32")])}
    assert not grade(task, right.model_copy(update={"experiment_ids": ["e3"]}), as_made).evidence_ok
    assert not grade(task, None, ledger).submitted


def test_a_control_is_right_only_as_none_with_a_passing_check():
    task = _task("control_stride")
    a, b = task.params["impls"]
    ledger = {
        "e1": _numerics("e1", a, "pass", [("pass", "as_made", "float32")]),
        "e2": _numerics("e2", b, "pass", [("pass", "as_made", "float32")]),
    }
    none = Submission(cause=Cause.none, kernel="k", experiment_ids=["e1", "e2"])
    g = grade(task, none, ledger)
    assert g.correct and g.localized is None
    found = Submission(
        cause=Cause.accumulation_precision, kernel="k", impl=a, experiment_ids=["e1"]
    )
    g = grade(task, found, ledger)
    assert not g.correct and not g.identified and not g.evidence_ok  # a pass shows no bug


def test_the_number_counts_within_its_tolerance():
    task = _task("unlaunchable")
    impl, warps = task.truth.location.impl, task.truth.number
    row = {
        "id": "e1",
        "tool": "compile_kernel",
        "status": "ok",
        "kernel": "k",
        "arguments": {"kernel": "k", "impl": impl, "target": "sm_90a"},
        "result": {"notes": ["op_kernel cannot launch on this target: its threads_per_block ..."]},
    }
    claim = Submission(
        cause=Cause.unlaunchable_config,
        kernel="k",
        impl=impl,
        config_key="num_warps",
        number=warps,
        experiment_ids=["e1"],
    )
    assert grade(task, claim, {"e1": row}).correct
    off = grade(task, claim.model_copy(update={"number": warps / 2}), {"e1": row})
    assert not off.correct and off.number_ok is False and "num_warps" in off.notes[0]
    no_key = grade(task, claim.model_copy(update={"config_key": None}), {"e1": row})
    assert no_key.localized is False
    # a compile called without impl= (the spec's default) is read by what its answer names
    row["arguments"].pop("impl")
    row["result"]["summary"] = f"sm_90a: op_kernel (k/{impl} at N=16777216 float32) 14 regs"
    assert grade(task, claim, {"e1": row}).evidence_ok
    row["result"]["summary"] = "sm_90a: op_kernel (k/other at N=16777216 float32) 14 regs"
    assert not grade(task, claim, {"e1": row}).evidence_ok


def test_nondeterminism_is_shown_by_the_finding_even_when_the_verdict_passes():
    task = _task("nondeterminism")
    impl = task.truth.location.impl
    row = _numerics(
        "e1", impl, "pass", [("pass", "as_made", "float32")], codes=["nondeterministic"]
    )
    claim = Submission(cause=Cause.nondeterminism, kernel="k", impl=impl, experiment_ids=["e1"])
    assert grade(task, claim, {"e1": row}).correct
    steady = _numerics("e2", impl, "pass", [("pass", "as_made", "float32")])
    assert not grade(
        task, claim.model_copy(update={"experiment_ids": ["e2"]}), {"e2": steady}
    ).evidence_ok
    # and a check that saw it is no evidence that nothing is wrong
    control = _task("control_elementwise")
    none = Submission(cause=Cause.none, kernel="k", experiment_ids=["e1"])
    assert not grade(control, none, {"e1": row}).evidence_ok


# ---- serving tasks ------------------------------------------------------------------------------


def serving_tasks(seed: int):
    return [t for t in generate_tasks(seed) if t.category == "serving"]


def _changed(task) -> set[str]:
    y, t = task.params["yesterday"], task.params["today"]
    return {k for k in {*y, *t} if y.get(k) != t.get(k)}


def test_serving_tasks_quote_two_configs_that_differ_where_the_truth_says():
    tasks = {seed: {t.family: t for t in serving_tasks(seed)} for seed in range(6)}
    assert set(tasks[0]) == {
        "max_num_seqs",
        "token_budget",
        "prefix_caching",
        "slow_kernel",
        "starved_client",
        "control_config",
    }
    decoys = {key for key, _ in DECOYS}
    for by_family in tasks.values():
        for task in by_family.values():
            key = task.truth.location.config_key
            for name in ("yesterday", "today", "traffic"):  # quoted as the files hold them
                assert f"{name}: {json.dumps(task.params[name])}" in task.question
            assert task.truth.cause.value not in task.question and "control" not in task.question
            if task.control:
                assert key is None and len(_changed(task)) == 1, task.params
                assert task.truth.cause == Cause.none and not task.truth.location.model_dump(
                    exclude_none=True
                )
            elif task.family == "starved_client":  # no config to blame: only a decoy changed
                assert key is None and not task.truth.location.model_dump(exclude_none=True)
                assert len(_changed(task)) == 1 and _changed(task) <= decoys, task.params
                assert task.params["neighbour"]["nice"] >= 0  # what the runner plants
            else:  # the planted key, and a decoy this traffic cannot feel
                assert key in _changed(task) and len(_changed(task) - {key}) == 1
                assert (_changed(task) - {key}) <= decoys, task.params
    for family in tasks[0]:  # the seed varies the configs and the traffic
        drawn = {json.dumps(tasks[s][family].params, sort_keys=True) for s in tasks}
        assert len(drawn) > 2, family
    # the same question for every family: it does not say which is the control
    templates = {t.question.split("yesterday:")[0] for t in tasks[0].values()}
    assert len(templates) == 1


def test_a_serving_controls_change_is_one_its_traffic_cannot_feel():
    """The control's truth, read off its numbers: every request fits in a batch slot, every
    step's prompt tokens in the token budget, every request in the model length."""
    for seed in range(12):
        (task,) = [t for t in serving_tasks(seed) if t.control]
        today, traffic = task.params["today"], task.params["traffic"]
        assert today["max_num_seqs"] >= traffic["num_requests"]
        assert today["max_num_batched_tokens"] >= traffic["num_requests"] * traffic["input_len"]
        assert today.get("max_model_len", MAX_POSITIONS) >= (
            traffic["input_len"] + traffic["output_len"]
        )


def test_every_serving_task_builds_a_checkpoint_and_its_configs(tmp_path):
    from infra_agent.serving.adapters import EngineArgs
    from infra_agent.serving.engine.config import ModelConfig

    for task in serving_tasks(0):
        root = task.build_workspace(tmp_path / task.family)
        model = ModelConfig.from_checkpoint(root / "tiny")
        traffic = task.params["traffic"]
        longest = traffic.get("prefix_len", 0) + traffic["input_len"] + traffic["output_len"]
        assert model.max_position_embeddings >= longest
        assert (root / "tiny" / "tokenizer.json").is_file()
        for name in ("yesterday", "today", "traffic"):
            assert json.loads((root / "serve" / f"{name}.json").read_text()) == task.params[name]
        for name in ("yesterday", "today"):  # launch_serve takes them as they are
            EngineArgs.model_validate(task.params[name])
        Workload.model_validate(traffic)


def test_the_slow_kernel_task_ships_the_kernel_its_engine_runs_at_the_engines_shapes(tmp_path):
    """Both impls compute the norm the model's reference does (the fault is speed alone); the
    engine resolves today's and yesterday's kernels= to them; the spec's shapes are the rows a
    prefill step (every prompt at once) and a decode step hand the op."""
    import torch

    from infra_agent.serving.engine.ops import KernelOps

    for seed in range(3):
        task = _serving_task("slow_kernel", seed)
        root = task.build_workspace(tmp_path / str(seed))
        kernel = task.params["kernel"]
        spec = load_workspace(str(root)).kernels["rmsnorm"].spec
        assert set(spec.impls) == {kernel["fast"], kernel["slow"]}
        traffic = task.params["traffic"]
        assert spec.shapes["cpu"] == (
            {"M": traffic["num_requests"] * traffic["input_len"], "N": 64},
            {"M": traffic["num_requests"], "N": 64},
        )
        assert task.truth.location.model_dump(exclude_none=True) == {
            "config_key": "kernels",
            "kernel": "rmsnorm",
            "impl": kernel["slow"],
        }
        x, w = torch.randn(37, 64), torch.rand(64) + 0.5
        want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        for name in ("yesterday", "today"):
            ops = KernelOps(task.params[name]["kernels"], torch.device("cpu"), str(root), 1e-6)
            impl = task.params[name]["kernels"]["rmsnorm"]
            assert ops.choices["rmsnorm"] == f"rmsnorm:{impl}"
            torch.testing.assert_close(ops.rmsnorm(x, w), want)


# ---- grading serving claims, on ledger rows as the server records them ------------------------

QUEUE = {"queue_ms": 10.0, "prefill_ms": 20.0, "decode_ms": 40.0, "kv_transfer_ms": None}


def _bench_rows(task, this: dict, base: dict, spread: float, hit=(0.0, 0.0)) -> dict[str, dict]:
    """Two launch_serve rows (yesterday's, today's config) and a serve_benchmark of today's
    against yesterday's whose findings are judge.attribution's own words for these numbers."""
    metrics = {**this, "prefix_cache_hit_rate": hit[0]}
    baseline = {**base, "prefix_cache_hit_rate": hit[1]}
    widen = {k: [v * (1 - spread), v * (1 + spread)] for k, v in this.items() if v is not None}
    base_widen = {k: [v * (1 - spread), v * (1 + spread)] for k, v in base.items() if v}
    _, findings = attribution(metrics, baseline, "ttft", widen, base_widen)
    launches = {
        f"l{i}": {
            "id": f"l{i}",
            "tool": "launch_serve",
            "status": "ok",
            "arguments": {"engine": "builtin", "args": task.params[name]},
            "result": {"handle": f"h{i}"},
        }
        for i, name in ((1, "yesterday"), (2, "today"))
    }
    bench = {
        "id": "b1",
        "tool": "serve_benchmark",
        "status": "ok",
        "arguments": {"handle": "h2", "baseline_handle": "h1", "workload": {}},
        "result": {
            "metrics": metrics,
            "baseline_metrics": baseline,
            "spread": widen,
            "baseline_spread": base_widen,
            "findings": findings,
            "summary": "12 requests, 3 repeats: 410 tok/s",  # 'tok/s' names no kernel/impl
        },
    }
    return {**launches, "b1": bench}


def _serving_task(family, seed=0):
    (task,) = [t for t in serving_tasks(seed) if t.family == family]
    return task


def test_a_queueing_claim_needs_the_queue_named_and_the_engines_to_differ_in_its_key():
    task = _serving_task("max_num_seqs")
    base = {"ttft_p50": 50.0, "tpot_p50": 5.0, **QUEUE}
    queued = {**base, "ttft_p50": 400.0, "queue_ms": 360.0}
    ledger = _bench_rows(task, queued, base, spread=0.05)
    assert "the queue phase moved most" in ledger["b1"]["result"]["findings"][0]
    claim = Submission(
        cause=Cause.queueing_max_num_seqs, config_key="max_num_seqs", experiment_ids=["b1"]
    )
    g = grade(task, claim, ledger)
    assert g.correct and g.localized and g.evidence_ok, g.notes
    # the decoy key changed too, but it is not the truth's
    (decoy,) = _changed(task) - {"max_num_seqs"}
    wrong = grade(task, claim.model_copy(update={"config_key": decoy}), ledger)
    assert not wrong.correct and not wrong.localized and wrong.evidence_ok
    # a key both engines share is not the change the benchmark compared
    same = grade(task, claim.model_copy(update={"config_key": "max_num_batched_tokens"}), ledger)
    assert not same.evidence_ok and "same max_num_batched_tokens" in same.notes[-1]
    # the launch rows missing: the benchmark cannot show which configs it compared
    alone = grade(task, claim, {"b1": ledger["b1"]})
    assert not alone.evidence_ok and "not in this ledger" in alone.notes[-1]
    # a regression in prefill names no queue: no evidence of queueing
    prefill = _bench_rows(task, {**base, "ttft_p50": 400.0, "prefill_ms": 370.0}, base, 0.05)
    assert "the prefill phase moved most" in prefill["b1"]["result"]["findings"][0]
    assert not grade(task, claim, prefill).evidence_ok


def test_a_regression_within_noise_supports_none_and_no_cause():
    task = _serving_task("control_config")
    base = {"ttft_p50": 50.0, "tpot_p50": 5.0, **QUEUE}
    flat = _bench_rows(task, {**base, "ttft_p50": 58.0, "queue_ms": 14.0}, base, spread=0.2)
    none = Submission(cause=Cause.none, experiment_ids=["b1"])
    g = grade(task, none, flat)
    assert g.correct and g.localized is None, g.notes
    (key,) = _changed(task)
    blamed = Submission(cause=Cause.queueing_max_num_seqs, config_key=key, experiment_ids=["b1"])
    g = grade(task, blamed, flat)
    assert not g.identified and not g.evidence_ok and "no regression shown" in g.notes[-1]
    # 1.16x beyond noise is still not a regression (the 1.2x floor), 2x is
    tight = _bench_rows(task, {**base, "ttft_p50": 58.0}, base, spread=0.01)
    assert grade(task, none, tight).evidence_ok
    doubled = _bench_rows(task, {**base, "ttft_p50": 100.0}, base, spread=0.01)
    assert not grade(task, none, doubled).evidence_ok
    # an A/A (today's engine against itself) shows nothing about the change
    flat["b1"]["arguments"]["baseline_handle"] = "h2"
    aa = grade(task, none, flat)
    assert not aa.evidence_ok and "with itself" in aa.notes[-1]
    # a benchmark without a baseline compares nothing
    doubled["b1"]["result"]["baseline_metrics"] = None
    assert "without a baseline" in grade(task, none, doubled).notes[-1]


def test_prefix_caching_off_is_shown_by_the_hit_rate_falling_with_the_regression():
    task = _serving_task("prefix_caching")
    base = {"ttft_p50": 60.0, "tpot_p50": 5.0, **QUEUE}
    slow = {**base, "ttft_p50": 200.0, "prefill_ms": 150.0}
    claim = Submission(
        cause=Cause.prefix_caching_off, config_key="enable_prefix_caching", experiment_ids=["b1"]
    )
    assert grade(task, claim, _bench_rows(task, slow, base, 0.05, hit=(0.0, 0.8))).correct
    warm_both = grade(task, claim, _bench_rows(task, slow, base, 0.05, hit=(0.8, 0.8)))
    assert not warm_both.evidence_ok and "hit rate 0.8 -> 0.8" in warm_both.notes[-1]


def _microbench(eid, impl, baseline, verdict, ratio):
    return {
        "id": eid,
        "tool": "microbench",
        "status": "ok",
        "kernel": "rmsnorm",
        "arguments": {"kernel": "rmsnorm", "impl": impl, "baseline": baseline},
        "result": {
            "verdict": verdict,
            "shapes": [{"ratio": ratio, "verdict": verdict, "baseline": {"median_ms": 0.1}}],
        },
    }


def test_a_slow_kernel_claim_rests_on_a_microbench_that_found_todays_impl_slower():
    task = _serving_task("slow_kernel")
    slow, fast = task.params["kernel"]["slow"], task.params["kernel"]["fast"]
    claim = Submission(
        cause=Cause.slow_kernel,
        config_key="kernels",
        kernel="rmsnorm",
        impl=slow,
        experiment_ids=["m1"],
    )
    ledger = {"m1": _microbench("m1", slow, fast, "slower", 141.0)}
    g = grade(task, claim, ledger)
    assert g.correct and g.localized, g.notes
    assert "141x" in g.citations[0].why
    # faster or undecided shows nothing slow; nor does a timing of another impl, or of one alone
    for verdict in ("faster", "inconclusive"):
        assert not grade(
            task, claim, {"m1": _microbench("m1", slow, fast, verdict, 1.0)}
        ).evidence_ok
    other = grade(task, claim, {"m1": _microbench("m1", fast, slow, "slower", 1.3)})
    assert not other.evidence_ok and f"impl {fast}" in other.notes[-1]
    alone = _microbench("m1", slow, None, "measured", None)
    alone["result"]["shapes"][0]["baseline"] = None
    assert "without a baseline" in grade(task, claim, {"m1": alone}).notes[-1]
    # the right evidence, the wrong place: the decoy key, or the fast impl
    (decoy,) = _changed(task) - {"kernels"}
    assert not grade(task, claim.model_copy(update={"config_key": decoy}), ledger).localized
    assert not grade(task, claim.model_copy(update={"impl": fast}), ledger).correct
    # a serve_benchmark whose attribution names a step phase supports it too
    base = {"ttft_p50": 40.0, "tpot_p50": 5.0, **QUEUE}
    rows = _bench_rows(task, {**base, "ttft_p50": 90.0, "prefill_ms": 70.0}, base, spread=0.05)
    assert grade(task, claim.model_copy(update={"experiment_ids": ["b1"]}), rows).evidence_ok


def _starved_rows(task, findings: list[str]) -> dict[str, dict]:
    base = {"ttft_p50": 50.0, "tpot_p50": 5.0, **QUEUE}
    rows = _bench_rows(task, {**base, "ttft_p50": 52.0}, base, spread=0.2)
    rows["b1"]["result"]["findings"] += findings
    return rows


STARVED = (
    "client_starved: the load generator waited 205 ms for a CPU during a 435 ms run (47%, "
    "median repeat of 3): it read the engine's output late"
)
GAP = (
    "client_engine_gap: the client's TTFT p50 315.6 ms lies 215.6 ms above the engine's own "
    "(p50 92.5 ms, in its histogram bucket 80-100 ms; median repeat of 5): the time is spent ..."
)


def test_a_starved_client_claim_rests_on_the_benchmarks_own_client_starved_finding():
    """The claim: the load generator, not the engine, set the reading. Its evidence is the
    benchmark's own account of the generator waiting for a CPU, on either side; a client TTFT
    above the engine's alone is not (the engine's own HTTP layer lies in that gap too)."""
    task = _serving_task("starved_client")
    claim = Submission(cause=Cause.starved_client, experiment_ids=["b1"])
    g = grade(task, claim, _starved_rows(task, [STARVED]))
    assert g.correct and g.localized and g.evidence_ok, g.notes
    assert "waited 205 ms for a CPU during a 435 ms run (47%" in g.citations[0].why
    on_baseline = STARVED.replace(": ", ": on the baseline engine, ", 1)
    assert grade(task, claim, _starved_rows(task, [on_baseline])).evidence_ok
    gap_only = grade(task, claim, _starved_rows(task, [GAP]))
    assert not gap_only.evidence_ok and "no client_starved finding" in gap_only.notes[-1]
    # the same benchmark shows no regression, so it clears the config; "none" is still wrong
    none = grade(task, Submission(cause=Cause.none, experiment_ids=["b1"]), _starved_rows(task, []))
    assert none.evidence_ok and not none.identified and not none.correct
    # blaming the decoy: wrong cause, and the benchmark shows no regression from it
    (decoy,) = _changed(task)
    blamed = Submission(cause=Cause.queueing_max_num_seqs, config_key=decoy, experiment_ids=["b1"])
    assert not grade(task, blamed, _starved_rows(task, [STARVED])).correct


def test_a_run_whose_benchmark_measured_the_host_is_void_and_left_out_of_the_scores():
    """With nothing planted beside the agent, a benchmark that said its load generator waited
    for a CPU (client_starved) measured the host, not the task: the run is
    graded, then left out of every score, right or wrong (leaving out only the wrong ones would
    lift a score by the host's noise). Where the task plants the busy neighbour, that is the fault
    to find, never a reason to void."""
    task = _serving_task("max_num_seqs")
    assert host_measured(task, _starved_rows(task, [])) is None
    assert host_measured(task, _starved_rows(task, [STARVED])).startswith("b1: client_starved:")
    assert host_measured(task, _starved_rows(task, [GAP])) is None  # the engine's HTTP layer too
    starved_task = _serving_task("starved_client")
    assert host_measured(starved_task, _starved_rows(starved_task, [STARVED])) is None

    claim = Submission(cause=Cause.none, experiment_ids=["b1"])

    def run(number: int, findings: list[str]) -> TaskRun:
        ledger = _starved_rows(task, findings)
        return TaskRun(
            task_id=task.id,
            category=task.category,
            control=task.control,
            run=number,
            grade=grade(task, claim, ledger),
            submission=claim.model_dump(),
            stop_reason="answered",
            tool_calls=3,
            model_turns=4,
            tokens=None,
            wall_s=10.0 * (number + 1),
            agent_run_id="r",
            folder=".",
            host_measured=host_measured(task, ledger),
        )

    quiet, host = run(0, []), run(1, [STARVED])
    assert not quiet.grade.correct and not host.grade.correct  # "none" is the wrong cause here
    both = score([quiet, host])
    assert (both.num_runs, both.void_runs, both.correct_per_run) == (1, 1, [0.0])
    assert both.mean_wall_s == 10.0  # the void run's cost is not in the means either
    alone = score([host])
    assert (alone.num_runs, alone.void_runs, alone.correct, alone.correct_per_run) == (
        0,
        1,
        0.0,
        [],
    )


# ---- the episodes' evidence -----------------------------------------------------------------------


def _partitioned(eid, impl, verdict, partitioned_rel_l2, partition=True):
    row = _numerics(eid, impl, verdict, [(verdict, "as_made", "float32")])
    case = row["result"]["cases"][0]
    case["tolerance_rel_l2"] = 1e-5
    case["partition"] = (
        {
            "num_parts": 4,
            "partitioned_vs_reference_rel_l2": partitioned_rel_l2,
            "unpartitioned_vs_reference_rel_l2": partitioned_rel_l2,
            "partitioned_vs_unpartitioned_rel_l2": 7e-8,
        }
        if partition
        else None
    )
    return row


def test_partition_numerics_is_shown_by_a_failing_partitioned_check():
    task = _task("tp_partition")
    impl = task.truth.location.impl
    claim = Submission(cause=Cause.partition_numerics, kernel="k", impl=impl, experiment_ids=["e1"])
    shards = {"e1": _partitioned("e1", impl, "fail", 7.8e-4)}  # README: TF32 shards, 78x
    g = grade(task, claim, shards)
    assert g.correct, g.notes
    assert "4 ranks' combined result misses the reference" in g.citations[0].why
    # the same failure without a partitioned run shows nothing about the split
    whole = {"e1": _partitioned("e1", impl, "fail", 7.8e-4, partition=False)}
    assert not grade(task, claim, whole).evidence_ok
    # nor does a partitioned run within the tolerance (the 3xTF32 impl: 3.8e-7)
    fine = {"e1": _partitioned("e1", impl, "pass", 3.8e-7)}
    assert not grade(task, claim, fine).evidence_ok
    assert not grade(
        task, claim.model_copy(update={"cause": Cause.accumulation_precision}), shards
    ).correct


def _compile_against(eid, impl, ratio, trips):
    return {
        "id": eid,
        "tool": "compile_kernel",
        "status": "ok",
        "kernel": "k",
        "arguments": {"kernel": "k", "impl": impl, "target": "sm_90a", "baseline": "e0"},
        "result": {
            "notes": [],
            "kernels": [{"loops": [{"trip_count": trips, "source": "k_triton.py:61"}]}],
            "diff": [
                {
                    "field": "executed_estimate.per_output.ffma",
                    "before": 261.0,
                    "after": 261.0 * ratio,
                    "ratio": ratio,
                }
            ],
        },
    }


def test_redundant_recompute_is_shown_by_executed_work_per_output_against_a_baseline():
    task = _task("kda_recompute")
    impl, tiles = task.truth.location.impl, task.truth.number
    claim = Submission(
        cause=Cause.redundant_recompute,
        kernel="k",
        impl=impl,
        number=tiles,
        experiment_ids=["e1"],
    )
    # the zoo's README at V = 128, BLOCK_V = 32: FFMA per output 261 -> 1372 (5.26x), a 4-trip loop
    g = grade(task, claim, {"e1": _compile_against("e1", impl, 5.26, int(tiles))})
    assert g.correct, g.notes
    assert "(5.26x), a loop of" in g.citations[0].why
    same = {"e1": _compile_against("e1", impl, 1.0, None)}  # the control: equal work, no loop
    assert not grade(task, claim, same).evidence_ok
    off = grade(
        task,
        claim.model_copy(update={"number": tiles + 1}),
        {"e1": _compile_against("e1", impl, 5.26, 4)},
    )
    assert off.number_ok is False and not off.correct


def _profile(eid, holder, waiter, code="gil_contention"):
    message = (
        f"`kv_transfer` overlapped `dispatch|combine` 4.5% of its 148 ms (running time); {holder} (4242) "
        f"held the GIL 54% of the window, its `dispatch|combine` ranges being open 49% of it while "
        f"{waiter} (4243) sat blocked on it 54% of its `kv_transfer` time"
    )
    return {
        "id": eid,
        "tool": "profile",
        "status": "ok",
        "kernel": None,
        "arguments": {"handle": "serve-1", "overlap": [["kv_transfer", "dispatch|combine"]]},
        "result": {"findings": [{"code": code, "message": message}]},
    }


def test_gil_held_is_shown_by_a_profile_that_names_the_holder():
    (task,) = generate_tasks(0, ["kv_gil"])
    claim = Submission(cause=Cause.gil_held, thread=PREFILL_THREAD, experiment_ids=["e1"])
    # profile names an engine's threads with their process, as it measured them
    ledger = {"e1": _profile("e1", f"engine/{PREFILL_THREAD}", "engine/kv-transfer")}
    g = grade(task, claim, ledger)
    assert g.correct and g.localized, g.notes
    as_profiled = grade(
        task, claim.model_copy(update={"thread": f"engine/{PREFILL_THREAD}"}), ledger
    )
    assert as_profiled.correct, as_profiled.notes
    # the waiter is not the thread to blame
    blamed = grade(task, claim.model_copy(update={"thread": "engine/kv-transfer"}), ledger)
    assert not blamed.correct and not blamed.localized and not blamed.evidence_ok
    # a profile that saw no GIL holder explain it is no evidence
    no_gil = {"e1": _profile("e1", f"engine/{PREFILL_THREAD}", "kv-transfer", code="no_overlap")}
    assert not grade(task, claim, no_gil).evidence_ok
