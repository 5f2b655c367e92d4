"""The closed world a safe rewrite's proof may rest on.

A rule proves its bug from the dataflow (``dataflow``): the graph is built here, freed there, walked
again. That proof says nothing of the code the rewrite could disturb: something else may read the
gradient the rewrite merges, keep the graph it frees, hook the backward it removes, or read the
autograd bookkeeping of the value it detaches. The dataflow answers "may": what it does not
understand may hold a graph. A safe rewrite needs the other question answered, "must not": nothing
disturbs it. That answer can only come from code gradfix read and modelled, so this module asks it
the other way round from a list of exceptions: **a construct is trusted because it is a row of the
model, and anything else leaves the answer unknown.**

Each fix declares its obligations (``OBLIGATIONS``: a name and the question it asks). For each,
``ClosedWorld.answer`` finds the constructs on the fix's path, the code of the functions that hold the
fix and its backwards, and of the file's functions they call, and, for what is set up once and holds
for the whole program (hooks), the whole file. Each construct is a row of ``CONSTRUCTS``: what it is,
why the analysis cannot see through it, and the obligations it leaves unknown or refutes. The answer
is ``proved`` when no construct on the path touches the obligation, else ``unknown`` (or ``refuted``)
at the first such construct's line. A safe fix with any obligation not proved is offered as unsafe,
and says why (``Rule.violation``).

What is modelled (so touches nothing): the file's own functions and classes (their bodies are on the
path), torch's operator namespaces (``TORCH_OPERATOR_NAMESPACES``), modules of torch.nn and of the
file, a tensor's and a container's methods, the builtins of ``MODELLED_BUILTINS``, the framework
objects of ``frameworks``, optimizers, and calls of reading-only libraries (``READING_PACKAGES``). A
call of anything else (another package, a module beside the file gradfix did not read, a parameter, an
object of unknown class) is unknown when it is handed, or returns, something that may hold a graph,
a tensor, a module, an optimizer or a framework object: that is where it could reach the program's
autograd state. Code handed none of these can reach it only through torch's global switches (global
module hooks, grad mode), which it would have to set itself: that residual is stated in UNKNOWNS.md.

``ClosedWorld`` reads the file's ``FileAnalysis``, which builds it: it names it, and does not import
it (no import loop runs through the analysis, not even a type's).
"""

from __future__ import annotations

import enum
import weakref
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator, Sequence

import libcst as cst

from ..frameworks import CALLED_AS_FORWARD, FRAMEWORK_CONSTRUCTORS, FRAMEWORK_TUPLE_CONSTRUCTORS, MODULE_WRAPPERS, READING_LOGGERS, TRAINER_RUNS
from ..torch_api import AUTOGRAD_INTERNALS, AUTOGRAD_RECORD
from .module_info import ModuleInfo
from .read_later import graphs_read_later
from .symbol_tables import function_scopes
from .syntax import code_of, dotted_name
from .dicts import DICT_READING_METHODS
from .values import TENSOR, DictOf, ListOf, Origin, Structure, TupleOf


class Answer(str, enum.Enum):
    PROVED = "proved"
    UNKNOWN = "unknown"
    REFUTED = "refuted"


# The obligations a fix may declare, each with the question it asks, in a user's words.
READS_MODELLED_CODE = "reads_modelled_code"
NO_GRADIENT_HOOKS = "no_gradient_hooks"
NO_HIDDEN_BACKWARD = "no_hidden_backward"
NO_BOOKKEEPING_READS = "no_bookkeeping_reads"
NO_CAUGHT_ERRORS = "no_caught_errors"
OBLIGATIONS: dict[str, str] = {
    READS_MODELLED_CODE: "every call on the fix's path that is handed, or returns, a graph, a tensor or a module runs code gradfix read or models",
    NO_GRADIENT_HOOKS: "no hook, custom autograd.Function or checkpoint can change the gradients the fix claims to keep",
    NO_HIDDEN_BACKWARD: "no backward or graph read runs through a lambda, a closure, a nonlocal, a bound method or getattr",
    NO_BOOKKEEPING_READS: "nothing reads the autograd bookkeeping (is_leaf, requires_grad, grad_fn) of what the fix changes",
    NO_CAUGHT_ERRORS: "no error a backward raises where the fix is can be caught by the program, which would then mean it",
}
# Obligations about what is set up once for the whole program: searched in the whole file.
PROGRAM_WIDE = frozenset({NO_GRADIENT_HOOKS, NO_BOOKKEEPING_READS})


@dataclass(frozen=True)
class Construct:
    """One row of the model: a construct, why the analysis cannot see through it, and what it does
    to each obligation."""

    kind: str
    why: str
    leaves_unknown: frozenset[str] = frozenset()
    refutes: frozenset[str] = frozenset()


_ALL = frozenset(OBLIGATIONS)
UNREAD_CALL = Construct(
    "a call of code gradfix did not read",
    "it is handed (or returns) a graph, a tensor or a module, and may backward, hook, keep or read it",
    leaves_unknown=_ALL,
)
DYNAMIC_ACCESS = Construct(
    "a dynamic attribute or code access",
    "getattr, setattr, delattr, vars, eval or exec reach names the analysis cannot follow",
    leaves_unknown=_ALL,
)
DEFERRED_CODE = Construct(
    "a lambda that calls or reads attributes",
    "its body runs wherever it is called, which the dataflow does not follow",
    leaves_unknown=frozenset({READS_MODELLED_CODE, NO_HIDDEN_BACKWARD, NO_BOOKKEEPING_READS}),
)
INNER_REBINDING = Construct(
    "a nonlocal or global statement in a nested function",
    "it rebinds a name of another scope whenever the nested function runs",
    leaves_unknown=frozenset({READS_MODELLED_CODE, NO_HIDDEN_BACKWARD}),
)
METHOD_TAKEN = Construct(
    "a method taken as a value",
    "a bound method (``t.backward``, ``opt.step``) runs wherever it is called later",
    leaves_unknown=frozenset({READS_MODELLED_CODE, NO_HIDDEN_BACKWARD}),
)
GRADIENT_HOOK = Construct(
    "a gradient hook or a custom autograd.Function",
    "it sees, and may change, the gradient of each backward on its own",
    refutes=frozenset({NO_GRADIENT_HOOKS}),
)
UNMODELLED_TORCH = Construct(
    "a torch call outside its operator namespaces",
    "checkpointing, autograd's graph hooks and function transforms save, free and recompute differently",
    leaves_unknown=frozenset({READS_MODELLED_CODE, NO_GRADIENT_HOOKS, NO_HIDDEN_BACKWARD}),
)
BOOKKEEPING_READ = Construct(
    "a read of autograd bookkeeping",
    "is_leaf, requires_grad and grad_fn change when a value is detached",
    refutes=frozenset({NO_BOOKKEEPING_READS}),
)
EMPTIED_IN_PLACE = Construct(
    "a container emptied or replaced in place",
    "``.clear()``, a slice assignment or ``del x[...]`` changes what every alias of the container holds",
    leaves_unknown=frozenset({READS_MODELLED_CODE}),
)
CLOSURE = Construct(
    "a nested function reading names of the function around it",
    "it reads (and may backward) their values wherever it is called, which the dataflow does not follow",
    leaves_unknown=frozenset({READS_MODELLED_CODE, NO_HIDDEN_BACKWARD}),
)
CAUGHT_ERROR = Construct(
    "a handler that may catch the error a backward raises",
    "``except RuntimeError``, ``except Exception`` or a bare ``except`` around the code: the program may count on the error",
    leaves_unknown=frozenset({NO_CAUGHT_ERRORS}),
)
CONSTRUCTS: tuple[Construct, ...] = (
    UNREAD_CALL,
    DYNAMIC_ACCESS,
    DEFERRED_CODE,
    INNER_REBINDING,
    METHOD_TAKEN,
    GRADIENT_HOOK,
    UNMODELLED_TORCH,
    BOOKKEEPING_READ,
    EMPTIED_IN_PLACE,
    CLOSURE,
    CAUGHT_ERROR,
)
# Exceptions that are not RuntimeError or one of its bases: a handler of them alone catches no error of
# a backward (torch raises RuntimeError).
NOT_RUNTIME_ERRORS = frozenset(
    {"ValueError", "TypeError", "KeyError", "IndexError", "LookupError", "AttributeError", "NameError", "ImportError",
     "ModuleNotFoundError", "StopIteration", "OSError", "IOError", "FileNotFoundError", "ZeroDivisionError", "ArithmeticError",
     "AssertionError", "KeyboardInterrupt", "NotImplementedError", "UnicodeDecodeError", "json.JSONDecodeError"}
)  # fmt: skip

# torch's namespaces whose functions are operators on tensors (what the dataflow models a torch call
# as: a differentiable function of its arguments, or a factory); the rest of torch (``torch.utils``,
# ``torch.autograd.graph``, ``torch.func``, ``torch.jit``, ...) is not modelled.
TORCH_OPERATOR_NAMESPACES = frozenset(
    {
        "torch",
        "torch.nn",
        "torch.nn.functional",
        "torch.linalg",
        "torch.fft",
        "torch.special",
        "torch.distributions",
        "torch.optim",
        "torch.optim.lr_scheduler",
    }
)
# torch functions that take no tensor and return none (seeding, device queries): nothing of a graph
# passes through them (tests/test_closed_world.py runs each).
SETUP_TORCH_FUNCTIONS = frozenset(
    {
        "torch.manual_seed",
        "torch.cuda.manual_seed",
        "torch.cuda.manual_seed_all",
        "torch.cuda.is_available",
        "torch.backends.mps.is_available",
        "torch.backends.mps.is_built",
    }
)
# torch functions outside those namespaces that the analysis models by name.
MODELLED_TORCH_FUNCTIONS = frozenset(
    {
        *SETUP_TORCH_FUNCTIONS,
        "torch.autograd.backward",
        "torch.autograd.grad",
        "torch.autograd.Variable",
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad_value_",
        "torch.utils.data.DataLoader",
        "torch.utils.data.TensorDataset",
        "torch.cuda.amp.GradScaler",
        "torch.amp.GradScaler",
        "torch.cuda.amp.autocast",
        "torch.amp.autocast",
        "torch.cuda.synchronize",
        "torch.no_grad",
        "torch.enable_grad",
        "torch.set_grad_enabled",
        "torch.inference_mode",
    }
)
# Builtins the analysis models: they compute on values and keep, hook or backward none of them.
MODELLED_BUILTINS = frozenset(
    {
        "print", "len", "float", "int", "bool", "str", "format", "repr", "isinstance", "issubclass", "range", "sum", "max", "min",
        "abs", "round", "list", "tuple", "dict", "set", "frozenset", "zip", "enumerate", "sorted", "reversed", "any", "all", "iter",
        "next", "type", "id", "hash", "divmod", "pow", "hasattr", "super", "ValueError", "RuntimeError", "TypeError", "KeyError",
        "AssertionError", "NotImplementedError", "StopIteration", "Exception", "map", "filter", "open", "input", "chr", "ord",
    }
)  # fmt: skip
# Libraries whose calls compute on numbers, strings and files, or log what they are given: they read
# a tensor at most (its value), and neither keep a graph, hook nor backward it.
READING_PACKAGES = frozenset(
    {"math", "numpy", "random", "time", "os", "sys", "json", "logging", "warnings", "argparse", "pathlib", "statistics", "collections",
     "itertools", "functools", "copy", "pickle", "tqdm", "wandb", "datetime", "re", "string", "csv", "shutil", "glob", "matplotlib"}
)  # fmt: skip
# Methods of a list, dict, set or string built by the program: the dataflow models what they store.
CONTAINER_METHODS = frozenset(
    {"append", "extend", "insert", "pop", "get", "items", "keys", "values", "update", "setdefault", "copy", "index", "count",
     "add", "discard", "join", "format", "split", "strip", "startswith", "endswith", "replace", "lower", "upper"}
)  # fmt: skip
# A tensor's operator methods, as the dataflow models them (a differentiable function of the tensor):
# called on a value that may hold a graph (only a tensor holds one), they are that operator.
TENSOR_OPERATOR_METHODS = frozenset(
    {"sum", "mean", "pow", "abs", "exp", "log", "sqrt", "neg", "view", "view_as", "reshape", "reshape_as", "flatten", "squeeze",
     "unsqueeze", "expand", "expand_as", "t", "transpose", "permute", "contiguous", "clone", "float", "double", "half", "long", "int",
     "to", "norm", "max", "min", "argmax", "argmin", "softmax", "log_softmax", "sigmoid", "tanh", "relu", "clamp", "clamp_min",
     "clamp_max", "matmul", "mm", "bmm", "mul", "div", "add", "sub", "square", "std", "var", "prod", "cumsum", "gather", "index_select",
     "masked_fill", "split", "chunk", "repeat", "roll", "flip", "narrow", "select", "topk", "sort", "dim", "size", "numel",
     "type_as", "requires_grad_", "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor", "item", "tolist",
     "detach", "numpy", "cpu", "cuda", "all", "any", "eq", "ne", "gt", "lt", "ge", "le", "sign", "round", "floor", "ceil"}
)  # fmt: skip
# Attributes of a tensor that are tensors (``weight.grad``).
TENSOR_ATTRIBUTES = frozenset({"grad", "data", "T", "mT", "real", "imag"})
# Methods whose result is a tensor again, copied or moved (``p.detach().double()``).
COPYING_METHODS = frozenset({"detach", "cpu", "cuda", "to", "clone", "float", "double"})
TENSOR_FACTORY_METHODS = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})
EMPTYING_METHODS = frozenset({"clear", "remove", "popitem"})
# Methods of a tensor the analysis does not model as operators.
TENSOR_HOOK_METHODS = frozenset({"register_hook", "register_post_accumulate_grad_hook", "retain_grad"})
TENSOR_DEFERRED_METHODS = frozenset({"apply_", "map_", "map2_"})
# Methods of a module or optimizer the analysis models (what it calls, trains or steps).
MODELLED_OBJECT_METHODS = frozenset(
    {"parameters", "named_parameters", "buffers", "named_buffers", "children", "modules", "named_modules", "train", "eval", "to", "cuda",
     "cpu", "double", "float", "half", "bfloat16", "zero_grad", "step", "state_dict", "load_state_dict", "requires_grad_", "forward",
     "add_param_group", "param_groups", "update", "scale", "unscale_", "get_last_lr", "backward", "log", "log_dict", "optimizers",
     "manual_backward", "clip_gradients", "lr_schedulers", "print", "save", "wait_for_everyone", "prepare", "gather", "reduce",
     "accumulate", "autocast", "no_sync", "is_main_process", "unwrap_model", "clip_grad_norm_", "clip_grad_value_", "all_gather",
     "toggle_optimizer", "untoggle_optimizer", "add_scalar", "add_scalars", "add_histogram", "flush", "close", "add_module",
     "register_buffer", "register_parameter", "get_scale", "named_children", "zero_"}
)  # fmt: skip
BOOKKEEPING_ATTRIBUTES = AUTOGRAD_RECORD | AUTOGRAD_INTERNALS
_HOOK_REGISTRATIONS = frozenset(
    {"register_hook", "register_full_backward_hook", "register_backward_hook", "register_full_backward_pre_hook", "register_forward_hook",
     "register_forward_pre_hook", "register_post_accumulate_grad_hook", "register_module_full_backward_hook",
     "register_module_forward_hook", "register_module_backward_hook", "register_module_forward_pre_hook", "register_multi_grad_hook"}
)  # fmt: skip
_READ_BASES = frozenset({"object", "torch.nn.Module", "typing.NamedTuple", "Exception"})
_DYNAMIC_BUILTINS = frozenset({"getattr", "setattr", "delattr", "vars", "eval", "exec", "globals", "locals", "__import__"})


def constructs_against(obligation: str) -> list[Construct]:
    """The rows of the model that leave ``obligation`` unknown or refute it."""
    return [c for c in CONSTRUCTS if obligation in c.leaves_unknown or obligation in c.refutes]


@dataclass(frozen=True)
class Found:
    construct: Construct
    node: cst.CSTNode


@dataclass(frozen=True)
class ProofStep:
    """An obligation's answer: proved, or unknown/refuted at ``node`` by ``construct``."""

    obligation: str
    answer: Answer
    found: Found | None = None

    @property
    def proved(self) -> bool:
        return self.answer is Answer.PROVED

    def reason(self, line: int) -> str:
        """Why a fix resting on this obligation is not safe (``line``: where the construct is)."""
        verb = "disproves" if self.answer is Answer.REFUTED else "leaves unknown"
        kind = self.found.construct.kind if self.found is not None else "the analysis"
        return f"{kind} at line {line} {verb} that {OBLIGATIONS[self.obligation]}"


class ClosedWorld:
    """The constructs of one file, found once, and the obligations' answers on any fix's path."""

    def __init__(self, analysis) -> None:
        # Weakly: the analysis keeps this object, and a cycle would leave the file's tree to the
        # cycle collector.
        self.analysis = weakref.proxy(analysis)
        self._read_later: dict[cst.CSTNode, set[Origin]] = {}  # ``graphs_read_later`` by scope

    def unread_guess(self, statements: Sequence[cst.CSTNode]) -> str:
        """The guess of a finding that rests on a graph one of ``statements`` assigns from code
        gradfix did not read (``FileAnalysis.unread_value``): that code may hand back none."""
        unread = self.analysis.unread_value(statements)
        return "" if unread is None else f"`{code_of(unread)}` comes out of code gradfix did not read, and may hold no graph"

    def answer(self, obligations: Sequence[str], about: Sequence[cst.CSTNode]) -> tuple[ProofStep, ...]:
        """Each obligation's answer for a fix about ``about`` (its statements and backwards)."""
        path = self._path(about)
        steps = []
        for obligation in obligations:
            if obligation in PROGRAM_WIDE:
                where = self._found
            elif obligation == NO_CAUGHT_ERRORS:  # a handler around the fix, or around a call that runs it
                where = [
                    f
                    for f in self._found
                    if f.construct is CAUGHT_ERROR and isinstance(f.node, (cst.Try, cst.TryStar)) and self._runs_under(f.node, about)
                ]
            else:
                where = [f for f in self._found if any(self.analysis.contains(p, f.node) for p in path)]
            refuting = next((f for f in where if obligation in f.construct.refutes), None)
            unknown = next((f for f in where if obligation in f.construct.leaves_unknown), None)
            if refuting is not None:
                steps.append(ProofStep(obligation, Answer.REFUTED, refuting))
            elif unknown is not None:
                steps.append(ProofStep(obligation, Answer.UNKNOWN, unknown))
            else:
                steps.append(ProofStep(obligation, Answer.PROVED))
        return tuple(steps)

    # the path --------------------------------------------------------------------------------
    def _path(self, about: Sequence[cst.CSTNode]) -> list[cst.CSTNode]:
        """The scopes holding ``about`` (a function, or the module for top-level code) and the
        file's functions they call, transitively."""
        path: list[cst.CSTNode] = []
        pending = [part for node in about for part in self._code_of_scope(self.analysis.tree.scope_of(node) or self.analysis.module)]
        while pending:
            scope = pending.pop()
            if any(scope is seen for seen in path):
                continue
            path.append(scope)
            pending.extend(self.functions_called(scope))
        return path

    def _runs_under(self, handled: cst.Try | cst.TryStar, about: Sequence[cst.CSTNode]) -> bool:
        """Whether any of ``about`` runs in ``handled``'s body: written there, or in a function of the
        file a call there runs (at any depth)."""
        reached: list[cst.CSTNode] = [handled.body]
        pending = list(self.functions_called(handled.body))
        while pending:
            function = pending.pop()
            if not any(function is seen for seen in reached):
                reached.append(function)
                pending.extend(self.functions_called(function))
        return any(self.analysis.contains(scope, node) for scope in reached for node in about)

    def _may_catch_runtime_errors(self, caught: cst.BaseExpression | None) -> bool:
        """Whether an ``except`` clause of this type may catch torch's RuntimeError: a bare one, and
        any type but those ``NOT_RUNTIME_ERRORS`` names."""
        if caught is None:
            return True
        if isinstance(caught, cst.Tuple):
            return any(self._may_catch_runtime_errors(element.value) for element in caught.elements)
        return (self.analysis.names.qualify(caught) or "") not in NOT_RUNTIME_ERRORS

    def _reads_enclosing_names(self, function: cst.FunctionDef) -> bool:
        """Whether a nested function reads a name a function around it binds (a closure: a free
        variable, as Python's own symbol table says)."""
        return bool(self._free_names(function))

    def _free_names(self, function: cst.FunctionDef) -> frozenset[str]:
        """The names ``function`` reads from the functions around it; every name it reads where
        Python cannot read the source."""
        closures = self._closures
        if closures is None:
            return frozenset(name.value for name in self.analysis.tree.findall(function.body, cst.Name))
        return closures.get((function.name.value, self.analysis.line(function.name)), frozenset())

    @cached_property
    def _closures(self) -> dict[tuple[str, int], frozenset[str]] | None:
        """The functions with free variables, by name and ``def`` line, each with them; None where
        Python cannot read the source."""
        scopes = function_scopes(self.analysis.source)
        return None if scopes is None else {(f.get_name(), f.get_lineno()): frozenset(f.get_frees()) for f in scopes if f.get_frees()}

    def graphs_read_later(self, scope: cst.CSTNode) -> set[Origin]:
        """Graph nodes that code ``scope`` keeps for later may read wherever it runs, which the
        dataflow does not follow (``read_later``). Asked for each retained backward: kept by scope."""
        if scope not in self._read_later:
            taken = [
                cst.ensure_type(f.node, cst.Attribute).value
                for f in self._found
                if f.construct is METHOD_TAKEN and self.analysis.contains(scope, f.node)
            ]
            self._read_later[scope] = graphs_read_later(self.analysis, scope, self._free_names, taken)
        return self._read_later[scope]

    def _code_of_scope(self, scope: cst.CSTNode) -> list[cst.CSTNode]:
        """What runs when ``scope`` runs: a function's body, or the module's statements but its
        definitions (a function or method it calls joins the path through the call)."""
        if isinstance(scope, cst.Module):
            return [s for s in scope.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef))]
        return [scope]

    def functions_called(self, scope: cst.CSTNode) -> Iterator[cst.FunctionDef]:
        """The file's functions and methods the calls in ``scope`` run."""
        for call in self.analysis.tree.findall(scope, cst.Call):
            yield from self.functions_run_by(call)

    def functions_run_by(self, call: cst.Call) -> list[cst.FunctionDef]:
        """The file's functions (and methods, through ``self`` or an instance of a class of the file)
        a call runs."""
        func = call.func
        names, class_name = self.analysis.names, self.analysis.class_name_of(call)
        if isinstance(func, cst.Name) and names.instance_class(func, class_name) is not None:
            # (``model(x)`` of an instance of the file's class, ``self(x)`` in it)
            instance = names.method_class(func, class_name, "__call__", "forward")
            return self._methods_of(instance, "__call__") + self._methods_of(instance, "forward")
        if isinstance(func, cst.Name):
            name = names.module_function(func)
            if name is None:
                return []
            functions = [f for f in self.analysis._functions if f.name.value == name and self.analysis.class_name_of(f) is None]
            if functions:
                return functions
            return self._methods_of(name, "__init__") + self._methods_of(name, "forward") + self._methods_of(name, "__call__")
        if isinstance(func, cst.Attribute):
            if names.instance_class(func.value, class_name) is not None:
                return self._methods_of(names.method_class(func.value, class_name, func.attr.value), func.attr.value)
            module = names.module(func.value, class_name)
            return self._methods_of(module.class_name if module is not None else None, func.attr.value)
        return []

    def _built_of_read_classes(self, class_name: str) -> bool:
        """A class of the file whose construction runs only code gradfix read: each base is a class of
        the file built so too, a torch.nn.Module, or a record (``NamedTuple``, ``object``)."""
        classes = [c for c in self.analysis.tree.findall(self.analysis.module, cst.ClassDef) if c.name.value == class_name]
        if len(classes) != 1:
            return False
        bases = [self.analysis.names.qualify(base.value) or "" for base in classes[0].bases]
        return all(base in _READ_BASES or (base != class_name and self._built_of_read_classes(base)) for base in bases)

    def _methods_of(self, class_name: str | None, method: str) -> list[cst.FunctionDef]:
        body = self.analysis.class_body(class_name) if class_name in self.analysis.names.local_classes else ()
        return [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == method]

    # the constructs --------------------------------------------------------------------------
    @cached_property
    def _found(self) -> list[Found]:
        found = [Found(construct, node) for construct, node in self._constructs()]
        return sorted(found, key=lambda f: self.analysis.order(f.node))

    def constructs_in(self, roots: Sequence[cst.CSTNode]) -> list[Found]:
        """The constructs inside ``roots`` (none holding another), as ``_found`` finds them in the
        whole file: what a class another module imports runs (``class_exports``), found without
        walking the rest of a large module."""
        return [Found(construct, node) for construct, node in self._constructs(roots)]

    def _constructs(self, roots: Sequence[cst.CSTNode] | None = None) -> Iterator[tuple[Construct, cst.CSTNode]]:
        tree, names = self.analysis.tree, self.analysis.names
        within = [self.analysis.module] if roots is None else roots

        def find(kind: type[cst.CSTNode]) -> list[Any]:
            return [node for root in within for node in tree.findall(root, kind)]

        for call in find(cst.Call):
            construct = self._call_construct(call)
            if construct is not None:
                yield construct, call
        for attribute in find(cst.Attribute):
            if attribute.attr.value in BOOKKEEPING_ATTRIBUTES and names.module(attribute.value, self.analysis.class_name_of(attribute)) is None:
                yield BOOKKEEPING_READ, attribute
            elif self._method_taken(attribute):
                yield METHOD_TAKEN, attribute
        for lam in find(cst.Lambda):
            if any(tree.findall(lam.body, kind) for kind in (cst.Call, cst.Attribute)):
                yield DEFERRED_CODE, lam
        functions = self.analysis._functions if roots is None else find(cst.FunctionDef)
        for function in functions:
            if self._nested(function):
                for statement in tree.findall(function.body, cst.Nonlocal) + tree.findall(function.body, cst.Global):
                    yield INNER_REBINDING, statement
                if self._reads_enclosing_names(function):
                    yield CLOSURE, function
        for statement in [*find(cst.Try), *find(cst.TryStar)]:
            if any(self._may_catch_runtime_errors(handler.type) for handler in statement.handlers):
                yield CAUGHT_ERROR, statement
        for class_def in find(cst.ClassDef):
            if any((names.qualify(base.value) or "").startswith("torch.autograd.") for base in class_def.bases):
                yield GRADIENT_HOOK, class_def
        for assign in find(cst.Assign):
            if any(isinstance(t.target, cst.Subscript) and _is_slice(t.target) for t in assign.targets):
                yield EMPTIED_IN_PLACE, assign
        for deletion in find(cst.Del):
            if tree.findall(deletion.target, cst.Subscript):
                yield EMPTIED_IN_PLACE, deletion

    def unmodelled_with_graphs(self, call: cst.Call) -> bool:
        """Whether ``call`` would be a row of the model if every value it reads held a graph (code
        walked with none, a forward no caller of its module hands one: ``class_exports``)."""
        return self._call_construct(call, assume_graphs=True) is not None

    def _call_construct(self, call: cst.Call, assume_graphs: bool = False) -> Construct | None:
        """The row a call is, or None when it is modelled or touches nothing of autograd
        (``assume_graphs``: as if every value it reads may hold a graph)."""
        analysis, names = self.analysis, self.analysis.names
        func = call.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        if method in _HOOK_REGISTRATIONS:
            return GRADIENT_HOOK
        if isinstance(func, cst.Name) and func.value in _DYNAMIC_BUILTINS and func.value not in names.aliases:
            return DYNAMIC_ACCESS
        if all(function.rsplit(".", 1)[0] in TORCH_OPERATOR_NAMESPACES for function in analysis._dataflow.called_functions.get(call, ("",))):
            return None  # a function of torch's a name holds, on every path (``FunctionOf``)
        qualified = names.qualify(func)
        logger = isinstance(func, cst.Attribute) and names.constructed.get(names.key(func.value) or "") in READING_LOGGERS
        if qualified in READING_LOGGERS or logger:
            return None  # a logger reads what it is given (``frameworks.READING_LOGGERS``)
        if qualified is not None and qualified.split(".")[0] == "torch":
            if qualified in MODELLED_TORCH_FUNCTIONS or qualified.rsplit(".", 1)[0] in TORCH_OPERATOR_NAMESPACES:
                return None
            if isinstance(func, cst.Attribute) and self._names_a_tensor(func.value):
                return None  # a tensor kept on a torch-named object: its method
            return UNMODELLED_TORCH
        if self._modelled(call, func, method, qualified, assume_graphs):
            return None
        if method in TENSOR_HOOK_METHODS:
            return GRADIENT_HOOK
        if isinstance(func, cst.Attribute) and method in EMPTYING_METHODS and self._is_container(func.value):
            return EMPTIED_IN_PLACE
        if isinstance(func, cst.Attribute) and method == "apply" and names.module(func.value, analysis.class_name_of(call)) is not None:
            # ``model.apply(fn)`` runs ``fn`` on every submodule: read when ``fn`` is the file's own
            applied = [arg.value for arg in call.args[:1]]
            return None if applied and isinstance(applied[0], cst.Name) and self.functions_run_by(cst.Call(func=applied[0])) else UNREAD_CALL
        return UNREAD_CALL if assume_graphs or self._touches_autograd(call) else None

    def _modelled(self, call: cst.Call, func: cst.BaseExpression, method: str | None, qualified: str | None, assume_graphs: bool = False) -> bool:
        analysis, names = self.analysis, self.analysis.names
        class_name = analysis.class_name_of(call)
        if call in analysis._dataflow.backward_sites:
            return True
        if qualified is not None and qualified.split(".")[0] in READING_PACKAGES:
            return True
        if (
            qualified in FRAMEWORK_CONSTRUCTORS
            or qualified in FRAMEWORK_TUPLE_CONSTRUCTORS
            or qualified in TRAINER_RUNS
            or qualified in MODULE_WRAPPERS
        ):
            return True  # the framework objects of ``frameworks``: what they backward and run is in its tables
        if isinstance(func, cst.Name):
            if func.value in MODELLED_BUILTINS and func.value not in names.aliases:
                return True
            if self.functions_run_by(call) or self._built_of_read_classes(func.value) or names.framework(func) in CALLED_AS_FORWARD:
                return True
            info = names.module(func, class_name)
            return info is not None and (info.is_local or names.module_class(cst.Name("nn")) is None) and _torch_or_local(info)
        if isinstance(func, cst.Subscript):
            return names.module(func, class_name) is not None  # a layer of a container of the file's modules
        if isinstance(func, cst.Call):  # a module built where it is called (``nn.L1Loss()(a, b)``)
            built = names.module(func, class_name)
            return built is not None and _torch_or_local(built)
        if isinstance(func, cst.Attribute):
            receiver = func.value
            info = names.module(func, class_name)
            if info is not None:
                return _torch_or_local(info)
            built_by = names.constructed.get(names.key(receiver) or "", "")
            if names.framework(receiver) is not None or TRAINER_RUNS.get(built_by) == method:
                return True
            if built_by in MODELLED_TORCH_FUNCTIONS and method in MODELLED_OBJECT_METHODS:
                return True  # a GradScaler's
            if method in TENSOR_OPERATOR_METHODS and (assume_graphs or self._may_hold_a_graph(receiver) or method == "detach"):
                return True  # only a tensor holds a graph; ``detach`` is modelled by name, a copy without one
            if method in MODELLED_OBJECT_METHODS and (
                names.module(receiver, class_name) is not None
                or (dotted_name(receiver) or "") in names.optimizers
                or names.framework(receiver) is not None
                or names.key(receiver) in names.objects
                or (dotted_name(receiver) == "self" and class_name in names.lightning_classes)
            ):
                return True
            if self.functions_run_by(call):
                return True
            if method not in TENSOR_HOOK_METHODS and method not in TENSOR_DEFERRED_METHODS and self._names_a_tensor(receiver):
                return True
            if method in CONTAINER_METHODS and (
                self._is_container(receiver)
                or isinstance(receiver, cst.Subscript)
                and self._is_container(receiver.value)
                or self._container_attribute(receiver)
            ):
                return True
            if method in DICT_READING_METHODS and self._is_dict(receiver):
                return True  # (what they hand back holds what the dict holds)
            if method in TENSOR_FACTORY_METHODS:
                return True  # only a tensor has them, and the dataflow models them as new leaves
        return False

    def _names_a_tensor(self, expression: cst.BaseExpression) -> bool:
        """A tensor by the analysis (``FileAnalysis._is_tensor``), a parameter or a leaf the file
        made, an operation on one, or what a tensor's method or item gives."""
        names = self.analysis.names
        if self.analysis._is_tensor(expression) or names.key(expression) in names.leaf_tensors:
            return True
        read = self.analysis.value_read(expression) if isinstance(expression, (cst.Name, cst.Attribute)) else None
        if read is not None and read.structure is TENSOR:
            return True  # (``self.data`` the program assigned a tensor)
        if isinstance(expression, cst.Call) and self.analysis.returns_a_tensor(expression):
            return True  # (``solution(x).view(-1, 1)`` of the file's function that returns one)
        if isinstance(expression, cst.BinaryOperation):
            return self._names_a_tensor(expression.left) or self._names_a_tensor(expression.right)
        if isinstance(expression, cst.UnaryOperation):
            return self._names_a_tensor(expression.expression)
        if isinstance(expression, cst.Comparison):
            return self._names_a_tensor(expression.left) or any(self._names_a_tensor(c.comparator) for c in expression.comparisons)
        if isinstance(expression, cst.Attribute) and names.is_parameter(expression, self.analysis.class_name_of(expression)):
            return True
        if isinstance(expression, cst.Attribute) and expression.attr.value in TENSOR_ATTRIBUTES and self._names_a_tensor(expression.value):
            return True
        if self._tensor_attribute(expression):
            return True
        if isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute):
            method, receiver = expression.func.attr.value, expression.func.value
            if method in COPYING_METHODS and self._may_hold_a_graph(receiver):
                return True  # only a tensor holds a graph and has them
            return method not in TENSOR_HOOK_METHODS and self._names_a_tensor(receiver)
        if isinstance(expression, cst.Subscript) and isinstance(expression.value, cst.Name):
            value = self.analysis.value_read(expression.value)
            if value is not None and _holds_tensors(value.structure):
                return True
        return isinstance(expression, cst.Subscript) and self._names_a_tensor(expression.value)

    def _tensor_attribute(self, expression: cst.BaseExpression) -> bool:
        """``self.state`` where every assignment of the file to that attribute is ``None`` or a tensor
        (by ``_names_a_tensor``, one level: a value read from another such attribute is not followed)."""
        values = self._values_of_self_attribute(expression)
        return bool(values) and all(
            (isinstance(value, cst.Name) and value.value == "None")
            or (dotted_name(value) != dotted_name(expression) and self.analysis._is_tensor(value))
            for value in values
        )

    def _values_of_self_attribute(self, expression: cst.BaseExpression) -> list[cst.BaseExpression]:
        """Every value the file assigns to ``self.X`` when ``expression`` is ``self.X``, else none."""
        name = dotted_name(expression)
        if name is None or not name.startswith("self.") or name.count(".") != 1:
            return []
        return [
            assign.value
            for assign in self.analysis.tree.findall(self.analysis.module, cst.Assign)
            if any(dotted_name(target.target) == name for target in assign.targets)
        ]

    def _container_attribute(self, expression: cst.BaseExpression) -> bool:
        """``self.losses`` where every assignment of the file to that attribute is a list, dict or set
        display or comprehension."""
        values = self._values_of_self_attribute(expression)
        displays = (cst.List, cst.Dict, cst.Set, cst.ListComp, cst.DictComp, cst.SetComp)
        return bool(values) and all(isinstance(value, displays) for value in values)

    def _may_hold_a_graph(self, expression: cst.BaseExpression) -> bool:
        values = (self.analysis.value_read(name) for name in self.analysis.tree.findall(expression, cst.Name))
        return any(value is not None and value.graph for value in values)

    def _is_container(self, expression: cst.BaseExpression) -> bool:
        return self.analysis._is_container(expression)

    def _is_dict(self, expression: cst.BaseExpression) -> bool:
        """A dict the program built with constant keys (``dicts``)."""
        value = self.analysis.value_read(expression) if isinstance(expression, cst.Name) else None
        return value is not None and isinstance(value.structure, DictOf)

    def _touches_autograd(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` may hand over or give back something of the program's autograd state: a
        value that may hold a graph, a tensor or a container of them, a module, an optimizer, a
        framework object (by the dataflow's *may* answers)."""
        analysis, names = self.analysis, self.analysis.names
        class_name = analysis.class_name_of(node)
        assigned = analysis.value_assigned(node) if isinstance(node, cst.BaseExpression) else None
        if assigned is not None and (assigned.graph or assigned.structure is TENSOR):
            return True
        keywords = {id(arg.keyword) for arg in analysis.tree.findall(node, cst.Arg) if arg.keyword is not None}
        for expression in [*analysis.tree.findall(node, cst.Name), *analysis.tree.findall(node, cst.Attribute)]:
            if id(expression) in keywords:
                continue  # (``model=`` names a parameter of the callee, not a value of the program)
            dotted = dotted_name(expression)
            if names.module(expression, class_name) is not None or names.framework(expression) is not None:
                return True
            if dotted is not None and (
                dotted in names.optimizers or names.key(expression) in names.leaf_tensors or names.key(expression) in names.objects
            ):
                return True
            if isinstance(expression, cst.Attribute) and names.is_parameter(expression, class_name):
                return True
            if isinstance(expression, (cst.Name, cst.Attribute)):
                value = analysis.value_read(expression)
                if value is not None and (value.graph or value.backwarded or value.structure is TENSOR or _holds_tensors(value.structure)):
                    return True
        return False

    def _method_taken(self, attribute: cst.Attribute) -> bool:
        """``later = loss.backward``: a backward or an update taken as a value, not called. Not an
        attribute written (``self.step = 0``, ``self.step += 1``: a bound method added to 1 would
        raise), nor one read on ``self`` in a class of no base that writes it itself (a trainer's
        counter ``self.step``: the instance's own attribute hides any method of that name)."""
        name = attribute.attr.value
        if name not in ("backward", "step", "manual_backward"):
            return False
        parent = self.analysis.tree.parent(attribute)
        if isinstance(parent, cst.Call) and parent.func is attribute:
            return False
        if isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)) and parent.target is attribute:
            return False
        return not self._own_data_attribute(attribute)

    def _own_data_attribute(self, attribute: cst.Attribute) -> bool:
        """``self.<name>`` in a method of a class of the file with no base, whose methods write
        ``self.<name>`` and define no method ``<name>``."""
        tree = self.analysis.tree
        if not (isinstance(attribute.value, cst.Name) and attribute.value.value == "self"):
            return False
        node: cst.CSTNode | None = attribute
        while node is not None and not isinstance(node, cst.ClassDef):
            node = tree.parent(node)
        if node is None or any(not (isinstance(base.value, cst.Name) and base.value.value == "object") for base in node.bases):
            return False
        name = attribute.attr.value
        if any(isinstance(statement, cst.FunctionDef) and statement.name.value == name for statement in node.body.body):
            return False
        written = [*tree.findall(node, cst.AssignTarget), *tree.findall(node, cst.AugAssign), *tree.findall(node, cst.AnnAssign)]
        return any(dotted_name(target.target) == f"self.{name}" for target in written)

    def _nested(self, function: cst.FunctionDef) -> bool:
        parent = self.analysis.tree.parent(function)
        while parent is not None:
            if type(parent) is cst.FunctionDef or type(parent) is cst.Lambda:
                return True
            parent = self.analysis.tree.parent(parent)
        return False


def _is_slice(target: cst.Subscript) -> bool:
    return any(isinstance(element.slice, cst.Slice) for element in target.slice)


def _holds_tensors(structure: Structure) -> bool:
    if isinstance(structure, ListOf):
        return structure.item is TENSOR or _holds_tensors(structure.item)
    if isinstance(structure, TupleOf):
        return any(item is TENSOR or _holds_tensors(item) for item in structure.items)
    return False


def _torch_or_local(info: ModuleInfo) -> bool:
    """A module gradfix models when called: a torch.nn class, a class of the file (read), or a class
    of another module of the project whose building and calling runs only code gradfix read."""
    if info.project is not None:
        return info.project.reads_modelled_code
    return info.is_local or bool(info.class_name)
