"""The `infra-agent` command line: serve, inspect, call tools, configure clients.

Everything a person can do here goes through the same server object an MCP client
talks to (`call` uses the in-memory client), so the terminal and the agent see the
same tools, validation, errors and ledger. Human output goes to stdout; when serving
stdio, stdout belongs to the protocol and every message goes to stderr.

One module a group of commands; the table below registers them, in the order
`infra-agent --help` lists them:

- serve.py: serve (the MCP server), engine (the built-in serving engine)
- call.py: tools, call, open-engine (through the in-memory MCP client)
- ledger.py: experiments, report (read the ledger)
- client_config.py: config, export-tools (set up other programs)
- agent.py: agent (a model drives the tools)
- workspace.py: lock, gc, pin (change what a workspace keeps)
- server/eval/command.py: eval (an agent scored on planted faults; its prepare, grade and
  report subcommands), listed last: typer lists groups after commands
- common.py: the --workspace option, building the server, errors, JSON output
- call_args.py: `call`'s arguments, exit codes and error text
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ..eval.command import eval_app
from . import agent, call, call_args, client_config, ledger, serve, workspace

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="An MCP tool server for optimising an inference stack. Kernel loop: compile, "
    "check numerics, microbenchmark and profile kernels. Serving loop: launch, load-test and "
    "profile serving engines. Every call is an experiment in a ledger you can list and "
    "compare; agent code runs sandboxed.",
)

app.command()(serve.serve)
app.command("tools")(call.list_tools)
app.command(epilog=call_args.EXIT_CODES_HELP)(call.call)
app.command("open-engine")(call.open_engine)
app.command()(ledger.experiments)
app.command()(ledger.report)
app.command()(client_config.config)
app.command("export-tools")(client_config.export_tools)
app.command()(agent.agent)
app.command(context_settings=serve.ENGINE_CONTEXT_SETTINGS)(serve.engine)
app.command()(workspace.lock)
app.command()(workspace.gc)
app.command()(workspace.pin)
app.add_typer(eval_app, name="eval")  # a group: the run, prepare, grade, report

parse_arguments = call_args.parse_arguments  # the name tests and scripts import from here


def _print_version(value: bool) -> None:
    if value:
        from ...tools.common import provenance

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


def main(argv: list[str] | None = None) -> None:
    app(args=argv, prog_name="infra-agent")
