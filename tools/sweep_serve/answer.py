"""From the climbs to the answer: per config its highest load meeting the SLO, the Pareto front
(tokens/s per user vs tokens/s in all, as `vllm bench sweep plot_pareto`), the best config by the
objective, the CSV rows and the plot's data."""

from __future__ import annotations

from ..common.sweep import mixed_devices, pareto_front
from .ladder import Climb
from .plan import Planned
from .schema import ConfigAnswer, FrontPoint, Input, Step


def config_answer(planned: Planned, climb: Climb) -> ConfigAnswer:
    met = [s for s in climb.steps if s.slo_met]
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
    )


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
        if s.slo_met and s.output_throughput is not None and s.output_throughput_per_user
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
    """Ties go to the higher goodput there, then to the earlier config in the space."""
    scored = [
        (v, c.goodput or 0.0, -i)
        for i, c in enumerate(configs)
        if (v := objective(inp, c)) is not None
    ]
    return configs[-max(scored)[2]] if scored else None


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
                }
            )
    return rows


def plot_steps(configs: list[ConfigAnswer], slo_key: str | None) -> list[dict]:
    """One dict per step; "latency": the first SLO's metric (its worst repeat), else TTFT p50."""
    return [
        {
            "label": c.label,
            "load": s.load,
            "per_user": s.output_throughput_per_user,
            "total": s.output_throughput,
            "latency": _worst(s.slo_values.get(slo_key)) if slo_key else s.ttft_p50_ms,
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
