"""Small questions about statements and expressions that several rules ask."""

from __future__ import annotations

import libcst as cst

_ATOMIC = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)
_EMPTY_MODULE = cst.Module([])


def code_of(node: cst.CSTNode) -> str:
    return _EMPTY_MODULE.code_for_node(node)


def is_single_assignment(statement: cst.CSTNode) -> bool:
    """A statement line that is one ``target = value`` (the target may unpack a tuple)."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Assign)
        and len(statement.body[0].targets) == 1
    )


def is_single_call(statement: cst.CSTNode) -> bool:
    """A statement line that is one call, like ``optimizer.step()``."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.Call)
    )


def parenthesized(expression: cst.BaseExpression) -> cst.BaseExpression:
    return expression.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def as_operand(expression: cst.BaseExpression) -> cst.BaseExpression:
    """``expression``, parenthesized unless it binds tighter than any operator around it."""
    if isinstance(expression, _ATOMIC) or expression.lpar:
        return expression
    return parenthesized(expression)
