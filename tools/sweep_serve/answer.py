"""From the climbs to the answer: per config its highest load meeting the SLO, the Pareto front
(tokens/s per user vs tokens/s in all, as `vllm bench sweep plot_pareto`), the best config by the
objective, the CSV rows and the plot's data."""

from __future__ import annotations

from collections import Counter

from ..common.sweep import mixed_devices, pareto_front
from .ladder import Climb
from .plan import Planned
from .schema import ConfigAnswer, FrontPoint, Input, Step


def config_answer(planned: Planned, climb: Climb, kind: str) -> ConfigAnswer:
    # a step kept out of the verdicts (warm cache, starved client, one wave, over-saturated)
    # is never a config's highest load
    met = [s for s in climb.steps if s.slo_met and s.counts]
    top: Step | None = met[-1] if met else None
    return ConfigAnswer(
        config=planned.config,
        label=planned.label,
        launch_id=climb.launch_id,
        steps=climb.steps,
        stopped=climb.stopped,
        complete=climb.complete,
        highest_load=top.load if top else None,
        goodput=top.goodput if top else None,
        goodput_interval=top.goodput_interval if top else None,
        output_throughput=top.output_throughput if top else None,
        output_throughput_interval=top.output_throughput_interval if top else None,
        output_throughput_per_user=top.output_throughput_per_user if top else None,
        findings=step_findings(climb.steps, kind),
    )


def step_findings(steps: list[Step], kind: str) -> list[str]:
    """Each step's findings and why it was kept out of the verdicts, 'at <load>: ...'."""
    unit = "in flight" if kind == "concurrency" else "req/s"
    out = []
    for s in steps:
        at = f"at {s.load:g} {unit}"
        out += [f"{at}: {f}" for f in s.findings]
        if s.set_aside:
            out.append(
                f"{at}: measured again: {', '.join(s.set_aside)} set aside (client_starved: "
                "the load generator waited for a CPU)"
            )
        if s.excluded:
            out.append(f"{at}: {s.excluded}")
    return out


def sweep_findings(configs: list[ConfigAnswer]) -> list[str]:
    """The steps' findings by code over the whole sweep: how many steps carried each, and how
    many were kept out of the verdicts and why."""
    steps = [s for c in configs for s in c.steps]
    if not steps:
        return []
    carried = Counter(code for s in steps for code in dict.fromkeys(map(_code, s.findings)))
    out = [
        f"{code}: in {n} of {len(steps)} steps (their serve_benchmark children's finding; "
        "configs[].findings says where)"
        for code, n in carried.most_common()
    ]
    again = sum(bool(s.set_aside) for s in steps)
    if again:
        out.append(f"measured_again: {again} step(s) measured again after client_starved")
    kept_out = Counter(_code(s.excluded) for s in steps if s.excluded)
    for code, n in kept_out.most_common():
        out.append(f"kept_out: {n} step(s) kept out of the SLO verdicts for {code}")
    return out


def _code(finding: str) -> str:
    return finding.split(":", 1)[0].strip()


def front(configs: list[ConfigAnswer]) -> list[FrontPoint]:
    points = [
        FrontPoint(
            label=c.label,
            load=s.load,
            output_throughput_per_user=s.output_throughput_per_user,
            output_throughput=s.output_throughput,
            experiment_id=s.experiment_id,
        )
        for c in configs
        for s in c.steps
        if s.slo_met
        and s.counts
        and s.output_throughput is not None
        and s.output_throughput_per_user
    ]
    keep = pareto_front([(p.output_throughput_per_user, p.output_throughput) for p in points])
    return [points[i] for i in keep]


def objective(inp: Input, c: ConfigAnswer) -> float | None:
    if c.highest_load is None:
        return None
    return {"goodput": c.goodput, "output_throughput": c.output_throughput}.get(
        inp.objective, c.highest_load
    )


def best(inp: Input, configs: list[ConfigAnswer]) -> ConfigAnswer | None:
    """The ladders' pick (the race may overturn it): see ranked()."""
    order = ranked(inp, configs)
    return order[0] if order else None


def ranked(inp: Input, configs: list[ConfigAnswer]) -> list[ConfigAnswer]:
    """The configs meeting the SLO somewhere, best first by the objective; ties go to the higher
    goodput there, then to the earlier config in the space."""
    scored = [
        ((v, c.goodput or 0.0, -i), c)
        for i, c in enumerate(configs)
        if (v := objective(inp, c)) is not None
    ]
    return [c for _, c in sorted(scored, key=lambda x: x[0], reverse=True)]


def not_run(climbs: dict, planned: list[Planned]) -> list[str]:
    """steps_not_run: per config whose ladder measured no step, why (its first child's error)."""
    out = []
    for i, config in enumerate(planned):
        climb = climbs.get(i)
        if climb is not None and climb.launch_error is None and not climb.steps:
            out.append(f"steps_not_run: {config.label}: {climb.stopped}")
    return out


def devices(configs: list[ConfigAnswer]) -> str | None:
    """sweep_serve's mixed_devices: which configs' engines ran on which device."""
    return mixed_devices(
        {c.label: {s.device_fingerprint for s in c.steps if s.device_fingerprint} for c in configs},
        "the best config and the front",
        "give resources= an accelerator type to measure them all on one kind of device",
    )


def csv_rows(configs: list[ConfigAnswer], front_ids: set[str]) -> list[dict]:
    rows = []
    for c in configs:
        for s in c.steps:
            rows.append(
                {
                    **c.config,
                    "load": s.load,
                    "slo_met": s.slo_met,
                    "goodput": s.goodput,
                    "output_throughput": s.output_throughput,
                    "output_throughput_per_user": s.output_throughput_per_user,
                    "ttft_p50_ms": s.ttft_p50_ms,
                    **{f"{k}_worst": v[1] for k, v in s.slo_values.items()},
                    "on_front": s.experiment_id in front_ids,
                    "highest_load_meeting_slo": c.highest_load,
                    "serve_benchmark_id": s.experiment_id,
                    "reused": s.reused,
                    "kept_out": _code(s.excluded) if s.excluded else "",
                    "over_saturated": s.over_saturated,
                    "prefix_cache_hit_rate_max": max(
                        (h for h in s.prefix_cache_hit_rates if h is not None), default=None
                    ),
                }
            )
    return rows


def plot_steps(configs: list[ConfigAnswer], slo_keys: list[str]) -> list[dict]:
    """One dict per step; "latency": per SLO metric its worst repeat (none: TTFT p50)."""
    return [
        {
            "label": c.label,
            "load": s.load,
            "per_user": s.output_throughput_per_user,
            "total": s.output_throughput,
            "latency": (
                {k[:-3]: _worst(s.slo_values.get(k)) for k in slo_keys}
                if slo_keys
                else {"ttft_p50": s.ttft_p50_ms}
            ),
            "slo_met": s.slo_met,
        }
        for c in configs
        for s in c.steps
    ]


def _worst(interval: list[float] | None) -> float | None:
    return interval[1] if interval else None


def interval_note(repeats: int) -> str:
    if repeats == 1:
        return (
            "1 repeat per step: each number is one run, with no interval; the ladder's "
            "neighbouring steps are the only check on noise (repeats >= 2 gives [min, max])"
        )
    return (
        f"{repeats} repeats per step: each number is the median, its interval the [min, max] over "
        f"repeats; a further run would fall outside it with probability 2/{repeats + 1} "
        "(a range of the draws, not a confidence interval)"
    )
