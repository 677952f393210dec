"""compare_experiments: what differed between two experiments, and how the results moved.

Both results are flattened into dotted paths ('cases.0.max_abs'); numeric leaves that
changed are reported with their delta and ratio, string leaves that changed (verdicts,
bound classes) with both values. Inputs, code version and device are compared the same
way, so the answer separates "the code changed" from "the machine changed".
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .base import AgentError, Tool, ToolContext, ToolInput, ToolOutput

# Fields that differ between any two calls and say nothing about the result.
IGNORED_PATHS = ("experiment_id", "artifacts", "summary")
MAX_ROWS = 200


class Input(ToolInput):
    a: str = Field(description="Baseline experiment id (e.g. 'e00012-3f9a').")
    b: str = Field(description="Experiment id to compare against the baseline.")


class Change(BaseModel):
    path: str = Field(description="Dotted path of the field, e.g. 'shapes.0.median_ms' or 'kernel'.")
    a: Any = Field(description="Value in experiment a (null: absent).")
    b: Any = Field(description="Value in experiment b (null: absent).")


class NumericChange(BaseModel):
    path: str = Field(description="Dotted path of the numeric result field.")
    a: float = Field(description="Value in experiment a, in the field's own unit.")
    b: float = Field(description="Value in experiment b, in the field's own unit.")
    delta: float = Field(description="b - a, in the field's unit.")
    ratio: float | None = Field(description="b / a (null when a is 0); for times, < 1 means b is faster.")


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
    input_changes: list[Change] = Field(description="Arguments that differ (hypothesis excluded).")
    code: CodeDiff = Field(description="Whether the workspace code differed.")
    device: DeviceDiff = Field(description="Whether the machine or its software differed.")
    numeric_changes: list[NumericChange] = Field(description="Numeric result fields whose value changed.")
    changed_strings: list[Change] = Field(description="Non-numeric result fields that changed (e.g. verdicts).")
    only_in_a: list[str] = Field(description="Result paths present only in a.")
    only_in_b: list[str] = Field(description="Result paths present only in b.")
    num_unchanged: int = Field(description="Result fields with the same value in both.")
    truncated: bool = Field(description=f"True when a list was cut at {MAX_ROWS} rows.")


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': [1, 2]}} -> {'a.b.0': 1, 'a.b.1': 2}."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in items:
        flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    if not flat and prefix:
        flat[prefix] = value  # keep empty containers visible
    return flat


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def diff_results(ra: dict, rb: dict) -> dict:
    fa, fb = flatten(ra or {}), flatten(rb or {})
    keep = lambda p: not any(p == i or p.startswith(i + ".") for i in IGNORED_PATHS)  # noqa: E731
    numeric, strings, unchanged = [], [], 0
    for path in sorted(set(fa) & set(fb)):
        if not keep(path):
            continue
        va, vb = fa[path], fb[path]
        if va == vb:
            unchanged += 1
        elif _is_number(va) and _is_number(vb):
            numeric.append(NumericChange(path=path, a=va, b=vb, delta=vb - va, ratio=vb / va if va else None))
        else:
            strings.append(Change(path=path, a=va, b=vb))
    return {
        "numeric_changes": numeric,
        "changed_strings": strings,
        "only_in_a": [p for p in sorted(set(fa) - set(fb)) if keep(p)],
        "only_in_b": [p for p in sorted(set(fb) - set(fa)) if keep(p)],
        "num_unchanged": unchanged,
    }


def diff_mappings(a: dict, b: dict, skip: tuple[str, ...] = ()) -> list[Change]:
    fa, fb = flatten(a or {}), flatten(b or {})
    return [Change(path=p, a=fa.get(p), b=fb.get(p)) for p in sorted(set(fa) | set(fb))
            if p not in skip and fa.get(p) != fb.get(p)]


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
    headline = ", ".join(f"{c.path} x{c.ratio:.3g}" for c in moved[:3] if c.ratio is not None)
    summary = (f"{len(inputs)} input change(s); code {'same' if same_code else 'differs' if same_code is False else 'unknown'}; "
               f"device {'same' if device.same_device else 'differs'}; {len(results['numeric_changes'])} numeric "
               f"and {len(results['changed_strings'])} other result field(s) moved" + (f": {headline}" if headline else ""))
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
