"""Modules whose parameters the program changes itself, not through an optimizer: an update by
hand (``p -= lr * p.grad``), an exponential moving average of another model's parameters
(``for t, s in zip(teacher.parameters(), student.parameters()): t.mul_(0.9).add_(0.1 * s)``, or
``t.data = ...``), a state loaded into it inside a loop (``target.load_state_dict(...)``, a target
network's sync). What such a module computes changes from step to step: a value built from it
once is no constant of training (``FileAnalysis.trained_modules``)."""

from __future__ import annotations

import libcst as cst

from ..torch_api import PARAMETER_METHODS
from .syntax import changes_in_place, dotted_name, is_name, method_called, method_receiver
from .tree import SyntaxTree


def written_in_place(tree: SyntaxTree, body: cst.CSTNode) -> set[str]:
    """The names ``body`` writes into in place: ``p += ...``, ``p.mul_(...)``, ``p.data = ...``."""
    written = {dotted_name(a.target) for a in tree.findall(body, cst.AugAssign)}
    written |= {dotted_name(method_receiver(c)) for c in tree.findall(body, cst.Call) if changes_in_place(c)}
    written |= {name for a in tree.findall(body, cst.Assign) for t in a.targets if (name := dotted_name(t.target)) and name.endswith(".data")}
    return {name.removesuffix(".data") for name in written if name is not None}


def modules_changed_by_a_loop(tree: SyntaxTree, node: cst.For) -> set[str]:
    """The modules whose parameters ``node`` iterates and writes into in place: ``for p in
    model.parameters()`` and each ``X.parameters()`` (or ``named_parameters()``) a ``zip`` pairs
    with a target of the loop."""
    pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]]
    if method_called(node.iter) in PARAMETER_METHODS:
        pairs = [(node.iter, node.target)]
    elif type(node.iter) is cst.Call and is_name(node.iter.func, "zip") and isinstance(node.target, (cst.Tuple, cst.List)):
        pairs = [(arg.value, element.value) for arg, element in zip(node.iter.args, node.target.elements)]
    else:
        return set()
    written = written_in_place(tree, node.body)
    changed = set()
    for iterated, target in pairs:
        if isinstance(target, cst.Tuple) and target.elements:  # (``for name, p in model.named_parameters()``)
            target = target.elements[-1].value
        owner = dotted_name(method_receiver(iterated)) if method_called(iterated) in PARAMETER_METHODS else None
        if owner is not None and dotted_name(target) in written:
            changed.add(owner)
    return changed


def loaded_in_a_loop(tree: SyntaxTree, call: cst.Call) -> str | None:
    """The module ``call`` loads a state into (``target.load_state_dict(...)``) inside a loop of
    its function; None for any other call."""
    if method_called(call) != "load_state_dict":
        return None
    node = tree.parent(call)
    while node is not None and not isinstance(node, (cst.FunctionDef, cst.Module)):
        if isinstance(node, (cst.For, cst.While)):
            return dotted_name(method_receiver(call))
        node = tree.parent(node)
    return None
