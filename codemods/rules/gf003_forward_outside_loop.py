from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Sequence

import libcst as cst

from ..analysis import (
    BackwardSite,
    Loop,
    NO_GRADIENT_HOOKS,
    NO_CAUGHT_ERRORS,
    NO_HIDDEN_BACKWARD,
    READS_MODELLED_CODE,
    Origin,
    assigned_names,
    code_of,
    expand,
    ModuleInfo,
    expression_key,
    is_single_assignment,
    is_view,
    read_names,
)
from ..edits import Fix
from ..report import FixKind
from ..rule import Rule, Violation


class ForwardOutsideLoop(Rule):
    """
    What it finds: The forward pass (or the loss) is computed once before the training loop and
    backwarded on every iteration inside it.

    Why it fails: The first iteration's backward frees the graph that the forward pass built; the
    second iteration backwards through the same, freed graph and raises ``RuntimeError: Trying to
    backward through the graph a second time``. With ``retain_graph=True`` it runs, but every
    iteration uses the prediction of the initial parameters: the model does not learn what the
    code says it learns.

    The fix: gradfix moves the statements that build that graph (the chain of graph-carrying
    assignments that depend on the model or on parameters; not the data, not the modules) to the
    top of the innermost loop that contains the backward, so each iteration runs its own forward
    pass.

    The statements between them that compute from what the moved ones assign move with them
    (``preds = logits[:, :2]`` between ``logits = model(x)`` and ``preds = preds.softmax(-1)``).
    When those values are also read outside the loop (printed before it, returned after it), the
    statements stay where they are and the loop computes its own copy of them.

    When gradfix only reports: gradfix only reports, without rewriting anything, when the move could
    change what the program means: when a moved statement reads a name that is assigned again in the
    loop, on the way to it or by the moved statements themselves (``preds = preds.softmax(-1)``
    alone, moved, would apply once more in every iteration), or when it is not a plain assignment,
    or when the loop is a function's and the module's forward it would move is read elsewhere (or
    reads a name the function binds: moved, it would be the function's own), or when the loop computes
    the very module call the moved statements make (``net(old_x)``, written the same), or calls that
    module on other inputs and puts what it computes against the value made before the loop
    (``exp(logprob - old_logprob)``, two arguments of one loss): the value made before the loop may
    then be meant as the outputs before training (learning without forgetting's targets, PPO's
    log-probabilities of the policy that collected the data, missing their detach), and moved, the
    loss would compare the network with itself. A value the loop only adds as a term of its own (an
    anchor regularizer) is moved.
    A backward that only the loop's first iteration runs (``if step == 0:`` in a loop counting from
    0 in ``step``, which the body never binds again) walks the graph built before the loop once,
    while it is fresh: that is correct code, and not reported; so is a backward in a loop that runs
    once at most (``for i in range(1):``).
    When the backward keeps the graph (``retain_graph=True``, or a value gradfix cannot read), the
    program runs as it is, and the move, which changes its results, is an unsafe fix; and when
    nothing in the loop changes the parameters (no optimizer steps in it), every iteration's forward
    would be the same: a Jacobian's rows, a Fisher estimate's labels backwarded one by one from one
    kept graph. That is correct code, and not reported; where gradfix cannot tell whether anything in
    the loop changes the parameters, the finding rests on a guess, and is a hint. So is one whose
    part built before the loop reads no module, no parameter and no graph, only tensors it makes
    itself (a PINN's collocation points made with ``requires_grad=True`` and cast once): recomputed,
    it may be the same at every iteration. A view of a parameter made before the loop (``w_t =
    lin.weight.t()``, a slice) is not reported: it shares the parameter's storage, sees every update
    the optimizer makes in place, and saves nothing; a copy (``.t().contiguous()``) is stale, and is.
    A moved statement that draws random values itself (``t = 1 + 3 * torch.rand(n, 1, requires_grad=True)``,
    ``x.uniform_()``, ``np.random.rand(n)``) would draw new ones at every iteration where the program drew
    them once: that move is an unsafe fix (making the drawn values a leaf keeps them). What a module or a
    function it calls draws (a forward's dropout or noise) is each step's forward's own, and moves with it.
    """

    SUMMARY = "the forward pass is computed before the loop that backwards it"
    FIX = FixKind.SAFE
    OBLIGATIONS = (READS_MODELLED_CODE, NO_HIDDEN_BACKWARD, NO_GRADIENT_HOOKS, NO_CAUGHT_ERRORS)
    EXAMPLE_BEFORE = """\
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
criterion = nn.MSELoss()
prediction = model(x)
for epoch in range(epochs):
    loss = criterion(prediction, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    EXAMPLE_AFTER = """\
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
criterion = nn.MSELoss()
for epoch in range(epochs):
    prediction = model(x)
    loss = criterion(prediction, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""

    def violations(self) -> Iterator[Violation]:
        seen: set[tuple[int, frozenset[int]]] = set()
        for site in self.analysis.backward_sites:
            loop = next((loop for loop in site.loops if not loop.is_call), None)
            if loop is None or loop is not site.loops[0] or loop.runs_once or self.analysis.runs_in_the_first_iteration_only(site.call, loop):
                continue  # (``if step == 0: loss.backward()``, ``for i in range(1):`` walk the graph before the loop once, fresh)
            hoisted = self.analysis.built_before_loop(site, loop)
            key = (id(loop), frozenset(map(id, hoisted)))
            if not hoisted or key in seen or self.analysis.untrained_graph(hoisted):
                continue  # (a constant of training, built by modules nothing trains, is GF006's)
            if isinstance(loop.node, cst.For) and read_names(loop.node.iter) & set().union(*map(assigned_names, hoisted)):
                continue  # the loop walks those values, one each iteration: not one graph every time
            if self._views_of_what_the_loop_keeps(site, loop, hoisted):
                continue  # (``w_t = lin.weight.t()``: the view sees each step's update, and saved nothing)
            seen.add(key)
            names = sorted({n for s in hoisted for n in assigned_names(s)})
            shown = ", ".join(f"`{n}`" for n in names) or "a value"
            message = (
                f"{shown} {'are' if len(names) > 1 else 'is'} computed once before the loop at line {self.analysis.line(loop.node)} but "
                f"backwarded inside it (line {self.analysis.line(site.call)}); compute it in the loop"
            )
            # A kept graph runs: every iteration trains on the first one's forward, and moving it
            # changes what the program computes. So does one whose part built before the loop is
            # not proved to save a tensor the backward frees (a ``torch.cat`` of parameters).
            runs = site.retain_graph is not False or not self.analysis.frees_what_they_saved(site, hoisted)
            changing = self.analysis.may_change_parameters(loop.node.body) if runs else True
            if changing is False:
                continue  # every iteration would compute the same forward: one kept graph is right
            fix = self._fix(hoisted, loop, safe=not runs)
            if fix is not None and (recomputed := self._computed_in_the_loop_too(hoisted, loop)) is not None:
                # (moved, it would be what the loop computes anyway: a distillation term would compare the network with itself)
                message = message.removesuffix("; compute it in the loop") + (
                    f"; the loop computes `{code_of(recomputed)}` itself: detach {shown} where it is made if it is meant as the"
                    " outputs before training, or compute it in the loop (not rewritten: which is meant is not clear)"
                )
                fix = None
            guesses = [self.analysis.closed_world.unread_guess(hoisted)]
            # Where the program runs, the stale forward is the bug only if an iteration must change
            # what it was built from.
            if runs and changing and not self.analysis.reads_what_trains(hoisted):
                guesses.append(
                    "what is built before the loop reads nothing an optimizer may train (no trainable module, no parameter, no graph), so every iteration may compute the same values"
                )
            # (``runs`` for one of two reasons: say the one that holds)
            changes = "" if changing is None else "; moving {} changes its results"
            if runs and site.retain_graph is not False:
                message += f" (the graph is kept, so the program runs{changes.format('the forward')})"
            elif runs:
                message += f" (the part built before the loop is not proved to save a tensor the backward frees, so the program may run{changes.format('it')})"
            if changing is None:
                guesses.append("gradfix cannot tell whether anything in the loop changes the parameters, and if nothing does, one forward is right")
            guess = "; ".join(filter(None, guesses))
            drawing = self._drawn_again(fix) if fix is not None and fix.safe and not guess else None
            if fix is not None and drawing is not None:
                fix = replace(fix, safe=False)
                message += f" (unsafe fix: moved into the loop, `{code_of(drawing)}` draws other values at every iteration)"
            yield self.violation(hoisted[0], message, fix, related=(loop.node, site.call), sites=(site,), guess=guess)

    def _drawn_again(self, fix: Fix) -> cst.Call | None:
        """A call in the statements ``fix`` moves (or copies) into the loop that draws other values
        each time it runs (``torch.rand(...)``): moved, it draws new ones at every iteration, where
        the program drew them once (the points a PINN is fitted on). Not one inside a module or
        function they call (a forward's dropout or noise: what each step's forward draws anew)."""
        moved = [statement for statement, _ in fix.move] + [copy for _, copies in fix.insert_before for copy in copies]
        return next((call for statement in moved if (call := self.analysis.names.draws_other_values(statement)) is not None), None)

    def _computed_in_the_loop_too(self, hoisted: Sequence[cst.BaseStatement], loop: Loop) -> cst.Call | None:
        """A call in the loop's body of a module the statements built before the loop call too, that the
        loop may mean to compare with what they made: written the same (``net(old_x)``: learning without
        forgetting's targets of the network before the new task), or on other inputs where the loop puts a
        value computed from it against one computed from theirs (PPO's ``exp(logprob - old_logprob)``,
        ``kl_div(new, old)``). The value made once is then a reference, the outputs before training.
        A module is the same by its name, or by its class where the class is the file's or the project's
        (another name for it, a copy: which one the call reaches, gradfix does not tell)."""
        tree, names = self.analysis.tree, self.analysis.names

        def modules(node: cst.CSTNode) -> list[tuple[cst.Call, ModuleInfo]]:
            calls = ((call, names.module(call.func, self.analysis.class_name_of(call))) for call in tree.findall(node, cst.Call))
            return [(call, module) for call, module in calls if module is not None]

        before = [(code_of(call), expression_key(call.func), module) for statement in hoisted for call, module in modules(statement)]
        for call, module in modules(loop.node.body):
            if any(code_of(call) == text for text, _, _ in before):
                return call
            same = any(
                key == expression_key(call.func) or module.class_name == other.class_name and (module.is_local or module.project is not None)
                for _, key, other in before
            )
            if same and module.trainable and self._compared(hoisted, loop, call):
                return call
        return None

    def _compared(self, hoisted: Sequence[cst.BaseStatement], loop: Loop, call: cst.Call) -> bool:
        """Whether the loop's body may put a value computed from ``call`` against one computed from what
        ``hoisted`` assign: wherever the two meet other than as separate terms of a sum, a ``-``, a call
        given both (``kl_div(new, old)``), a list of both, a test. Only a sum whose every term reads one
        of them at most (``criterion(model(x), y) + 0.1 * anchor_out.pow(2).mean()``, ``loss += 0.1 *
        anchor_term``) is proved to compare nothing: each term is a loss of its own."""
        tree = self.analysis.tree
        new: set[str] = set()
        old: set[str] = set().union(*(assigned_names(statement) for statement in hoisted))

        def sides(node: cst.CSTNode) -> set[str]:
            read = read_names(node)
            return {side for side, meets in (("new", tree.contains(node, call) or read & new), ("old", read & old)) if meets}

        for test in [*(s.test for s in tree.findall(loop.node.body, cst.If)), *(s.test for s in tree.findall(loop.node.body, cst.While))]:
            if len(sides(test)) == 2:
                return True
        for statement in tree.findall(loop.node.body, cst.SimpleStatementLine):  # (in the order of the source)
            for small in statement.body:
                if len(sides(small)) == 2 and any(len(sides(term)) == 2 for term in _terms(small)):
                    return True
                met = sides(small)
                (new if "new" in met else old if met else set()).update(assigned_names(small))
        return False

    def _views_of_what_the_loop_keeps(self, site: BackwardSite, loop: Loop, hoisted: Sequence[cst.BaseStatement]) -> bool:
        """Whether every operation built before the loop that ``site`` walks is a view (``.t()``,
        ``.view(...)``, a slice) and the loop binds none of the names those statements read anew: a
        view of a parameter shares its storage, sees every update made in place, and saves nothing."""
        built = [o for o in expand(site.value.origins, loop) if isinstance(o, Origin) and o.statement in hoisted]
        read = set().union(*(read_names(statement) for statement in hoisted))
        return bool(built) and all(is_view(o.node) for o in built) and not read & assigned_names(loop.node.body, rebinding_only=True)

    def _fix(self, hoisted: Sequence[cst.BaseStatement], loop: Loop, safe: bool) -> Fix | None:
        body = loop.node.body
        hoisted = self._with_what_they_feed(hoisted, loop)
        if not isinstance(body, cst.IndentedBlock) or not all(is_single_assignment(s) for s in hoisted):
            return None
        scope = loop.scope.node
        crossing = [s for s in hoisted if not (self.analysis.tree.contains(scope, s) and not self._in_nested_scope(s, scope))]
        if crossing and not self._movable_into_function(hoisted, loop):
            return None
        assigned_by_the_move = set().union(*(assigned_names(s, rebinding_only=True) for s in hoisted))
        assigned_in_the_loop = assigned_names(body, rebinding_only=True)
        defined: set[str] = set()
        for statement in hoisted:
            block = self.analysis.block_of(statement)
            container = self.analysis.tree.child_holding(block.owner, loop.node) if block is not None else None
            if block is None or container is None or block.index(statement) > block.index(container):
                return None  # the loop is not after the statement in an enclosing block
            on_the_way = [*block.statements[block.index(statement) + 1 : block.index(container)], container]
            rebound = set().union(*(assigned_names(s, rebinding_only=True) for s in on_the_way))
            assignment = cst.ensure_type(cst.ensure_type(statement, cst.SimpleStatementLine).body[0], cst.Assign)  # what is_single_assignment found
            inputs = read_names(assignment.value) - defined
            if inputs & (rebound | assigned_in_the_loop | assigned_by_the_move):
                return None  # moved, it would read another value than it reads where it is
            defined |= assigned_names(statement)
        if self._read_elsewhere(defined, hoisted, loop):
            # Its values are read outside the loop too: they stay, and the loop computes its own.
            copies = tuple(statement.with_changes(leading_lines=[]) for statement in hoisted)
            return Fix(safe=safe, insert_before=((body.body[0], copies),))
        return Fix(safe=safe, move=tuple((statement, body.body[0]) for statement in hoisted))

    def _movable_into_function(self, hoisted: Sequence[cst.BaseStatement], loop: Loop) -> bool:
        """Whether statements of the module move into ``loop`` of a function keeping their meaning:
        moved, the names they bind are the function's own, so no other code may read them (nor
        declare them global), and they read what they read at the module only where the function
        binds none of those names."""
        function, module = loop.scope.node, self.analysis.module
        if not isinstance(function, cst.FunctionDef) or any(self._in_nested_scope(s, module) for s in hoisted):
            return False
        tree = self.analysis.tree
        bound = set().union(*(assigned_names(s) for s in hoisted))
        read_elsewhere = any(
            not tree.contains(loop.node.body, node) and not any(tree.contains(s, node) for s in hoisted) for node in tree.names(module, bound)
        )
        read = set().union(*(read_names(s) for s in hoisted))
        bound_by_the_function = assigned_names(function.body) | {parameter.name.value for parameter in tree.findall(function.params, cst.Param)}
        return not read_elsewhere and not read & bound_by_the_function

    def _with_what_they_feed(self, hoisted: Sequence[cst.BaseStatement], loop: Loop) -> list[cst.BaseStatement]:
        """``hoisted`` with the statements between them and the loop, in their blocks, that compute
        from what they assign: a step of the forward that built no graph node of its own (an item
        of a model's output, picked by an index) is still a step of it."""
        moving = list(hoisted)
        for statement in hoisted:
            block = self.analysis.block_of(statement)
            container = self.analysis.tree.child_holding(block.owner, loop.node) if block is not None else None
            if block is None or container is None or block.index(statement) > block.index(container):
                continue
            for later in block.statements[block.index(statement) + 1 : block.index(container)]:
                if (
                    all(later is not s for s in moving)
                    and is_single_assignment(later)
                    and read_names(cst.ensure_type(later.body[0], cst.Assign).value)
                    & set().union(*(assigned_names(s) for s in moving if self.analysis.order(s) < self.analysis.order(later)))
                ):
                    moving.append(later)
        return sorted(moving, key=self.analysis.order)

    def _read_elsewhere(self, names: set[str], hoisted: Sequence[cst.CSTNode], loop: Loop) -> bool:
        """Whether any of ``names`` is used in the loop's scope outside the loop body (other than
        by the moved statements); nested functions and classes are other scopes."""
        scope = loop.scope.node
        tree = self.analysis.tree
        return any(
            not tree.contains(loop.node.body, node) and not any(tree.contains(s, node) for s in hoisted) and not self._in_nested_scope(node, scope)
            for node in tree.names(scope.body if isinstance(scope, cst.FunctionDef) else scope, names)
        )

    def _in_nested_scope(self, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
        parent = self.analysis.tree.parent(node)
        while parent is not None and parent is not scope:
            if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
                return True
            parent = self.analysis.tree.parent(parent)
        return False


def _terms(small: cst.BaseSmallStatement) -> list[cst.CSTNode]:
    """The terms of the sum a statement computes (``a + b``, ``total += a``, each addend apart), or
    the statement itself where it computes no sum."""
    if type(small) is cst.AugAssign:
        return [small.target, *_addends(small.value)] if type(small.operator) is cst.AddAssign else [small]
    value = getattr(small, "value", None)
    if isinstance(value, cst.BaseExpression) and type(small) in (cst.Assign, cst.AnnAssign, cst.Expr, cst.Return):
        return list[cst.CSTNode](_addends(value))
    return [small]


def _addends(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    if type(value) is cst.BinaryOperation and type(value.operator) is cst.Add:
        return [*_addends(value.left), *_addends(value.right)]
    return [value]
