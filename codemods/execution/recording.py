"""What a run's child records of the script's graphs and gradients, for comparing two programs:
the graphs backward calls walk (which earlier call freed the graph a failing one needs, and the
leaves each call reaches, labelled as another program's run labels them), the values that held the
freed graph when the run failed, the user's lines anomaly mode traced, the gradients at every
optimizer step (or after every backward, without one) and the final parameters.

Apart from ``script_child.py``, which runs the script and calls these from its wrappers: this is
what is read of torch's graphs and tensors, not how the script runs. All of it runs in the child.
"""

from __future__ import annotations

import collections
import inspect
import os
import re
import sys
import traceback
import types
from functools import lru_cache
from typing import Any

from .runner import Frame, HeldGraph, RunResult, _in_user_code

RECENT_WALKS = 16  # backward calls kept to tell which one freed the graph a later call finds freed
TRACED_WALKS = 100  # backward calls whose leaves are noted: what a rewrite loses, it loses at once


class _GraphWalks:
    """In a run's child, the graphs that backward and ``autograd.grad`` calls walk: the last
    ``recent`` calls that freed theirs are kept (root nodes, and the user's frames that made the
    call) to tell which one freed the graph a later call finds freed; the leaves the first
    ``TRACED_WALKS`` calls reach are noted in the result, by labels another program shares."""

    def __init__(self, torch: Any, result: RunResult, recent: int) -> None:
        self.torch, self.result = torch, result
        self.recent: collections.deque = collections.deque(maxlen=recent)
        self.optimizers: list[Any] = []  # every optimizer built, in order
        self.traced = 0
        self.freed: set = set()  # the nodes of the failing call's graph an earlier call freed
        self.reading: set = set()  # the nodes of the failing call's graph that take only freed ones' outputs
        self.freeing_reading: set = set()  # the nodes of a freeing call's graph that take shared ones' outputs

    def register_optimizers(self) -> None:
        """Note every optimizer the script builds: its parameters are labelled by its rank."""
        optimizers, original_init = self.optimizers, self.torch.optim.Optimizer.__init__

        def init(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            original_init(optimizer, *args, **kwargs)
            optimizers.append(optimizer)

        self.torch.optim.Optimizer.__init__ = init

    def rank(self, optimizer: Any) -> int:
        """The optimizer's rank among those built so far; -1 for one built before the script ran."""
        return next((rank for rank, built in enumerate(self.optimizers) if built is optimizer), -1)

    def walked(self, roots: tuple, frames: list[Frame], frees: bool) -> None:
        if frees and self.recent.maxlen:
            self.recent.append((roots, frames))
        if self.traced < TRACED_WALKS:
            self.traced += 1
            self._reached(_graph_nodes(roots), backward_site(frames))

    def freeing(self, roots: tuple, frames: list[Frame]) -> list[Frame]:
        """The frames of the latest call that freed part of the graph of ``roots`` (a call that
        failed, from ``frames``): the one whose graph shares a node with it, leaves aside (every
        graph of a model reaches its parameters). The nodes it shares with every such earlier call
        are ``freed``; the nodes of theirs that read those are ``freeing_reading``."""
        nodes = _graph_nodes(roots)
        self._reached(nodes, backward_site(frames))
        inner = {node for node in nodes if not hasattr(node, "variable")}
        freeing: list[Frame] = []
        for earlier_roots, earlier_frames in reversed(self.recent):
            earlier = _graph_nodes(earlier_roots)
            shared = inner & earlier
            if shared:
                self.freed |= shared  # earlier calls may each have freed a part
                freeing = freeing or earlier_frames
                self.freeing_reading |= {node for node in earlier - inner if any(following in shared for following, _ in node.next_functions)}
        if not freeing:
            self.freed = inner
            return []
        # Where the failing graph reads only freed values (or leaves): cutting what such a node
        # computes cuts the freed graph and nothing still whole.
        self.reading = {
            node
            for node in inner - self.freed
            if all(following is None or following in self.freed or hasattr(following, "variable") for following, _ in node.next_functions)
            and any(following in self.freed for following, _ in node.next_functions)
        }
        return freeing

    def _reached(self, nodes: set, site: str) -> None:
        leaves = [node.variable for node in nodes if hasattr(node, "variable")]
        if not leaves:
            return
        labels, names = self._labels()
        reached_here = self.result.reached_by_backward.setdefault(site, set())
        for leaf in leaves:
            if id(leaf) in labels:
                self.result.reached_leaves.add(labels[id(leaf)])
                reached_here.add(labels[id(leaf)])
                if id(leaf) in names:
                    self.result.leaf_names[labels[id(leaf)]] = names[id(leaf)]

    def _labels(self) -> tuple[dict[int, str], dict[int, str]]:
        """Labels of the leaves a run can name: an optimizer's parameters by the optimizer's rank
        and their place in it, other leaves by the global names that reach them; and those names,
        which the user knows."""
        labels: dict[int, str] = {}
        for rank, optimizer in enumerate(self.optimizers):
            for group_index, group in enumerate(optimizer.param_groups):
                for index, parameter in enumerate(group["params"]):
                    labels.setdefault(id(parameter), f"optimizer {rank} parameter {group_index}.{index}")
        main = sys.modules.get("__main__")
        names = {id(tensor): name for name, tensor in _named_leaves(vars(main) if main is not None else {})}
        for leaf, name in names.items():
            labels.setdefault(leaf, name)
        return labels, names


def backward_site(frames: list[Frame]) -> str:
    """A backward call as another program that holds the same code names it: the innermost line
    of the user's code that made it (a rewrite moves lines, not what they say), with its module."""
    if not frames:
        return "code gradfix did not see"
    innermost = frames[-1]
    return f"`{innermost.code}`" + (f" in {os.path.basename(innermost.path)}" if innermost.path else "")


def _walk_of(function: Any, args: tuple, kwargs: dict) -> tuple[tuple, bool]:
    """The root nodes of the graph a call of ``function`` (``torch.autograd.backward`` or
    ``grad``) walks, and whether it frees that graph."""
    import torch

    try:
        arguments = _signature(function).bind(*args, **kwargs).arguments
    except TypeError:
        return (), False  # the call itself says what is wrong
    outputs = arguments.get("tensors", arguments.get("outputs"))
    outputs = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs or ())
    retain_graph = arguments.get("retain_graph")
    frees = not (arguments.get("create_graph", False) if retain_graph is None else retain_graph)
    return tuple(t.grad_fn for t in outputs if isinstance(t, torch.Tensor) and t.grad_fn is not None), frees


@lru_cache(maxsize=None)
def _signature(function: Any) -> inspect.Signature:
    return inspect.signature(function)


def _graph_nodes(roots: tuple) -> set:
    """The autograd nodes reachable from ``roots``; a freed graph keeps its structure."""
    seen: set = set()
    pending = list(roots)
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        pending.extend(following for following, _ in node.next_functions if following is not None)
    return seen


HELD_GRAPHS_KEPT = 200  # values noted that held the freed graph; more say nothing new


def _held_graphs(tb: Any, script: str, freed: set) -> tuple[list[HeldGraph], set]:
    """The values the user's frames of the failing stack reach (their variables, the attributes of
    their objects and modules, submodules included) that hold part of the ``freed`` nodes, and the
    nodes that made the tensors among them."""
    import torch

    graphs = _GraphReach(freed)
    held: list[HeldGraph] = []
    roots: set = set()
    for frame, _ in traceback.walk_tb(tb):
        code = frame.f_code
        if not _in_user_code(code.co_filename, script):
            continue
        path = "" if code.co_filename == script else code.co_filename
        function_line = 0 if code.co_name == "<module>" else code.co_firstlineno
        for name, value in list(frame.f_locals.items()):
            if name.startswith("__") or isinstance(value, (types.ModuleType, type)) or callable(value) and not isinstance(value, torch.nn.Module):
                continue
            for expression, owner, reached in _attributes_of(name, value, torch):
                structure = graphs.structure(reached, torch)
                if structure is not None:
                    only_freed = isinstance(reached, torch.Tensor) and graphs.only_freed(reached)
                    held.append(HeldGraph(path, function_line, expression, *structure, owner=owner, only_freed=only_freed))
                    if isinstance(reached, torch.Tensor):
                        roots.add(reached.grad_fn)
                    if len(held) >= HELD_GRAPHS_KEPT:
                        return held, roots
    return held, roots


def _attributes_of(name: str, value: Any, torch: Any) -> list[tuple[str, str, Any]]:
    """``value`` as ``name``, and what code reaches from it: the attributes and buffers of a module
    and of its submodules, the attributes of an object of the user's own class."""
    reached = [(name, "", value)]
    if isinstance(value, torch.nn.Module):
        for module_path, module in value.named_modules():
            expression = name + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in module_path.split(".") if part)
            if module_path and not all(part.isdigit() or part.isidentifier() for part in module_path.split(".")):
                continue
            owner = type(module).__name__
            attributes = {**module._buffers, **{k: v for k, v in vars(module).items() if not k.startswith("__") and k not in _MODULE_INTERNALS}}
            reached += [(f"{expression}.{attribute}", owner, item) for attribute, item in attributes.items() if item is not None]
    elif hasattr(value, "__dict__") and not isinstance(value, torch.Tensor) and type(value).__module__ == "__main__":
        reached += [(f"{name}.{attribute}", type(value).__name__, item) for attribute, item in vars(value).items() if not attribute.startswith("__")]
    return reached


_MODULE_INTERNALS = frozenset({"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"})


class _GraphReach:
    """Whether values hold part of a set of graph nodes, each node explored once."""

    def __init__(self, freed: set) -> None:
        self.freed = freed
        self.clean: set = set()  # nodes from which no freed node is reachable

    def holds(self, tensor: Any) -> bool:
        pending, seen = [tensor.grad_fn], set()
        while pending:
            node = pending.pop()
            if node is None or node in seen or node in self.clean:
                continue
            if node in self.freed:
                return True
            seen.add(node)
            pending.extend(following for following, _ in node.next_functions)
        self.clean |= seen
        return False

    def only_freed(self, tensor: Any) -> bool:
        """Whether every node of ``tensor``'s graph but its leaves was freed."""
        return all(node in self.freed or hasattr(node, "variable") for node in _graph_nodes((tensor.grad_fn,)))

    def structure(self, value: Any, torch: Any) -> tuple[str, bool] | None:
        """How ``value`` holds freed nodes, and whether all its parts are tensors; None if it does not."""
        if isinstance(value, torch.Tensor):
            return ("tensor", True) if value.grad_fn is not None and self.holds(value) else None
        if isinstance(value, (tuple, list, dict)):
            parts = list(value.values()) if isinstance(value, dict) else list(value)
            if not any(self._holds_within(part, torch) for part in parts):
                return None
            kind = "namedtuple" if hasattr(type(value), "_fields") else type(value).__name__ if type(value) in (tuple, list, dict) else ""
            return (kind, all(isinstance(part, torch.Tensor) for part in parts)) if kind else None
        if callable(getattr(value, "detach", None)) and hasattr(value, "__dict__"):
            if any(self._holds_within(item, torch) for item in vars(value).values()):
                return ("detachable", False)
        return None

    def _holds_within(self, value: Any, torch: Any, depth: int = 3) -> bool:
        if isinstance(value, torch.Tensor):
            return value.grad_fn is not None and self.holds(value)
        if depth and isinstance(value, (tuple, list)):
            return any(self._holds_within(part, torch, depth - 1) for part in value)
        if depth and isinstance(value, dict):
            return any(self._holds_within(part, torch, depth - 1) for part in value.values())
        return False


def _live_graph_nodes(torch) -> int:
    """Autograd graph nodes still reachable from live tensors: the memory a program keeps from
    step to step (a running ``total += loss`` holds one tensor but a graph that grows)."""
    import gc

    pending = [o.grad_fn for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    seen = set()
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        pending.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


def _forward_frames(reports: list[str], script: str) -> list[Frame]:
    """The lines of the user's code (the script, the modules and packages beside it) in anomaly
    mode's "Traceback of forward call that caused the error"."""
    frames = []
    for report in reports:
        if "forward call that caused the error" not in report:
            continue
        lines = report.splitlines()
        for index, line in enumerate(lines):
            found = _FRAME_LINE.match(line.strip())
            if found and _in_user_code(found["file"], script):
                code = lines[index + 1].strip() if index + 1 < len(lines) else ""
                frames.append(Frame(int(found["line"]), code, "" if found["file"] == script else found["file"]))
    return frames


def _traced_forward_frames(freed: set, script: str) -> list[Frame]:
    """The user's lines in the forward trace anomaly mode keeps on the freed node that backward
    meets first (the latest made of those that saved tensors)."""
    saving = [node for node in freed if any(name.startswith("_saved_") for name in dir(node))]
    return _traced_frames(max(saving, key=lambda node: node._sequence_nr()), script) if saving else []


def _reading_frames(reading: set, script: str, innermost: bool = False) -> list[Frame]:
    """The user's lines that made one graph read another: the forward trace of each node of
    ``reading`` (of the failing graph, its inputs all freed; or of a freeing one, reading what the
    failing graph shares), or only its innermost line."""
    frames: list[Frame] = []
    for node in sorted(reading, key=lambda node: -node._sequence_nr()):
        traced = _traced_frames(node, script)
        frames += [frame for frame in (traced[-1:] if innermost else traced) if frame not in frames]
    return frames


def _traced_frames(node: Any, script: str) -> list[Frame]:
    """The user's lines in the forward trace anomaly mode keeps on ``node``."""
    trace = node.metadata.get("traceback_", [])
    frames = []
    for entry in trace:
        found = _FRAME_LINE.search(entry)
        if found and _in_user_code(found["file"], script):
            code = entry.splitlines()[1].strip() if len(entry.splitlines()) > 1 else ""
            frames.append(Frame(int(found["line"]), code, "" if found["file"] == script else found["file"]))
    return frames


_FRAME_LINE = re.compile(r'File "(?P<file>[^"]+\.py)", line (?P<line>\d+)')


def _optimizer_gradients(optimizer, rank: int) -> list[tuple[str, list[float]]]:
    """The gradients an optimizer steps with, labelled as ``_GraphWalks`` labels its parameters."""
    step = []
    for group_index, group in enumerate(optimizer.param_groups):
        for index, parameter in enumerate(group["params"]):
            grad = parameter.grad
            label = f"optimizer {rank} parameter {group_index}.{index}"
            step.append((label, [] if grad is None else grad.detach().flatten().tolist()))
    return step


def _final_state(namespace: dict) -> list[tuple[str, list[float]]]:
    """Values and gradients of the parameters reachable from the script's globals, and the buffers
    of its modules (``module_buffers``)."""
    state = []
    for label, tensor in _named_leaves(namespace):
        state.append((f"{label} value", tensor.detach().flatten().tolist()))
        if tensor.grad is not None:
            state.append((f"{label} grad", tensor.grad.detach().flatten().tolist()))
    return state + module_buffers(namespace)


def module_buffers(namespace: dict) -> list[tuple[str, list[float]]]:
    """The buffers of the modules the script's globals reach (``_named_modules``), labelled: a
    forward run once more than the original updates a batch norm's running statistics, the same
    gradients but another model."""
    return [
        (f"{label}.{name} buffer", buffer.detach().flatten().tolist())
        for label, module in _named_modules(namespace)
        for name, buffer in module.named_buffers()
    ]


def _named_modules(namespace: dict) -> list[tuple[str, Any]]:
    """The modules the script's globals hold, and those held by an attribute of a global object
    (``model.netG`` of a training wrapper), each labelled by the name that reaches it, once."""
    import torch

    found: dict[int, tuple[str, Any]] = {}
    for name, value in sorted(namespace.items(), key=lambda item: item[0]):
        try:
            if isinstance(value, torch.nn.Module):
                found.setdefault(id(value), (name, value))
            elif not isinstance(value, (type, types.ModuleType, types.FunctionType)) and hasattr(value, "__dict__"):
                for attribute, held in sorted(dict(vars(value)).items(), key=lambda item: item[0]):
                    if isinstance(held, torch.nn.Module):
                        found.setdefault(id(held), (f"{name}.{attribute}", held))
        except Exception:  # (an object of the script's whose ``__getattribute__`` refuses: the run is not gradfix's to break)
            continue
    return list(found.values())


def _record_named_gradients(result: RunResult, first_versions: dict[str, int]) -> None:
    """The gradients the named leaves hold after a backward; a leaf whose version moved since it
    was first seen was updated in place (by hand or by an optimizer)."""
    main = sys.modules.get("__main__")  # runpy's module of the running script
    for label, tensor in _named_leaves(vars(main) if main is not None else {}):
        version = first_versions.setdefault(label, tensor._version)
        if tensor._version != version:
            result.updated_leaves.add(label)
        if tensor.grad is not None:
            result.backward_gradients.append((f"backward {result.backward_calls + 1}: {label}", tensor.grad.detach().flatten().tolist()))


def _named_leaves(namespace: dict) -> list[tuple[str, Any]]:
    """The tensors that take gradients named by ``namespace``: its leaf tensors, and its modules'
    parameters, each labelled by the name that reaches it."""
    import torch

    leaves = []
    for name, value in sorted(namespace.items(), key=lambda item: item[0]):
        if isinstance(value, torch.nn.Module):
            leaves += [(f"{name}.{p}", t) for p, t in value.named_parameters()]
        elif isinstance(value, torch.Tensor) and value.requires_grad and value.is_leaf:
            leaves.append((name, value))
    return leaves
