"""The contract every tool module follows, independent of MCP.

A tool module (``tools/<name>.py``) or package (``tools/<name>/__init__.py``) defines::

    TOOL = Tool(
        name="describe_kernel",
        title="Describe a kernel",
        description="...first line is the one-line summary...",
        input_model=Input,            # subclass of ToolInput
        output_model=Output,          # subclass of ToolOutput
        run=run,                      # async def run(inp: Input, ctx: ToolContext) -> Output
        idempotent=True,              # the defaults: read_only=True, idempotent=False,
        kernel_field="kernel",        # open_world=False, kernel_field=None
    )

``server/`` turns each ``TOOL`` into an MCP tool (schemas, annotations, progress,
ledger, artifacts). Tools raise ``AgentError`` for anything the agent caused or can fix
(bad source, unknown kernel, timeout); the server turns it into an MCP ``ToolError``.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..kernels.workspace import MAX_PATH_CHARS, excerpt
from .common.errors import AgentError  # noqa: F401 - re-exported: tools import it from here
from .common.expect import (
    LANGUAGE,
    Catalogue,
    ExpectFields,
    HypothesisAnswer,
    WithEvidence,
    answer,
    check,
    parse,
    plain_fields,
    summary_line,
)

# Argument limits, the same for every tool (docs/limits.md lists them). A field that
# declares its own max_length keeps it; every other field gets the limit of its kind.
MAX_TEXT_CHARS = 2_000  # hypothesis: one sentence, stored in every ledger row
MAX_NAME_CHARS = 256  # kernel, impl, entry, dtype, target, ids and every other short string
# path, *_path: MAX_PATH_CHARS (1,024; each component at most 255 bytes, as on Linux)
MAX_CODE_CHARS = 200_000  # source, reference, baseline, *_source: inline code
MAX_ITEMS = 64  # items in any list or keys in any object, at any depth
MAX_NESTED_CHARS = 1_024  # a string inside a list or object (flags, dims, names)
MAX_DEPTH = 8  # nesting of lists and objects inside one argument
MAX_NUMBER = 1e15  # magnitude of any number a field does not bound more tightly
CODE_FIELDS = frozenset({"source", "reference", "baseline"})

if TYPE_CHECKING:  # the sandbox package is only needed by tools that run jobs
    from ..sandbox.job import Job, JobKind, JobResult


@contextmanager
def as_agent_error(*kinds: type[Exception]):
    """Re-raise `kinds` (e.g. kernels.WorkspaceError) as AgentError with the same message."""
    try:
        yield
    except kinds as exc:
        raise AgentError(str(exc)) from None


def _limit_for(name: str) -> int:
    if name == "hypothesis":
        return MAX_TEXT_CHARS
    if name in CODE_FIELDS or name.endswith("_source"):
        return MAX_CODE_CHARS
    if name == "path" or name.endswith("_path"):
        return MAX_PATH_CHARS
    return MAX_NAME_CHARS


def _kinds(annotation: Any) -> set[type]:
    """The JSON kinds a field's annotation admits (str, list, dict, int, float)."""
    origin = get_origin(annotation)
    if origin is None:
        return {annotation} if annotation in (str, list, dict, int, float) else set()
    if origin in (list, dict, tuple, set):
        return {list if origin in (list, tuple, set) else dict}
    return set().union(*(_kinds(a) for a in get_args(annotation)))


def _bound_field(name: str, info: Any) -> bool:
    """Give one field the default limits of its kind; True if anything was added."""
    have = {type(m) for m in info.metadata}
    kinds, added = _kinds(info.annotation), list[object]()
    if kinds & {str, list, dict} and annotated_types.MaxLen not in have:
        added.append(annotated_types.MaxLen(_limit_for(name) if str in kinds else MAX_ITEMS))
    if kinds & {int, float} and not have & {annotated_types.Le, annotated_types.Lt}:
        added.append(annotated_types.Le(MAX_NUMBER))
    if kinds & {int, float} and not have & {annotated_types.Ge, annotated_types.Gt}:
        added.append(annotated_types.Ge(-MAX_NUMBER))
    info.metadata.extend(added)
    return bool(added)


def _check_nested(value: Any, where: str, depth: int) -> None:
    """Bounds for what the schema of a top-level field does not reach: strings, lists
    and objects inside it, and non-finite numbers anywhere."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(
            f"{where}: numbers must be finite (got {value}); NaN and Infinity are not accepted"
        )
    if isinstance(value, str):
        if depth and len(value) > MAX_NESTED_CHARS:
            raise ValueError(
                f"{where}: a string inside a list or object is at most {MAX_NESTED_CHARS} chars "
                f"(got {len(value)})"
            )
        return
    if not isinstance(value, (list, dict)):
        return
    if depth >= MAX_DEPTH:
        raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels; arguments are flat data")
    if len(value) > MAX_ITEMS:
        raise ValueError(f"{where}: at most {MAX_ITEMS} items (got {len(value)})")
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        _check_nested(key, f"{where}.<key>", depth + 1)
        _check_nested(
            item, f"{where}[{excerpt(key, 20) if isinstance(key, str) else key}]", depth + 1
        )


def _refuse_a_twin(model: type[BaseModel], data: dict) -> None:
    """`shape` where the tool takes `shapes` (or `dtypes` where it takes `dtype`): tools differ in
    which they take, so name the one this tool has instead of a bare "unknown argument"."""
    known = set(model.model_fields) | {a for f in model.model_fields.values() for a in _aliases(f)}
    for name in data:
        if not isinstance(name, str) or name in known:
            continue
        twin = name[:-1] if name.endswith("s") else f"{name}s"
        if twin in known:
            meaning = (
                (model.model_fields[twin].description or "").split(". ")[0]
                if twin in model.model_fields
                else ""
            )
            message = f"unknown argument {name!r}: did you mean {twin!r}? ({meaning.rstrip('.')})"
            raise PydanticCustomError("unknown_argument", "{message}", {"message": message})


def _aliases(info: Any) -> set[str]:
    """The other names a field accepts (alias, validation_alias, AliasChoices): never a twin to refuse."""
    names = {info.alias} if isinstance(info.alias, str) else set()
    choices = getattr(info.validation_alias, "choices", [info.validation_alias])
    return names | {c for c in choices if isinstance(c, str)}


class ToolInput(BaseModel):
    """Base of every tool's input. Subclasses get the limits above on every field that
    sets none itself (they appear in the input schema as maxLength/maxItems/maximum),
    and NaN/Infinity are refused in every number, nested ones included."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        changed = [_bound_field(name, info) for name, info in cls.model_fields.items()]
        if any(changed):
            cls.model_rebuild(force=True)

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        if isinstance(data, dict):
            _refuse_a_twin(cls, data)
            for name, value in data.items():
                _check_nested(value, str(name)[:40], 0)
        return data

    hypothesis: str | None = Field(
        default=None,
        description="What this call tests, in one sentence (e.g. 'splitting V tiles "
        "recomputes the FP32 normalisation'). Recorded in the experiment ledger and "
        "echoed with the verdict, so the answer can say whether the evidence supports it.",
    )
    expect: list[str] | None = Field(default=None, max_length=20, description=LANGUAGE)

    @field_validator("expect")
    @classmethod
    def _expect_parses(cls, conditions: list[str] | None) -> list[str] | None:
        for condition in conditions or []:
            parse(condition)  # a malformed condition fails here, before anything runs
        return conditions

    def has_baseline(self) -> bool:
        """Whether this call names a baseline, so conditions may name baseline.<field>."""
        return getattr(self, "baseline", None) is not None


class ToolOutput(BaseModel):
    experiment_id: str = Field(
        default="",
        description="Ledger id of this call; read it as experiment://{id}, compare it "
        "with compare_experiments, fetch its files as artifact://{id}/{name}.",
    )
    summary: str = Field(
        default="",
        description="One line a person can act on: the answer, and whether it supports "
        "the hypothesis when one was given.",
    )
    artifacts: list[str] = Field(
        default_factory=list, description="URIs (artifact://...) of files this call produced."
    )
    hypothesis_answer: HypothesisAnswer = Field(
        default_factory=HypothesisAnswer,
        description="The expect conditions judged over this output: "
        "supported, contradicted, inconclusive or not_judged (no expect), with each comparison's numbers.",
    )


Progress = Callable[[float, "float | None", str], Awaitable[None]]


def _the_client() -> str | None:
    return None


# Who ended a cancelled call, when it was not the client: a caller that cancels its own trials (a
# sweep's wall budget, tools/common/sweep.py wall_clock) sets a function that says why once the
# cancel came from it (else None). Read where a cancelled call's ledger row is closed
# (server/app.py), so that the ledger and the report do not blame the user.
CANCELLED_BECAUSE: ContextVar[Callable[[], str | None]] = ContextVar(
    "cancelled_because", default=_the_client
)


@dataclass(frozen=True)
class CallOutcome:
    """What a tool call made by another tool (ToolContext.call) came to: its ledger id, and its
    result (the Output as JSON) or the error the agent would have read."""

    experiment_id: str
    result: dict | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


# The members below are read-only properties: a plain `name: type` member would demand
# a settable attribute of exactly that type, which the sandbox's frozen Limits and its
# computed Isolation.level are not (mypy checks CallContext against ToolContext).
class JobLimits(Protocol):
    @property
    def memory_bytes(self) -> int: ...  # the per-job memory cap (a cgroup), bytes


class Isolation(Protocol):
    @property
    def level(self) -> str: ...  # what is in force, e.g. "full", "partial", "none"

    def as_dict(self) -> dict: ...


class Sandbox(Protocol):
    """What tools use of infra_agent.sandbox.Sandbox: run a job, name a workspace file
    as a job sees it, and the facts a plan needs (device, limits, isolation)."""

    @property
    def device(self) -> str: ...  # "cuda" or "cpu": where jobs run

    @property
    def limits(self) -> JobLimits: ...

    @property
    def isolation(self) -> Isolation: ...

    async def run(self, job: Job, progress: Progress | None = None) -> JobResult: ...

    def workspace_path(self, host_path: Path) -> str: ...

    def capacity(self, kind: JobKind) -> int: ...  # jobs of a kind that can run at once

    # engines holding `resources` a sweep may measure side by side (1 on the server's host)
    def engines_at_once(self, resources: dict[str, float]) -> int: ...


class ToolContext(Protocol):
    """What the server hands a tool for one call."""

    workspace: Any  # infra_agent.kernels.workspace.Workspace
    experiment_id: str

    @property
    def sandbox(self) -> Sandbox:  # infra_agent.sandbox.Sandbox, started on first use
        ...

    async def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Report progress on a long call (forwarded as MCP progress notifications)."""

    def artifact(self, name: str, data: bytes | str | Path, *, move: bool = False) -> str:
        """Store a file for this experiment; returns its artifact:// URI. move=True takes a Path's
        file away from where it was (an engine's trace: kept once, as the artifact)."""

    def artifact_later(self, name: str, make: Callable[[], bytes]) -> str:
        """artifact() with the bytes made in the background, off the reply's path (plots); reads
        through the server wait for the file. Returns its artifact:// URI at once."""

    def experiment(self, experiment_id: str) -> dict | None:
        """A previous experiment from the ledger (for baselines), or None."""

    def cluster_nodes(self) -> list[dict]:
        """With a Ray cluster configured, its nodes (sandbox/cluster.py NodeView.to_json());
        empty when jobs run on the server's own host."""

    def tools_not_loaded(self) -> dict[str, str]:
        """Tool modules of this install that failed to import, each with its error: the server
        serves without them (device_info reports them)."""

    def ran_on(self, placement: Any) -> None:
        """Count work this call did on a cluster node outside its jobs (a load run on an engine's
        node; a sandbox.job.Placement) in the ledger's `nodes`, as a job there counts."""

    def read_artifact(self, experiment_id: str, name: str) -> str | None:
        """A text artifact a previous experiment stored (a baseline's records), or None."""

    @property
    def engines(
        self,
    ) -> Any:  # infra_agent.serving.lifecycle.Engines: the serving engines this server started
        ...

    def experiments(
        self,
        *,
        tool: str | None = None,
        kernel: str | None = None,
        since: float | None = None,
        exclude_tools: tuple[str, ...] = (),
        run_id: str | None = None,
        parent_id: str | None = None,
        top_level: bool = False,
        limit: int = 20,
    ) -> list[dict]:
        """Ledger rows, newest first, filtered by tool, kernel, start time (Unix s), agent run,
        the call that made them (a sweep), or only those no call made."""

    def children(self, experiment_id: str) -> list[dict]:
        """The calls an experiment made (a sweep's trials), oldest first."""

    async def call(
        self, tool: str, arguments: dict, progress: Progress | None = None
    ) -> CallOutcome:
        """Another tool, as an experiment of its own whose parent is this call (a sweep's trial).
        `progress`: where the trial's progress goes (default: nowhere)."""


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    input_model: type[ToolInput]
    output_model: type[ToolOutput]
    # Returns the Output, or WithEvidence(output, evidence) when its expect facts read more than it.
    run: Callable[[Any, ToolContext], Awaitable[ToolOutput | WithEvidence]]
    # The defaults are the common case: a read-only call on local state that may answer
    # differently next time (timings, new ledger rows) and names no kernel.
    read_only: bool = True
    idempotent: bool = False
    open_world: bool = False
    # Which argument names a kernel (for ledger filters); None if the tool has none.
    kernel_field: str | None = None
    # What `expect` may name and how to read it off one call (tools/<tool>/expect_fields.py).
    # Default: the output's own top-level fields that are numbers, strings, true/false or lists.
    expect: ExpectFields | None = None

    @property
    def expect_fields(self) -> ExpectFields:
        return self.expect or plain_fields(self.output_model)

    @property
    def catalogue(self) -> Catalogue:
        return self.expect_fields.catalogue

    @property
    def full_description(self) -> str:
        """The description plus what `expect` may name (the agent reads this before the first call)."""
        return (
            f"{self.description.rstrip()} expect can name: {self.catalogue.names()} (meanings and units: "
            f"resource expect://{self.name})."
        )


async def run_tool(tool: Tool, inp: ToolInput, ctx: ToolContext) -> ToolOutput:
    """One call: the expect conditions are checked before anything runs, judged over the output after."""
    check(
        inp.expect,
        tool.catalogue,
        has_baseline=inp.has_baseline(),
        described_at=f"the resource expect://{tool.name}",
    )
    out, evidence = await _ran(tool, inp, ctx)
    if inp.expect:
        out.hypothesis_answer = answer(inp.expect, tool.expect_fields, inp, out, evidence)
        out.summary = f"{out.summary.rstrip('.')}. {summary_line(out.hypothesis_answer)}"
    return out


async def _ran(tool: Tool, inp: ToolInput, ctx: ToolContext) -> tuple[ToolOutput, Any]:
    """The tool's output and the evidence its expect facts read (None unless it gave some)."""
    ran = await tool.run(inp, ctx)
    out, evidence = (ran.output, ran.evidence) if isinstance(ran, WithEvidence) else (ran, None)
    if not isinstance(out, tool.output_model):
        out = tool.output_model.model_validate(out)
    return out, evidence
