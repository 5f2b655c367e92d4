"""What a module exports of its ``nn.Module`` classes to the files of the project that import them
(``summaries.ExportedModuleClass``): a file that builds ``Discriminator()`` from ``models`` learns
what the analysis of ``models`` proved of calling it, as it knows its own classes.

A class is exported only where everything that decides what calling an instance runs was read: each
base is ``torch.nn.Module`` or a class of the module exported so too (a base of another module or
package, or a metaclass, leaves it unread), its ``forward`` is defined in it, undecorated, once,
and no class of that chain defines ``__call__``. The facts are read from the module's own analysis
(with no project of its own): the forward's walk (what each of its returns holds), its summary
(``returns_saved``) and the closed world's constructs on the code building and calling it runs.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from ..summaries import ExportedItem, ExportedModuleClass, ExportedSummary
from ..torch_api import CREATION_FUNCTIONS, NON_DIFFERENTIABLE
from .syntax import dotted_name
from .values import TENSOR, Value, sharing_groups

# The file's ``FileAnalysis``, which asks for these exports: named, not imported (no import loop runs
# through the analysis, not even a type's), as ``closed_world`` names it.
FileAnalysis = Any


def module_class_exports(analysis: FileAnalysis) -> dict[str, ExportedSummary]:
    """The module's ``nn.Module`` classes whose calling it read, by name, each as a summary with its
    ``module_class`` facts."""
    names = analysis.names
    classes: dict[str, list[cst.ClassDef]] = {}
    for class_def in analysis.module.body:  # (top-level classes only: another module imports those)
        if isinstance(class_def, cst.ClassDef):
            classes.setdefault(class_def.name.value, []).append(class_def)
    # (a class that keeps a module bound elsewhere trains with whatever else holds it: not read)
    read = {
        name: defs[0]
        for name, defs in classes.items()
        if len(defs) == 1 and name in names.module_classes and name not in names.lightning_classes and name not in names.sharing_classes
    }
    exported: dict[str, ExportedSummary] = {}
    for name, class_def in read.items():
        chain = _read_chain(name, read, analysis)
        forward = _own_method(class_def, "forward")
        if chain is None or forward is None or forward.decorators or any(_own_method(c, "__call__") for c in chain):
            continue
        dataflow = analysis._dataflow
        summary = dataflow.summaries.get((name, "forward"))
        returns = dataflow.returns.get(forward, ())
        if summary is None:
            continue
        graphs = [value for value in returns if value.graph]
        carried = _carried(forward, name, analysis)
        facts = ExportedModuleClass(
            returns_parameters=bool(returns) and all(value.graph and not value.possible for value in returns),
            returns_unread=summary.returned.unread or any(value.unread or value.possible for value in graphs),
            returns_inputs=carried is not None and set(summary.parameters) <= carried,
            returns_saved=dataflow.returns_saved((name, "forward")),
            reads_modelled_code=_reads_modelled_code(chain, read, analysis),
            returned_items=_items(dataflow.returned_items.get(forward)),
        )
        exported[name] = ExportedSummary(name, summary.parameters, (), None, facts.returns_saved, facts)
    return exported


def _items(items: tuple[Value, ...] | None) -> tuple[ExportedItem, ...] | None:
    """What each item of the tuple every return of the forward writes out holds (a caller may hand
    the forward a graph: an item that may hold one with no node of its own joins every other)."""
    if items is None:
        return None
    groups = sharing_groups(items, given_a_graph=True)
    return tuple(ExportedItem(v.graph, v.graphless, v.guessed or v.unread or v.possible, v.structure is TENSOR, g) for v, g in zip(items, groups))


def _own_method(class_def: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    """The method ``name`` the class's own body defines, once (None where it defines it twice: a
    property's setter, a redefinition)."""
    methods = [s for s in class_def.body.body if isinstance(s, cst.FunctionDef) and s.name.value == name]
    return methods[0] if len(methods) == 1 else None


def _read_chain(name: str, read: dict[str, cst.ClassDef], analysis: FileAnalysis, seen: frozenset[str] = frozenset()) -> list[cst.ClassDef] | None:
    """The class ``name`` and the module's classes it derives from, every one read: each base is
    ``torch.nn.Module`` or such a class; None where one is not (another module's, a package's, a
    metaclass or a keyword of the class statement)."""
    class_def = read.get(name)
    if class_def is None or name in seen or class_def.keywords:
        return None
    chain = [class_def]
    for base in class_def.bases:
        qualified = analysis.names.qualify(base.value) or ""
        if qualified == "torch.nn.Module":
            continue
        inner = _read_chain(qualified, read, analysis, seen | {name})
        if inner is None:
            return None
        chain += inner
    return chain


def _reads_modelled_code(chain: list[cst.ClassDef], read: dict[str, cst.ClassDef], analysis: FileAnalysis) -> bool:
    """Whether building and calling the class runs only code gradfix read and models: no construct of
    the closed world (``closed_world.CONSTRUCTS``, whatever obligation it touches) in the methods of
    its chain, of the module's classes they name, of the module's functions they call, or in the
    module's top-level statements (which run when it is imported: a global hook)."""
    world = analysis.closed_world
    scopes: list[cst.CSTNode] = [s for s in analysis.module.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef))]
    pending, reached = list(chain), set()
    while pending:
        class_def = pending.pop()
        if class_def.name.value in reached:
            continue
        reached.add(class_def.name.value)
        scopes.append(class_def)
        for method in (s for s in class_def.body.body if isinstance(s, cst.FunctionDef)):
            scopes.extend(world._path([method]))
        named = {n.value for n in analysis.tree.findall(class_def, cst.Name)} & set(read)
        pending.extend(read[n] for n in named)
    roots = [scope for scope in dict.fromkeys(scopes) if not any(other is not scope and analysis.contains(other, scope) for other in scopes)]
    if world.constructs_in(roots):
        return False
    # Its forward is walked with no graph in its parameters (no caller of the module hands it one):
    # a call of code gradfix did not read is a row whether or not it seemed to touch one. (``super()``'s
    # methods are torch.nn.Module's or those of a class of the chain, whose bodies are among the roots.)
    calls = (call for root in roots for call in analysis.tree.findall(root, cst.Call) if not _calls_super(call))
    return not any(world.unmodelled_with_graphs(call) for call in calls)


def _calls_super(call: cst.Call) -> bool:
    """``super().__init__()``, ``super().forward(x)``: a method of a base."""
    func = call.func
    return (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Call)
        and isinstance(func.value.func, cst.Name)
        and func.value.func.value == "super"
    )


# What a forward may do to a tensor and still hand back its graph, each a differentiable function of
# the tensor: a tensor's methods, and torch's and ``torch.nn.functional``'s functions, of its first
# argument (``torch.cat`` and ``torch.stack``: of each tensor of the list it is given).
_CARRYING_METHODS = frozenset(
    {"view", "view_as", "reshape", "reshape_as", "flatten", "squeeze", "unsqueeze", "permute", "transpose", "contiguous", "t",
     "expand", "expand_as", "repeat", "mean", "sum", "sigmoid", "tanh", "relu", "softmax", "log_softmax", "exp", "log", "pow",
     "abs", "clamp", "float", "to", "type_as", "matmul", "mul", "add", "sub", "div", "neg", "chunk", "split"}
)  # fmt: skip
_CARRYING_FUNCTIONS = frozenset(
    {"relu", "leaky_relu", "elu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "dropout", "interpolate", "pad",
     "linear", "conv1d", "conv2d", "conv3d", "avg_pool1d", "avg_pool2d", "max_pool1d", "max_pool2d", "adaptive_avg_pool2d",
     "normalize", "layer_norm", "flatten", "mean", "sum", "exp", "log", "matmul", "bmm", "mm", "cat", "stack", "reshape"}
)  # fmt: skip


def _carried(forward: cst.FunctionDef, class_name: str, analysis: FileAnalysis) -> set[str] | None:
    """The parameters of ``forward`` whose graph certainly reaches what it returns, whatever graph a
    caller hands it: read over a body of plain assignments to names and one ``return`` at its end,
    through arithmetic, the class's torch.nn layers, and the tensor functions above (anything else
    carries none); None where the body is of another shape (a branch, a loop, a ``with``)."""
    parameters = [p.name.value for p in forward.params.params][1:]
    carries: dict[str, frozenset[str]] = {name: frozenset({name}) for name in parameters}
    statements = list(forward.body.body)
    if statements and _is_docstring(statements[0]):
        statements = statements[1:]
    for position, statement in enumerate(statements):
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        small = statement.body[0]
        if isinstance(small, cst.Return) and position == len(statements) - 1 and small.value is not None:
            return set(_carries(small.value, carries, class_name, analysis))
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)):
            return None
        carries[small.targets[0].target.value] = _carries(small.value, carries, class_name, analysis)
    return None


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _carries(expression: cst.BaseExpression, carries: dict[str, frozenset[str]], class_name: str, analysis: FileAnalysis) -> frozenset[str]:
    """The parameters whose graph certainly reaches ``expression``'s value (``_carried``)."""
    names = analysis.names

    def of(node: cst.BaseExpression) -> frozenset[str]:
        return _carries(node, carries, class_name, analysis)

    if isinstance(expression, cst.Name):
        return carries.get(expression.value, frozenset())
    if isinstance(expression, cst.BinaryOperation):
        return of(expression.left) | of(expression.right)
    if isinstance(expression, cst.UnaryOperation) and isinstance(expression.operator, (cst.Minus, cst.Plus)):
        return of(expression.expression)
    if isinstance(expression, (cst.List, cst.Tuple)):
        return frozenset().union(*(of(e.value) for e in expression.elements if not isinstance(e, cst.StarredElement)))
    if not isinstance(expression, cst.Call) or not expression.args or expression.args[0].keyword is not None or expression.args[0].star:
        return frozenset()
    func, first = expression.func, expression.args[0].value
    if isinstance(func, cst.Attribute) and dotted_name(func.value) == "self":
        module = names.module(func, class_name)  # ``self.net(x)``: a layer the class holds
        torch_layer = module is not None and not module.is_local and module.project is None and bool(module.class_name)
        return of(first) if torch_layer and not module.unread else frozenset()
    qualified = names.qualify(func) or ""
    function = qualified.rpartition(".")[2]
    if qualified.rpartition(".")[0] in ("torch", "torch.nn.functional") and function in _CARRYING_FUNCTIONS:
        if function in NON_DIFFERENTIABLE or function in CREATION_FUNCTIONS:
            return frozenset()
        return of(first)
    if isinstance(func, cst.Attribute) and not qualified.startswith("torch.") and func.attr.value in _CARRYING_METHODS:
        return of(func.value)  # ``x.view(...)``: ``first`` is an argument of the method
    return frozenset()
