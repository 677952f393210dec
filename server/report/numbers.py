"""The one number a timeline row shows per experiment, and the claims the summary lists.

Per tool, the number that answers the call's question: microbench's time ratio against its
baseline with the 95% CI (or the median time without a baseline), serve_benchmark's first
criterion with its spread over repeats, check_numerics' failed cases, compile_kernel's
registers, a sweep's winner; else the first numeric expect comparison with its interval.

A microbench A/B is one of two things. A change: the candidate is the code an earlier
experiment ran (baseline=<its id>, the same function of the same file), edited since: what got
better or worse because of a change to the stack. A comparison: two alternatives timed side by
side (an impl against the reference or another impl, one impl under two launch configs, two
files): what was merely compared, however large the ratio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...kernels.code_identity import EXPERIMENT_ID, RanCode


@dataclass(frozen=True)
class KeyNumber:
    label: str  # what the number is, with its unit and scope
    value: float | str
    low: float | None = None  # interval, when the number carries uncertainty
    high: float | None = None

    @property
    def text(self) -> str:
        value = fmt(self.value)
        if self.low is not None and self.high is not None:
            return f"{value} [{fmt(self.low)}, {fmt(self.high)}]"
        return value


Relation = Literal["change", "comparison"]


@dataclass(frozen=True)
class Claim:
    """A speed difference this experiment proved: the 95% CI of the time ratio excludes 1.
    'improvement'/'regression': because of a change to the code; 'comparison': between two
    alternatives timed side by side (neither is a change to the stack)."""

    kind: Literal["improvement", "regression", "comparison"]
    experiment_id: str
    tool: str
    kernel: str | None
    scope: str  # the shape, e.g. 'N=1000 float32'
    ratio: float  # candidate / baseline time: < 1 faster
    ci_low: float
    ci_high: float
    candidate: str = "candidate"  # the arms' code, as microbench names them
    baseline: str = "baseline"

    @property
    def faster(self) -> bool:
        return self.ratio < 1.0

    @property
    def words(self) -> str:
        interval = f"time ratio {fmt(self.ratio)}, 95% CI [{fmt(self.ci_low)}, {fmt(self.ci_high)}]"
        if self.kind == "comparison":
            return (
                f"{self.candidate} against {self.baseline}: {_how_much(self.ratio)} "
                f"({interval}) at {self.scope}"
            )
        return f"{_how_much(self.ratio)} ({interval}) at {self.scope}"


def _how_much(ratio: float) -> str:
    """Percent for modest changes; 'N times' where a percentage reads absurdly (42114% slower)."""
    if ratio >= 2.0:
        return f"{ratio:.3g} times as slow"
    if 0 < ratio <= 0.5:
        return f"{1.0 / ratio:.3g} times as fast"
    pct = abs(1.0 - ratio) * 100
    return f"{pct:.1f}% {'faster' if ratio < 1.0 else 'slower'}"


def fmt(value: object) -> str:
    """Numbers as people read them: 4 significant digits; anything else as text."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—" if value is None else str(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}"


def key_number(tool: str, result: dict) -> KeyNumber | None:
    by_tool = {
        "microbench": _microbench,
        "serve_benchmark": _serve_benchmark,
        "check_numerics": _check_numerics,
        "compile_kernel": _compile_kernel,
        "sweep_kernel": _sweep_kernel,
        "sweep_serve": _sweep_serve,
    }
    number = by_tool[tool](result) if tool in by_tool else None
    return number or _first_comparison(result.get("hypothesis_answer") or {})


def _scope(shape: dict) -> str:
    sizes = " ".join(f"{k}={v}" for k, v in (shape.get("shape") or {}).items())
    return f"{sizes} {shape.get('dtype', '')}".strip()


def _shapes(result: dict) -> list[dict]:
    return [s for s in result.get("shapes") or [] if isinstance(s, dict)]


def _microbench(result: dict) -> KeyNumber | None:
    shapes = _shapes(result)
    more = f" (+{len(shapes) - 1} shapes)" if len(shapes) > 1 else ""
    for shape in shapes:
        if shape.get("ratio") is not None:
            return KeyNumber(
                f"time ratio vs baseline (<1 faster) at {_scope(shape)}{more}",
                shape["ratio"],
                shape.get("ci_low"),
                shape.get("ci_high"),
            )
    if shapes and isinstance(shapes[0].get("candidate"), dict):
        median = shapes[0]["candidate"].get("median_ms")
        if median is not None:
            return KeyNumber(f"median ms at {_scope(shapes[0])}{more}", median)
    return None


def _serve_benchmark(result: dict) -> KeyNumber | None:
    number = _first_comparison(result.get("criteria") or {})
    if number is not None:
        return number
    metrics, spread = result.get("metrics") or {}, result.get("spread") or {}
    for name in ("ttft_p50", "output_throughput"):
        if metrics.get(name) is not None:
            low, high = (spread.get(name) or [None, None])[:2]
            return KeyNumber(f"{name} (median over repeats; [min, max])", metrics[name], low, high)
    return None


def _check_numerics(result: dict) -> KeyNumber | None:
    cases = [c for c in result.get("cases") or [] if isinstance(c, dict)]
    if not cases:
        return None
    failed = sum(1 for c in cases if c.get("verdict") == "fail")
    return KeyNumber("cases failed", f"{failed}/{len(cases)}")


def _compile_kernel(result: dict) -> KeyNumber | None:
    kernels = [k for k in result.get("kernels") or [] if isinstance(k, dict)]
    if kernels and kernels[0].get("registers_per_thread") is not None:
        return KeyNumber("registers per thread", kernels[0]["registers_per_thread"])
    return None


def _sweep_kernel(result: dict) -> KeyNumber | None:
    """The winner: the best config across shapes, else the first shape's winner."""
    best = result.get("best")
    if isinstance(best, dict) and best:
        config = ", ".join(f"{k}={v}" for k, v in best.items())
        median = result.get("best_geomean_ms")
        return KeyNumber(
            f"winner {config}: geometric-mean median ms across shapes",
            median if median is not None else config,
        )
    for shape in result.get("shapes") or []:
        if isinstance(shape, dict) and isinstance(shape.get("winner"), dict):
            config = ", ".join(f"{k}={v}" for k, v in shape["winner"].items())
            median = shape.get("winner_median_ms")
            return KeyNumber(
                f"winner {config} at {shape.get('shape')}: median ms",
                median if median is not None else config,
            )
    return KeyNumber("winner", "none survived") if result.get("configs") else None


def _sweep_serve(result: dict) -> KeyNumber | None:
    best = result.get("best")
    if not isinstance(best, str):
        return KeyNumber("winner", "none met the SLO") if result.get("configs") else None
    value = result.get("best_value")
    return KeyNumber(
        f"winner {best}: objective at its highest load meeting the SLO",
        value if value is not None else best,
    )


def _first_comparison(answer: dict) -> KeyNumber | None:
    for condition in answer.get("conditions") or []:
        for c in condition.get("comparisons") or []:
            left = c.get("left")
            if isinstance(left, (int, float)) and not isinstance(left, bool):
                low, high = (c.get("left_interval") or [None, None])[:2]
                scope = f" at {c['scope']}" if c.get("scope") else ""
                return KeyNumber(f"{c.get('comparison')}{scope}: left side", left, low, high)
    return None


def criteria_answer(tool: str, result: dict) -> str | None:
    """serve_benchmark's acceptance criteria over all its conditions; None when none were set."""
    criteria = result.get("criteria")
    if tool != "serve_benchmark" or not isinstance(criteria, dict):
        return None
    return criteria.get("answer") if criteria.get("conditions") else None


def ab_relation(arguments: dict, ran: dict[str, RanCode]) -> Relation | None:
    """What a microbench A/B is (see the module's doc); None without a baseline. baseline=<an
    experiment id> is the earlier version of the code unless the candidate is another function
    or file than the one that experiment ran (recorded since calls keep their roles)."""
    baseline = arguments.get("baseline")
    if not any(arguments.get(k) for k in ("baseline", "baseline_source", "baseline_path")):
        return None
    if not (isinstance(baseline, str) and EXPERIMENT_ID.match(baseline)):
        return "comparison"
    candidate, rerun = ran.get("candidate"), ran.get("baseline")
    if candidate is not None and rerun is not None and not candidate.same_entry(rerun):
        return "comparison"
    return "change"


def improvements_and_regressions(
    experiment_id: str, tool: str, kernel: str | None, result: dict, relation: Relation | None
) -> list[Claim]:
    """microbench's per-shape A/B verdicts 'faster' and 'slower' (the CI excludes 1): an
    improvement or regression when the A/B is a change, a comparison otherwise."""
    if tool != "microbench" or relation is None:
        return []
    claims = []
    for shape in _shapes(result):
        verdict = shape.get("verdict")
        ratio, low, high = (shape.get(k) for k in ("ratio", "ci_low", "ci_high"))
        if verdict not in ("faster", "slower") or ratio is None or low is None or high is None:
            continue
        kind: Literal["improvement", "regression", "comparison"] = (
            "comparison"
            if relation == "comparison"
            else "improvement"
            if verdict == "faster"
            else "regression"
        )
        arms = [str((shape.get(arm) or {}).get("code", arm)) for arm in ("candidate", "baseline")]
        claims.append(
            Claim(kind, experiment_id, tool, kernel, _scope(shape), ratio, low, high, *arms)
        )
    return claims
