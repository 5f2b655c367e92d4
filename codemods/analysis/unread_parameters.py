"""The parameters of a function whose value reaches nothing: what a caller passes them cannot
reach what the call returns, keeps or backwards.

A parameter reaches nothing when, on every path through the body, it is rebound before any read
(``hidden = torch.zeros(...)``), or is never read at all. A test ``p is None`` (``p is not None``)
reads no graph (it makes a bool), and where it proves ``p`` None (the else of ``if p is not None:``)
``p`` holds nothing a caller passed with a graph. Anything gradfix does not follow keeps every
parameter: a read in a nested function, lambda or class (it may run later), ``locals()`` and other
introspection, a decorator that may wrap the function, a statement of a kind not modelled here.
A read that may happen on one path keeps the parameter (``if flag: use(hidden)``).

And what a function does to the objects it is handed: a parameter it only reads
(``parameter_only_read``) is, after the call, what the caller handed (a list of losses is not
emptied by ``losses.clear()`` in there); one it detaches in place on every path
(``parameter_detached_in_place``) holds no graph after the call.
"""

from __future__ import annotations

from typing import Callable, Sequence

import libcst as cst

from .tree import SyntaxTree

# Calls that read a function's names without naming them.
_INTROSPECTION = frozenset({"locals", "vars", "eval", "exec", "currentframe", "_getframe", "getframeinfo", "stack", "getargvalues"})
# Decorators that run the function with its arguments as given.
_PLAIN_DECORATORS = frozenset({"staticmethod"})
# Statements after which the next statement is not reached.
_EXITS = (cst.Return, cst.Raise, cst.Break, cst.Continue)


def unread_parameters(function: cst.FunctionDef, tree: SyntaxTree) -> frozenset[str]:
    """The names of ``function``'s parameters (not ``*args`` or ``**kwargs``) that reach nothing."""
    params = function.params
    names = frozenset(p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params))
    if not names or any(not (type(d.decorator) is cst.Name and d.decorator.value in _PLAIN_DECORATORS) for d in function.decorators):
        return frozenset()
    body = function.body
    if tree.names(body, _INTROSPECTION):
        return frozenset()
    named = frozenset(name.value for name in tree.names(body, names))
    # A parameter the body names reaches nothing only where the body rebinds it or tests it
    # against None: the others need no walk (most parameters of most functions).
    targets = [t.target for t in tree.findall(body, cst.AssignTarget)]
    targets += [s.target for s in tree.findall(body, cst.AnnAssign)] + [s.target for s in tree.findall(body, cst.For)]
    rebound = {name.value for target in targets for name in tree.findall(target, cst.Name)}
    tested = {tested[0] for comparison in tree.findall(body, cst.Comparison) if (tested := none_test(comparison)) is not None}
    candidates = named & (rebound | tested)
    if not candidates:
        return names - named
    walk = _Walk(candidates)
    for nested in (*tree.findall(body, cst.FunctionDef), *tree.findall(body, cst.Lambda), *tree.findall(body, cst.ClassDef)):
        # (it may run at any time)
        walk.live.update(name.value for name in tree.names(nested, candidates))
    walk.block(body.body, frozenset())
    return names - named | candidates - walk.live


def arguments_reaching_nothing(function: cst.FunctionDef, method: bool, call: cst.Call, unread: frozenset[str]) -> frozenset[int]:
    """The indexes in ``call.args`` of the arguments bound to a parameter of ``function`` in
    ``unread`` (``method``: called on its object, its first parameter left out). None of them where
    an argument is unpacked (``*xs``, ``**kw``): what it binds is not known."""
    if not unread or any(arg.star for arg in call.args):
        return frozenset()
    params = function.params
    positional = [p.name.value for p in (*params.posonly_params, *params.params)]
    if method and not any(type(d.decorator) is cst.Name and d.decorator.value == "staticmethod" for d in function.decorators):
        positional = positional[1:]
    by_keyword = {p.name.value for p in (*params.params, *params.kwonly_params)}
    found = set()
    for index, arg in enumerate(call.args):
        if arg.keyword is None:
            name = positional[index] if index < len(positional) else None
        else:
            name = arg.keyword.value if arg.keyword.value in by_keyword else None
        if name in unread:
            found.add(index)
    return frozenset(found)


def none_test(test: cst.BaseExpression) -> tuple[str, bool] | None:
    """``p is None`` -> (``p``, True): the name tested, and the truth of the test where it is None."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    left, right = test.left, target.comparator
    if type(right) is cst.Name and right.value == "None" and type(left) is cst.Name:
        name = left.value
    elif type(left) is cst.Name and left.value == "None" and type(right) is cst.Name:
        name = right.value
    else:
        return None
    if type(target.operator) is cst.Is:
        return name, True
    if type(target.operator) is cst.IsNot:
        return name, False
    return None


class _Reads(cst.CSTVisitor):
    """The parameters an expression reads, but those in ``gone`` (rebound, or proved None)."""

    def __init__(self, names: frozenset[str], gone: frozenset[str]) -> None:
        self.names = names
        self.gone = [gone]
        self.read: set[str] = set()

    def visit_Name(self, node: cst.Name) -> bool:
        if node.value in self.names and node.value not in self.gone[-1]:
            self.read.add(node.value)
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # (``x.hidden`` reads ``x``)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)  # (``f(hidden=x)`` reads ``x``)
        return False

    def visit_Comparison(self, node: cst.Comparison) -> bool:
        return none_test(node) is None  # (``p is None`` makes a bool)

    def visit_IfExp(self, node: cst.IfExp) -> bool:
        node.test.visit(self)
        tested = none_test(node.test)
        for branch, truth in ((node.body, True), (node.orelse, False)):
            none = tested is not None and tested[1] is truth
            self.gone.append(self.gone[-1] | {tested[0]} if none and tested is not None else self.gone[-1])
            branch.visit(self)
            self.gone.pop()
        return False


class _Walk:
    """A walk of a body in order, with the parameters each point has rebound on every path to it."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self.live: set[str] = set()

    def reads(self, node: cst.CSTNode | None, gone: frozenset[str]) -> None:
        if node is not None:
            visitor = _Reads(self.names, gone)
            node.visit(visitor)
            self.live |= visitor.read

    def bind(self, target: cst.BaseExpression, gone: frozenset[str]) -> frozenset[str]:
        """What ``target = ...`` rebinds; a subscript or attribute target reads its object."""
        if type(target) is cst.Name:
            return gone | {target.value} if target.value in self.names else gone
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                gone = self.bind(element.value, gone)
            return gone
        self.reads(target, gone)
        return gone

    def block(self, statements: Sequence[cst.BaseStatement | cst.BaseSmallStatement], gone: frozenset[str]) -> frozenset[str] | None:
        """The parameters rebound after ``statements`` on every path; None where no path goes on."""
        state: frozenset[str] | None = gone
        for statement in statements:
            if state is None:
                return None
            state = self.statement(statement, state)
        return state

    def statement(self, node: cst.CSTNode, gone: frozenset[str]) -> frozenset[str] | None:
        if type(node) is cst.SimpleStatementLine:
            return self.block(node.body, gone)
        if type(node) is cst.Assign:
            self.reads(node.value, gone)
            for target in node.targets:
                gone = self.bind(target.target, gone)
            return gone
        if type(node) is cst.AnnAssign:
            self.reads(node.annotation, gone)
            if node.value is None:
                return gone
            self.reads(node.value, gone)
            return self.bind(node.target, gone)
        if type(node) is cst.If:
            self.reads(node.test, gone)
            tested = none_test(node.test)
            when_true = gone | {tested[0]} if tested is not None and tested[1] else gone
            when_false = gone | {tested[0]} if tested is not None and not tested[1] else gone
            after = [self._whole(node.body, when_true)]
            orelse = node.orelse
            if orelse is None:
                after.append(when_false)
            elif type(orelse) is cst.If:
                after.append(self.statement(orelse, when_false))
            else:
                after.append(self._whole(orelse.body, when_false))
            going = [state for state in after if state is not None]
            return frozenset.intersection(*going) if going else None
        if isinstance(node, _EXITS):
            self.reads(node, gone)
            return None
        if isinstance(node, (cst.For, cst.While)):
            # A body may run no time, and reads at its first pass what later passes read (rebinding
            # only adds along a path): the state before it goes on.
            if isinstance(node, cst.For):
                self.reads(node.iter, gone)
                self._whole(node.body, self.bind(node.target, gone))
            else:
                self.reads(node.test, gone)
                self._whole(node.body, gone)
            if node.orelse is not None:
                self._whole(node.orelse.body, gone)
            return gone
        # Anything else (with, try, match, an expression, del, an import): read as a whole, and
        # nothing it rebinds is counted.
        self.reads(node, gone)
        return gone

    def _whole(self, body: cst.BaseSuite, gone: frozenset[str]) -> frozenset[str] | None:
        return self.block(body.body, gone)


def parameter_only_read(function: cst.FunctionDef, parameter: str, tree: SyntaxTree, only_reads: Callable[[cst.Call], bool]) -> bool:
    """Whether ``function``'s body uses ``parameter`` only to read what it holds: iterated, indexed
    (not written through an index), compared, or handed to a call that only reads its arguments
    (``only_reads``: ``torch.stack(losses)``, ``len(losses)``). Anything else (a method of it,
    ``losses.clear()``; a store through it; a call that may write to it; another name bound to
    it) may change the object it holds."""
    for node in tree.names(function.body, (parameter,)):
        parent = tree.parent(node)
        if type(parent) is cst.Arg and parent.value is node and parent.keyword is not node:
            call = tree.parent(parent)
            if type(call) is cst.Call and only_reads(call):
                continue
        elif type(parent) is cst.For and parent.iter is node or type(parent) is cst.CompFor and parent.iter is node:
            continue
        elif type(parent) is cst.Comparison or type(parent) is cst.ComparisonTarget:
            continue
        elif type(parent) is cst.Subscript and parent.value is node and not _written_through(tree, parent):
            continue
        return False
    return True


def parameter_detached_in_place(function: cst.FunctionDef, parameter: str, tree: SyntaxTree) -> bool:
    """Whether ``function`` detaches ``parameter``'s tensor in place on every path: ``parameter.detach_()``
    a statement of its own body, before any ``return`` or ``raise``, with nothing binding the name
    anew before it (a decorator may run the function otherwise: none)."""
    if function.decorators or isinstance(function.body, cst.SimpleStatementSuite):
        return False
    for statement in function.body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            leaves = bool(tree.findall(statement, cst.Return)) or bool(tree.findall(statement, cst.Raise))
            if leaves or parameter in _bound_in(statement, tree):
                return False
            continue
        for small in statement.body:
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and not small.value.args:
                func = small.value.func
                if (
                    isinstance(func, cst.Attribute)
                    and func.attr.value == "detach_"
                    and isinstance(func.value, cst.Name)
                    and func.value.value == parameter
                ):
                    return True
            if isinstance(small, (cst.Return, cst.Raise)) or parameter in _bound_in(small, tree):
                return False
    return False


def _bound_in(node: cst.CSTNode, tree: SyntaxTree) -> set[str]:
    return {name.value for target in tree.findall(node, cst.AssignTarget) for name in tree.findall(target, cst.Name)}


def _written_through(tree: SyntaxTree, subscript: cst.Subscript) -> bool:
    """``xs[i] = ...``, ``xs[i] += ...``, ``del xs[i]``: a write into the object, not a read."""
    parent = tree.parent(subscript)
    return type(parent) in (cst.AssignTarget, cst.AugAssign, cst.Del) or type(parent) is cst.AnnAssign and parent.target is subscript
