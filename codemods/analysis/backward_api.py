"""Every way a program backwards a graph, in one table.

A rule never matches ``.backward`` by name: it asks a ``BackwardSite`` which tensors a call
backwards, whether it keeps the graph (``retain_graph``: true, false, or an expression gradfix cannot
evaluate) and how to write the same call for another tensor. The calls are:

* ``loss.backward(...)``, and ``scaler.scale(loss).backward(...)`` (AMP's ``GradScaler``);
* ``torch.autograd.backward(tensors, ...)`` and ``torch.autograd.grad(outputs, inputs, ...)``,
  positional or keyword;
* framework calls whose *argument* is the tensor: Accelerate's ``accelerator.backward(loss)``,
  Lightning Fabric's ``fabric.backward(loss)``, a LightningModule's ``self.manual_backward(loss)``,
  DeepSpeed's ``engine.backward(loss)`` and optimizer wrappers' ``optimizer.backward(loss)``;
* functions and methods of the checked code whose body backwards one of their parameters
  (``BackwardApi.of_function``).

``x.backward(arg)`` is a framework call unless ``x`` itself carries a graph: a tensor's own first
argument is a gradient, which training code passes only for non-scalar outputs it holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import libcst as cst

from .syntax import as_operand

RECEIVER = -1  # the tensor is the object the method is called on

# retain_graph as gradfix can read it: True, False, or None for an expression it cannot evaluate.
Tristate = Optional[bool]


@dataclass(frozen=True)
class BackwardApi:
    """One row of the table: a call shape that backwards a graph."""

    name: str  # as users write it, for messages
    tensor_position: int  # where the backwarded tensor is among the arguments, or RECEIVER
    tensor_keyword: str | None = None
    retain_position: int | None = None  # positional place of retain_graph, if it has one
    accumulates: bool = True  # writes into .grad (autograd.grad returns the gradients instead)
    retains_by_default: bool = False  # DeepSpeed's and Lightning's own defaults are False too
    scaled: bool = False  # ``scaler.scale(loss).backward()``: the tensor is the argument of scale()
    # Does more than autograd per call (DeepSpeed: loss scaling, reduction at the accumulation
    # boundary, ZeRO hooks): two calls that run are not one call on the sum.
    keeps_books: bool = False

    @property
    def takes_tensor_argument(self) -> bool:
        return self.tensor_position != RECEIVER

    @classmethod
    def of_function(cls, name: str, position: int, keyword: str) -> "BackwardApi":
        """A function of the checked code that backwards its parameter ``keyword``."""
        return cls(f"{name}()", position, keyword)


TENSOR_BACKWARD = BackwardApi("Tensor.backward", RECEIVER, retain_position=1)
SCALED_BACKWARD = BackwardApi("GradScaler.scale(...).backward", RECEIVER, retain_position=1, scaled=True)
AUTOGRAD_BACKWARD = BackwardApi("torch.autograd.backward", 0, "tensors", retain_position=2)
AUTOGRAD_GRAD = BackwardApi("torch.autograd.grad", 0, "outputs", retain_position=3, accumulates=False)
ACCELERATE_BACKWARD = BackwardApi("Accelerator.backward", 0, "loss")
FABRIC_BACKWARD = BackwardApi("Fabric.backward", 0, "tensor")
LIGHTNING_MANUAL_BACKWARD = BackwardApi("LightningModule.manual_backward", 0, "loss")
DEEPSPEED_BACKWARD = BackwardApi("DeepSpeedEngine.backward", 0, "loss", retain_position=1, keeps_books=True)
WRAPPER_BACKWARD = BackwardApi("<wrapper>.backward", 0, "loss")  # optimizer.backward(loss) and the like

FUNCTION_APIS = {
    "torch.autograd.backward": AUTOGRAD_BACKWARD,
    "torch.autograd.grad": AUTOGRAD_GRAD,
}
# What a framework object's ``backward(tensor)`` is, by the class it was built from.
FRAMEWORK_APIS = {
    "accelerator": ACCELERATE_BACKWARD,
    "fabric": FABRIC_BACKWARD,
    "deepspeed": DEEPSPEED_BACKWARD,
}
_BACKWARD_CALL = re.compile(rb"backward\s*\(")


def may_backward(source: bytes) -> bool:
    """Whether a file's text could backward anything in a way this table knows: every row's method
    or function is called as ``…backward(`` or lives in ``autograd``; a trainer backwards what its
    hooks return. ("backward" alone would also take every "backward compatibility" of a
    docstring; plain substring tests first, as one regular expression of alternatives is slow.)"""
    if b"autograd" in source or b"training_step" in source or b"compute_loss" in source:
        return True
    return b"backward" in source and _BACKWARD_CALL.search(source) is not None
_TENSOR_BACKWARD_KEYWORDS = {"gradient", "retain_graph", "create_graph", "inputs"}


def method_api(
    method: str,
    call: cst.Call,
    receiver_framework: str | None,
    receiver_has_graph: bool,
    in_lightning_module: bool,
    receiver_is_module_import: bool,
) -> BackwardApi | None:
    """The row for ``receiver.method(...)``, or None when the call backwards nothing (a compiled
    extension's ``kernel.backward(grad, …)`` is a plain function of an imported module)."""
    if method == "manual_backward" and call.args:
        return LIGHTNING_MANUAL_BACKWARD if in_lightning_module or receiver_framework else WRAPPER_BACKWARD
    if method != "backward" or receiver_is_module_import and not receiver_framework:
        return None
    if receiver_framework in FRAMEWORK_APIS:
        return FRAMEWORK_APIS[receiver_framework]
    receiver = call.func.value
    if _is_scale_call(receiver):
        return SCALED_BACKWARD
    if receiver_has_graph:
        return TENSOR_BACKWARD
    takes_tensor = any(arg.keyword is None and not arg.star for arg in call.args) or any(
        arg.keyword is not None and arg.keyword.value not in _TENSOR_BACKWARD_KEYWORDS for arg in call.args
    )
    return WRAPPER_BACKWARD if takes_tensor else TENSOR_BACKWARD


def _is_scale_call(node: cst.BaseExpression) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "scale"
        and len(node.args) == 1
        and node.args[0].keyword is None
    )


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
        return call.func.value.args[0].value
    if api.tensor_position == RECEIVER:
        return call.func.value
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


def create_graph(api: BackwardApi, call: cst.Call) -> Tristate:
    """Whether the call builds a graph of the gradients (a double backward follows)."""
    return _flag(call, "create_graph", None if api.retain_position is None else api.retain_position + 1)


def retain_graph(api: BackwardApi, call: cst.Call) -> Tristate:
    """Whether the call keeps the graph it walks. Its default is ``create_graph``."""
    if argument(call, api.retain_position, "retain_graph") is not None:
        return _flag(call, "retain_graph", api.retain_position)
    created = create_graph(api, call)
    return True if created else (None if created is None else api.retains_by_default)


def with_tensor(api: BackwardApi, call: cst.Call, tensor: cst.BaseExpression) -> cst.Call:
    """The same call, backwarding ``tensor`` instead (its other arguments kept)."""
    if api.scaled:
        scale = call.func.value
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
        return call.with_changes(
            args=[arg.with_changes(value=cst.Name("True")) if arg is existing else arg for arg in call.args]
        )
    args = list(call.args)
    if args:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(cst.Arg(value=cst.Name("True"), keyword=cst.Name("retain_graph"), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
    )))
    return call.with_changes(args=args)

