from __future__ import annotations

from typing import Iterator


from ..analysis import BackwardSite, assigned_names, dotted_name
from ..edits import Fix
from ..rule import FixKind, Rule, Violation


class DuplicateBackward(Rule):
    """
    The same tensor is backwarded twice, with no new value assigned to it in between.

    The first ``loss.backward()`` walks the graph and frees its saved tensors, so the second call
    raises ``RuntimeError: Trying to backward through the graph a second time``. Adding
    ``retain_graph=True`` to the first call silences the error but keeps the graph alive and adds
    every gradient twice, which is never what a training step means.

    The fix removes the repeated call. When the first call already passes ``retain_graph=True`` the
    program ran, with doubled gradients; removing the repeat halves them, so that fix is unsafe.
    """

    CODE = "GF001"
    NAME = "duplicate_backward"
    SUMMARY = "the same tensor is backwarded twice"
    FIX = FixKind.SAFE
    EXAMPLE_BEFORE = """\
for batch, target in loader:
    optimizer.zero_grad()
    loss = criterion(model(batch), target)
    loss.backward()
    loss.backward()
    optimizer.step()
"""
    EXAMPLE_AFTER = """\
for batch, target in loader:
    optimizer.zero_grad()
    loss = criterion(model(batch), target)
    loss.backward()
    optimizer.step()
"""

    def violations(self) -> Iterator[Violation]:
        seen: dict[tuple[int, str], BackwardSite] = {}
        for site in self.analysis.backward_sites:
            name = dotted_name(site.receiver) if site.receiver is not None else None
            block = self.analysis.block_of(site.statement)
            if site.api != "Tensor.backward" or name is None or block is None or not site.is_whole_statement:
                continue
            key = (id(block.owner), name)
            first = seen.get(key)
            seen[key] = site
            if first is None or self._reassigned_between(first, site, name):
                continue
            retained = first.keyword("retain_graph") is not None
            yield self.violation(
                site.call,
                f"`{name}` is backwarded again (first at line {self.analysis.line(first.call)}); "
                + ("the gradients are added twice" if retained else "its graph was freed by the first call"),
                Fix(safe=not retained, remove=(site.statement,)),
                related=(first.call,),
            )

    def _reassigned_between(self, first: BackwardSite, second: BackwardSite, name: str) -> bool:
        block = self.analysis.block_of(first.statement)
        between = block.statements[block.index(first.statement) + 1 : block.index(second.statement)]
        prefixes = {name} | {name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)}
        return any(assigned_names(statement) & prefixes for statement in between)
