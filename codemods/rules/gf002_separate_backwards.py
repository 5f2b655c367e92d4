from __future__ import annotations

from functools import reduce
from operator import or_
from typing import Iterator, Sequence

import libcst as cst

from ..analysis import (
    READS_MODELLED_CODE,
    NO_CAUGHT_ERRORS,
    NO_HIDDEN_BACKWARD,
    NO_GRADIENT_HOOKS,
    BackwardSite,
    Block,
    GradientEffect,
    Origin,
    assigned_names,
    code_of,
    certain_origins,
    expand,
    expression_key,
    is_single_assignment,
    read_names,
    stepped_optimizers,
    with_backward_merged_into_branches,
    with_reads_replaced,
)
from ..edits import Fix
from ..report import FixKind
from ..rule import Rule, Violation


class SeparateBackwards(Rule):
    """
    What it finds: Two or more losses that share part of one autograd graph are each backwarded on
    their own. Typical shape: one encoder output feeds two heads, or one model call returns two
    outputs, and each loss calls ``.backward()``.

    Why it fails: The first call frees the shared part of the graph, so the second raises
    ``RuntimeError: Trying to backward through the graph a second time``. (With
    ``retain_graph=True`` on every call but the last and no optimizer step between them, the
    program runs and computes the same gradients: that is left alone. So is a shared part that
    certainly saved no tensor (a concatenation, a sum, a slice of parameters): the second backward
    runs, and adds what one backward of the sum would. A step between changes
    weights in place; where the shared part saved one of them, the second backward raises
    ``one of the variables needed for gradient computation has been modified by an inplace
    operation`` instead: a bug gradfix does not report yet.)

    The fix: gradfix backwards the sum once: ``(loss_a + loss_b).backward()``. Gradients accumulate
    additively, so this gives exactly the gradients of the separate calls (the tests check it
    against the ``retain_graph=True`` run), with one walk over the graph and nothing retained.

    It knows every way of backwarding (``accelerator.backward(loss)``, ``fabric.backward(loss)``,
    ``self.manual_backward(loss)``, ``scaler.scale(loss).backward()``, ``torch.autograd.backward``)
    and merges within one of them: ``accelerator.backward(loss_a + loss_b)``. Outputs backwarded
    with gradients of their own (``boxes.backward(box_grads)``) are backwarded together by
    ``torch.autograd.backward([boxes, scores], [box_grads, score_grads])``. When the second
    backward is an auxiliary loss behind a flag (``if use_gdpp: ... gdpp.backward()``), the sum is
    backwarded inside the ``if``, and the first loss alone on the paths that skip it.

    When gradfix only reports: When an optimizer steps or zeroes gradients between the two
    backwards, the program meant two updates, and when different optimizers take turns (a GAN's
    discriminator and generator steps, actor-critic; two objects built by torch's optimizer
    classes: a learning-rate scheduler's ``step()`` is none) each loss trains its own network: merging would
    remove an update, so gradfix only reports (the fix there is to detach the shared value, or
    recompute it after the step). With one optimizer stepping between (SAM's two steps), the second
    backward can compute the shared forward again, at the stepped weights: an unsafe fix, written
    only where that forward is one assignment of the same block, from inputs without a graph that
    nothing reassigns, and the second loss reads nothing else that holds a graph.
    It also only reports when code between the backwards reads or clips ``.grad`` or calls code
    gradfix cannot see, or when a gradient hook (``register_hook``, a module's backward hook) or a
    custom autograd ``Function`` in the file may see each backward's gradient on its own (a clamp
    of each gradient is not a clamp of their sum).
    Where a loss is an item of a tuple whose items gradfix cannot tell apart (``losses[1]`` of a
    criterion's ``(ppo_loss, pretrain_loss)``, the second from a forward of its own), the losses
    may share nothing, and both backwards run: the finding is a hint. So it is where they share a
    graph only through a call of code gradfix did not read (``d(augment(fake))``, another package's
    ``augment``), which may hand back a copy without it. Of three or more losses, what each
    shares with an earlier one counts (a relativistic GAN step's D losses beside G's). The outputs of a torch
    function that each hold its input's graph (``torch.linalg.eigh``'s values and vectors) are
    told apart.
    """

    SUMMARY = "losses that share a graph are backwarded separately"
    FIX = FixKind.SAFE
    OBLIGATIONS = (READS_MODELLED_CODE, NO_HIDDEN_BACKWARD, NO_GRADIENT_HOOKS, NO_CAUGHT_ERRORS)
    KEEPS_GRADIENTS = True
    EXAMPLE_BEFORE = """\
encoder = nn.Sequential(nn.Linear(10, 32), nn.Tanh())
regression_head = nn.Linear(32, 1)
class_head = nn.Linear(32, 3)
for x, y_reg, y_cls in loader:
    features = encoder(x)
    loss_reg = nn.functional.mse_loss(regression_head(features), y_reg)
    loss_cls = nn.functional.cross_entropy(class_head(features), y_cls)
    optimizer.zero_grad()
    loss_reg.backward()
    loss_cls.backward()
    optimizer.step()
"""
    EXAMPLE_AFTER = """\
encoder = nn.Sequential(nn.Linear(10, 32), nn.Tanh())
regression_head = nn.Linear(32, 1)
class_head = nn.Linear(32, 3)
for x, y_reg, y_cls in loader:
    features = encoder(x)
    loss_reg = nn.functional.mse_loss(regression_head(features), y_reg)
    loss_cls = nn.functional.cross_entropy(class_head(features), y_cls)
    optimizer.zero_grad()
    (loss_reg + loss_cls).backward()
    optimizer.step()
"""

    def violations(self) -> Iterator[Violation]:
        for group, block in self._groups():
            if any(self._kept_for_later(site, group[-1]) for site in group[:-1]):
                continue  # the retained graph is needed later: merging would free it
            if all(site.retain_graph is True for site in group[:-1]):
                continue  # every graph the later calls walk is kept: the program runs, and means what it says
            shared_nodes = self._shared_in(group)
            if self.analysis.saved_nothing_for_certain(shared_nodes):
                continue  # (what they share saved no tensor: each backward runs, and adds what their sum's would)
            names = " and ".join(f"`{code_of(_tensor(site))}`" for site in group)
            shared = min({node.statement for node in shared_nodes}, key=self.analysis.line)
            message = f"{names} share the graph built at line {self.analysis.line(shared)} but are backwarded separately; "
            between = self._between(block, group[0], group[-1])
            # (two optimizers for certain: a ``.step()`` of anything else may be a scheduler's)
            optimizers = set().union(*(stepped_optimizers(s) for s in between)) & self.analysis.names.optimized_modules.keys()
            effects = reduce(or_, (self.analysis.gradient_effects(s) for s in between), GradientEffect(0))
            if len(optimizers) > 1:
                message += "optimizers take turns between them, so detach the shared value for the first loss"
            elif effects & (GradientEffect.STEP | GradientEffect.SCALER_UPDATE):
                message += "an optimizer steps between them, so recompute the shared value after the step"
            elif effects & GradientEffect.ZERO_GRAD:
                clearing = next(s for s in between if self.analysis.gradient_effects(s) & GradientEffect.ZERO_GRAD)
                message += f"line {self.analysis.line(clearing)} clears the gradients between them, so recompute the shared value after it"
            else:
                message += "backward their sum once"
            why_not = ""
            if len(optimizers) <= 1 and effects & GradientEffect.UPDATING:
                fix = self._recompute_fix(group, block)
            else:
                fix, why_not = self._fix(group, block)
            if fix is None and self.analysis.names.gradient_hooks:
                hook = self.analysis.names.gradient_hooks[0]
                why_not = f"the hook or autograd Function at line {self.analysis.line(hook)} sees each backward's gradient on its own, and would see their sum"
            if why_not:
                message += f" (not rewritten: {why_not})"
            guess = _guess(group, self._shares_only_possible(group), self._shares_only_uncertainly(group))
            yield self.violation(group[0].call, message, fix, related=tuple(s.call for s in group[1:]), sites=group, guess=guess)
        yield from self._into_a_branch()

    def _into_a_branch(self) -> Iterator[Violation]:
        """A backward, then an ``if`` of its block whose body backwards a loss sharing its graph (an
        auxiliary loss behind a flag: ``if use_gdpp: gdpp.backward()``). The merged backward goes
        in the ``if``, the first one alone to the paths that skip it: each path backwards the same
        losses as before, once."""
        eligible = [site for site in self.analysis.backward_sites if self._mergeable(site)]
        for first in eligible:
            block = self.analysis.block_of(first.statement)
            if first.retain_graph is not False or block is None:
                continue
            for second in eligible:
                inner = self.analysis.block_of(second.statement)
                branch = self.analysis.tree.parent(inner.owner) if inner is not None else None
                if (
                    inner is None
                    or not isinstance(branch, cst.If)
                    or not any(branch is statement for statement in block.statements)
                    or block.index(branch) < block.index(first.statement)
                    or not self.analysis.graph_nodes(first) & self.analysis.graph_nodes(second)
                    or any({first, second} == steps.sites for steps in self.analysis.gan_steps)
                ):
                    continue
                between = [
                    *block.statements[block.index(first.statement) + 1 : block.index(branch)],
                    *inner.statements[: inner.index(second.statement)],
                ]
                if any(self.analysis.gradient_effects(node) & (GradientEffect.UPDATING | GradientEffect.READING) for node in (*between, branch.test)):
                    continue  # (an optimizer step or a gradient read between them: the two backwards mean two steps)
                shared = min(self._shared_origins([first, second]), key=self.analysis.line)
                yield self.violation(
                    first.call,
                    f"`{code_of(_tensor(first))}` and `{code_of(_tensor(second))}` share the graph built at line "
                    f"{self.analysis.line(shared)} but are backwarded separately; backward their sum once where both run",
                    self._branch_fix(first, second, branch, between),
                    related=(second.call,),
                    sites=(first, second),
                    guess=_guess((first, second), self._shares_only_possible([first, second]), self._shares_only_uncertainly([first, second])),
                )
                break

    def _mergeable(self, site: BackwardSite) -> bool:
        return (
            site.api.accumulates
            and site.tensor is not None
            and site.is_whole_statement
            and self.analysis.block_of(site.statement) is not None
            and site.value.graph
            and not site.value.backwarded
        )

    def _branch_fix(self, first: BackwardSite, second: BackwardSite, branch: cst.If, between: Sequence[cst.BaseStatement]) -> Fix | None:
        """The two merged inside ``branch`` (an ``if`` with no ``elif``), and ``first`` alone in its
        ``else``: only when nothing between them, the test included, reads or changes gradients or
        gives the first tensor another meaning."""
        merged_call = self.analysis.merged_backward([first, second])
        if merged_call is None or self.analysis.names.gradient_hooks or isinstance(branch.orelse, cst.If):
            return None
        if any(self.analysis.sites_in(statement) for statement in between):
            return None  # another backward between them
        if any(self.analysis.gradient_effects(node) or self.analysis.call_that_may_read_gradients(node) for node in (*between, branch.test)):
            return None
        if read_names(first.call) & set().union(*(assigned_names(statement) for statement in between)):
            return None
        merged = _calling(second, merged_call)
        rewritten = with_backward_merged_into_branches(branch, [branch], second.statement, merged, first.statement)
        return Fix(safe=True, remove=(first.statement,), replace=((branch, rewritten),))

    def _groups(self) -> Iterator[tuple[list[BackwardSite], Block]]:
        """Runs of backward statements of one API in one block whose graphs overlap."""
        by_block: dict[int, tuple[Block, list[BackwardSite]]] = {}
        for site in self.analysis.backward_sites:
            if self._mergeable(site) and (block := self.analysis.block_of(site.statement)) is not None:
                by_block.setdefault(id(block.owner), (block, []))[1].append(site)
        for block, sites in by_block.values():
            group: list[BackwardSite] = []
            for site in sites:
                if group and self._joins(group, site, block):
                    group.append(site)
                    continue
                if len(group) > 1:
                    yield group, block
                group = [site]
            if len(group) > 1:
                yield group, block

    def _joins(self, group: list[BackwardSite], site: BackwardSite, block: Block) -> bool:
        if any(expression_key(_tensor(member)) == expression_key(_tensor(site)) for member in group):
            return False  # the same tensor twice is GF001's
        if any({member, site} == steps.sites for member in group for steps in self.analysis.gan_steps):
            return False  # a GAN's two steps: GF005's
        if group[-1].retain_graph and group[-1].api.keeps_books:
            return False  # both calls run, and each does the framework's own bookkeeping
        effects = GradientEffect(0)
        for statement in self._between(block, group[-1], site):
            effects |= self.analysis.gradient_effects(statement)
        if GradientEffect.BACKWARD in effects:
            return False
        if effects & (GradientEffect.READING | GradientEffect.UPDATING) and group[-1].retain_graph:
            return False  # the graph is kept on purpose: each loss's gradient is read, or trains, on its own
        return bool(self._shared_origins([*group, site]))

    def _shared_origins(self, group: list[BackwardSite]) -> set[cst.BaseStatement]:
        """Statements whose graph nodes the last site shares with an earlier one."""
        return {o.statement for o in self._shared_nodes(group)}

    def _shared_nodes(self, group: list[BackwardSite], certain: bool = False) -> set[Origin]:
        """The graph nodes the last site shares with an earlier one (``certain``: each holds other
        than through code gradfix did not read)."""
        within = group[0].loops[0] if group[0].loops else None
        graphs = [
            {o for o in expand(certain_origins(site.value) if certain else site.value.origins, within) if isinstance(o, Origin)} for site in group
        ]
        shared: set[Origin] = set()
        for earlier in graphs[:-1]:
            shared |= earlier & graphs[-1]
        return shared

    def _shared_in(self, group: list[BackwardSite], certain: bool = False) -> set[Origin]:
        """The graph nodes a loss of ``group`` shares with an earlier one (``_shared_nodes``): each
        pair, not only the last loss's (an ESRGAN step's G loss shares G's output with the first D
        loss, and the second D loss only D's graph with the first)."""
        return set().union(*(self._shared_nodes(group[: end + 1], certain) for end in range(1, len(group))))

    def _shares_only_possible(self, group: list[BackwardSite]) -> bool:
        """Whether every node the losses share other than through code gradfix did not read only may
        exist: built from what such code may hand back, or from parameters frozen in one place and
        trained in another (``Value.possible``), so they may share no graph at all."""
        certain = self._shared_in(group, certain=True)
        return bool(certain) and all(node.possible for node in certain)

    def _shares_only_uncertainly(self, group: list[BackwardSite]) -> bool:
        """Whether the losses share graph nodes only where one of them holds them through code
        gradfix did not read (``d(augment(fake))`` of another package's ``augment``), which may
        hand back a copy without them, or through a value whose graph is only guessed."""
        return not self._shared_in(group, certain=True)

    def _kept_for_later(self, site: BackwardSite, last: BackwardSite) -> bool:
        """Whether ``retain_graph=True`` at ``site`` keeps graph nodes that ``last`` does not walk
        and that are backwarded again after it: built before the loop (every iteration walks them
        again) or reached by a later backward. The merged call, without it, would free them."""
        if site.retain_graph is not True or last.retain_graph is True:
            return False
        if any(self.analysis.iterates_graph(loop) for loop in site.loops):
            return True  # the analysis does not follow that graph into the loop's targets
        kept = self.analysis.graph_nodes(site) - self.analysis.graph_nodes(last)
        within = site.loops[0] if site.loops else None
        if within is not None and any(not self.analysis.contains(within.node, node.statement) for node in kept):
            return True
        return any(self.analysis.graph_nodes(other) & kept for other in self.analysis.sites_after(last))

    def _between(self, block: Block, first: BackwardSite, second: BackwardSite) -> Sequence[cst.BaseStatement]:
        return block.statements[block.index(first.statement) + 1 : block.index(second.statement)]

    def _recompute_fix(self, group: list[BackwardSite], block: Block) -> Fix | None:
        """For two backwards with an optimizer step between (SAM's two steps): the second
        backward computes the shared forward again, after the step, in place of reading the one
        the first backward freed. Only where that forward (``output = model(images)``) is one
        assignment of this block from inputs without a graph, unchanged up to the second backward,
        and the second loss reads nothing else that holds a graph. It changes what the second
        gradient is taken at (the stepped weights), which is what the step was for: unsafe."""
        if len(group) != 2:
            return None
        first, last = group
        start, end = block.index(first.statement), block.index(last.statement)
        for statement in block.statements[:start]:
            if not is_single_assignment(statement):
                continue
            assignment = cst.ensure_type(statement.body[0], cst.Assign)  # what is_single_assignment found
            if not isinstance(target := assignment.targets[0].target, cst.Name):
                continue
            forward = assignment.value
            name = target.value
            later = block.statements[block.index(statement) + 1 : end]
            if (
                statement in self._shared_origins(group)
                and isinstance(forward, cst.Call)
                and name in read_names(_tensor(last))
                and not (read_names(forward) | {name}) & set().union(*(assigned_names(s) for s in later))
                and self._graphless_apart_from(forward, set())
                and self._graphless_apart_from(_tensor(last), {name})
            ):
                recomputed = last.with_tensor(with_reads_replaced(_tensor(last), name, forward))
                return Fix(safe=False, replace=((last.statement, _calling(last, recomputed)),))
        return None

    def _graphless_apart_from(self, expression: cst.BaseExpression, names: set[str]) -> bool:
        """Whether every name ``expression`` reads as a value (not as the function it calls) is
        proved to hold no graph there, ``names`` apart."""
        callees = {id(node) for call in self.analysis.tree.findall(expression, cst.Call) for node in _callee_names(call.func)}
        for node in self.analysis.tree.findall(expression, cst.Name):
            parent = self.analysis.tree.parent(node)
            if node.value in names or id(node) in callees or (isinstance(parent, cst.Attribute) and parent.attr is node):
                continue
            value = self.analysis.value_read(node)
            if value is None or value.graph:
                return False
        return True

    def _fix(self, group: list[BackwardSite], block: Block) -> tuple[Fix | None, str]:
        """The backwards merged into the last one's place, or None and why not (a hook: said by
        the caller; an update or zeroing between: said by the message)."""
        earlier, last = group[:-1], group[-1]
        merged_call = self.analysis.merged_backward(group)
        if merged_call is None:
            return None, "they are not backwarded by the same kind of call with the same arguments, so no one call stands for them"
        if self.analysis.names.gradient_hooks:
            return None, ""  # a hook (or custom Function) sees each backward's gradient: the sum is another gradient
        between = [s for s in self._between(block, group[0], last) if s not in [site.statement for site in group]]
        if any(self.analysis.gradient_effects(statement) & GradientEffect.READING for statement in between):
            return None, "code between them reads the gradients the first backward leaves"
        if any(self.analysis.gradient_effects(statement) for statement in between):
            return None, ""  # an update or zeroing between: the backwards mean two steps
        for statement in between:
            if (call := self.analysis.call_that_may_read_gradients(statement)) is not None:
                return None, f"`{code_of(call)}` runs between them, and gradfix does not see whether it reads the gradients the first backward leaves"
        for site in earlier:
            after_site = block.statements[block.index(site.statement) + 1 : block.index(last.statement)]
            if reassigned := read_names(site.call) & set().union(*(assigned_names(s) for s in after_site)):
                return None, f"`{min(reassigned)}` means another value where the backwards would be merged"
        return Fix(safe=True, remove=tuple(site.statement for site in earlier), replace=((last.statement, _calling(last, merged_call)),)), ""


def _tensor(site: BackwardSite) -> cst.BaseExpression:
    """The tensor of a mergeable site (``_mergeable``: its ``tensor`` is not None, so it backwards
    exactly one)."""
    return site.tensors[0]


def _calling(site: BackwardSite, call: cst.Call) -> cst.SimpleStatementLine:
    """The statement line of a mergeable site (``_mergeable``: the call is the whole line), calling
    ``call`` instead."""
    line = cst.ensure_type(site.statement, cst.SimpleStatementLine)
    return line.with_changes(body=[line.body[0].with_changes(value=call)])


def _callee_names(func: cst.BaseExpression) -> list[cst.Name]:
    """The names that spell the function called (``criterion``, ``F`` of ``F.mse_loss``)."""
    while isinstance(func, cst.Attribute):
        func = func.value
    return [func] if isinstance(func, cst.Name) else []


def _guess(sites: Sequence[BackwardSite], shares_only_possible: bool = False, shares_only_uncertainly: bool = False) -> str:
    """Why the losses may not share a graph after all: one of them came out of code gradfix did not
    read, or is an item of a tuple whose items gradfix cannot tell apart (a function's
    ``(loss, aux_loss)``, the second from a forward of its own), or reaches the graph the first
    freed only through an item of a container gradfix does not know, or reaches the graph of the
    other only through code gradfix did not read or a value whose graph it could only guess
    (``shares_only_uncertainly``), or what they share only may be a graph (``shares_only_possible``);
    or why the first backward may not have freed it: a ``retain_graph`` gradfix cannot evaluate (a
    flag, a helper's parameter)."""
    kept = next((site for site in sites[:-1] if site.retain_graph is None), None)
    if kept is not None:
        return f"gradfix cannot tell whether `{code_of(kept.call)}` keeps the graph for the next backward"
    unread = next((site for site in sites if site.value.unread), None)
    if shares_only_possible:
        unread = unread or sites[0]
        return f"what `{code_of(unread.tensors[0])}` shares with the other loss comes out of code gradfix did not read, and may hold no graph"
    if unread is not None:
        return f"`{code_of(unread.tensors[0])}` comes out of code gradfix did not read, and may not hold the graph it seems to share"
    # (``freed_unsure``: what a later loss shares with the freed graph comes only through an item of a
    # container whose items gradfix does not know, which may hold a loss stored since)
    guessed = next((site for site in sites if site.value.guessed or site.value.freed_unsure), None)
    if guessed is not None:
        return f"gradfix cannot tell which part of the graph `{code_of(guessed.tensors[0])}` holds, and it may share none"
    if shares_only_uncertainly:
        return "the losses share a graph only through code gradfix did not read or a value it could only guess, and may share none"
    return ""
