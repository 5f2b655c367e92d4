"""Which values carry an autograd graph, where it was built, and what crosses loop boundaries.

An abstract interpreter walks every scope (the module body and each function body) once, statement
by statement, keeping an environment of ``Value``s. Branches are joined; a loop body is walked until
its head values stop changing (two or three passes), so the values that reach an iteration from the
previous one are known. Methods of ``nn.Module`` subclasses are walked the same way with one call as
the "iteration": attributes stored on ``self`` are what one call hands to the next.

The interpreter records the facts the rules need: every backward site with the value it backwards
and its enclosing loops, every loop with the values entering it and leaving an iteration, and the
loops each statement sits in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import reduce
from itertools import chain, compress, repeat
from operator import attrgetter, is_, is_not, not_
from typing import Iterable, Iterator, Mapping, Sequence, Union

import libcst as cst

from ..frameworks import (
    BACKWARD_METHODS,
    CALLED_AS_FORWARD,
    FUNCTION_APIS,
    GRAD_MODE_SWITCH,
    LIGHTNING_NO_GRAD_HOOKS,
    NO_GRAD_CONTEXTS,
    READING_LOGGERS,
    SCALED_LOSS_CONTEXTS,
    BackwardApi,
    Tristate,
)
from ..summaries import ExportedSummary, ProjectSummaries
from . import backward_calls
from .assignments import APPENDING_METHODS, BOOKKEEPING_METHODS, assigned_names, is_inplace_method, local_names, read_names, target_names
from .syntax import is_grad, method_called
from .torch_names import ModuleInfo, TorchNames, creates_parameter, dotted_name
from .tree import SyntaxTree
from .values import (
    CONSTANT,
    DISTRIBUTION,
    EMPTY,
    LEAF,
    NONE,
    NOTHING,
    NUMBER,
    TENSOR,
    UNKNOWN,
    Carried,
    Element,
    ListOf,
    Origin,
    RecordOf,
    Source,
    Structure,
    TupleOf,
    Value,
    combine,
)

Env = dict[str, Value]
LoopNode = Union[cst.For, cst.While, cst.FunctionDef]

_MAX_PASSES = 4
_DETACHING_METHODS = {"detach", "item", "tolist", "numpy", "size", "dim", "numel", "nelement", "data_ptr", "ndimension"}
# Tensor methods and torch functions whose result has no autograd history: comparisons, indices,
# tests and integer casts (``torch.eq(pred, y).sum()`` counts correct answers).
_NON_DIFFERENTIABLE = {
    *("eq", "ne", "lt", "le", "gt", "ge", "isclose", "isnan", "isinf", "isfinite", "logical_and", "logical_or", "logical_not"),
    *("argmax", "argmin", "argsort", "nonzero", "count_nonzero", "bucketize", "searchsorted", "multinomial"),
    *("long", "int", "bool", "short", "byte", "char"),
}
# Tensor methods that make a new tensor of the receiver's dtype and device, with no history.
_FACTORY_METHODS = {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}
# (``config``: a Hugging Face model's configuration object.)
_NON_GRAPH_ATTRIBUTES = {"data", "grad", "shape", "dtype", "device", "requires_grad", "is_leaf", "grad_fn", "ndim", "config"}
# Libraries of plain numbers: what they return carries no graph (and a graph cannot enter numpy).
_NUMBER_LIBRARIES = ("math.", "numpy.", "random.", "statistics.", "time.")
# (not ``round``: ``round(tensor)`` is a tensor with a graph)
_NON_GRAPH_BUILTINS = {"float", "int", "bool", "str", "len", "print", "range", "repr", "format", "isinstance", "id", "hash"}
# A torch distribution's samples carry no graph (``rsample`` is the differentiable one).
_SAMPLING_METHODS = {"sample", "sample_n", "enumerate_support"}
_CONSTANT_EXPRESSIONS = (cst.SimpleString, cst.ConcatenatedString, cst.Lambda, cst.Ellipsis)
_CONTAINER_BUILTINS = {"tuple", "list", "sorted", "reversed", "sum", "max", "min"}
_REDUCING_BUILTINS = {"sum", "max", "min"}
# Reductions that return their values and the values' indices (``values, indices = x.topk(k)``;
# ``max``, ``min`` and ``median`` only when given a dimension): the indices carry no graph.
_WITH_INDICES = {"topk", "sort", "kthvalue", "mode", "cummax", "cummin"}
_WITH_INDICES_GIVEN_A_DIMENSION = {"max", "min", "median"}
# torch functions that return a (named) tuple of tensors, whatever their arguments, by length.
_TUPLE_FUNCTIONS = {
    **{f"torch.{name}": 2 for name in _WITH_INDICES},
    "torch.linalg.eigh": 2,
    "torch.linalg.eig": 2,
    "torch.linalg.qr": 2,
    "torch.linalg.slogdet": 2,
    "torch.linalg.svd": 3,
    "torch.linalg.inv_ex": 2,
    "torch.linalg.cholesky_ex": 2,
    "torch.aminmax": 2,
    "torch.std_mean": 2,
    "torch.var_mean": 2,
    "torch.frexp": 2,
}
_CREATION_FUNCTIONS = {
    "zeros",
    "ones",
    "empty",
    "full",
    "rand",
    "randn",
    "randint",
    "randperm",
    "arange",
    "linspace",
    "logspace",
    "eye",
    "tensor",
    "as_tensor",
    "from_numpy",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "rand_like",
    "randn_like",
    "randint_like",
    "manual_seed",
    "Variable",  # torch.autograd.Variable(t): a new leaf sharing t's data, without its history
}
_MAX_SUMMARY_ROUNDS = 5
# Operations whose backward certainly needs a tensor saved in the forward (their input or output),
# so that a backward through them frees it and a second one raises: the must-answer beside
# ``_saves_tensors``' may-answer. A layer of torch.nn with parameters saves its input too.
_SAVING_FOR_CERTAIN = frozenset(
    {"matmul", "mm", "bmm", "mv", "einsum", "exp", "log", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "elu", "silu",
     "softmax", "log_softmax", "sin", "cos", "linear", "conv1d", "conv2d", "conv3d", "mse_loss", "l1_loss", "cross_entropy", "nll_loss",
     "binary_cross_entropy", "binary_cross_entropy_with_logits", "smooth_l1_loss", "kl_div", "layer_norm", "batch_norm", "norm"}
)  # fmt: skip
# Operations whose backward needs no tensor saved in the forward (sums, means, additions, and
# what only moves, copies or joins values): a backward frees nothing of a graph built of these
# from leaves, and a second backward through it runs.
_SAVING_NOTHING_METHODS = {
    "sum",
    "mean",
    "neg",
    "view",
    "view_as",
    "reshape",
    "reshape_as",
    "flatten",
    "squeeze",
    "unsqueeze",
    "expand",
    "expand_as",
    "t",
    "transpose",
    "permute",
    "contiguous",
    "clone",
}
_SAVING_NOTHING_FUNCTIONS = {
    f"torch.{name}"
    for name in ("sum", "mean", "add", "sub", "neg", "cat", "stack", "flatten", "reshape", "squeeze", "unsqueeze", "transpose", "permute", "clone")
}


@dataclass(eq=False)
class Scope:
    node: Union[cst.Module, cst.FunctionDef]
    class_name: str | None = None
    in_module_class: bool = False  # a method of an nn.Module other than __init__: walked as repeated calls


@dataclass(eq=False)
class Loop:
    """A ``for``/``while`` loop, or a method of an nn.Module whose calls act as iterations."""

    node: LoopNode
    parent: "Loop | None"
    scope: Scope
    carried_names: frozenset[str]
    entry: Env = field(default_factory=dict)  # values before the first iteration
    back_edge: Env = field(default_factory=dict)  # values at the end of an iteration
    returned: Value = NOTHING  # for methods: what a call returns
    freed_at_entry: frozenset[str] = frozenset()  # names holding a freed graph when the loop starts

    @property
    def is_call(self) -> bool:
        return isinstance(self.node, cst.FunctionDef)

    @property
    def body(self) -> cst.BaseSuite:
        return self.node.body

    def encloses(self, other: "Loop | None") -> bool:
        while other is not None:
            if other is self:
                return True
            other = other.parent
        return False


@dataclass(eq=False)
class BackwardSite:
    """A call that backwards a graph, in any of the shapes of ``frameworks``' backward rows."""

    call: cst.Call
    statement: cst.CSTNode  # the statement line the call is in
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
        return backward_calls.with_tensor(self.api, self.call, tensor)


@dataclass(frozen=True)
class FunctionSummary:
    """What calling a function or method of the checked code does to graphs."""

    name: str
    parameters: tuple[str, ...]  # as callers pass them (``self`` left out of methods)
    backwarded: tuple[BackwardSite, ...]  # backwards of a parameter, on every path through the body
    returned: Value  # what a call returns; ``backwarded`` says it was already backwarded inside
    # The graphs a call leaves where its caller sees them, or that a backward inside it freed there:
    # on ``self`` for a method (``self.reg_loss += decay * reg``), in the module's names for a
    # module-level function (``experience.extend(...)``), by name (parameters it keeps are leaves:
    # nothing frees them).
    left_for_caller: Mapping[str, Value] = field(default_factory=dict)
    # What each item holds, when every return writes out a tuple of the same length.
    returned_items: tuple[Value, ...] | None = None
    # What a call returns when it passes True or False for a parameter some return's path tested.
    returned_given: Mapping[tuple[str, bool], Value] = field(default_factory=dict)
    items_given: Mapping[tuple[str, bool], tuple[Value, ...] | None] = field(default_factory=dict)  # (as ``returned_items``)
    literal_defaults: Mapping[str, bool] = field(default_factory=dict)  # parameters that default to True or False

    @property
    def has_effect(self) -> bool:
        return bool(self.backwarded or self.returned.backwarded)

    def backward_api(self, site: BackwardSite) -> BackwardApi:
        name = site.tensor.value
        return BackwardApi.of_function(self.name, self.parameters.index(name), name, site.api, site.retain_graph)

    def exported(self, backward_sites: Mapping[cst.Call, BackwardSite]) -> ExportedSummary:
        returned = [backward_sites[call] for call in self.returned.backwarded]
        return ExportedSummary(
            self.name,
            self.parameters,
            tuple((site.tensor.value, site.api, site.retain_graph) for site in self.backwarded),
            (returned[0].api, returned[0].retain_graph) if returned else None,
        )


class _Terminated(Exception):
    """Control left the current block (return, break, continue or raise)."""


@dataclass
class _Frame:
    loop: Loop | None
    continues: list[Env] = field(default_factory=list)
    breaks: list[Env] = field(default_factory=list)
    returns: list[Env] = field(default_factory=list)
    returned: list[Value] = field(default_factory=list)
    # Each return's items, when it returns a tuple written out (``return loss, acc.item()``); None
    # for a return of anything else.
    returned_items: list[list[Value] | None] = field(default_factory=list)
    # For each return, the parameters whose truth its path tested (``if return_latents: return y, z``).
    returned_truths: list[dict[str, bool]] = field(default_factory=list)
    yielded: list[Value] = field(default_factory=list)

    def returned_given(self) -> dict[tuple[str, bool], Value]:
        """What a call returns when it passes a parameter that one of the returns' paths tested as
        True or as False: the returns that path may take."""
        given: dict[tuple[str, bool], Value] = {}
        for parameter in dict.fromkeys(name for truths in self.returned_truths for name in truths):
            for truth in (True, False):
                taken = [value for value, truths in zip(self.returned, self.returned_truths) if truths.get(parameter, truth) is truth]
                if taken:
                    given[(parameter, truth)] = _joined(taken)
        return given

    def items_returned(self, given: tuple[str, bool] | None = None) -> tuple[Value, ...] | None:
        """What each position of the tuple every return writes out may hold; None unless each
        return writes one of the same length, or returns a value proved to hold no graph, whose
        items hold none (``return action.detach().numpy()`` beside ``return action, log_prob``),
        and nothing is yielded. ``given``: of the returns a call passing that parameter's truth
        may take (as ``returned_given``)."""
        if self.yielded or not self.returned_items:
            return None
        parameter, truth = given or ("", True)
        taken = [
            (items, value)
            for items, value, truths in zip(self.returned_items, self.returned, self.returned_truths)
            if truths.get(parameter, truth) is truth
        ]
        if any(items is None and not value.graphless for items, value in taken):
            return None
        lengths = {len(items) for items, _ in taken if items is not None}
        if len(lengths) != 1:
            return None
        length = lengths.pop()
        returned = [items if items is not None else [CONSTANT] * length for items, _ in taken]
        return tuple(_joined([items[position] for items in returned]) for position in range(length))

    def items_given(self) -> dict[tuple[str, bool], tuple[Value, ...] | None]:
        """``items_returned`` for each truth of a parameter that a return's path tested."""
        return {key: self.items_returned(key) for key in self.returned_given()}


def join_envs(envs: Sequence[Env | None]) -> Env | None:
    """Where paths meet; a name missing on one of them may be unbound there. A name that holds the
    very same value on every path keeps it (and with it, the names it is an alias of): most names
    of a long script are untouched by any one loop or branch, and joining each would cost as much
    as the rest of the analysis."""
    live = [env for env in envs if env is not None]
    if not live:
        return None
    joined = dict(live[0])
    for env in live[1:]:
        for name in _names_to_join(joined, env):
            held, value = joined.get(name), env.get(name)
            if value is None:
                joined[name] = replace(held, unbound=True)
            elif held is None:
                joined[name] = replace(value, unbound=True)
            else:
                joined[name] = join_values(held, value)
    return joined


def join_values(held: Value, value: Value) -> Value:
    """What a name that two meeting paths both bind holds: the very same value is kept, except None
    (None joined with itself: may be None)."""
    return held if held is value and held.structure is not NONE else held.join(value)


def _names_to_join(joined: Env, env: Env) -> Iterable[str]:
    """The names whose join differs from what ``joined`` holds: those missing on one side, held as
    different objects, or holding None (None joined with itself: may be None). Paths copied from
    one environment keep its names in its order, and add new ones after them; the values of the
    names they share are then compared by position, in C, as a long script's module body meets
    thousands of times and changes a few names each time."""
    shared = min(len(joined), len(env))
    names, other_names = list(joined), list(env)
    if names[:shared] != other_names[:shared]:
        every_name = dict.fromkeys(chain(names, other_names))
        return [name for name in every_name if joined.get(name) is not env.get(name) or env[name].structure is NONE]
    changed = compress(names, map(is_not, joined.values(), env.values()))
    nones = compress(other_names, map(is_, map(_STRUCTURE, env.values()), repeat(NONE)))
    # (in order: the names new to ``joined`` are added in the order the path assigned them)
    return dict.fromkeys(chain(changed, nones, names[shared:], other_names[shared:]))


_STRUCTURE = attrgetter("structure")
_GRAPH = attrgetter("graph")


class DataflowAnalysis:
    """Runs the interpreter over a whole module and keeps what it found."""

    def __init__(self, module: cst.Module, names: TorchNames, imported: ProjectSummaries | None, tree: SyntaxTree) -> None:
        self.names = names
        self._tree = tree
        self._module = module
        self.imported = imported or {}
        # Function summaries, by function name or (class, method); a call met before the function's
        # definition sees the summary of the previous round, so rounds repeat until they agree.
        self.summaries: dict[object, FunctionSummary] = {}
        # What each local class's constructor, function and method was called with in this file, by
        # parameter (by class name, function name or (class, method)): the body is walked with it,
        # so what it keeps, returns or backwards carries the callers' graphs (seen a round late,
        # as above). Only graph-carrying arguments are kept: a parameter the file never passes a
        # graph still holds what the analysis cannot see.
        self.arguments: dict[object, Env] = {}
        # The methods of the file's plain classes (not modules), which share state through ``self``.
        self._plain_methods = {
            (cls.name.value, method.name.value): method
            for cls in tree.findall(module, cst.ClassDef)
            if cls.name.value not in names.module_classes
            for method in cls.body.body
            if isinstance(method, cst.FunctionDef) and method.name.value != "__init__"
        }
        self._module_functions = {statement.name.value: statement for statement in module.body if isinstance(statement, cst.FunctionDef)}
        self._constructor_parameters = {
            cls.name.value: [p.name.value for p in init.params.params[1:]]
            for cls in tree.findall(module, cst.ClassDef)
            for init in cls.body.body
            if isinstance(init, cst.FunctionDef) and init.name.value == "__init__" and init.params.params
        }
        # Every attribute chain the module names, under each of its prefixes (``model`` and
        # ``model.rnn`` for ``model.rnn.hidden``): assigning ``model`` forgets what was known of the
        # chains under it without scanning every name of the environment.
        self._attributes_of: dict[str, list[str]] = {}
        self._globals_declared: dict[cst.CSTNode, frozenset[str]] = {}
        self._locals_of: dict[cst.FunctionDef, set[str]] = {}  # (asked at every call of the file's functions)
        self._named_by: dict[cst.FunctionDef, list[str]] = {}  # the names and chains a function reads of its scope's
        for attribute in dict.fromkeys(dotted_name(a) for a in tree.findall(module, cst.Attribute)):
            parts = attribute.split(".") if attribute is not None else ()
            for end in range(1, len(parts)):
                self._attributes_of.setdefault(".".join(parts[:end]), []).append(attribute)
        self.backward_sites: dict[cst.Call, BackwardSite] = {}
        for _ in range(_MAX_SUMMARY_ROUNDS):
            known = {key for key, summary in self.summaries.items() if summary.has_effect}
            arguments = {callee: _graph_facts(env) for callee, env in self.arguments.items()}
            self._run_module(module)
            if self._saw_final_facts():
                break
            if {key for key, summary in self.summaries.items() if summary.has_effect} == known and arguments == {
                callee: _graph_facts(env) for callee, env in self.arguments.items()
            }:
                break

    def _saw_final_facts(self) -> bool:
        """Whether another round would repeat this one: every call made before its function's
        definition got the summary the round ended with (none, when nothing defines it), and
        every body was walked with the arguments its callers ended up passing. Most files define
        their functions and classes before they call them, and take one round."""
        return (
            all(_summary_facts(self.summaries.get(key)) == _summary_facts(seen) for key, seen in self._summaries_before_definition.items())
            and all(_graph_facts(self.arguments.get(callee, {})) == facts for callee, facts in self._arguments_read)
            and all(self._walked_by(key, self.backward_sites) == walked for key, walked in self._sites_read_before_definition)
        )

    def _run_module(self, module: cst.Module) -> None:
        # A function defined after its caller has its backwards walked later in the round: the
        # caller sees those of the previous round, as it sees that round's summary.
        self._sites_of_last_round = self.backward_sites
        self.backward_sites = {}
        self.loops: dict[LoopNode, Loop] = {}
        self.statement_loops: dict[cst.CSTNode, tuple[Loop, ...]] = {}
        self.forward_results: dict[str, Structure] = {}  # what calling a local nn.Module returns
        # Local module classes whose methods keep a graph on ``self`` for the next call.
        self.stateful_classes: set[str] = set()
        self.returned: dict[cst.FunctionDef, Value] = {}
        self.returned_items: dict[cst.FunctionDef, tuple[Value, ...] | None] = {}
        self.returned_given: dict[cst.FunctionDef, dict[tuple[str, bool], Value]] = {}
        self.items_given: dict[cst.FunctionDef, dict[tuple[str, bool], tuple[Value, ...] | None]] = {}
        self._tuple_items: dict[cst.Tuple, list[Value]] = {}  # each tuple written out, by its items
        # A call of the file's function that returns a tuple written out, with that function's summary.
        # What each item of a call's tuple result holds, where the callee says it: the returns of
        # a function or forward of the file, or a torch.nn module's outputs.
        self._call_items: dict[cst.Call, tuple[Value, ...]] = {}
        self._read_callees: dict[cst.Call, object] = {}  # calls read as any other, of the file's functions
        # What a function of the file returns in the walk with what its callers pass it.
        self.returned_with_arguments: dict[object, Value] = {}
        self._differentiable_outputs: set[cst.CSTNode] = set()  # calls of torch.nn modules returning tuples
        self.escaped: dict[cst.CSTNode, set[Origin]] = {}  # per scope: graphs stored, returned or handed away
        self.read_values: dict[cst.Name | cst.Attribute, Value] = {}  # what each name (attribute) read held (in a loop: its last pass)
        # Right-hand sides, and what ``+=`` adds or ``.append(...)`` stores, as evaluated.
        self.assigned_values: dict[cst.BaseExpression, Value] = {}
        self.graph_arguments: dict[str, bool] = {}  # function -> whether a call in this file passes it a graph
        self.repeated_functions: set[str] = set()  # functions and methods called in a loop of this file
        self.no_grad_statements: set[cst.CSTNode] = set()  # run under no_grad / inference_mode
        self.calls_returning_freed: set[cst.Call] = set()  # calls of the file's functions that free what they return
        self.constructions: dict[str, list[tuple[Loop, ...]]] = {}  # local class -> loops around each construction
        # What each local class's constructor leaves on ``self``: read from outside as ``model.reg_loss``.
        self._constructed: dict[str, Env] = {}
        self._graph_nodes_kept: dict[frozenset[Source], tuple[frozenset[Origin], tuple[tuple[Loop, Env, Env], ...]]] = {}
        # What this round read of the previous round's facts (``_saw_final_facts``).
        self._summaries_before_definition: dict[object, FunctionSummary | None] = {}
        self._summarized: set[object] = set()
        self._arguments_read: list[tuple[object, dict[str, tuple]]] = []
        self._sites_read_before_definition: list[tuple[object, dict[cst.Call, frozenset[Origin]]]] = []
        self._scope = Scope(module)
        self._loops: list[Loop] = []
        self._comprehension_names: frozenset[str] = frozenset()  # bound by the comprehensions being evaluated
        self._module_items: set[str] = set()  # loop targets naming the items of a module container
        # The slots ``x[i]`` written since ``x`` and ``i`` last changed, by ``x`` and by ``i``: the env
        # keeps each one's value under the key ``x[i]``.
        self._slots: dict[str, set[str]] = {}
        self._literal_slots: set[str] = set()  # the slots picked by a literal key (``x["a"]``, ``x[0]``)
        self._returned_shapes: dict[cst.Call, Structure] = {}  # calls of the file's functions read as any call
        self._frames: list[_Frame] = []
        self._statement: cst.CSTNode = module
        self._no_grad = 0
        self._run_scope(self._scope, module.body, {})

    # scopes ----------------------------------------------------------------------------------
    def _run_scope(self, scope: Scope, body: Sequence[cst.CSTNode], env: Env) -> Env | None:
        """Walks one scope; returns the environment at its end (None for a method walked as
        repeated calls, or when the end is unreachable)."""
        saved = (self._scope, self._loops, self._frames, self._no_grad)
        self._scope, self._loops, self._frames = scope, [], [_Frame(None)]
        # A function's body runs where it is called, not under the blocks around its definition.
        self._no_grad = int(
            isinstance(scope.node, cst.FunctionDef)
            and (
                any(self.names.qualify(_decorator_callee(d)) in NO_GRAD_CONTEXTS for d in scope.node.decorators)
                or scope.class_name in self.names.lightning_classes
                and scope.node.name.value in LIGHTNING_NO_GRAD_HOOKS
            )
        )
        try:
            if isinstance(scope.node, cst.FunctionDef) and scope.in_module_class:
                self._run_loop(scope.node, env, iteration=lambda head: self._exec_body(scope.node.body, head))
                self.returned[scope.node] = self.loops[scope.node].returned
                return None
            end = self._exec_block(body, env)
            if isinstance(scope.node, cst.FunctionDef):
                frame = self._frames[0]
                end = join_envs([end, *frame.returns])  # where the call hands back to its caller
                # A generator function's call is an iterable of what it yields.
                self.returned[scope.node] = (
                    _part(_joined(frame.yielded), ListOf(_joined(frame.yielded).structure)) if frame.yielded else _joined(frame.returned)
                )
                self.returned_items[scope.node] = frame.items_returned()
                self.returned_given[scope.node] = frame.returned_given()
                self.items_given[scope.node] = frame.items_given()
            return end
        finally:
            self._scope, self._loops, self._frames, self._no_grad = saved

    def _define_function(self, node: cst.FunctionDef, class_name: str | None = None, env: Env | None = None) -> Env | None:
        # Calls of a module's methods act as iterations; construction happens once.
        called_repeatedly = class_name in self.names.module_classes and node.name.value != "__init__"
        start = dict(env or {})
        callee = _callee_key(node, class_name)
        arguments = self.arguments.get(callee, {})
        self._arguments_read.append((callee, _graph_facts(arguments)))
        constructor = node.name.value == "__init__"
        if constructor:
            start.update(arguments)  # what it keeps on self, later calls read
        # A parameter whose .grad the function reads is a tensor that requires grad.
        with_gradients = {dotted_name(a.value) for a in self._tree.findall(node.body, cst.Attribute, is_grad)}
        for parameter in node.params.params:
            if parameter.name.value in with_gradients:
                start[parameter.name.value] = LEAF
        scope = Scope(node, class_name, called_repeatedly)
        end = self._run_scope(scope, node.body.body, dict(start))
        if called_repeatedly and node.name.value == "forward":
            self.forward_results[class_name] = self.loops[node].returned.structure
        if called_repeatedly and _reads_what_the_last_call_kept(self.loops[node]):
            self.stateful_classes.add(class_name)
        # The summary says what the body does of its own (what it builds from parameters it reads,
        # what it backwards); the body's facts are those of a walk with what callers pass it.
        self._summarize(node, class_name)
        if arguments and not constructor:
            start = {**start, **arguments}
            end = self._run_scope(scope, node.body.body, dict(start))
            if any(name in arguments for name in self.summaries[callee].parameters):
                self.returned_with_arguments[callee] = self.returned.get(node, NOTHING)
        left = self.loops[node].back_edge if called_repeatedly and node in self.loops else end
        if class_name is not None and not constructor:
            self._leave_for_caller(node, class_name, start, left, lambda name: name.startswith("self."))
        elif class_name is None and self._module_functions.get(node.name.value) is node:
            local = self._local_names(node)
            self._leave_for_caller(node, class_name, start, left, lambda name: name.split(".")[0] not in local)
        return end

    def _leave_for_caller(self, node: cst.FunctionDef, class_name: str | None, start: Env, left: Env | None, shared) -> None:
        """Records, in the function's summary, the graphs a call leaves in the ``shared`` names its
        caller sees: those it writes, built from graphs, and those its backwards freed."""
        if left is None:
            return
        written = assigned_names(node.body, tree=self._tree)
        kept = {
            name: value
            for name, value in left.items()
            if shared(name) and (name in written and value.origins or value.freed and name in start and not start[name].freed)
        }
        key = _callee_key(node, class_name)
        self.summaries[key] = replace(self.summaries[key], left_for_caller=kept)

    def _summarize(self, node: cst.FunctionDef, class_name: str | None) -> None:
        parameters = [p.name.value for p in node.params.params]
        static = any(_decorator_callee(d).value == "staticmethod" for d in node.decorators if isinstance(_decorator_callee(d), cst.Name))
        if class_name is not None and parameters and not static:
            parameters = parameters[1:]  # self
        sites = (self.backward_sites.get(call) for call in self._tree.findall(node, cst.Call))  # not all the file's
        backwarded = tuple(
            site
            for site in sites
            if site is not None
            and site.scope.node is node
            and isinstance(site.tensor, cst.Name)
            and site.tensor.value in parameters
            and not site.loops
            and self._unconditional(site.statement, node)
        )
        name = node.name.value if class_name is None else f"{class_name}.{node.name.value}"
        defaults = {
            p.name.value: p.default.value == "True"
            for p in node.params.params
            if isinstance(p.default, cst.Name) and p.default.value in ("True", "False")
        }
        summary = FunctionSummary(
            name,
            tuple(parameters),
            backwarded,
            self.returned.get(node, NOTHING),
            returned_items=self.returned_items.get(node),
            returned_given=self.returned_given.get(node, {}),
            items_given=self.items_given.get(node, {}),
            literal_defaults=defaults,
        )
        key = node.name.value if class_name is None else (class_name, node.name.value)
        self.summaries[key] = summary
        self._summarized.add(key)

    def _summary(self, key: object) -> FunctionSummary | None:
        summary = self.summaries.get(key)
        if key not in self._summarized:
            self._summaries_before_definition.setdefault(key, summary)
        return summary

    @staticmethod
    def _unconditional(statement: cst.CSTNode, function: cst.FunctionDef) -> bool:
        return any(s is statement for s in function.body.body)

    def _define_class(self, node: cst.ClassDef) -> None:
        """Methods start from the attributes ``__init__`` leaves on the instance."""
        methods = [s for s in node.body.body if isinstance(s, cst.FunctionDef)]
        constructor = next((f for f in methods if f.name.value == "__init__"), None)
        constructed: Env = {}
        if constructor is not None:
            end = self._define_function(constructor, node.name.value) or {}
            constructed = {name: value for name, value in end.items() if name.startswith("self.")}
        self._constructed[node.name.value] = constructed
        for statement in node.body.body:
            if isinstance(statement, cst.FunctionDef) and statement is not constructor:
                self._define_function(statement, node.name.value, constructed)
            elif isinstance(statement, cst.ClassDef):
                self._define_class(statement)

    # blocks and statements -------------------------------------------------------------------
    def _exec_body(self, suite: cst.BaseSuite, env: Env) -> Env | None:
        return self._exec_block(suite.body, env)

    def _exec_block(self, statements: Sequence[cst.CSTNode], env: Env | None) -> Env | None:
        for statement in statements:
            if env is None:
                break
            try:
                env = self._exec_statement(statement, env)
            except _Terminated:
                env = None
        return env

    def _exec_statement(self, statement: cst.CSTNode, env: Env) -> Env | None:
        if isinstance(statement, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            self._statement = statement
            self.statement_loops[statement] = tuple(reversed(self._loops))
            if self._no_grad:
                self.no_grad_statements.add(statement)
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                self._statement = statement
                env = self._exec_small(small, env)
            return env
        if isinstance(statement, cst.BaseSmallStatement):
            return self._exec_small(statement, env)
        if isinstance(statement, cst.If):
            return self._exec_if_chain(statement, env)
        if isinstance(statement, cst.For):
            items = self._eval(statement.iter, env)
            # What a data loader or an unknown iterable yields is data; a list of losses, the items
            # of a dict of features, or the rows of a tensor, yield graphs.
            known = (
                isinstance(items.structure, (ListOf, TupleOf)) or items.structure is TENSOR or method_called(statement.iter) in ("items", "values")
            )
            element = _element_of(items) if known else NOTHING
            # ``for block in self.blocks``: each item of a module container is a module, and
            # calling it a forward through its parameters.
            container = self.names.module(statement.iter, self._scope.class_name)
            modules = {statement.target.value} if container is not None and container.trainable and isinstance(statement.target, cst.Name) else set()

            def iteration(head: Env) -> Env | None:
                self._assign(statement.target, element, head)
                return self._exec_body(statement.body, head)

            self._module_items |= modules
            try:
                after = self._run_loop(statement, env, iteration)
            finally:
                self._module_items -= modules
            for name in self.names.leaves_made_by.get(statement, ()) if after is not None else ():
                held = after.get(name, NOTHING)
                after[name] = held if held.graph else LEAF  # for p in [W, b]: p.requires_grad = True
            return self._exec_else(statement, after)
        if isinstance(statement, cst.While):

            def iteration(head: Env) -> Env | None:
                self._eval(statement.test, head)
                return self._exec_body(statement.body, head)

            after = self._run_loop(statement, env, iteration)
            return self._exec_else(statement, after)
        if isinstance(statement, cst.With):
            no_grad = any(self._is_no_grad(item.item) for item in statement.items)
            for item in statement.items:
                self._eval(item.item, env)
                if item.asname is not None:
                    self._assign(item.asname.name, self._context_value(item.item, env), env)
            self._no_grad += no_grad
            try:
                return self._exec_body(statement.body, env)
            finally:
                self._no_grad -= no_grad
        if isinstance(statement, cst.Try):
            body_env = self._exec_body(statement.body, dict(env))
            handler_start = join_envs([env, body_env]) or env
            ends = [self._exec_body(handler.body, dict(handler_start)) for handler in statement.handlers]
            if statement.orelse is not None and body_env is not None:
                body_env = self._exec_body(statement.orelse.body, body_env)
            joined = join_envs([body_env, *ends])
            if statement.finalbody is not None:
                return self._exec_body(statement.finalbody.body, joined if joined is not None else dict(env))
            return joined
        if isinstance(statement, cst.FunctionDef):
            env[statement.name.value] = NOTHING
            # A module-level function reads the graph-carrying globals defined before it.
            is_global = isinstance(self._scope.node, cst.Module)
            self._define_function(statement, env=self._globals_read(statement, env) if is_global else None)
            return env
        if isinstance(statement, cst.ClassDef):
            env[statement.name.value] = NOTHING
            self._define_class(statement)
            return env
        if isinstance(statement, cst.Match):
            self._eval(statement.subject, env)
            return join_envs([env, *(self._exec_body(case.body, dict(env)) for case in statement.cases)])
        return env

    def _globals_read(self, function: cst.FunctionDef, env: Env) -> Env:
        """The graph-carrying globals of ``env`` that ``function`` names (a name, or an attribute
        chain such as ``model.hidden``): looked up by what it names rather than copied whole, since
        a long script has thousands of globals and hundreds of functions."""
        named = self._named_by.get(function)
        if named is None:
            local = self._local_names(function)
            every = [name.value for name in self._tree.findall(function, cst.Name)]
            every += [dotted_name(attribute) for attribute in self._tree.findall(function, cst.Attribute)]
            named = self._named_by[function] = [name for name in dict.fromkeys(every) if name is not None and name.split(".")[0] not in local]
        return {name: env[name] for name in named if name in env and env[name].graph}

    def _exec_if_chain(self, statement: cst.If, env: Env) -> Env | None:
        """``if``/``elif``/``else``. A chain of two or more tests with no ``else`` that assigns a name
        in every branch is taken to be exhaustive for that name (``if mode == "a": loss = …`` /
        ``elif mode == "b": loss = …``): the value from before the chain does not flow past it."""
        branch_ends: list[Env | None] = []
        bodies: list[cst.BaseSuite] = []
        current: cst.If | None = statement
        start = env
        while current is not None:
            self._eval(current.test, start)
            then_start, start = _narrowed(current.test, start)
            branch_ends.append(self._exec_body(current.body, then_start))
            bodies.append(current.body)
            orelse = current.orelse
            current = orelse if isinstance(orelse, cst.If) else None
            if isinstance(orelse, cst.Else):
                branch_ends.append(self._exec_body(orelse.body, start))
                return join_envs(branch_ends)
        joined = join_envs([*branch_ends, start])
        if joined is None or len(bodies) < 2:
            return joined
        for name in set.intersection(*(assigned_names(body, rebinding_only=True, tree=self._tree) for body in bodies)):
            values = [end[name] for end in branch_ends if end is not None and name in end]
            if values:
                joined[name] = reduce(join_values, values)
        return joined

    def _context_value(self, item: cst.BaseExpression, env: Env) -> Value:
        """What ``with item as name`` binds: apex's ``amp.scale_loss(loss, optimizer)`` yields the
        scaled loss, whose graph is the loss's."""
        if isinstance(item, cst.Call) and item.args and (self.names.qualify(item.func) or "") in SCALED_LOSS_CONTEXTS:
            loss = self._eval(item.args[0].value, env)
            return replace(loss, backwarded=frozenset())
        return NOTHING

    def _exec_else(self, statement: Union[cst.For, cst.While], env: Env | None) -> Env | None:
        if statement.orelse is None or env is None:
            return env
        return self._exec_body(statement.orelse.body, env)

    def _exec_small(self, small: cst.BaseSmallStatement, env: Env) -> Env:
        if isinstance(small, cst.Assign):
            value = self._eval(small.value, env)
            self.assigned_values[small.value] = value
            for target in small.targets:
                self._assign(target.target, value, env, small.value)
        elif isinstance(small, cst.AnnAssign):
            if small.value is not None:
                self._assign(small.target, self._eval(small.value, env), env, small.value)
        elif isinstance(small, cst.AugAssign):
            added = self.assigned_values[small.value] = self._eval(small.value, env)
            value = combine([self._eval(small.target, env), added], self._origin(small))
            self._assign(small.target, value, env)
        elif isinstance(small, cst.Expr):
            self._eval(small.value, env)
            if isinstance(small.value, cst.Call) and self._may_keep_its_arguments(small.value):
                self._escape([self._eval(arg.value, env) for arg in small.value.args])
        elif isinstance(small, cst.Return):
            frame = next(f for f in reversed(self._frames) if f.loop is None or f.loop.is_call)
            if small.value is not None:
                frame.returned.append(self._eval(small.value, env))
                self._escape(frame.returned[-1:])
                items = self._tuple_items.get(small.value) if isinstance(small.value, cst.Tuple) else None
                frame.returned_items.append(None if items is None else [v.without_graph() if self._no_grad else v for v in items])
                function = self._scope.node
                parameters = [p.name.value for p in function.params.params] if isinstance(function, cst.FunctionDef) else []
                # (by identity: a join of the two markers is a value equal to both, and says neither)
                truths = {name: env.get(_truth_key(name)) for name in parameters}
                frame.returned_truths.append({name: held is _TRUE for name, held in truths.items() if held is _TRUE or held is _FALSE})
            frame.returns.append(env)
            raise _Terminated
        elif isinstance(small, cst.Raise):
            raise _Terminated
        elif isinstance(small, (cst.Break, cst.Continue)):
            frame = next((f for f in reversed(self._frames) if f.loop is not None and not f.loop.is_call), None)
            if frame is not None:
                (frame.breaks if isinstance(small, cst.Break) else frame.continues).append(env)
            raise _Terminated
        elif isinstance(small, cst.Del):
            for name in target_names(small.target):
                env.pop(name, None)
                self._forget_slots(name, env)
        return env

    # loops -----------------------------------------------------------------------------------
    def _run_loop(self, node: LoopNode, env: Env, iteration) -> Env | None:
        loop = self.loops.get(node)
        if loop is None:
            carried = assigned_names(node.body, tree=self._tree) | self._left_by_calls(node.body)
            if isinstance(node, cst.FunctionDef):
                # Across calls only what is kept on the instance survives.
                self_name = node.params.params[0].name.value if node.params.params else "self"
                carried = {name for name in carried if name.startswith(self_name + ".")}
            elif isinstance(node, cst.For):
                carried |= set(target_names(node.target))
            parent = self._loops[-1] if self._loops else None
            loop = Loop(node, parent, self._scope, frozenset(carried))
            self.loops[node] = loop
        entry = {name: env[name] for name in loop.carried_names if name in env}
        loop.freed_at_entry = frozenset(compress(env, map(attrgetter("freed"), env.values())))
        # A nested loop runs again at every pass of the loops around it: it starts from what its
        # iterations left at its previous run, so it takes one pass when what enters it has not
        # changed, not its two or three passes again (and each of its own nested loops theirs:
        # the innermost body would be walked 2^depth times).
        back_edge: Env = dict(loop.back_edge)
        # Names the loop only reads, whose graph a backward in it freed: the next iteration finds
        # them freed (a forward computed once before the loop, a target cached before it).
        freed_in_loop: set[str] = set()
        frame = _Frame(loop)
        for _ in range(_MAX_PASSES):
            head = dict(env)
            for name in freed_in_loop:
                head[name] = replace(head[name], freed=True)
            for name in loop.carried_names:
                before, after = entry.get(name), back_edge.get(name)
                if before is None and after is None:
                    continue
                value = after if before is None else before if after is None else join_values(before, after)
                head[name] = Value(
                    graph=value.graph,
                    origins=frozenset({Carried(loop, name)}) if value.graph else frozenset(),
                    structure=value.structure,
                    may_be_none=value.may_be_none,
                    freed=value.freed,
                    unbound=value.unbound,
                    graphless=value.graphless,
                    guessed=value.guessed,
                    unread=value.unread,
                )
            frame = _Frame(loop)
            self._frames.append(frame)
            self._loops.append(loop)
            try:
                end = iteration(head)
            finally:
                self._loops.pop()
                self._frames.pop()
            ends = join_envs([end, *frame.continues, *frame.returns]) or {}
            new_back_edge = {name: ends[name] for name in loop.carried_names if name in ends}
            newly_freed = {
                name for name, value in ends.items() if value.freed and name not in loop.carried_names and name in env and not env[name].freed
            } - freed_in_loop
            if loop.is_call:
                newly_freed -= self._local_names(loop.node)  # each call binds its own: the next one is not freed
            converged = _same_graphs(new_back_edge, back_edge) and not newly_freed
            back_edge = new_back_edge
            freed_in_loop |= newly_freed
            if converged:
                break
        loop.entry, loop.back_edge = entry, back_edge
        loop.returned = _joined(frame.returned)
        if isinstance(node, cst.FunctionDef):
            self.returned_items[node] = frame.items_returned()
            self.returned_given[node] = frame.returned_given()
            self.items_given[node] = frame.items_given()
        return join_envs([env, end, *frame.breaks])

    # assignments -----------------------------------------------------------------------------
    def _assign(
        self,
        target: cst.BaseExpression,
        value: Value,
        env: Env,
        source: cst.BaseExpression | None = None,
        differentiable: bool = False,
    ) -> None:
        """``differentiable``: ``value`` is a tuple of differentiable outputs of a torch.nn module,
        each holding its graph (what ``(h, c)`` of ``out, (h, c) = lstm(x)`` unpacks)."""
        if isinstance(target, (cst.Tuple, cst.List)):
            elements = [e.value for e in target.elements]
            sources: list[cst.BaseExpression | None] = [None] * len(elements)
            known = self._items_of_the_call(source, value, elements) if isinstance(source, cst.Call) else None
            differentiable = differentiable or source in self._differentiable_outputs
            if isinstance(source, (cst.Tuple, cst.List)) and len(source.elements) == len(elements):
                sources = [e.value for e in source.elements]
                values = [self._eval(s, env) for s in sources]
            elif known is not None:
                values = known
            else:
                items = value.structure.items if isinstance(value.structure, TupleOf) else ()
                values = [_item_of(value, items[i] if len(items) == len(elements) else UNKNOWN, differentiable) for i in range(len(elements))]
            for element, element_value, element_source in zip(elements, values, sources):
                self._assign(element, element_value, env, element_source, differentiable)
            return
        if isinstance(target, cst.StarredElement):
            self._assign(target.value, _item_of(value, ListOf(UNKNOWN)), env)
            return
        if isinstance(target, cst.Subscript):
            name = dotted_name(target.value)
            if name is not None:
                held = env.get(name, NOTHING)
                slot = _slot(target)
                # (a write by a literal key leaves the items of the other literal keys where they are)
                self._forget_slots(name, env, keep_literal=slot is not None and type(target.slice[0].slice.value) is not cst.Name)
                if held.structure is TENSOR:  # an in-place copy into a tensor: a node of its graph
                    env[name] = combine([held, value], self._origin(target), TENSOR)
                else:  # a dict, a list, a ParameterDict holds the value itself
                    env[name] = _union([held, value], held.structure)
                    if slot is not None:
                        env[slot] = value
                        index = target.slice[0].slice.value
                        if type(index) is not cst.Name:
                            self._literal_slots.add(slot)
                        for owner in (name, index.value) if type(index) is cst.Name else (name,):
                            self._slots.setdefault(owner, set()).add(slot)
            return
        name = dotted_name(target)
        if name is None:
            return
        if name in self._declared_global(self._scope.node):
            self._escape([value])  # the next call of the function reads it again
        if isinstance(target, cst.Attribute) and target.attr.value == "data":
            value = value.without_graph()  # what is written to .data is never recorded
        for key in self._attributes_of.get(name, ()):
            env.pop(key, None)
        self._forget_slots(name, env)
        env.pop(_truth_key(name), None)
        if self._names_an_object(target):
            value = NOTHING  # model = DDP(model), engine, optimizer, … = deepspeed.initialize(…): not tensors
        if "." in name:
            self._escape([value])  # kept on an object: another call may backward it
        env[name] = value

    def _forget_slots(self, name: str, env: Env, keep_literal: bool = False) -> None:
        """What was written to ``x[i]`` is what ``x[i]`` reads only until ``x`` or ``i`` changes
        (``keep_literal``: ``x`` changes only at a literal key; ``x["a"]`` is still what was written)."""
        for slot in self._slots.get(name, ()):
            if not (keep_literal and slot in self._literal_slots):
                env.pop(slot, None)

    # expressions -----------------------------------------------------------------------------
    def _origin(self, node: cst.CSTNode) -> Origin | None:
        return None if self._no_grad else Origin(node, self._statement)

    def _eval(self, node: cst.BaseExpression, env: Env) -> Value:
        value = self._eval_expression(node, env)
        return value.without_graph() if self._no_grad and value.graph else value

    def _eval_all(self, nodes, env: Env) -> list[Value]:
        return [self._eval(node, env) for node in nodes]

    def _eval_expression(self, node: cst.BaseExpression, env: Env) -> Value:
        node_type = type(node)  # exact types: see ``dotted_name``
        if node_type is cst.Name:
            if node.value == "None":
                return Value(structure=NONE, graphless=True)
            self.read_values[node] = env.get(node.value, NOTHING)
            return self.read_values[node]
        if node_type is cst.Attribute:
            self.read_values[node] = self._eval_attribute(node, env)
            return self.read_values[node]
        if node_type in (cst.Integer, cst.Float, cst.Imaginary):
            return Value(structure=NUMBER, graphless=True)
        if node_type is cst.Call:
            return self._eval_call(node, env)
        if node_type is cst.BinaryOperation:
            operands = self._eval_all([node.left, node.right], env)
            # ``[None] * n``, ``pairs + [(a, b)]``: a list or a tuple repeated or joined is one still.
            containers = [v.structure for v in operands if isinstance(v.structure, (ListOf, TupleOf))]
            if containers:
                return _part(_union(operands, UNKNOWN), containers[0] if isinstance(containers[0], ListOf) else UNKNOWN)
            structures = {v.structure for v in operands}
            # a tensor when one operand is; two numbers make a number; anything else is not known
            structure = TENSOR if TENSOR in structures else NUMBER if structures == {NUMBER} else UNKNOWN
            return combine(operands, self._origin(node), structure)
        if node_type is cst.UnaryOperation:
            operand = self._eval(node.expression, env)
            return CONSTANT if isinstance(node.operator, cst.Not) else combine([operand], self._origin(node))
        if node_type is cst.BooleanOperation:
            return self._eval(node.left, env).join(self._eval(node.right, env))
        if node_type is cst.Comparison:
            # (of tensors, a tensor of booleans with no history: ``(logits.argmax(1) == y).sum()``)
            operands = [self._eval(node.left, env), *self._eval_all([c.comparator for c in node.comparisons], env)]
            tensors = any(v.graph or v.structure is TENSOR for v in operands)
            return Value(structure=TENSOR, graphless=True) if tensors else CONSTANT
        if node_type is cst.Yield:
            value = self._eval(node.value, env) if isinstance(node.value, cst.BaseExpression) else NOTHING
            frame = next(f for f in reversed(self._frames) if f.loop is None or f.loop.is_call)
            frame.yielded.append(value)
            return NOTHING  # (what the caller sends back)
        if node_type is cst.IfExp:
            self._eval(node.test, env)
            if not self._tree.findall(node.body, cst.Call) and not self._tree.findall(node.body, cst.NamedExpr):
                return self._eval(node.body, env).join(self._eval(node.orelse, env))
            # One branch runs, not both: ``loss.backward() if last else loss.backward(retain_graph=True)``.
            otherwise = dict(env)
            value = self._eval(node.body, env).join(self._eval(node.orelse, otherwise))
            env.update(join_envs([env, otherwise]) or {})
            return value
        if node_type is cst.Subscript:
            slot = _slot(node)
            written = env.get(slot) if slot is not None else None
            base = self._eval(node.value, env)
            for element in node.slice:
                if isinstance(element.slice, cst.Index):
                    self._eval(element.slice.value, env)
            if base.structure is TENSOR:
                return combine([base], self._origin(node))
            if written is not None and not written.unbound:
                return written  # ``losses[i] = loss`` then ``losses[i]``: this very value
            element = _element_of(base)
            loop = self._loops[-1] if self._loops else None
            if (
                element.graph
                and loop is not None
                and not loop.is_call
                and _indexed_by(node, loop.carried_names - self._comprehension_names)
                # a container the iteration did not build itself (``outputs = model(x)`` then
                # ``outputs[mask]`` is this step's value, not one kept from an earlier step)
                and not any(isinstance(o, Origin) and self._tree.contains(loop.node, o.statement) for o in base.origins)
            ):
                picked = frozenset({Element(loop, node, base.origins)})
                # Another element each iteration, freed only if the container was when the loop began.
                return Value(
                    True,
                    picked,
                    element.structure,
                    freed=dotted_name(node.value) in loop.freed_at_entry,
                    guessed=element.guessed,
                    unread=element.unread,
                )
            return element
        if node_type in (cst.Tuple, cst.List):
            values = self._eval_all([e.value for e in node.elements], env)
            if node_type is cst.Tuple and not any(isinstance(e, cst.StarredElement) for e in node.elements):
                self._tuple_items[node] = values
            structure: Structure = (
                TupleOf(tuple(v.structure for v in values)) if isinstance(node, cst.Tuple) else ListOf(_join_structures(v.structure for v in values))
            )
            return _union(values, structure)
        if node_type in (cst.ListComp, cst.GeneratorExp, cst.SetComp):
            return self._eval_comprehension(node, env)
        if node_type is cst.Dict:
            return _union(self._eval_all([e.value for e in node.elements if isinstance(e, cst.DictElement)], env), UNKNOWN)
        if node_type in (cst.StarredElement, cst.Await):
            return self._eval(node.value if isinstance(node, cst.StarredElement) else node.expression, env)
        if node_type is cst.NamedExpr:
            value = self._eval(node.value, env)
            self._assign(node.target, value, env)
            return value
        if node_type is cst.FormattedString:
            for part in node.parts:
                if isinstance(part, cst.FormattedStringExpression):
                    self._eval(part.expression, env)
            return CONSTANT
        if node_type in _CONSTANT_EXPRESSIONS:
            return CONSTANT
        return NOTHING

    def _eval_attribute(self, node: cst.Attribute, env: Env) -> Value:
        name = dotted_name(node)
        if name is not None and name in env:
            return env[name]
        if node.attr.value in _NON_GRAPH_ATTRIBUTES:
            self._eval(node.value, env)
            return CONSTANT
        if self.names.is_parameter(node, self._scope.class_name):
            return LEAF
        kept = self._constructed.get(self.names.instance_class(node.value, None) or "", {}).get(f"self.{node.attr.value}")
        if kept is not None and kept.graph:
            return kept  # what the object's constructor keeps, read from outside it
        if self.names.module(node.value, self._scope.class_name) is not None:
            return NOTHING  # a submodule, or an attribute of one gradfix cannot name
        base = self._eval(node.value, env)
        if isinstance(base.structure, RecordOf):
            fields = self.names.record_classes.get(base.structure.name, ())
            if node.attr.value in fields:
                return _item_of(base, base.structure.items[fields.index(node.attr.value)])
        return replace(base, structure=TENSOR if base.structure is TENSOR else UNKNOWN, may_be_none=False)

    def _eval_call(self, node: cst.Call, env: Env) -> Value:
        value = self._call_value(node, env)
        if self._detaching_call(node.func):
            return CONSTANT
        if value.graph and self._called_class(node.func) in self.stateful_classes:
            self._escape([value])  # the object keeps part of this graph for its next call
        return value

    def _detaching_call(self, func: cst.BaseExpression) -> bool:
        """A call of a function or method of the file whose every return is detached
        (``repackage_hidden(h)``, ``self.model.repackage_hidden(h)``)."""
        detaching = self.names.detaching_functions
        if dotted_name(func) in detaching:
            return True
        called = self._called_class(func.value) if isinstance(func, cst.Attribute) else None
        return called is not None and f"{called}.{func.attr.value}" in detaching

    def _called_class(self, func: cst.BaseExpression) -> str | None:
        """The file's own class whose instance (or method) a call runs: ``model(x)``, ``model.step(x)``."""
        class_name = self._scope.class_name
        for receiver in (func, func.value) if isinstance(func, cst.Attribute) else (func,):
            instance = self.names.instance_class(receiver, class_name)
            module = self.names.module(receiver, class_name)
            if instance is not None:
                return instance
            if module is not None and module.is_local:
                return module.class_name
        return None

    def _call_value(self, node: cst.Call, env: Env) -> Value:
        value = self._read_call(node, env)
        shape = self._returned_shapes.pop(node, UNKNOWN)
        # A call of the file's function read as any call, shaped as the function's returns show
        # (a helper defined later returning ``(matrix, norm)``).
        return replace(value, structure=shape) if value.structure is UNKNOWN and shape is not UNKNOWN else value

    def _read_call(self, node: cst.Call, env: Env) -> Value:
        func = node.func
        arguments = [arg.value for arg in node.args]
        class_name = self._scope.class_name
        qualified = self.names.qualify(func) or ""

        if qualified in FUNCTION_APIS:
            values = self._eval_all(arguments, env)
            api = FUNCTION_APIS[qualified]
            self._record_backward(node, api, env)
            if api.accumulates or backward_calls.create_graph(api, node) is False:
                return CONSTANT
            # Gradients made with create_graph=True (a gradient penalty) carry a graph through
            # everything the backward walked.
            return combine(values, self._origin(node), UNKNOWN)

        summary_result = self._call_summary(node, env)
        if summary_result is not None:
            return summary_result

        called_module = self.names.module(func, class_name)
        if called_module is not None:
            return self._module_call(called_module, node, arguments, env)
        if self.names.framework(func) in CALLED_AS_FORWARD:  # the engine wraps the model
            wrapped = self.names.wrapped_modules.get(dotted_name(func) or "")
            if wrapped is not None:
                return self._module_call(wrapped, node, arguments, env)
            return combine([*self._eval_all(arguments, env), LEAF], self._origin(node), UNKNOWN)

        if isinstance(func, cst.Attribute) and not self.names.is_torch(func.value):
            method = func.attr.value
            if method in BACKWARD_METHODS:
                receiver = self._eval(func.value, env)
                passed = [value for arg, value in zip(node.args, self._eval_all(arguments, env)) if arg.keyword is None]
                api = backward_calls.method_api(
                    method,
                    node,
                    self.names.framework(func.value),
                    receiver.graph and not self._names_an_object(func.value) and not any(v.graph for v in passed[:1]),
                    class_name in self.names.lightning_classes,
                    self.names.is_imported_module(func.value),
                    receiver_is_an_object=self._names_an_object(func.value) or self.names.instance_class(func.value, class_name) is not None,
                    argument_is_graphless=bool(passed) and passed[0].graphless,
                )
                if api is not None:
                    self._record_backward(node, api, env)
                    return CONSTANT
            module = self.names.module(func.value, class_name)
            if module is not None:
                if method == "forward":
                    return self._module_call(module, node, arguments, env)
                values = self._eval_all(arguments, env)
                if method == "parameters" and module.trainable:
                    return Value(graph=True, structure=ListOf(TENSOR))  # its parameters: leaves that require grad
                summary = self._summary((module.class_name, method)) if module.is_local else None
                if summary is not None and not summary.has_effect and (items := self._returned_items(summary, node)) is not None:
                    self._call_items[node] = items
                if summary is not None and summary.returned.graph:  # builds its result from parameters
                    return combine([*values, LEAF], self._origin(node), summary.returned.structure)
                # D.compute_loss(fake, …): from its inputs (and maybe parameters gradfix does not see)
                read = self._read_result(summary and _summary_key(summary), node, values, UNKNOWN)
                return read if read is not None else combine(values, self._origin(node), UNKNOWN, known_operation=False)
            receiver = self._eval(func.value, env)
            values = self._eval_all(arguments, env)
            if _number_library_result(qualified, values):
                return CONSTANT
            target = dotted_name(func.value)
            if method in _DETACHING_METHODS or receiver.structure is DISTRIBUTION and method in _SAMPLING_METHODS:
                return Value(structure=TENSOR if method == "detach" else UNKNOWN, graphless=True)
            if method in _NON_DIFFERENTIABLE:
                return Value(structure=TENSOR, graphless=True)
            if method in _FACTORY_METHODS:
                asked = any(arg.keyword is not None and arg.keyword.value == "requires_grad" for arg in node.args)
                return LEAF if asked else Value(structure=TENSOR, graphless=True)
            if method in BOOKKEEPING_METHODS:
                if method == "requires_grad_" and not _turns_off(node):
                    # A tensor with a graph keeps it (requires_grad_ on it changes nothing); any other becomes a leaf.
                    value = receiver if receiver.graph and receiver.origins else LEAF
                else:
                    value = Value(structure=TENSOR, graphless=True)
                if target is not None:
                    env[target] = value
                return value
            if target is not None and method not in APPENDING_METHODS:
                self._forget_slots(target, env)  # (``insert``, ``pop``, ``clear``: the slots move)
            if method in APPENDING_METHODS and target is not None:
                item = values[-1] if values else NOTHING
                if arguments:
                    self.assigned_values[arguments[-1]] = item
                if method == "extend":
                    item = _element_of(item)
                stored = env.get(target, NOTHING)
                item_structure = stored.structure.item if isinstance(stored.structure, ListOf) else item.structure
                env[target] = _union([stored, item], ListOf(item_structure.join(item.structure)))
                return CONSTANT
            tensor_method = receiver.structure is TENSOR
            # A method of a graph-carrying receiver holds its graph as much as the receiver does; a
            # method of anything else is a function gradfix cannot read, unless it read it.
            guessed = (not tensor_method and not receiver.graph) or all(v.guessed for v in (receiver, *values) if v.graph)
            # (a method of what is proved to hold no graph, an array or a number, given nothing that
            # holds one, returns nothing that holds one: ``action.detach().numpy().squeeze(0)``)
            result = self._read_result(self._read_callees.get(node), node, values, UNKNOWN) or combine(
                [receiver, *values],
                self._origin(node),
                TENSOR if tensor_method else UNKNOWN,
                known_operation=tensor_method or receiver.graphless,
                guessed=guessed,
                unread=(not tensor_method and not receiver.graph and not receiver.graphless) or all(v.unread for v in (receiver, *values) if v.graph),
            )
            if (
                is_inplace_method(method)
                and target is not None
                and not self.names.is_imported_module(func.value)
                and not self._names_an_object(func.value)
            ):
                # (``commons.clip_grad_value_(...)`` changes no module object, and
                # ``accelerator.clip_grad_norm_(model.parameters(), 1.0)`` no graph into the accelerator)
                env[target] = result
            if self._imported_code(func):
                self._escape(values)  # trpo.hessian_vector_product(kl, params) may backward what it is given
            return result

        values = self._eval_all(arguments, env)
        if isinstance(func, cst.Name) and func.value in self.names.record_classes:
            return _union(values, self._record_structure(func.value, node, values))
        if isinstance(func, cst.Name) and func.value in self.names.local_classes:
            self._record_construction(func.value, node, values)
            if func.value in self._constructor_parameters:
                # An object: its methods read what it keeps from its ``__init__``; what reads it
                # from outside (``outputs.loss``) gets the graphs it was built with.
                return _union(values, UNKNOWN) if func.value not in self.names.module_classes else NOTHING
        if creates_parameter(self.names, node):
            return LEAF
        if self.names.module_class(func) is not None:
            return NOTHING  # a module object
        if qualified.startswith("torch."):
            return self._torch_call(node, qualified, values)
        if _number_library_result(qualified, values):
            return CONSTANT
        if isinstance(func, cst.Name):
            if func.value in _NON_GRAPH_BUILTINS:
                return CONSTANT
            if func.value in _CONTAINER_BUILTINS:
                element = _element_of(values[0]) if values else NOTHING
                structure = element.structure if func.value in _REDUCING_BUILTINS else UNKNOWN
                return _part(element, structure)
        # An unknown function of graph-carrying values (a loss function, a helper) is differentiable
        # in all code we have seen; passing a module in makes its result depend on parameters (or
        # it is an object built around the module, an optimizer, a wrapper: the analysis cannot
        # tell, and nothing is rewritten on what ``x.backward(arg)`` of such a value backwards).
        module_arguments = [self.names.module(a, class_name) for a in arguments]
        if any(m is not None and m.trainable for m in module_arguments) or isinstance(func, cst.Name) and func.value in self._module_items:
            values.append(LEAF)
        self._eval(func, env)
        if self._imported_code(func):
            self._escape(values)  # another package's function may backward what it is given
        read = self._read_result(self._read_callees.get(node), node, values, UNKNOWN)
        return read if read is not None else combine(values, self._origin(node), UNKNOWN, known_operation=False)

    def _read_result(self, callee: object, call: cst.Call, values: list[Value], structure: Structure) -> Value | None:
        """What a call of a function of the file returns, where its summary (a walk with no graph in
        its parameters) says nothing of what it makes of its arguments' graphs, as the walk with
        what its callers pass shows it (``returned_with_arguments``): none, when that walk returns
        none (a helper that detaches what it is given, or computes with gradients off); a graph
        built from its arguments by the operations it runs otherwise, guessed (or out of code gradfix
        did not read) where that walk's is. None where no caller passed it a graph."""
        returned = self.returned_with_arguments.get(callee) if callee is not None else None
        if returned is None:
            return None
        if not returned.graph:
            return Value(structure=structure)
        return combine(values, self._origin(call), structure, guessed=returned.guessed or None, unread=returned.unread or None)

    def _record_structure(self, class_name: str, call: cst.Call, values: list[Value]) -> Structure:
        """``State(v, i)``, ``State(v=v, i=i)``: the named tuple with its fields' structures, when
        the call gives every field (by position or by name) and nothing else."""
        fields = self.names.record_classes[class_name]
        given: dict[str, Structure] = {}
        for position, (arg, value) in enumerate(zip(call.args, values)):
            if arg.star or (arg.keyword is None and position >= len(fields)):
                return UNKNOWN
            given[fields[position] if arg.keyword is None else arg.keyword.value] = value.structure
        if set(given) != set(fields):
            return UNKNOWN
        return RecordOf(tuple(given[name] for name in fields), class_name)

    def _record_construction(self, class_name: str, call: cst.Call, values: list[Value]) -> None:
        self.constructions.setdefault(class_name, []).append(tuple(reversed(self._loops)))
        parameters = self._constructor_parameters.get(class_name)
        if parameters is not None:
            self._record_arguments((class_name, "__init__"), parameters, call, values, freed=False)

    def _record_arguments(self, callee: object, parameters: Sequence[str], call: cst.Call, values: list[Value], freed: bool = True) -> None:
        """What ``call`` passes the graph-carrying parameters of ``callee``, joined with what other
        calls pass them. ``freed``: whether a freed graph stays freed inside (a helper that
        backwards it fails); a constructor keeps what it is given for later calls."""
        bound = dict(zip(parameters, (v for arg, v in zip(call.args, values) if arg.keyword is None and not arg.star)))
        bound.update((arg.keyword.value, v) for arg, v in zip(call.args, values) if arg.keyword is not None)
        self._record_found(callee, {name: value for name, value in bound.items() if name in parameters}, freed)

    def _record_found(self, callee: object, found: Mapping[str, Value], freed: bool = True) -> None:
        """What a call of ``callee`` finds in the names it reads (its parameters, its object's
        attributes, the module's names), joined with what other calls find: the graph-carrying
        values only. ``freed``: whether a freed graph stays freed inside."""
        known = self.arguments.setdefault(callee, {})
        for name, value in found.items():
            if value.graph:
                # Carried markers name this round's loops: keep the places they stand for.
                value = Value(True, self.graph_nodes(value), value.structure, freed=freed and value.freed, guessed=value.guessed, unread=value.unread)
                known[name] = known[name].join(value) if name in known else value

    def _module_call(self, module: ModuleInfo, node: cst.Call, arguments, env: Env) -> Value:
        values = self._eval_all(arguments, env)
        forward = self._summary((module.class_name, "forward")) if module.is_local else None
        if forward is not None:
            self._record_arguments((module.class_name, "forward"), forward.parameters, node, values)
        # A local module adds its parameters' graph when its own forward does (not when it froze them).
        if module.trainable and (forward is None or forward.returned.graph):
            values = [*values, LEAF]
        result = self.forward_results.get(module.class_name, UNKNOWN) if module.is_local else module.call_result
        if forward is not None and forward.returned_given:
            result = self._returned_structure(forward, node)
        # A module known only by its use runs a forward gradfix did not read: what it returns may be
        # anything (a detached output, a dict), so its graph is a guess of that kind.
        unread = True if module.unread else None
        called = combine(values, self._origin(node), result, guessed=unread, unread=unread)
        if forward is not None and not forward.has_effect and (items := self._returned_items(forward, node)) is not None:
            self._call_items[node] = items
        elif forward is None and isinstance(result, TupleOf):
            # every output of a torch.nn module is computed from its input and its parameters
            self._call_items[node] = tuple(Value(graph=True, structure=item) for item in result.items)
            self._differentiable_outputs.add(node)
        return called if forward is None else self._freed_inside(node, forward, called)

    def _torch_call(self, node: cst.Call, qualified: str, values: list[Value]) -> Value:
        if qualified.rsplit(".", 1)[-1] in _CREATION_FUNCTIONS or qualified.count(".") == 1 and qualified[6:] in _NON_DIFFERENTIABLE:
            return Value(structure=TENSOR, graphless=True)
        if qualified.startswith("torch.distributions."):
            return combine(values, self._origin(node), DISTRIBUTION)
        if qualified in _TUPLE_FUNCTIONS:
            return combine(values, self._origin(node), TupleOf((TENSOR,) * _TUPLE_FUNCTIONS[qualified]))
        return combine(values, self._origin(node))

    def _eval_comprehension(self, node, env: Env) -> Value:
        inner = dict(env)
        outer_names = self._comprehension_names
        try:
            for clause in _comprehension_clauses(node.for_in):
                self._assign(clause.target, _element_of(self._eval(clause.iter, inner)), inner)
                # A comprehension's names are its own (``x[i] for i in ...`` inside ``for i in ...``).
                self._comprehension_names |= frozenset(target_names(clause.target))
            element = self._eval(node.elt, inner)
        finally:
            self._comprehension_names = outer_names
        structure: Structure = ListOf(element.structure)
        return _part(element, structure)

    def _escape(self, values: Sequence[Value]) -> None:
        """Graphs handed to code gradfix does not follow, which may backward them later."""
        for value in values:
            if value.graph:
                self.escaped.setdefault(self._scope.node, set()).update(self.graph_nodes(value))

    def _may_keep_its_arguments(self, call: cst.Call) -> bool:
        """A call made for its effect (``hook(out)``, ``self.log_graph(loss)``), not a torch
        function, a builtin that only reads, a module or a backward."""
        func = call.func
        if call in self.backward_sites or self.names.is_torch(func):
            return False
        if isinstance(func, cst.Name) and func.value in _NON_GRAPH_BUILTINS:
            return False
        if isinstance(func, cst.Attribute) and (func.attr.value in APPENDING_METHODS or func.attr.value in _DETACHING_METHODS):
            return False
        if self._only_reads(func):
            return False
        return self.names.module(func, self._scope.class_name) is None

    def _imported_code(self, func: cst.BaseExpression) -> bool:
        """A function or class an import names (``trpo.hessian_vector_product``, ``from utils import
        helper``), outside torch and the number libraries: code gradfix does not read here."""
        name = dotted_name(func)
        qualified = self.names.qualify(func) or ""
        return name is not None and name.split(".")[0] in self.names.aliases and not qualified.startswith(("torch.", *_NUMBER_LIBRARIES))

    def _only_reads(self, func: cst.BaseExpression) -> bool:
        """A method of an object of a class that only reads what it is given (``writer.add_scalar``)."""
        return isinstance(func, cst.Attribute) and self.names.constructed.get(dotted_name(func.value) or "") in READING_LOGGERS

    def _local_names(self, function: cst.FunctionDef) -> set[str]:
        """The names a call of ``function`` binds afresh: its parameters and the names Python makes
        local to it (a write to ``x[i]`` or ``x.a`` binds no ``x``)."""
        local = self._locals_of.get(function)
        if local is None:
            params = function.params
            parameters = [*params.params, *params.kwonly_params, *params.posonly_params]
            parameters += [star for star in (params.star_arg, params.star_kwarg) if isinstance(star, cst.Param)]
            local = self._locals_of[function] = ({p.name.value for p in parameters} | local_names(function)) - self._declared_global(function)
        return local

    def _declared_global(self, scope: cst.CSTNode) -> frozenset[str]:
        """The names a function declares ``global`` or ``nonlocal``."""
        declared = self._globals_declared.get(scope)
        if declared is None:
            statements = (
                [*self._tree.findall(scope.body, cst.Global), *self._tree.findall(scope.body, cst.Nonlocal)]
                if isinstance(scope, cst.FunctionDef)
                else []
            )
            declared = frozenset(name.name.value for statement in statements for name in statement.names)
            self._globals_declared[scope] = declared
        return declared

    def _names_an_object(self, node: cst.BaseExpression) -> bool:
        """A module, an optimizer or a framework object: never a graph, whatever it is built from."""
        return (
            self.names.module(node, self._scope.class_name) is not None
            or self.names.framework(node) is not None
            or dotted_name(node) in self.names.optimizers
            or dotted_name(node) in self.names.objects
        )

    def _is_no_grad(self, node: cst.BaseExpression) -> bool:
        if not isinstance(node, cst.Call):
            return False
        name = self.names.qualify(node.func)
        if name in NO_GRAD_CONTEXTS:
            return True
        return name == GRAD_MODE_SWITCH and bool(node.args) and isinstance(node.args[0].value, cst.Name) and node.args[0].value.value == "False"

    def _record_backward(self, call: cst.Call, api: BackwardApi, env: Env) -> None:
        tensors = backward_calls.backwarded_expressions(api, call)
        values = [self._eval(tensor, env) for tensor in tensors]
        value = _joined(values)
        if api.guessed:  # what it may backward: its argument or its object
            value = value.join(self._eval(call.func.value, env))
        retain_graph = backward_calls.retain_graph(api, call)
        # A kept graph, one gradfix cannot tell, or a tensor it guessed is not proved freed.
        frees = retain_graph is False and not api.guessed
        inputs = backward_calls.argument(call, 1, "inputs") if api.name == "torch.autograd.grad" else None
        stops_at = self._eval(inputs.value, env) if inputs is not None else NOTHING
        walked = self.walked_nodes(value, stops_at)
        # It frees what the walked nodes saved for it; a graph of sums and views of leaves saved
        # nothing, and what shares only such nodes can be backwarded again.
        saving = frozenset(origin for origin in walked if self._saves_tensors(origin.node)) if frees else frozenset()
        freed = set(self._sharing_graph(env, saving))
        for name in self._sharing_graph(env, walked):
            held = env[name]
            # The very tensor (an alias holds the same value), not another that shares its graph.
            backwarded = held.backwarded | {call} if any(held is v for v in values) else held.backwarded
            env[name] = replace(held, freed=held.freed or name in freed, backwarded=backwarded)
        for tensor, held in zip(tensors, values):
            name = dotted_name(tensor)
            if name is not None:  # known to be this very tensor even when its graph is not
                before = env.get(name, held)
                env[name] = replace(before, freed=before.freed or bool(saving), backwarded=before.backwarded | {call})
        self.backward_sites[call] = BackwardSite(
            call=call,
            statement=self._statement,
            api=api,
            tensors=tensors,
            value=value,
            retain_graph=retain_graph,
            create_graph=backward_calls.create_graph(api, call),
            loops=tuple(reversed(self._loops)),
            scope=self._scope,
            stops_at=stops_at,
        )

    def _saves_tensors(self, node: cst.CSTNode) -> bool:
        """Whether the operation at ``node`` may save tensors for its backward: anything but an
        addition, a subtraction, a negation, an index or slice, and the sums, means, views and
        joins of ``_SAVING_NOTHING_METHODS`` and ``_SAVING_NOTHING_FUNCTIONS``."""
        if isinstance(node, cst.BinaryOperation):
            return not isinstance(node.operator, (cst.Add, cst.Subtract))
        if isinstance(node, cst.AugAssign):
            return not isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign))
        if isinstance(node, cst.UnaryOperation):
            return not isinstance(node.operator, (cst.Minus, cst.Plus))
        if isinstance(node, cst.Subscript):
            return False
        if isinstance(node, cst.Call):
            if (self.names.qualify(node.func) or "") in _SAVING_NOTHING_FUNCTIONS:
                return False
            return not (
                isinstance(node.func, cst.Attribute) and node.func.attr.value in _SAVING_NOTHING_METHODS and not self.names.is_torch(node.func)
            )
        return True

    def saves_for_certain(self, node: cst.CSTNode, class_name: str | None = None, reading: frozenset[str] = frozenset()) -> bool:
        """Whether the operation at ``node`` certainly saves a tensor for its backward: a matrix
        product, a call of ``_SAVING_FOR_CERTAIN`` (torch's function or a tensor's method), or a
        call of a torch.nn layer that holds parameters."""
        if isinstance(node, cst.BinaryOperation):
            return isinstance(node.operator, cst.MatrixMultiply)
        if not isinstance(node, cst.Call):
            return False
        func = node.func
        qualified = self.names.qualify(func) or ""
        if qualified.startswith("torch.") and qualified.rsplit(".", 1)[1] in _SAVING_FOR_CERTAIN:
            return True
        if isinstance(func, cst.Attribute) and func.attr.value in _SAVING_FOR_CERTAIN and not qualified.startswith("torch."):
            return True
        module = self.names.module(func, class_name)
        if module is None or not module.trainable:
            return False
        if module.is_local:  # the file's own class: what its forward certainly saves
            return module.class_name not in reading and any(
                self.saves_for_certain(node, module.class_name, reading | {module.class_name})
                for method in self._methods(module.class_name, "forward")
                for node in [*self._tree.findall(method.body, cst.Call), *self._tree.findall(method.body, cst.BinaryOperation)]
            )
        return bool(module.class_name)

    def _methods(self, class_name: str, name: str) -> list[cst.FunctionDef]:
        classes = self._tree.findall(self._module, cst.ClassDef, lambda c: c.name.value == class_name)
        return [s for c in classes for s in c.body.body if isinstance(s, cst.FunctionDef) and s.name.value == name]

    def walked_nodes(self, value: Value, stops_at: Value) -> frozenset[Origin]:
        """The nodes a backward of ``value`` walks (and frees): all of its graph, except, for
        ``autograd.grad``, the graph that built its ``inputs`` (``stops_at``): a later backward may
        still walk that."""
        walked = self.graph_nodes(value)
        return walked - self.graph_nodes(stops_at) if stops_at.graph else walked

    def _sharing_graph(self, env: Env, nodes: frozenset[Origin]) -> list[str]:
        """The names of ``env`` whose graph has one of ``nodes``. A backward in a long script's
        module body asks this of its hundreds of graph-carrying globals: the names are filtered in C."""
        if not nodes:
            return []
        graph_names = [*compress(env, map(_GRAPH, env.values()))]
        graphs = map(self.graph_nodes, map(env.__getitem__, graph_names))
        return [*compress(graph_names, map(not_, map(nodes.isdisjoint, graphs)))]

    def graph_nodes(self, value: Value) -> frozenset[Origin]:
        """Every place that built part of ``value``'s graph, through all loop heads. Kept until a
        loop it was read from runs again: a backward asks it of every graph-carrying name in scope,
        and a long script has thousands (most of them built by no loop at all)."""
        kept = self._graph_nodes_kept.get(value.origins)
        if kept is not None and (not kept[1] or all(loop.entry is entry and loop.back_edge is back for loop, entry, back in kept[1])):
            return kept[0]
        loops_read: list[tuple[Loop, Env, Env]] = []
        nodes = frozenset(source for source in expand(value.origins, None, loops_read) if isinstance(source, Origin))
        self._graph_nodes_kept[value.origins] = (nodes, tuple(loops_read))
        return nodes

    @property
    def parameter_backwards(self) -> set[cst.Call]:
        """The backward calls of functions' own parameters, which their summaries carry to callers."""
        return {site.call for summary in self.summaries.values() for site in summary.backwarded}

    def exports(self) -> dict[str, ExportedSummary]:
        """The summaries other files may import: module-level functions and methods, with an effect."""
        return {
            key if isinstance(key, str) else ".".join(key): summary.exported(self.backward_sites)
            for key, summary in self.summaries.items()
            if summary.has_effect
        }

    def _call_summary(self, call: cst.Call, env: Env) -> Value | None:
        """A call of a function or method of the checked code whose summary backwards an argument
        or returns a tensor it already backwarded: record the backward, return the result."""
        imported = self._imported_summary(call.func)
        if imported is not None:
            return self._call_imported(call, imported, env)
        summary = self._summary_of(call.func)
        if summary is None:
            return None
        values = self._eval_all([arg.value for arg in call.args], env)
        self._record_arguments(_summary_key(summary), summary.parameters, call, values)
        if self._loops:
            self.repeated_functions.add(summary.name)
        self.graph_arguments[summary.name] = self.graph_arguments.get(summary.name, False) or any(v.graph for v in values)
        if isinstance(call.func, cst.Attribute) and dotted_name(call.func.value) == "self":
            self._record_object_state(_summary_key(summary), env)
            env.update(summary.left_for_caller)  # self.add_regularization_loss(...) in __init__: what it keeps stays
        elif self._module_functions.get(summary.name) is not None:
            caller = self._scope.node
            shadowed = self._local_names(caller) if isinstance(caller, cst.FunctionDef) else set()
            self._record_module_state(summary.name, env, shadowed)
            env.update((name, value) for name, value in summary.left_for_caller.items() if name.split(".")[0] not in shadowed)
        self._free_what_the_call_walked(summary, values, env)
        returned_structure = self._returned_structure(summary, call)
        if summary.returned.graphless and not summary.has_effect:
            # proved on every path, whatever it was given (``return float(acc.item())``)
            return Value(structure=returned_structure, graphless=True)
        if not summary.has_effect and (items := self._returned_items(summary, call)) is not None:
            self._call_items[call] = items
        if not summary.has_effect:
            if not summary.returned.graph:
                self._returned_shapes[call] = returned_structure  # (the call is read as any other)
                self._read_callees[call] = _summary_key(summary)
                return None
            if self._frozen_module(call.func):
                # a module whose parameters were all set not to require grad: its result holds
                # what its inputs bring, and no graph of its own
                return combine(values, self._origin(call), returned_structure)
            if not summary.returned.origins:
                # only leaves it made or parameters (``w = torch.randn(..., requires_grad=True)``;
                # ``return [w, b]``): what no operation built, no forward of it is repeated
                return Value(graph=True, structure=returned_structure)
            # self.sample_G(n): a method that returns what it built from parameters
            return self._freed_inside(call, summary, combine([*values, LEAF], self._origin(call), returned_structure))
        self._eval(call.func, env)
        for inner in summary.backwarded:
            api = summary.backward_api(inner)
            if backward_calls.tensor_expression(api, call) is not None:
                self._record_backward(call, api, env)
        result = combine(values, self._origin(call), returned_structure, known_operation=False)
        if summary.returned.backwarded:
            frees = any(self.backward_sites[inner].retain_graph is False for inner in summary.returned.backwarded if inner in self.backward_sites)
            result = replace(result, graph=True, freed=frees, backwarded=summary.returned.backwarded)
        return self._freed_inside(call, summary, result)

    def _returned_structure(self, summary: FunctionSummary, call: cst.Call) -> Structure:
        """The structure a call of ``summary``'s function returns (``_given``)."""
        given = _given(summary, call)
        return summary.returned.structure if given is None else summary.returned_given[given].structure

    def _returned_items(self, summary: FunctionSummary, call: cst.Call) -> tuple[Value, ...] | None:
        """What each item of the tuple a call of ``summary``'s function returns holds (``_given``)."""
        given = _given(summary, call)
        return summary.returned_items if given is None else summary.items_given.get(given)

    def _items_of_the_call(self, call: cst.Call, whole: Value, targets: Sequence[cst.BaseExpression]) -> list[Value] | None:
        """What each target of ``a, b = f(...)`` holds, for a function of the file whose every return
        writes out a tuple of that length: nothing, where the returns prove an item graphless
        (``return loss, acc.item()``, ``return penalty, mean.detach()``); the graph of the whole
        call for any other item, guessed only where the returns do not prove it a tensor or a graph."""
        if len(targets) == 2 and self._returns_indices(call):
            return [_item_of(whole, TENSOR), Value(structure=TENSOR, graphless=True)]
        items = self._call_items.get(call)
        if items is None or len(items) != len(targets):
            return None
        groups = _sharing_groups(items)
        call_origin = self._origin(call)
        values = []
        for index, item in enumerate(items):
            value = replace(_part(whole, item.structure), guessed=whole.guessed or item.guessed or not (item.graph or item.structure is TENSOR))
            if call_origin in value.origins and groups[index] != groups[0]:
                # Items the callee builds from no node in common share nothing of the call: each
                # group of them stands for its own part (``return policy_loss, q1_loss, q2_loss``
                # of three networks).
                value = replace(value, origins=value.origins - {call_origin} | {Origin(targets[groups[index]], call_origin.statement)})
            values.append(Value(structure=item.structure, graphless=True) if item.graphless else value)
        return values

    def _returns_indices(self, call: cst.Call) -> bool:
        """Whether ``call`` is a torch reduction (function or tensor method) that returns values
        and their indices."""
        qualified = self.names.qualify(call.func) or ""
        if qualified.startswith("torch.") and qualified.count(".") == 1:
            name, given = qualified[6:], len(call.args) - 1  # (the tensor is the first argument)
        elif isinstance(call.func, cst.Attribute) and not self.names.is_torch(call.func):
            name, given = call.func.attr.value, len(call.args)
        else:
            return False
        dimension = given > 0 or any(arg.keyword is not None and arg.keyword.value == "dim" for arg in call.args)
        return name in _WITH_INDICES or name in _WITH_INDICES_GIVEN_A_DIMENSION and dimension

    def _free_what_the_call_walked(self, summary: FunctionSummary, arguments: Sequence[Value], env: Env) -> None:
        """After a call of a function of the file whose body backwards, on every path and without
        keeping the graph, a value built from what it was given (``critic.fit(prediction, target)``
        backwards a loss of ``prediction``): the caller's names that share the graph this call
        passed in are freed. (A backward of a parameter itself is the call's own backward site.)"""
        passed = frozenset().union(*(self.graph_nodes(value) for value in arguments if value.graph))
        if not passed or summary.backwarded:
            return
        key = _summary_key(summary)
        sites = self.backward_sites
        if key not in self._summarized:
            sites = self._sites_of_last_round
            self._sites_read_before_definition.append((key, self._walked_by(key, sites)))
        for site in sites.values():
            function = site.scope.node
            if (
                not isinstance(function, cst.FunctionDef)
                or (function.name.value if site.scope.class_name is None else (site.scope.class_name, function.name.value)) != key
                or site.retain_graph is not False
                or site.api.guessed
                or any(not loop.is_call for loop in site.loops)
                or not self._unconditional(site.statement, function)
                or any(self._tree.follows(site.statement, r) for r in self._tree.findall(function.body, cst.Return))
            ):
                continue
            walked = self.graph_nodes(site.value) & passed
            for name in self._sharing_graph(env, walked):
                env[name] = replace(env[name], freed=True)

    def _walked_by(self, key: object, sites: Mapping[cst.Call, BackwardSite]) -> dict[cst.Call, frozenset[Origin]]:
        """What each backward of the function ``key`` walks, by call: a fact a caller met before
        the definition reads from the previous round."""
        return {
            call: self.graph_nodes(site.value)
            for call, site in sites.items()
            if isinstance(site.scope.node, cst.FunctionDef) and _callee_key(site.scope.node, site.scope.class_name) == key
        }

    def _record_object_state(self, callee: object, env: Env) -> None:
        """What a method of a plain class called on ``self`` finds on the object: the graphs the
        caller's ``self`` holds that the method names (``self.pred_real``, kept and freed by
        ``backward_D``, then read by ``backward_G``), joined over calls as its parameters are."""
        method = self._plain_methods.get(callee)
        if method is None:
            return
        named = dict.fromkeys(dotted_name(a) for a in self._tree.findall(method.body, cst.Attribute))
        self._record_found(callee, {name: env[name] for name in named if name is not None and name.startswith("self.") and name in env})

    def _left_by_calls(self, body: cst.CSTNode) -> set[str]:
        """The names that calls in ``body`` of the file's functions and methods may leave graphs in
        for their caller (``remember()`` filling the module's ``memory``): a loop carries them."""
        left: set[str] = set()
        for call in self._tree.findall(body, cst.Call):
            summary = self._summary_of(call.func)
            if summary is not None:
                left.update(summary.left_for_caller)
        return left

    def _frozen_module(self, func: cst.BaseExpression) -> bool:
        """Whether ``func`` calls a frozen module, or a method of one (``model(x)``, ``model.generate(x)``)."""
        class_name = self._scope.class_name
        module = self.names.module(func, class_name)
        if module is None and isinstance(func, cst.Attribute):
            module = self.names.module(func.value, class_name)
        return module is not None and module.frozen

    def _record_module_state(self, callee: str, env: Env, shadowed: set[str]) -> None:
        """What a module-level function finds in the module's names it reads when it is called
        (``experience``, filled by another function before this call), joined over calls as its
        parameters are; the caller's own local names (``shadowed``) are not those."""
        found = self._globals_read(self._module_functions[callee], env)
        self._record_found(callee, {name: value for name, value in found.items() if name.split(".")[0] not in shadowed})

    def _freed_inside(self, call: cst.Call, summary: FunctionSummary, result: Value) -> Value:
        """``result``, freed where what the function returns is freed inside it (a criterion that
        backwards the loss it returns when it is given an optimizer)."""
        if not summary.returned.freed or not result.graph:
            return result
        self.calls_returning_freed.add(call)
        return replace(result, freed=True)

    def _call_imported(self, call: cst.Call, summary: ExportedSummary, env: Env) -> Value:
        """The same for a function of another checked file: a backward inside it has no site here,
        so the call stands for it."""
        values = self._eval_all([arg.value for arg in call.args], env)
        for parameter, inner, retains in summary.backwarded:
            api = BackwardApi.of_function(summary.name, summary.parameters.index(parameter), parameter, inner, retains)
            if backward_calls.tensor_expression(api, call) is not None:
                self._record_backward(call, api, env)
        result = combine(values, self._origin(call), UNKNOWN, known_operation=False)
        if summary.returns_backwarded is None:
            return result
        api, retained = summary.returns_backwarded
        self.backward_sites.setdefault(
            call,
            BackwardSite(call, self._statement, api, (), result, retained, False, tuple(reversed(self._loops)), self._scope),
        )
        return replace(result, graph=True, freed=retained is False, backwarded=frozenset({call}))

    def _imported_summary(self, func: cst.BaseExpression) -> ExportedSummary | None:
        if not self.imported:
            return None
        qualified = self.names.qualify(func)
        if qualified in self.imported:
            return self.imported[qualified]
        receiver, method = (func.value, func.attr.value) if isinstance(func, cst.Attribute) else (func, None)
        built_from = self.names.constructed.get(dotted_name(receiver) or "")
        if built_from is None:
            return None
        methods = [method] if method else ["__call__", "forward"]
        return next((self.imported[f"{built_from}.{m}"] for m in methods if f"{built_from}.{m}" in self.imported), None)

    def _summary_of(self, func: cst.BaseExpression) -> FunctionSummary | None:
        class_name = self._scope.class_name
        if isinstance(func, cst.Name):
            if func.value in self.names.local_classes:
                return None
            instance = self.names.instance_class(func, class_name)
            if instance is not None:
                return self._summary((instance, "__call__")) or self._summary((instance, "forward"))
            return self._summary(self.names.function_aliases.get(func.value, func.value))
        if isinstance(func, cst.Attribute):
            instance = self.names.instance_class(func.value, class_name)
            if instance is not None:
                return self._summary((instance, func.attr.value))
            instance = self.names.instance_class(func, class_name)
            if instance is not None:
                return self._summary((instance, "__call__")) or self._summary((instance, "forward"))
        return None


def _decorator_callee(decorator: cst.Decorator) -> cst.BaseExpression:
    node = decorator.decorator
    return node.func if isinstance(node, cst.Call) else node


def _comprehension_clauses(clause: cst.CompFor | None) -> Iterator[cst.CompFor]:
    while clause is not None:
        yield clause
        clause = clause.inner_for_in


def _narrowed(test: cst.BaseExpression, env: Env) -> tuple[Env, Env]:
    """The environments at the start of an ``if``'s two branches: after ``x is None`` /
    ``x is not None``, ``x`` holds None on one side."""
    then_env, else_env = dict(env), dict(env)
    tested = test.expression if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) else test
    if type(tested) is cst.Name and tested.value not in ("True", "False", "None"):
        true_side, false_side = (then_env, else_env) if tested is test else (else_env, then_env)
        true_side[_truth_key(tested.value)], false_side[_truth_key(tested.value)] = _TRUE, _FALSE
    if (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].comparator, cst.Name)
        and test.comparisons[0].comparator.value == "None"
    ):
        name = dotted_name(test.left)
        operator = test.comparisons[0].operator
        if name is not None and isinstance(operator, (cst.Is, cst.IsNot)):
            none_side = then_env if isinstance(operator, cst.Is) else else_env
            none_side[name] = Value(structure=NONE)
    return then_env, else_env


# What a path's ``if flag:`` says of ``flag``, kept in the path's environment under ``flag?``.
_TRUE = Value(graphless=True)
_FALSE = Value(graphless=True)


def _truth_key(name: str) -> str:
    return f"{name}?"


def _turns_off(call: cst.Call) -> bool:
    """``x.requires_grad_(False)`` (or ``requires_grad=False``): a frozen module or a constant, not a leaf."""
    flag = next((arg.value for arg in call.args if arg.keyword is None or arg.keyword.value == "requires_grad"), None)
    return isinstance(flag, cst.Name) and flag.value == "False"


def _indexed_by(node: cst.Subscript, names: frozenset[str]) -> bool:
    return any(isinstance(element.slice, cst.Index) and read_names(element.slice.value) & names for element in node.slice)


def _slot(node: cst.Subscript) -> str | None:
    """``"losses[i]"`` for ``losses[i]``: a container's item picked by a plain name, or by a string
    or integer literal (``losses["recon"]``)."""
    container = dotted_name(node.value)
    if container is None or len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    index = node.slice[0].slice.value
    if type(index) is cst.Name:
        return f"{container}[{index.value}]"
    return f"{container}[{index.value}]" if type(index) in (cst.SimpleString, cst.Integer) else None


def _element_of(value: Value) -> Value:
    """What iterating over ``value`` yields."""
    structure = value.structure
    if isinstance(structure, ListOf):
        item = structure.item
    elif isinstance(structure, TupleOf):
        item = _join_structures(structure.items)
    else:
        item = TENSOR if structure is TENSOR else UNKNOWN
    return _item_of(value, item)


def _reads_what_the_last_call_kept(method: Loop) -> bool:
    """Whether what a call of ``method`` returns or keeps on ``self`` is built from a graph the
    previous call kept there (``self.hidden = self.cell(x, self.hidden)``), not only written anew."""
    # (Leaves it keeps, a list of parameters, have no graph a backward frees.)
    kept = [
        Carried(method, name)
        for name, value in method.back_edge.items()
        if value.graph and any(isinstance(source, Origin) for source in expand(value.origins, method))
    ]
    made = method.returned.origins.union(*(value.origins for value in method.back_edge.values()))
    return bool(kept) and not expand(made, method).isdisjoint(kept)


def _part(value: Value, structure: Structure) -> Value:
    """``value``'s graph (freed where it is) with another structure; not the very tensor a
    backward backwarded."""
    return Value(value.graph, value.origins, structure, freed=value.freed, graphless=value.graphless, guessed=value.guessed, unread=value.unread)


def _number_library_result(qualified: str, values: Sequence[Value]) -> bool:
    """Whether a call of ``math``, ``numpy``, ``random``, ``statistics`` or ``time`` returns nothing that holds
    a graph: when it is given nothing that holds one (nothing these libraries keep holds a graph).
    Given a graph, it may hand it back: ``random.choice(losses)``, ``np.squeeze(t)`` (numpy hands
    the call to the tensor's own method)."""
    return qualified.startswith(_NUMBER_LIBRARIES) and not any(value.graph for value in values)


def _item_of(container: Value, structure: Structure, differentiable: bool = False) -> Value:
    """An item taken out of ``container`` (unpacked, indexed, iterated): the container's graph.
    The rows of a tensor and the items of a list hold it as the whole does; the items of a tuple
    or of a container of unknown shape are told apart by nothing gradfix sees (a model's
    ``(logits, indices)``), so an item's graph is only guessed; not where every item is a
    differentiable output of a torch.nn module (``differentiable``: an LSTM's ``(h, c)``)."""
    homogeneous = container.structure is TENSOR or isinstance(container.structure, ListOf) or differentiable
    return replace(_part(container, structure), guessed=container.guessed or (container.graph and not homogeneous))


def _given(summary: FunctionSummary, call: cst.Call) -> tuple[str, bool] | None:
    """Where a return's path tested a parameter this call gives as ``True`` or ``False`` (or leaves
    to such a default), that parameter and its truth: the call reaches those returns only
    (``return y_hat, codes`` for ``return_latents=True``)."""
    for parameter in dict.fromkeys(name for name, _ in summary.returned_given):
        given = summary.literal_defaults.get(parameter)
        position = summary.parameters.index(parameter) if parameter in summary.parameters else None
        for index, arg in enumerate(call.args):
            if arg.star:
                return None
            if (arg.keyword is not None and arg.keyword.value == parameter) or (arg.keyword is None and index == position):
                given = arg.value.value == "True" if type(arg.value) is cst.Name and arg.value.value in ("True", "False") else None
        if given is not None and (parameter, given) in summary.returned_given:
            return (parameter, given)
    return None


def _sharing_groups(items: Sequence[Value]) -> list[int]:
    """For each of a callee's returned items, the first item it is joined to by nodes of the
    callee's graph they both hold (directly or through other items). Where the callee says
    nothing of the graph of an item that may hold one (a torch.nn module's outputs, a value
    built from an argument), all are one group."""
    nodes = [{source.node for source in item.origins if isinstance(source, Origin)} for item in items]
    if any(not graph_nodes and not item.graphless for item, graph_nodes in zip(items, nodes)):
        return [0] * len(items)
    groups = list(range(len(items)))
    for index in range(len(items)):
        for earlier in range(index):
            if nodes[index] & nodes[earlier] and groups[index] != groups[earlier]:
                joined, into = max(groups[index], groups[earlier]), min(groups[index], groups[earlier])
                groups = [into if group == joined else group for group in groups]
    return groups


def _join_structures(structures) -> Structure:
    return reduce(lambda joined, structure: joined.join(structure), structures, EMPTY)


def _union(values: Sequence[Value], structure: Structure) -> Value:
    return Value(
        graph=any(v.graph for v in values),
        origins=frozenset().union(*(v.origins for v in values)) if values else frozenset(),
        structure=structure,
        freed=any(v.freed for v in values),
        graphless=all(v.graphless for v in values),
        guessed=any(v.guessed for v in values if v.graph),
        unread=any(v.unread for v in values if v.graph),
    )


def _joined(values: Sequence[Value]) -> Value:
    """What one of ``values`` may be: NOTHING when there are none."""
    return reduce(Value.join, values) if values else NOTHING


def _graph_facts(env: Env) -> dict[str, tuple]:
    return {name: (value.graph, value.origins, value.freed) for name, value in env.items()}


def _summary_facts(summary: FunctionSummary | None) -> tuple | None:
    """What a caller reads of a summary (a later round's summary of the same function is another
    object, with other sites of the same calls)."""
    if summary is None:
        return None
    returned = summary.returned
    return (
        summary.parameters,
        tuple(site.call for site in summary.backwarded),
        (returned.graph, returned.origins, returned.structure, returned.freed, returned.backwarded),
        _graph_facts(dict(summary.left_for_caller)),
        _items_facts(summary.returned_items),
        tuple(sorted((key, value.structure, value.graph) for key, value in summary.returned_given.items())),
        tuple(sorted((key, _items_facts(items)) for key, items in summary.items_given.items())),
    )


def _items_facts(items: tuple[Value, ...] | None) -> tuple | None:
    return None if items is None else tuple((v.graph, v.graphless, v.guessed, v.origins, v.structure) for v in items)


def _callee_key(function: cst.FunctionDef, class_name: str | None) -> object:
    """How the analysis names a function it walks: ``f``, or ``(Class, method)``."""
    return function.name.value if class_name is None else (class_name, function.name.value)


def _summary_key(summary: FunctionSummary) -> object:
    owner, _, method = summary.name.rpartition(".")
    return (owner, method) if owner else method


def _same_graphs(a: Env, b: Env) -> bool:
    return a.keys() == b.keys() and all(
        (a[k].graph, a[k].origins, a[k].freed, a[k].backwarded) == (b[k].graph, b[k].origins, b[k].freed, b[k].backwarded) for k in a
    )


def expand(origins: frozenset[Source], within: Loop | None, loops_read: list[tuple[Loop, Env, Env]] | None = None) -> frozenset[Source]:
    """``origins`` with the ``Carried`` markers of loops nested inside ``within`` (of every loop when
    ``within`` is None) replaced by what they stand for: what entered that loop and what one of its
    iterations left behind. Markers of ``within`` itself and of outer loops are kept. ``loops_read``
    collects each loop whose entry and back edge the result was read from, with them."""
    result: set[Source] = set()
    pending = list(origins)
    seen: set[Source] = set()
    while pending:
        source = pending.pop()
        if source in seen:
            continue
        seen.add(source)
        result.add(source)
        if isinstance(source, Element):
            if source.loop is not within:
                pending.extend(source.origins)
            continue
        if isinstance(source, Carried) and source.loop is not within and (within is None or within.encloses(source.loop)):
            if loops_read is not None:
                loops_read.append((source.loop, source.loop.entry, source.loop.back_edge))
            for env in (source.loop.entry, source.loop.back_edge):
                if source.name in env:
                    pending.extend(env[source.name].origins)
    return frozenset(result)
