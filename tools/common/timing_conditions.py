"""Were two microbench calls timed under the same conditions, and what did each measure in-call?

A ratio of medians taken in two calls mixes the change with whatever moved between the calls:
the host's load, its clocks, another device. The one direct measure of that is code both calls
timed: when b's baseline arm reruns a's candidate (baseline=<a's id>), or an arm of each ran the
same code (code_identity.py) with the same launch config, their medians at one shape should
agree within their noise; when they do not, the host drifted by that factor and every cross-call
ratio carries it. An A/B interleaved inside one call (its `ratio` with a CI) saw both arms under
the same conditions: that is the evidence for the effect, and it leads.

Used by compare_experiments and the report's experiment pages, over ledger rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from ...kernels.code_identity import EXPERIMENT_ID, RanCode
from ...kernels.snapshots import Manifest

# A median moved by less than this is not called drift even when its noise is tiny (%).
DRIFT_MIN_PCT = 2.0
NOISE_SES = 3.0  # standard errors of the two medians together, as a 99.7% band


class TimingCondition(BaseModel):
    code: Literal["same_code_timed_differently", "same_code_timed_alike", "device_differs"] = Field(
        description="'same_code_timed_differently': code both calls timed (same function, "
        "same files byte for byte, same launch config) has medians further apart than their "
        "noise: the host drifted between the calls, and every cross-call ratio carries that "
        "factor; 'same_code_timed_alike': it agrees within noise; 'device_differs': the "
        "calls ran on different devices."
    )
    message: str = Field(description="The condition in words, with its numbers.")
    scope: str = Field(default="", description="Shape and dtype, e.g. 'N=1000 float32'.")
    arm_a: str = Field(default="", description="The arm of a that ran the shared code.")
    arm_b: str = Field(default="", description="The arm of b that ran it.")
    median_ms_a: float | None = Field(default=None, description="Its median in a, ms.")
    median_ms_b: float | None = Field(default=None, description="Its median in b, ms.")
    drift_ratio: float | None = Field(
        default=None,
        description="median_ms_b / median_ms_a, unitless: the factor every cross-call time "
        "ratio carries on top of the code's own effect (1: none).",
    )
    noise_pct: float | None = Field(
        default=None,
        description=f"{NOISE_SES:g} combined standard errors of the two medians, % of the median: "
        "a drift within this is noise.",
    )


class InCallAB(BaseModel):
    experiment_id: str = Field(description="The call whose in-call A/B this is.")
    scope: str = Field(description="Shape and dtype, e.g. 'N=1000 float32'.")
    candidate: str = Field(description="The candidate arm's code.")
    baseline: str = Field(description="The baseline arm's code.")
    ratio: float | None = Field(
        description="median(candidate) / median(baseline) in one job, interleaved: < 1 faster."
    )
    ci_low: float | None = Field(description="95% CI of the ratio, lower end.")
    ci_high: float | None = Field(description="95% CI of the ratio, upper end.")
    verdict: str = Field(description="That shape's A/B verdict: faster, slower, inconclusive...")

    @property
    def words(self) -> str:
        interval = ""
        if self.ci_low is not None and self.ci_high is not None:
            interval = f" [{self.ci_low:.3g}, {self.ci_high:.3g}]"
        ratio = "—" if self.ratio is None else f"{self.ratio:.3g}"
        return (
            f"{self.experiment_id}'s in-call A/B at {self.scope}: {self.candidate} / "
            f"{self.baseline} time ratio {ratio}{interval} ({self.verdict})"
        )


@dataclass(frozen=True)
class TimedCall:
    """What of a ledger row the conditions need."""

    id: str
    tool: str
    arguments: dict
    result: dict
    ran: dict[str, RanCode]
    devices: list[str]  # device fingerprints its work ran on (provenance.devices_ran_on)

    @classmethod
    def from_row(cls, row: dict, devices: list[str]) -> TimedCall:
        manifest = Manifest.from_json(row.get("code"))
        return cls(
            id=row["id"],
            tool=row["tool"],
            arguments=row.get("arguments") or {},
            result=row.get("result") or {},
            ran=manifest.ran if manifest is not None else {},
            devices=devices,
        )


# An experiment id -> its arguments (the launch config a baseline=<id> arm reran), or None.
ArgumentsOf = Callable[[str], "dict | None"]


def scope(shape: dict) -> str:
    sizes = " ".join(f"{k}={v}" for k, v in (shape.get("shape") or {}).items())
    return f"{sizes} {shape.get('dtype', '')}".strip()


def in_call_evidence(call: TimedCall) -> list[InCallAB]:
    """A microbench call's own A/B per shape (arms interleaved in one job)."""
    if call.tool != "microbench":
        return []
    found = []
    for shape in _shapes(call.result):
        cand, base = shape.get("candidate") or {}, shape.get("baseline")
        if not isinstance(base, dict):
            continue
        found.append(
            InCallAB(
                experiment_id=call.id,
                scope=scope(shape),
                candidate=str(cand.get("code", "candidate")),
                baseline=str(base.get("code", "baseline")),
                ratio=shape.get("ratio"),
                ci_low=shape.get("ci_low"),
                ci_high=shape.get("ci_high"),
                verdict=str(shape.get("verdict", "")),
            )
        )
    return found


def timing_conditions(
    a: TimedCall, b: TimedCall, arguments_of: ArgumentsOf
) -> list[TimingCondition]:
    """Device first, then every arm pair that ran the same code at the same shape: drifted or alike."""
    found: list[TimingCondition] = []
    if a.devices and b.devices and a.devices != b.devices:
        found.append(
            TimingCondition(
                code="device_differs",
                message=f"a ran on device {', '.join(a.devices)}, b on {', '.join(b.devices)}: "
                "cross-call ratios compare devices as well as code",
            )
        )
    if a.tool != "microbench" or b.tool != "microbench":
        return found
    shapes_a = {(scope(s)): s for s in _shapes(a.result)}
    for arm_a, arm_b in _shared_arms(a, b, arguments_of):
        for shape_b in _shapes(b.result):
            shape_a = shapes_a.get(scope(shape_b))
            if shape_a is None:
                continue
            shown = a.ran.get(arm_a) or b.ran.get(arm_b)
            name = shown.where if shown is not None else None
            condition = _compare_arm(arm_a, arm_b, shape_a, shape_b, a.id, b.id, name)
            if condition is not None:
                found.append(condition)
    drifted = [c for c in found if c.code == "same_code_timed_differently"]
    return (
        [c for c in found if c.code == "device_differs"]
        + drifted
        + [c for c in found if c.code == "same_code_timed_alike"]
    )


def _shapes(result: dict) -> list[dict]:
    return [s for s in result.get("shapes") or [] if isinstance(s, dict)]


def _arm_config(call: TimedCall, arm: str, arguments_of: ArgumentsOf) -> dict | None:
    if arm == "candidate":
        return call.arguments.get("launch_config") or None
    if call.arguments.get("baseline_launch_config"):
        return call.arguments["baseline_launch_config"]
    baseline = call.arguments.get("baseline")
    if isinstance(baseline, str) and EXPERIMENT_ID.match(baseline):
        recorded = arguments_of(baseline) or {}
        return recorded.get("launch_config") or None  # microbench reruns it with its config
    return None


def _shared_arms(a: TimedCall, b: TimedCall, arguments_of: ArgumentsOf) -> list[tuple[str, str]]:
    """(arm of a, arm of b) pairs that ran the same code under the same launch config."""
    pairs = []
    for arm_a in ("candidate", "baseline"):
        for arm_b in ("candidate", "baseline"):
            if _arm_config(a, arm_a, arguments_of) != _arm_config(b, arm_b, arguments_of):
                continue
            code_a, code_b = a.ran.get(arm_a), b.ran.get(arm_b)
            rerun = (
                arm_a == "candidate" and arm_b == "baseline" and b.arguments.get("baseline") == a.id
            )
            rerun = rerun or (
                arm_b == "candidate" and arm_a == "baseline" and a.arguments.get("baseline") == b.id
            )
            if rerun or (code_a is not None and code_b is not None and code_a.same_code(code_b)):
                pairs.append((arm_a, arm_b))
    return pairs


def _compare_arm(
    arm_a: str,
    arm_b: str,
    shape_a: dict,
    shape_b: dict,
    id_a: str,
    id_b: str,
    name: str | None,
) -> TimingCondition | None:
    ta, tb = shape_a.get(arm_a), shape_b.get(arm_b)
    if not isinstance(ta, dict) or not isinstance(tb, dict):
        return None
    ma, mb = ta.get("median_ms"), tb.get("median_ms")
    if not isinstance(ma, (int, float)) or not isinstance(mb, (int, float)) or ma <= 0 or mb <= 0:
        return None
    se_a, se_b = ta.get("median_rel_se_pct") or 0.0, tb.get("median_rel_se_pct") or 0.0
    noise_pct = NOISE_SES * math.hypot(se_a, se_b)
    drift = mb / ma
    band_pct = max(noise_pct, DRIFT_MIN_PCT)
    # in log space: x2 and x0.5 move alike, and a band over 100% stays a band
    drifted = abs(math.log(drift)) > math.log1p(band_pct / 100)
    where = scope(shape_b)
    same = (
        f"the same code ({name or ta.get('code', arm_a)}) ran {ma:.4g} ms as {id_a}'s {arm_a} and "
        f"{mb:.4g} ms as {id_b}'s {arm_b} at {where}"
    )
    if drifted:
        message = (
            f"{same} (x{drift:.3g}, beyond its noise of ±{band_pct:.3g}%): the host drifted "
            f"between the calls; a cross-call time ratio carries this x{drift:.3g} on top of the "
            "code's effect: read the in-call A/B instead"
        )
    else:
        message = f"{same} (x{drift:.3g}, within its noise of ±{band_pct:.3g}%)"
    return TimingCondition(
        code="same_code_timed_differently" if drifted else "same_code_timed_alike",
        message=message,
        scope=where,
        arm_a=arm_a,
        arm_b=arm_b,
        median_ms_a=ma,
        median_ms_b=mb,
        drift_ratio=float(f"{drift:.6g}"),
        noise_pct=float(f"{noise_pct:.4g}"),
    )
