"""``gradfix rules`` and ``gradfix explain`` (also ``gradfix rule``, ruff's name): the rules'
documentation, read from what each rule declares. Apart from the commands that check code: these
read no file of the user's.
"""

from __future__ import annotations

from typing import Annotated

import typer

from gradfix.codemods.registry import UnknownRuleError, all_rules, rule_by_code

from . import render
from .options import ListFormat, Verbose, _usage_error


def rules(
    output_format: Annotated[ListFormat, typer.Option("--output-format", metavar="FORMAT", help="text (a table) or json.")] = ListFormat.text,
    verbose: Verbose = False,
) -> None:
    """List the rules."""
    if output_format is ListFormat.json:
        render.print_json([render.rule_record(rule) for rule in all_rules()], lines=False)
    else:
        render.print_table(render.rules_table(all_rules()))


def explain(
    code: Annotated[str, typer.Argument(metavar="RULE", help="A rule code (GF001) or name (duplicate_backward).")], verbose: Verbose = False
) -> None:
    """Explain a rule, with a before/after example."""
    try:
        rule = rule_by_code(code)
    except UnknownRuleError:
        _usage_error(f"unknown rule: {code} (see `gradfix rules`)")
    typer.echo(render.explanation(rule))
