"""Repair candidates for the values that held part of the freed graph when the run failed (a carried
state, a cached tensor, a list of losses; ``repair.py`` says where they are tried,
``repair_candidates.py`` what a candidate is): detach the value after the backward that freed it
(following its structure: tuple, list, dict, namedtuple, an object's own ``detach()``), reset it as
its class's constructor does, clear a container every iteration, or detach it where the failing
backward's code reads it.

Apart from the other kinds because these start from what the run found holding the graph, not from
a line of a stack: the value is named as the code reaches it (``self.h``, ``cache[0]``), in the
function whose frame held it.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis import FileAnalysis, assigned_names, code_of, find_nodes, is_name, is_single_call, method_called, read_names
from ..edits import Fix
from .repair_candidates import Kind, Proposal, _Blamed, _ReadReplacer, _function_starting, _loop_around
from .runner import HeldGraph


def _reset_every_iteration(analysis: FileAnalysis, loop: cst.CSTNode) -> Iterator[Proposal]:
    """Containers the loop around the failing backward clears only under a condition (``if
    accelerator.sync_gradients:``, every N steps), cleared every iteration instead, just before
    that ``if``: no iteration then reads what an earlier one stored (a feature bank, a buffer)."""
    for branch in find_nodes(loop, cst.If):
        if not isinstance(branch.body, cst.IndentedBlock) or analysis.block_of(branch) is None:
            continue
        resets = [s for s in branch.body.body if _clears(s)]
        if resets and len(resets) < len(branch.body.body):
            names = ", ".join(code_of(s.body[0].value.func.value) for s in resets)
            yield (
                f"clear {names} in every iteration, not only when line {analysis.line(branch)} holds",
                Fix(safe=False, move=tuple((reset, branch) for reset in resets)),
                Kind.KEEPS,
                f"keeps in {names} only what each iteration stores",
            )


def _clears(statement: cst.BaseStatement) -> bool:
    """Whether ``statement`` is ``x.clear()``."""
    return is_single_call(statement) and method_called(call := statement.body[0].value) == "clear" and not call.args


def _held_graph_fixes(blamed: _Blamed, failing: cst.CSTNode | None, freeing: cst.CSTNode | None) -> Iterator[Proposal]:
    """The values that held the freed graph: detached after the backward that freed it, reset as
    their constructor sets them, cleared, or detached where the failing backward's code reads them;
    last, detached after that backward with what the code after it builds on."""
    analysis = blamed.analysis
    loop = _loop_around(analysis, failing)
    by_function: dict[int, list[HeldGraph]] = {}
    for held in blamed.held:
        by_function.setdefault(held.function_line, []).append(held)
    built_on_after_freeing: list[Proposal] = []
    for function_line, held in by_function.items():
        function = _function_starting(analysis, function_line)
        in_loop = loop is not None and analysis.function_at(analysis.line(loop.node)) is function
        loop_body = find_nodes(loop.node.body, cst.SimpleStatementLine) if in_loop else []
        carried = [h for h in held if _state_path(h) or _read_before_written(loop_body, h.expression)]
        # An object's own detach() detaches what it holds: its attributes need no statement of their own.
        owners = [h.expression for h in carried if h.structure == "detachable"]
        carried = [h for h in carried if not any(h.expression.startswith(f"{owner}.") for owner in owners)]
        if freeing is not None and analysis.function_at(analysis.line(freeing)) is function:
            yield from _detached_after(blamed, carried, freeing)
            # A value the code after that backward builds a new one on (the sum of losses a second
            # pass adds onto) carries the freed graph on too.
            after = [s for s in _statements_of(analysis, function) if analysis.start(s) > analysis.start(freeing)]
            built_on = [h for h in held if h not in carried and _built_on_before_written(after, h.expression)]
            if built_on:
                built_on_after_freeing.extend(_detached_after(blamed, carried + built_on, freeing))
        if in_loop:
            yield from _reset_where_loop_starts(blamed, carried, loop.node)
        for container in (h for h in held if h.structure in ("list", "dict")):
            yield from _cleared(blamed, container, failing, freeing, function)
    yield from _detached_where_read(blamed, failing, freeing)
    yield from built_on_after_freeing


def _read_before_written(statements: list[cst.SimpleStatementLine], name: str) -> bool:
    """Whether ``statements`` (a loop's body), in order, read ``name`` before they assign it: the
    value then comes from the iteration before."""
    for statement in statements:
        small = statement.body[0] if len(statement.body) == 1 else None
        reads = read_names(small.value) if isinstance(small, cst.Assign) else read_names(statement)
        if name in reads:
            return True
        if name in assigned_names(statement):
            return False
    return False


def _built_on_before_written(statements: list[cst.SimpleStatementLine], name: str) -> bool:
    """Whether ``statements``, in order, compute a value from ``name`` (``total = name + …``,
    ``name += …``) before they assign it anew; a print or a log of it builds nothing."""
    for statement in statements:
        small = statement.body[0] if len(statement.body) == 1 else None
        if isinstance(small, cst.AugAssign) and name in read_names(statement):
            return True
        if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None and name in read_names(small.value):
            return True
        if name in assigned_names(statement):
            return False
    return False


def _state_path(held: HeldGraph) -> bool:
    """An attribute or item: state an object keeps between calls."""
    return "." in held.expression or "[" in held.expression


def _detach_statements(held: HeldGraph, torch: str | None) -> list[list[str]]:
    """Ways to detach ``held`` in place of itself, as its structure allows."""
    value = held.expression
    part = "part.detach()" if held.tensor_parts or torch is None else f"part.detach() if {torch}.is_tensor(part) else part"
    item = "item.detach()" if held.tensor_parts or torch is None else f"item.detach() if {torch}.is_tensor(item) else item"
    return {
        "tensor": [[f"{value} = {value}.detach()"]],
        "namedtuple": [[f"{value} = type({value})(*({part} for part in {value}))"]],
        "tuple": [[f"{value} = tuple({part} for part in {value})"]],
        "list": [[f"{value} = [{part} for part in {value}]"]],
        "dict": [[f"{value} = {{key: {item} for key, item in {value}.items()}}"]],
        "detachable": [[f"{value}.detach()"], [f"{value} = {value}.detach()"]],
    }.get(held.structure, [])


def _detached_after(blamed: _Blamed, carried: list[HeldGraph], freeing: cst.CSTNode) -> Iterator[Proposal]:
    if not carried:
        return
    torch = blamed.torch
    place = blamed.place(blamed.analysis.line(freeing))
    names = ", ".join(h.expression for h in carried)
    ways = [_detach_statements(h, torch) for h in carried]
    for variant in range(max(len(w) for w in ways)):
        lines = [line for w in ways if w for line in w[min(variant, len(w) - 1)]]
        if not lines:
            continue
        yield (
            f"detach {names} after the backward at {place}",
            Fix(safe=False, insert_after=((freeing, tuple(cst.parse_statement(text) for text in lines)),)),
            Kind.CUTS,
            f"truncates backpropagation through {names} at each backward at {place}",
        )


def _reset_where_loop_starts(blamed: _Blamed, carried: list[HeldGraph], loop: cst.CSTNode) -> Iterator[Proposal]:
    """State an object keeps, set back where every iteration starts to what its constructor sets
    (``None``): each iteration starts it afresh."""
    if not isinstance(loop.body, cst.IndentedBlock):
        return
    resets = [h.expression for h in carried if h.owner and _constructor_sets_none(blamed.analysis, h.owner, h.expression.rsplit(".", 1)[-1])]
    if not resets:
        return
    place = blamed.place(blamed.analysis.line(loop))
    names = ", ".join(resets)
    yield (
        f"reset {names} where each iteration of the loop at {place} starts",
        Fix(safe=False, insert_before=((loop.body.body[0], tuple(cst.parse_statement(f"{r} = None") for r in resets)),)),
        Kind.CUTS,
        f"starts {names} afresh at each iteration of the loop at {place}, as the constructor does",
    )


def _constructor_sets_none(analysis: FileAnalysis, class_name: str, attribute: str) -> bool:
    constructor = analysis.constructor_of(class_name)
    return constructor is not None and any(
        len(a.targets) == 1 and code_of(a.targets[0].target) == f"self.{attribute}" and is_name(a.value, "None")
        for a in find_nodes(constructor, cst.Assign)
    )


def _cleared(blamed: _Blamed, held: HeldGraph, failing, freeing, function) -> Iterator[Proposal]:
    """A container that keeps the freed graph, cleared where each iteration of a loop around the
    failing backward starts, innermost first, or after the backward that freed it."""
    analysis = blamed.analysis
    clear = cst.parse_statement(f"{held.expression}.clear()")
    if failing is not None:
        for loop in analysis.loops_around(failing):
            if loop.is_call or not isinstance(loop.node.body, cst.IndentedBlock):
                continue
            if analysis.function_at(analysis.line(loop.node)) is not function and function is not None:
                continue
            place = blamed.place(analysis.line(loop.node))
            yield (
                f"clear {held.expression} where each iteration of the loop at {place} starts",
                Fix(safe=False, insert_before=((loop.node.body.body[0], (clear,)),)),
                Kind.CUTS,
                f"keeps in {held.expression} only what each iteration of the loop at {place} stores",
            )
    if freeing is not None:
        place = blamed.place(analysis.line(freeing))
        yield (
            f"clear {held.expression} after the backward at {place}",
            Fix(safe=False, insert_after=((freeing, (clear,)),)),
            Kind.CUTS,
            f"forgets what {held.expression} held once the backward at {place} used it",
        )


def _detached_where_read(blamed: _Blamed, failing: cst.CSTNode | None, freeing: cst.CSTNode | None) -> Iterator[Proposal]:
    """A tensor that held the freed graph, detached where the code of the failing backward's
    stack reads it after the backward that freed it (``self.pred_real`` cached by the
    discriminator's step and read by the generator's; a real score read again by the second
    of two losses): that code then uses its value, not its graph."""
    analysis = blamed.analysis
    scopes = list({id(f): f for f in (analysis.function_at(line) for line in blamed.failing)}.values())
    for held in blamed.held:
        if not held.only_freed:
            continue  # detaching it would cut a graph that is still whole too
        own = _function_starting(analysis, held.function_line)
        for scope in scopes:
            if not (_state_path(held) or held.function_line == 0 or own is scope):
                continue
            after = freeing if freeing is not None and analysis.function_at(analysis.line(freeing)) is scope else None
            replacer = _ReadReplacer(held.expression, cst.parse_expression(f"{held.expression}.detach()"))
            replacements = []
            for statement in _statements_of(analysis, scope):
                if statement is failing or after is not None and analysis.start(statement) <= analysis.start(after):
                    continue
                rewritten = statement.visit(replacer)
                if not rewritten.deep_equals(statement):
                    replacements.append((statement, rewritten))
            if replacements:
                where = f"`{scope.name.value}`" if scope is not None else "the module's code"
                since = f" after the backward at {blamed.place(analysis.line(after))}" if after is not None else ""
                yield (
                    f"detach {held.expression} where {where} reads it{since}",
                    Fix(safe=False, replace=tuple(replacements)),
                    Kind.CUTS,
                    f"lets no gradient flow back through {held.expression} where {where} reads it{since}",
                )


def _statements_of(analysis: FileAnalysis, scope: cst.FunctionDef | None) -> list[cst.SimpleStatementLine]:
    """The statement lines of a function (or of the module's own code), not of functions in it."""
    statements = find_nodes(scope if scope is not None else analysis.module, cst.SimpleStatementLine)
    return [s for s in statements if analysis.function_at(analysis.line(s)) is scope]
