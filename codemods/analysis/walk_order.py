"""The order the dataflow walks a module's definitions in: each function after those it calls, so
that a call reads its callee's summary in the round that walks it (``dataflow``'s rounds repeat
until every call read the summary its callee's walk ended with)."""

from __future__ import annotations

from typing import Sequence, TypeVar, Union

import libcst as cst

from .tree import SyntaxTree

Definition = Union[cst.FunctionDef, cst.ClassDef]  # (what a definition statement binds its name to)
D = TypeVar("D", bound=Definition)


def callees_first(functions: list[D], on_self: bool, tree: SyntaxTree) -> list[D]:
    """``functions`` in the order their walks read each other's summaries final: a function before those that call it
    (a method: on ``self``, ``self.reset()``; else by its name), else as written (in a cycle, callees as met).
    What each walk starts from does not depend on the order (what ``__init__`` leaves, the module's names before
    the definitions), so the order decides only whether a caller meets its callee's summary in this round or in
    the next one: a whole round more, for most classes and scripts. Of a name defined twice (a property's setter, a
    function redefined) the earlier definitions come first, as written: the last definition is the one its summary
    must be of."""
    by_name = {function.name.value: function for function in functions}
    ordered: dict[D, None] = {function: None for function in functions if by_name[function.name.value] is not function}
    for function in by_name.values():
        _place_after_callees(function, by_name, ordered, on_self, tree)
    return list(ordered)


def in_walk_order(body: Sequence[cst.CSTNode], tree: SyntaxTree) -> list[cst.CSTNode]:
    """A module's statements, each run of function and class definitions in a row in
    callee-first order (``callees_first``; a class calls what its methods call, and is called
    where it is constructed): the definitions only bind names, whatever their order, and a
    method runs where it is called, after the module's definitions (a dataset class whose
    ``__getitem__`` calls a function defined below it takes one round, not two)."""
    walked: list[cst.CSTNode] = []
    run: list[Definition] = []
    for statement in [*body, None]:
        if type(statement) is cst.FunctionDef or type(statement) is cst.ClassDef:
            run.append(statement)
            continue
        walked.extend(callees_first(run, on_self=False, tree=tree))
        run = []
        if statement is not None:
            walked.append(statement)
    return walked


def _place_after_callees(function: D, by_name: dict[str, D], ordered: dict[D, None], on_self: bool, tree: SyntaxTree) -> None:
    """Adds ``function`` to ``ordered`` after the definitions of ``by_name`` it calls (on ``self``,
    ``on_self``; else by name: a class, what its methods call), and theirs. (A function of the
    module, not a closure: a closure that calls itself is a cycle, which would keep the tree alive
    past reference counting.)"""
    if function in ordered:
        return
    ordered[function] = None  # (placed again below, after its callees: a cycle stops here)
    receiver = function.params.params[0].name.value if on_self and isinstance(function, cst.FunctionDef) and function.params.params else None
    for call in tree.findall(function.body, cst.Call):
        func = call.func
        if on_self and type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == receiver:
            called = func.attr.value
        elif not on_self and type(func) is cst.Name:
            called = func.value
        else:
            continue
        if called in by_name:
            _place_after_callees(by_name[called], by_name, ordered, on_self, tree)
    del ordered[function]
    ordered[function] = None


def called_on_self(method: cst.FunctionDef, by_name: dict[str, cst.FunctionDef], tree: SyntaxTree) -> set[str]:
    """The names of ``by_name``'s methods a call of ``method`` may run on its own object: those it
    calls on ``self``, and those they call, to any depth."""
    called: set[str] = set()
    todo = [method]
    while todo:
        function = todo.pop()
        receiver = function.params.params[0].name.value if function.params.params else None
        for call in tree.findall(function.body, cst.Call):
            func = call.func
            if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == receiver:
                name = func.attr.value
                if name in by_name and name not in called:
                    called.add(name)
                    todo.append(by_name[name])
    return called
