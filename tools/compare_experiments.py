"""compare_experiments: what differed between two experiments, and how the results moved.

The answer leads with the conditions the two ran under (timing_conditions.py: the same code
timed differently in the two calls, another device) and the in-call evidence (an A/B each call
timed interleaved, under one set of conditions), then what decides: the verdicts, the findings,
and the code each ran (per role, the function and files it called: code_identity.py; per file,
from the experiments' code snapshots, as a unified diff; "same code" when both ran the same
functions of the same files; git commit and diff hash when a side has no snapshot). Then inputs
and device, then the results: both are flattened into dotted paths ('cases.0.max_abs'); numeric
leaves that changed are reported with their delta and ratio (cross-call: under different
conditions, they carry the drift), string leaves that changed (verdicts, bound classes) with
both values. Seeds and element indices are identifiers, not measurements: they are left out of
the numeric changes.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from ..kernels.snapshots import BlobStore, Manifest
from .base import AgentError, Tool, ToolContext, ToolInput, ToolOutput
from .common import provenance
from .common.code_diff import FileChange, RoleCode, code_changes, ran_paths, role_changes
from .common.diff import Change, change, diff, flatten, is_number
from .common.timing_conditions import (
    InCallAB,
    TimedCall,
    TimingCondition,
    in_call_evidence,
    timing_conditions,
)

# Fields that differ between any two calls and say nothing about the result.
IGNORED_PATHS = ("experiment_id", "artifacts", "summary")
# Path parts naming identifiers, not measurements (seeds, mismatch and output indices).
IDENTIFIER_PART = re.compile(r"seed|index|indices")
MAX_ROWS = 200


class Input(ToolInput):
    a: str = Field(description="Baseline experiment id (e.g. 'e00012-3f9a').")
    b: str = Field(description="Experiment id to compare against the baseline.")


class CodeDiff(BaseModel):
    same_code: bool | None = Field(
        description="True: the same code: each role both ran (candidate, baseline, reference) "
        "called the same function of the same files, byte for byte (its entry's file and the "
        "workspace files it imports; for rows without roles, every snapshot hash agrees; without "
        "snapshots, same commit and uncommitted diff); False: it differs; null: unknown (no "
        "snapshot and no git)."
    )
    basis: Literal["snapshot", "git", "unknown"] = Field(
        description="What same_code rests on: the code snapshots both experiments kept, git, or nothing."
    )
    roles: list[RoleCode] = Field(
        default_factory=list,
        description="Per role (candidate, baseline, reference), the code each side ran and "
        "whether it is the same; empty when neither recorded roles (older rows, tools that run "
        "no code).",
    )
    files: list[FileChange] = Field(
        default_factory=list,
        description="Each file (or inline code) whose bytes "
        "differ between the snapshots, with a unified diff a -> b; with roles, only files some "
        "role ran (an edit of another impl in the kernel's folder is not this code).",
    )
    commit_a: str | None = Field(description="Workspace git commit of a.")
    commit_b: str | None = Field(description="Workspace git commit of b.")
    diff_sha256_a: str | None = Field(description="sha256 of a's uncommitted `git diff HEAD`.")
    diff_sha256_b: str | None = Field(description="sha256 of b's uncommitted `git diff HEAD`.")


class DeviceDiff(BaseModel):
    same_device: bool = Field(
        description="True when both ran on devices with the same fingerprints (hardware + "
        "versions): the cluster nodes their jobs or engines ran on, else the server's host."
    )
    fingerprints_a: list[str] = Field(
        description="The device fingerprints a ran on (sha256, 16 hex): its cluster nodes', "
        "else the server's host's."
    )
    fingerprints_b: list[str] = Field(description="The same for b.")
    changes: list[Change] = Field(
        description="Facts of the server's host that differ (CPU, GPUs, package versions...); "
        "work on cluster nodes differs by fingerprints_a/b, whose facts stay on the nodes."
    )


class Output(ToolOutput):
    conditions: list[TimingCondition] = Field(
        default_factory=list,
        description="How the two ran, besides the code, read first: the same code timed "
        "differently in a and b (the host drifted: cross-call ratios carry that factor), timed "
        "alike (cross-call ratios are comparable), or another device.",
    )
    in_call: list[InCallAB] = Field(
        default_factory=list,
        description="Each call's own A/B (microbench with a baseline), timed interleaved in one "
        "job under one set of conditions: the evidence for an effect, b's first.",
    )
    tool_a: str = Field(description="Tool of experiment a.")
    tool_b: str = Field(description="Tool of experiment b.")
    status_a: str = Field(description="Status of a (ok, error, interrupted, running).")
    status_b: str = Field(description="Status of b.")
    input_changes: list[Change] = Field(
        description="Arguments that differ (hypothesis excluded); before: a, after: b."
    )
    code: CodeDiff = Field(description="Whether the workspace code differed.")
    device: DeviceDiff = Field(description="Whether the machine or its software differed.")
    numeric_changes: list[Change] = Field(
        description="Numeric result fields whose value changed (before: a, "
        "after: b), with delta and ratio; seeds and indices left out. Cross-call: when "
        "`conditions` says the same code timed differently, these ratios carry that drift."
    )
    changed_strings: list[Change] = Field(
        description="Non-numeric result fields that changed (e.g. verdicts)."
    )
    only_in_a: list[str] = Field(description="Result paths present only in a.")
    only_in_b: list[str] = Field(description="Result paths present only in b.")
    num_unchanged: int = Field(description="Result fields with the same value in both.")
    num_identifiers_changed: int = Field(
        default=0,
        description="Seeds and element/output indices that differ "
        "(identifiers, not measurements: left out of numeric_changes), count.",
    )
    truncated: bool = Field(description=f"True when a list was cut at {MAX_ROWS} rows.")


def diff_results(ra: dict, rb: dict) -> dict:
    fa, fb = flatten(ra or {}, skip=IGNORED_PATHS), flatten(rb or {}, skip=IGNORED_PATHS)
    both = sorted(set(fa) & set(fb))
    changes = [change(path, fa[path], fb[path]) for path in both if fa[path] != fb[path]]
    numeric = [c for c in changes if is_number(c.before) and is_number(c.after)]
    identifiers = [c for c in numeric if _is_identifier(c.field)]
    return {
        "numeric_changes": [c for c in numeric if not _is_identifier(c.field)],
        "changed_strings": [c for c in changes if not (is_number(c.before) and is_number(c.after))],
        "only_in_a": sorted(set(fa) - set(fb)),
        "only_in_b": sorted(set(fb) - set(fa)),
        "num_unchanged": len(both) - len(changes),
        "num_identifiers_changed": len(identifiers),
    }


def _is_identifier(path: str) -> bool:
    return any(IDENTIFIER_PART.search(part) for part in path.split(".") if not part.isdigit())


def diff_mappings(a: dict, b: dict, skip: tuple[str, ...] = ()) -> list[Change]:
    return sorted(diff(a or {}, b or {}, skip=skip), key=lambda c: c.field)


def _get(ctx: ToolContext, experiment_id: str) -> dict:
    row = ctx.experiment(experiment_id)
    if row is None:
        raise AgentError(
            f"no experiment {experiment_id!r} in this workspace's ledger; "
            "list_experiments shows the ids"
        )
    return row


def code_diff(ctx: ToolContext, ea: dict, eb: dict) -> CodeDiff:
    """From the snapshots when both kept one and either ran code; else from git."""
    git = {
        "commit_a": ea.get("git_commit"),
        "commit_b": eb.get("git_commit"),
        "diff_sha256_a": ea.get("git_diff_sha256"),
        "diff_sha256_b": eb.get("git_diff_sha256"),
    }
    ma, mb = Manifest.from_json(ea.get("code")), Manifest.from_json(eb.get("code"))
    if ma is not None and mb is not None and (ma.entries() or mb.entries()):
        store = BlobStore(ctx.workspace.state_dir)
        files = code_changes(store, ma, mb)
        roles = role_changes(store, ma, mb)
        both = [r for r in roles if r.same_code is not None]
        if not both:
            return CodeDiff(same_code=not files, basis="snapshot", files=files, roles=roles, **git)
        ran = ran_paths(ma, mb)
        files = [f for f in files if f.path in ran]
        same = all(r.same_code for r in both)
        return CodeDiff(same_code=same, basis="snapshot", files=files, roles=roles, **git)
    if git["commit_a"] and git["commit_b"]:
        same = (git["commit_a"], git["diff_sha256_a"]) == (git["commit_b"], git["diff_sha256_b"])
        return CodeDiff(same_code=same, basis="git", **git)
    return CodeDiff(same_code=None, basis="unknown", **git)


def _verdict_words(ra: dict, rb: dict, ea: dict, eb: dict) -> str:
    """The verdicts; the call statuses for tools without one (or a call that failed)."""
    word = "verdict" if ra.get("verdict") or rb.get("verdict") else "status"
    va = ra.get("verdict") or ea["status"] if word == "verdict" else ea["status"]
    vb = rb.get("verdict") or eb["status"] if word == "verdict" else eb["status"]
    return f"{word} {va} (both)" if va == vb else f"{word} {va} -> {vb}"


def _finding_codes(result: dict) -> list[str]:
    codes = result.get("finding_codes")
    if isinstance(codes, list):
        return [str(c) for c in codes]
    found = result.get("findings") or []
    return [str(f.get("code") if isinstance(f, dict) else f)[:80] for f in found if f]


def _findings_words(ra: dict, rb: dict) -> str | None:
    fa, fb = _finding_codes(ra), _finding_codes(rb)
    if not fa and not fb:
        return None
    new, gone = [c for c in fb if c not in fa], [c for c in fa if c not in fb]
    if not new and not gone:
        return f"findings same ({', '.join(dict.fromkeys(fa))})"
    parts = ([f"new {', '.join(dict.fromkeys(new))}"] if new else []) + (
        [f"gone {', '.join(dict.fromkeys(gone))}"] if gone else []
    )
    return "findings: " + "; ".join(parts)


def _code_words(code: CodeDiff) -> str:
    if code.same_code is None:
        return "code unknown (no snapshot, no git)"
    if code.same_code:
        return "same code" + (" (git)" if code.basis == "git" else "")
    if code.basis == "git":
        return "code differs (git commit or uncommitted diff; no snapshot to show the lines)"
    differing = [r.words for r in code.roles if r.same_code is False]
    if differing:
        return "code differs: " + "; ".join(differing)
    files = ", ".join(
        f"{f.path} {f.change} +{f.lines_added} -{f.lines_removed}" for f in code.files[:4]
    )
    more = f" and {len(code.files) - 4} more" if len(code.files) > 4 else ""
    return f"code differs: {files}{more}"


def _conditions_words(conditions: list[TimingCondition]) -> list[str]:
    """What differed in how the two ran: drift and devices; timed alike, once."""
    differ = [c for c in conditions if c.code != "same_code_timed_alike"]
    if differ:
        return ["conditions differ: " + "; ".join(c.message for c in differ[:3])]
    if conditions:
        return ["conditions alike: " + conditions[0].message]
    return []


def _arguments(ctx: ToolContext, experiment_id: str) -> dict | None:
    row = ctx.experiment(experiment_id)
    return (row or {}).get("arguments")


def _device_words(device: DeviceDiff) -> str:
    if device.same_device:
        return "device same"
    a, b = ", ".join(device.fingerprints_a), ", ".join(device.fingerprints_b)
    return f"device differs (a ran on {a or 'unknown'}, b on {b or 'unknown'})"


async def run(inp: Input, ctx: ToolContext) -> Output:
    ea, eb = _get(ctx, inp.a), _get(ctx, inp.b)
    ra, rb = ea.get("result") or {}, eb.get("result") or {}
    results = diff_results(ra, rb)
    truncated = False
    for key in ("numeric_changes", "changed_strings", "only_in_a", "only_in_b"):
        if len(results[key]) > MAX_ROWS:
            results[key], truncated = results[key][:MAX_ROWS], True
    code = code_diff(ctx, ea, eb)
    on_a, on_b = provenance.devices_ran_on(ea), provenance.devices_ran_on(eb)
    call_a, call_b = TimedCall.from_row(ea, on_a), TimedCall.from_row(eb, on_b)
    conditions = timing_conditions(call_a, call_b, lambda eid: _arguments(ctx, eid))
    in_call = in_call_evidence(call_b) + in_call_evidence(call_a)
    device = DeviceDiff(
        same_device=on_a == on_b,
        fingerprints_a=on_a,
        fingerprints_b=on_b,
        changes=diff_mappings(ea.get("device") or {}, eb.get("device") or {}, skip=("hostname",)),
    )
    inputs = diff_mappings(
        ea.get("arguments") or {}, eb.get("arguments") or {}, skip=("hypothesis",)
    )
    moved = sorted(results["numeric_changes"], key=lambda c: -abs((c.ratio or 1.0) - 1.0))
    headline = ", ".join(f"{c.field} x{c.ratio:.3g}" for c in moved[:3] if c.ratio is not None)
    lead = [
        *_conditions_words(conditions),
        *(f"{e.words}" for e in in_call[:3]),
        _verdict_words(ra, rb, ea, eb),
        _findings_words(ra, rb),
        _code_words(code),
    ]
    inputs_words = f"{len(inputs)} input change(s)"
    if inputs:
        inputs_words += f" ({', '.join(c.field for c in inputs[:4])})"
    summary = "; ".join(
        [
            *(w for w in lead if w),
            inputs_words,
            _device_words(device),
            f"{len(results['numeric_changes'])} numeric and {len(results['changed_strings'])} other "
            "result field(s) moved",
        ]
    )
    if headline:
        drifted = any(c.code == "same_code_timed_differently" for c in conditions)
        cross = " (cross-call, carrying the drift said first)" if drifted else ""
        summary += f"{cross}: {headline}"
    return Output(
        conditions=conditions,
        in_call=in_call,
        tool_a=ea["tool"],
        tool_b=eb["tool"],
        status_a=ea["status"],
        status_b=eb["status"],
        input_changes=inputs,
        code=code,
        device=device,
        truncated=truncated,
        summary=summary,
        **results,
    )


TOOL = Tool(
    name="compare_experiments",
    title="Compare two experiments",
    description="Compare two experiments from the ledger: the verdicts and findings, then the code each ran (a "
    "unified diff per file from the code snapshots every experiment keeps, or 'same code'), which inputs and "
    "device facts differed, and how every numeric result field moved (delta, ratio; seeds and indices left out).",
    input_model=Input,
    output_model=Output,
    run=run,
    idempotent=True,
)
