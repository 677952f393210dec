"""The MCP server: every tools/*.py `TOOL` becomes an MCP tool, every call an experiment.

A call flows: raw arguments -> open a ledger row (so even a rejected call is on record)
-> validate into the tool's Input model -> run the tool with a CallContext -> close the
row with the result or the error -> structured output (the Output model) to the client.
Errors the agent can fix become ToolError with the tool's message; anything else
becomes a ToolError saying it is an internal error, and the server keeps serving.
"""

from __future__ import annotations

import importlib
import json
import logging
import pkgutil
from pathlib import Path
from typing import Any

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Resource, TextContent, ToolAnnotations
from mcp_types import Tool as MCPTool
from pydantic import ValidationError

from .. import tools as tools_package
from ..kernels.workspace import WorkspaceError, load_workspace
from ..sandbox import SandboxError
from ..tools.base import (
    CANCELLED_BECAUSE,
    MAX_NAME_CHARS,
    AgentError,
    CallOutcome,
    Tool,
    run_tool,
)
from ..tools.common import provenance
from .context import CallContext, CallOrigin, ClusterConfig, ServerState, run_link
from .host_paths import sandbox_view
from .limits import (
    MAX_ERROR_CHARS,
    MAX_FULL_REPLY_CHARS,
    MAX_REPLY_CHARS,
    clip_text,
    fit_reply,
    record_arguments,
    record_hypothesis,
    utf8_text,
)
from .prompts import check_order, register_prompts
from .resources import mime_type_of, recent_experiment_resources, register_resources

log = logging.getLogger("infra_agent.server")


def instructions(tool_names: set[str]) -> str:
    order = " -> ".join(check_order(tool_names))
    return f"""Tools for an engineer who owns the performance of an inference stack.
Each call is an experiment: pass `hypothesis` (one sentence), read the verdict, and pick
the cheapest next check ({order}). list_kernels / describe_kernel show the workspace;
device_info the hardware; list_experiments / compare_experiments the history."""


AGENT_ERRORS = (AgentError, WorkspaceError, SandboxError)  # the caller can fix these


class InfraAgentServer(MCPServer):
    """MCPServer plus the workspace state, our tools, the ledger-backed resource list, and
    MIME types per artifact file.

    Tools are served through MCPServer's public `list_tools` / `call_tool`, not registered
    as SDK tool functions: a call's arguments reach `_handle` as the raw dict, because they
    are validated against the tool's Input model only after its ledger row is open (so a
    rejected call is on record too)."""

    state: ServerState
    tools: dict[str, Tool]

    async def list_tools(self) -> list[MCPTool]:
        return [*(_listing(tool) for tool in self.tools.values()), *await super().list_tools()]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> Any:
        tool = self.tools.get(name)
        if tool is None:
            return await super().call_tool(name, arguments, context)
        # The SDK's own tool runner's contract, kept for our tools: an error names the tool, and a
        # crash's text stays on the server (_handle already turns every tool failure into ToolError).
        try:
            if self.state.stopping:
                raise ToolError(
                    "the server is shutting down and takes no new calls; call again once it is back"
                )
            with self.state.in_flight():
                result = await _handle(tool, self.state, dict(arguments), context)
            tool.output_model.model_validate(
                result.structured_content
            )  # what the output schema promises
            return result
        except MCPError:
            raise
        except ToolError as exc:
            raise ToolError(f"Error executing tool {name}: {exc}") from exc
        except Exception as exc:
            raise UnexpectedToolError(f"Error executing tool {name}") from exc

    async def list_resources(self) -> list[Resource]:
        static = await super().list_resources()
        recent = await anyio.to_thread.run_sync(recent_experiment_resources, self.state)
        return static + recent

    async def read_resource(self, uri, context=None):
        contents = await super().read_resource(uri, context)
        if str(uri).startswith("artifact://") and isinstance(contents, list):
            mime = mime_type_of(str(uri).rsplit("/", 1)[-1])
            for item in contents:
                item.mime_type = mime
        return contents

    async def aclose(self) -> None:
        await self.state.aclose()


# Tool modules that failed to import in the last discover_tools(): module name -> the error.
TOOL_IMPORT_ERRORS: dict[str, str] = {}


def discover_tools() -> dict[str, Tool]:
    """Every module or package in infra_agent.tools with a `TOOL` attribute, by tool name
    (a small tool is one module, a big one a package whose ``__init__`` defines `TOOL`).

    A module that fails to import is skipped, so one broken tool does not take the others
    down; it is kept in TOOL_IMPORT_ERRORS, which `serve` and `tools` print at startup and
    device_info reports (`tools_not_loaded`)."""
    found: dict[str, Tool] = {}
    TOOL_IMPORT_ERRORS.clear()
    for info in sorted(pkgutil.iter_modules(tools_package.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in ("base", "common"):
            continue
        try:
            module = importlib.import_module(f"{tools_package.__name__}.{info.name}")
        except Exception as exc:
            TOOL_IMPORT_ERRORS[info.name] = f"{type(exc).__name__}: {exc}"
            # said once, by the caller: `serve`/`tools` on stderr, device_info to the agent
            log.debug(
                "tool module %s failed to import: %s", info.name, TOOL_IMPORT_ERRORS[info.name]
            )
            continue
        tool = getattr(module, "TOOL", None)
        if isinstance(tool, Tool):
            found[tool.name] = tool
    return found


def build_server(
    workspace: str | Path | None = None,
    *,
    allow_unsandboxed: bool = False,
    engine_pythons: dict[str, str] | None = None,
    cluster: str | None = None,
) -> InfraAgentServer:
    """`engine_pythons`: engine -> the Python it runs on (vllm, sglang: serving/interpreters.py),
    over the workspace's [engines.<name>] python. `cluster`: a Ray address ("auto",
    HOST:PORT) over the workspace's [cluster] address: jobs run on that cluster's nodes."""
    ws = load_workspace(workspace)
    state = ServerState(
        ws,
        allow_unsandboxed=allow_unsandboxed,
        engine_pythons=engine_pythons,
        cluster=ClusterConfig.from_workspace(ws.config, cluster),
    )
    tools = discover_tools()
    server = InfraAgentServer(
        name="infra-agent",
        title="Infra Agent",
        instructions=instructions(set(tools)),
        version=provenance.package_version("infra-agent") or "0",
        log_level="WARNING",
    )
    server.state = state
    server.tools = tools
    state.tools = tools  # what a sweep's trials call (CallContext.call)
    state.tools_not_loaded = dict(TOOL_IMPORT_ERRORS)
    register_resources(server, state)
    register_prompts(server)
    return server


def _listing(tool: Tool) -> MCPTool:
    """The tool as tools/list shows it: schemas from its Input and Output models."""
    return MCPTool(
        name=tool.name,
        title=tool.title,
        description=tool.full_description,
        input_schema=tool.input_model.model_json_schema(),
        output_schema=tool.output_model.model_json_schema(),
        annotations=ToolAnnotations(
            title=tool.title,
            read_only_hint=tool.read_only,
            destructive_hint=False,  # no tool deletes or overwrites the user's files
            idempotent_hint=tool.idempotent,
            open_world_hint=tool.open_world,
        ),
    )


async def _handle(
    tool: Tool, state: ServerState, arguments: dict, mcp_context: Any
) -> CallToolResult:
    outcome = await execute(tool, state, arguments, CallOrigin(mcp_context, run_link(mcp_context)))
    if outcome.error is not None:
        raise ToolError(f"{outcome.error} [experiment {outcome.experiment_id}]")
    result = outcome.result or {}
    # The text block mirrors the structured result for clients that ignore
    # structuredContent; compact JSON keeps it cheap in the model's context.
    text = json.dumps(result, separators=(",", ":"), ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=result)


async def execute(
    tool: Tool, state: ServerState, arguments: dict, origin: CallOrigin
) -> CallOutcome:
    """One call as an experiment, whoever made it (the agent over MCP, or a sweep for a trial):
    open its ledger row, validate, record its code, run it, close the row. A failure the agent
    can act on is the outcome's error (already closed in the ledger); a cancellation unwinds."""
    if state.late_artifacts.is_pending():  # an earlier call's plot: not while this call measures
        await anyio.to_thread.run_sync(state.late_artifacts.wait_all)
    experiment_id = await anyio.to_thread.run_sync(_open_experiment, tool, state, arguments, origin)
    ctx = CallContext(state, experiment_id, origin)

    def fail(message: str) -> CallOutcome:
        message = sandbox_view(message, state.workspace.root, state.workspace.state_dir)
        message = clip_text(utf8_text(message), MAX_ERROR_CHARS)
        state.ledger.close_error(
            experiment_id, message, ctx.artifacts, ctx.code_manifest(), ctx.nodes()
        )
        return CallOutcome(experiment_id, None, message)

    def cancelled() -> (
        None
    ):  # keep the ledger honest wherever a cancellation lands, then let it unwind
        if state.stopping:
            state.ledger.close_interrupted(
                experiment_id, "the server shut down before this call finished"
            )
        else:
            state.ledger.close_error(
                experiment_id,
                CANCELLED_BECAUSE.get()() or "cancelled by the client",
                ctx.artifacts,
                ctx.code_manifest(),
                ctx.nodes(),
            )

    try:
        ctx.workspace = await anyio.to_thread.run_sync(state.refresh_workspace)
        inp = tool.input_model.model_validate(_pre_parse(tool, arguments))
        kernel = arguments.get(tool.kernel_field) if tool.kernel_field else None
        await anyio.to_thread.run_sync(ctx.record_code, kernel, inp.model_dump())
    except ValidationError as exc:
        return fail(f"invalid arguments for {tool.name}: {_explain(exc)}")
    except AGENT_ERRORS as exc:  # a workspace that no longer loads, or an Input validator
        return fail(str(exc))
    except Exception as exc:  # a bug while preparing the call (recording its code): not a cancel
        log.exception("tool %s crashed before it ran (experiment %s)", tool.name, experiment_id)
        return fail(
            f"internal error in {tool.name} before it ran (a bug in the server, not in your "
            f"input): {type(exc).__name__}: {clip_text(str(exc), 500)}; call it again"
        )
    except BaseException:  # cancelled while the workspace was read (the first await)
        cancelled()
        raise
    try:
        out = await run_tool(tool, inp, ctx)  # expect checked before the run, judged after
        out.experiment_id = experiment_id
        out.artifacts = list(dict.fromkeys([*out.artifacts, *ctx.artifacts]))
        result = _bounded_reply(tool, out.model_dump(mode="json"), ctx)
    except ToolError as exc:
        return fail(str(exc))
    except AGENT_ERRORS as exc:
        return fail(str(exc))
    except Exception as exc:  # includes a tool building an invalid Output: a bug, not the agent's
        log.exception("tool %s crashed (experiment %s)", tool.name, experiment_id)
        return fail(
            f"internal error in {tool.name} (a bug in the server, not in your input): "
            f"{type(exc).__name__}: {clip_text(str(exc), 500)}"
        )
    except BaseException:  # cancelled
        cancelled()
        raise
    state.ledger.close_ok(
        experiment_id, result, result["artifacts"], ctx.code_manifest(), ctx.nodes()
    )
    return CallOutcome(experiment_id, result, None)


def _bounded_reply(tool: Tool, result: dict, ctx: CallContext) -> dict:
    """The result, cut to MAX_REPLY_CHARS when it is longer; the whole one is then an
    artifact the summary names (and the cut reply still matches the output schema)."""
    fitted, note = fit_reply(result)
    if note is None:
        return result
    full = json.dumps(result, ensure_ascii=False, indent=1)
    uri = ctx.artifact("reply.json", clip_text(full, MAX_FULL_REPLY_CHARS))
    fitted["artifacts"] = list(dict.fromkeys([*fitted["artifacts"], uri]))
    fitted["summary"] = f"{clip_text(fitted['summary'], 2_000)} [{note}; the full result is {uri}]"
    try:
        tool.output_model.model_validate(fitted)
    except ValidationError:
        raise AgentError(
            f"the result is {len(full)} chars, over the {MAX_REPLY_CHARS}-char reply cap, and "
            f"cannot be cut to fit its schema; read the full result at {uri}"
        ) from None
    return fitted


def _open_experiment(tool: Tool, state: ServerState, arguments: dict, origin: CallOrigin) -> str:
    kernel = arguments.get(tool.kernel_field) if tool.kernel_field else None
    commit, diff_hash = provenance.git_state(state.workspace.root)
    facts = provenance.device_facts()
    return state.ledger.open(
        tool=tool.name,
        arguments=record_arguments(arguments),
        kernel=clip_text(kernel, MAX_NAME_CHARS) if isinstance(kernel, str) else None,
        hypothesis=record_hypothesis(arguments.get("hypothesis")),
        git_commit=commit,
        git_diff_sha256=diff_hash,
        device=facts,
        device_fingerprint=provenance.fingerprint(facts),
        run=origin.run,
        parent_id=origin.parent_id,
    )


def _pre_parse(tool: Tool, arguments: dict) -> dict:
    """Some clients send lists and objects as JSON strings; decode those for fields
    that are not strings (the same leniency the MCP SDK applies to plain functions)."""
    parsed = dict(arguments)
    for name, value in arguments.items():
        field = tool.input_model.model_fields.get(name)
        if field is None or field.annotation is str or not isinstance(value, str):
            continue
        try:
            decoded = json.loads(value)
        except ValueError:
            continue
        if isinstance(decoded, (list, dict)):
            parsed[name] = decoded
    return parsed


def _explain(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown argument {where!r}")
        else:
            parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts) + ". Call tools/list for this tool's input schema."
