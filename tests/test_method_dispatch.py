"""A method called on ``self`` runs the body of the object's class, which may be a subclass of the
class the call is written in, or the object's own attribute of that name: the analysis reads that
class's own method only where no class of the file derived from it defines the method again, the
method is no placeholder a subclass is there to replace (abstract, or a body that only passes or
raises), and the file stores no attribute of its name on any object. An object built from a class
(``step = Step()``) runs that class's method."""

import subprocess
import sys

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

# A trainer whose step adds a term of the losses kept so far: the subclass's term reads the earlier
# steps' graphs, which the next backward walks again (hence `retain_graph=True`).
TRAINER = """\
import torch
from torch import nn
from abc import ABC, abstractmethod


class Trainer(BASES):
    def __init__(self):
        torch.manual_seed(0)
        self.net = nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

DEFAULT
    def train(self, batches):
        kept = []
        self.opt.zero_grad()
        for x in batches:
            loss = self.net(x).pow(2).mean()
            kept.append(loss)
            total = loss + self.extra_loss(kept[:-1])
            total.backward(retain_graph=True)
        self.opt.step()
        return self.net.weight.grad.clone()

SUBCLASS
batches = [torch.randn(3, 4, generator=torch.Generator().manual_seed(i)) for i in range(3)]
trainer = TRAINED()
print(trainer.train(batches))
"""
CONSTANT_TERM = "    def extra_loss(self, kept):\n        return 0.0\n"
SMOOTHED = "class Smoothed(Trainer):\n    def extra_loss(self, kept):\n        return 0.1 * sum(kept)\n"


def _trainer(default=CONSTANT_TERM, subclass=SMOOTHED, trained="Smoothed", bases="object"):
    return TRAINER.replace("BASES", bases).replace("DEFAULT", default).replace("SUBCLASS", subclass).replace("TRAINED", trained)


def _report(source: str):
    return check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")


def _runs(source: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=300)


def test_a_method_a_subclass_defines_again_is_not_read_as_the_class_own():
    """The subclass's term keeps the earlier graphs, so `retain_graph=True` is needed: dropping it
    (the GF009 fix, which reading `Trainer.extra_loss` would make safe) breaks the program."""
    source = _trainer()
    assert not any(f.code == "GF009" for f in _report(source).fixed)
    assert _runs(source).returncode == 0
    dropped = _runs(source.replace("total.backward(retain_graph=True)", "total.backward()"))
    assert "backward through the graph a second time" in dropped.stderr


def test_the_same_trainer_without_the_subclass_drops_retain_graph_safely():
    """The variant without the fact: no class of the file defines `extra_loss` again."""
    source = _trainer(subclass="", trained="Trainer")
    assert [f.code for f in _report(source).fixed] == ["GF009"]
    fixed = _runs(source.replace("total.backward(retain_graph=True)", "total.backward()"))
    assert fixed.returncode == 0 and fixed.stdout == _runs(source).stdout


@pytest.mark.parametrize(
    ("default", "bases"),
    [
        ('    def extra_loss(self, kept):\n        raise NotImplementedError("a subclass defines the term")\n', "object"),
        ("    @abstractmethod\n    def extra_loss(self, kept):\n        return 0.0\n", "ABC"),
        ('    def extra_loss(self, kept):\n        """The term a subclass adds."""\n', "object"),
        ("    def extra_loss(self, kept): ...\n", "object"),
    ],
)
def test_a_placeholder_method_is_not_read_even_with_no_subclass_in_the_file(default, bases):
    """A subclass of another module is there to replace it, and gradfix did not read that one."""
    source = _trainer(default=default, subclass="", trained="Trainer", bases=bases)
    assert not any(f.code == "GF009" for f in _report(source).fixed)


@pytest.mark.parametrize(
    ("shadowing", "fixed"),
    [
        ("trainer.extra_loss = lambda kept: 0.1 * sum(kept)", False),  # the object's own attribute hides the method
        ('setattr(trainer, "extra_loss", lambda kept: 0.1 * sum(kept))', False),
        ('key = "extra_loss"\nsetattr(trainer, key, lambda kept: 0.1 * sum(kept))', False),  # a name not written out
        ('trainer.__dict__["extra_loss"] = lambda kept: 0.1 * sum(kept)', False),
        ("trainer.note = 0.1", True),  # the variant: an attribute of another name
    ],
)
def test_an_attribute_stored_under_a_method_name_hides_the_method(shadowing, fixed):
    source = _trainer(subclass="", trained="Trainer").replace("print(trainer.train(batches))", f"{shadowing}\nprint(trainer.train(batches))")
    assert any(f.code == "GF009" for f in _report(source).fixed) == fixed
    dropped = _runs(source.replace("total.backward(retain_graph=True)", "total.backward()"))
    assert (dropped.returncode == 0) == fixed


def test_an_attribute_the_constructor_stores_under_a_method_name_hides_it():
    stored = "        self.extra_loss = lambda kept: 0.1 * sum(kept)\n"
    source = _trainer(subclass="", trained="Trainer").replace("lr=0.1)\n", "lr=0.1)\n" + stored, 1)
    assert not any(f.code == "GF009" for f in _report(source).fixed)
    assert "backward through the graph a second time" in _runs(source.replace("total.backward(retain_graph=True)", "total.backward()")).stderr


STEP = """\
import torch
from torch import nn


class Step:
    def __init__(self):
        self.model = nn.Linear(4, 1)

    def run(self, loss):
        loss.backward()

    def train(self, x):
        loss = self.model(x).pow(2).mean()
        self.run(loss)
        loss.backward()
SUBCLASS
RUN
"""
QUIET = "\n\nclass Quiet(Step):\n    def run(self, loss):\n        pass\n"


def _codes(source: str) -> list[str]:
    return [f.code for f in _report(source).findings]


def test_a_second_backward_through_a_method_a_subclass_replaces_is_not_reported():
    """`Quiet().train(x)` backwards once: `Step.run`'s backward never runs (a false GF001 before)."""
    source = STEP.replace("SUBCLASS", QUIET).replace("RUN", "\nQuiet().train(torch.randn(8, 4))")
    assert _runs(source).returncode == 0
    assert "GF001" not in _codes(source)
    # the variant without the subclass: `self.run` is `Step.run`, which backwards, and so does `train`
    alone = STEP.replace("SUBCLASS", "").replace("RUN", "\nStep().train(torch.randn(8, 4))")
    assert "backward through the graph a second time" in _runs(alone).stderr
    assert "GF001" in _codes(alone)


@pytest.mark.parametrize(("built", "reported"), [("Step", True), ("Quiet", False)])
def test_an_object_built_from_a_class_runs_that_class_method(built, reported):
    """`step.run(loss)` on `step = Step()` is `Step.run` though `Quiet` defines `run` again."""
    run = f"\nmodel = nn.Linear(4, 1)\nstep = {built}()\nloss = model(torch.randn(8, 4)).pow(2).mean()\nstep.run(loss)\nloss.backward()"
    source = STEP.replace("SUBCLASS", QUIET).replace("RUN", run)
    assert ("GF001" in _codes(source)) == reported
    assert ("backward through the graph a second time" in _runs(source).stderr) == reported


def test_an_attribute_hides_the_method_of_an_object_built_from_the_class():
    """`step.run = ...` on `step = Step()`: the call runs the attribute, not `Step.run`."""
    run = "\nmodel = nn.Linear(4, 1)\nstep = Step()\nstep.run = print\nloss = model(torch.randn(8, 4)).pow(2).mean()\nstep.run(loss)\nloss.backward()"
    source = STEP.replace("SUBCLASS", "").replace("RUN", run)
    assert _runs(source).returncode == 0
    assert "GF001" not in _codes(source)


@pytest.mark.parametrize(("decorator", "fixed"), [("@functools.lru_cache(maxsize=None)\n", False), ("@torch.no_grad()\n", True)])
def test_a_method_decorator_gradfix_does_not_model_hides_the_method(decorator, fixed):
    """`lru_cache` returns the first call's result to every later call; `no_grad` is modelled."""
    default = f"    {decorator}    def extra_loss(self, kept):\n        return 0.0\n"
    source = "import functools\n" + _trainer(default=default, subclass="", trained="Trainer")
    assert any(f.code == "GF009" for f in _report(source).fixed) == fixed
