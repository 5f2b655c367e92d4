"""What a backward's graph may read that an earlier call built and kept, which the walk reads as built
anew (or as no graph): a call of a function that hands back what outlives its call (a cache it
fills, ``functools.lru_cache`` and other code gradfix did not read, a generator's frame), a
parameter's default that is not a literal, an attribute an earlier call or a class body set, a
name of the module a function writes. Walked again by the next backward, such a graph needs the
``retain_graph=True`` that kept it: GF009 does not drop it safely there. And the other way: a graph
built outside a function that each call rebinds is read by its first call alone (GF006).

``KeptGraphs`` reads the file's ``FileAnalysis``, which builds it: it names it, and does not import it.
"""

from __future__ import annotations

import weakref
from functools import cached_property
from typing import Any, Iterable, Sequence

import libcst as cst

from .assignments import assigned_names, target_names
from .backward_calls import BackwardSite
from .function_summaries import callee_key
from .loops import Scope
from .syntax import dotted_name
from .values import FunctionOf, Origin

# Defaults that hold no graph (``None``, ``True`` and ``False`` are the names among them).
_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString)


class KeptGraphs:
    def __init__(self, analysis: Any) -> None:  # (the FileAnalysis: see the module docstring)
        # Weakly: the analysis keeps this object, and a cycle would leave the file's tree to the
        # cycle collector.
        self.analysis = weakref.proxy(analysis)
        self._getters_read: set[str] = set()

    def reaches_the_next_call(self, scope: Scope, statement: cst.CSTNode, names: Iterable[str]) -> bool | None:
        """Whether the graph ``statement`` built outside the function ``scope``, in ``names`` it
        reads, is still there when the function is called again, as the function's summary says
        what a call leaves its caller: False where every path through a call rebinds each of them
        to a graph of its own, and leaves that graph in no name (SAC's ``self.alpha =
        self.log_alpha.exp()`` at the end of each update: the graph the constructor built is read
        by the first call alone); None where the function rebinds one of them on some paths only,
        or hands its object to a call (``setattr(self, ...)``, ``refresh(self)``, a method gradfix did
        not read), which may rebind any attribute of it; True where it rebinds none."""
        function = scope.node
        if (
            not isinstance(function, cst.FunctionDef)
            or (summary := self.analysis._dataflow.summaries.get(callee_key(function, scope.class_name))) is None
        ):
            return True
        left = summary.left_for_caller
        names = set(names)
        kept = {name for name, value in left.items() if any(source.statement is statement for source in self.analysis.value_nodes(value))}
        if not kept and names <= set(left):
            return False
        receiver = function.params.params[0].name.value if scope.class_name is not None and function.params.params else None
        on_the_object = receiver is not None and any(name.startswith(receiver + ".") for name in names)
        if names & kept & assigned_names(function.body, tree=self.analysis.tree) or on_the_object and self._hands_its_object_away(function, receiver):
            return None
        return True

    def _hands_its_object_away(self, method: cst.FunctionDef, receiver: str | None) -> bool:
        """Whether ``method`` hands the object it runs on (``receiver``) to a call, or to a method
        gradfix did not read."""
        return method in self.analysis._dataflow.forgetting_methods or any(
            type(argument.value) is cst.Name and argument.value.value == receiver
            for call in self.analysis.tree.findall(method.body, cst.Call)
            for argument in call.args
        )

    def may_return_what_it_kept(self, call: cst.Call) -> bool:
        """Whether ``call`` may hand back a graph an earlier call built: code gradfix did not read, a generator
        function (its frame lives between calls), or a function of the file that reads what may outlive a call
        (``_outliving_read``: ``_cache["f"]``, ``self.features``, a default) or hands back what it did not compute
        (a name no assignment of the function binds)."""
        if self.analysis.returns_unread_graph(call):
            return True
        function = self.analysis.function_called(call)
        return function is not None and self._function_may_return_what_it_kept(function, self.analysis.class_name_of(function))

    def _function_may_return_what_it_kept(self, function: cst.FunctionDef, class_name: str | None) -> bool:
        tree = self.analysis.tree
        if tree.findall(function.body, cst.Yield):
            return True
        if self._outliving_read(function, class_name, [function.body]) is not None:
            return True
        parameters = {p.name.value for p in (*function.params.params, *function.params.kwonly_params, *function.params.posonly_params)}
        bound = assigned_names(function.body, tree=tree) | parameters
        return any(isinstance(returned.value, cst.Name) and returned.value.value not in bound for returned in tree.findall(function.body, cst.Return))

    def outliving_read_at(self, site: BackwardSite, nodes: frozenset[Origin]) -> cst.CSTNode | None:
        """What, in a function, the statements that build the graph read that may outlive a call of it
        (``_outliving_read``)."""
        function = site.scope.node
        statements = sorted({origin.statement for origin in nodes if self.analysis.contains(function, origin.statement)}, key=self.analysis.order)
        if not isinstance(function, cst.FunctionDef):
            return next((read for statement in statements if (read := self._getter_read(statement)) is not None), None)
        return self._outliving_read(function, site.scope.class_name, statements)

    def _outliving_read(self, function: cst.FunctionDef, class_name: str | None, parts: Sequence[cst.CSTNode]) -> cst.CSTNode | None:
        """The first value ``parts`` of ``function`` read that may outlive a call of it, which the walk
        reads as holding no graph: a parameter whose default is not a literal (evaluated once, when
        the function is defined), an attribute of a parameter other than ``self`` that the file sets
        other than in a constructor (``cfg.prior``) or, but on a module, never sets, an attribute a
        class body sets (read on any object) or one of ``self`` a method other than ``__init__`` sets, or a name of the module or
        the enclosing scope that holds a graph or that some function writes (a cache a call fills,
        an iterator a generator feeds). A module, a function or a class called is code, not such a
        value."""
        tree, names = self.analysis.tree, self.analysis.names
        parameters = {p.name.value: p for p in (*function.params.params, *function.params.kwonly_params, *function.params.posonly_params)}
        me = function.params.params[0].name.value if class_name is not None and function.params.params else None
        targets = [*(t.target for t in tree.findall(function.body, cst.AssignTarget)), *(f.target for f in tree.findall(function.body, cst.For))]
        scoping: list[cst.Global | cst.Nonlocal] = [*tree.findall(function.body, cst.Global), *tree.findall(function.body, cst.Nonlocal)]
        declared = {n.name.value for statement in scoping for n in statement.names}
        local = ({name for target in targets for name in target_names(target, rebound_only=True) if "." not in name} - declared) | set(parameters)
        for part in parts:
            if (getter_read := self._getter_read(part)) is not None:
                return getter_read
            skipped = {id(call.func) for call in tree.findall(part, cst.Call)}  # (code called; and below, what is written)
            skipped |= {
                id(node) for target in tree.findall(part, cst.AssignTarget) for node in (target.target, *tree.findall(target.target, cst.Attribute))
            }
            reads: list[cst.Name | cst.Attribute] = [*tree.findall(part, cst.Name), *tree.findall(part, cst.Attribute)]
            for read in reads:
                if isinstance(read, cst.Attribute) and read.attr.value in self._class_body_attributes and id(read) not in skipped:
                    return read  # (set once, in a class body, for every instance: ``self.prior``, ``Trainer.prior``, ``type(self).prior``)
                name = dotted_name(read)
                if name is None or id(read) in skipped or names.module(read, class_name) is not None:
                    continue
                head, _, attribute = name.partition(".")
                parameter = parameters.get(head)
                default = parameter.default if parameter is not None else None
                if (
                    default is not None
                    and not isinstance(default, _LITERALS)
                    and not (type(default) is cst.Name and default.value in ("None", "True", "False"))
                ):
                    return read
                if attribute and parameter is not None and isinstance(read, cst.Attribute):
                    if head == me and self._set_before_in_the_call(function, read, f"{me}.{attribute.split('.')[0]}"):
                        continue  # (``self.z = ...`` earlier in the same call: this call's value)
                    writes = self.analysis.attribute_writes(attribute.split(".")[0])
                    if any(writer is None or writer.name.value != "__init__" for _, writer in writes):
                        return read  # (``cfg.prior = enc(x)``, ``self._f = enc(x)``: set where any code may run before the call)
                    if head != me and not writes and names.module(read.value, class_name) is None:
                        return read  # (an attribute of an object the file never writes it on: anything)
                if attribute and parameter is None and head not in local and isinstance(read, cst.Attribute):
                    writes = self.analysis.attribute_writes(attribute.split(".")[0])
                    if any(writer is None or writer.name.value != "__init__" for _, writer in writes):
                        return read  # (``features.value``, ``state.h``: an object of the module that a function or the module sets)
                if not attribute and head not in local and head not in names.local_classes and head not in names.aliases:
                    value = self.analysis.value_read(read)
                    if head in self._written_by_functions or value is not None and value.graph and not isinstance(value.structure, FunctionOf):
                        return read  # (a cache a call fills, what a generator holds: the site's own nodes say where a graph was built)
        return None

    def _set_before_in_the_call(self, function: cst.FunctionDef, read: cst.CSTNode, attribute: str) -> bool:
        """Whether a statement of ``function``'s own body before the one that holds ``read`` binds ``attribute``
        (``self.z_mean, self.z_sigma = ...`` then ``return self.z_mean + ...``)."""
        tree = self.analysis.tree
        holding = tree.child_holding(function.body, read)
        statements = list(function.body.body)
        if holding is None or holding not in statements:
            return False
        return any(attribute in assigned_names(statement, rebinding_only=True, tree=tree) for statement in statements[: statements.index(holding)])

    def _getter_read(self, part: cst.CSTNode) -> cst.Attribute | None:
        """The first attribute ``part`` reads, not to call it, whose getter may hand back what outlives a call
        (``holder.f``, ``self.features`` under ``@property``: ``_getter_may_keep``)."""
        tree = self.analysis.tree
        called = {id(call.func) for call in tree.findall(part, cst.Call)}
        return next((read for read in tree.findall(part, cst.Attribute) if id(read) not in called and self._getter_may_keep(read.attr.value)), None)

    def _getter_may_keep(self, attribute: str) -> bool:
        """Whether reading ``attribute`` may run a method of the file's classes that hands back what outlives a call:
        a method of that name under a decorator gradfix does not read (``@functools.cached_property`` keeps its first
        result; any other may too), or a ``@property`` whose body reads what may (``_outliving_read``). A
        ``@name.setter`` does not run on a read."""
        if attribute in self._getters_read:
            return False  # (read again while its own body is read: what else it reads decides)
        self._getters_read.add(attribute)
        try:
            for class_name, getter in self._decorated_methods.get(attribute, ()):
                decorators = [dotted_name(d.decorator) for d in getter.decorators]
                if all(d in (f"{attribute}.setter", f"{attribute}.deleter") for d in decorators):
                    continue
                builtin = decorators == ["property"] and "property" not in self.analysis.names.aliases
                if not builtin or self._function_may_return_what_it_kept(getter, class_name):
                    return True
            return False
        finally:
            self._getters_read.discard(attribute)

    @cached_property
    def _decorated_methods(self) -> dict[str, list[tuple[str, cst.FunctionDef]]]:
        """The file's methods under a decorator that makes reading their name run them, by name, with their class."""
        methods: dict[str, list[tuple[str, cst.FunctionDef]]] = {}
        for class_def in self.analysis.tree.findall(self.analysis.module, cst.ClassDef):
            for statement in class_def.body.body:
                if isinstance(statement, cst.FunctionDef) and any(
                    dotted_name(d.decorator) not in ("staticmethod", "classmethod") for d in statement.decorators
                ):
                    methods.setdefault(statement.name.value, []).append((class_def.name.value, statement))
        return methods

    @cached_property
    def _class_body_attributes(self) -> frozenset[str]:
        """The names the file's class bodies bind outside their methods: attributes of the class, which every
        instance, the class and ``type(self)`` read, built once."""
        tree = self.analysis.tree
        return frozenset(
            name
            for class_def in tree.findall(self.analysis.module, cst.ClassDef)
            for statement in class_def.body.body
            if not isinstance(statement, (cst.FunctionDef, cst.ClassDef))
            for name in assigned_names(statement, tree=tree)
        )

    @cached_property
    def _written_by_functions(self) -> frozenset[str]:
        """The names the file's functions write (bind, or write into: ``_cache["f"] = enc(x)``)."""
        tree = self.analysis.tree
        return frozenset().union(*(assigned_names(function.body, tree=tree) for function in tree.findall(self.analysis.module, cst.FunctionDef)))
