"""An eval task as data: the question a user asks, the workspace it is asked about, and the
ground truth the answer is graded against (where, what, optionally a number).

Tasks come from families (kernel_tasks.py, serving_tasks.py, episode_tasks.py: one module
per category, each with its FAMILIES): a family and a seed make one task, so variants
exist beyond any fixed list. `generate_tasks(seed)` is the whole set for one seed; the tests
use fixed seeds, and `infra-agent eval` without --seed draws a fresh one (a held-out set no
test has seen).
"""

from __future__ import annotations

import importlib
import random
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field


class Cause(str, Enum):
    """The fixed vocabulary of causes a diagnosis names (submit_diagnosis' `cause`)."""

    none = "none"
    stride_assumption = "stride_assumption"
    tail_mask = "tail_mask"
    accumulation_precision = "accumulation_precision"
    unlaunchable_config = "unlaunchable_config"
    nondeterminism = "nondeterminism"
    partition_numerics = "partition_numerics"
    redundant_recompute = "redundant_recompute"
    gil_held = "gil_held"
    queueing_max_num_seqs = "queueing_max_num_seqs"
    small_token_budget = "small_token_budget"
    prefix_caching_off = "prefix_caching_off"
    slow_kernel = "slow_kernel"
    starved_client = "starved_client"


CAUSE_MEANINGS: dict[Cause, str] = {
    Cause.none: "nothing is wrong (no bug, no regression, within noise)",
    Cause.stride_assumption: "the kernel assumes contiguous/packed rows and ignores the strides "
    "it is given (wrong on padded rows, slices of a fused buffer)",
    Cause.tail_mask: "the last partial block is skipped or masked wrong (wrong only at sizes "
    "that are not a multiple of the block size)",
    Cause.accumulation_precision: "a reduction accumulates in a low-precision dtype (fp16/bf16) "
    "instead of fp32 (error grows with the reduction length)",
    Cause.unlaunchable_config: "a launch configuration the target cannot run (num_warps, "
    "threads, shared memory or registers beyond what one SM offers)",
    Cause.nondeterminism: "results differ between identical calls (atomics, races)",
    Cause.partition_numerics: "the tensor-parallel (sharded) result misses the unpartitioned FP32 "
    "result: the shards' math (e.g. TF32 operands) or the split and combine themselves",
    Cause.redundant_recompute: "work recomputed per tile/step that could be done once",
    Cause.gil_held: "a thread holds the GIL and blocks another (no overlap)",
    Cause.queueing_max_num_seqs: "requests queue because max_num_seqs is too small",
    Cause.small_token_budget: "the scheduler's token budget per step is too small",
    Cause.prefix_caching_off: "prefix caching is disabled for shared-prefix traffic",
    Cause.slow_kernel: "a slow kernel in the engine's hot op",
    Cause.starved_client: "the load generator, not the engine, is the bottleneck",
}


class Location(BaseModel):
    """Where the cause sits; a task's truth names only the fields that apply."""

    kernel: str | None = Field(None, description="Kernel name, e.g. 'rope_scale'.")
    impl: str | None = Field(None, description="Implementation name of that kernel.")
    argument: str | None = Field(None, description="Argument of the entry function.")
    config_key: str | None = Field(
        None, description="Launch or engine config key, e.g. 'num_warps', 'max_num_seqs'."
    )
    thread: str | None = Field(None, description="Thread name, for system tasks.")


class Truth(BaseModel):
    cause: Cause
    location: Location
    number: float | None = Field(
        None, description="The number the answer must give (e.g. the num_warps), if any."
    )
    number_tolerance: float = Field(0.0, description="Absolute tolerance on `number`.")
    number_meaning: str | None = Field(None, description="What `number` is, with its unit.")


class EvalTask(BaseModel):
    id: str = Field(description="family.variant, e.g. 'kernel.stride'.")
    family: str
    category: str = Field(description="'kernel', 'episode' or 'serving'.")
    seed: int = Field(description="The seed this variant was drawn from.")
    question: str = Field(description="What the user asks the agent.")
    params: dict = Field(description="The family's variant parameters (names, shapes, values).")
    truth: Truth
    control: bool = Field(description="True when nothing is wrong: the right answer is 'none'.")

    def build_workspace(self, root: Path) -> Path:
        """Write this task's workspace into `root` (created; must not exist)."""
        return families()[self.id][2].build(self.params, root)


CATEGORIES = ("kernel", "serving", "episode")  # each a module <category>_tasks.py with its FAMILIES


def families() -> dict[str, tuple[str, str, Any]]:
    """Task id ('category.family') -> (category, family name, family); a family has
    draw(rng) -> (params, truth), question(params) and build(params, root)."""
    found: dict[str, tuple[str, str, Any]] = {}
    for category in CATEGORIES:
        module = importlib.import_module(f".{category}_tasks", __package__)
        found.update({f"{category}.{n}": (category, n, f) for n, f in module.FAMILIES.items()})
    return found


def generate_tasks(seed: int, only: list[str] | None = None) -> list[EvalTask]:
    """One task per family, each variant drawn from `seed`. `only`: task ids or families to
    keep (e.g. ['kernel.stride', 'kernel.control_tail'])."""
    known = families()
    unknown = sorted(set(only or []) - set(known) - {name for _, name, _ in known.values()})
    if unknown:
        raise ValueError(f"unknown task(s) {', '.join(unknown)}; the tasks are {', '.join(known)}")
    tasks = []
    for task_id, (category, name, family) in known.items():
        if only and task_id not in only and name not in only:
            continue
        rng = random.Random(f"{seed}:{name}")
        params, truth = family.draw(rng)
        tasks.append(
            EvalTask(
                id=task_id,
                family=name,
                category=category,
                seed=seed,
                question=family.question(params),
                params=params,
                truth=truth,
                control=truth.cause == Cause.none,
            )
        )
    return tasks
