"""The `infra-agent` command line: serve, inspect, call tools, configure clients.

Everything a person can do here goes through the same server object an MCP client
talks to (`call` uses the in-memory client), so the terminal and the agent see the
same tools, validation, errors and ledger. Human output goes to stdout; when serving
stdio, stdout belongs to the protocol and every message goes to stderr.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import anyio
import typer
from rich.console import Console
from rich.markup import escape

from . import cli_call, clients, render
from .eval.command import eval_command
from .stdio import SHUTDOWN_GRACE_S

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="An MCP tool server for optimising an inference stack. Kernel loop: compile, "
    "check numerics, microbenchmark and profile kernels. Serving loop: launch, load-test and "
    "profile serving engines. Every call is an experiment in a ledger you can list and "
    "compare; agent code runs sandboxed.",
)
out = Console()
err = Console(stderr=True)

WorkspaceOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--workspace",
        "-w",
        help="Workspace folder (kernel specs + infra-agent.toml); default: the built-in zoo.",
    ),
]


class ClientName(str, Enum):
    claude_code = "claude-code"
    cursor = "cursor"
    vscode = "vscode"


class ExportFormat(str, Enum):
    openai = "openai"


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _print_json(data: Any) -> None:
    """Plain JSON on stdout, for pipes and other programs (no colour, no wrapping)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _build(
    workspace: Path | None,
    allow_unsandboxed: bool = False,
    engine_python: list[str] | None = None,
    cluster: str | None = None,
):
    from ..kernels.workspace import WorkspaceError
    from .app import build_server

    pythons = {}
    for item in engine_python or ():
        engine, sep, path = item.partition("=")
        if not (sep and engine and path):
            raise _fail(
                f"--engine-python {item!r}: give ENGINE=PATH, e.g. vllm=/opt/vllm/bin/python"
            )
        pythons[engine] = str(Path(path).expanduser().resolve())
    try:
        return build_server(
            workspace, allow_unsandboxed=allow_unsandboxed, engine_pythons=pythons, cluster=cluster
        )
    except WorkspaceError as exc:
        raise _fail(str(exc)) from None


@app.command()
def serve(
    workspace: WorkspaceOpt = None,
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP instead of stdio.")
    ] = False,
    host: Annotated[
        str, typer.Option(help="HTTP bind address (loopback keeps DNS-rebinding protection on).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port.")] = 8765,
    token: Annotated[
        Optional[str],
        typer.Option(
            envvar="INFRA_AGENT_TOKEN",
            help="Require 'Authorization: Bearer TOKEN' on HTTP requests.",
        ),
    ] = None,
    allow_unsandboxed: Annotated[
        bool,
        typer.Option(
            "--allow-unsandboxed",
            help="Run agent code even when no isolation (bwrap) is available.",
        ),
    ] = False,
    shutdown_grace: Annotated[
        float,
        typer.Option(
            "--shutdown-grace",
            min=0,
            max=600,
            help="Seconds running calls may finish after SIGTERM before they are cancelled (marked interrupted).",
        ),
    ] = SHUTDOWN_GRACE_S,
    engine_python: Annotated[
        Optional[list[str]],
        typer.Option(
            "--engine-python",
            metavar="ENGINE=PATH",
            help="ENGINE=PATH: the Python an engine with its own install runs on, e.g. "
            "vllm=/opt/vllm/bin/python (over infra-agent.toml's [engines.vllm] python; default: "
            "the interpreter of `vllm` on PATH). Repeatable.",
        ),
    ] = None,
    cluster: Annotated[
        Optional[str],
        typer.Option(
            "--cluster",
            metavar="auto|HOST:PORT",
            help="Run jobs on a Ray cluster: 'auto' joins the one `ray start --head` made on this "
            "host, HOST:PORT another head (over infra-agent.toml's [cluster] address). Engines "
            "and profiled jobs stay on this host; see docs/cluster.md.",
        ),
    ] = None,
) -> None:
    """Run the MCP server (stdio by default, for IDEs; --http for streamable HTTP)."""
    server = _build(workspace, allow_unsandboxed, engine_python, cluster)
    _warn_tools_not_loaded(server)
    _remove_stale_cgroups()
    if http:
        from ..serving.tcp import listen_socket
        from .http import serve_http

        try:
            sock = listen_socket(host, port)
        except OSError as exc:
            raise _fail(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --port"
            ) from None
        anyio.run(serve_http, server, sock, token, shutdown_grace)
    else:
        from .stdio import serve_stdio

        anyio.run(serve_stdio, server, shutdown_grace)


def _remove_stale_cgroups() -> None:
    """Servers killed without a shutdown leave cgroup folders: remove them before serving."""
    try:
        from ..sandbox import remove_stale_cgroups
    except ImportError:
        return
    try:
        removed = remove_stale_cgroups()
    except OSError as exc:  # cgroups are a sandbox layer; device_info reports their absence
        err.print(
            f"[yellow]warning:[/] could not clean stale cgroups: {escape(str(exc))}", soft_wrap=True
        )
        return
    if removed:
        err.print(
            f"removed {len(removed)} cgroup folder(s) left by servers that are gone",
            highlight=False,
        )


@app.command("tools")
def list_tools(
    tool: Annotated[
        Optional[str],
        typer.Argument(
            help="A tool: print its arguments and the fields `expect` may name, with units."
        ),
    ] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """List the tools with their one-line descriptions, or one tool's arguments."""
    server = _build(workspace)
    _warn_tools_not_loaded(server)
    if tool is not None:
        spec = server.tools.get(tool)
        if spec is None:
            raise _fail(
                f"no tool {tool!r}; `infra-agent tools` lists them ({', '.join(sorted(server.tools))})"
            )
        render.tool_arguments(out, spec)
        return
    render.tool_table(out, anyio.run(server.list_tools))


def _warn_tools_not_loaded(server) -> None:
    """Say on stderr (stdout may be the protocol) which tools this install serves without."""
    for module, why in server.state.tools_not_loaded.items():
        err.print(
            f"[yellow]warning:[/] tool module infra_agent.tools.{module} failed to import, so this "
            f"server runs without it: {escape(why)}. Reinstall infra-agent or fix what the error "
            "names; device_info lists it under tools_not_loaded.",
            soft_wrap=True,
            highlight=False,
        )


@app.command(epilog=cli_call.EXIT_CODES_HELP)
def call(
    tool: Annotated[str, typer.Argument(help="Tool name (see `infra-agent tools`).")],
    args: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="Arguments: one JSON object, or key=value pairs (values parsed as JSON when they are; "
            "a single value for a list field is a one-item list: dtypes=float32)."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the structured result as JSON.")
    ] = False,
    workspace: WorkspaceOpt = None,
    allow_unsandboxed: Annotated[bool, typer.Option("--allow-unsandboxed")] = False,
) -> None:
    """Call one tool in-process, through the same MCP server an agent uses."""
    try:
        arguments = cli_call.parse_arguments(args or [])
    except ValueError as exc:
        raise _fail(str(exc)) from None
    server = _build(workspace, allow_unsandboxed)
    spec = server.tools.get(tool)
    if spec is None:
        raise _fail(
            f"no tool {tool!r}; `infra-agent tools` lists them ({', '.join(sorted(server.tools))})"
        )
    arguments = cli_call.lists_from_scalars(arguments, spec.input_model.model_json_schema())
    result = anyio.run(_call, server, tool, arguments)
    if result.is_error:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        refused = _refused(server, spec, arguments)
        raise _fail(
            cli_call.terminal_message(text, tool, set(server.tools)),
            code=cli_call.EXIT_USAGE if refused else cli_call.EXIT_TOOL_ERROR,
        )
    data = result.structured_content or {}
    if as_json:
        _print_json(data)
    else:
        render.result(out, tool, data)
    if tool == "launch_serve":
        err.print(ONE_SHOT_ENGINE, soft_wrap=True, highlight=False)
    raise typer.Exit(cli_call.exit_code(data))


def _refused(server, spec, arguments: dict) -> bool:
    """Whether the call failed on its arguments alone (schema or expect), before anything ran:
    the same checks the server makes first, repeated here to tell a usage error from a tool error."""
    from ..tools.base import AgentError
    from ..tools.common.expect import check
    from .app import _pre_parse

    try:
        inp = spec.input_model.model_validate(_pre_parse(spec, arguments))
        check(inp.expect, spec.catalogue, has_baseline=inp.has_baseline())
    except (ValueError, AgentError):  # pydantic's ValidationError and ExpectError are ValueErrors
        return True
    return False


# `call` builds a server for one tool call and closes it on exit, stopping every engine it started.
ONE_SHOT_ENGINE = (
    "note: the engine lived only as long as this command and was stopped when it "
    "exited, so its handle is gone. To keep one running, start the server "
    "(infra-agent serve --http) and call launch_serve, serve_benchmark and "
    "stop_serve from one MCP client, or use infra-agent agent; or start and "
    "benchmark it in one call: infra-agent call serve_benchmark engine=builtin ..."
)


async def _call(server, tool: str, arguments: dict):
    from mcp import Client

    try:
        async with Client(server) as client:
            return await client.call_tool(tool, arguments, progress_callback=_progress)
    finally:
        await server.aclose()


async def _progress(progress: float, total: float | None, message: str | None) -> None:
    """A long call's progress, on stderr as it comes (stdout keeps the answer alone)."""
    if message:
        where = f"[{progress:g}/{total:g}] " if total else ""
        print(f"{where}{message}", file=sys.stderr, flush=True)


parse_arguments = cli_call.parse_arguments  # the name tests and scripts import from here


@app.command("open-engine")
def open_engine(
    engine: Annotated[str, typer.Argument(help="builtin, transformers, vllm, sglang or command.")],
    args: Annotated[
        Optional[list[str]],
        typer.Argument(help="launch_serve's engine args as key=value pairs or one JSON object."),
    ] = None,
    port: Annotated[int, typer.Option(help="TCP port on 127.0.0.1; 0: a free one.")] = 0,
    token: Annotated[
        Optional[str], typer.Option(help="Require `Authorization: Bearer TOKEN`.")
    ] = None,
    workspace: WorkspaceOpt = None,
    allow_unsandboxed: Annotated[bool, typer.Option("--allow-unsandboxed")] = False,
) -> None:
    """Start an engine (launch_serve with expose) and keep it open on 127.0.0.1 for your own
    clients (curl, vllm bench serve, guidellm) until Ctrl-C; it prints the URL first."""
    try:
        engine_args = cli_call.parse_arguments(args or [])
    except ValueError as exc:
        raise _fail(str(exc)) from None
    server = _build(workspace, allow_unsandboxed)
    expose = {"port": port} | ({"token": token} if token else {})
    arguments = {"engine": engine, "args": engine_args, "expose": expose}
    try:
        anyio.run(_hold_open, server, arguments)
    except KeyboardInterrupt:
        pass


async def _hold_open(server, arguments: dict) -> None:
    from mcp import Client

    try:
        async with Client(server) as client:
            result = await client.call_tool("launch_serve", arguments)
            if result.is_error:
                text = " ".join(getattr(c, "text", "") for c in result.content)
                raise _fail(text, code=cli_call.EXIT_TOOL_ERROR)
            data = result.structured_content or {}
            print(data["url"], flush=True)  # stdout: the URL alone, for scripts
            err.print(f"{data['summary']}; Ctrl-C stops it", soft_wrap=True, highlight=False)
            await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await server.aclose()


@app.command()
def experiments(
    workspace: WorkspaceOpt = None,
    tool: Annotated[Optional[str], typer.Option(help="Only this tool.")] = None,
    kernel: Annotated[Optional[str], typer.Option(help="Only this kernel.")] = None,
    since: Annotated[Optional[str], typer.Option(help="ISO time or an age such as 2h.")] = None,
    run: Annotated[
        Optional[str], typer.Option(help="Only calls made by this agent run (run id).")
    ] = None,
    limit: Annotated[int, typer.Option(help="Most rows.")] = 20,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List recent experiments from the workspace's ledger (read-only)."""
    from ..tools.base import AgentError
    from ..tools.list_experiments import parse_since, summarise

    server = _build(workspace)
    try:
        rows = server.state.ledger.query(
            tool=tool, kernel=kernel, since=parse_since(since), run_id=run, limit=limit
        )
    except AgentError as exc:
        raise _fail(str(exc)) from None
    summaries = [summarise(r).model_dump() for r in rows]
    if as_json:
        _print_json(summaries)
    else:
        render.experiments_table(out, summaries)


@app.command()
def report(
    workspace: WorkspaceOpt = None,
    since: Annotated[Optional[str], typer.Option(help="ISO time or an age such as 12h.")] = None,
    until: Annotated[Optional[str], typer.Option(help="ISO time or an age such as 1h.")] = None,
    kernel: Annotated[Optional[str], typer.Option(help="Only this kernel.")] = None,
    sweep: Annotated[
        Optional[str],
        typer.Option(help="Only this sweep (its experiment id, e.g. e00012-ab3f) and its trials."),
    ] = None,
    out_dir: Annotated[
        Optional[Path],
        typer.Option("--out", help="Folder for the site; default: <workspace state>/report."),
    ] = None,
) -> None:
    """Write the morning report: a static site over the ledger (summary, timeline, one page per
    experiment) that opens from disk."""
    from .report import ReportError, report_for_workspace

    try:
        written = report_for_workspace(
            workspace, since=since, until=until, kernel=kernel, site=out_dir, sweep=sweep
        )
    except ReportError as exc:
        raise _fail(str(exc)) from None
    out.print(
        f"{written.num_experiments} experiment(s), {written.num_index_pages} index page(s): "
        f"open {written.index.resolve().as_uri()}",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def config(
    client: Annotated[ClientName, typer.Option("--client", help="Which MCP client to configure.")],
    workspace: WorkspaceOpt = None,
    url: Annotated[
        Optional[str], typer.Option(help="Configure an HTTP server at this URL instead of stdio.")
    ] = None,
    token: Annotated[
        Optional[str], typer.Option(envvar="INFRA_AGENT_TOKEN", help="Bearer token for --url.")
    ] = None,
) -> None:
    """Print the exact client configuration snippet for this install."""
    if workspace is not None and not workspace.is_dir():
        raise _fail(f"workspace {str(workspace)!r} does not exist or is not a directory")
    ws = workspace.resolve() if workspace else None
    sys.stdout.write(clients.snippet(client.value, workspace=ws, url=url, token=token) + "\n")


@app.command("export-tools")
def export_tools(
    format: Annotated[
        ExportFormat, typer.Option("--format", help="Output format.")
    ] = ExportFormat.openai,
    workspace: WorkspaceOpt = None,
) -> None:
    """Print the tools as OpenAI function-calling definitions (JSON)."""
    server = _build(workspace)
    tools = anyio.run(server.list_tools)
    sys.stdout.write(json.dumps(clients.openai_tools(tools), indent=2) + "\n")


@app.command()
def agent(
    base_url: Annotated[
        str,
        typer.Option(
            help="The model API's root, e.g. https://api.z.ai/api/paas/v4 or "
            "http://127.0.0.1:8000/v1 (without /chat/completions)."
        ),
    ],
    model: Annotated[str, typer.Option(help="Model name the API serves, e.g. glm-4.6.")],
    goal: Annotated[
        str, typer.Option(help="What the agent should achieve, in one or two sentences.")
    ],
    workspace: WorkspaceOpt = None,
    api_key_env: Annotated[
        str,
        typer.Option(
            help="Environment variable holding the API key (sent as a bearer "
            "token; never written anywhere)."
        ),
    ] = "OPENAI_API_KEY",
    max_steps: Annotated[int, typer.Option(min=1, help="Most model turns.")] = 30,
    max_tokens_total: Annotated[
        int, typer.Option(min=1, help="Most prompt + completion tokens.")
    ] = 1_000_000,
    max_time_s: Annotated[
        float, typer.Option(min=1, help="Wall-clock budget of the run, seconds.")
    ] = 4 * 3600.0,
    max_tool_calls: Annotated[int, typer.Option(min=1, help="Most tool calls run.")] = 200,
    tools: Annotated[
        Optional[str], typer.Option(help="Offer only these tools (comma-separated).")
    ] = None,
    transcript: Annotated[
        Optional[Path],
        typer.Option(
            help="Transcript file (JSONL); default <workspace state>/agent-runs/<run id>.jsonl."
        ),
    ] = None,
    extra_body: Annotated[
        Optional[str],
        typer.Option(
            help='Provider fields merged into each request, as JSON, e.g. \'{"thinking": {"type": "disabled"}}\'.'
        ),
    ] = None,
    max_retries: Annotated[
        int, typer.Option(min=0, help="Retries of a busy or failing model API per turn.")
    ] = 5,
    max_completion_tokens: Annotated[
        int, typer.Option(min=1, help="max_tokens of each model turn.")
    ] = 8192,
    max_context_chars: Annotated[
        int,
        typer.Option(
            min=1000,
            help="Conversation size (characters, ~4 per token) beyond which older tool results are "
            "truncated; set it below the model's context window.",
        ),
    ] = 400_000,
    allow_unsandboxed: Annotated[bool, typer.Option("--allow-unsandboxed")] = False,
) -> None:
    """Let a model behind an OpenAI-compatible API drive the tools itself, until it answers or a budget ends.

    Exit codes: 0 the model answered, 3 a budget ended the run, 1 the model API failed, 2 bad command line."""
    from .agent.command import run_from_command_line

    options: dict[str, Any] = dict(
        base_url=base_url,
        model=model,
        goal=goal,
        api_key_env=api_key_env,
        max_steps=max_steps,
        max_tokens_total=max_tokens_total,
        max_time_s=max_time_s,
        max_tool_calls=max_tool_calls,
        tools=tools,
        transcript=transcript,
        extra_body=extra_body,
        max_retries=max_retries,
        max_completion_tokens=max_completion_tokens,
        max_context_chars=max_context_chars,
    )
    try:
        code = run_from_command_line(lambda: _build(workspace, allow_unsandboxed), **options)
    except (
        ValueError
    ) as exc:  # bad --extra-body, or --tools naming a tool this server does not have
        raise _fail(str(exc)) from None
    raise typer.Exit(code)


@app.command(
    context_settings={
        "allow_extra_args": True,
        "ignore_unknown_options": True,
        "help_option_names": [],
    }
)
def engine(ctx: typer.Context) -> None:
    """The built-in serving engine (OpenAI API): infra-agent engine [--checkpoint DIR] [--host H --port P] [...]."""
    from ..serving.engine.__main__ import (
        main as engine_main,
    )  # torch: imported only for this command

    raise typer.Exit(engine_main(ctx.args))


@app.command()
def lock(
    kernel: Annotated[str, typer.Argument(help="Kernel whose reference and tolerances to pin.")],
    workspace: WorkspaceOpt = None,
) -> None:
    """Pin a kernel's reference (hashes) so later numerics checks detect edits to it."""
    try:
        from ..tools.check_numerics.lock import lock_kernel
    except ImportError as exc:
        raise _fail(f"kernel locking is not available in this install ({exc})") from None
    from ..kernels.workspace import WorkspaceError, load_workspace
    from ..tools.base import AgentError

    try:
        ws = load_workspace(workspace)
        result = lock_kernel(ws, kernel)
    except (WorkspaceError, AgentError) as exc:
        raise _fail(str(exc)) from None
    _print_json(result)


@app.command()
def gc(
    workspace: WorkspaceOpt = None,
    max_age_days: Annotated[
        float, typer.Option(help="Delete the artifacts of experiments older than this, days.")
    ] = 30.0,
    max_gb: Annotated[
        float,
        typer.Option(
            help="Then delete the oldest experiments' artifacts until they total this, GB."
        ),
    ] = 20.0,
    keep_days: Annotated[
        float,
        typer.Option(help="Never touch experiments (and job folders) younger than this, days."),
    ] = 1.0,
) -> None:
    """Delete stored code (blobs) that no experiment in the ledger references, rebuilt snapshot
    folders, and old experiments' artifacts and job folders (never a pinned or recent experiment's,
    nor what one needs: docs/workspaces.md, 'What gc keeps'); prints what it freed."""
    import time

    from ..kernels.snapshots import collect_garbage
    from .retention import Policy, collect

    server = _build(workspace)
    ledger = server.state.ledger
    running = ledger.running_ids()
    if running:  # their snapshots are not in the ledger until they close
        raise _fail(
            f"{len(running)} call(s) still running ({', '.join(running[:5])}); run gc when the server "
            "is idle"
        )
    state_dir = server.state.workspace.state_dir
    now = time.time()
    policy = Policy(max_age_days=max_age_days, max_bytes=int(max_gb * 2**30), keep_days=keep_days)
    files = collect(state_dir, ledger, policy, now)
    report = collect_garbage(state_dir, ledger.code_shas(), now)
    _print_json(
        {
            "state_dir": str(state_dir),
            **dataclasses.asdict(report),  # bytes_freed: the code blobs'
            **dataclasses.asdict(files),
            "total_bytes_freed": report.bytes_freed
            + files.artifact_bytes_freed
            + files.job_bytes_freed,
            "policy": dataclasses.asdict(policy),
        }
    )


@app.command()
def pin(
    experiment_id: Annotated[str, typer.Argument(help="The experiment whose files gc keeps.")],
    workspace: WorkspaceOpt = None,
    off: Annotated[bool, typer.Option("--off", help="Unpin: gc's policy applies again.")] = False,
) -> None:
    """Keep an experiment's artifacts (and what it needs: its baseline, its sweep) from gc."""
    server = _build(workspace)
    if not server.state.ledger.pin(experiment_id, not off):
        raise _fail(f"no experiment {experiment_id!r} in the ledger (list_experiments shows them)")
    _print_json({"experiment_id": experiment_id, "pinned": not off})


def _print_version(value: bool) -> None:
    if value:
        from ..tools.common import provenance

        sys.stdout.write(f"infra-agent {provenance.package_version('infra-agent') or 'unknown'}\n")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the installed version and exit.",
        ),
    ] = False,
) -> None:
    """An MCP tool server for optimising an inference stack."""


app.command("eval")(eval_command)  # infra-agent eval: server/eval/command.py


def main(argv: list[str] | None = None) -> None:
    app(args=argv, prog_name="infra-agent")
