"""The ``gradfix`` command line. Parses options, calls the library, renders; no analysis here.

Exit codes: 0 clean, 1 findings (``check``), changes pending / findings left (``fix``), failed
checks (``verify``) or an error found (``diagnose``); 2 usage errors, bad input or internal errors
(an error gradfix did not foresee is one line, its traceback with ``--verbose``).

This module is the app: its help, its commands registered in the order ``gradfix --help`` lists
them, and a run of the command line, with usage errors in gradfix's words. The commands are in
modules of their own, grouped as ruff groups its own (``check`` and ``fix``; ``pr``; ``rules`` and
``explain``; ``server``; ``verify`` and ``diagnose``, which run code); what they share is
``options.py``'s.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import TYPE_CHECKING, Annotated, Any, Iterator, Mapping, NamedTuple, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from gradfix import __version__

from . import formats, options, render
from .conventions import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS
from .options import Verbose

if TYPE_CHECKING:
    from click import HelpFormatter  # (typer's own copy of click, in recent typer)

# LibCST and the analysis are imported where a command needs them (the check for code on stdin
# and for reviewing fixes, the execution layer for verify and diagnose; the run imports the check
# for the files the cache does not answer): `check` answered by the cache loads neither. A
# command's module is imported, and its options read, only when that command runs (or the help
# lists it): typer reading every command's signature was a fifth of a one-file check's time.


class Command(TyperCommand):
    """Help as ruff's and black's read: arguments by their metavar (``PATH...``), without the
    Python types of their values."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        return [self.options_metavar or "", *(p.metavar or p.name or "" for p in self._parameters(ctx, "argument"))]

    def format_options(self, ctx: typer.Context, formatter: HelpFormatter) -> None:
        arguments = [(p.metavar or p.name or "", getattr(p, "help", None) or "") for p in self._parameters(ctx, "argument")]
        options = [record for p in self._parameters(ctx, "option") if (record := p.get_help_record(ctx))]
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def _parameters(self, ctx: typer.Context, kind: str) -> list:
        return [p for p in self.get_params(ctx) if p.param_type_name == kind]


class CommandEntry(NamedTuple):
    """A command of the app: the function of a module of this package that typer reads."""

    module: str
    function: str
    settings: Mapping[str, Any] = {}


# The commands, in the order `gradfix --help` lists them.
COMMANDS = {
    "check": CommandEntry("check_commands", "check"),
    "fix": CommandEntry("check_commands", "fix"),
    "pr": CommandEntry("pr_command", "pr"),
    "rules": CommandEntry("rule_commands", "rules"),
    "explain": CommandEntry("rule_commands", "explain"),
    "rule": CommandEntry("rule_commands", "explain", {"help": "Explain a rule, with a before/after example (as `explain`, ruff's name for it)."}),
    "server": CommandEntry("server_command", "server"),
    "verify": CommandEntry("run_commands", "verify"),
    "diagnose": CommandEntry("run_commands", "diagnose", {"context_settings": {"ignore_unknown_options": True}}),
}


class CommandsOnDemand(Mapping[str, Any]):
    """The app's commands by name, each imported and read by typer the first time it is asked for."""

    def __init__(self, entries: Mapping[str, CommandEntry]) -> None:
        self._entries = entries
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            entry = self._entries[name]
            function = getattr(importlib.import_module(f"{__package__}.{entry.module}"), entry.function)
            one_command = typer.Typer(rich_markup_mode=None, add_completion=False, pretty_exceptions_enable=False)
            one_command.command(name, cls=Command, **entry.settings)(function)
            self._built[name] = typer.main.get_command(one_command)
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


class Group(TyperGroup):
    """The app's group: its commands are ``COMMANDS``, read on demand."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.commands = CommandsOnDemand(COMMANDS)


app = typer.Typer(
    cls=Group,
    add_completion=True,  # --install-completion and --show-completion, as typer writes them
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="Find and fix the PyTorch training-loop bugs behind 'Trying to backward through the graph a second time'.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gradfix {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[Optional[bool], typer.Option("--version", "-V", callback=_version, is_eager=True, help="Show the version and exit.")] = None,
    verbose: Verbose = False,
) -> None:
    """Find and fix the PyTorch training-loop bugs behind 'Trying to backward through the graph a
    second time'."""
    render.notes.quiet = False  # until a command's --quiet says otherwise


# click's UsageError, of the click typer uses (its own copy, in recent typer), which exports no name for it
UsageError = typer.BadParameter.__base__


def run() -> None:
    """Run the command line; ``gradfix.cli.main`` wraps it with signal handling. A usage error is
    one line in gradfix's words; an error gradfix did not foresee exits 2 with one line (its
    traceback too with --verbose)."""
    options.tracebacks_shown = False
    try:
        # Not standalone: click's usage errors come here instead of being printed in its words.
        status = app(prog_name="gradfix", standalone_mode=False)
    except typer.Abort:  # end of input at a prompt
        render.stderr.print("Aborted!")
        sys.exit(EXIT_FINDINGS)
    except UsageError as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # `gradfix` alone: the help (as typer tells it)
            error.show()
        else:
            render.stderr.print(usage_message(error))
        sys.exit(EXIT_ERROR)
    except formats.StepFileError as error:
        render.stderr.print(f"error: {error}")
        sys.exit(EXIT_ERROR)
    except Exception as error:
        if options.tracebacks_shown:
            traceback.print_exception(error)
        hint = "" if options.tracebacks_shown else " (--verbose shows where)"
        render.stderr.print(f"error: internal error: {type(error).__name__}: {error}{hint}")
        sys.exit(EXIT_ERROR)
    sys.exit(status if isinstance(status, int) else EXIT_CLEAN)


def usage_message(error: Exception) -> str:
    """A usage error as gradfix says it, on one line: an unknown option with the ones it may
    have meant, a value with what the option takes, a missing argument; and where the usage is
    shown."""
    context = getattr(error, "ctx", None)
    where = f" (see `{context.command_path} -h`)" if context is not None else ""
    parameter = getattr(error, "param", None)
    if hasattr(error, "possibilities"):  # click's NoSuchOption
        meant = error.possibilities
        return f"error: unknown option {error.option_name}" + (f" (did you mean {' or '.join(sorted(meant))}?)" if meant else "") + where
    if not isinstance(error, typer.BadParameter) or parameter is None:
        return f"error: {error.format_message()}{where}"
    name = parameter.opts[0] if parameter.param_type_name == "option" else (parameter.metavar or parameter.name)
    if hasattr(error, "param_type"):  # click's MissingParameter
        return f"error: missing {name}{where}"
    if isinstance(error, options.NotTaken):
        return f"error: {name} {error.message}{where}"
    return f"error: {name}: {error.message.rstrip('.')}{where}"
