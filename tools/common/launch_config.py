"""`launch_config`: run the code under test with given constexprs and launch options.

The agent-facing field (its type and description, shared by check_numerics, microbench and
compile_kernel) and the answer's echo of what was applied. The worker side is
sandbox/worker/launch_config.py; what a worker reports is parsed here, never trusted for
more than an echo (the candidate shares the worker's process).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

LaunchConfig = dict[str, int | float | bool | str]

DESCRIPTION = (
    "Launch configuration for {whose} Triton launches, e.g. {'BLOCK_N': 128, "
    "'num_warps': 4}. A name the entry function takes as a keyword parameter is passed to it "
    "(so the impl can derive what depends on it); any other name overrides that tl.constexpr, "
    "or launch option (num_warps, num_stages, num_ctas, maxnreg), in every Triton kernel launch "
    "the call makes (under @triton.autotune its first config, with this over it: no search). A "
    "name no launch and no entry parameter used is an error. Under the Triton interpreter on "
    "CPU num_warps and num_stages change nothing; that is expected. A config the impl did not "
    "plan for can compute wrong answers (check it with check_numerics)."
)


def launch_config_field(whose: str = "the candidate's", extra: str = "") -> LaunchConfig | None:
    """The pydantic Field of a launch_config input: `whose` launches it configures, and what
    else the tool says about it."""
    text = DESCRIPTION.replace("{whose}", whose) + (f" {extra}" if extra else "")
    return Field(default=None, max_length=32, description=text)


class LaunchConfigApplied(BaseModel):
    """Where the launch_config's names went (the worker's record)."""

    entry_kwargs: list[str] = Field(
        default_factory=list,
        description="Names passed to the entry function as keyword arguments.",
    )
    overridden: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per Triton kernel (by function name): the constexprs and launch options "
        "the config replaced in its launches.",
    )


def parse_applied(raw: object) -> LaunchConfigApplied | None:
    """The worker's `launch_config_applied`, or None when absent or malformed."""
    if not isinstance(raw, dict):
        return None
    entry = raw.get("entry_kwargs")
    overridden = raw.get("overridden")
    if not isinstance(entry, list) or not isinstance(overridden, dict):
        return None
    if not entry and not overridden:
        return None
    return LaunchConfigApplied(
        entry_kwargs=[str(n) for n in entry][:32],
        overridden={
            str(k): [str(n) for n in v][:32]
            for k, v in list(overridden.items())[:32]
            if isinstance(v, list)
        },
    )
