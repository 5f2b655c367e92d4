"""Statement-level edits and the transform that applies them.

Rules move, merge and insert whole statements, so edits are expressed against the statement lists
that own them (a module body or an indented block), the way LibCST codemod commands do it in
``leave_IndentedBlock`` / ``leave_Module``. Comments are never dropped: a removed statement hands its
comment lines (and its trailing comment) to the next statement that stays; a moved statement takes
its comments along and leaves its blank lines behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence, Union

import libcst as cst

Body = Union[cst.Module, cst.IndentedBlock]


@dataclass(frozen=True, eq=False)
class Fix:
    """A set of statement edits that together remove one violation."""

    safe: bool
    remove: tuple[cst.BaseStatement, ...] = ()  # comments go to the next remaining statement
    move: tuple[tuple[cst.BaseStatement, cst.BaseStatement], ...] = ()  # (statement, insert before)
    move_after: tuple[tuple[cst.BaseStatement, cst.BaseStatement], ...] = ()  # (statement, insert after)
    # An unsafe fix whose point is to run updates at another time (into the loop they were meant
    # for): it may move, never remove, optimizer updates.
    reschedules_updates: bool = False
    insert_before: tuple[tuple[cst.BaseStatement, tuple[cst.BaseStatement, ...]], ...] = ()
    insert_after: tuple[tuple[cst.BaseStatement, tuple[cst.BaseStatement, ...]], ...] = ()
    replace: tuple[tuple[cst.BaseStatement, cst.BaseStatement], ...] = ()
    # Expressions of the replaced statements that their replacements evaluate whole, as before
    # (``loss`` of ``total += loss`` made ``total += loss.detach()``): what they run stays.
    kept_whole: tuple[cst.BaseExpression, ...] = ()

    def taken_away(self) -> list[cst.CSTNode]:
        """The statements this fix removes, replaces, or moves (unless it reschedules updates); of a
        replaced statement that keeps expressions whole (``kept_whole``), the calls outside them."""
        moved = [] if self.reschedules_updates and not self.safe else [*self.move, *self.move_after]
        replaced: list[cst.CSTNode] = [s for s, _ in self.replace]
        if self.kept_whole:
            replaced = [call for statement in replaced for call in _calls_outside(statement, self.kept_whole)]
        return [*self.remove, *(s for s, _ in moved), *replaced]

    def statements(self) -> list[cst.BaseStatement]:
        """Every statement this fix removes, moves, replaces or inserts next to."""
        anchors = [*self.remove, *(s for pair in (*self.move, *self.move_after) for s in pair)]
        return anchors + [a for a, _ in (*self.insert_before, *self.insert_after, *self.replace)]

    def touched(self) -> set[int]:
        """Identities of the statements this fix depends on; two fixes that share one conflict."""
        return {id(a) for a in self.statements()}


def _calls_outside(node: cst.CSTNode, kept: tuple[cst.BaseExpression, ...]) -> list[cst.Call]:
    """The calls under ``node`` that are not under any of ``kept``."""
    found: list[cst.Call] = []
    kept_ids = {id(expression) for expression in kept}
    pending: list[cst.CSTNode] = [node]
    while pending:
        current = pending.pop()
        if id(current) in kept_ids:
            continue
        if isinstance(current, cst.Call):
            found.append(current)
        pending.extend(current.children)
    return found


@dataclass
class _Plan:
    before: list[cst.BaseStatement] = field(default_factory=list)
    after: list[cst.BaseStatement] = field(default_factory=list)
    replacement: cst.BaseStatement | None = None
    removed: bool = False
    moved: bool = False


def _is_blank(line: cst.EmptyLine) -> bool:
    return line.comment is None


class _ApplyFixes(cst.CSTTransformer):
    def __init__(self, fixes: Iterable[Fix]) -> None:
        super().__init__()
        self.plans: dict[int, _Plan] = {}
        for fix in fixes:
            for statement in fix.remove:
                self._plan(statement).removed = True
            for statement, anchor in fix.move:
                self._plan(statement).moved = True
                self._plan(anchor).before.append(_without_blank_lines(statement))
            for statement, anchor in fix.move_after:
                self._plan(statement).moved = True
                self._plan(anchor).after.append(_without_blank_lines(statement))
            for anchor, statements in fix.insert_before:
                self._plan(anchor).before.extend(statements)
            for anchor, statements in fix.insert_after:
                self._plan(anchor).after.extend(statements)
            for anchor, statement in fix.replace:
                self._plan(anchor).replacement = statement

    def _plan(self, statement: cst.CSTNode) -> _Plan:
        return self.plans.setdefault(id(statement), _Plan())

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body, footer = self._rebuild(original_node.body, updated_node.body, updated_node.footer)
        return updated_node.with_changes(body=body, footer=footer)

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        body, footer = self._rebuild(original_node.body, updated_node.body, updated_node.footer)
        if not body:
            body = [cst.SimpleStatementLine([cst.Pass()])]
        return updated_node.with_changes(body=body, footer=footer)

    def _rebuild(
        self,
        originals: Sequence[cst.BaseStatement],
        updated: Sequence[cst.BaseStatement],
        footer: Sequence[cst.EmptyLine],
    ) -> tuple[list[cst.BaseStatement], list[cst.EmptyLine]]:
        result: list[cst.BaseStatement] = []
        carried_comments: list[cst.EmptyLine] = []
        left_blank_lines: list[cst.EmptyLine] = []
        for original, statement in zip(originals, updated):
            plan = self.plans.get(id(original))
            if plan is None:
                result.append(_with_lines(statement, carried_comments, left_blank_lines))
                carried_comments, left_blank_lines = [], []
                continue
            pending = plan.before + ([] if plan.removed or plan.moved else [plan.replacement or statement])
            pending += plan.after
            if plan.removed:
                carried_comments += _comment_lines(statement)
            elif plan.moved:
                left_blank_lines += [line for line in statement.leading_lines if _is_blank(line)]
            for item in pending:
                result.append(_with_lines(item, carried_comments, left_blank_lines))
                carried_comments, left_blank_lines = [], []
        return result, [*carried_comments, *footer]


def _comment_lines(statement: cst.BaseStatement) -> list[cst.EmptyLine]:
    lines = [line for line in statement.leading_lines if not _is_blank(line)]
    if isinstance(statement, cst.SimpleStatementLine) and statement.trailing_whitespace.comment is not None:
        lines.append(cst.EmptyLine(indent=True, comment=statement.trailing_whitespace.comment))
    return lines


def _without_blank_lines(statement: cst.BaseStatement) -> cst.BaseStatement:
    return statement.with_changes(leading_lines=[line for line in statement.leading_lines if not _is_blank(line)])


def _with_lines(statement: cst.BaseStatement, comments: list[cst.EmptyLine], blank_lines: list[cst.EmptyLine]) -> cst.BaseStatement:
    if not comments and not blank_lines:
        return statement
    leading = list(statement.leading_lines)
    if blank_lines and not leading:
        leading = blank_lines[:1]
    return statement.with_changes(leading_lines=[*comments, *leading])


def apply_fixes(module: cst.Module, fixes: Sequence[Fix]) -> cst.Module:
    return module.visit(_ApplyFixes(fixes))


def compatible(fixes: Iterable[Fix]) -> list[Fix]:
    """The fixes, in order, that touch no statement an earlier one touches."""
    chosen, seen = [], set()
    for fix in fixes:
        touched = fix.touched()
        if touched & seen:
            continue
        seen |= touched
        chosen.append(fix)
    return chosen
