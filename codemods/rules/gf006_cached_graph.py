from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis import (
    NO_GRADIENT_HOOKS,
    READS_MODELLED_CODE,
    NO_CAUGHT_ERRORS,
    NO_HIDDEN_BACKWARD,
    NO_BOOKKEEPING_READS,
    NONE,
    BackwardSite,
    ListOf,
    Loop,
    Scope,
    TupleOf,
    Value,
    assigned_names,
    code_of,
    detached_where_stored,
    dotted_name,
    is_single_assignment,
    read_names,
    with_reads_replaced,
)
from ..edits import Fix
from ..report import FixKind
from ..rule import Rule, Violation


class CachedGraph(Rule):
    """
    What it finds: A target computed once by a network that nothing trains keeps its graph, and every
    step backwards into it. A teacher's outputs for distillation, pseudo-labels from a labelling
    network, the features of a reference image for style transfer or feature inversion: computed
    once, by a module no optimizer updates, they still carry that module's autograd graph.

    "Once" is before the training loop, or outside the function every step runs: a global that a
    step function reads, an attribute ``__init__`` sets that ``forward``, ``training_step`` or a
    trainer's step method reads (the neural style tutorial's ``StyleLoss`` keeps
    ``self.target = gram_matrix(target_feature).detach()`` for this reason), unless a fresh
    instance is made in every step, or the step function rebinds it on every path to a graph of its
    own (SAC's ``self.alpha = self.log_alpha.exp()`` at the end of each update): the value built once
    is then read by the first step alone. Rebound on some paths only, or by a call the method hands
    its object to, it may be: the finding is a hint.

    Why it fails: The first step's backward walks into the target's graph and frees it; the second
    raises ``RuntimeError: Trying to backward through the graph a second time``.
    ``retain_graph=True`` makes it run while every step also computes gradients for the frozen
    network, for nothing.

    The fix: gradfix detaches the value where it is made (``target = teacher(x).detach()``): it is
    a constant of training, and its value is unchanged. gradfix tells a constant from a value that
    must train by the optimizers: only when every optimizer's parameters are known and none of them
    belongs to the modules that built the value, and the program moves none of those modules itself
    (an update by hand, a moving average of another model's parameters, a state loaded in the loop:
    an EMA teacher is no constant, and GF003 computes its target in the loop), is it detached. A value built from parameters that
    train (an ``exp`` of a parameter, a normalised learned adjacency kept by ``__init__``) must be
    computed again in every step: where ``__init__`` keeps it as ``self.x = expr`` of attributes no
    other method sets (not of the constructor's arguments), the unsafe fix computes ``expr`` where
    the step function read ``self.x`` (the values change after the first step: the current weights).

    Where the network may not build a graph at all (frozen only under a test gradfix does not
    evaluate, or frozen in one place and trained in another), the finding is a hint.

    When gradfix only reports: When gradfix can neither prove the value a constant of training (an
    optimizer whose parameters it does not know) nor compute it again in every step as above, it
    reports the value and rewrites nothing; so too for a value it cannot place.
    """

    SUMMARY = "a target built once by an untrained network keeps its graph across steps"
    FIX = FixKind.SAFE
    KEEPS_RESULTS = True
    OBLIGATIONS = (READS_MODELLED_CODE, NO_HIDDEN_BACKWARD, NO_GRADIENT_HOOKS, NO_BOOKKEEPING_READS, NO_CAUGHT_ERRORS)
    EXAMPLE_BEFORE = """\
teacher = nn.Linear(8, 4)
student = nn.Linear(8, 4)
optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
target = teacher(x)
for step in range(steps):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(student(x), target)
    loss.backward()
    optimizer.step()
"""
    EXAMPLE_AFTER = """\
teacher = nn.Linear(8, 4)
student = nn.Linear(8, 4)
optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
target = teacher(x).detach()
for step in range(steps):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(student(x), target)
    loss.backward()
    optimizer.step()
"""

    def violations(self) -> Iterator[Violation]:
        seen: set[int] = set()
        for site in self.analysis.backward_sites:
            for loop in site.loops:
                if not loop.is_call:
                    yield from self._built_before(site, loop, seen)
        for scope, values in self._step_functions():
            yield from self._built_outside(scope, values, seen)

    def _step_functions(self) -> Iterator[tuple[Scope, list[Value]]]:
        """Functions that run once per step, with the graphs each call uses: what its backwards
        walk, and for a module's forward (or a trainer hook) what a call returns or leaves on
        ``self``."""
        by_scope: dict[cst.CSTNode, tuple[Scope, list[Value]]] = {}
        for site in self.analysis.backward_sites:
            if self.analysis.runs_every_step(site.scope):
                by_scope.setdefault(site.scope.node, (site.scope, []))[1].append(site.value)
        for loop in self.analysis.loops:
            if loop.is_call and self.analysis.is_forward(loop.scope):
                kept = [value for name, value in loop.back_edge.items() if name.startswith("self.")]
                by_scope.setdefault(loop.node, (loop.scope, []))[1].extend([loop.returned, *kept])
        yield from by_scope.values()

    def _built_outside(self, scope: Scope, values: list[Value], seen: set[int]) -> Iterator[Violation]:
        """Globals and attributes set at construction that every call of ``scope`` reads and
        backwards into again."""
        built = self.analysis.built_outside(scope, values)
        if not built:
            return
        function = scope.node
        if not isinstance(function, cst.FunctionDef):
            return  # (a module's own code runs once)
        read = read_names(function.body)
        cached = [
            statement
            for statement in built
            if id(statement) not in seen
            and assigned_names(statement) & read
            and not self.analysis.loops_around(statement)
            and self._made_once(statement, scope)
        ]
        # (what each call rebinds on every path reaches the first call alone)
        reaching = {id(s): self.analysis.kept_graphs.reaches_the_next_call(scope, s, assigned_names(s) & read) for s in cached}
        cached = [statement for statement in cached if reaching[id(statement)] is not False]
        constant = self.analysis.untrained_graph(built)
        for statement in cached:
            seen.add(id(statement))
            shown = ", ".join(f"`{n}`" for n in sorted(assigned_names(statement) & read))
            where = f"every call of `{function.name.value}` (line {self.analysis.line(function)})"
            if constant:
                message = (
                    f"{shown} is built once by a network nothing trains, but keeps its graph; {where} "
                    "backwards into it again: detach it where it is made"
                )
            elif self.analysis.trained_modules is not None:
                message = (
                    f"{shown} is built once from parameters that train, and keeps that graph; {where} "
                    f"backwards into it again: compute it in `{function.name.value}` instead"
                )
            else:
                message = (
                    f"{shown} is built once and keeps its graph; {where} backwards into it again: detach "
                    f"it where it is made if it is a constant, or compute it in `{function.name.value}` if "
                    "it must train (gradfix cannot tell which: not every optimizer's parameters are known)"
                )
            if constant:
                fix = self._detach_fix(statement)
            elif self.analysis.trained_modules is not None:
                fix = self._recompute_fix(statement, scope)
            else:
                fix = None
            yield self.violation(
                statement,
                message,
                fix,
                related=(function,),
                sites=tuple(site for site in self.analysis.backward_sites if site.scope.node is function),
                guess=self.analysis.closed_world.unread_guess([statement])
                or self._only_possible(statement)
                or self._rebound_on_some_paths(statement, function, read, reaching[id(statement)]),
            )

    def _made_once(self, statement: cst.CSTNode, scope: Scope) -> bool:
        """A global (a statement of the module body), or an attribute the constructor of the
        function's own class sets, when no instance of that class is made fresh in every step."""
        block = self.analysis.block_of(statement)
        if block is not None and isinstance(block.owner, cst.Module):
            return True
        if scope.class_name is None:
            return False
        constructor = self.analysis.constructor_of(scope.class_name)
        return (
            constructor is not None
            and any(s is statement for s in constructor.body.body)
            and not self.analysis.constructed_every_step(scope.class_name)
        )

    @staticmethod
    def _rebound_on_some_paths(statement: cst.CSTNode, function: cst.FunctionDef, read: set[str], reaching: bool | None) -> str:
        """Why the graph ``statement`` built may be read by the first call of ``function`` alone: it
        may rebind what the statement assigns (``reaches_the_next_call``)."""
        if reaching is not None:
            return ""
        shown = ", ".join(f"`{n}`" for n in sorted(assigned_names(statement) & read))
        return (
            f"`{function.name.value}` may rebind {shown} (on some paths, or in a call it hands its object to), "
            "and its next call then reads that graph instead"
        )

    def _recompute_fix(self, statement: cst.CSTNode, scope: Scope) -> Fix | None:
        """``self.x = expr`` in ``__init__``, read by the step function: the function computes
        ``expr`` where it read ``self.x``, with the parameters as they are at that step. Only for an
        expression of attributes that no other method sets and of names the module defines (not
        the constructor's parameters or locals), and for a function that does not set ``self.x``.
        Unsafe: it changes the values after the first step (the current weights, not the first)."""
        constructor = self.analysis.constructor_of(scope.class_name)
        function = scope.node
        if constructor is None or not is_single_assignment(statement) or scope.class_name is None or not isinstance(function, cst.FunctionDef):
            return None
        assignment = cst.ensure_type(cst.ensure_type(statement, cst.SimpleStatementLine).body[0], cst.Assign)  # what is_single_assignment found
        target = dotted_name(assignment.targets[0].target)
        expression = assignment.value
        if target is None or not target.startswith("self.") or target.count(".") != 1:
            return None
        local = assigned_names(constructor.body) | {p.name.value for p in constructor.params.params}
        attributes = {name for name in read_names(expression) if name.startswith("self.")}
        set_elsewhere = set().union(
            *(assigned_names(m.body) for m in self.analysis.class_body(scope.class_name) if isinstance(m, cst.FunctionDef) and m is not constructor)
        )
        if (
            {name for name in read_names(expression) if "." not in name and name != "self"} & local
            or (attributes | {target}) & set_elsewhere
            or any(self._makes_something(call) for call in self.analysis.tree.findall(expression, cst.Call))
        ):
            return None
        computed = cst.ensure_type(with_reads_replaced(function, target, expression), cst.FunctionDef)
        return None if computed is function else Fix(safe=False, replace=((function, computed),))

    def _makes_something(self, call: cst.Call) -> bool:
        """Whether a call makes a parameter, a leaf or a module (``nn.Parameter(...)``, ``torch.zeros(
        ..., requires_grad=True)``, ``nn.Linear(...)``, a class of the file): computed at every call
        instead, it would be a new one each time, never trained."""
        names = self.analysis.names
        return (
            names.qualify(call.func) == "torch.nn.Parameter"
            or names.module_class(call.func) is not None
            or any(arg.keyword is not None and arg.keyword.value == "requires_grad" for arg in call.args)
            or (isinstance(call.func, cst.Name) and call.func.value in names.local_classes)
        )

    def _only_possible(self, statement: cst.CSTNode) -> str:
        """Why what ``statement`` builds may hold no graph at all: each value it assigns holds one only
        possibly (a module frozen under a test, or in one place and trained in another)."""
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
        if not isinstance(small, cst.Assign):
            return ""
        value = self.analysis.value_assigned(small.value)
        if value is None or not value.graph or not value.possible:
            return ""
        return f"`{code_of(small.value)}` may hold no graph: what builds it may not require grad where it runs"

    def _detach_fix(self, statement: cst.CSTNode) -> Fix | None:
        """``x = expr`` / ``d[k] = expr`` → ``… = expr.detach()``; ``xs.append(expr)`` →
        ``xs.append(expr.detach())``; never for a list or a tuple, which have no ``.detach()``."""
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        small = statement.body[0]
        if isinstance(small, cst.Assign):
            value = self.analysis.value_assigned(small.value)
            if len(small.targets) != 1 or value is None or isinstance(value.structure, (ListOf, TupleOf)) or value.structure is NONE:
                return None
        elif not isinstance(small, cst.Expr):
            return None
        replaced = detached_where_stored(statement)
        return None if replaced is None else Fix(safe=True, replace=((statement, replaced),))

    def _built_before(self, site: BackwardSite, loop: Loop, seen: set[int]) -> Iterator[Violation]:
        """Values built before ``loop`` (an epoch loop re-reads what the batch loop picks) by
        untrained modules, that the backward in it walks again."""
        built = self.analysis.built_before_loop(site, loop)
        if not built or not self.analysis.untrained_graph(built):
            return
        read_in_loop = read_names(loop.node.body)
        for statement in built:
            names = assigned_names(statement) & read_in_loop
            if not names or id(statement) in seen:
                continue
            seen.add(id(statement))
            shown = ", ".join(f"`{n}`" for n in sorted(names))
            yield self.violation(
                statement,
                f"{shown} is built once by a network nothing trains, but keeps its graph; every step of the "
                f"loop at line {self.analysis.line(loop.node)} backwards into it (line "
                f"{self.analysis.line(site.call)}): detach it where it is made",
                self._detach_fix(statement),
                related=(loop.node, site.call),
                sites=(site,),
                guess=self.analysis.closed_world.unread_guess([statement]) or self._only_possible(statement),
            )
