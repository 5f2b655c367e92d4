from __future__ import annotations

from typing import Iterator, Sequence

import libcst as cst

from ..analysis import BackwardSite, GradientEffect, Loop, assigned_names, code_of, read_for_data, read_names, target_names
from ..edits import Fix
from ..report import FixKind
from ..rule import Rule, Violation
from ..symptoms import LastBatchOnly


class BackwardAfterLoop(Rule):
    """
    What it finds: ``loss.backward()`` sits after the batch loop, so only the last batch trains.

    Why it fails: The loop computes a new ``loss`` for every batch (or time step, or task) and
    overwrites the previous one; the backward, one indentation level too far out, runs once after
    the loop, on the last loss. Nothing fails: the model learns from one batch per epoch, and the
    other forward passes are work for nothing.

    The fix: gradfix moves the backward to the end of the loop body, so every loss adds its
    gradient; the optimizer step stays where it is, once after the loop, on the gradient of all of
    them (gradient accumulation, as in REINFORCE over an episode or MAML over tasks, where the
    gradients are cleared before the loop). This changes the maths on purpose (every loss now
    trains), so it is an unsafe fix, applied with ``--unsafe-fixes``; no optimizer call is removed
    or moved. When the loop only picks the batch and the forward follows it too, the forward moves
    with the backward, provided every statement between reads what the iteration left (or what
    another of them computed from it) and, inside the loop, would read nothing the previous
    iteration left.

    When gradfix only reports: When an optimizer step runs between the loop and the backward,
    gradfix only reports. When the loop's body may clear the gradients (a ``zero_grad()``, a
    ``.grad`` written, an optimizer stepped, or a call gradfix does not read that is handed a
    module, an optimizer, parameters or ``self``), the backward moved into it would have its
    gradient cleared by the next iteration, and the step would still see the last iteration's alone:
    gradfix only reports. So it does where the backward (or code moving with it) may also update
    parameters: a helper that backwards and steps (``backward_step(loss, opt)``), or a call into code
    gradfix does not read: moved, it would update at every iteration. When the whole update follows the loop (a ``zero_grad()`` between the loop
    and the backward, then the step), gradfix only reports: the clear right before the backward says
    one backward per step, and no rewrite keeps that. Moving the whole update into the loop would
    step once per iteration where the code steps once per loop (a scheduler, a step counter, a log
    after it see other counts); moving only the backward in would make one step of every iteration's
    summed gradient, a learning rate as many times larger for SGD and one Adam step where there were
    many (a reduction of SimCSE's SentEval classifier, with Adam: loss 0.727 after 5 epochs against
    0.574 stepping per batch). Which the author meant, the code does not say; in the projects whose
    maintainers fixed this shape (Task-Oriented-Feature-Distillation issue 7,
    Gradient-Driven-Rewards pull request 3) the update went back into the loop, one step per batch,
    never the accumulation. A clear after the step (``backward(); step(); zero_grad()`` after the
    loop) leaves the gradients clear for the next loop as one before it does, and is the
    accumulation idiom (direct-preference-optimization's trainer steps and clears after its
    microbatch loop): the backward moves. A loss that the loop accumulates
    (``total = total + loss``, a sequence model unrolled over time steps) and backwards once
    afterwards is full-batch training, and is left alone. A loop whose body ends in a plain ``break`` picks the batch it
    leaves on purpose (``for x, y in loader: break``), and is left alone.
    """

    SUMMARY = "a backward after the batch loop trains the last batch only"
    FIX = FixKind.UNSAFE
    SYMPTOM = LastBatchOnly()
    EXAMPLE_BEFORE = """\
optimizer.zero_grad()
for x, y in loader:
    output = model(x)
    loss = criterion(output, y)
loss.backward()
optimizer.step()
"""
    EXAMPLE_AFTER = """\
optimizer.zero_grad()
for x, y in loader:
    output = model(x)
    loss = criterion(output, y)
    loss.backward()
optimizer.step()
"""

    def violations(self) -> Iterator[Violation]:
        for loop in self.analysis.loops:
            if loop.is_call or not isinstance(loop.node.body, cst.IndentedBlock):
                continue
            block = self.analysis.block_of(loop.node)
            if block is None or _runs_once(loop):
                continue  # (``for x, y in loader: break`` picks the batch it leaves on purpose)
            found = self._backward_after(loop, block.statements[block.index(loop.node) + 1 :])
            if found is None:
                continue
            site, between, last, computing = found
            message = (
                f"`{code_of(site.call)}` runs once, after the loop at line {self.analysis.line(loop.node)}, "
                f"on the last value of `{last}`: only the last iteration trains; move it into the loop"
            )
            moving = _moving_with(site, computing)
            if not all(self._zeroes(s) for s in between):
                fix = None  # an optimizer steps (or gradients are read) between the loop and the backward
                message += " (not rewritten: the optimizer already steps before it)"
            elif between:
                fix = None
                message += (
                    " (not rewritten: the whole update, zero_grad, backward and step, follows the loop; "
                    "whether each iteration was meant to step, or to add to one step after the loop, the code does not say)"
                )
            elif (clearing := self._clearing_in_loop(loop, moving)) is not None:
                fix = None
                message += (
                    f" (not rewritten: line {self.analysis.line(clearing)} may clear the gradients on every iteration, "
                    "so the step would still see the last iteration's alone)"
                )
            elif (unmovable := self._unmovable(loop, moving, site)) is not None:
                fix = None
                message += f" (not rewritten: {unmovable})"
            else:
                fix = Fix(
                    safe=False,
                    move_after=tuple((s, loop.node.body.body[-1]) for s in (*moving, site.statement)),
                    reschedules_updates=True,
                )
            yield self.violation(site.call, message, fix, related=(loop.node,), sites=(site,))

    def _backward_after(
        self, loop: Loop, following: Sequence[cst.BaseStatement]
    ) -> tuple[BackwardSite, list[cst.BaseStatement], str, list[cst.BaseStatement]] | None:
        """The backward that follows ``loop`` (past optimizer calls, and statements that touch no
        gradient) of a value computed from one the loop overwrites on every iteration with that
        iteration's data alone; the optimizer calls between; that value's name; the other
        statements between (the forward, when it follows the loop too)."""
        between: list[cst.BaseStatement] = []
        computing: list[cst.BaseStatement] = []
        # What each name assigned after the loop was computed from, as the loop left it.
        computed_from: dict[str, set[str]] = {}
        tree = self.analysis.tree
        for statement in following:
            site = self._site_of_statement(statement)
            if site is not None:
                tensor = site.tensor.value if isinstance(site.tensor, cst.Name) else None
                if tensor is not None and tensor not in computed_from and self.analysis.afresh_each_iteration(loop, tensor):
                    return site, between, tensor, computing
                read = _as_the_loop_left_them(read_names(site.statement, tree), computed_from)
                if any(loop.carries(name) for name in read):
                    return None  # it also reads what every iteration added to (loss = loss + ...): all of them train
                last = next((n for n in sorted(read) if self._from_the_iteration_alone(loop, n)), None)
                return (site, between, last, computing) if last is not None else None
            if self.analysis.updates_parameters(statement):
                between.append(statement)
            elif self.analysis.gradient_effects(statement) or not isinstance(statement, cst.SimpleStatementLine):
                return None
            else:
                read = _as_the_loop_left_them(read_names(statement, tree), computed_from)
                computed_from.update(dict.fromkeys(assigned_names(statement, tree=tree), read))
                computing.append(statement)
        return None

    def _unmovable(self, loop: Loop, moving: list[cst.BaseStatement], site: BackwardSite) -> str | None:
        """Why the statements between the loop and the backward that must move with it cannot
        move into the loop's end, or None. Each must read what the iteration left (or what one of
        them computed from it), so that inside the loop it computes the same from every
        iteration's values; and the moved code must read nothing an iteration would then hand to
        the next."""
        tree = self.analysis.tree
        produced = assigned_names(loop.node, tree=tree)
        for statement in moving:
            if not read_names(statement, tree) & produced:
                return f"line {self.analysis.line(statement)} does not depend on the loop"
            produced |= assigned_names(statement, tree=tree)
        if loop.carried_with([*moving, site.statement]) != loop.carried_with(()):
            return "inside the loop, the moved code would read what the previous iteration left"
        updating = next((s for s in (*moving, site.statement) if self.analysis.may_change_parameters(s) is not False), None)
        if updating is not None:
            return f"line {self.analysis.line(updating)} may also update parameters: moved, it would update them at every iteration"
        return None

    def _from_the_iteration_alone(self, loop: Loop, name: str, reading: frozenset[str] = frozenset()) -> bool:
        """``name`` is the batch the loop hands out (its target), or is overwritten on every
        iteration from that batch's data (not only its shape), directly or through names the
        iteration computed from it the same way (``microbatch = batch[i]``, then ``loss`` from
        ``microbatch``), and from nothing an earlier iteration left (a recurrent state): after the
        loop it holds the last batch's value alone. ``reading``: the names asked about on the way
        here (a name computed from itself is not)."""
        if not isinstance(loop.node, cst.For):
            return False
        batch = set(target_names(loop.node.target))
        if name in batch:
            return True
        if name in reading or not self.analysis.afresh_each_iteration(loop, name):
            return False
        tree = self.analysis.tree
        assignments = [s for s in loop.node.body.body if name in assigned_names(s, tree=tree)]
        return all(
            not any(loop.carries(read) for read in read_names(s, tree))
            and any(self._from_the_iteration_alone(loop, read, reading | {name}) for read in sorted(read_for_data(s, tree)))
            for s in assignments
        )

    def _site_of_statement(self, statement: cst.CSTNode) -> BackwardSite | None:
        return next((s for s in self.analysis.sites_in(statement) if s.is_whole_statement and s.api.accumulates), None)

    def _clearing_in_loop(self, loop: Loop, moving: list[cst.BaseStatement]) -> cst.BaseStatement | None:
        """The first statement of the loop's body (or of those moving into it with the backward)
        that may clear or overwrite gradients (``FileAnalysis.may_clear_gradients``: unknown, yes),
        or None. Every statement of the body runs between one iteration's moved backward and the
        next one's: a clear there leaves the step after the loop the last iteration's gradient."""
        return next((s for s in (*loop.node.body.body, *moving) if self.analysis.may_clear_gradients(s)), None)

    def _zeroes(self, statement: cst.CSTNode) -> bool:
        return self.analysis.gradient_effects(statement) == GradientEffect.ZERO_GRAD


def _moving_with(site: BackwardSite, computing: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The statements between the loop and the backward that move into the loop with it: those
    computing what it backwards, and those reading what a moving one assigns (a hook registered
    on the forward's output)."""
    needed = read_names(site.statement)
    moving: set[int] = set()
    for statement in reversed(computing):
        if assigned_names(statement) & needed:
            moving.add(id(statement))
            needed |= read_names(statement)
    assigned = set().union(*(assigned_names(s) for s in computing if id(s) in moving))
    for statement in computing:
        if id(statement) not in moving and read_names(statement) & assigned:
            moving.add(id(statement))
            assigned |= assigned_names(statement)
    return [statement for statement in computing if id(statement) in moving]


def _runs_once(loop: Loop) -> bool:
    """Whether the loop's body ends in a ``break`` that nothing guards."""
    last = loop.node.body.body[-1]
    return isinstance(last, cst.SimpleStatementLine) and any(isinstance(small, cst.Break) for small in last.body)


def _as_the_loop_left_them(names: set[str], computed_from: dict[str, set[str]]) -> set[str]:
    """The names, as the loop left them, that ``names`` (read after the loop) were computed from."""
    return set().union(*(computed_from.get(name, {name}) for name in names))
