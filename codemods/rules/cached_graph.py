from __future__ import annotations

from typing import Iterator

import libcst as cst
import libcst.matchers as m

from ..analysis import NONE, BackwardSite, ListOf, Loop, TupleOf, as_operand, assigned_names, code_of, read_names
from ..edits import Fix
from ..rule import FixKind, Rule, Violation


class CachedGraph(Rule):
    """
    A target computed once by a network that nothing trains keeps its graph, and every step
    backwards into it.

    A teacher's outputs for distillation, pseudo-labels from a labelling network, the features of a
    reference image for style transfer or feature inversion: computed once, before the training
    loop, by a module no optimizer updates, they still carry that module's autograd graph. The
    first step's backward walks into it and frees it; the second raises ``RuntimeError: Trying to
    backward through the graph a second time``. ``retain_graph=True`` makes it run while every step
    also computes gradients for the frozen network, for nothing.

    The fix detaches the value where it is made (``target = teacher(x).detach()``): it is a constant
    of training, and its value is unchanged. gradfix tells a constant from a value that must train
    by the optimizers: only when every optimizer's parameters are known and none of them belongs to
    the modules that built the value is it detached. A value built by a trained module is GF003's:
    it must be computed again in every step.
    """

    CODE = "GF006"
    NAME = "cached_graph"
    SUMMARY = "a target built once by an untrained network keeps its graph across steps"
    FIX = FixKind.SAFE
    EXAMPLE_BEFORE = """\
teacher = nn.Linear(8, 4)
student = nn.Linear(8, 4)
optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
target = teacher(x)
for step in range(steps):
    optimizer.zero_grad()
    loss = F.mse_loss(student(x), target)
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
    loss = F.mse_loss(student(x), target)
    loss.backward()
    optimizer.step()
"""

    def violations(self) -> Iterator[Violation]:
        seen: set[int] = set()
        for site in self.analysis.backward_sites:
            for loop in site.loops:
                if not loop.is_call:
                    yield from self._built_before(site, loop, seen)

    def _detach_fix(self, statement: cst.CSTNode) -> Fix | None:
        """``x = expr`` / ``d[k] = expr`` → ``… = expr.detach()``; ``xs.append(expr)`` →
        ``xs.append(expr.detach())``; never for a list or a tuple, which have no ``.detach()``."""
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        small = statement.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            value = self.analysis.value_assigned(small.value)
            if value is None or isinstance(value.structure, (ListOf, TupleOf)) or value.structure is NONE:
                return None
            replaced = small.with_changes(value=_detached(small.value))
        elif isinstance(small, cst.Expr) and m.matches(
            small.value, m.Call(func=m.Attribute(attr=m.Name("append")), args=[m.Arg(keyword=None)])
        ):
            call = small.value
            replaced = small.with_changes(value=call.with_changes(args=[call.args[0].with_changes(value=_detached(call.args[0].value))]))
        else:
            return None
        return Fix(safe=True, replace=((statement, statement.with_changes(body=[replaced])),))

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
            )

def _detached(expression: cst.BaseExpression) -> cst.BaseExpression:
    return cst.parse_expression(f"{code_of(as_operand(expression))}.detach()")
