"""What a statement does to gradients and parameters: optimizer updates, zeroing, clipping, reading
``.grad``, backwarding. Fixes consult it so that no edit ever removes or moves an optimizer update.

Optimizers are found by what they do, not by their names: ``x.step()`` and ``x.zero_grad()`` on any
object (``frameworks.GRADIENT_METHODS``), ``scaler.step(optimizer)`` and ``scaler.update()``, and
any method of an object the file binds to an optimizer.
"""

from __future__ import annotations

from typing import Callable, Collection, Protocol, Sequence

import libcst as cst

from ..frameworks import CLIPPING_FUNCTIONS, GRADIENT_METHODS, GradientEffect
from .syntax import dotted_name, expression_key, is_grad, is_name, method_called
from .tree import N, find_nodes


class Findall(Protocol):
    """``SyntaxTree.findall``: the nodes of a type under a root that ``where`` accepts."""

    def __call__(self, root: cst.CSTNode, node_type: type[N], where: Callable[[N], object] | None = None, /) -> Sequence[N]: ...


def gradient_effects(
    node: cst.CSTNode, findall: Findall, optimizers: Collection[str], holds_a_backward: Callable[[cst.CSTNode], bool]
) -> GradientEffect:
    """What ``node`` does to gradients and parameters; ``FileAnalysis.gradient_effects`` asks it
    with the analysed file's facts: ``findall``, its ``SyntaxTree.findall`` (answers without walking
    ``node`` again), ``optimizers``, the dotted names bound to optimizers, ``holds_a_backward``,
    whether a backward site is in a node."""
    effects = GradientEffect(0)
    for call in findall(node, cst.Call, method_called):
        effect = _method_effect(call, optimizers)
        if effect is not None:
            effects |= effect
    for call in findall(node, cst.Call, lambda call: is_name(call.func)):
        if cst.ensure_type(call.func, cst.Name).value in CLIPPING_FUNCTIONS:
            effects |= GradientEffect.CLIP
    if findall(node, cst.Attribute, is_grad):
        effects |= GradientEffect.READ_GRAD
        written: list[cst.BaseExpression] = [*(t.target for t in findall(node, cst.AssignTarget)), *(a.target for a in findall(node, cst.AugAssign))]
        written += [d.target for d in findall(node, cst.Del)]
        in_place = (cst.ensure_type(call.func, cst.Attribute) for call in findall(node, cst.Call, method_called))
        written += [method.value for method in in_place if method.attr.value.endswith("_")]
        if any(_a_gradient(target) for target in written):
            effects |= GradientEffect.WRITE_GRAD
        if _updates_by_hand(node, findall):
            effects |= GradientEffect.STEP
    if holds_a_backward(node):
        effects |= GradientEffect.BACKWARD
    return effects


def steps_for_certain(node: cst.CSTNode, findall: Findall, optimizers: Collection[str]) -> bool:
    """Whether ``node`` steps one of ``optimizers`` (the dotted names bound to optimizers): a step
    (``_method_effect``) called on one (``opt.step(closure)``, ``opt.first_step()``) or handed one
    (``scaler.step(opt)``). A step of anything else (a scheduler's ``step()``, an object gradfix
    does not know) may change no parameter."""
    for call in findall(node, cst.Call, method_called):
        if _method_effect(call, optimizers) is GradientEffect.STEP:
            receiver = cst.ensure_type(call.func, cst.Attribute).value
            handed = call.args[0].value if call.args and call.args[0].keyword is None else None
            if dotted_name(receiver) in optimizers or handed is not None and dotted_name(handed) in optimizers:
                return True
    return False


def _method_effect(call: cst.Call, optimizers: Collection[str]) -> GradientEffect | None:
    """What the method call ``call`` does to gradients and parameters, by its name
    (``GRADIENT_METHODS``); any other method of one of ``optimizers`` steps it (``first_step()``,
    ``second_step()``, a wrapper's own update methods)."""
    func = cst.ensure_type(call.func, cst.Attribute)
    method = func.attr.value
    effect = None if _is_dict_update(call, method) else GRADIENT_METHODS.get(method)
    if effect is None and (receiver := dotted_name(func.value)) is not None and receiver in optimizers:
        return GradientEffect.STEP
    return effect


def stepped_optimizers(node: cst.CSTNode) -> set[str]:
    """The optimizers ``node`` steps, as written: ``opt_d`` for ``opt_d.step()`` and for
    ``scaler.step(opt_d)``."""
    stepped = set()
    for call in find_nodes(node, cst.Call, lambda call: GRADIENT_METHODS.get(method_called(call) or "") is GradientEffect.STEP):
        receiver = call.args[0].value if call.args and call.args[0].keyword is None else cst.ensure_type(call.func, cst.Attribute).value
        stepped.add(expression_key(receiver))
    return stepped


def _is_dict_update(call: cst.Call, method: str) -> bool:
    """``metrics.update({...})`` / ``d.update(k=v)`` is a dict's, not a GradScaler's."""
    return GRADIENT_METHODS.get(method) is GradientEffect.SCALER_UPDATE and bool(call.args)


def _updates_by_hand(node: cst.CSTNode, findall: Findall) -> bool:
    """Whether ``node`` updates a tensor from its own gradient, as an optimizer's step does:
    ``p -= lr * p.grad``, ``p.data.add_(p.grad, alpha=-lr)``, ``w.sub_(lr * w.grad)``."""
    updates: list[tuple[cst.BaseExpression, cst.CSTNode]] = [(a.target, a.value) for a in findall(node, cst.AugAssign)]
    for call in findall(node, cst.Call, method_called):
        method = cst.ensure_type(call.func, cst.Attribute)
        if method.attr.value.endswith("_") and not method.attr.value.startswith("_"):
            updates.append((method.value, call))
    for written, value in updates:
        while type(written) is cst.Attribute and written.attr.value == "data":
            written = written.value
        name = dotted_name(written)
        if name is not None and any(dotted_name(read.value) == name for read in findall(value, cst.Attribute, is_grad)):
            return True
    return False


def _a_gradient(node: cst.BaseExpression) -> bool:
    """``p.grad``, or its ``.data``: what a write to changes the gradient itself."""
    while type(node) is cst.Attribute and node.attr.value == "data":
        node = node.value
    return type(node) is cst.Attribute and is_grad(node)
