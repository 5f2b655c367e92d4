"""Repair candidates that rewrite the backward calls themselves (``repair.py`` says where they are
tried, ``repair_candidates.py`` what a candidate is):

* drop a call at any frame of either backward stack (never one that steps an optimizer), or one
  of two backwards of the same tensor;
* merge backwards of values sharing a graph: two in one function (across the ``if`` around the
  second), the backward of each loss of a loop (summed, backwarded once after the loop), one in a
  helper deferred to the backward that failed, or one in a hook added to the loss the hook returns;
* make an ``autograd.grad`` whose graph a later backward needs differentiable (``create_graph``).

Apart from the other kinds because these change which backwards run, and keep every graph the
forward builds; a drop gives up the gradients of a backward the author wrote, and ranks last.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis import FileAnalysis, as_operand, assigned_names, code_of, find_nodes, is_single_call, with_backward_merged_into_branches
from ..edits import Fix
from .repair_candidates import Kind, Proposal, _Blamed, _is_import_or_docstring, _loop_around, _whole_backward


def _dropped_calls(blamed: _Blamed) -> Iterator[Proposal]:
    """Each call at a frame of either backward stack dropped (not one that led to a step)."""
    for line in dict.fromkeys(blamed.freeing + blamed.failing):
        statement = blamed.analysis.statement_at(line)
        if line in blamed.steps or not is_single_call(statement):
            continue
        place = blamed.place(line)
        yield (
            f"drop the call at {place} (`{code_of(statement.body[0]).strip()}`)",
            Fix(safe=False, remove=(statement,)),
            Kind.DROPS,
            f"no longer adds the gradients of the call at {place}",
        )


def _differentiable_gradients(blamed: _Blamed) -> Iterator[Proposal]:
    """An ``autograd.grad`` that freed the graph a later backward needs, made differentiable: a
    penalty computed from its result then trains what the gradient depends on."""
    for line in blamed.freeing[:1]:
        statement = blamed.analysis.statement_at(line)
        if statement is None:
            continue
        for call in find_nodes(statement, cst.Call):
            if blamed.analysis.names.qualify(call.func) != "torch.autograd.grad":
                continue
            if any(a.keyword is not None and a.keyword.value == "create_graph" for a in call.args):
                continue
            args = [a for a in call.args if a.keyword is None or a.keyword.value != "retain_graph"]
            if len(args) > 3 and args[3].keyword is None:
                continue  # retain_graph given by position
            args = [*args[:-1], args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)] if args else args
            args.append(
                cst.Arg(cst.Name("True"), keyword=cst.Name("create_graph"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
            )
            rewritten = statement.deep_replace(call, call.with_changes(args=args))
            place = blamed.place(line)
            yield (
                f"take the gradient at {place} with create_graph=True",
                Fix(safe=False, replace=((statement, rewritten),)),
                Kind.KEEPS,
                f"makes the gradient taken at {place} differentiable: what is computed from it trains too",
            )


def _merged_backwards(blamed: _Blamed, freeing: cst.CSTNode | None, failing: cst.CSTNode) -> Iterator[Proposal]:
    """Backwards of values that share a graph, made one backward."""
    analysis = blamed.analysis
    earlier = _whole_backward(analysis, freeing) if freeing is not None and freeing is not failing else None
    if earlier is not None and earlier.tensor is not None:
        yield from _added_to_returned(blamed, earlier, failing)
    site = _whole_backward(analysis, failing)
    if site is None or site.tensor is None:
        return
    loop = _loop_around(analysis, failing)
    if freeing is failing and loop is not None and not analysis.updates_parameters(loop.node.body):
        yield from _summed_over_loop(blamed, site, loop.node)
    if earlier is None or earlier.tensor is None:
        return
    same_function = analysis.function_at(analysis.line(freeing)) is analysis.function_at(analysis.line(failing))
    if same_function and analysis.start(freeing) < analysis.start(failing):
        yield from _merged_across_branches(blamed, earlier, site)
    elif not same_function:
        yield from _deferred(blamed, earlier, site)


def _unused_name(analysis: FileAnalysis, wanted: str) -> str:
    taken = analysis.module.code
    name, number = wanted, 2
    while name in taken:
        name, number = f"{wanted}_{number}", number + 1
    return name


def _summed_over_loop(blamed: _Blamed, site, loop: cst.CSTNode) -> Iterator[Proposal]:
    """``for l in losses: l.backward()`` → the losses summed in the loop, backwarded once after it."""
    analysis = blamed.analysis
    base = site.tensor.value if isinstance(site.tensor, cst.Name) else "loss"
    total = _unused_name(analysis, f"{base}_sum")
    start = cst.parse_statement(f"{total} = 0")
    added = cst.parse_statement(f"{total} = {total} + {code_of(site.tensor)}")
    backward = cst.SimpleStatementLine([cst.Expr(site.with_tensor(cst.Name(total)))])
    line = analysis.line(loop)
    yield (
        f"sum the losses the loop at {blamed.place(line)} backwards one by one, and backward the sum once after it",
        Fix(safe=False, insert_before=((loop, (start,)),), replace=((site.statement, added),), insert_after=((loop, (backward,)),)),
        Kind.MERGES,
        f"backwards the losses of the loop at {blamed.place(line)} together, after the loop",
    )


def _merged_across_branches(blamed: _Blamed, earlier, site) -> Iterator[Proposal]:
    """The earlier backward merged into the failing one, which an ``if`` (or several) holds: each
    branch that does not reach the failing backward backwards the earlier loss alone."""
    analysis = blamed.analysis
    block = analysis.block_of(earlier.statement)
    outer = site.statement
    branches: list[cst.If] = []
    while outer is not None and analysis.block_of(outer) is not block:
        outer = analysis.tree.parent(outer)
        if isinstance(outer, cst.If):
            branches.append(outer)
        elif not isinstance(outer, (cst.IndentedBlock, cst.Else)):
            return  # a loop or a function between: the failing backward runs another number of times
    if outer is None or not branches or block.index(outer) < block.index(earlier.statement):
        return
    between = block.statements[block.index(earlier.statement) + 1 : block.index(outer)]
    if any(analysis.updates_parameters(s) for s in between):
        return
    merged_call = analysis.merged_backward([earlier, site])
    if merged_call is None:
        return
    merged = site.statement.with_changes(body=[cst.Expr(merged_call)])
    rewritten = with_backward_merged_into_branches(outer, branches, site.statement, merged, earlier.statement)
    line, earlier_line = analysis.line(site.statement), analysis.line(earlier.statement)
    yield (
        f"merge the backward at {blamed.place(earlier_line)} into the one at {blamed.place(line)}, and keep it alone where that one does not run",
        Fix(safe=False, replace=((outer, rewritten),), remove=(earlier.statement,)),
        Kind.MERGES,
        f"backwards the losses of {blamed.place(earlier_line)} and {blamed.place(line)} together",
    )


def _deferred(blamed: _Blamed, earlier, site) -> Iterator[Proposal]:
    """A backward in a helper (a module's forward) deferred to the backward that failed, which
    then backwards the sum: the losses share a graph."""
    analysis = blamed.analysis
    pending = _unused_name(analysis, "deferred_losses")
    body = analysis.module.body
    first = next((s for s in body if not _is_import_or_docstring(s)), None)
    if first is None:
        return
    kept = cst.parse_statement(f"{pending}.append({code_of(earlier.tensor)})")
    total = cst.parse_expression(f"{code_of(as_operand(site.tensor))} + sum({pending})")
    merged = site.statement.with_changes(body=[cst.Expr(site.with_tensor(total))])
    line, earlier_line = analysis.line(site.statement), analysis.line(earlier.statement)
    yield (
        f"defer the backward at {blamed.place(earlier_line)} to the one at {blamed.place(line)}, which backwards both",
        Fix(
            safe=False,
            insert_before=((first, (cst.parse_statement(f"{pending} = []"),)),),
            replace=((earlier.statement, earlier.statement.with_changes(body=kept.body)), (site.statement, merged)),
            insert_after=((site.statement, (cst.parse_statement(f"{pending}.clear()"),)),),
        ),
        Kind.MERGES,
        f"backwards the loss of {blamed.place(earlier_line)} with the one of {blamed.place(line)}",
    )


def _added_to_returned(blamed: _Blamed, earlier, failing: cst.CSTNode) -> Iterator[Proposal]:
    """A backward inside a function whose returned loss is what the failing backward backwards
    (a trainer's hook, a loss computation): the loss added to what it returns instead."""
    analysis = blamed.analysis
    function = analysis.function_at(analysis.line(earlier.statement))
    if function is None or not isinstance(function.body, cst.IndentedBlock) or any(function is analysis.function_at(line) for line in blamed.failing):
        return  # the failing backward runs inside it: it does not backward what it returns
    if not _backwards_what_returns(analysis, failing, function.name.value):
        return
    last = function.body.body[-1]
    if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return) and last.body[0].value is not None):
        return
    if analysis.block_of(earlier.statement) is None or analysis.block_of(earlier.statement).owner is not function.body:
        return
    returned = last.body[0].value
    total = cst.parse_expression(f"{code_of(as_operand(returned))} + {code_of(earlier.tensor)}")
    line = analysis.line(earlier.statement)
    yield (
        f"add the loss backwarded at {blamed.place(line)} to what `{function.name.value}` returns",
        Fix(safe=False, remove=(earlier.statement,), replace=((last, last.with_changes(body=[last.body[0].with_changes(value=total)])),)),
        Kind.MERGES,
        f"backwards the loss of {blamed.place(line)} with the one `{function.name.value}` returns",
    )


def _backwards_what_returns(analysis: FileAnalysis, failing: cst.CSTNode, name: str) -> bool:
    """Whether the failing backward backwards what a function called ``name`` returns: it runs
    in a framework (no backward of the user's code failed), or the tensor it backwards was
    assigned a call of ``name``."""
    site = _whole_backward(analysis, failing)
    if site is None:
        return not analysis.sites_in(failing)
    block = analysis.block_of(failing)
    if site.tensor is None or not isinstance(site.tensor, cst.Name) or block is None:
        return False
    for earlier in reversed(block.statements[: block.index(failing)]):
        if site.tensor.value in assigned_names(earlier):
            called = {call.func.attr.value if isinstance(call.func, cst.Attribute) else code_of(call.func) for call in find_nodes(earlier, cst.Call)}
            return name in called
    return False


def _backward_fixes(analysis: FileAnalysis, failing: cst.CSTNode | None) -> Iterator[Proposal]:
    """Drop one of two backwards of the same tensor (the earlier one, wherever it is, or the
    failing one); or merge the failing backward into the closest earlier one of its block."""
    site = _whole_backward(analysis, failing)
    if site is None:
        return
    line = analysis.line(failing)
    repeated = [analysis.site_of(call) for call in site.value.backwarded if call is not site.call]
    for earlier in repeated:  # a helper or training_step backwarded what it returned
        if earlier.is_whole_statement:
            earlier_line = analysis.line(earlier.statement)
            yield (
                f"drop the earlier backward at line {earlier_line}",
                Fix(safe=False, remove=(earlier.statement,)),
                Kind.DROPS,
                f"no longer adds the gradients of the backward at line {earlier_line}",
            )
    if repeated:
        yield (
            f"drop the repeated backward at line {line}",
            Fix(safe=False, remove=(failing,)),
            Kind.DROPS,
            f"no longer adds the gradients of the backward at line {line}",
        )
    block = analysis.block_of(failing)
    if block is None or site.tensor is None:
        return
    for earlier_statement in reversed(block.statements[: block.index(failing)]):
        if analysis.updates_parameters(earlier_statement):
            return  # an optimizer steps between: merging would change what it steps on
        earlier = _whole_backward(analysis, earlier_statement)
        if earlier is None or earlier.tensor is None:
            continue
        if earlier.tensor.deep_equals(site.tensor):
            if not repeated:
                yield (
                    f"drop the repeated backward at line {line}",
                    Fix(safe=False, remove=(failing,)),
                    Kind.DROPS,
                    f"no longer adds the gradients of the backward at line {line}",
                )
            return
        total = cst.parse_expression(f"{code_of(earlier.tensor)} + {code_of(site.tensor)}")
        merged = earlier_statement.with_changes(body=[cst.Expr(earlier.with_tensor(total))])
        earlier_line = analysis.line(earlier_statement)
        yield (
            f"merge the backward at line {line} into the one at line {earlier_line}",
            Fix(safe=False, replace=((earlier_statement, merged),), remove=(failing,)),
            Kind.MERGES,
            f"backwards the losses of lines {earlier_line} and {line} together",
        )
        return
