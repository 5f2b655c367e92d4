"""Tests that answer the same twice in one iteration: a value assigned under ``if flag:`` and read
under a later ``if flag:`` of the same iteration is this iteration's value, on every path a run
can take. The dataflow joins the paths of the two tests independently, so it also sees the
impossible one (the first test false, the second true) that reads the previous iteration's value;
rules that would report a graph carried over by that path ask ``read_only_where_assigned``.

An inner loop is such a test too: ``for t in range(steps):`` runs its body at least once in every
iteration or in none when its sequence is built afresh from bounds the outer loop does not change
(``SAME_TRIP_COUNT``), so a value it assigns and the iteration reads after it is never the previous
iteration's. Over any other sequence (an iterator a first pass may use up, a call gradfix cannot
see) that holds only if the loop runs: a rule asks with ``inner_loops_run`` to tell a bug that
rests on an inner loop running no time (a guess) from one that does not."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Callable, Container, Mapping, Sequence

import libcst as cst

from . import contexts
from .assignments import assigned_names, read_names, target_names
from .syntax import expression_key, is_name
from .unread_parameters import none_test

if TYPE_CHECKING:
    from .loops import Env, Frame, Loop
    from .torch_facts import TorchNames
    from .tree import SyntaxTree


# Whether every path past a ``with`` ran its body to the end (``contexts.runs_to_its_end``).
RunsToItsEnd = Callable[[cst.With], bool]
# The qualified name of what an expression names, through the file's imports (``TorchNames.qualify``).
Qualify = Callable[[cst.BaseExpression], "str | None"]


def read_only_where_assigned(
    tree: SyntaxTree,
    reached: Container[cst.CSTNode],
    bound: Container[str],
    loop: Loop,
    name: str,
    inner_loops_run: bool,
    names: TorchNames,
) -> bool:
    """Whether every read of ``name`` in ``loop`` sits under a test written like that of an
    earlier ``if`` of the same iteration that assigns ``name`` on every path of its body, and the
    loop writes nothing the test reads (``if args.with_prior_preservation:`` twice): the test
    answers the same both times, so what is read is always this iteration's value (or the read
    follows the assignment in the branch that makes it); or every write of ``name`` is in an arm
    that assigns it on every path under such a test (its body, or its ``else``) and each read
    comes after one (an arm taken in one iteration is taken in all), or sits in an arm of that
    inner loop that its first iteration never takes. An inner loop whose first pass assigns
    ``name`` counts as such a test when it runs as often in every iteration (``SAME_TRIP_COUNT``),
    or, with ``inner_loops_run``, whatever it walks (and then a ``with`` gradfix does not know to
    swallow exceptions runs its body to the end). ``reached``: the reads the dataflow got to;
    ``bound``: the names the file binds (a ``range`` of its own is not the builtin);
    ``names``: what the file's names mean (a progress bar's; the ``with`` statements an assignment
    in whose body is made on every path past them, ``with accelerator.autocast(): loss = ...``)."""
    if "." in name:
        return False
    # (taken to run, a ``with`` of a context gradfix does not know runs its body to the end too)
    runs_to_its_end = partial(contexts.may_run_to_its_end if inner_loops_run else contexts.runs_to_its_end, names, tree)
    body = loop.node.body
    # (what the loop statement itself binds changes every iteration: ``for step in ...``)
    written = assigned_names(body, tree=tree) | (set(target_names(loop.node.target)) if isinstance(loop.node, cst.For) else set())
    assigning: dict[str, list[cst.If]] = {}
    otherwise: list[cst.If] = []  # (``else`` arms that assign: the test false every iteration, each assigns)
    for branch in tree.findall(body, cst.If):
        if not _invariant(tree, branch.test, written):
            continue
        if _always_assigns(branch.body, name, runs_to_its_end):
            assigning.setdefault(expression_key(branch.test), []).append(branch)
        if isinstance(branch.orelse, cst.Else) and _always_assigns(branch.orelse.body, name, runs_to_its_end):
            otherwise.append(branch)
    # (a ``while`` runs as often in every iteration only where it may be taken to run: ``inner_loops_run``)
    inner_loops: list[cst.For | cst.While] = [*tree.findall(body, cst.For), *(tree.findall(body, cst.While) if inner_loops_run else ())]
    passes = [
        inner
        for inner in inner_loops
        if _first_pass_assigns(tree, inner.body, name, runs_to_its_end)
        and (inner_loops_run or isinstance(inner, cst.For) and _same_trip_count(tree, bound, inner.iter, written, names.qualify))
    ]
    reads = [n for n in tree.names(body, [name]) if n in reached]
    if not ((assigning or passes or otherwise) and reads):
        return False
    if all(_guarded_like(tree, read, assigning, loop.node, written) for read in reads):
        return True
    # Or every write is in such an arm (the body of an ``if``, an ``else``, an inner loop's) and
    # every read comes after its statement: the arm taken, this iteration assigned it; not taken,
    # no iteration does, and what is read is the value from before the loop, never a previous
    # iteration's.
    arms: list[tuple[cst.CSTNode, cst.If | cst.For | cst.While]] = [
        *((branch.body, branch) for group in assigning.values() for branch in group),
        *((inner, inner) for inner in passes),
        *((cst.ensure_type(branch.orelse, cst.Else), branch) for branch in otherwise),
    ]
    writes = [statement for statement in tree.findall(body, cst.SimpleStatementLine) if _writes(statement, name)]
    # (a read in an inner loop's arm that its first iteration never takes, ``if i > 0:``, follows that first pass)
    return all(any(tree.contains(arm, write) for arm, _ in arms) for write in writes) and all(
        _guarded_like(tree, read, assigning, loop.node, written)
        or any(_runs_before(tree, statement, read, written) for _, statement in arms)
        or any(_arm_of_the_iteration(tree, lambda: bound, inner, read) is False for inner in passes)
        for read in reads
    )


def read_carried_only_under_tests(tree: SyntaxTree, reached: Container[cst.CSTNode], bound: Container[str], loop: Loop, name: str) -> bool:
    """Whether every read of ``name`` in ``loop`` that may find what the previous iteration left (no
    statement of a block around it, earlier in the iteration, binds ``name`` first) sits under a
    test, a ``while`` or the right side of an ``and``/``or`` (``if t > 0: inp = mu`` in the pass of
    an inner loop before that loop assigns ``mu``): it may never run while that value is there, so
    the iteration only may carry it (``reached``: the reads the dataflow got to; ``bound``: the
    names the file binds, a ``range`` of its own not the builtin)."""
    body = loop.node.body
    early = [read for read in tree.names(body, [name]) if read in reached and not _bound_earlier(tree, read, name, body)]
    counter = _counter_from_zero(tree, loop.node, bound)
    return bool(early) and all(_under_a_test(tree, read, loop, name, counter) for read in early)


def _bound_earlier(tree: SyntaxTree, read: cst.CSTNode, name: str, body: cst.CSTNode) -> bool:
    node = read
    while node is not body and (parent := tree.parent(node)) is not None:
        if isinstance(parent, cst.IndentedBlock):
            earlier = parent.body[: next(i for i, statement in enumerate(parent.body) if statement is node)]
            if any(isinstance(statement, cst.SimpleStatementLine) and _writes(statement, name, binding_only=True) for statement in earlier):
                return True
        node = parent
    return False


def _under_a_test(tree: SyntaxTree, read: cst.CSTNode, loop: Loop, name: str, counter: str | None) -> bool:
    """Whether an arm gradfix cannot prove taken, whenever the previous iteration's value is in
    ``name``, holds ``read``."""
    node, body = read, loop.node.body
    while node is not body and (parent := tree.parent(node)) is not None:
        if isinstance(parent, (cst.If, cst.IfExp)) and node is not parent.test:
            if _truth_where_carried(parent.test, name, counter) is not (node is parent.body):
                return True
        elif isinstance(parent, cst.While) or isinstance(parent, cst.BooleanOperation) and node is parent.right:
            return True
        node = parent
    return False


def _truth_where_carried(test: cst.BaseExpression, name: str, counter: str | None) -> bool | None:
    """What ``test`` answers in every iteration that finds a value the previous one left in ``name``:
    that value is a tensor, never None (``name is None`` is false), and it is there from the second
    iteration on (``_truth_after_the_first``). None where gradfix cannot tell."""
    tested = none_test(test)
    if tested is not None:
        return not tested[1] if tested[0] == name else None
    return _truth_after_the_first(test, counter)


def in_the_first_iteration(
    tree: SyntaxTree, bound: Callable[[], Container[str]], frame: Frame, test: cst.BaseExpression, then_env: Env, else_env: Env
) -> tuple[Env, Env]:
    """The environments that start the two arms of an ``if`` that tests ``test`` in the body of
    ``frame``'s loop (``then_env``, ``else_env``), where one arm is taken in the loop's first
    iteration only (``if i == 0:``'s body, what ``if i > 0:`` skips to, in a loop that counts its
    iterations from 0 in ``i``: ``_truth_after_the_first``): in that arm, each name the iteration has
    not bound again since its head (it holds the head's value) holds what it held before the loop,
    not what a previous iteration left, which the head joins in for every iteration
    (``if it > 0: h = h.detach()`` never skips the detach of a previous iteration's ``h``).
    ``bound``: the names the file binds (``bound_in_file``), asked for only where the test reads the
    loop's counter."""
    loop = frame.loop
    if loop is None or loop.is_call:
        return then_env, else_env
    named = _named_counter(loop.node)
    truth = _truth_after_the_first(test, named[1] if named else None)
    if truth is None or _kept_counter(tree, loop.node, bound) is None:
        return then_env, else_env
    first = else_env if truth else then_env
    for name, value in frame.head.items():
        if first.get(name) is value and (before := frame.before.get(name)) is not None:
            first[name] = before
    return then_env, else_env


def in_the_first_iteration_only(tree: SyntaxTree, bound: Callable[[], Container[str]], loop: Loop, node: cst.CSTNode) -> bool:
    """Whether ``node`` of ``loop``'s body runs in the loop's first iteration only: in an arm of an
    ``if`` or a conditional expression that only the first iteration takes (``in_the_first_iteration``),
    and not in a function or lambda defined there, which may be called later. ``bound``: as there."""
    return _arm_of_the_iteration(tree, bound, loop.node, node) is True


def _arm_of_the_iteration(tree: SyntaxTree, bound: Callable[[], Container[str]], loop: cst.CSTNode, node: cst.CSTNode) -> bool | None:
    """True where ``node``, in the body of the loop statement ``loop``, runs in its first iteration
    only; False where only in later ones (``if i > 0:``'s body); None where gradfix cannot tell
    (outside the loop, in a function or lambda defined in it, which may be called later)."""
    named = _named_counter(loop)
    body = cst.ensure_type(loop, cst.For).body if named is not None else None
    if body is None or not tree.contains(body, node):
        return None
    while node is not body and (parent := tree.parent(node)) is not None:
        if isinstance(parent, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return None
        if isinstance(parent, (cst.If, cst.IfExp)) and node is not parent.test:
            truth = _truth_after_the_first(parent.test, named[1] if named else None)
            if truth is not None and _kept_counter(tree, loop, bound) is not None:
                return truth is not (node is parent.body)
        node = parent
    return None


def last_iteration_arm(
    tree: SyntaxTree, bound: Callable[[], Container[str]], frame: Frame, statement: cst.If, unchanged: Callable[[str], bool]
) -> bool | None:
    """Which arm of ``statement``, an ``if`` (no ``elif``) that ends the body of ``frame``'s loop,
    only the loop's last iteration takes: True for its body (``if i == n - 1:``, ``if i >= n - 1:``),
    False for what its test false leads to (``if i < n - 1:``, ``if i != n - 1:``), where the loop
    counts from 0 (``_counter_from_zero``) to ``n - 1``: ``for i in range(n)`` (``range(0, n)``) or
    ``for i, x in enumerate(xs)`` with ``n`` written ``len(xs)``, or ``range(3)`` with ``i < 2``. The iteration that takes that arm
    ends with it and leaves the loop, never reaching the next one: CAGrad's
    ``if i < n_tasks - 1: losses[i].backward(retain_graph=True)`` / ``else: losses[i].backward()``
    frees the graph after its last use. ``n`` must be what the test reads in every iteration: a
    name the body never binds, or ``len`` of one the body only reads items of (``xs[i]``), each
    ``unchanged`` (no other code binds it, no other name holds its object). None otherwise."""
    loop = frame.loop
    test = statement.test
    if loop is None or type(test) is not cst.Comparison or isinstance(statement.orelse, cst.If) or not _ends_the_body(tree, statement, loop.node):
        return None
    named = _named_counter(loop.node)
    if named is None or len(test.comparisons) != 1 or not is_name(test.left, named[1]) or _kept_counter(tree, loop.node, bound) is None:
        return None
    operator, last = type(test.comparisons[0].operator), test.comparisons[0].comparator
    arguments = [arg.value for arg in cst.ensure_type(cst.ensure_type(loop.node, cst.For).iter, cst.Call).args]
    if len(arguments) == 3:  # (``range(0, n, 2)`` ends where its step says)
        return None
    count = arguments[-1] if named[0] == "range" else cst.Call(cst.Name("len"), [cst.Arg(arguments[0])])
    if type(count) is cst.Integer and count.value.isdigit():  # (``range(3)``: ``i < 2``)
        if type(last) is not cst.Integer or not last.value.isdigit() or int(last.value) != int(count.value) - 1:
            return None
    elif (
        type(last) is not cst.BinaryOperation
        or type(last.operator) is not cst.Subtract
        or not (type(last.right) is cst.Integer and last.right.value == "1")
    ):
        return None
    elif expression_key(last.left) != expression_key(count) or not _the_same_in_every_iteration(tree, bound, count, loop.node.body, unchanged):
        return None
    return {cst.Equal: True, cst.GreaterThanEqual: True, cst.LessThan: False, cst.NotEqual: False}.get(operator)


def _ends_the_body(tree: SyntaxTree, statement: cst.CSTNode, loop: cst.CSTNode) -> bool:
    """Whether nothing of ``loop``'s body runs after ``statement`` (the last statement of its
    block, each block around it up to the body the last of an ``if``'s arm or a ``with``)."""
    node = statement
    while (block := tree.parent(node)) is not None and isinstance(block, cst.IndentedBlock) and block.body and block.body[-1] is node:
        around = tree.parent(block)
        if around is loop:
            return True
        if isinstance(around, cst.Else):
            around = tree.parent(around)
        while isinstance(around, cst.If) and isinstance(parent := tree.parent(around), cst.If) and parent.orelse is around:
            around = parent  # (an ``elif``'s arm ends the outer ``if``)
        if not isinstance(around, (cst.If, cst.With)):
            return False
        node = around
    return False


def _the_same_in_every_iteration(
    tree: SyntaxTree, bound: Callable[[], Container[str]], count: cst.BaseExpression, body: cst.CSTNode, unchanged: Callable[[str], bool]
) -> bool:
    """Whether ``count`` (a name, or ``len`` of one) answers the same at every iteration of the loop whose body is ``body``."""
    if type(count) is cst.Name:
        return unchanged(count.value) and count.value not in assigned_names(body, tree=tree)
    if type(count) is not cst.Call or not is_name(count.func, "len") or "len" in bound() or type(count.args[0].value) is not cst.Name:
        return False
    name = count.args[0].value.value
    for read in tree.names(body, [name]):
        parent = tree.parent(read)
        call = tree.parent(parent) if isinstance(parent, cst.Arg) else None  # (an ``Arg`` is also a class's base)
        read_as_len = isinstance(call, cst.Call) and is_name(call.func, "len")
        if not (read_as_len or isinstance(parent, cst.Subscript) and parent.value is read and _only_read(tree, parent)):
            return False
    return unchanged(name) and name not in assigned_names(body, tree=tree)


def _only_read(tree: SyntaxTree, node: cst.CSTNode) -> bool:
    """Whether ``node`` is read, not bound, deleted or augmented, alone or in a tuple of targets
    (``xs[i] = v`` adds a key to a dict)."""
    parent = tree.parent(node)
    while isinstance(parent, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        node, parent = parent, tree.parent(parent)
    if isinstance(parent, (cst.AssignTarget, cst.Del, cst.AsName)):
        return False
    return not (isinstance(parent, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor)) and parent.target is node)


def bound_in_file(module: cst.Module, tree: SyntaxTree, names: TorchNames) -> frozenset[str]:
    """Every name the file binds: imports, functions, classes, assignments (which hide a builtin of the same name)."""

    def bound() -> frozenset[str]:
        defined = {node.name.value for node in tree.findall(module, cst.FunctionDef)}
        return frozenset(names.aliases.keys() | names.local_classes | defined | assigned_names(module, tree=tree))

    return tree.kept(bound_in_file, module, bound)


# Calls that never return: each raises ``SystemExit`` (or ends the process), as a ``raise`` does.
EXITING_FUNCTIONS = frozenset({"exit", "quit", "sys.exit", "os._exit", "os.abort"})


def exits(func: cst.BaseExpression, module: cst.Module, tree: SyntaxTree, names: TorchNames) -> bool:
    """Whether calling ``func`` never returns: ``sys.exit(...)``, ``exit()`` (``EXITING_FUNCTIONS``;
    a builtin the file does not bind anew)."""
    qualified = names.qualify(func)
    builtin = qualified is not None and "." not in qualified  # (``exit`` the file may bind anew; ``sys.exit`` however imported)
    return qualified in EXITING_FUNCTIONS and not (builtin and type(func) is cst.Name and func.value in bound_in_file(module, tree, names))


def _truth_after_the_first(test: cst.BaseExpression, counter: str | None) -> bool | None:
    """What ``test`` answers in every iteration after the first of a loop that counts its
    iterations from 0 in ``counter`` (``_counter_from_zero``), where ``counter`` is at least 1:
    ``i``, ``i > 0``, ``i != 0``, ``i >= 1`` are true, ``not i``, ``i == 0``, ``i < 1`` false (and
    each answers the other way in the first). None where gradfix cannot tell."""
    if counter is None:
        return None
    if type(test) is cst.Name and test.value == counter:
        return True
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not and type(test.expression) is cst.Name:
        return False if test.expression.value == counter else None
    if type(test) is not cst.Comparison or len(test.comparisons) != 1 or not is_name(test.left, counter):
        return None
    operator, bound = type(test.comparisons[0].operator), test.comparisons[0].comparator
    number = int(bound.value) if type(bound) is cst.Integer and bound.value.isdigit() else None
    if number == 0 and operator in (cst.GreaterThan, cst.NotEqual):
        return True
    if number == 0 and operator is cst.Equal or number == 1 and operator is cst.LessThan:
        return False
    return True if number == 1 and operator is cst.GreaterThanEqual else None


def _counter_from_zero(tree: SyntaxTree, loop: cst.CSTNode, bound: Container[str]) -> str | None:
    """The name the loop statement ``loop`` counts its iterations from 0 in (``_named_counter``),
    where it walks the builtin (not a name the file ``bound``) and its body never binds that name
    again."""
    named = _named_counter(loop)
    if named is None or named[0] in bound:
        return None
    return None if named[1] in assigned_names(cst.ensure_type(loop, cst.For).body, tree=tree) else named[1]


def _kept_counter(tree: SyntaxTree, loop: cst.CSTNode, bound: Callable[[], Container[str]]) -> str | None:
    """``_counter_from_zero``, worked out once per loop (``bound`` asked for only then)."""
    return tree.kept(_counter_from_zero, loop, lambda: _counter_from_zero(tree, loop, bound()))


def runs_at_most_once(node: cst.CSTNode, bound: Container[str]) -> bool:
    """Whether a loop statement runs its body once at most: ``for i in range(1):`` (``range(0)``,
    ``range(3, 4)``: whole numbers written out), where the file does not bind ``range``."""
    if not isinstance(node, cst.For) or type(node.iter) is not cst.Call or not is_name(node.iter.func, "range") or "range" in bound:
        return False
    arguments = node.iter.args
    if not 1 <= len(arguments) <= 2 or any(arg.keyword is not None or arg.star or type(arg.value) is not cst.Integer for arg in arguments):
        return False
    numbers = [int(cst.ensure_type(arg.value, cst.Integer).value, 0) for arg in arguments]
    return numbers[-1] - (numbers[0] if len(numbers) == 2 else 0) <= 1


def _named_counter(node: cst.CSTNode) -> tuple[str, str] | None:
    """The builtin a loop statement walks and the name it counts in: ``i`` of ``for i in range(n)``
    (``range(0, n)``, ``range(0, n, 2)``) or ``for i, x in enumerate(xs)``."""
    if not isinstance(node, cst.For) or type(node.iter) is not cst.Call or not is_name(node.iter.func, "range", "enumerate"):
        return None
    function, arguments = cst.ensure_type(node.iter.func, cst.Name).value, node.iter.args
    if any(arg.keyword is not None or arg.star for arg in arguments):
        return None
    if function == "range":
        first = arguments[0].value if arguments else None
        step = arguments[2].value if len(arguments) == 3 else None
        # (counting up: ``range(0, n, -1)`` is never past 0, ``range(0, n, k)`` may count down)
        counts_up = len(arguments) < 3 or type(step) is cst.Integer and step.value.isdigit() and int(step.value) > 0
        counts_from_zero = len(arguments) == 1 or counts_up and type(first) is cst.Integer and first.value == "0"
        return (function, node.target.value) if counts_from_zero and type(node.target) is cst.Name else None
    target = node.target
    if len(arguments) != 1 or type(target) is not cst.Tuple or len(target.elements) != 2 or type(target.elements[0].value) is not cst.Name:
        return None
    return function, target.elements[0].value.value


def runs_only_under_a_test(tree: SyntaxTree, node: cst.CSTNode) -> bool:
    """Whether ``node`` runs only where a test lets it, in its function or module: in an arm of an
    ``if`` or a conditional expression, a ``while``, a ``try``, the right side of an ``and``/``or``.
    (A script's ``if __name__ == "__main__":`` runs whenever the script does.)"""
    while (parent := tree.parent(node)) is not None and not isinstance(parent, (cst.FunctionDef, cst.Module)):
        if isinstance(parent, (cst.If, cst.IfExp)) and node is not parent.test and not _the_scripts_entry(parent.test):
            return True
        if isinstance(parent, (cst.While, cst.Try, cst.TryStar)) or isinstance(parent, cst.BooleanOperation) and node is parent.right:
            return True
        node = parent
    return False


def _the_scripts_entry(test: cst.BaseExpression) -> bool:
    """``__name__ == "__main__"``."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1 or type(test.comparisons[0].operator) is not cst.Equal:
        return False
    right = test.comparisons[0].comparator
    return is_name(test.left, "__name__") and type(right) is cst.SimpleString and right.evaluated_value == "__main__"


def _invariant(tree: SyntaxTree, test: cst.BaseExpression, written: set[str]) -> bool:
    """A test that answers the same in every iteration: it calls nothing (``random.random() < p``
    answers anew) and reads nothing the loop writes."""
    return not tree.findall(test, cst.Call) and not read_names(test, tree) & written


def _runs_before(tree: SyntaxTree, branch: cst.If | cst.For | cst.While, read: cst.CSTNode, written: set[str]) -> bool:
    """Whether ``branch`` comes before ``read`` and its test is reached whenever the read is: from
    the branch up to the first statement that holds the read too, no inner loop (which may run no
    time), no ``try``, and only tests that answer the same every iteration (not ``if step % 2:``)."""
    if not tree.follows(read, branch):
        return False
    node = tree.parent(branch)
    while node is not None and not tree.contains(node, read):
        if isinstance(node, (cst.For, cst.While, cst.Try, cst.TryStar)):
            return False
        if isinstance(node, cst.If) and not _invariant(tree, node.test, written):
            return False
        node = tree.parent(node)
    return True


def _guarded_like(tree: SyntaxTree, read: cst.Name, assigning: Mapping[str, Sequence[cst.If]], loop: cst.CSTNode, written: set[str]) -> bool:
    node: cst.CSTNode = read
    while (parent := tree.parent(node)) is not None and parent is not loop:
        if isinstance(parent, cst.IndentedBlock) and any(tree.follows(read, s) for s in _assignments(parent, read.value)):
            return True  # after an assignment of its own block: this iteration's value
        if isinstance(parent, (cst.If, cst.IfExp)) and node is parent.body:
            # (``if flag and i < n:`` holds only where ``if flag:`` does)
            branches = [branch for conjunct in _conjuncts(parent.test) for branch in assigning.get(expression_key(conjunct), ())]
            if any(_runs_before(tree, branch, parent, written) for branch in branches):
                return True
            if isinstance(parent, cst.If) and parent in branches and any(tree.follows(read, s) for s in _assignments(parent.body, read.value)):
                return True  # after the assignment, in the branch that makes it
        node = parent
    return False


# A sequence a ``for`` walks that is built afresh each time from its arguments: as long as those
# answer the same, it has as many items every time (an iterator, or an object's ``__iter__``, may
# be used up by the first pass). Their arguments may call ``NUMBER_READS``, which compute a number
# from what they are given and keep nothing.
FRESH_SEQUENCES = frozenset({"range", "reversed", "enumerate", "zip"})
NUMBER_READS = frozenset({"len", "int", "min", "max", "abs", "size", "dim", "numel"})
# Progress bars, by qualified name, that walk the items of the sequence they are given first and
# nothing else (their other arguments only say how to draw the bar), and those that walk a range
# of their arguments. Each row is run by tests/test_guards.py.
ITEMS_OF_FIRST_ARGUMENT = frozenset({"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm"})
RANGES = frozenset({"tqdm.trange", "tqdm.auto.trange", "tqdm.notebook.trange"})


def _same_trip_count(tree: SyntaxTree, bound: Container[str], sequence: cst.BaseExpression, written: set[str], qualify: Qualify) -> bool:
    """Whether a ``for`` over ``sequence`` walks as many items in every iteration of the loop
    that writes ``written``: a literal list or tuple, or a ``FRESH_SEQUENCES`` call (the builtin,
    not a name the file binds) or a ``RANGES`` one, whose arguments read nothing the loop writes
    and call only ``FRESH_SEQUENCES`` and ``NUMBER_READS``; or a progress bar over such a sequence."""
    if isinstance(sequence, (cst.List, cst.Tuple)):
        return not read_names(sequence, tree) & written
    if not isinstance(sequence, cst.Call):
        return False
    walked = qualify(sequence.func)
    if walked in ITEMS_OF_FIRST_ARGUMENT:
        first = sequence.args[0] if sequence.args else None
        return first is not None and not first.keyword and not first.star and _same_trip_count(tree, bound, first.value, written, qualify)
    if walked not in RANGES and not (
        isinstance(sequence.func, cst.Name) and sequence.func.value in FRESH_SEQUENCES and sequence.func.value not in bound
    ):
        return False
    for argument in sequence.args:
        for call in tree.findall(argument.value, cst.Call):
            called = call.func.value if isinstance(call.func, cst.Name) else call.func.attr.value if isinstance(call.func, cst.Attribute) else None
            if called not in FRESH_SEQUENCES | NUMBER_READS or (isinstance(call.func, cst.Name) and called in bound):
                return False
        if read_names(argument.value, tree) & written:
            return False
    return True


def _first_pass_assigns(tree: SyntaxTree, block: cst.BaseSuite, name: str, runs_to_its_end: RunsToItsEnd) -> bool:
    """Whether the first pass of a loop whose body is ``block`` assigns ``name``: an assignment
    (or an if/else assigning it in both) of the body itself, before anything that can leave the
    pass (``break``, ``continue``, ``return``, ``raise``)."""
    for statement in block.body if isinstance(block, cst.IndentedBlock) else ():
        if _always_assigns(cst.IndentedBlock(body=[statement]), name, runs_to_its_end):
            return True
        if any(tree.findall(statement, leaving) for leaving in (cst.Break, cst.Continue, cst.Return, cst.Raise)):
            return False
    return False


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """``test`` and, for ``a and b``, each of ``a`` and ``b`` (and theirs): what ``test`` implies."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And) and not test.lpar:
        return [test, *_conjuncts(test.left), *_conjuncts(test.right)]
    return [test]


def _assignments(block: cst.BaseSuite, name: str) -> list[cst.SimpleStatementLine]:
    """The statements of ``block`` itself (not nested ones) that bind ``name`` anew: ``x = ...``,
    not ``x[i] = ...`` or ``x += ...``, which change the object the previous iteration left (and,
    on a tensor, keep its graph under the new one)."""
    return [
        statement
        for statement in (block.body if isinstance(block, cst.IndentedBlock) else ())
        if isinstance(statement, cst.SimpleStatementLine) and _writes(statement, name, binding_only=True)
    ]


def _writes(statement: cst.SimpleStatementLine, name: str, binding_only: bool = False) -> bool:
    """Whether ``statement`` writes ``name``: any assignment to it, or, ``binding_only``, one
    that binds the name itself to a new object."""
    kinds = (cst.Assign, cst.AnnAssign) if binding_only else (cst.Assign, cst.AugAssign, cst.AnnAssign)
    return any(isinstance(small, kinds) and name in _targets(small, binding_only) for small in statement.body)


def _targets(small: cst.Assign | cst.AugAssign | cst.AnnAssign, binding_only: bool) -> set[str]:
    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
    return {written for target in targets for written in target_names(target, bindings_only=binding_only)}


def bound_afresh(loop: Loop, name: str, writes: Mapping[cst.CSTNode, bool | None], names: TorchNames, tree: SyntaxTree) -> bool:
    """Whether each iteration of ``loop`` first binds ``name`` to a value not computed from what
    the previous one left (``writes``: ``FileAnalysis.writes_of``), whenever the iteration runs to
    its end: in a statement of the loop's own body or of a ``with`` there that runs to its end
    (``with torch.autocast("cuda"):``), or on every path of an ``if`` chain there (``if use_amp:
    ... else: ...``)."""
    first = next(iter(writes), None)
    if first is None or writes[first] is not False or type(first) is cst.For:
        return False  # (a nested ``for`` binds its target only where its iterable is not empty)
    body = loop.node.body.body
    if contexts.runs_whenever(names, tree, body, first):
        return True
    chain = next((s for s in tree.findall(loop.node.body, cst.If) if tree.contains(s, first)), None)
    runs_to_its_end = partial(contexts.runs_to_its_end, names, tree)
    return (
        chain is not None
        and contexts.runs_whenever(names, tree, body, chain)
        and _always_assigns(chain.body, name, runs_to_its_end)
        and _else_always_assigns(chain, name, runs_to_its_end)
        and all(fresh is False for write, fresh in writes.items() if tree.contains(chain, write))
    )


def _always_assigns(block: cst.BaseSuite, name: str, runs_to_its_end: RunsToItsEnd) -> bool:
    """Whether every path through ``block`` assigns ``name`` (an if/else assigning it in both, a
    ``with`` whose body runs to its end assigning it)."""
    if _assignments(block, name):
        return True
    return any(
        isinstance(statement, cst.If)
        and _always_assigns(statement.body, name, runs_to_its_end)
        and _else_always_assigns(statement, name, runs_to_its_end)
        or isinstance(statement, cst.With)
        and runs_to_its_end(statement)
        and _always_assigns(statement.body, name, runs_to_its_end)
        for statement in (block.body if isinstance(block, cst.IndentedBlock) else ())
    )


def _else_always_assigns(statement: cst.If, name: str, runs_to_its_end: RunsToItsEnd) -> bool:
    orelse = statement.orelse
    if isinstance(orelse, cst.If):
        return _always_assigns(orelse.body, name, runs_to_its_end) and _else_always_assigns(orelse, name, runs_to_its_end)
    return isinstance(orelse, cst.Else) and _always_assigns(orelse.body, name, runs_to_its_end)
