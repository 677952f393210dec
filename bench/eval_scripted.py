"""The eval's scripted policies on every task of one seed: what the note reports as "one
full run of the investigator and the guesser" (issue 38). Each policy sits behind the tests'
scripted chat-completions server (tests/scripted_model.py, tests/server/eval_policies.py) and
drives `infra-agent eval`'s runner with the tools really running; grading is by each task's
planted truth. Prints one row per task (correct, cause submitted, tool calls, wall time) and
each policy's overall scores; the results files stay in --out.

    python bench/eval_scripted.py [--policies investigator,guesser] [--seed 0] [--tasks ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import anyio

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "server")]  # the tests' scripted model and policies

from eval_policies import AlwaysFinds, Guesser, Investigator  # noqa: E402
from scripted_model import ScriptedModel  # noqa: E402

from infra_agent.server.eval.runner import EvalConfig, run_eval  # noqa: E402

POLICIES = {"investigator": Investigator, "guesser": Guesser, "always-finds": AlwaysFinds}


def run_policy(name: str, seed: int, tasks: list[str] | None, out: Path) -> None:
    model = ScriptedModel([POLICIES[name]()])
    try:
        config = EvalConfig(
            base_url=model.url,
            model=name,
            out_dir=out / name,
            seed=seed,
            tasks=tasks,
            api_key_env=None,
        )
        results = anyio.run(run_eval, config)
    finally:
        model.close()
    print(f"\n== {name}, seed {seed} ({out / name / 'results.json'})")
    print(f"{'task':34} {'correct':>7} {'submitted cause':26} {'calls':>5} {'wall s':>7}")
    for run in results.runs:
        cause = (run.submission or {}).get("cause", "-")
        print(
            f"{run.task_id:34} {str(run.grade.correct):>7} {cause:26} {run.tool_calls:5d} "
            f"{run.wall_s:7.1f}"
        )
    o = results.overall
    print(
        f"overall: correct {o.correct:.2f}, identified {o.identified:.2f}, evidence "
        f"{o.evidence_ok:.2f}; mean {o.mean_tool_calls:.1f} calls, {o.mean_wall_s:.1f} s a task"
    )
    for category, s in results.per_category.items():
        print(f"  {category}: correct {s.correct:.2f} over {s.num_runs} task(s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", default="investigator,guesser")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", default=None, help="Comma-separated task ids or families.")
    parser.add_argument("--out", type=Path, default=None, help="Default: a temporary folder.")
    args = parser.parse_args()
    tasks = args.tasks.split(",") if args.tasks else None
    with tempfile.TemporaryDirectory(prefix="ia-eval-bench-") as tmp:
        out = args.out or Path(tmp)
        for name in args.policies.split(","):
            run_policy(name, args.seed, tasks, out)


if __name__ == "__main__":
    main()
