"""Prompts that teach the loop: state a hypothesis, run the cheapest check that can
answer it, read the verdict, decide the next step."""

from __future__ import annotations

# The checks, cheapest first. Only the tools this server has are offered to the agent:
# naming a tool that does not exist sends it into an error.
CHECKS = (
    (
        "compile_kernel",
        "does it compile for the target, and at what cost (registers, shared memory, spills, "
        "occupancy)?",
    ),
    (
        "check_numerics",
        "does it compute the same function as the reference, within the dtype's tolerance?",
    ),
    ("microbench", "how fast, how sure (confidence interval), how far from the hardware limit?"),
    ("profile", "where does the time go, what overlaps what?"),
    ("serve_benchmark", "only when the question is about the whole serving stack under load."),
)


def check_order(available: set[str]) -> list[str]:
    return [name for name, _ in CHECKS if name in available]


def ladder(available: set[str]) -> str:
    steps = [
        f"{i}. {name:<16} - {what}"
        for i, (name, what) in enumerate(((n, w) for n, w in CHECKS if n in available), 1)
    ]
    return (
        "The checks, cheapest first (stop at the first one that answers the question):\n"
        + "\n".join(steps)
        + """
Every call takes `hypothesis` (one sentence) and `expect`: the conditions over the tool's own
output that the hypothesis predicts (e.g. ["median_ms <= 0.95 * baseline.median_ms"]);
hypothesis_answer says supported, contradicted or inconclusive, with the numbers. Read it
before choosing the next step. Never skip check_numerics
before trusting a speed-up. list_experiments and compare_experiments show what was tried."""
    )


def register_prompts(server) -> None:
    LADDER = ladder(set(server.tools))

    @server.prompt(name="optimize_kernel", title="Optimise a kernel, one hypothesis at a time")
    def optimize_kernel(kernel: str, goal: str = "lower latency at the GPU shape set") -> str:
        """Make a kernel faster without changing what it computes."""
        return f"""You own the performance of the kernel `{kernel}`. Goal: {goal}.

Start with describe_kernel(kernel="{kernel}") and device_info: know the shapes, the cost
model (FLOPs, bytes, arithmetic intensity) and the hardware before touching code. Decide
whether the kernel is memory- or compute-bound at the shapes that matter.

Then loop:
- Write ONE hypothesis: what you will change and why it should help (e.g. "a larger
  BLOCK_N halves the number of programs and removes the tail wave").
- Make the change, then run the cheapest check that can refute it.
- If numerics fail, fix them before measuring anything.
- Measure against the baseline with microbench (A/B), and trust only a speed-up whose
  confidence interval excludes 1.0.
- Record the outcome in one line: supported, refuted, or inconclusive, and why.

{LADDER}"""

    @server.prompt(name="hunt_regression", title="Find why something got slower")
    def hunt_regression(good_experiment: str, bad_experiment: str) -> str:
        """Find what changed between a good and a bad measurement."""
        return f"""A measurement regressed: `{good_experiment}` was good, `{bad_experiment}` is worse.

1. compare_experiments(a="{good_experiment}", b="{bad_experiment}"): did the code (the diff
   of the files each ran), the inputs, or the device differ? How large is the change,
   relative to the noise (coefficient of variation) of each run?
2. If nothing differs but the number, rerun both: a regression that does not reproduce is noise.
3. If the code differs, bisect: state which change you suspect, re-run only the check that
   reproduces the regression (usually microbench at one shape), and narrow down.
4. Once located, explain the mechanism with compile_kernel (e.g. more registers
   lowered occupancy), then fix and confirm with the same check.

{LADDER}"""

    @server.prompt(name="verify_numerics", title="Decide whether an implementation is correct")
    def verify_numerics(kernel: str, impl: str = "triton") -> str:
        """Check that an implementation computes the reference function."""
        return f"""Decide whether `{impl}` of `{kernel}` computes the same function as its reference.

1. describe_kernel(kernel="{kernel}"): read the tolerances and why they are what they are,
   the dtypes and the shape sets (odd sizes catch masking bugs).
2. check_numerics(kernel="{kernel}", impl="{impl}") with a hypothesis such as "the masked
   tail is handled". Read the per-case errors, not only the verdict: which dtype and shape
   fail, by how much, and any findings (unwritten output, input mutation, nondeterminism,
   forbidden ops).
3. If a case fails, form a hypothesis about the cause, change one thing, and re-run only
   the failing case.
4. A pass at every dtype and shape is the bar; a tolerance is never loosened to make a
   kernel pass.

{LADDER}"""
