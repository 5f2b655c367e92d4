"""Small questions about statements and expressions that several rules ask."""

from __future__ import annotations

import dataclasses
import functools

from typing import Sequence, TypeGuard, overload

import libcst as cst

from ..frameworks import HOOK_RETURNED_LOSS_KEY
from ..torch_api import VIEW_METHODS
from .tree import LAYOUT, find_nodes
from .values import TENSOR, ListOf, RecordOf, Structure, TupleOf

_ATOMIC = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)
_EMPTY_MODULE = cst.Module([])


def code_of(node: cst.CSTNode) -> str:
    """The code of ``node`` as written, to show in a message or to build new code from; never to
    compare two expressions by (``expression_key`` does that)."""
    return _EMPTY_MODULE.code_for_node(node)


def expression_key(node: cst.CSTNode) -> str:
    """What two spellings of one expression share, to compare them by: ``(flag)``, ``flag`` and
    ``( flag )`` have one key, and so do ``a and  b`` and ``(a) and b``; ``(a + b) * c`` and
    ``a + b * c`` do not (the key is the expression's structure, not its text less the
    parentheses). A name or a chain of attributes on one is its dotted name (``self.opt``).
    The skeleton's tree of a file has no parentheses or spacing and LibCST's has the file's, so
    comparing by ``code_of`` answers one way on each. Like the skeleton's, the key leaves out the
    text between an f-string's expressions and their conversions (the skeleton keeps that text's
    value, LibCST its spelling), and a trailing comma in brackets."""
    node_type = type(node)
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute:
        return f"{expression_key(node.value)}.{node.attr.value}"
    if node_type in _OPERATORS:
        return node_type.__name__
    keys = []
    for field in _compared_fields(node_type):
        value = getattr(node, field)
        if value is None or value is cst.MaybeSentinel.DEFAULT or type(value) in _PUNCTUATION:
            continue  # nothing there, or a comma, a colon, an equals sign: written or not, one expression
        if isinstance(value, (list, tuple)):
            keys.append(f"{field}=[{', '.join(expression_key(item) for item in value if type(item) not in _PUNCTUATION)}]")
        elif isinstance(value, cst.CSTNode):
            keys.append(f"{field}={expression_key(value)}")
        else:
            keys.append(f"{field}={value!r}")
    return f"{node_type.__name__}({', '.join(keys)})"


_OPERATORS = frozenset(t for t in LAYOUT if issubclass(t, (cst.BaseBinaryOp, cst.BaseAugOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp)))
_PUNCTUATION = LAYOUT - _OPERATORS  # and whitespace, newlines and comments
_SPELLINGS = {cst.FormattedStringText: {"value"}, cst.FormattedStringExpression: {"conversion"}}


@functools.cache
def _compared_fields(node_type: type[cst.CSTNode]) -> tuple[str, ...]:
    """The fields of ``node_type`` an expression's key may read: not its parentheses or whitespace,
    nor the spellings the skeleton does not keep. (Punctuation is left out by its type.)"""
    left_out = _SPELLINGS.get(node_type, set())
    return tuple(
        f.name
        for f in dataclasses.fields(node_type)
        if f.name not in ("lpar", "rpar") and not f.name.startswith("whitespace") and f.name not in left_out
    )


def dotted_name(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    # Exact types: a failed isinstance of a libcst class goes through ABCMeta, and this runs for
    # nearly every expression the analysis reads. A chain is followed in one call (a call and a
    # string a link were a third of its 4.3 million calls in a cold check of diffusers).
    if type(node) is cst.Name:
        return node.value
    attributes = []
    while type(node) is cst.Attribute:
        attributes.append(node.attr.value)
        node = node.value
    if not attributes or type(node) is not cst.Name or not node.value:
        return None
    return ".".join([node.value, *reversed(attributes)])


def is_name(node: cst.CSTNode, *spellings: str) -> bool:
    """Whether ``node`` is a bare name (spelled as one of ``spellings``, when given)."""
    return type(node) is cst.Name and (not spellings or node.value in spellings)


def method_called(node: cst.CSTNode) -> str | None:
    """``m`` for a call ``x.m(...)``; None for anything else."""
    if type(node) is cst.Call and type(node.func) is cst.Attribute:
        return node.func.attr.value
    return None


def method_receiver(call: cst.CSTNode) -> cst.BaseExpression:
    """``x`` of a method's call ``x.m(...)``: of a call ``method_called`` names."""
    return cst.ensure_type(cst.ensure_type(call, cst.Call).func, cst.Attribute).value


def is_detach(call: cst.CSTNode) -> bool:
    """``x.detach()`` or ``x.detach_()``."""
    return method_called(call) in ("detach", "detach_")


def is_view(node: cst.CSTNode) -> bool:
    """``x.t()``, ``x.view(...)`` (``VIEW_METHODS``), ``x[0]``, ``x[:, 1:3]``: a view of ``x``."""
    if type(node) is cst.Call:
        return method_called(node) in VIEW_METHODS
    if type(node) is cst.Subscript:
        return all(
            type(element.slice) is cst.Slice
            and all(part is None or type(part) is cst.Integer for part in (element.slice.lower, element.slice.upper, element.slice.step))
            or type(element.slice) is cst.Index
            and type(element.slice.value) is cst.Integer
            for element in node.slice
        )
    return False


def turns_gradients_off(call: cst.CSTNode) -> bool:
    """``x.requires_grad_(False)`` or ``x.requires_grad_(requires_grad=False)``."""
    if type(call) is not cst.Call or method_called(call) != "requires_grad_" or len(call.args) != 1:
        return False
    arg = call.args[0]
    return (arg.keyword is None or arg.keyword.value == "requires_grad") and is_name(arg.value, "False")


def is_grad(attribute: cst.Attribute) -> bool:
    """``x.grad``."""
    return attribute.attr.value == "grad"


def appended(small: cst.CSTNode) -> cst.Call | None:
    """The call of a statement ``xs.append(value)``, one value passed by position; None for any other."""
    if type(small) is cst.Expr and type(small.value) is cst.Call and method_called(small.value) == "append":
        arguments = small.value.args
        if len(arguments) == 1 and arguments[0].keyword is None and not arguments[0].star:
            return small.value
    return None


def loss_handed_to_trainer(returned: cst.BaseExpression) -> cst.BaseExpression | None:
    """What a trainer hook's ``return`` hands the trainer to backward: the value itself, the first
    item of a tuple, the ``"loss"`` of a dict (``frameworks.HOOK_RETURNED_LOSS_KEY``; None when a
    dict has no such key)."""
    if isinstance(returned, cst.Tuple) and returned.elements:
        return loss_handed_to_trainer(returned.elements[0].value)
    if isinstance(returned, cst.Dict):
        return next(
            (
                loss_handed_to_trainer(element.value)
                for element in returned.elements
                if isinstance(element, cst.DictElement)
                and type(element.key) is cst.SimpleString
                and element.key.evaluated_value == HOOK_RETURNED_LOSS_KEY
            ),
            None,
        )
    return returned


def is_single_assignment(statement: cst.CSTNode) -> TypeGuard[cst.SimpleStatementLine]:
    """A statement line that is one ``target = value`` (the target may unpack a tuple)."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Assign)
        and len(statement.body[0].targets) == 1
    )


def is_single_call(statement: cst.CSTNode) -> TypeGuard[cst.SimpleStatementLine]:
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


@overload
def with_reads_replaced(node: cst.BaseExpression, name: str, by: cst.BaseExpression) -> cst.BaseExpression: ...
@overload
def with_reads_replaced(node: cst.CSTNode, name: str, by: cst.BaseExpression) -> cst.CSTNode: ...
def with_reads_replaced(node: cst.CSTNode, name: str, by: cst.BaseExpression) -> cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode]:
    """``node`` with every read of ``name`` (``output``, or ``self.encoded``) computed by ``by`` instead:
    not an attribute's own name (``x.output``), a keyword (``f(output=...)``), nor a read inside a
    function defined in ``node`` (its names are its own)."""
    replaced = as_operand(by)
    not_reads: set[int] = set()

    def spelled(expression: cst.CSTNode) -> str | None:
        if isinstance(expression, cst.Name):
            return expression.value
        if isinstance(expression, cst.Attribute):
            base = spelled(expression.value)
            return f"{base}.{expression.attr.value}" if base else None
        return None

    class Replace(cst.CSTTransformer):
        def visit_FunctionDef(self, function: cst.FunctionDef) -> bool:
            return function is node

        def visit_Attribute(self, attribute: cst.Attribute) -> None:
            not_reads.add(id(attribute.attr))

        def visit_Arg(self, argument: cst.Arg) -> None:
            if argument.keyword is not None:
                not_reads.add(id(argument.keyword))

        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
            return replaced if original_node.value == name and id(original_node) not in not_reads else updated_node

        def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
            return replaced if spelled(original_node) == name else updated_node

    return node.visit(Replace())


def detached(expression: cst.BaseExpression, structure: Structure = TENSOR) -> cst.BaseExpression | None:
    """``expression`` with every tensor in it detached, for the structures gradfix can write
    (a tensor, a list of tensors, a tuple of tensors or of tuples of tensors, a named tuple of the
    file's own class holding tensors); None otherwise."""
    if structure is TENSOR:
        return cst.Call(func=cst.Attribute(value=as_operand(expression), attr=cst.Name("detach")))
    code = code_of(expression)
    if isinstance(structure, ListOf) and structure.item is TENSOR:
        return cst.parse_expression(f"[s.detach() for s in {code}]")
    if isinstance(structure, RecordOf):
        return cst.parse_expression(f"type({code})(*(h.detach() for h in {code}))") if set(structure.items) == {TENSOR} else None
    if isinstance(structure, TupleOf) and structure.items:
        items = set(structure.items)
        if items == {TENSOR}:
            return cst.parse_expression(f"tuple(h.detach() for h in {code})")
        if len(items) == 1 and isinstance(structure.items[0], TupleOf) and set(structure.items[0].items) == {TENSOR}:
            return cst.parse_expression(f"tuple(tuple(h.detach() for h in layer) for layer in {code})")
    return None


def detached_where_stored(statement: cst.SimpleStatementLine) -> cst.SimpleStatementLine | None:
    """``x = expr`` → ``x = expr.detach()``; ``xs.append(expr)`` → ``xs.append(expr.detach())``;
    None for any other statement line."""
    if len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
        return statement.with_changes(body=[small.with_changes(value=detached(small.value))])
    call = appended(small)
    if call is not None:
        argument = call.args[0].with_changes(value=detached(call.args[0].value))
        return statement.with_changes(body=[small.with_changes(value=call.with_changes(args=[argument]))])
    return None


def with_backward_merged_into_branches(
    outer: cst.If, branches: Sequence[cst.If], failing: cst.CSTNode, merged: cst.BaseStatement, earlier: cst.BaseStatement
) -> cst.If:
    """``outer`` with the backward statement ``failing`` (in one branch of each ``if`` of
    ``branches``, ``outer`` first) replaced by ``merged``, which also backwards what ``earlier``
    did, and ``earlier`` appended to every branch that does not lead to ``failing`` (an ``else``
    added where there is none): every path still backwards the earlier loss once."""
    return cst.ensure_type(outer.visit(_BranchMerge({id(branch) for branch in branches}, failing, merged, earlier)), cst.If)


class _BranchMerge(cst.CSTTransformer):
    def __init__(self, branches: set[int], failing: cst.CSTNode, merged: cst.BaseStatement, earlier: cst.BaseStatement) -> None:
        super().__init__()
        self.branches, self.failing, self.merged, self.earlier = branches, failing, merged, earlier

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine) -> cst.BaseStatement:
        return self.merged if original_node is self.failing else updated_node

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        if id(original_node) not in self.branches:
            return updated_node
        alone = self.earlier.with_changes(leading_lines=[])
        if any(node is self.failing for node in find_nodes(original_node.body, cst.SimpleStatementLine)):
            orelse = updated_node.orelse
            if orelse is None:
                return updated_node.with_changes(orelse=cst.Else(cst.IndentedBlock([alone])))
            if isinstance(orelse, cst.Else):
                return updated_node.with_changes(orelse=orelse.with_changes(body=orelse.body.with_changes(body=[*orelse.body.body, alone])))
            return updated_node  # an elif: its own branches get the earlier backward
        body = updated_node.body
        return updated_node.with_changes(body=body.with_changes(body=[*body.body, alone]))


def unpacked(target: cst.BaseExpression, value: cst.BaseExpression) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """The element-by-element assignments of ``a, b = x, y``; none for any other assignment."""
    if (
        (type(target) is cst.Tuple or type(target) is cst.List)
        and (type(value) is cst.Tuple or type(value) is cst.List)
        and len(target.elements) == len(value.elements)
    ):
        return [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
    return []


def changes_in_place(call: cst.Call) -> bool:
    """``p.sub_(...)``, ``p.data.add_(...)``: a tensor method that writes into its receiver."""
    method = method_called(call)
    return method is not None and method.endswith("_") and not method.startswith("_")


def parameter_receiving(function: cst.FunctionDef, position: int, keyword: str | None, is_constructor: bool) -> str | None:
    """The parameter of ``function`` an argument arrives as (None when gradfix cannot tell)."""
    parameters = [p.name.value for p in function.params.params]
    if is_constructor:
        parameters = parameters[1:]
    if keyword is not None:
        every = parameters + [p.name.value for p in function.params.kwonly_params]
        return keyword if keyword in every else None
    return parameters[position] if position < len(parameters) else None


def tested_name(test: cst.BaseExpression) -> tuple[str, str | None, bool] | None:
    """What a test says of one name where it holds: ``("flag", None, True)`` for ``flag``, ``("flag",
    None, False)`` for ``not flag``; ``("task", "'depth'", True)`` for ``task == "depth"`` (a literal
    of ``constant_key``, on either side) and False for ``!=``."""
    negated = test.expression if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) else None
    if type(test) is cst.Comparison and len(test.comparisons) == 1:
        operator = type(test.comparisons[0].operator)
        sides = (test.left, test.comparisons[0].comparator)
        for named, literal in (sides, sides[::-1]):
            name, constant = dotted_name(named), constant_key(literal)
            if name is not None and constant is not None and operator in (cst.Equal, cst.NotEqual):
                return name, constant, operator is cst.Equal
        return None
    name = dotted_name(test if negated is None else negated)
    return None if name is None else (name, None, negated is None)


def constant_key(node: cst.BaseExpression | None) -> str | None:
    """A key written as a constant, as one spelling (``'loss'`` and ``"loss"`` are one key): a
    string or an integer literal."""
    # (not ``evaluated_value``: ``ast.literal_eval`` leaves a cycle of closures for the collector)
    if type(node) is cst.SimpleString:
        prefix, text = node.prefix.lower(), node.raw_value
        return None if "b" in prefix or "\\" in text and "r" not in prefix else repr(text)
    if type(node) is cst.Integer:
        return node.value if node.value.isdigit() else None
    if type(node) is cst.UnaryOperation and type(node.operator) is cst.Minus and type(node.expression) is cst.Integer:
        return f"-{node.expression.value}" if node.expression.value.isdigit() else None
    return None


def decorator_callee(decorator: cst.Decorator) -> cst.BaseExpression:
    """What a decorator calls: ``torch.no_grad`` of ``@torch.no_grad()`` and of ``@torch.no_grad``."""
    node = decorator.decorator
    return node.func if isinstance(node, cst.Call) else node
