"""What a scope keeps for code that may run later, which the dataflow does not follow: a graph
such code may read again after a backward freed it, so a ``retain_graph=True`` that keeps it is
no proved waste (GF009 asks it of each retained backward).

Kept for later: the values of the names a nested function (its free variables) or a lambda reads
from the scope; what a nested function's default holds (``def again(t=loss)``); what the scope
holds in, or stores into, a global some function of the file reads (``KEPT["loss"] = loss``: that
function reads it wherever it is called); the receiver of a backward or an update taken as a value
(``again = loss.backward``).

It reads the file's ``FileAnalysis`` (``analysis``), which builds what asks it: it names it, and does
not import it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import libcst as cst

from .assignments import assigned_names, local_names
from .symbol_tables import function_scopes
from .values import Origin, Value


def graphs_read_later(
    analysis: Any,
    scope: cst.CSTNode,
    free_names: Callable[[cst.FunctionDef], frozenset[str]],
    taken: Sequence[cst.BaseExpression],
) -> set[Origin]:
    """The graph nodes code ``scope`` keeps for later may read; ``free_names``: the names a nested
    function reads from the functions around it; ``taken``: receivers of methods taken as values."""
    tree = analysis.tree
    free: set[str] = set()
    for function in tree.findall(scope, cst.FunctionDef):
        if function is not scope:
            free |= free_names(function)
    for lam in tree.findall(scope, cst.Lambda):
        free |= {name.value for name in tree.findall(lam.body, cst.Name)} - {p.name.value for p in _all_parameters(lam.params)}
    functions: list[cst.FunctionDef | cst.Lambda] = [*tree.findall(scope, cst.FunctionDef), *tree.findall(scope, cst.Lambda)]
    defaults = [p.default for f in functions if f is not scope for p in _all_parameters(f.params) if p.default is not None]
    shared = _globals_of_functions(analysis) - (local_names(scope, tree) if isinstance(scope, cst.FunctionDef) else set())
    free |= shared | {name.value for default in defaults for name in tree.findall(default, cst.Name)}
    read: list[cst.BaseExpression] = [*tree.findall(scope, cst.Name, lambda name: name.value in free), *taken]
    nodes: set[Origin] = set()
    for expression in read:
        value = analysis.value_read(expression) if type(expression) is cst.Name or type(expression) is cst.Attribute else None
        if value is not None and value.graph:
            nodes |= analysis.value_nodes(value)
    stores = [s for s in tree.findall(scope, cst.SimpleStatementLine) if assigned_names(s, tree=tree) & shared]
    for stored in (value for store in stores for value in _values_stored(analysis, store)):
        nodes |= analysis.value_nodes(stored) if stored.graph else set()
    return nodes


def _globals_of_functions(analysis: Any) -> frozenset[str]:
    """The names some function of the file reads or writes as the module's (every name its body
    holds where Python cannot read the source)."""
    scopes = function_scopes(analysis.source)
    if scopes is None:
        tree = analysis.tree
        return frozenset(name.value for f in tree.findall(analysis.module, cst.FunctionDef) for name in tree.findall(f.body, cst.Name))
    return frozenset(name for f in scopes for name in f.get_globals())


def _values_stored(analysis: Any, statement: cst.SimpleStatementLine) -> Iterator[Value]:
    """What ``statement`` stores: an assignment's value, what ``+=`` adds, what a method call's last
    argument hands over (``KEPT.append(loss)``); unreached: nothing."""
    for small in statement.body:
        stored: Value | None = None
        if type(small) is cst.Assign or type(small) is cst.AugAssign:
            stored = analysis.value_assigned(small.value)
        elif type(small) is cst.Expr and type(small.value) is cst.Call and small.value.args:
            last = small.value.args[-1].value
            stored = analysis.value_assigned(last)
            if stored is None and (type(last) is cst.Name or type(last) is cst.Attribute):
                stored = analysis.value_read(last)
        if stored is not None:
            yield stored


def _all_parameters(parameters: cst.Parameters) -> list[cst.Param]:
    stars = [star for star in (parameters.star_arg, parameters.star_kwarg) if isinstance(star, cst.Param)]
    return [*parameters.posonly_params, *parameters.params, *parameters.kwonly_params, *stars]
