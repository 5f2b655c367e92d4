"""Repair candidates at the lines of the forward stack, where the freed graph was built (``repair.py``
says where they are tried, ``repair_candidates.py`` what a candidate is):

* detach what a line stores, or build it under ``torch.no_grad()``;
* compute it again before the failing backward or at the start of the loop that backwards it
  (with the lines it is computed from), or again where a stored copy of it is read (an attribute
  read by the object's methods, a global read by a function);
* where the backward that freed the graph read the graph the failing one shares with it (an
  auxiliary loss backwarded inside a forward, a peer's or teacher's outputs): detach what it reads
  there, so that backward stops short of the shared graph.

Apart from the other kinds because these change the forward, not the backwards or the state kept
between them: a cut trains nothing through what it cuts, a computation again keeps every graph.
"""

from __future__ import annotations

import builtins
from typing import Iterator

import libcst as cst

from ..analysis import FileAnalysis, GradientEffect, as_operand, assigned_names, code_of, detached_where_stored, find_nodes, is_name, read_names
from ..edits import Fix
from .repair_candidates import Kind, Proposal, _Blamed, _ReadReplacer, _function_starting, _is_import_or_docstring, _loop_around, _whole_backward


def _builds_what_fails(analysis: FileAnalysis, statement: cst.CSTNode, failing: cst.CSTNode | None) -> bool:
    """Whether ``statement`` assigns, just before it in the same block, the tensor the failing
    backward backwards: cut there, the backward has nothing to walk."""
    site = _whole_backward(analysis, failing)
    block = analysis.block_of(statement)
    if site is None or not isinstance(site.tensor, cst.Name) or block is None or analysis.block_of(failing) is not block:
        return False
    return site.tensor.value in assigned_names(statement) and block.index(statement) < block.index(failing)


def _cutting_fixes(
    blamed: _Blamed, statement: cst.SimpleStatementLine, stored: cst.SimpleStatementLine | None, build_without_graph: bool = True
) -> Iterator[Proposal]:
    """Replace ``statement`` by ``stored`` (it, detaching what it stores); build it under
    ``torch.no_grad()``."""
    place = blamed.place(blamed.analysis.line(statement))
    if stored is not None:
        yield (
            f"detach the value where it is stored ({place})",
            Fix(safe=False, replace=((statement, stored),)),
            Kind.CUTS,
            f"lets no gradient flow back through what {place} stores",
        )
    torch = blamed.torch
    if torch is not None and build_without_graph:
        guarded = cst.With(
            items=[cst.WithItem(cst.parse_expression(f"{torch}.no_grad()"))],
            body=cst.IndentedBlock([statement.with_changes(leading_lines=[])]),
            leading_lines=statement.leading_lines,
        )
        yield (
            f"build {place} under {torch}.no_grad()",
            Fix(safe=False, replace=((statement, guarded),)),
            Kind.CUTS,
            f"trains nothing through what {place} computes",
        )


def _detached_where_freeing_reads(blamed: _Blamed) -> Iterator[Proposal]:
    """Each value a line reads where the backward that freed the graph read the graph the failing
    backward shares with it, detached there (the input of an auxiliary loss backwarded inside a
    forward, a peer's or teacher's outputs): that backward then stops short of the shared graph,
    and no longer trains what it shares with the failing one through it."""
    analysis = blamed.analysis
    freeing = blamed.place(blamed.freeing[0]) if blamed.freeing else "line ?"
    for line in dict.fromkeys(blamed.freeing_reading):
        statement = analysis.statement_at(line)
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        place = blamed.place(line)
        for operand in _operands(analysis, statement):
            rewritten = statement.visit(_ReadReplacer(operand, cst.parse_expression(f"{operand}.detach()")))
            if not rewritten.deep_equals(statement):
                yield (
                    f"detach {operand} where {place} reads it",
                    Fix(safe=False, replace=((statement, rewritten),)),
                    Kind.CUTS,
                    f"lets no gradient of the backward at {freeing} flow back through {operand} at {place}",
                )


def _operands(analysis: FileAnalysis, statement: cst.SimpleStatementLine) -> list[str]:
    """The names and attributes ``statement`` reads as values, in order: not the functions it
    calls, modules, ``self`` alone, or builtins."""
    called = {code_of(call.func) for call in find_nodes(statement, cst.Call)}
    modules = set(analysis.names.aliases)
    reads = read_names(statement)
    found = set()
    for node in [*find_nodes(statement, cst.Name), *find_nodes(statement, cst.Attribute)]:
        expression = code_of(node)
        # (An attribute's own name, a store's target: not read as a value.)
        if expression in reads and expression not in called and expression.split(".", 1)[0] not in modules:
            found.add(expression)
    found = {e for e in found if e != "self" and not hasattr(builtins, e) and all(part.isidentifier() for part in e.split("."))}
    text = code_of(statement)
    # Not a prefix of another operand (``self`` of ``self.h``): that one is what is read.
    return sorted((e for e in found if not any(o.startswith(e + ".") for o in found)), key=text.find)


def _computed_again(blamed: _Blamed, statement: cst.SimpleStatementLine, failing: cst.CSTNode | None) -> Iterator[Proposal]:
    """The blamed statement computed again: before the failing backward (after whatever stepped
    or freed its graph in between), or at the start of every iteration of the loop that backwards
    it, with the statements before it that it is computed from."""
    analysis = blamed.analysis
    line = analysis.line(statement)
    place = blamed.place(line)
    anchor, recomputed = _recomputed_before(analysis, statement, failing, _holding(blamed, line))
    if recomputed:
        yield (
            f"compute {place} again before the backward at {blamed.place(analysis.line(failing))}",
            Fix(safe=False, insert_before=((anchor, recomputed),)),
            Kind.KEEPS,
            f"computes {place} again after what changed or freed it, at the weights of that time",
        )
    loop = _loop_around(analysis, failing)
    if loop is None or not isinstance(loop.node.body, cst.IndentedBlock) or analysis.contains(loop.node, statement):
        return
    if analysis.function_at(line) is not analysis.function_at(analysis.line(loop.node)):
        return
    block = analysis.block_of(statement)
    if block is None:
        return
    copies = _graph_inputs(analysis, block.statements[: block.index(statement)], [statement], _holding(blamed, line)) + [statement]
    if any(_draws_data(analysis, c) for c in copies):
        return
    loop_place = blamed.place(analysis.line(loop.node))
    yield (
        f"compute {place} again at the start of every iteration of the loop at {loop_place}"
        + (f" (with the {len(copies) - 1} line(s) it is computed from)" if len(copies) > 1 else ""),
        Fix(safe=False, insert_before=((loop.node.body.body[0], tuple(c.with_changes(leading_lines=[]) for c in copies)),)),
        Kind.KEEPS,
        f"computes {place} at every iteration, from the weights of that iteration",
    )


def _graph_inputs(
    analysis: FileAnalysis, before: list[cst.BaseStatement], copies: list[cst.BaseStatement], holding: set[str]
) -> list[cst.BaseStatement]:
    """The statements of ``before`` (in order) that compute, with a graph, what ``copies`` read:
    as the analysis sees it, or as the run saw it (``holding``: names that held the freed graph)."""
    needed = set().union(*(read_names(c) for c in copies)) - set().union(*(assigned_names(c) for c in copies))
    found: list[cst.BaseStatement] = []
    for earlier in reversed(before):
        assigned = assigned_names(earlier) & needed
        if not assigned or not isinstance(earlier, cst.SimpleStatementLine) or len(earlier.body) != 1:
            continue
        small = earlier.body[0]
        value = analysis.value_assigned(small.value) if isinstance(small, cst.Assign) else None
        # The run knows which names held the freed graph (not a leaf made with requires_grad);
        # without it, the analysis tells.
        if value is None or not (assigned & holding if holding else value.graph):
            break  # what the copies need is not a graph this code built: nothing more to compute again
        needed = (needed - assigned) | read_names(earlier)
        found.insert(0, earlier)
    return found


def _recomputed_where_read(blamed: _Blamed, statement: cst.SimpleStatementLine) -> Iterator[Proposal]:
    """What the blamed statement computes, computed again where a stored copy of it is read: an
    attribute set in ``__init__`` (or cached on the first call) and read by the object's methods,
    or a global read by a function."""
    analysis = blamed.analysis
    small = statement.body[0] if len(statement.body) == 1 else None
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return
    function = analysis.function_at(analysis.line(statement))
    target = small.targets[0].target
    attribute, value = _stored_attribute(analysis, function, statement, target, small.value)
    place = blamed.place(analysis.line(statement))
    if attribute is not None:
        yield from _attribute_recomputed(blamed, function, attribute, value, place)
    if function is None and isinstance(target, (cst.Name, cst.Tuple)):
        yield from _global_recomputed(blamed, statement, place)


def _stored_attribute(analysis: FileAnalysis, function, statement, target, value):
    """``self.x`` and the expression it stores: the statement's own target, or the attribute the
    name it assigns is stored into later in the same function."""
    if isinstance(target, cst.Attribute) and is_name(target.value, "self"):
        return target.attr.value, value
    if function is None or not isinstance(target, cst.Name):
        return None, None
    for later in find_nodes(function, cst.Assign):
        stored = later.targets[0].target if len(later.targets) == 1 else None
        if isinstance(stored, cst.Attribute) and is_name(stored.value, "self") and is_name(later.value, target.value):
            return stored.attr.value, value
    return None, None


def _attribute_recomputed(blamed: _Blamed, function, attribute: str, value: cst.BaseExpression, place: str) -> Iterator[Proposal]:
    analysis = blamed.analysis
    class_name = analysis.class_name_of(function) if function is not None else None
    if class_name is None:
        return
    methods = [s for s in analysis.class_body(class_name) if isinstance(s, cst.FunctionDef)]
    replacements = []
    for method in methods:
        if not _available_in(analysis, value, method, function):
            continue
        for statement in find_nodes(method, cst.SimpleStatementLine):
            rewritten = statement.visit(_ReadReplacer(f"self.{attribute}", as_operand(value)))
            if not rewritten.deep_equals(statement):
                replacements.append((statement, rewritten))
    if replacements:
        yield (
            f"compute `self.{attribute}` (stored from {place}) again where it is read",
            Fix(safe=False, replace=tuple(replacements)),
            Kind.KEEPS,
            f"computes `self.{attribute}` where it is read, from the weights of that time",
        )


def _available_in(analysis: FileAnalysis, value: cst.BaseExpression, function: cst.FunctionDef, source: cst.FunctionDef | None) -> bool:
    """Whether every name ``value`` (computed in ``source``) reads means the same inside ``function``:
    ``self``, a name of the module that ``source`` does not bind too (a parameter of ``forward(self,
    a)`` is no global ``a`` elsewhere, even where the script has one), a builtin, or (in ``source``
    itself) one of its parameters."""
    module_names = set().union(*(assigned_names(s) for s in analysis.module.body)) | set(analysis.names.aliases)
    local = assigned_names(function.body)
    parameters = {p.name.value for p in function.params.params}
    bound_in_source = set() if source is None else assigned_names(source.body) | {p.name.value for p in source.params.params}
    for name in {n.split(".", 1)[0] for n in read_names(value)}:
        if name == "self" and "self" in parameters:
            continue
        if function is source and name in parameters:
            continue
        if name in local or name in parameters or name in bound_in_source:
            return False
        if name not in module_names and not hasattr(builtins, name):
            return False
    return True


def _global_recomputed(blamed: _Blamed, statement: cst.SimpleStatementLine, place: str) -> Iterator[Proposal]:
    """A global computed at the module's level, computed again at the start of each function on
    the failing stack that reads it (the copy binds a local of the same name)."""
    analysis = blamed.analysis
    names = assigned_names(statement)
    needed = {n.split(".", 1)[0] for n in read_names(statement.body[0].value)}
    for line in dict.fromkeys(blamed.failing + blamed.forward):
        function = analysis.function_at(line)
        if function is None or not isinstance(function.body, cst.IndentedBlock):
            continue
        local = assigned_names(function.body)
        parameters = {p.name.value for p in function.params.params}
        # A parameter of the same name is what the caller passes: most often the same object.
        read = names & read_names(function.body)
        if not read or read & (local | parameters) or needed & local:
            continue
        if any(isinstance(g, cst.Global) for g in find_nodes(function, cst.Global)):
            continue
        first = function.body.body[0]
        anchor = function.body.body[1] if _is_import_or_docstring(first) and len(function.body.body) > 1 else first
        yield (
            f"compute {place} again at the start of `{function.name.value}`, which reads it",
            Fix(safe=False, insert_before=((anchor, (statement.with_changes(leading_lines=[]),)),)),
            Kind.KEEPS,
            f"computes {place} at each call of `{function.name.value}`, from the weights of that time",
        )


def _last_assignments(analysis: FileAnalysis, failing: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements of the failing backward's block that last assigned each name it reads."""
    block = analysis.block_of(failing)
    if block is None:
        return []
    wanted = set(read_names(failing))
    found = []
    for earlier in reversed(block.statements[: block.index(failing)]):
        if assigned_names(earlier) & wanted:
            wanted -= assigned_names(earlier)
            found.append(earlier)
    return found


def _holding(blamed: _Blamed, line: int) -> set[str]:
    """The names of the function around ``line`` that held the freed graph when the run failed."""
    function = blamed.analysis.function_at(line)
    return {h.expression for h in blamed.held if _function_starting(blamed.analysis, h.function_line) is function}


def _recomputed_before(
    analysis: FileAnalysis, statement: cst.SimpleStatementLine, failing: cst.CSTNode | None, holding: set[str]
) -> tuple[cst.CSTNode | None, tuple[cst.BaseStatement, ...]]:
    """Where to insert, and copies of, ``statement`` and the statements after it, up to the
    failing backward, that compute from what it assigns what that backward reads: the graph built
    again after whatever stepped or freed it in between (SAM's second forward). They go after the
    last statement that backwards, steps or zeroes in between, or just before the failing backward
    when an ``if`` holds it; the ones already after such a statement need no copy. Nothing that
    draws new data (random tensors, the next batch) is copied: the copy must compute the same thing."""
    block = analysis.block_of(statement)
    if failing is None or block is None:
        return None, ()
    container = failing
    while container is not None and all(container is not s for s in block.statements):
        container = analysis.tree.parent(container)
    if container is None:
        return None, ()
    start, end = block.index(statement), block.index(container)
    if start >= end:
        return None, ()
    tainted = set(assigned_names(statement))
    computed = [statement]
    for later in block.statements[start + 1 : end]:
        assigned = assigned_names(later)
        if assigned and read_names(later) & tainted and not analysis.gradient_effects(later):
            tainted |= assigned
            computed.append(later)
    needed = read_names(failing) if container is failing else read_names(container)
    copies: list[cst.BaseStatement] = []
    for candidate in reversed(computed):
        assigned = assigned_names(candidate) & needed
        if assigned:  # the last assignment of a name is the one the backward reads
            needed = (needed - assigned) | read_names(candidate)
            copies.insert(0, candidate)
    if not copies or copies[0] is not statement:
        return None, ()
    between = block.statements[start:end]
    stepped = max((i for i, s in enumerate(between) if _steps_or_frees(analysis, s)), default=None)
    anchor = container
    if stepped is not None:
        anchor = between[stepped + 1] if stepped + 1 < len(between) else container
        copies = [c for c in copies if between.index(c) < stepped]
    inner = analysis.block_of(failing)
    if container is not failing and inner is not None:
        anchor = failing  # inside the `if`, the copies run only when the failing backward does…
        if isinstance(container, cst.If) and any(_updates_weights(analysis, s) for s in between):
            # …before the first statement there that reads what they compute, at the new weights
            # (a loss built there from the stale logits). At the same weights a copy would build
            # again the graph the earlier backward walked: merging the two backwards gives the
            # same gradients without a second forward.
            copied_names = set().union(*(assigned_names(c) for c in copies))
            anchor = next((s for s in inner.statements[: inner.index(failing)] if read_names(s) & copied_names), failing)
    copies = _freed_inputs(analysis, block.statements[:start], between, copies, holding) + copies
    if not copies or any(_draws_data(analysis, c) for c in copies):
        return None, ()
    return anchor, tuple(c.with_changes(leading_lines=[]) for c in copies)


_WEIGHT_UPDATES = GradientEffect.UPDATING & ~(GradientEffect.ZERO_GRAD | GradientEffect.WRITE_GRAD)  # (zeroing gradients changes no weight)


def _steps_or_frees(analysis: FileAnalysis, statement: cst.CSTNode) -> bool:
    """Whether ``statement`` changes the weights or frees a graph (zeroing gradients does neither)."""
    return bool(analysis.gradient_effects(statement) & (GradientEffect.BACKWARD | _WEIGHT_UPDATES))


def _updates_weights(analysis: FileAnalysis, statement: cst.CSTNode) -> bool:
    """Whether ``statement`` changes the weights (zeroing gradients does not)."""
    return bool(analysis.gradient_effects(statement) & _WEIGHT_UPDATES)


def _freed_inputs(
    analysis: FileAnalysis,
    before: list[cst.BaseStatement],
    between: list[cst.BaseStatement],
    copies: list[cst.BaseStatement],
    holding: set[str],
) -> list[cst.BaseStatement]:
    """The statements of ``before`` whose graph the copies read after a backward in ``between``
    freed it (a GAN's ``fake = G(z)``, backwarded through by the discriminator's loss): they
    must be computed again too, or the copies build on a freed graph."""
    if not any(GradientEffect.BACKWARD in analysis.gradient_effects(s) for s in between):
        return []
    return _graph_inputs(analysis, before, copies, holding)


def _draws_data(analysis: FileAnalysis, statement: cst.CSTNode) -> bool:
    """Whether running ``statement`` again would draw other data: a random tensor, ``next(...)``."""
    return analysis.names.draws_other_values(statement) is not None


def _detached_where_stored(analysis: FileAnalysis, statement: cst.SimpleStatementLine) -> cst.SimpleStatementLine | None:
    """The blamed statement with what it stores detached; not for what the analysis knows holds
    no graph (a module, an object)."""
    small = statement.body[0] if len(statement.body) == 1 else None
    if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
        value = analysis.value_assigned(small.value)
        if value is not None and not value.graph:
            return None
    return detached_where_stored(statement)
