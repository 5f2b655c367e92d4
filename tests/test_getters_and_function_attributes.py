"""Reading an attribute may run code or read what an earlier call left: a getter of the file's classes
(``@property``, ``@cached_property``) runs when its name is read, and an attribute of an object of the
module (a function's ``features.value``) outlives every call that sets it. Where such a value may be a
graph an earlier step built, the next backward walks it again and needs the ``retain_graph=True`` that
kept it: GF009 does not drop it safely. Each case is asked both ways (``retain_graph_drops``)."""

import pytest

from .retain_graph_drops import fixed_safely, runs_with_it_dropped

# Each step's loss reads `FEATURES`, which is either a graph built once and handed to every step (the
# retain_graph=True is needed) or one built by the reading itself (it is not).
PROGRAM = """\
import functools
import torch
from torch import nn

torch.manual_seed(0)
enc = nn.Linear(4, 3)
head = nn.Linear(3, 1)
opt = torch.optim.SGD(head.parameters(), lr=0.1)
x = torch.randn(5, 4)

HELPERS

def train_step():
    opt.zero_grad()
    loss = head(FEATURES).pow(2).mean()
    loss.backward(retain_graph=True)
    opt.step()

for step in range(3):
    IN_THE_LOOP
"""

CACHING_PROPERTY = """\
class Holder:
    _f = None

    @property
    def f(self):
        if Holder._f is None:
            Holder._f = torch.tanh(enc(x))
        return Holder._f

holder = Holder()
"""
FRESH_PROPERTY = """\
class Holder:
    @property
    def f(self):
        return torch.tanh(enc(x))

holder = Holder()
"""
CACHED_PROPERTY = """\
class Holder:
    @functools.cached_property
    def f(self):
        return torch.tanh(enc(x))

holder = Holder()
"""
# The variant whose decorator gradfix cannot read: an alias of cached_property, over a body that builds the
# graph afresh (what `@property` over the same body would drop safely).
ALIASED_CACHED_PROPERTY = """\
from functools import cached_property as memo


class Holder:
    @memo
    def f(self):
        return torch.tanh(enc(x))

holder = Holder()
"""
CACHING_FUNCTION = """\
def features():
    if not hasattr(features, "value"):
        features.value = torch.tanh(enc(x))
    return features.value
"""
FRESH_FUNCTION = """\
def features():
    return torch.tanh(enc(x))
"""
# The loss written in the loop itself, or in the function the loop calls.
IN_THE_LOOP = "opt.zero_grad()\n    loss = head(FEATURES).pow(2).mean()\n    loss.backward(retain_graph=True)\n    opt.step()"
CALLED = "train_step()"


def _program(helpers: str, features: str, loop: str) -> str:
    return PROGRAM.replace("HELPERS\n", helpers).replace("IN_THE_LOOP", loop).replace("FEATURES", features)


@pytest.mark.parametrize("loop", [IN_THE_LOOP, CALLED], ids=["loop", "function"])
@pytest.mark.parametrize(
    ("helpers", "features", "kept"),
    [
        (CACHING_PROPERTY, "holder.f", True),
        (CACHED_PROPERTY, "holder.f", True),
        (FRESH_PROPERTY, "holder.f", False),  # the variant: the getter builds the graph each time it runs
        (ALIASED_CACHED_PROPERTY, "holder.f", True),
        (CACHING_FUNCTION, "features()", True),
        (FRESH_FUNCTION, "features()", False),
    ],
    ids=["caching-property", "cached_property", "fresh-property", "aliased-cached_property", "function-attribute", "fresh-function"],
)
def test_retain_graph_is_dropped_safely_only_where_what_is_read_is_built_by_the_read(helpers, features, kept, loop):
    source = _program(helpers, features, loop)
    assert runs_with_it_dropped(source, "loss.backward(retain_graph=True)") is not kept
    assert fixed_safely(source) is not kept
