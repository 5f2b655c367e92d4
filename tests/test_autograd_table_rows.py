"""Every row of gradfix's autograd tables (``codemods/torch_api.py`` and the torch rows of
``codemods/frameworks.py``) checked against torch itself.

The analysis trusts each row as a *must* fact, so each table's claim is written once here as a
predicate and run with torch (CPU, tiny tensors) on every way real code calls the row: inputs that
carry a graph, leaves that require grad, views, scalars, keyword and positional forms, dtype and
device arguments, ``out=``, the ``torch.<f>`` and ``Tensor.<m>`` forms. The calls are generated
from one list of argument kinds, not written per row: a call torch refuses (a TypeError, a wrong
shape) is not a way code calls the row and is skipped, every call torch runs must keep the claim,
and at least one must run. A row added later is checked with no new test code; a row that keeps
its claim for some argument kinds only is a wrong row, and the message names the kinds.
"""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gradfix.codemods import frameworks, torch_api

SECOND_BACKWARD = "backward through the graph a second time"


# Argument kinds ---------------------------------------------------------------------------------------


def _as_leaf(value):
    """A tensor with a graph as a leaf of the same values (and a list of them, each)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_as_leaf(item) for item in value)
    if isinstance(value, torch.Tensor) and value.grad_fn is not None:
        return value.detach().clone().requires_grad_()
    return value


def _values(leaves: bool = False) -> dict:
    """Fresh inputs for one call (a call may change them in place), by placeholder name; with
    ``leaves``, the tensors with a graph are leaves (and views of leaves) instead."""
    torch.manual_seed(0)
    leaf = (torch.rand(2, 3) + 0.5).requires_grad_()
    other_leaf = (torch.rand(2, 3) + 0.5).requires_grad_()
    scalar_leaf = torch.tensor(0.7, requires_grad=True)
    vector_leaf = (torch.rand(3) + 0.5).requires_grad_()
    square_leaf = torch.tensor([[2.0, 0.3], [0.3, 1.0]], requires_grad=True)
    if leaves:
        return {**{name: _as_leaf(value) for name, value in _values().items()}, "G": leaf, "GT": other_leaf.t(), "V": leaf[0]}
    return {
        "L": leaf,  # a leaf that requires grad
        "L2": other_leaf,
        "G": leaf * 2,  # a tensor with a graph (positive values)
        "G2": other_leaf * 3,
        "GT": (other_leaf * 3).t(),  # (3, 2), a view with a graph
        "V": (leaf * 2)[0],  # a view of a tensor with a graph
        "S": scalar_leaf * 2,  # a 0-dim tensor with a graph
        "S2": scalar_leaf * 5,
        "G1": vector_leaf * 2,  # 1-d, with a graph
        "G01": (leaf * 2).sigmoid(),  # in (0, 1), with a graph
        "SORTED": torch.cumsum(vector_leaf, 0),  # sorted 1-d, with a graph
        "SQ": square_leaf * 1,  # a symmetric positive definite 2x2 matrix with a graph
        "B1": (leaf * 2).unsqueeze(0),  # (1, 2, 3)
        "B2": (other_leaf * 3).t().unsqueeze(0),  # (1, 3, 2)
        "C1": (torch.rand(1, 2, 5) * leaf.sum()),  # conv inputs with a graph
        "C2": (torch.rand(1, 2, 5, 5) * leaf.sum()),
        "C3": (torch.rand(1, 2, 4, 4, 4) * leaf.sum()),
        "W1": torch.rand(3, 2, 2, requires_grad=True),
        "W2": torch.rand(3, 2, 2, 2, requires_grad=True),
        "W3": torch.rand(3, 2, 2, 2, 2, requires_grad=True),
        "P": torch.rand(2, 3) + 0.5,  # plain tensors, no graph
        "P01": torch.rand(2, 3) * 0.8 + 0.1,
        "P1": torch.rand(3) + 0.5,
        "T": torch.tensor([0, 2]),  # class targets
        "BUF": torch.empty(0),  # an out= buffer
        "NP": np.ones(3, dtype=np.float32),
        "LIST": [leaf * 2, other_leaf * 3],
    }


def _resolve(item, values: dict):
    if isinstance(item, str) and item in values:
        return values[item]
    if isinstance(item, tuple) and any(isinstance(x, str) and x in values for x in item):
        return tuple(_resolve(x, values) for x in item)
    return item


# (positional arguments, keyword arguments): placeholders name _values' entries.
KINDS = [
    *[((name,), {}) for name in ("G", "L", "V", "S", "G1", "P", "SQ", "NP", "LIST")],
    (("G",), {"dtype": torch.float64}),
    (("G",), {"dtype": torch.float32, "device": "cpu"}),
    (("G",), {"dim": 1}),
    (("G",), {"dim": 1, "keepdim": True}),
    (("G",), {"force": True}),
    (("G",), {"out": "BUF"}),
    (("G", 0), {}),
    (("G", 1), {}),
    (("G", -1), {}),
    (("G", 2), {}),
    (("G", 0.5), {}),
    (("G", 2), {"dim": 1}),
    (("G", "G2"), {}),
    (("G", "P"), {}),
    (("P", "G"), {}),
    (("G", "G2"), {"out": "BUF"}),
    (("G", "GT"), {}),
    (("G", "G1"), {}),
    (("G1", "G1"), {}),
    (("G", "T"), {}),
    (("G", (3,)), {}),
    (("G", (2, 3)), {}),
    (("G", (1, 0)), {}),
    (("G", (2, 3), 0.5), {}),
    (("G", (2, 3), "S"), {}),
    (("G", torch.float64), {}),
    (("G", "cpu"), {}),
    (("G", "cpu", torch.float64), {}),
    (("G", 3, 2), {}),
    (("G", 1, 0), {}),
    (("G", 0, 5), {}),
    (("G", 1, 0, 2), {}),
    (("G", 5), {"dtype": torch.float64}),
    (("G1", 2), {}),
    (("G1", "SORTED"), {}),
    (("SORTED", "G1"), {}),
    (("G01", "P01"), {}),
    (("B1", "B2"), {}),
    (("C1", "W1"), {}),
    (("C2", "W2"), {}),
    (("C3", "W3"), {}),
    (("G", (3,), "P1", "P1"), {}),
    (("G", "P1", "P1"), {}),
    (("G", "P1", "P1"), {"training": True}),
    (("ij->j", "G"), {}),
    (("ij->ji", "G"), {}),
    (("ij,ij->", "G", "G2"), {}),
    (("ij,jk->ik", "G", "GT"), {}),
    ((2, 3), {}),
    ((3,), {}),
    (((2, 3),), {}),
    (((2, 3),), {"dtype": torch.float64}),
    (((2, 3),), {"out": "BUF"}),
    (((2, 3), 0.5), {}),
    (((2, 3), "S"), {}),
    (("S", "S2"), {}),
    (("S", "S2", 4), {}),
    ((0.0, 1.0, 4), {}),
    ((0, 5), {}),
    ((5, (3,)), {}),
    ((0, 5, (3,)), {}),
    ((2, 3), {"dtype": torch.float64}),
    ((0,), {}),
]
# The keyword names torch gives a first tensor argument: each kind whose first argument is a tensor
# is also called with it as a keyword.
FIRST_KEYWORDS = ("input", "data", "obj", "self")


def _kinds_for_functions():
    for args, kwargs in KINDS:
        yield args, kwargs
        if args and isinstance(args[0], str) and args[0] not in ("LIST",) and not args[0].startswith("ij"):
            for keyword in FIRST_KEYWORDS:
                yield args[1:], {keyword: args[0], **kwargs}


def _describe(form: str, args, kwargs) -> str:
    shown = [repr(a) if not isinstance(a, str) or len(a) > 6 else a for a in args]
    shown += [f"{k}={v if isinstance(v, str) else repr(v)}" for k, v in kwargs.items()]
    return f"{form}({', '.join(str(s) for s in shown)})"


def _calls(callable_, form: str, *, method: bool = False, leaves: bool = False):
    """Each way of calling ``callable_`` (or the method ``form``) that torch runs: (description,
    result, inputs, receiver)."""
    kinds = KINDS if method else list(_kinds_for_functions())
    for args, kwargs in kinds:
        if method and not (args and isinstance(args[0], str) and args[0] not in ("NP", "LIST") and not args[0].startswith("ij")):
            continue
        values = _values(leaves)
        resolved = [_resolve(a, values) for a in args]
        resolved_kwargs = {k: _resolve(v, values) for k, v in kwargs.items()}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if method:
                    result = getattr(resolved[0], form)(*resolved[1:], **resolved_kwargs)
                else:
                    result = callable_(*resolved, **resolved_kwargs)
        except (TypeError, RuntimeError, ValueError, IndexError, NotImplementedError, AttributeError, OverflowError):
            continue
        name = f"Tensor.{form}" if method else form
        yield _describe(name, args[1:] if method else args, kwargs), result, values, (args[0] if method else None)


def _tensors(result) -> list:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in _tensors(item)]
    return []


def _carries_graph(result) -> bool:
    return any(t.requires_grad for t in _tensors(result))


def _history_of(result, values: dict) -> str | None:
    """What ``result`` holds of a graph: its history, or a tensor it was given (itself or a view of
    it); None for a new tensor with neither (a new leaf, asked for with ``requires_grad``, is one)."""
    given = [t for value in values.values() for t in _tensors(value) if isinstance(t, torch.Tensor)]
    for tensor in _tensors(result):
        if tensor.grad_fn is not None:
            return f"grad_fn={type(tensor.grad_fn).__name__}"
        if any(tensor is t or tensor._base is t for t in given) and tensor.requires_grad:
            return "the tensor it was given"
    return None


def _torch_forms(name: str) -> list:
    """``torch.<name>``, ``torch.nn.functional.<name>``, ``torch.linalg.<name>``,
    ``torch.autograd.<name>``: what the analysis reads by the last name of a torch function."""
    forms = []
    for owner, prefix in ((torch, "torch"), (F, "torch.nn.functional"), (torch.linalg, "torch.linalg"), (torch.autograd, "torch.autograd")):
        function = getattr(owner, name, None)
        if callable(function) and not isinstance(function, type) or name == "Variable" and function is not None:
            forms.append((f"{prefix}.{name}", function))
    return forms


def _judge(row: str, failures: list[str], ran: int, claim: str) -> None:
    assert ran, f"{row}: no way of calling it ran here (or none built what the claim is about); give this test an argument kind that does"
    assert not failures, f"{row} is a wrong row: {claim} holds for {ran - len(failures)} of {ran} calls, not for: " + "; ".join(failures[:6])


# Tables of functions and methods whose result has no graph ---------------------------------------------


@pytest.mark.parametrize("row", sorted(torch_api.CREATION_FUNCTIONS | torch_api.DRAWING_FUNCTIONS))
def test_creation_functions_make_a_tensor_with_no_history(row):
    """CREATION_FUNCTIONS (and DRAWING_FUNCTIONS): whatever it is given, ``torch.<row>(...)`` is a
    new tensor with no history: none of a graph it is given passes into it."""
    ran, failures = 0, []
    for form, function in _torch_forms(row):
        for described, result, values, _ in _calls(function, form):
            ran += 1
            if (history := _history_of(result, values)) is not None:
                failures.append(f"{described} holds {history}")
    _judge(row, failures, ran, "'a new tensor with no history'")


@pytest.mark.parametrize("row", sorted(torch_api.NON_DIFFERENTIABLE))
def test_non_differentiable_results_have_no_graph(row):
    """NON_DIFFERENTIABLE: ``torch.<row>(...)`` and ``x.<row>(...)`` return nothing with a graph."""
    ran, failures = 0, []
    calls = [*_calls(getattr(torch, row, None), f"torch.{row}")] if callable(getattr(torch, row, None)) else []
    calls += [*_calls(None, row, method=True)] if hasattr(torch.Tensor, row) else []
    for described, result, _, _ in calls:
        ran += 1
        if _carries_graph(result):
            failures.append(f"{described} carries a graph")
    _judge(row, failures, ran, "'no autograd history'")


@pytest.mark.parametrize("row", sorted(torch_api.ACCUMULATING_METHODS))
def test_accumulating_methods_keep_their_arguments_graph_in_the_receiver(row):
    """ACCUMULATING_METHODS: after ``total.<row>(x)``, ``total`` holds ``x``'s graph: a backward of
    it reaches the leaf ``x`` was computed from, as after ``total += x``."""
    ran, failures = 0, []
    for shape in ((), (3,)):
        for extra in ({}, {"alpha": 0.5}):
            leaf = torch.ones(shape, requires_grad=True)
            total = torch.zeros(shape)
            try:
                getattr(total, row)(leaf * 2, **extra)
            except (TypeError, RuntimeError):
                continue
            ran += 1
            if total.grad_fn is None or torch.autograd.grad(total.sum(), leaf, allow_unused=True)[0] is None:
                failures.append(f"total.{row}(x{', alpha' if extra else ''}) of shape {shape} holds no graph of x")
    _judge(row, failures, ran, "'the receiver holds the argument's graph'")


@pytest.mark.parametrize("row", sorted(torch_api.INITIALIZING_FUNCTIONS))
def test_initializing_functions_return_the_tensor_they_are_given_with_its_history(row):
    """INITIALIZING_FUNCTIONS: ``torch.nn.init.<row>(t, ...)`` returns ``t`` itself, its history as
    it was: a parameter stays a leaf, a tensor with a graph keeps it, one without gets none."""
    ran, failures = 0, []
    function = getattr(nn.init, row)
    for shape in ((4, 4), (3, 3, 3)):
        for kind, build in (
            ("a parameter", lambda: nn.Parameter(torch.ones(shape))),
            ("a tensor with a graph", lambda: nn.Parameter(torch.ones(shape)) * 2),
            ("a plain tensor", lambda: torch.ones(shape)),
        ):
            for extra in ((), (0.5,)):
                given = build()
                history = given.grad_fn
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # (the deprecated spellings warn)
                        result = function(given, *extra)
                except (TypeError, ValueError, RuntimeError):
                    continue
                ran += 1
                if result is not given or result.grad_fn is not history:
                    failures.append(f"{row} of {kind} {shape}{extra} returns another tensor or history")
    _judge(row, failures, ran, "'returns the tensor it is given, its history as it was'")


# Methods whose result carries no graph, whatever ``x`` is: DETACHING_METHODS (VALUE_METHODS,
# METADATA_METHODS) carry none of the receiver's; FACTORY_METHODS, without ``requires_grad``, make
# a new tensor with no history.
_GRAPHLESS_METHOD_ROWS = [
    *(
        (row, "'carries none of the receiver's graph'")
        for row in sorted(torch_api.DETACHING_METHODS | torch_api.VALUE_METHODS | torch_api.METADATA_METHODS)
    ),
    *((row, "'a new tensor with no history'") for row in sorted(torch_api.FACTORY_METHODS)),
]


@pytest.mark.parametrize(("row", "claim"), _GRAPHLESS_METHOD_ROWS)
def test_graphless_methods_carry_no_graph(row, claim):
    """``x.<row>(...)`` carries no graph."""
    ran, failures = 0, []
    for described, result, _, receiver in _calls(None, row, method=True):
        ran += 1
        if _carries_graph(result):
            failures.append(f"{receiver}.{described} carries a graph")
    _judge(row, failures, ran, claim)


def _integer_types():
    for spelled in sorted(torch_api.INTEGER_TYPES):
        yield pytest.param(
            spelled,
            marks=pytest.mark.skipif(".cuda." in spelled and not torch.cuda.is_available(), reason="not run here: no CUDA"),
        )


@pytest.mark.parametrize("spelled", list(_integer_types()))
def test_a_cast_to_an_integer_type_ends_the_graph(spelled):
    """CASTING_METHODS with INTEGER_TYPES: ``x.to(T)``, ``x.to(dtype=T)``, ``x.type(T)`` carry no graph
    (the analysis reads ``T`` in any positional place or as ``dtype=``)."""
    integer_type = eval(spelled, {"torch": torch})  # (the rows are spelled as code spells them)
    ran, failures = 0, []
    for method in sorted(torch_api.CASTING_METHODS):
        for receiver in ("G", "V", "L", "S"):
            for args, kwargs in (((integer_type,), {}), ((), {"dtype": integer_type}), (("cpu", integer_type), {})):
                values = _values()
                try:
                    result = getattr(values[receiver], method)(*args, **kwargs)
                except (TypeError, RuntimeError, ValueError):
                    continue
                ran += 1
                if _carries_graph(result):
                    failures.append(f"{receiver}.{method}({args}, {kwargs}) carries a graph")
    _judge(spelled, failures, ran, "'a cast to an integer type ends the graph'")


def _graph_tensors_with_attributes() -> dict:
    """Tensors as code reads their attributes: with a graph, views, and leaves after a backward
    (plain, and with ``create_graph=True``, as a gradient penalty or MAML runs it)."""
    values = _values()
    after_backward = (torch.rand(3) + 0.5).requires_grad_()
    (after_backward * after_backward).sum().backward()
    after_double = (torch.rand(3) + 0.5).requires_grad_()
    (after_double * after_double).sum().backward(create_graph=True)
    return {
        "G": values["G"],
        "V": values["V"],
        "L": values["L"],
        "leaf after backward": after_backward,
        "leaf after backward(create_graph=True)": after_double,
    }


# Rows this test found wrong and gradfix still trusts, each with why it is not corrected yet: the
# test fails (strict) as soon as the row leaves its table or torch changes.
KNOWN_WRONG = {
    "grad": "after backward(create_graph=True) a leaf's .grad has a graph (CopyBackwards); reading .grad "
    "as a graph everywhere would make every logged gradient norm a graph: it needs the file's "
    "create_graph backwards, not a row",
}


def _rows_with_known_wrong(rows):
    return [pytest.param(row, marks=pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[row])) if row in KNOWN_WRONG else row for row in sorted(rows)]


@pytest.mark.parametrize("row", _rows_with_known_wrong(torch_api.GRAPHLESS_ATTRIBUTES | torch_api.METADATA_ATTRIBUTES | torch_api.AUTOGRAD_RECORD))
def test_graphless_attributes_hold_no_graph(row):
    """GRAPHLESS_ATTRIBUTES, METADATA_ATTRIBUTES and AUTOGRAD_RECORD (the attributes the dataflow
    reads as holding no graph of their tensor): ``x.<row>`` is no tensor with a graph."""
    ran, failures = 0, []
    for described, tensor in _graph_tensors_with_attributes().items():
        ran += 1
        if _carries_graph(getattr(tensor, row)):
            failures.append(f"{row} of a {described} carries a graph ({getattr(tensor, row).grad_fn})")
    _judge(row, failures, ran, "'holds no graph'")


@pytest.mark.parametrize("row", sorted(torch_api.BOOKKEEPING_METHODS))
def test_bookkeeping_methods_only_flip_autograd_bookkeeping(row):
    """BOOKKEEPING_METHODS: the call returns its receiver, changed in autograd's bookkeeping only:
    ``detach_()`` leaves it with no graph, ``requires_grad_()`` keeps a graph it has and makes a
    leaf of a tensor without one (``_bookkept``)."""
    ran, failures = 0, []
    for receiver in ("G", "L", "P", "S"):
        for args in ((), (True,), (False,)):
            values = _values()
            tensor = values[receiver]
            had_graph, data = tensor.grad_fn is not None, tensor.detach().clone()
            try:
                result = getattr(tensor, row)(*args)
            except (TypeError, RuntimeError):
                continue
            ran += 1
            described = f"{receiver}.{row}{args}"
            if result is not tensor or not torch.equal(tensor.detach(), data):
                failures.append(f"{described} is not its receiver, unchanged in value")
            elif row.startswith("detach") and _carries_graph(result):
                failures.append(f"{described} carries a graph")
            elif row == "requires_grad_" and args != (False,) and (had_graph != (result.grad_fn is not None) or not result.requires_grad):
                failures.append(f"{described}: had a graph {had_graph}, now {result.grad_fn}")
    _judge(row, failures, ran, "'only flips autograd bookkeeping'")


def _distributions(values: dict) -> list:
    D = torch.distributions
    g, g2, g1 = values["G"], values["G2"], values["G1"]
    probs = g.softmax(-1)
    return [
        D.Normal(g, g2),
        D.LogNormal(g, g2),
        D.Uniform(g, g + g2),
        D.Categorical(probs=probs),
        D.Categorical(logits=g),
        D.OneHotCategorical(probs=probs),
        D.Bernoulli(probs=g.sigmoid()),
        D.Binomial(3, probs=g.sigmoid()),
        D.Beta(g, g2),
        D.Gamma(g, g2),
        D.Dirichlet(g),
        D.Exponential(g),
        D.Poisson(g),
        D.Laplace(g, g2),
        D.Independent(D.Normal(g, g2), 1),
        D.MultivariateNormal(g1, scale_tril=torch.diag(g1)),
        D.RelaxedBernoulli(torch.tensor(0.5), probs=g.sigmoid()),
        D.MixtureSameFamily(D.Categorical(probs=probs), D.Normal(g, g2)),
    ]


@pytest.mark.parametrize("row", sorted(torch_api.SAMPLING_METHODS))
def test_a_distributions_samples_carry_no_graph(row):
    """SAMPLING_METHODS: ``dist.<row>(...)`` of a distribution whose parameters carry a graph
    carries none."""
    ran, failures = 0, []
    for index in range(len(_distributions(_values()))):
        for args in ((), ((2,),), (2,)):
            distribution = _distributions(_values())[index]
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    result = getattr(distribution, row)(*args)
            except (TypeError, RuntimeError, ValueError, NotImplementedError, AttributeError):
                continue
            ran += 1
            if _carries_graph(result):
                failures.append(f"{type(distribution).__name__}.{row}{args} carries a graph")
    _judge(row, failures, ran, "'a sample carries no graph'")


# What a call returns ---------------------------------------------------------------------------------


def _both_forms(row: str):
    if callable(getattr(torch, row, None)):
        yield from _calls(getattr(torch, row), f"torch.{row}")
    if hasattr(torch.Tensor, row):
        yield from _calls(None, row, method=True)


@pytest.mark.parametrize("row", sorted(torch_api.WITH_INDICES))
def test_reductions_with_indices_return_indices_without_a_graph(row):
    """WITH_INDICES: ``values, indices = torch.<row>(x, ...)`` (or ``x.<row>(...)``): the indices
    are an integer tensor with no graph."""
    ran, failures = 0, []
    for described, result, _, _ in _both_forms(row):
        ran += 1
        if not (isinstance(result, tuple) and len(result) == 2 and not result[1].is_floating_point() and not _carries_graph(result[1])):
            failures.append(f"{described} returns {type(result).__name__}, not (values, indices without a graph)")
    _judge(row, failures, ran, "'returns values and indices'")


@pytest.mark.parametrize("row", sorted(torch_api.WITH_INDICES_GIVEN_A_DIMENSION))
def test_reductions_given_a_dimension_return_indices_without_a_graph(row):
    """WITH_INDICES_GIVEN_A_DIMENSION, as ``_returns_indices`` reads "given a dimension": ``dim=``,
    or a whole number right after the tensor (not any argument: ``torch.max(a, b)`` of two tensors
    is one tensor), returns (values, indices)."""
    ran, failures = 0, []
    for args, kwargs in KINDS:
        tensor_first = args and args[0] in ("G", "L", "V", "G1")
        if not tensor_first or not ((len(args) > 1 and type(args[1]) is int) or "dim" in kwargs):
            continue
        for method in (False, True):
            values = _values()
            resolved = [_resolve(a, values) for a in args]
            resolved_kwargs = {k: _resolve(v, values) for k, v in kwargs.items()}
            try:
                if method:
                    result = getattr(resolved[0], row)(*resolved[1:], **resolved_kwargs)
                else:
                    result = getattr(torch, row)(*resolved, **resolved_kwargs)
            except (TypeError, RuntimeError, ValueError, IndexError):
                continue
            ran += 1
            if not (isinstance(result, tuple) and len(result) == 2 and not _carries_graph(result[1])):
                described = _describe(f"Tensor.{row}" if method else f"torch.{row}", args[1:] if method else args, kwargs)
                failures.append(f"{described} returns {type(result).__name__}, not (values, indices)")
    _judge(row, failures, ran, "'given a dimension, returns values and indices'")


@pytest.mark.parametrize("row", sorted(torch_api.TUPLE_FUNCTIONS))
def test_tuple_functions_return_a_tuple_of_that_length(row):
    """TUPLE_FUNCTIONS: whatever its arguments, a tuple of the row's length; the outputs of
    EVERY_OUTPUT_DIFFERENTIABLE's rows each carry the graph of a graph given, and the others' last
    output is an integer with none."""
    length, every = torch_api.TUPLE_FUNCTIONS[row], row in torch_api.EVERY_OUTPUT_DIFFERENTIABLE
    owner, name = row.rsplit(".", 1)
    function = getattr(eval(owner, {"torch": torch}), name)
    extra = [
        ((), {}),
        ((), {"mode": "r"}),
        ((), {"mode": "complete"}),
        ((), {"full_matrices": False}),
        ((), {"UPLO": "U"}),
        ((), {"dim": 0}),
        ((), {"correction": 0}),
        ((1,), {}),
        ((), {"k": 1}),
    ]
    ran, failures = 0, []
    for tensor in ("SQ", "G", "G1", "S"):
        for args, kwargs in extra:
            values = _values()
            given = values[tensor]
            try:
                result = function(given, *args, **kwargs)
            except (TypeError, RuntimeError, ValueError, IndexError):
                continue
            ran += 1
            described = _describe(row, (tensor, *args), kwargs)
            if not isinstance(result, tuple) or len(result) != length:
                failures.append(f"{described} returns {type(result).__name__} of {len(result) if isinstance(result, tuple) else '-'}")
            elif every and not all(t.grad_fn is not None for t in result):
                failures.append(f"{described}: outputs without a graph: {[i for i, t in enumerate(result) if t.grad_fn is None]}")
            elif not every and (result[-1].is_floating_point() or result[-1].is_complex() or _carries_graph(result[-1])):
                failures.append(f"{described}: its last output is not an integer without a graph")
    _judge(row, failures, ran, "'a tuple of this length, outputs as the table says'")


# What a backward frees ----------------------------------------------------------------------------------


def _second_backward(result) -> str | None:
    """What a second backward through ``result``'s graph does: None where it runs, else the error."""
    outputs = [t for t in _tensors(result) if t.grad_fn is not None and (t.is_floating_point() or t.is_complex())]
    if not outputs:
        return "no graph"

    def total():
        return sum(t.abs().sum() if t.is_complex() else t.sum() for t in outputs)

    try:
        total().backward()
    except RuntimeError as error:
        return f"first backward: {error}"
    try:
        total().backward()
    except RuntimeError as error:
        return str(error)
    return None


def _saving_forms(row: str):
    """The row called on leaves (and views of leaves): only the row's own operation can save."""
    for form, function in _torch_forms(row):
        yield from _calls(function, form, leaves=True)
    if hasattr(torch.Tensor, row):
        yield from _calls(None, row, method=True, leaves=True)


@pytest.mark.parametrize("row", sorted(torch_api.SAVING_FOR_CERTAIN))
def test_saving_for_certain_makes_a_second_backward_raise(row):
    """SAVING_FOR_CERTAIN, read by its last name as a torch function (``torch.<row>``,
    ``F.<row>``, ``torch.linalg.<row>``) or a method (``x.<row>``): whatever it is given, a second
    backward through its output raises."""
    ran, failures = 0, []
    for described, result, _, _ in _saving_forms(row):
        outcome = _second_backward(result)
        if outcome is not None and (outcome == "no graph" or outcome.startswith("first backward")):
            continue  # (no graph to walk twice: integer outputs, arguments without a graph)
        ran += 1
        if outcome is None or SECOND_BACKWARD not in outcome:
            failures.append(f"{described}: a second backward {'runs' if outcome is None else 'raises ' + outcome[:60]}")
    _judge(row, failures, ran, "'a second backward raises'")


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(row, marks=pytest.mark.skipif(row == "cuda" and not torch.cuda.is_available(), reason="not run here: no CUDA"))
        for row in sorted(torch_api.SAVING_NOTHING_METHODS)
    ],
)
def test_saving_nothing_methods_let_a_second_backward_run(row):
    """SAVING_NOTHING_METHODS: ``x.<row>(...)`` of a leaf saves nothing, so a second backward through
    it runs."""
    ran, failures = 0, []
    for described, result, _, receiver in _calls(None, row, method=True, leaves=True):
        outcome = _second_backward(result)
        if outcome == "no graph":
            continue
        ran += 1
        if outcome is not None:
            failures.append(f"{receiver}.{described} of leaves: {outcome[:80]}")
    _judge(row, failures, ran, "'saves nothing: a second backward runs'")


@pytest.mark.parametrize("row", sorted(torch_api.SAVING_NOTHING_FUNCTIONS))
def test_saving_nothing_functions_let_a_second_backward_run(row):
    """SAVING_NOTHING_FUNCTIONS: ``torch.<f>(...)`` of leaves (and of numbers) saves nothing."""
    owner, name = row.rsplit(".", 1)
    function = getattr(eval(owner, {"torch": torch}), name)
    ran, failures = 0, []
    for args, kwargs in [*_kinds_for_functions(), (("G", "G2"), {"alpha": 2})]:
        values = _values(leaves=True)
        resolved = [_resolve(a, values) for a in args]
        try:
            result = function(*resolved, **{k: _resolve(v, values) for k, v in kwargs.items()})
        except (TypeError, RuntimeError, ValueError, IndexError, OverflowError):
            continue
        outcome = _second_backward(result)
        if outcome == "no graph":
            continue
        ran += 1
        if outcome is not None:
            failures.append(f"{_describe(row, args, kwargs)} of leaves: {outcome[:80]}")
    _judge(row, failures, ran, "'saves nothing: a second backward runs'")


# torch.nn modules -------------------------------------------------------------------------------------

CONSTRUCTIONS = [((), {}), ((2,), {}), ((1,), {}), ((), {"dim": 1}), ((0.5, 0.0), {}), ((1, (3, 1)), {}), ((), {"scale_factor": 2})]
CONSTRUCTIONS += [((1, 0.0), {}), ((), {"inplace": True}), ((), {"reduction": "sum"}), ((), {"weight": torch.ones(3)})]


def _module_calls(values: dict) -> list:
    g, p = values["G"], values["P"]
    ctc = (torch.randn(4, 1, 3) * values["S"]).log_softmax(2)
    return [
        ("(x)", (g,)),
        ("(x 3-d)", (g.unsqueeze(0),)),
        ("(x 4-d)", (values["C2"],)),
        ("(x 5-d)", (values["C3"],)),
        ("(x, target)", (g, p)),
        ("(x in (0, 1), target)", (g.sigmoid(), values["P01"])),
        ("(x, classes)", (g, values["T"])),
        ("(x, x2)", (g, values["G2"])),
        ("(x, x2, ±1)", (g, values["G2"], torch.tensor([1.0, -1.0]))),
        ("(x, x2, x3)", (g, values["G2"], g * 0.5)),
        ("(x, target, var)", (g, p, p)),
        ("(x, {0,1} target)", (g, (p > 1).float())),
        ("(x, class indices)", (g, torch.tensor([[0, 2, -1], [1, -1, -1]]))),
        ("ctc", (ctc, torch.tensor([[1, 2]]), torch.tensor([4]), torch.tensor([2]))),
    ]


def _module_runs(row: str, leaves: bool = False):
    """Each module ``torch.nn.<row>`` torch builds from CONSTRUCTIONS, called on each input it takes."""
    for args, kwargs in CONSTRUCTIONS:
        try:
            module = getattr(nn, row)(*args, **kwargs)
        except (TypeError, ValueError, RuntimeError, AssertionError):
            continue
        count = len(_module_calls(_values()))
        for index in range(count):
            values = _values(leaves)
            described, inputs = _module_calls(values)[index]
            inputs = _as_leaf(inputs) if leaves else inputs
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    result = module(*inputs)
            except (TypeError, ValueError, RuntimeError, IndexError):
                continue
            yield f"nn.{_describe(row, args, kwargs)}{described}", module, result


@pytest.mark.parametrize("row", sorted(torch_api.PARAMETERLESS_MODULES))
def test_parameterless_modules_add_no_graph(row):
    """PARAMETERLESS_MODULES: the module holds no parameter, and given inputs without a graph its
    output has none."""
    ran, failures = 0, []
    for args, kwargs in CONSTRUCTIONS:
        try:
            module = getattr(nn, row)(*args, **kwargs)
        except (TypeError, ValueError, RuntimeError, AssertionError):
            continue
        ran += 1
        if list(module.parameters()):
            failures.append(f"nn.{_describe(row, args, kwargs)} holds parameters")
    for described, module, result in _module_runs(row):
        ran += 1
    # Given no graph: the same calls with every input detached.
    for args, kwargs in CONSTRUCTIONS:
        try:
            module = getattr(nn, row)(*args, **kwargs)
        except (TypeError, ValueError, RuntimeError, AssertionError):
            continue
        for described, inputs in _module_calls(_values()):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    result = module(*[t.detach() for t in inputs])
            except (TypeError, ValueError, RuntimeError, IndexError):
                continue
            if _carries_graph(result):
                failures.append(f"nn.{_describe(row, args, kwargs)}{described} given no graph returns one")
    _judge(row, failures, ran, "'adds no parameters'")


@pytest.mark.parametrize("row", sorted(torch_api.SAVING_FOR_CERTAIN_MODULES))
def test_saving_for_certain_modules_make_a_second_backward_raise(row):
    """SAVING_FOR_CERTAIN_MODULES: whatever it is built with and given, a second backward through
    the module's output raises."""
    ran, failures = 0, []
    for described, _, result in _module_runs(row, leaves=True):
        outcome = _second_backward(result)
        if outcome is not None and (outcome == "no graph" or outcome.startswith("first backward")):
            continue
        ran += 1
        if outcome is None or SECOND_BACKWARD not in outcome:
            failures.append(f"{described}: a second backward {'runs' if outcome is None else 'raises ' + outcome[:60]}")
    _judge(row, failures, ran, "'a second backward raises'")


def _module_returning_rows():
    for row in sorted(torch_api.MODULE_RETURNING):
        yield pytest.param(row, marks=pytest.mark.skipif(row == "cuda" and not torch.cuda.is_available(), reason="not run here: no CUDA"))


@pytest.mark.parametrize("row", list(_module_returning_rows()))
def test_module_returning_methods_return_the_module(row):
    """MODULE_RETURNING: ``module.<row>(...)`` returns the module it is called on."""
    ran, failures = 0, []
    for build in (lambda: nn.Linear(2, 2), nn.ReLU, lambda: nn.Sequential(nn.Linear(2, 2), nn.Tanh())):
        for args, kwargs in (((), {}), ((torch.float64,), {}), (("cpu",), {}), ((True,), {}), ((False,), {}), ((), {"dtype": torch.float64})):
            module = build()
            try:
                result = getattr(module, row)(*args, **kwargs)
            except (TypeError, RuntimeError, ValueError):
                continue
            ran += 1
            if result is not module:
                failures.append(f"{type(module).__name__}.{row}{args} returns {type(result).__name__}, not the module")
    _judge(row, failures, ran, "'returns the module'")


# frameworks' torch rows -------------------------------------------------------------------------------


@pytest.mark.parametrize("row", sorted([*frameworks.NO_GRAD_CONTEXTS, frameworks.GRAD_MODE_SWITCH]))
def test_no_grad_contexts_build_no_graph(row):
    """NO_GRAD_CONTEXTS (and GRAD_MODE_SWITCH given False): what is computed inside has no graph."""
    owner, name = row.rsplit(".", 1)
    context = getattr(eval(owner, {"torch": torch}), name)
    failures, ran = [], 0
    for args in ((False,),) if row == frameworks.GRAD_MODE_SWITCH else ((),):
        for tensor in ("G", "L", "V"):
            values = _values()
            with context(*args):
                result = values[tensor] * values[tensor] + 1
            ran += 1
            if _carries_graph(result):
                failures.append(f"{row}{args}: {tensor} * {tensor} carries a graph")
    _judge(row, failures, ran, "'computes without a graph'")


def _module_wrapper_rows():
    for row in sorted(frameworks.MODULE_WRAPPERS):
        needs_a_group = "Distributed" in row  # (a process group, which this test does not start)
        yield pytest.param(row, marks=pytest.mark.skipif(needs_a_group, reason="not run here: needs a process group"))


@pytest.mark.parametrize("row", list(_module_wrapper_rows()))
def test_module_wrappers_return_what_the_wrapped_module_returns(row):
    """MODULE_WRAPPERS: calling ``Wrapper(module)`` runs the module's forward and returns what it
    returns, with the graph of its parameters."""
    owner, name = row.rsplit(".", 1)
    wrapper = getattr(importlib.import_module(owner), name)  # (torch.nn.parallel.data_parallel is also a function's name)
    module = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    wrapped = wrapper(module)(x)
    assert torch.equal(wrapped, module(x)) and wrapped.grad_fn is not None, f"{row}(module)(x) is not module(x) with its graph"


@pytest.mark.parametrize("row", sorted(frameworks.CLIPPING_FUNCTIONS))
def test_clipping_functions_clip_the_gradients_they_are_given(row):
    """CLIPPING_FUNCTIONS: ``torch.nn.utils.<row>(parameters, limit)`` changes the gradients it is
    given, and no parameter."""
    model = nn.Linear(3, 2)
    (model(torch.ones(4, 3)) * 100).sum().backward()
    weights, gradients = [p.detach().clone() for p in model.parameters()], [p.grad.clone() for p in model.parameters()]
    getattr(nn.utils, row)(model.parameters(), 0.01)
    assert all(torch.equal(w, p) for w, p in zip(weights, model.parameters())), f"{row} changed a parameter"
    assert not all(torch.equal(g, p.grad) for g, p in zip(gradients, model.parameters())), f"{row} left the gradients as they were"


@pytest.mark.parametrize("row", sorted(frameworks.OPTIMIZER_ONLY_METHODS))
def test_optimizer_only_methods_are_no_tensors(row):
    """OPTIMIZER_ONLY_METHODS: methods of optimizers that no tensor has."""
    assert not hasattr(torch.Tensor, row), f"torch.Tensor has {row}"
    assert hasattr(torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1), row)


@pytest.mark.parametrize("row", sorted(frameworks.PARAMETER_KEEPING_METHODS))
def test_parameter_keeping_methods_change_no_parameter(row):
    """PARAMETER_KEEPING_METHODS: ``module.<row>()`` changes no parameter's value."""
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    before = [p.detach().clone() for p in model.parameters()]
    result = getattr(model, row)()
    if hasattr(result, "__iter__") and not isinstance(result, dict):
        list(result)
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters())), f"{row} changed a parameter"


# What each corrected row changes in gradfix's answers -------------------------------------------------

import gradfix  # noqa: E402


def _found(source: str) -> list:
    return [(f.code, f.hint, f.fix and f.fix.value) for f in gradfix.check(source, hints=True).findings]


def _runs(source: str) -> bool:
    try:
        exec(compile(source, "<program>", "exec"), {})
    except RuntimeError as error:
        assert SECOND_BACKWARD in str(error)
        return False
    return True


KEPT_FOR_A_SECOND_HEAD = """\
import torch
import torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))
head = nn.Linear(4, 1)
optimizer = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    out = model(torch.randn(5, 4))
    features = {features}
    first = out.pow(2).mean()
    first.backward(retain_graph=True)
    second = head(features).pow(2).mean()
    second.backward()
    optimizer.step()
"""


def test_as_tensor_of_a_tensor_keeps_its_graph_so_the_retain_graph_stays():
    """``torch.as_tensor(out)`` returns ``out`` (with a dtype, a cast with its graph): the second
    backward walks the first one's graph, and its retain_graph=True is needed. Where the call
    really cuts the graph (``torch.tensor(out.detach())``, ``out.detach()``), dropping it is safe."""
    for features in ("torch.as_tensor(out)", "torch.as_tensor(out, dtype=torch.float64).float()"):
        source = KEPT_FOR_A_SECOND_HEAD.format(features=features)
        assert _runs(source) and not _runs(source.replace("retain_graph=True", "retain_graph=False"))
        assert ("GF009", False, "safe") not in _found(source), features
    for features in ("torch.tensor(out.detach())", "out.detach()"):
        source = KEPT_FOR_A_SECOND_HEAD.format(features=features)
        assert _runs(source.replace("retain_graph=True", "retain_graph=False"))
        assert ("GF009", False, "safe") in _found(source), features


BUILT_BEFORE_THE_LOOP = """\
import torch
import torch.nn as nn
torch.manual_seed(0)
W = nn.Parameter(torch.randn(3, 3))
optimizer = torch.optim.SGD([W], lr=0.1)
column = {column}
for step in range(3):
    loss = column.pow(2).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_an_einsum_of_one_operand_saves_nothing_so_a_stale_forward_runs():
    """``torch.einsum("ij->j", W)`` is a sum: a graph built of it before the loop is walked again
    each iteration and runs (on a stale forward), so moving it into the loop changes what the
    program computes and is no safe fix. A product before the loop (``W @ W``) saves its operands:
    the program raises and the safe fix stays."""
    one_operand = BUILT_BEFORE_THE_LOOP.format(column='torch.einsum("ij->j", W)')
    assert _runs(one_operand)
    assert [code for code, _, fix in _found(one_operand) if fix == "safe"] == []
    product = BUILT_BEFORE_THE_LOOP.format(column="torch.matmul(W, W).sum(0)")
    assert not _runs(product)
    assert ("GF003", False, "safe") in _found(product)


KEPT_ACROSS_STEPS = """\
import torch
import torch.nn as nn
a, b = nn.Linear(3, 3), nn.Linear(3, 3)
optimizer = torch.optim.SGD([*a.parameters(), *b.parameters()], lr=0.1)
total = 0.0
for step in range(3):
    x = torch.randn(2, 3)
    first, second = {call}
    loss = first.sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total += second.sum()
"""


def test_max_of_two_tensors_returns_no_indices():
    """``torch.max(a(x), b(x))`` (and ``a(x).max(b(x))``) is an elementwise maximum: unpacked, its
    second row holds the graph, which ``total`` keeps across steps. Given a dimension (``1``,
    ``-1``, ``dim=1``), the second item is the indices, with no graph."""
    for call in ("torch.max(a(x), b(x))", "a(x).max(b(x))", "torch.min(a(x), b(x))"):
        namespace: dict = {}
        exec(KEPT_ACROSS_STEPS.format(call=call), namespace)
        assert namespace["total"].grad_fn is not None
        assert [code for code, _, _ in _found(KEPT_ACROSS_STEPS.format(call=call))] == ["GF007"], call
    for call in ("torch.max(a(x) + b(x), 1)", "(a(x) + b(x)).max(-1)", "torch.max(a(x) + b(x), dim=1)"):
        namespace = {}
        exec(KEPT_ACROSS_STEPS.format(call=call), namespace)
        assert namespace["total"].grad_fn is None
        assert _found(KEPT_ACROSS_STEPS.format(call=call)) == [], call
