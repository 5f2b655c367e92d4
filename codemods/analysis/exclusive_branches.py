"""Which two statements of one function no run reaches both of: the arms of an ``if`` whose test
nothing around it changes, or two ``if`` statements whose tests of one unchanged name contradict
(``if flag:`` and ``if not flag:``; ``if task == "depth":`` and ``if task == "normal":``). A rule
that removes a ``retain_graph=True`` or drops a freed-graph finding reads it: a must-fact, so a
test is read only where its meaning is plain (a name, its negation, its equality with a literal).
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from .assignments import assigned_names, local_names, read_names, target_names
from .loops import Loop
from .syntax import tested_name
from .tree import SyntaxTree


class ExclusiveBranches:
    def __init__(self, tree: SyntaxTree, loops_around: Callable[[cst.CSTNode], tuple[Loop, ...]]) -> None:
        self._tree = tree
        self._loops_around = loops_around

    def exclusive(self, first: cst.CSTNode, second: cst.CSTNode, proved: bool = True) -> bool:
        """Whether no run reaches both statements: one sits under ``if flag:`` (or its ``else``) and the other under
        ``if not flag:`` (or the ``else`` of ``if flag:``), with nothing in their function assigning ``flag``
        (``if not XLA_2_1: loss.backward()`` … ``if XLA_2_1: loss.backward()``); or under ``if task == "depth":`` and
        ``if task == "normal":`` (a name equals at most one of two distinct literals). Unless ``proved`` is False
        (a finding dropped, not a rewrite made), that name must be a variable of the function the walk sees every
        write of: no attribute (a call may set it) and no global (a function's ``global`` statement may)."""
        tests = self._branch_tests(second)
        scope = self._tree.scope_of(first)
        if scope is None or scope is not self._tree.scope_of(second):
            return False
        if self._opposite_branches_of_a_fixed_test(first, second):
            return True
        return any(
            _contradict(test, holds, other, holds_there)
            and (test[1] is None or not proved or self._own_variable(test[0], scope))
            and self._same_value_at_both(test[0], scope, first, second)
            for test, holds in self._branch_tests(first).items()
            for other, holds_there in tests.items()
            if other[0] == test[0]
        )

    def _own_variable(self, name: str, scope: cst.CSTNode) -> bool:
        """Whether ``name`` is a parameter or a local variable of the function ``scope`` that no ``global`` or
        ``nonlocal`` statement of the file names."""
        if not isinstance(scope, cst.FunctionDef) or name not in local_names(scope, self._tree) | {p.name.value for p in scope.params.params}:
            return False
        declared: list[cst.Global | cst.Nonlocal] = [
            *self._tree.findall(self._tree.module, cst.Global),
            *self._tree.findall(self._tree.module, cst.Nonlocal),
        ]
        return not any(item.name.value == name for statement in declared for item in statement.names)

    def _same_value_at_both(self, name: str, scope: cst.CSTNode, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether ``name`` holds one value wherever ``first`` and ``second`` run: nothing in the scope assigns it, or
        only plain statements before both, in no loop around either (``per_task = mask is not None`` at the top of the
        function)."""
        body = scope.body if isinstance(scope, cst.FunctionDef) else scope
        if name not in assigned_names(body, tree=self._tree):
            return True
        if any(name in target_names(loop.target) for loop in self._tree.findall(body, cst.For)) or any(
            name in target_names(item.asname.name) for item in self._tree.findall(body, cst.WithItem) if item.asname is not None
        ):
            return False
        writes = [statement for statement in self._tree.findall(body, cst.SimpleStatementLine) if name in assigned_names(statement, tree=self._tree)]
        around = {id(loop) for node in (first, second) for loop in self._loops_around(node)}
        start = min(self._tree.order(first), self._tree.order(second))
        return bool(writes) and all(
            self._tree.order(write) < start and not {id(loop) for loop in self._loops_around(write)} & around for write in writes
        )

    def _opposite_branches_of_a_fixed_test(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether the two sit in the body and the ``else`` of one ``if`` whose test reads nothing a loop around it (or
        the ``if`` itself) assigns: every pass takes the same branch (``if args.fp16: optimizer.backward(loss)`` /
        ``else: loss.backward()``)."""
        node = self._tree.parent(first)
        while node is not None and not isinstance(node, (cst.FunctionDef, cst.Module)):
            if isinstance(node, cst.If) and isinstance(node.orelse, (cst.If, cst.Else)):
                sides = [self._tree.contains(node.body, n) for n in (first, second)]
                if sides[0] != sides[1] and all(self._tree.contains(node.body, n) or self._tree.contains(node.orelse, n) for n in (first, second)):
                    changing = set().union(*(assigned_names(loop.node, tree=self._tree) for loop in self._loops_around(node)))
                    return not read_names(node.test) & (changing | assigned_names(node, tree=self._tree))
            node = self._tree.parent(node)
        return False

    def _branch_tests(self, node: cst.CSTNode) -> dict[tuple[str, str | None], bool]:
        """``{(flag, None): True}`` for each ``if flag:`` whose body holds ``node`` (False in its
        ``else``, or for ``if not flag:``), ``{(task, "'depth'"): True}`` for ``if task == "depth":``,
        up to the function that holds it (``tested_name``)."""
        tests: dict[tuple[str, str | None], bool] = {}
        child, parent = node, self._tree.parent(node)
        while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.Module)):
            if isinstance(parent, cst.If):
                tested = tested_name(parent.test)
                if tested is not None and child is not parent.test:
                    name, constant, holds = tested
                    tests.setdefault((name, constant), holds if child is parent.body else not holds)
            child, parent = parent, self._tree.parent(parent)
        return tests


def _contradict(test: tuple[str, str | None], holds: bool, other: tuple[str, str | None], holds_there: bool) -> bool:
    """Whether two tests of one name (``tested_name``) cannot hold together: a test and its negation, or the name
    equal to two distinct literals."""
    if test == other:
        return holds is not holds_there
    return test[1] is not None and other[1] is not None and holds and holds_there
