"""Reading and rewriting calls by the backward rows of ``frameworks``: which row a method call
is, where its tensor and its ``retain_graph`` / ``create_graph`` flags are, and the same call for
another tensor or with the graph retained."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ..frameworks import (
    BACKWARD_METHOD,
    FRAMEWORK_APIS,
    GUESSED_WRAPPER_BACKWARD,
    LIGHTNING_MANUAL_BACKWARD,
    MANUAL_BACKWARD_METHOD,
    RECEIVER,
    SCALED_BACKWARD,
    SCALING_METHOD,
    TENSOR_BACKWARD,
    TENSOR_BACKWARD_KEYWORDS,
    WRAPPER_BACKWARD,
    BackwardApi,
    Tristate,
)
from .loops import Loop, Scope
from .syntax import as_operand
from .values import NOTHING, Value


def method_api(
    method: str,
    call: cst.Call,
    receiver_framework: str | None,
    receiver_has_graph: bool,
    in_lightning_module: bool,
    receiver_is_module_import: bool,
    receiver_is_an_object: bool = False,
    argument_is_graphless: bool = False,
) -> BackwardApi | None:
    """The row for ``receiver.method(...)``, or None when the call backwards nothing (a compiled
    extension's ``kernel.backward(grad, …)`` is a plain function of an imported module).

    ``x.backward(arg)``: a tensor's first argument is its gradient, a wrapper's (an optimizer
    wrapper, a criterion) is the tensor. It is the tensor's own backward when ``x`` may carry a
    graph and ``arg`` does not (``receiver_has_graph``), or ``arg`` is proved to carry none
    (nothing without a graph can be backwarded) and ``x`` may be a tensor; a wrapper's when ``x``
    is an object gradfix knows (an optimizer, a framework object, an instance of the file's own
    class); otherwise gradfix cannot tell, and the row says it guessed: an object's method given
    nothing to backward is its own (a flow's inverse, ``flow.backward(z)``), or a wrapper's of
    what it keeps."""
    if method == MANUAL_BACKWARD_METHOD and call.args:
        return LIGHTNING_MANUAL_BACKWARD if in_lightning_module or receiver_framework else WRAPPER_BACKWARD
    if method != BACKWARD_METHOD or receiver_is_module_import and not receiver_framework:
        return None
    if receiver_framework in FRAMEWORK_APIS:
        return FRAMEWORK_APIS[receiver_framework]
    receiver = cst.ensure_type(call.func, cst.Attribute).value  # a method's call, by its name
    if _is_scale_call(receiver):
        return SCALED_BACKWARD
    if receiver_has_graph:
        return TENSOR_BACKWARD
    takes_tensor = any(arg.keyword is None and not arg.star for arg in call.args) or any(
        arg.keyword is not None and arg.keyword.value not in TENSOR_BACKWARD_KEYWORDS for arg in call.args
    )
    if not takes_tensor or argument_is_graphless:
        return GUESSED_WRAPPER_BACKWARD if receiver_is_an_object else TENSOR_BACKWARD
    return WRAPPER_BACKWARD if receiver_is_an_object else GUESSED_WRAPPER_BACKWARD


def _is_scale_call(node: cst.BaseExpression) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == SCALING_METHOD
        and len(node.args) == 1
        and node.args[0].keyword is None
    )


def _scale_call(call: cst.Call) -> cst.Call:
    """``scaler.scale(loss)`` of a scaled backward's call ``scaler.scale(loss).backward()``."""
    return cst.ensure_type(cst.ensure_type(call.func, cst.Attribute).value, cst.Call)


def argument(call: cst.Call, position: int | None, keyword: str | None) -> cst.Arg | None:
    """The argument passed for a parameter at ``position`` / named ``keyword``."""
    if keyword is not None:
        named = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == keyword), None)
        if named is not None:
            return named
    if position is None or position < 0:
        return None
    positional = [arg for arg in call.args if arg.keyword is None]
    if any(arg.star for arg in positional[: position + 1]):
        return None
    return positional[position] if position < len(positional) else None


def tensor_expression(api: BackwardApi, call: cst.Call) -> cst.BaseExpression | None:
    """The expression whose graph the call backwards."""
    if api.scaled:
        return _scale_call(call).args[0].value
    if api.tensor_position == RECEIVER:
        return cst.ensure_type(call.func, cst.Attribute).value
    arg = argument(call, api.tensor_position, api.tensor_keyword)
    return None if arg is None else arg.value


def backwarded_expressions(api: BackwardApi, call: cst.Call) -> tuple[cst.BaseExpression, ...]:
    """Each tensor the call backwards: ``autograd.backward([a, b])`` backwards two."""
    tensor = tensor_expression(api, call)
    if tensor is None:
        return ()
    if api.takes_tensor_argument and isinstance(tensor, (cst.List, cst.Tuple)):
        return tuple(element.value for element in tensor.elements)
    return (tensor,)


def _flag(call: cst.Call, name: str, position: int | None) -> Tristate:
    """A boolean argument as passed: True, False, or None when gradfix cannot tell."""
    arg = argument(call, position, name)
    if arg is None:
        if any(a.star for a in call.args):
            return None  # *args / **kwargs may pass it
        return False
    value = arg.value
    if isinstance(value, cst.Name) and value.value in ("True", "False", "None"):
        return value.value == "True"
    return None


def _passes_a_keyword_backward_does_not_take(api: BackwardApi, call: cst.Call) -> bool:
    """A keyword outside ``Tensor.backward``'s (torch 0.3's ``retain_variables``) on a call backwarding
    its receiver: a tensor raises TypeError there, and any other object's method may keep the graph
    or not: what the call does to it is unknown."""
    return api.tensor_position == RECEIVER and any(arg.keyword is not None and arg.keyword.value not in TENSOR_BACKWARD_KEYWORDS for arg in call.args)


def create_graph(api: BackwardApi, call: cst.Call) -> Tristate:
    """Whether the call builds a graph of the gradients (a double backward follows)."""
    if _passes_a_keyword_backward_does_not_take(api, call):
        return None
    return _flag(call, "create_graph", None if api.retain_position is None else api.retain_position + 1)


def retain_graph(api: BackwardApi, call: cst.Call) -> Tristate:
    """Whether the call keeps the graph it walks. Its default is ``create_graph``."""
    if _passes_a_keyword_backward_does_not_take(api, call):
        return None
    if argument(call, api.retain_position, "retain_graph") is not None:
        return _flag(call, "retain_graph", api.retain_position)
    created = create_graph(api, call)
    return True if created else (None if created is None else api.retains_by_default)


def with_tensor(api: BackwardApi, call: cst.Call, tensor: cst.BaseExpression) -> cst.Call:
    """The same call, backwarding ``tensor`` instead (its other arguments kept)."""
    if api.scaled:
        scale = _scale_call(call)
        scale = scale.with_changes(args=[scale.args[0].with_changes(value=tensor)])
        return call.with_changes(func=call.func.with_changes(value=scale))
    if api.tensor_position == RECEIVER:
        return call.with_changes(func=call.func.with_changes(value=as_operand(tensor)))
    old = argument(call, api.tensor_position, api.tensor_keyword)
    return call.with_changes(args=[arg.with_changes(value=tensor) if arg is old else arg for arg in call.args])


def with_retained_graph(api: BackwardApi, call: cst.Call) -> cst.Call:
    """The same call with ``retain_graph=True``."""
    existing = argument(call, api.retain_position, "retain_graph")
    if existing is not None:
        return call.with_changes(args=[arg.with_changes(value=cst.Name("True")) if arg is existing else arg for arg in call.args])
    args = list(call.args)
    added = cst.Arg(
        value=cst.Name("True"),
        keyword=cst.Name("retain_graph"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    if len(args) > 1 and all(
        isinstance(arg.comma, cst.Comma) and isinstance(arg.comma.whitespace_after, cst.ParenthesizedWhitespace) for arg in args[-2:]
    ):
        # one argument a line, with a trailing comma: the new one goes on a line of its own
        args[-1], added = args[-1].with_changes(comma=args[-2].comma), added.with_changes(comma=args[-1].comma)
    elif args:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, added])


@dataclass(eq=False)
class BackwardSite:
    """A call that backwards a graph, in any of the shapes of ``frameworks``' backward rows."""

    call: cst.Call
    statement: cst.BaseStatement  # the statement line the call is in
    api: BackwardApi
    tensors: tuple[cst.BaseExpression, ...]  # the backwarded tensor expressions
    value: Value  # what they hold, joined
    retain_graph: Tristate
    create_graph: Tristate
    loops: tuple[Loop, ...]  # innermost first
    scope: Scope
    # What ``torch.autograd.grad`` is asked for the gradients of (its ``inputs``): it walks the
    # graph down to them only, not the graph that built them (MAML's fast weights).
    stops_at: Value = NOTHING
    # False where the walk read the call once but it may run another number of times when its
    # statement runs: in a comprehension (``[l.backward(retain_graph=True) for l in losses]``: once
    # for each item, none or many, each through the graph built before it), or in an operand that
    # may not be evaluated (``warm and loss.backward()``, ``a if flag else loss.backward()``). No
    # fact of the file says how many times it runs there.
    runs_as_walked: bool = True

    @property
    def tensor(self) -> cst.BaseExpression | None:
        """The one backwarded tensor expression, when there is exactly one."""
        return self.tensors[0] if len(self.tensors) == 1 else None

    @property
    def is_whole_statement(self) -> bool:
        """True for a statement line that is just this call."""
        return (
            isinstance(self.statement, cst.SimpleStatementLine)
            and len(self.statement.body) == 1
            and isinstance(self.statement.body[0], cst.Expr)
            and self.statement.body[0].value is self.call
        )

    def with_tensor(self, tensor: cst.BaseExpression) -> cst.Call:
        return with_tensor(self.api, self.call, tensor)
