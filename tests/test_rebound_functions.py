"""A call of a function of the module's scope runs what its name is bound to when the call runs:
the analysis reads the function's ``def`` only where nothing else may bind that name (another
``def``, an assignment, an import, a class, a ``global`` in a function, the namespace reached by
``globals()``), and where the function has no decorator it does not model (a decorator may return
any object: ``functools.lru_cache`` keeps and returns the first call's tensor)."""

import subprocess
import sys

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .retain_graph_drops import fixed_safely, runs_with_it_dropped

# The extra term of each step's loss; bound otherwise, it adds the earlier steps' losses, whose
# graphs the next backward walks again (hence `retain_graph=True`).
PROGRAM = """\
import functools
import torch
from torch import nn

DECORATOR
def extra(kept):
    return 0.0

BOUND

def train(batches):
    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    kept = []
    opt.zero_grad()
    for x in batches:
        loss = net(x).pow(2).mean()
        kept.append(loss)
        total = loss + extra(kept[:-1])
        total.backward(retain_graph=True)
    opt.step()
    return net.weight.grad.clone()


batches = [torch.randn(3, 4, generator=torch.Generator().manual_seed(i)) for i in range(3)]
print(train(batches))
"""
SUMMING = "lambda kept: 0.1 * sum(kept)"


def _program(decorator: str = "", bound: str = "") -> str:
    return PROGRAM.replace("DECORATOR\n", decorator).replace("BOUND\n", bound)


def _dropping_runs(source: str) -> bool:
    return runs_with_it_dropped(source, "total.backward(retain_graph=True)")


@pytest.mark.parametrize(
    ("decorator", "bound"),
    [
        ("", f"extra = {SUMMING}\n"),  # bound again by an assignment
        ("", "def extra(kept):\n    return 0.1 * sum(kept)\n"),  # defined again
        ("", "from builtins import sum as extra\n"),  # bound again by an import
        ("", f"def configure():\n    global extra\n    extra = {SUMMING}\nconfigure()\n"),
        ("", f"globals()['extra'] = {SUMMING}\n"),
        (f"def scaled(function):\n    return {SUMMING}\n\n@scaled\n", ""),  # a decorator that returns another function
    ],
)
def test_a_function_its_name_may_not_hold_is_not_read(decorator, bound):
    """The term is not the constant of the `def`: dropping `retain_graph=True` breaks the program."""
    source = _program(decorator, bound)
    assert not fixed_safely(source)
    assert not _dropping_runs(source)


def test_a_parameter_of_the_calling_function_is_not_the_module_function():
    """`train(batches, extra)` calls the `extra` it is handed, not the module's `def extra`."""
    source = _program().replace("def train(batches):", "def train(batches, extra):")
    source = source.replace("print(train(batches))", f"print(train(batches, {SUMMING}))")
    assert not fixed_safely(source)
    assert not _dropping_runs(source)


CLASS_TERM = """\
class Extra:
    def __call__(self, kept):
        return 0.0


class Summing:
    def __call__(self, kept):
        return 0.1 * sum(kept)


"""


@pytest.mark.parametrize(("bound_again", "fixed"), [("Extra = Summing\n", False), ("", True)])
def test_a_class_the_module_binds_again_is_not_read_as_its_statement(bound_again, fixed):
    """`extra = Extra()` in `train` builds a `Summing` once the module has run `Extra = Summing`."""
    source = _program(decorator=CLASS_TERM + "def unused(kept):\n    return kept\n\n\n", bound=bound_again)
    source = source.replace("    kept = []\n", "    extra = Extra()\n    kept = []\n", 1)
    assert fixed_safely(source) == fixed
    assert _dropping_runs(source) == fixed


@pytest.mark.parametrize(
    ("decorator", "bound"),
    [
        ("", ""),
        # the function's own local of its name (``loss = ...; return loss`` in ``def loss``) binds nothing of the module's
        ("", "def helper(kept):\n    extra = 0.0\n    return extra\n"),
        # another name bound (to a lambda that calls nothing: one that calls code may read autograd's bookkeeping, which GF009 needs proved absent)
        ("", "extras = lambda kept: kept\n"),
        ("@torch.no_grad()\n", ""),  # a decorator gradfix models: the body runs with gradients off
    ],
)
def test_the_variants_whose_name_holds_its_def_drop_retain_graph_safely(decorator, bound):
    source = _program(decorator, bound)
    assert fixed_safely(source)
    assert _dropping_runs(source)


HELPER = """\
import torch
from torch import nn


def step(loss):
    loss.backward()


NAMESPACE
model = nn.Linear(4, 1)
loss = model(torch.randn(8, 4)).pow(2).mean()
step(loss)
loss.backward()
"""


@pytest.mark.parametrize(("namespace", "read"), [("", True), ("settings = vars(model)", True), ("settings = vars()", False)])
def test_only_vars_of_no_object_reaches_the_namespace(namespace, read):
    """`vars(model)` is the object's attributes; `vars()` at module level is the module's namespace,
    through which the name `step` may be bound again."""
    report = check_source(HELPER.replace("NAMESPACE", namespace).encode(), all_rules(), FixMode.NONE, "train.py")
    assert ("GF001" in [f.code for f in report.findings if not f.hint]) == read


REPACKAGE = """\
import torch
from torch import nn


def repackage_hidden(h):
    return h.detach()


def train(cell, data, PARAMETERS):
    opt = torch.optim.SGD(cell.parameters(), lr=0.1)
    h = torch.zeros(1, 4)
    for x in data:
        h = repackage_hidden(h)
        h = cell(x, h)
        loss = h.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


train(nn.RNNCell(3, 4), torch.randn(4, 1, 3), ARGUMENTS)
"""


@pytest.mark.parametrize(("parameters", "arguments", "detached"), [("repackage_hidden", "lambda h: h", False), ("unused", "None", True)])
def test_a_parameter_named_like_a_detaching_function_detaches_nothing(parameters, arguments, detached):
    """`repackage_hidden(h)` calls the parameter, an identity: the state carries its graph."""
    source = REPACKAGE.replace("PARAMETERS", parameters).replace("ARGUMENTS", arguments)
    found = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py").findings
    assert ("GF004" in [f.code for f in found]) == (not detached)
    ran = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=300)
    assert (ran.returncode == 0) == detached
