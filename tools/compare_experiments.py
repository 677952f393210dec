"""compare_experiments: what differed between two experiments, and how the results moved.

Both results are flattened into dotted paths ('cases.0.max_abs'); numeric leaves that
changed are reported with their delta and ratio, string leaves that changed (verdicts,
bound classes) with both values. Inputs, code version and device are compared the same
way, so the answer separates "the code changed" from "the machine changed".
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from .base import AgentError, Tool, ToolContext, ToolInput, ToolOutput
from .common.diff import Change, change, diff, flatten, is_number

# Fields that differ between any two calls and say nothing about the result.
IGNORED_PATHS = ("experiment_id", "artifacts", "summary")
MAX_ROWS = 200


class Input(ToolInput):
    a: str = Field(description="Baseline experiment id (e.g. 'e00012-3f9a').")
    b: str = Field(description="Experiment id to compare against the baseline.")


class CodeDiff(BaseModel):
    same_code: bool | None = Field(
        description="True: same commit and same uncommitted diff; False: they differ; null: unknown (not git).")
    commit_a: str | None = Field(description="Workspace git commit of a.")
    commit_b: str | None = Field(description="Workspace git commit of b.")
    diff_sha256_a: str | None = Field(description="sha256 of a's uncommitted `git diff HEAD`.")
    diff_sha256_b: str | None = Field(description="sha256 of b's uncommitted `git diff HEAD`.")


class DeviceDiff(BaseModel):
    same_device: bool = Field(description="True when the device fingerprints (hardware + versions) match.")
    changes: list[Change] = Field(description="Device facts that differ (CPU, GPUs, package versions...).")


class Output(ToolOutput):
    tool_a: str = Field(description="Tool of experiment a.")
    tool_b: str = Field(description="Tool of experiment b.")
    status_a: str = Field(description="Status of a (ok, error, interrupted, running).")
    status_b: str = Field(description="Status of b.")
    input_changes: list[Change] = Field(description="Arguments that differ (hypothesis excluded); before: a, after: b.")
    code: CodeDiff = Field(description="Whether the workspace code differed.")
    device: DeviceDiff = Field(description="Whether the machine or its software differed.")
    numeric_changes: list[Change] = Field(description="Numeric result fields whose value changed (before: a, "
                                          "after: b), with delta and ratio.")
    changed_strings: list[Change] = Field(description="Non-numeric result fields that changed (e.g. verdicts).")
    only_in_a: list[str] = Field(description="Result paths present only in a.")
    only_in_b: list[str] = Field(description="Result paths present only in b.")
    num_unchanged: int = Field(description="Result fields with the same value in both.")
    truncated: bool = Field(description=f"True when a list was cut at {MAX_ROWS} rows.")


def diff_results(ra: dict, rb: dict) -> dict:
    fa, fb = flatten(ra or {}, skip=IGNORED_PATHS), flatten(rb or {}, skip=IGNORED_PATHS)
    both = sorted(set(fa) & set(fb))
    changes = [change(path, fa[path], fb[path]) for path in both if fa[path] != fb[path]]
    return {
        "numeric_changes": [c for c in changes if is_number(c.before) and is_number(c.after)],
        "changed_strings": [c for c in changes if not (is_number(c.before) and is_number(c.after))],
        "only_in_a": sorted(set(fa) - set(fb)),
        "only_in_b": sorted(set(fb) - set(fa)),
        "num_unchanged": len(both) - len(changes),
    }


def diff_mappings(a: dict, b: dict, skip: tuple[str, ...] = ()) -> list[Change]:
    return sorted(diff(a or {}, b or {}, skip=skip), key=lambda c: c.field)


def _get(ctx: ToolContext, experiment_id: str) -> dict:
    row = ctx.experiment(experiment_id)
    if row is None:
        raise AgentError(f"no experiment {experiment_id!r} in this workspace's ledger; "
                         "list_experiments shows the ids")
    return row


async def run(inp: Input, ctx: ToolContext) -> Output:
    ea, eb = _get(ctx, inp.a), _get(ctx, inp.b)
    results = diff_results(ea.get("result") or {}, eb.get("result") or {})
    truncated = False
    for key in ("numeric_changes", "changed_strings", "only_in_a", "only_in_b"):
        if len(results[key]) > MAX_ROWS:
            results[key], truncated = results[key][:MAX_ROWS], True
    same_code = None
    if ea.get("git_commit") and eb.get("git_commit"):
        same_code = (ea["git_commit"], ea.get("git_diff_sha256")) == (eb["git_commit"], eb.get("git_diff_sha256"))
    code = CodeDiff(same_code=same_code, commit_a=ea.get("git_commit"), commit_b=eb.get("git_commit"),
                    diff_sha256_a=ea.get("git_diff_sha256"), diff_sha256_b=eb.get("git_diff_sha256"))
    device = DeviceDiff(same_device=ea.get("device_fingerprint") == eb.get("device_fingerprint"),
                        changes=diff_mappings(ea.get("device") or {}, eb.get("device") or {}, skip=("hostname",)))
    inputs = diff_mappings(ea.get("arguments") or {}, eb.get("arguments") or {}, skip=("hypothesis",))
    moved = sorted(results["numeric_changes"], key=lambda c: -abs((c.ratio or 1.0) - 1.0))
    headline = ", ".join(f"{c.field} x{c.ratio:.3g}" for c in moved[:3] if c.ratio is not None)
    code_word = {True: "same", False: "differs", None: "unknown"}[same_code]
    summary = (f"{len(inputs)} input change(s); code {code_word}; "
               f"device {'same' if device.same_device else 'differs'}; {len(results['numeric_changes'])} numeric "
               f"and {len(results['changed_strings'])} other result field(s) moved")
    if headline:
        summary += f": {headline}"
    return Output(tool_a=ea["tool"], tool_b=eb["tool"], status_a=ea["status"], status_b=eb["status"],
                  input_changes=inputs, code=code, device=device, truncated=truncated, summary=summary, **results)


TOOL = Tool(
    name="compare_experiments",
    title="Compare two experiments",
    description="Compare two experiments from the ledger: which inputs, code (git commit and diff hash) and "
    "device facts differed, and how every numeric result field moved (delta, ratio) and which verdicts changed.",
    input_model=Input,
    output_model=Output,
    run=run,
    read_only=True,
    idempotent=True,
    open_world=False,
    kernel_field=None,
)
