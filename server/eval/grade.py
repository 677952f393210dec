"""Grading by ground truth, never by a model: a submission against its task's truth, and each
cited experiment against the task's own ledger.

    identified   the cause is the truth's
    localized    every location field the truth names matches (None for a control)
    number_ok    within the truth's tolerance (None when the truth has no number)
    evidence_ok  at least one id cited, every cited id is in this task's ledger, and one of
                 them supports the claim (rules below, read off the recorded results)
    correct      all of the above that apply
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from ...tools.serve_benchmark.engine_truth import CACHE_SPREAD, CLIENT_STARVED
from ...tools.serve_benchmark.judge import beyond_noise
from .submit import Input as Submission
from .tasks import Cause, EvalTask

LOW_PRECISION = ("float16", "bfloat16")
SUBJECT = re.compile(r"\b([A-Za-z_]\w*)/([A-Za-z_]\w*)\b")  # kernel/impl in an answer


class Citation(BaseModel):
    experiment_id: str
    exists: bool = Field(description="The id is in this task's ledger.")
    supports: bool = Field(description="Its recorded answer supports the submitted claim.")
    why: str = Field(description="What the recorded answer shows.")


class TaskGrade(BaseModel):
    submitted: bool
    identified: bool
    localized: bool | None
    number_ok: bool | None
    evidence_ok: bool
    correct: bool
    citations: list[Citation] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="Why a criterion failed.")


def grade(task: EvalTask, submission: Submission | None, ledger: dict[str, dict]) -> TaskGrade:
    """`ledger`: the task's experiments by id (their ledger rows, results parsed)."""
    if submission is None:
        return TaskGrade(
            submitted=False,
            identified=False,
            localized=None if task.control else False,
            number_ok=None if task.truth.number is None else False,
            evidence_ok=False,
            correct=False,
            notes=["no submit_diagnosis call: nothing to grade"],
        )
    truth, notes = task.truth, []
    identified = submission.cause == truth.cause
    if not identified:
        notes.append(f"cause {submission.cause.value}, truth {truth.cause.value}")
    localized = None
    if not task.control:
        wrong = [
            f"{name} {getattr(submission, name)!r}, truth {want!r}"
            for name, want in truth.location.model_dump().items()
            if want is not None and not _same(name, getattr(submission, name), want)
        ]
        localized = not wrong
        notes.extend(wrong)
    number_ok = None
    if truth.number is not None:
        number_ok = (
            submission.number is not None
            and abs(submission.number - truth.number) <= truth.number_tolerance
        )
        if not number_ok:
            notes.append(
                f"number {submission.number}, truth {truth.number} ({truth.number_meaning})"
            )
    citations = [cite(i, submission, ledger) for i in submission.experiment_ids]
    evidence_ok = (
        bool(citations) and all(c.exists for c in citations) and any(c.supports for c in citations)
    )
    if not evidence_ok:
        notes.append(
            "evidence: "
            + ("no experiment cited" if not citations else "; ".join(c.why for c in citations))
        )
    correct = identified and localized is not False and number_ok is not False and evidence_ok
    return TaskGrade(
        submitted=True,
        identified=identified,
        localized=localized,
        number_ok=number_ok,
        evidence_ok=evidence_ok,
        correct=correct,
        citations=citations,
        notes=notes,
    )


def cite(experiment_id: str, claim: Submission, ledger: dict[str, dict]) -> Citation:
    row = ledger.get(experiment_id)
    if row is None:
        return Citation(
            experiment_id=experiment_id,
            exists=False,
            supports=False,
            why=f"{experiment_id}: not in this ledger",
        )
    supports, why = supports_claim(row, claim, ledger)
    return Citation(
        experiment_id=experiment_id, exists=True, supports=supports, why=f"{experiment_id}: {why}"
    )


def supports_claim(
    row: dict, claim: Submission, ledger: dict[str, dict] | None = None
) -> tuple[bool, str]:
    """Whether one recorded experiment shows what the claim says, and what it shows (`ledger`:
    the task's, where the engines a serve_benchmark compared were launched)."""
    tool, result = row["tool"], row.get("result") or {}
    if tool == "serve_benchmark":
        if row["status"] != "ok":
            return False, f"{tool} ended in an error"
        return _serving_support(row, claim, ledger or {})
    kernel, impl = _subject(row)
    if claim.kernel and kernel != claim.kernel:
        return False, f"{tool} of kernel {kernel}, not {claim.kernel}"
    if claim.cause != Cause.none and claim.impl and impl != claim.impl:
        return False, f"{tool} of impl {impl}, not {claim.impl}"
    if row["status"] != "ok":
        return False, f"{tool} ended in an error"
    if tool == "check_numerics":
        return _numerics_support(result, claim.cause)
    if tool == "compile_kernel" and claim.cause == Cause.redundant_recompute:
        return _recompute_support(result)
    if tool == "profile" and claim.cause == Cause.gil_held:
        return _gil_support(result, claim.thread)
    if tool == "microbench" and claim.cause == Cause.slow_kernel:
        return _slower_support(result)
    if tool == "compile_kernel":
        cannot = [n for n in result.get("notes", []) if "cannot launch" in n]
        if claim.cause == Cause.unlaunchable_config:
            return bool(cannot), cannot[0] if cannot else "compile_kernel found it launchable"
        if claim.cause == Cause.none:
            return not cannot, "launchable on the target" if not cannot else cannot[0]
    return False, f"a {tool} answer does not bear on {claim.cause.value}"


def _slower_support(result: dict) -> tuple[bool, str]:
    """A microbench of the claimed impl against another that found it slower: every shape's
    interleaved pairs, the 95% CI of the time ratio above 1."""
    if not any(shape.get("baseline") for shape in result.get("shapes") or []):
        return False, "a microbench without a baseline compares nothing"
    ratios = ", ".join(
        f"{shape['ratio']:.3g}x"
        for shape in result.get("shapes") or []
        if shape.get("ratio") is not None
    )
    ok = result.get("verdict") == "slower"
    return ok, f"microbench verdict {result.get('verdict')} against its baseline ({ratios})"


def _numerics_support(result: dict, cause: Cause) -> tuple[bool, str]:
    cases = result.get("cases", [])
    failed = [c for c in cases if c.get("verdict") == "fail"]
    codes = {f.get("code") for f in result.get("findings", [])}
    if cause == Cause.none:
        ok = result.get("verdict") == "pass" and "nondeterministic" not in codes
        return ok, f"check_numerics {result.get('verdict')}" + (
            ", nondeterministic" if not ok else ""
        )
    if cause == Cause.nondeterminism:
        ok = "nondeterministic" in codes
        return ok, "two identical calls differ bitwise" if ok else "no nondeterministic finding"
    if not failed:
        return False, "check_numerics found no failing case"
    if cause == Cause.stride_assumption:
        laid_out = [c for c in failed if c.get("layout") != "as_made"]
        ok = bool(laid_out) or "layout_sensitive" in codes
        return ok, "fails on a non-default layout" if ok else "fails, but not by layout"
    if cause == Cause.tail_mask:
        ok = "unwritten_output" in codes or len(failed) < len(
            [c for c in cases if c.get("layout") == "as_made"]
        )
        return ok, "unwritten output / fails at some sizes only" if ok else "fails at every size"
    if cause == Cause.accumulation_precision:
        ok = all(c.get("dtype") in LOW_PRECISION for c in failed)
        return ok, "fails in low precision only" if ok else "fails in fp32 too"
    if cause == Cause.partition_numerics:
        missed = [
            c
            for c in failed
            if ((c.get("partition") or {}).get("partitioned_vs_reference_rel_l2") or 0)
            > (c.get("tolerance_rel_l2") or float("inf"))
        ]
        if not missed:
            ok = "partition_mismatch" in codes
            return ok, "partition_mismatch" if ok else "no partitioned run missed the reference"
        worst = max(missed, key=lambda c: c["partition"]["partitioned_vs_reference_rel_l2"])
        return True, (
            f"the {worst['partition']['num_parts']} ranks' combined result misses the reference: "
            f"rel L2 {worst['partition']['partitioned_vs_reference_rel_l2']:.3g} vs tolerance "
            f"{worst['tolerance_rel_l2']:.3g}"
        )
    return False, f"a failing check_numerics does not bear on {cause.value}"


RECOMPUTE_FROM = 2.0  # executed FFMA per output element over the baseline's that shows it


def _recompute_support(result: dict) -> tuple[bool, str]:
    """A compile against a baseline whose executed FFMA per output element grew RECOMPUTE_FROM
    times or more, with a loop that runs more than once per program (the work it repeats)."""
    grew = next(
        (
            d
            for d in result.get("diff") or []
            if d.get("field") == "executed_estimate.per_output.ffma"
        ),
        None,
    )
    loops = [
        loop
        for k in result.get("kernels") or []
        for loop in k.get("loops") or []
        if (loop.get("trip_count") or 0) > 1
    ]
    if grew is None or grew.get("ratio") is None:
        return False, "no executed-FFMA-per-output comparison with a baseline compile"
    ok = grew["ratio"] >= RECOMPUTE_FROM and bool(loops)
    return ok, (
        f"executed FFMA per output {grew['before']} -> {grew['after']} ({grew['ratio']:.3g}x)"
        + (
            f", a loop of {loops[0]['trip_count']} trips at {loops[0].get('source')}"
            if loops
            else ""
        )
    )


HOLDER = re.compile(r"([\w./-]+) \(\d+\) held the GIL")


def _same(field: str, got: str | None, want: str) -> bool:
    """A location field as the truth names it. A thread may carry the process it runs in, as
    profile names an engine's threads ('engine/prefill-worker'): the thread is its last part."""
    got, want = (got or "").lower(), want.lower()
    if field == "thread":
        got, want = got.rsplit("/", 1)[-1], want.rsplit("/", 1)[-1]
    return got == want


def _gil_support(result: dict, thread: str | None) -> tuple[bool, str]:
    """A profile whose gil_contention finding names `thread` as the GIL's holder."""
    holders = {
        m.group(1)
        for f in result.get("findings") or []
        if f.get("code") == "gil_contention"
        for m in HOLDER.finditer(f.get("message") or "")
    }
    if not holders:
        return False, "no gil_contention finding"
    ok = any(_same("thread", holder, thread or "") for holder in holders)
    return ok, f"gil_contention: {', '.join(sorted(holders))} held the GIL while another waited"


def _subject(row: dict) -> tuple[str | None, str | None]:
    """(kernel, impl) an experiment was about: its arguments, else what its result names
    (check_numerics' candidate 'kernel/impl'; compile_kernel's summary '(kernel/impl at ...')."""
    args = row.get("arguments") or {}
    kernel, impl = args.get("kernel") or row.get("kernel"), args.get("impl")
    result = row.get("result") or {}
    named = SUBJECT.search(f"{result.get('candidate') or ''} {result.get('summary') or ''}")
    if named and impl is None:
        kernel, impl = kernel or named.group(1), named.group(2)
    return kernel, impl


# ---- serving: a serve_benchmark against a baseline (serve_benchmark/judge.py's answer) -----------

REGRESSION = 1.2  # TTFT p50 at least this many times the baseline's, beyond noise, is a regression
NAMED_PHASE = re.compile(r"the (\w+) phase moved most")  # judge.attribution's words for a phase
SERVING_PHASES = {  # the phases each cause moves first (None: read off the prefix-cache hit rate)
    Cause.queueing_max_num_seqs: ("queue",),
    Cause.small_token_budget: ("queue", "prefill"),
    Cause.prefix_caching_off: None,
    Cause.slow_kernel: ("prefill", "decode"),  # a hot op in every step
}


def _serving_support(row: dict, claim: Submission, ledger: dict[str, dict]) -> tuple[bool, str]:
    """A regression (or, for 'none', its absence) between two different configs, the phase the
    tool's attribution named, and that the two engines it compared differ in the claimed key."""
    result = row.get("result") or {}
    if claim.cause == Cause.starved_client:  # about the client, with or without a baseline
        return _client_support(result)
    base, now = result.get("baseline_metrics"), result.get("metrics") or {}
    if not base or not base.get("ttft_p50") or now.get("ttft_p50") is None:
        return False, "a serve_benchmark without a baseline compares nothing"
    this, then = now["ttft_p50"], base["ttft_p50"]
    regressed = this >= REGRESSION * then and beyond_noise(
        this,
        then,
        (result.get("spread") or {}).get("ttft_p50"),
        (result.get("baseline_spread") or {}).get("ttft_p50"),
    )
    what = f"TTFT p50 {then:.1f} -> {this:.1f} ms"
    sides = [_engine_args(row, ledger, side) for side in ("this", "baseline")]
    if sides[0] is None or sides[1] is None:
        return False, "the configs it compared are not in this ledger (launch_serve rows)"
    if sides[0] == sides[1]:
        return False, "it compared one config with itself (an A/A), not the change"
    if claim.cause == Cause.none:
        return not regressed, what + (" beyond noise" if regressed else ": no regression")
    if claim.cause not in SERVING_PHASES:
        return False, f"a serve_benchmark does not bear on {claim.cause.value}"
    if not regressed:
        return False, f"{what}: not {REGRESSION:g}x and beyond noise, no regression shown"
    key = claim.config_key
    if key and sides[0].get(key) == sides[1].get(key):
        return False, f"the two engines it compared have the same {key}"
    phases = SERVING_PHASES[claim.cause]
    if phases is None:
        hit, base_hit = now.get("prefix_cache_hit_rate"), base.get("prefix_cache_hit_rate")
        ok = hit is not None and base_hit is not None and base_hit - hit > CACHE_SPREAD
        return ok, f"{what}; prefix-cache hit rate {base_hit} -> {hit}"
    named = NAMED_PHASE.findall(" ".join(result.get("findings") or []))
    ok = any(p in phases for p in named)
    return ok, f"{what}; phase named: {', '.join(named) or 'none'}"


def host_measured(task: EvalTask, ledger: dict[str, dict]) -> str | None:
    """Why a task run measured the host, not its task: nothing was planted beside the agent's
    load generator, yet a serve_benchmark it ran said the generator waited for a CPU for much of
    its runs (client_starved, either side). Beside two CPU hogs that happened in serving tasks,
    and the answers followed those numbers. A client TTFT above the engine's own alone
    (client_engine_gap) is not enough: on an idle host 5 of 6 serving tasks had one (the engine's
    own HTTP thread lies in that gap), as for the starved-client claim's evidence. None where the
    task plants the neighbour (the starved client is then the fault to find) or no benchmark
    said so."""
    if "neighbour" in task.params:
        return None
    for row in ledger.values():
        result = row.get("result")
        if row.get("tool") != "serve_benchmark" or not isinstance(result, dict):
            continue
        said = _starved_findings(result)
        if said:
            return f"{row['id']}: {said[0][:240]}"
    return None


def _starved_findings(result: dict) -> list[str]:
    """A serve_benchmark result's client_starved findings (engine_truth.py), either side."""
    return [f for f in result.get("findings") or [] if f.startswith(f"{CLIENT_STARVED}:")]


def _client_support(result: dict) -> tuple[bool, str]:
    """A serve_benchmark whose own check (engine_truth.py's client_starved, on either side)
    found its load generator waiting for a CPU for much of its runs: the reading is the client's
    wait. A client TTFT above the engine's alone is not (the engine's own HTTP layer is in it)."""
    starved = _starved_findings(result)
    if not starved:
        return False, "no client_starved finding: the load generator got its CPU"
    return True, starved[0].split("): ", 1)[0] + ")"


def _engine_args(row: dict, ledger: dict[str, dict], side: str) -> dict | None:
    """The engine arguments one side of a serve_benchmark ran with: a launch_serve's (by its
    handle), the call's own (engine=), or a recorded baseline experiment's engine."""
    args = row.get("arguments") or {}
    if side == "baseline" and args.get("baseline"):
        earlier = ledger.get(args["baseline"])
        return None if earlier is None else _engine_args(earlier, ledger, "this")
    handle = args.get("handle") if side == "this" else args.get("baseline_handle")
    if handle is None:
        return args.get("args") if side == "this" and args.get("engine") else None
    for other in ledger.values():
        if other["tool"] == "launch_serve" and (other.get("result") or {}).get("handle") == handle:
            return (other.get("arguments") or {}).get("args") or {}
    return None
