"""Which body a call of a name or of a method of the file runs, where the file may bind another.

Python looks a method up on the object (its own attributes first, then its class and the classes
the class derives from) and a global name up when the call runs. The analysis reads the ``def``
the call names only where nothing else may be found there: the tables of ``TorchNames``
(``dispatched``, ``hidden_methods``, ``rebound_functions``) are filled from these questions.
"""

from __future__ import annotations

import libcst as cst

from ..frameworks import NO_GRAD_CONTEXTS
from .classes_below import bound_again
from .dicts import DICT_READING_METHODS
from .syntax import decorator_callee
from .torch_facts import TorchNames
from .tree import SyntaxTree


def placeholder(method: cst.FunctionDef, names: TorchNames) -> bool:
    """A method that is there to be replaced: declared abstract, or whose body, its docstring aside,
    only passes or raises (``raise NotImplementedError``, ``...``)."""
    if any((names.qualify(decorator.decorator) or "").endswith("abstractmethod") for decorator in method.decorators):
        return True
    body = method.body
    statements = list(body.body) if isinstance(body, cst.IndentedBlock) else [body]
    small: list[cst.BaseSmallStatement] = []
    for statement in statements:
        if not isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return False
        small.extend(statement.body)
    if small and isinstance(small[0], cst.Expr) and isinstance(small[0].value, (cst.SimpleString, cst.ConcatenatedString)):
        small = small[1:]
    return all(isinstance(part, (cst.Pass, cst.Raise)) or isinstance(part, cst.Expr) and isinstance(part.value, cst.Ellipsis) for part in small)


def stored_attribute_names(tree: SyntaxTree) -> set[str] | None:
    """The names of the attributes the file stores on any object (``x.name = ...``, ``x.name += ...``,
    ``setattr(x, "name", ...)``); None where it may store one whose name it does not write out
    (``setattr(x, key, ...)``, an object's ``__dict__`` used other than read: a meter's
    ``fmt.format(**self.__dict__)`` stores nothing)."""
    module = tree.module
    if any(not _only_reads(name, tree) for name in tree.names(module, ("__dict__",))):
        return None
    names: set[str] = set()
    targets: list[cst.BaseExpression] = [t.target for t in tree.findall(module, cst.AssignTarget)]
    targets += [s.target for s in tree.findall(module, cst.AugAssign)] + [s.target for s in tree.findall(module, cst.AnnAssign)]
    while targets:
        target = targets.pop()
        if isinstance(target, cst.Attribute):
            names.add(target.attr.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            targets.extend(element.value for element in target.elements)
        elif isinstance(target, cst.StarredElement):
            targets.append(target.value)
    for called in tree.names(module, ("setattr",)):
        call = tree.parent(called)
        if isinstance(call, cst.Call) and call.func is called:
            name = call.args[1].value if len(call.args) > 1 else None
            if not isinstance(name, cst.SimpleString):
                return None
            names.add(name.evaluated_value if isinstance(name.evaluated_value, str) else "")
    return names


def _only_reads(name: cst.Name, tree: SyntaxTree) -> bool:
    """Whether ``name``, a ``__dict__``, is an object's dict that is only read: unpacked (``**x.__dict__``
    into a call or a dict display) or asked one of ``DICT_READING_METHODS``."""
    attribute = tree.parent(name)
    if type(attribute) is not cst.Attribute or attribute.attr is not name:
        return False
    used = tree.parent(attribute)
    if type(used) is cst.Arg:
        return used.star == "**"
    if type(used) is cst.StarredDictElement:
        return True
    return (
        type(used) is cst.Attribute
        and used.attr.value in DICT_READING_METHODS
        and type(called := tree.parent(used)) is cst.Call
        and called.func is used
    )


# Decorators whose function runs its body as written (gradient mode aside, which the dataflow reads):
# the typing module's return the function they are given.
FUNCTION_DECORATORS = frozenset(NO_GRAD_CONTEXTS) | {"typing.final", "typing_extensions.final"}
METHOD_DECORATORS = FUNCTION_DECORATORS | {"staticmethod", "classmethod", "typing.override", "typing_extensions.override"}


def decorators_modelled(function: cst.FunctionDef, names: TorchNames, modelled: frozenset[str]) -> bool:
    """Whether every decorator of ``function`` is one of ``modelled``: it runs the body as written."""
    return all(names.qualify(decorator_callee(decorator)) in modelled for decorator in function.decorators)


def rebound_functions(tree: SyntaxTree, names: TorchNames, defs: list[cst.FunctionDef]) -> set[str]:
    """The functions of the module's scope whose name a call may find bound to another object than
    their ``def``: bound again in the module's scope (a second ``def``, an assignment, an import, a
    class, a ``global`` of a function: ``classes_below.bound_again``), or decorated by a decorator
    gradfix does not model; all of them where the file reaches the module's namespace itself
    (``globals()``, ``vars()``, ``exec``). (A parameter or local of the calling function that
    shares the name is the call's own: ``TorchNames.module_function``.)"""
    defined = {function.name.value for function in defs}
    if any(_reaches_the_namespace(tree.parent(name), name) for name in tree.names(tree.module, ("globals", "exec", "vars"))):
        return defined
    return bound_again(tree, defined) | {f.name.value for f in defs if not decorators_modelled(f, names, FUNCTION_DECORATORS)}


def _reaches_the_namespace(call: cst.CSTNode | None, called: cst.Name) -> bool:
    """Whether ``call`` calls ``called``, and that is ``globals()``, ``exec(code)``, or ``vars()`` of
    no object (``vars(args)`` reads ``args``)."""
    if type(call) is not cst.Call or call.func is not called:
        return False
    return called.value in ("globals", "exec") or not call.args
